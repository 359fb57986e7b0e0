"""The search's cross-validation fits with the model's own solver settings against the search's.

For each set, the model ``model="auto"`` gives (:func:`dmlr.api.auto_model`) on the
training split is searched by :func:`dmlr.tuning.search` three times, one run after
the other, in this process only (``n_jobs=1``, so no process start is timed):

* ``own``: ``tol=None, solver=None``, every fit with the model's own ``tol`` and
  ``solver`` (the adaptive APG);
* ``tol``: the search's :data:`dmlr.tuning.SEARCH_TOL`, the model's step rule;
* ``tol+lbfgs``: the search's defaults, also :data:`dmlr.tuning.SEARCH_SOLVER`.

Per run the table prints the search's seconds and their ratio to ``own``'s, the chosen
value, the fits, the oracle calls summed over the fits (iterations; they do not depend
on the machine), and the largest difference in fold-mean validation score from
``own``'s over the values both fitted.

Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/search_settings.py [--sets a,b]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from auto_vs_peers import in_memory, prepared_store

from dmlr.api import auto_model
from dmlr.tuning import SEARCH_SOLVER, SEARCH_TOL, search

SETS = ("emotions_mat", "scene", "yeast", "enron", "tmc2007_500")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--workdir", default="/tmp/dmlr-auto-vs-peers")
    a = p.parse_args(argv)
    settings = {
        "own": dict(tol=None, solver=None),
        "tol": dict(tol=SEARCH_TOL, solver=None),
        "tol+lbfgs": dict(tol=SEARCH_TOL, solver=SEARCH_SOLVER),
    }
    print(
        f"{'set':<14} {'model':<24} {'settings':>10} {'seconds':>8} {'ratio':>6} {'chosen':>9} {'fits':>5} "
        f"{'iterations':>10} {'max |d score|':>13}"
    )
    for name in [s.strip() for s in a.sets.split(",") if s.strip()]:
        X, Y = in_memory(prepared_store(name, Path(a.workdir)), "train")
        est = auto_model(X)
        model = f"{type(est).__name__}(tol={est.tol:g})"
        first = None
        for label, kw in settings.items():
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = search(est, X, Y, n_jobs=1, **kw)
            seconds = time.perf_counter() - t
            scores = {x["value"]: x["mean_score"] for x in r.results}
            iters = sum(x["mean_n_iter"] * r.n_splits for x in r.results)
            if first is None:
                first = (seconds, scores)
            common = set(scores) & set(first[1])
            diff = max(abs(scores[v] - first[1][v]) for v in common)
            print(
                f"{name:<14} {model:<24} {label:>10} {seconds:>8.2f} "
                f"{seconds / first[0]:>6.2f} {r.best_params['alpha']:>9.4g} {r.n_fits:>5d} {iters:>10.0f} "
                f"{diff:>13.2e}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
