"""``dmlr.fit``'s defaults at a few hundred training rows, beside a tuned logistic regression.

For each set and size n (100, 200, 400), ``--seeds`` seeded subsamples (10) of n rows of the
official training split (a set's test split whole; mediamill_discretized's, whose 120
features are nominal, one-hot to 360, cut to its first 3,000 rows): dmlr's defaults
(``dmlr.fit``, its search included) and the tuned one-vs-rest logistic regression of
``benchmarks/auto_vs_peers.py`` (C by 5-fold GridSearchCV on the same rows, the same
scaling), both fitted on the subsample and scored on the test rows. The table gives
the mean over the subsamples of ranking loss and average precision, dmlr's relative
difference (negative ranking loss and positive average precision: dmlr better), its
standard error (``se``: of the subsamples' paired differences, each relative to the
regression's mean), and whether dmlr is within 1% of the regression on both (the goal).
At a few hundred rows one subsample's difference moves by several percent from the
next, so a handful of seeds cannot tell a 1% difference. Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/small_data.py [--sets a,b] [--sizes 100,200,400] \\
        [--seeds 10] [--docs]

``--docs`` also writes the table to ``docs/benchmarks/small_data.txt``.
"""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
from _common import Table, names, parser, peer_arrays, prepared_store, stores, tee, work_folder
from auto_vs_peers import run_dmlr, run_peer

from dmlr.data.store import write_dataset

SETS = ("emotions", "yeast", "scene", "mediamill_discretized")
SIZES = (100, 200, 400)
SEEDS = 10
#: Test rows kept of a large test split.
MAX_TEST_ROWS = 3000


def subsample_store(store: Path, n: int, seed: int, workdir: Path) -> Path:
    """A store of ``n`` seeded training rows of ``store`` and its test split (at most
    :data:`MAX_TEST_ROWS` rows)."""
    dst = workdir / f"{store.stem}_n{n}_s{seed}.zarr"
    if dst.exists():
        return dst
    X, Y = peer_arrays(store, "train")
    X_te, Y_te = peer_arrays(store, "test")
    rows = np.sort(np.random.default_rng(seed).choice(X.shape[0], size=n, replace=False))
    X_te, Y_te = X_te[:MAX_TEST_ROWS], Y_te[:MAX_TEST_ROWS]
    import scipy.sparse as sp

    stack = sp.vstack if sp.issparse(X) else np.vstack
    X_all = stack([X[rows], X_te])
    Y_all = np.vstack([Y[rows], Y_te]).astype(np.int8)
    splits = {"train": np.arange(n), "test": np.arange(n, n + X_te.shape[0])}
    return write_dataset(dst, sp.csr_matrix(X_all) if sp.issparse(X_all) else X_all, Y_all, splits=splits)


def relative_difference(ours, theirs) -> tuple[float, float]:
    """(mean(ours) - mean(theirs)) / mean(theirs) over paired subsamples, and its standard
    error: that of the paired differences, over the same denominator (0 for one subsample)."""
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    scale = theirs.mean()
    se = (ours - theirs).std(ddof=1) / np.sqrt(len(ours)) if len(ours) > 1 else 0.0
    return float((ours.mean() - scale) / scale), float(se / scale)


def _models(models: list[str]) -> str:
    """The subsamples' models, each with its count: ``KernelRBRL(alpha=0.506) x7; ...``."""
    return "; ".join(f"{m} x{k}" if k > 1 else m for m, k in Counter(models).most_common())


def main(argv=None) -> int:
    p = parser(__doc__, sets=SETS, workdir="/tmp/dmlr-small-data", docs="small_data")
    p.add_argument("--sizes", type=names, default=",".join(map(str, SIZES)))
    p.add_argument("--seeds", type=int, default=SEEDS, help="subsamples per set and size (seeds 0, 1, ...)")
    a = p.parse_args(argv)
    with tee("small_data", a.docs):
        return _run(a)


def _run(a) -> int:
    workdir = work_folder(a.workdir)
    seeds = range(a.seeds)
    print(f"# means over seeds 0 to {a.seeds - 1}")
    table = Table(
        "set:<22; n:>4; dmlr RL:>8.4f; LR RL:>8.4f; dmlr AP:>8.4f; LR AP:>8.4f; RL diff:>8; se:>5; AP diff:>8; se:>5; "
        "within 1%: <9; dmlr's models: "
    )
    table.print_header()
    verdicts = []
    for name, store in stores(a.sets, workdir, prepared_store):
        n_train = peer_arrays(store, "train")[0].shape[0]
        for n in map(int, a.sizes):
            if n >= n_train:
                print(f"{name:<22} {n:>4} skipped: the training split has {n_train} rows")
                continue
            d_rl, d_ap, p_rl, p_ap, models = [], [], [], [], []
            for seed in seeds:
                sub = subsample_store(store, n, seed, workdir)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    d, _, _, model_name, choice, scaling = run_dmlr(sub)
                    lr, _, _, _ = run_peer(sub, scaling)
                d_rl.append(d["ranking_loss"])
                d_ap.append(d["average_precision"])
                p_rl.append(lr["ranking_loss"])
                p_ap.append(lr["average_precision"])
                models.append(f"{model_name}({choice})")
            rl, rl_se = relative_difference(d_rl, p_rl)
            ap, ap_se = relative_difference(d_ap, p_ap)
            ok = rl <= 0.01 and ap >= -0.01
            verdicts.append(ok)
            means = (np.mean(d_rl), np.mean(p_rl), np.mean(d_ap), np.mean(p_ap))
            cells = (f"{100 * rl:+.1f}%", f"{100 * rl_se:.1f}%", f"{100 * ap:+.1f}%", f"{100 * ap_se:.1f}%")
            table.row(name, n, *means, *cells, "yes" if ok else "NO ", _models(models))
    print("")
    print(f"dmlr within 1% of the tuned logistic regression on both: {sum(verdicts)} of {len(verdicts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
