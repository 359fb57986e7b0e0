"""Rank-SVM's and MMP's labels at a score of 0 against their learned thresholds.

The pairwise losses constrain score differences only, so 0 is not a
calibrated threshold. ``threshold="auto"`` (the default) learns one per label
on the training rows (:func:`dmlr.metrics.label_thresholds`); the column
``threshold_`` gives the largest of them, the common one.
For each set (official train/test splits) and model, one fit with the
defaults; the test split's micro- and macro-F1 of the labels at 0 and at the
learned ``threshold_``, from the same scores. Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/thresholds.py [--sets a,b] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import dmlr
from dmlr.datasets import staged_store
from dmlr.metrics import multilabel_metrics, predict_from_scores

SETS = ("emotions", "yeast", "scene", "enron", "medical")
MODELS = ("ranksvm", "mmp")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--workdir", default="/tmp/dmlr-thresholds")
    a = p.parse_args(argv)
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    print(
        f"{'set':<10} {'model':<8} {'threshold_':>10} {'micro-F1 at 0':>14} {'learned':>8} "
        f"{'macro-F1 at 0':>14} {'learned':>8}"
    )
    for name in [s.strip() for s in a.sets.split(",") if s.strip()]:
        try:
            store = staged_store(name, workdir)
        except FileNotFoundError as e:
            print(f"{name:<10} skipped: {e}")
            continue
        X_te, Y_te = (x.compute() for x in dmlr.open_dataset(store).arrays("test"))
        for model_name in MODELS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = dmlr.fit(store, model_name)
            S = model.decision_function(X_te)
            at = {}
            for rule, t in (("zero", 0.0), ("learned", model.threshold_)):
                at[rule] = multilabel_metrics(Y_te, S, predict_from_scores(S, t), metrics=["f1_micro", "f1_macro"])
            print(
                f"{name:<10} {model_name:<8} {model.threshold_.max():>10.4g} {at['zero']['f1_micro']:>14.4f} "
                f"{at['learned']['f1_micro']:>8.4f} {at['zero']['f1_macro']:>14.4f} {at['learned']['f1_macro']:>8.4f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
