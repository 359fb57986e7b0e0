"""Warm starts at a rank-deficient point along a search path: L-BFGS first, or APG at once.

Along a search path each fit starts from the previous value's fold model. Where that model
is rank-deficient (APG finished it at the nuclear norm's kink), one rule starts the next fit
with the adaptive APG at once; dmlr's (:func:`dmlr.solvers.lbfgs.lbfgs_then_apg`) does so only
where more than :data:`~dmlr.solvers.lbfgs.APG_FIRST_KINK_FRACTION` of the point's directions
sit at the kink, and otherwise runs L-BFGS from it as from any point, which hands the kink to
APG at the end.

For each set, the model ``model="auto"`` gives (:func:`dmlr.api.auto_model`) on the training
split is searched by :func:`dmlr.tuning.search` with its defaults (the units on this process's
threads, as ``dmlr.fit`` runs them without a cluster), once under each rule, in turns:

* ``apg-first``: a warm start with any direction at the kink (its smallest singular value at
  most :data:`dmlr.solvers.lbfgs.CONVERGED_MIN_RELATIVE` of its largest) skips L-BFGS;
* ``dmlr``: dmlr's rule.

Per run the table prints the search's seconds and their ratio to ``apg-first``'s, the chosen
value, the fits, the oracle calls summed over the fits (iterations; they do not depend on
the machine), the best mean validation score and the largest difference in fold-mean
validation score from ``apg-first``'s over the values both fitted.

Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/warm_start_solver.py [--sets a,b] [--docs]
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
from _common import Table, parser, prepared_store, tee, timed, work_folder

import dmlr
import dmlr.solvers.lbfgs  # noqa: F401  (the module: dmlr.solvers' function of the same name hides it)
from dmlr.api import auto_model
from dmlr.datasets import synthetic_store
from dmlr.paths import materialize
from dmlr.solvers.result import SolverResult
from dmlr.tuning import search

SETS = ("enron", "medical", "bibtex", "corel5k", "mediamill_discretized", "delicious", "bookmarks")
LBFGS = sys.modules["dmlr.solvers.lbfgs"]


def apg_first(real):
    """``lbfgs`` under the other rule: at a rank-deficient warm start, no L-BFGS iteration (an
    unconverged empty run, which :func:`~dmlr.solvers.lbfgs.lbfgs_then_apg` hands to APG)."""

    def run(oracle, x0, *, nuclear, rows, state=None, **kwargs):
        if state is None and nuclear > 0 and np.any(x0):
            if LBFGS.kink_fraction(x0[rows]) > 0:
                return SolverResult(x=np.array(x0, dtype=np.float64))
        return real(oracle, x0, nuclear=nuclear, rows=rows, state=state, **kwargs)

    return run


def training_arrays(name: str, workdir) -> tuple:
    store = synthetic_store("bookmarks", workdir, seed=0) if name == "bookmarks" else prepared_store(name, workdir)
    return materialize(*dmlr.open_dataset(store).arrays("train"))


def main(argv=None) -> int:
    p = parser(__doc__, sets=SETS, workdir="/tmp/dmlr-warm-start-solver")
    p.add_argument("--docs", action="store_true", help="also write the table to docs/benchmarks/")
    a = p.parse_args(argv)
    with tee("warm_start_solver", a.docs):
        return _run(a)


def _run(a) -> int:
    real = LBFGS.lbfgs
    rules = {"apg-first": apg_first(real), "dmlr": real}
    table = Table(
        "set:<22; rows:>6d; rule:>10; seconds:>8.2f; ratio:>6.2f; chosen:>9.4g; fits:>5d; iterations:>10.0f; "
        "best score:>10.5f; max |d score|:>13.2e"
    )
    table.print_header()
    for name in a.sets:
        X, Y = training_arrays(name, work_folder(a.workdir))
        est = auto_model(X)
        first = None
        for label, solver in rules.items():
            LBFGS.lbfgs = solver
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r, seconds = timed(search, est, X, Y, params=["alpha"])
            finally:
                LBFGS.lbfgs = real
            scores = {(x["n_rows"], x["value"]): x["mean_score"] for x in r.results}
            iters = sum(x["mean_n_iter"] * r.n_splits for x in r.results)
            if first is None:
                first = (seconds, scores)
            common = set(scores) & set(first[1])
            diff = max(abs(scores[k] - first[1][k]) for k in common)
            best = min(s for s in scores.values()) if not r.greater_is_better else max(scores.values())
            table.row(
                name,
                X.shape[0],
                label,
                seconds,
                seconds / first[0],
                r.best_params["alpha"],
                r.n_fits,
                iters,
                best,
                diff,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
