"""Label rules on the same scores: dmlr's default model's labels by each rule, against the regression's.

For each set of ``benchmarks/auto_vs_peers.py`` (the same stores and splits), one
``dmlr.fit(store)`` with its defaults; its scores on the training and the test rows;
then each rule below turns them into the test rows' labels, every rule from the same
scores (the rules that learn something learn it on the training rows):

* ``auto``: dmlr's default, :func:`dmlr.metrics.label_thresholds` (per label, the lower of
  its own F1-best threshold and the common micro-F1-best one, where the label's own F1
  reaches :data:`dmlr.metrics.LABEL_F1_MIN`);
* ``zero``: score > 0 (the RBRL paper's rule);
* ``common``: one threshold for every label, the micro-F1-best
  (:func:`dmlr.metrics.micro_f1_threshold`);
* ``own``: each label's own F1-best threshold alone (SCut, Yang 2001), the common one where
  ``auto`` falls back to it;
* ``rcut``: each row's k highest-scoring labels, k the training rows' mean label count
  rounded (RCut);
* ``mcut``: each row's labels above the largest gap between its sorted scores (MCut).

All but ``mcut`` give every row at least one label (:func:`dmlr.metrics.predict_from_scores`;
RCut's k is at least 1). The table gives each rule's test micro- and macro-F1, and whether both
reach the better of the tuned logistic regression's two rules (its probabilities above 0.5, and
per-label thresholds tuned on a held-out quarter), read from ``--reference``, a table written by
``auto_vs_peers.py`` (the regression's fits are deterministic; rerunning them here would take
most of the run); then, per rule, on how many sets both do, and its mean change against
``auto``. Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/label_rules.py [--sets a,b] [--workdir DIR] [--docs]
"""

from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

import numpy as np
from _common import DOCS_DIR, ROOT, Table, arrays, parser, prepared_store, stores, tee, work_folder
from auto_vs_peers import SETS

import dmlr
from dmlr.metrics import (
    _histogram_thresholds,
    label_thresholds,
    micro_f1_threshold,
    multilabel_metrics,
    predict_from_scores,
)

RULES = ("auto", "zero", "common", "own", "rcut", "mcut")
F1 = ("f1_micro", "f1_macro")


def regression_reference(path: Path) -> dict[str, tuple[float, float]]:
    """Per set, the better of the regression's two rules' micro-F1 and, separately, macro-F1,
    from an ``auto_vs_peers.py`` table (its ``LR@0.5`` and ``LR tuned`` rows)."""
    number = r"\s+(-?[\d.]+)"
    row = re.compile(r"^(\S+)\s+(?:LR@0\.5|LR tuned)" + number * 7)
    best: dict[str, tuple[float, float]] = {}
    for line in path.read_text().splitlines():
        m = row.match(line)
        if m:
            micro, macro = float(m.group(7)), float(m.group(8))  # the table's micro-F1 and macro-F1 columns
            old = best.get(m.group(1), (-np.inf, -np.inf))
            best[m.group(1)] = (max(old[0], micro), max(old[1], macro))
    return best


def top_k_labels(S: np.ndarray, k: int) -> np.ndarray:
    """RCut: each row's k highest-scoring labels, int8 (n, l)."""
    P = np.zeros(S.shape, dtype=np.int8)
    np.put_along_axis(P, np.argsort(-S, axis=1, kind="stable")[:, :k], 1, axis=1)
    return P


def largest_gap_labels(S: np.ndarray) -> np.ndarray:
    """MCut: each row's labels above the largest gap between its sorted scores, int8 (n, l)."""
    ordered = -np.sort(-S, axis=1)
    gap = np.argmax(ordered[:, :-1] - ordered[:, 1:], axis=1)
    return (S >= ordered[np.arange(len(S)), gap][:, None]).astype(np.int8)


def rule_labels(rule: str, S_train: np.ndarray, Y_train: np.ndarray, S_test: np.ndarray) -> np.ndarray:
    """The test rows' labels by ``rule`` (see the module), learned on the training rows' scores
    (for ``auto``, the thresholds the fit learned: :func:`main` checks them against ``predict``)."""
    if rule == "auto":
        return predict_from_scores(S_test, label_thresholds(Y_train, S_train))
    if rule == "zero":
        return predict_from_scores(S_test, 0.0)
    if rule == "common":
        return predict_from_scores(S_test, micro_f1_threshold(Y_train, S_train))
    if rule == "own":
        common, own = _histogram_thresholds(Y_train, S_train)
        return predict_from_scores(S_test, np.where(np.isfinite(own), own, common))
    if rule == "rcut":
        return top_k_labels(S_test, max(1, int(round(float(Y_train.sum(axis=1).mean())))))
    if rule == "mcut":
        return largest_gap_labels(S_test)
    raise ValueError(f"unknown rule {rule!r}")


def main(argv=None) -> int:
    p = parser(__doc__, sets=SETS, workdir="/tmp/dmlr-auto-vs-peers", docs="label_rules")
    p.add_argument("--reference", default=str(DOCS_DIR / "auto_vs_peers.txt"))
    a = p.parse_args(argv)
    path = Path(a.reference).resolve()
    reference = regression_reference(path)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    results: dict[str, dict[str, tuple[float, float]]] = {}
    with tee("label_rules", a.docs):
        print(f"# LR: the better of the regression's two rules, micro-F1 and macro-F1 apart, from {shown}")
        table = Table(
            "set:<22; rule:<6; micro-F1:>9.4f; macro-F1:>9.4f; LR micro:>9.4f; LR macro:>9.4f; both reached: >13"
        )
        table.print_header()
        for name, store in stores(a.sets, work_folder(a.workdir), prepared_store):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = dmlr.fit(store, verbose=0)
            (X_tr, Y_tr), (X_te, Y_te) = arrays(store, "train"), arrays(store, "test")
            S_tr, S_te = np.asarray(model.decision_function(X_tr)), np.asarray(model.decision_function(X_te))
            labels = {rule: rule_labels(rule, S_tr, Y_tr, S_te) for rule in RULES}
            if not np.array_equal(labels["auto"], model.predict(X_te)):
                raise RuntimeError(f"{name}: the thresholds learned here are not the model's")
            lr = reference.get(name, (np.nan, np.nan))
            results[name] = {}
            for rule in RULES:
                m = multilabel_metrics(Y_te, S_te, labels[rule], metrics=list(F1))
                f1 = results[name][rule] = (m["f1_micro"], m["f1_macro"])
                reached = "n/a" if name not in reference else ("yes" if f1[0] >= lr[0] and f1[1] >= lr[1] else "no")
                table.row(name, rule, *f1, *lr, reached)
        print()
        summary = Table("rule:<6; both F1s at LR:>16; mean change vs auto, micro-F1:>+28.4f; macro-F1:>+9.4f")
        summary.print_header()
        compared = [n for n in results if n in reference]
        for rule in RULES:
            won = [n for n in compared if all(f >= r for f, r in zip(results[n][rule], reference[n]))]
            change = np.mean([np.subtract(results[n][rule], results[n]["auto"]) for n in results], axis=0)
            summary.row(rule, f"{len(won)} of {len(compared)}", *change)
    return 0


if __name__ == "__main__":
    sys.exit(main())
