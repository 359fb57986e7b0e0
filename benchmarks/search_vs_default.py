"""``dmlr.fit`` with a model's fixed defaults against ``dmlr.fit`` searching its regularization.

For each set (the official MULAN train/test splits of the staged small sets), the model is fitted
twice in this process, one after the other: ``dmlr.fit(store, model, search=False)`` (the class
defaults) and ``dmlr.fit(store, model)`` (the default: the model's search space, its class's
``_search_space``, searched by cross-validation, then refitted); each is scored on the test split.
Seconds are whole ``dmlr.fit`` calls, the search included.

With ``--search NAMES`` (comma-separated), the two fits are the default search and
``dmlr.fit(store, model, search=NAMES)``, which also searches the parameters searched only on
request (RBRL's ``alpha_nuclear``). ``--split-stores`` takes each set's store as
``benchmarks/auto_vs_peers.py`` does (a seeded split where the files give none). ``--docs``
writes ``docs/benchmarks/search_vs_default.txt``, or with ``--search`` ``search_<names>.txt``.

Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/search_vs_default.py --model ranksvm \\
        [--sets emotions,yeast,scene,enron,medical] [--workdir DIR]
    DMLR_DATA_DIR=../shared/datasets python benchmarks/search_vs_default.py --model auto \\
        --search alpha,alpha_nuclear --split-stores --sets enron,corel5k,bibtex,delicious [--docs]
"""

from __future__ import annotations

import warnings

from _common import Table, names, parser, prepared_store, stores, tee, timed, work_folder

import dmlr


def main(argv=None) -> None:
    ap = parser(
        __doc__, sets=("emotions", "yeast", "scene", "enron", "medical"), workdir=None, docs="search_vs_default"
    )
    ap.add_argument("--model", default="ranksvm")
    ap.add_argument("--search", type=names, help="parameters the second fit searches (default: no search vs search)")
    ap.add_argument("--split-stores", action="store_true", help="stores as benchmarks/auto_vs_peers.py makes them")
    args = ap.parse_args(argv)
    workdir = work_folder(args.workdir, prefix="dmlr_svd_")
    fits = [("defaults", False), ("search", None)]
    if args.search:
        fits = [("search", None), ("search " + "+".join(args.search), list(args.search))]
    with tee("search_" + "_".join(args.search) if args.search else "search_vs_default", args.docs):
        table = Table(
            "set; fit; searched values; ranking loss:.4f; average precision:.4f; P@1:.4f; micro-F1:.4f; "
            "macro-F1:.4f; seconds:.1f",
            markdown=True,
        )
        table.print_header()
        for name, store in stores(args.sets, workdir, prepared_store if args.split_stores else None):
            for fit, search in fits:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model, seconds = timed(dmlr.fit, store, args.model, search=search, verbose=0)
                m = dmlr.evaluate(model, store, split="test")
                chosen = ", ".join(f"{k}={v:.3g}" for k, v in getattr(model, "best_params_", {}).items()) or "-"
                table.row(
                    name,
                    fit,
                    chosen,
                    m["ranking_loss"],
                    m["average_precision"],
                    m["precision_at_1"],
                    m["f1_micro"],
                    m["f1_macro"],
                    seconds,
                )


if __name__ == "__main__":
    main()
