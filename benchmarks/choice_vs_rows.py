"""How the cross-validated choice of ``alpha`` moves with the training rows, and what it costs on test.

A staged search (``dmlr.tuning.search`` on 10,000 training rows or more) chooses
``alpha`` on 2 folds of a subsample of a quarter of the training rows and carries
that value, as it is, to the final fit on all of them
(``docs/auto_fit.md``, "Stages over rows"). That is right where the best
(absolute) ``alpha`` does not move with the rows; ``benchmarks/staged_vs_full.py``
measures what the stages give up where it does. This script shows the drift itself.

For each set (official train/test split; the Bookmarks shape is dmlr's synthetic
preset), on nested seeded subsamples of the training split (the staged search's own:
the first ``m`` rows of ``default_rng(0).permutation(n)``), of 4,096 rows, of the
last stage's size (``dmlr.tuning.stage_rows``), of half the rows and of all of
them:

* the full path of ``alpha`` in quarter decades from 10**1.5 down to 10**-0.5,
  warm-started, on 2 folds (:func:`dmlr.model_selection.grid_search_cv`, the model
  ``model="auto"`` picks, the search's tolerance and scoring);
* the value with the best mean validation score, and the vertex of the parabola
  through it and its neighbours (the rule the staged search applies to its last
  stage);
* ``p``: the slope of log(vertex) against log(rows) from the previous size
  (``alpha ~ rows**p``; carrying the value as it is assumes 0);
* the vertex refitted on the whole training split and scored on the test split.

Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/choice_vs_rows.py [--sets a,b] [--docs]

``--docs`` also writes the table to ``docs/benchmarks/choice_vs_rows.txt``.
"""

from __future__ import annotations

import math

import numpy as np
from _common import Table, parser, stores, tee, work_folder
from time_to_model import store_of

import dmlr
from dmlr import tuning
from dmlr.api import auto_model
from dmlr.model_selection import grid_search_cv
from dmlr.paths import materialize

SETS = ("tmc2007_500", "mediamill_discretized", "delicious", "bookmarks")
METRICS = ("ranking_loss", "average_precision")
#: The path's step in log10 of the value, a quarter decade (the staged search's last-stage step).
STEP = 0.25
#: log10 of the path's values, from the largest down.
EXPONENTS = np.arange(1.5, -0.5 - 1e-9, -STEP)


def sizes_of(n: int) -> list[int]:
    """The subsample sizes: 4,096, the last stage's, half and all of ``n`` (distinct, sorted)."""
    return sorted({min(n, tuning.HALVING_FIRST_ROWS), tuning.stage_rows(n)[-1], n // 2, n})


def choice_at(est, X, Y, m: int, scoring: str) -> tuple[float, float, float]:
    """(best grid value, vertex, best mean validation score) on the first ``m`` rows of the
    search's seeded permutation, 2 folds."""
    n = X.shape[0]
    rows = np.sort(np.random.default_rng(0).permutation(n)[:m])
    grid = {"alpha": [float(10.0**e) for e in EXPONENTS]}
    found = grid_search_cv(est, X[rows], Y[rows], grid, cv=2, seed=0, scoring=scoring, refit=False)
    curve = {r["params"]["alpha"]: r["mean_score"] for r in found.results}
    best = found.best_params["alpha"]
    return best, tuning._vertex(curve, best, STEP, scoring), curve[best]


def main(argv=None) -> int:
    p = parser(__doc__, sets=SETS, workdir=None, docs="choice_vs_rows")
    args = p.parse_args(argv)
    workdir = work_folder(args.workdir, prefix="choice_vs_rows-")
    table = Table(
        "set:<22; rows:>7d; per fold:>8d; best:>7.3g; vertex:>7.3g; validation:>10.5f; p:>6; "
        "test RL:>8.5f; test AP:>8.5f"
    )
    with tee("choice_vs_rows", args.docs):
        table.print_header()
        for name, store in stores(args.sets, workdir, store_of):
            X, Y = materialize(*dmlr.open_dataset(store).arrays("train"))
            est = auto_model(X).set_params(tol=tuning.SEARCH_TOL)
            scoring = tuning.default_scoring(Y)
            previous = None
            for m in sizes_of(X.shape[0]):
                best, vertex, score = choice_at(est, X, Y, m, scoring)
                slope = "" if previous is None else f"{math.log(vertex / previous[1]) / math.log(m / previous[0]):+.2f}"
                model = dmlr.fit(store, auto_model(X), verbose=0, alpha=vertex)
                test = dmlr.evaluate(model, store, split="test", metrics=list(METRICS))
                table.row(name, m, m // 2, best, vertex, score, slope, *(test[k] for k in METRICS))
                previous = (m, vertex)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
