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

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import dmlr
from dmlr.datasets import staged_store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="ranksvm")
    ap.add_argument("--sets", default="emotions,yeast,scene,enron,medical")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="dmlr_svd_"))
    print("| set | fit | searched values | ranking loss | average precision | micro-F1 | seconds |")
    print("|---|---|---|---|---|---|---|")
    for name in args.sets.split(","):
        store = staged_store(name, workdir)
        for search in (False, True):
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = dmlr.fit(store, args.model, search=None if search else False)
            seconds = time.perf_counter() - start
            m = dmlr.evaluate(model, store, split="test")
            chosen = ", ".join(f"{k}={v:.3g}" for k, v in getattr(model, "best_params_", {}).items()) or "-"
            print(
                f"| {name} | {'search' if search else 'defaults'} | {chosen} | {m['ranking_loss']:.4f} "
                f"| {m['average_precision']:.4f} | {m['f1_micro']:.4f} | {seconds:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
