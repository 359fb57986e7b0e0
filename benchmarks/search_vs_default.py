"""``dmlr.fit`` with a model's fixed defaults against ``dmlr.fit`` searching its regularization.

For each set (the official MULAN train/test splits of the staged small sets), the model is fitted
twice in this process, one after the other: ``dmlr.fit(store, model, search=False)`` (the class
defaults) and ``dmlr.fit(store, model)`` (the default: the model's search space, its class's
``_search_space``, searched by cross-validation, then refitted); each is scored on the test split.
Seconds are whole ``dmlr.fit`` calls, the search included.

Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/search_vs_default.py --model ranksvm \\
        [--sets emotions,yeast,scene,enron,medical] [--workdir DIR]
"""

from __future__ import annotations

import warnings

from _common import Table, parser, timed, work_folder

import dmlr
from dmlr.datasets import staged_store


def main(argv=None) -> None:
    ap = parser(__doc__, sets=("emotions", "yeast", "scene", "enron", "medical"), workdir=None)
    ap.add_argument("--model", default="ranksvm")
    args = ap.parse_args(argv)
    workdir = work_folder(args.workdir, prefix="dmlr_svd_")
    table = Table(
        "set; fit; searched values; ranking loss:.4f; average precision:.4f; micro-F1:.4f; seconds:.1f", markdown=True
    )
    table.print_header()
    for name in args.sets:
        store = staged_store(name, workdir)
        for search in (False, True):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, seconds = timed(dmlr.fit, store, args.model, search=None if search else False)
            m = dmlr.evaluate(model, store, split="test")
            chosen = ", ".join(f"{k}={v:.3g}" for k, v in getattr(model, "best_params_", {}).items()) or "-"
            fit = "search" if search else "defaults"
            table.row(name, fit, chosen, m["ranking_loss"], m["average_precision"], m["f1_micro"], seconds)


if __name__ == "__main__":
    main()
