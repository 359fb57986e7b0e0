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

import sys
import warnings

import numpy as np
from _common import Table, parser, prepared_store, stores, tee, work_folder
from auto_vs_peers import SETS

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
    sets = [s for s in SETS if s != "mediamill_discretized"]
    a = parser(__doc__, sets=sets, workdir="/tmp/dmlr-auto-vs-peers", docs="choice_rule").parse_args(argv)
    warnings.simplefilter("ignore")
    table = Table("set:<22; rule:<7; alpha:>9.3g; CV rank loss:>12.5f; test rank loss:>14.4f; test avg prec:>13.4f")
    with tee("choice_rule", a.docs):
        table.print_header()
        for name, store in stores(a.sets, work_folder(a.workdir), prepared_store):
            model = dmlr.fit(store)
            cv, n_splits, best = model.cv_results_, model.search_.n_splits, model.best_params_["alpha"]
            tested = {best: dmlr.evaluate(model, store, metrics=METRICS)}
            for rule, fraction in RULES:
                value = rule_choice(cv, best, n_splits, fraction)
                if value not in tested:
                    tested[value] = dmlr.evaluate(dmlr.fit(store, alpha=value), store, metrics=METRICS)
                test, mean = tested[value], cv["mean_test_score"][cv["value"].index(value)]
                table.row(name, rule, value, mean, test["ranking_loss"], test["average_precision"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
