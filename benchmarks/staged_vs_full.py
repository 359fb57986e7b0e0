"""The staged search against the 5-fold search on all the training rows: choice, cost, test scores.

On training sets of ``dmlr.tuning.HALVING_MIN_ROWS`` rows or more, ``dmlr.fit``'s search
runs in stages over subsamples on 2 folds (``dmlr.tuning.stage_rows``); below, and with
``halving=False``, it is the full path on 5 folds of all the training rows. For each set
(official train/test splits; the Bookmarks shape is dmlr's synthetic preset), in one
process:

* staged: ``dmlr.tuning.search`` with its defaults (what ``dmlr.fit`` runs);
* 5-fold: ``dmlr.tuning.search(..., halving=False)``;

each on the model ``model="auto"`` picks, each choice refitted on the training split
(``dmlr.fit(store, **choice)``) and scored on the test split. The last columns are the
staged choice's test ranking loss and average precision relative to the 5-fold
choice's (issue 45's goal: within 0.5%). Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/staged_vs_full.py [--sets a,b] [--docs]

``--docs`` also writes the table to ``docs/benchmarks/staged_vs_full.txt``.
"""

from __future__ import annotations

import time

from _common import Table, parser, stores, tee, work_folder
from time_to_model import store_of

import dmlr
from dmlr import tuning
from dmlr.api import auto_model

SETS = ("tmc2007_500", "mediamill_discretized", "delicious", "bookmarks")
METRICS = ("ranking_loss", "average_precision", "precision_at_1")


def searched(store, halving) -> dict:
    """The search's choice on the training split, its seconds, and the refit's test scores."""
    X, Y = dmlr.open_dataset(store).arrays("train")
    est = auto_model(X)
    t = time.perf_counter()
    result = tuning.search(est, X, Y, scoring=tuning.default_scoring(Y), halving=halving)
    seconds = time.perf_counter() - t
    model = dmlr.fit(store, est, verbose=0, **result.best_params)
    scores = dmlr.evaluate(model, store, split="test", metrics=list(METRICS))
    return dict(seconds=seconds, choice=result.best_params, rows=result.n_rows, folds=result.n_splits, **scores)


def main(argv=None) -> int:
    p = parser(__doc__, sets=SETS, workdir=None, docs="staged_vs_full")
    args = p.parse_args(argv)
    workdir = work_folder(args.workdir, prefix="staged_vs_full-")
    table = Table(
        "set:<22; search:<6; folds:>5d; seconds:>8.1f; choice:>13; ranking loss:>12.5f; "
        "avg precision:>13.5f; P@1:>7.4f; RL vs 5-fold:>12; AP vs 5-fold:>12; stages (rows): <"
    )
    with tee("staged_vs_full", args.docs):
        table.print_header()
        for name, store in stores(args.sets, workdir, store_of):
            full = searched(store, False)
            staged = searched(store, "auto")
            for label, r in (("5-fold", full), ("staged", staged)):
                rel = [f"{100 * (r[m] / full[m] - 1):+.2f}%" if r is staged else "" for m in METRICS[:2]]
                choice = ", ".join(f"{k}={v:.3g}" for k, v in r["choice"].items())
                table.row(name, label, r["folds"], r["seconds"], choice, *(r[m] for m in METRICS), *rel, str(r["rows"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
