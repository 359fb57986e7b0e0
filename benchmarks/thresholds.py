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

import sys
import warnings

from _common import Table, arrays, parser, stores, work_folder

import dmlr
from dmlr.metrics import multilabel_metrics, predict_from_scores

SETS = ("emotions", "yeast", "scene", "enron", "medical")
MODELS = ("ranksvm", "mmp")


def main(argv=None) -> int:
    a = parser(__doc__, sets=SETS, workdir="/tmp/dmlr-thresholds").parse_args(argv)
    table = Table(
        "set:<10; model:<8; threshold_:>10.4g; micro-F1 at 0:>14.4f; learned:>8.4f; macro-F1 at 0:>14.4f; learned:>8.4f"
    )
    table.print_header()
    for name, store in stores(a.sets, work_folder(a.workdir), width=10):
        X_te, Y_te = arrays(store, "test", float64=False)
        for model_name in MODELS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = dmlr.fit(store, model_name)
            S = model.decision_function(X_te)
            at = {}
            for rule, t in (("zero", 0.0), ("learned", model.threshold_)):
                at[rule] = multilabel_metrics(Y_te, S, predict_from_scores(S, t), metrics=["f1_micro", "f1_macro"])
            zero, learned = at["zero"], at["learned"]
            cells = (zero["f1_micro"], learned["f1_micro"], zero["f1_macro"], learned["f1_macro"])
            table.row(name, model_name, model.threshold_.max(), *cells)
    return 0


if __name__ == "__main__":
    sys.exit(main())
