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

import sys
import warnings

from _common import Table, parser, peer_arrays, prepared_store, timed, work_folder

from dmlr.api import auto_model
from dmlr.tuning import SEARCH_SOLVER, SEARCH_TOL, search

SETS = ("emotions_mat", "scene", "yeast", "enron", "tmc2007_500")


def main(argv=None) -> int:
    a = parser(__doc__, sets=SETS, workdir="/tmp/dmlr-auto-vs-peers").parse_args(argv)
    settings = {
        "own": dict(tol=None, solver=None),
        "tol": dict(tol=SEARCH_TOL, solver=None),
        "tol+lbfgs": dict(tol=SEARCH_TOL, solver=SEARCH_SOLVER),
    }
    table = Table(
        "set:<14; model:<24; settings:>10; seconds:>8.2f; ratio:>6.2f; chosen:>9.4g; fits:>5d; iterations:>10.0f; "
        "max |d score|:>13.2e"
    )
    table.print_header()
    for name in a.sets:
        X, Y = peer_arrays(prepared_store(name, work_folder(a.workdir)), "train")
        est = auto_model(X)
        model = f"{type(est).__name__}(tol={est.tol:g})"
        first = None
        for label, kw in settings.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r, seconds = timed(search, est, X, Y, n_jobs=1, **kw)
            scores = {x["value"]: x["mean_score"] for x in r.results}
            iters = sum(x["mean_n_iter"] * r.n_splits for x in r.results)
            if first is None:
                first = (seconds, scores)
            common = set(scores) & set(first[1])
            diff = max(abs(scores[v] - first[1][v]) for v in common)
            table.row(name, model, label, seconds, seconds / first[0], r.best_params["alpha"], r.n_fits, iters, diff)
    return 0


if __name__ == "__main__":
    sys.exit(main())
