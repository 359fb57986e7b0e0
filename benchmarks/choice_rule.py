"""Which value should the search choose: the best mean validation score, or the most
regularized value within a fraction of a standard error of it?

The one-standard-error rule (Hastie, Tibshirani & Friedman, *The Elements of
Statistical Learning*, 7.10; glmnet's ``lambda.1se``) takes the most regularized
value whose mean score is within one standard error of the best mean; it is
stable where the validation curve is flat. For each set, this script runs
``dmlr.fit(store)`` (the default model and search, which chooses the best mean)
and reads its ``cv_results_``; for the values that the 0.5- and 1-standard-error
rules would have chosen instead (standard error of the best value's fold scores,
``std(ddof=1) / sqrt(folds)``), it refits with that value given explicitly (no
search) and prints the test ranking loss and average precision of all of them.
Stores and splits are ``benchmarks/auto_vs_peers.py``'s. Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/choice_rule.py [--sets a,b] [--workdir DIR] [--docs]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from auto_vs_peers import SETS, prepared_store
from docs_output import tee

import dmlr

METRICS = ["ranking_loss", "average_precision"]
RULES = (("best", None), ("0.5 SE", 0.5), ("1 SE", 1.0))


def rule_choice(cv: dict, best: float, n_splits: int, fraction: float | None) -> float:
    """The value a rule chooses from ``cv_results_`` (the ranking loss: lower is better), given
    the search's own choice ``best`` (``best_params_``, the best mean)."""
    if fraction is None:
        return best
    values, means = np.array(cv["value"]), np.array(cv["mean_test_score"])
    b = cv["value"].index(best)
    folds = np.array([cv[f"split{k}_test_score"][b] for k in range(n_splits)])
    se = folds.std(ddof=1) / np.sqrt(n_splits)
    return float(values[means <= means[b] + fraction * se].max())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default=",".join(s for s in SETS if s != "mediamill_discretized"))
    p.add_argument("--workdir", default="/tmp/dmlr-auto-vs-peers")
    p.add_argument("--docs", action="store_true", help="also write docs/benchmarks/choice_rule.txt")
    a = p.parse_args(argv)
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")
    with tee("choice_rule", a.docs):
        print(f"{'set':<22} {'rule':<7} {'alpha':>9} {'CV rank loss':>12} {'test rank loss':>14} {'test avg prec':>13}")
        for name in [s.strip() for s in a.sets.split(",") if s.strip()]:
            try:
                store = prepared_store(name, workdir)
            except FileNotFoundError as e:
                print(f"{name:<22} skipped: {e}")
                continue
            model = dmlr.fit(store)
            cv, n_splits, best = model.cv_results_, model.search_.n_splits, model.best_params_["alpha"]
            tested = {best: dmlr.evaluate(model, store, metrics=METRICS)}
            for rule, fraction in RULES:
                value = rule_choice(cv, best, n_splits, fraction)
                if value not in tested:
                    tested[value] = dmlr.evaluate(dmlr.fit(store, alpha=value), store, metrics=METRICS)
                test, mean = tested[value], cv["mean_test_score"][cv["value"].index(value)]
                print(
                    f"{name:<22} {rule:<7} {value:>9.3g} {mean:>12.5f} "
                    f"{test['ranking_loss']:>14.4f} {test['average_precision']:>13.4f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
