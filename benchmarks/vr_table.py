"""Pillai et al. (seed 003) Table I and Figs. 2-10: 10 optimizers x 3 losses x 3 data sets.

Data, as the paper's Section VII-A:

* Emotions: all 593 rows (the staged MULAN train + test), min-max scaled.
* MediaMill-7 / MediaMill-26: from ``mediamill_discretized`` (the staged
  derived version: features discretised to 3 levels, 43,851 of 43,907 rows),
  7 or 26 labels drawn at random with ``--seed``, keeping the rows with at
  least one of them (the paper's rule; it reports 3,706 and 15,687 rows for
  its draw), standard-scaled.

Every cell: ``LinearMultiLabel(loss, solver, n_epochs=5, learning_rate="1/k",
eta0=--eta0, alpha=--alpha, tol=None)`` (all epochs, as the paper) from W = 0, objective recorded before
and after each epoch (not timed). Printed: our time per cell next to Table
I's (ratio = theirs / ours) and our final objective relative to SGD's
("=" within 1 %, "+" lower, "-" higher: the paper's colour code, which
its text does not give per cell). The curves are saved as PNG when
matplotlib is installed. Also: one SGD epoch on MediaMill-26 against the
floor of one pass of ``X @ W`` (BLAS) on the same data.

Execution: ``dmlr.config_context(backend=--backend)``, with a 2-worker local
cluster's client for ``--backend dask``.

Usage::

    python benchmarks/vr_table.py [--sets emotions,mediamill7,mediamill26] [--png vr_curves.png]
        [--n-epochs 5] [--eta0 1] [--alpha 1e-4] [--backend local|dask]
"""

from __future__ import annotations

import sys

import numpy as np
from _common import parser, seconds_of, staged, work_folder

import dmlr
from dmlr.kernels.multilabel_losses import LOSSES
from dmlr.models import LinearMultiLabel
from dmlr.solvers.vr import SOLVERS

PAPER_LOSSES = LOSSES[:3]

# Table I (seconds; None: "N/A", no convergence within 12 hours)
PAPER = {
    "emotions": {
        "hamming": [0.27, 0.23, 0.23, 0.23, 1.02, 0.30, 0.23, 0.20, 0.21, 0.24],
        "subset": [1.46, 2.27, 2.23, 2.23, 18.25, 2.97, 2.25, 1.70, 2.06, 2.03],
        "gebru": [2.48, 3.07, 3.06, 2.96, 6.34, 2.81, 3.11, 2.65, 2.92, 3.01],
    },
    "mediamill7": {
        "hamming": [32.74, 32.52, 31.88, 32.73, 110, 43.98, 34.78, 1.64, 33.96, 35.82],
        "subset": [37.93, 39.38, 40.25, 39.69, 684, 123, 40.36, 7.46, 38.69, 39.37],
        "gebru": [55.25, 57.20, 55.09, 55.11, 417, 102, 56, 22.04, 54.60, 55.85],
    },
    "mediamill26": {
        "hamming": [880, 873, 867, 876, 2508, 1005, 873, 8, 870, 872],
        "subset": [1087, 1248, 1252, 1259, None, 26606, 1240, 271, 1190, 1204],
        "gebru": [1071, 1124, 1114, 1109, None, 3854, 1116, 214, 1141, 1159],
    },
}


def load_set(name: str, workdir, seed: int):
    """(X float64 (n, d), Y int8 (n, K), description) for one of the paper's three sets."""
    if name == "emotions":
        X, Y = staged("emotions", workdir)
        span = X.max(axis=0) - X.min(axis=0)
        X = (X - X.min(axis=0)) / np.where(span > 0, span, 1.0)
        return X, Y, "emotions, 593 rows (MULAN train+test), min-max scaled"
    n_labels = {"mediamill7": 7, "mediamill26": 26}[name]
    X, Y = staged("mediamill_discretized", workdir)
    labels = np.sort(np.random.default_rng(seed).choice(Y.shape[1], n_labels, replace=False))
    Y = Y[:, labels]
    keep = Y.any(axis=1)
    X, Y = X[keep], Y[keep]
    sd = X.std(axis=0)
    X = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    return X, Y, f"{name}: labels {labels.tolist()} of mediamill_discretized, {X.shape[0]} rows kept, standardized"


def fmt_time(s):
    if s is None:
        return "N/A"
    return f"{s:.2f}s" if s < 60 else f"{int(s // 60)}m{s % 60:02.0f}s"


def sgd_epoch_floor(X, Y, eta0, alpha, repeats=5):
    """(one SGD epoch, one pass of X @ W) in seconds, best of ``repeats`` each."""
    from threadpoolctl import threadpool_limits

    W = np.zeros((X.shape[1] + 1, Y.shape[1]))
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    with threadpool_limits(limits=1):
        floor = min(seconds_of(lambda: Xb @ W, repeats))
    model = LinearMultiLabel(
        loss="hamming", solver="sgd", n_epochs=1, learning_rate="1/k", eta0=eta0, alpha=alpha, record=False, tol=None
    )
    with dmlr.config_context(backend="local"):
        epoch = min(model.fit(X, Y).fit_seconds_ for _ in range(repeats))
    return epoch, floor


def main(argv=None):
    ap = parser(__doc__, sets=("emotions", "mediamill7", "mediamill26"), workdir=None)
    ap.add_argument("--losses", default=",".join(PAPER_LOSSES))
    ap.add_argument("--solvers", default=",".join(SOLVERS))
    ap.add_argument("--n-epochs", "--epochs", type=int, default=5, help="LinearMultiLabel's n_epochs")
    ap.add_argument(
        "--eta0",
        "--step-size",
        type=float,
        default=1.0,
        help="LinearMultiLabel's eta0, the base of the step eta0 / k (paper: 1; 0: dmlr's default 1/L)",
    )
    ap.add_argument(
        "--alpha", "--lam", type=float, default=1e-4, help="LinearMultiLabel's alpha (L2 strength; the paper's lambda)"
    )
    ap.add_argument("--seed", type=int, default=0, help="label draw of MediaMill-7/26 and the row order")
    ap.add_argument(
        "--backend",
        default="local",
        choices=["local", "dask"],
        help="execution setting dmlr.config_context(backend=...)",
    )
    ap.add_argument("--png", default=None, help="save the objective-vs-epoch curves here")
    args = ap.parse_args(argv)
    eta0 = args.eta0 or None
    workdir = work_folder(args.workdir, prefix="dmlr-vr-")
    sets, losses, solvers = args.sets, args.losses.split(","), args.solvers.split(",")
    client = None
    if args.backend == "dask":
        from distributed import Client

        from dmlr.distributed import local_cluster

        client = Client(local_cluster(2, 1))
    curves = {}
    print(
        f"# n_epochs={args.n_epochs} learning_rate=1/k eta0={eta0 or '1/L (dmlr default)'} alpha={args.alpha} "
        f"backend={args.backend}"
    )
    for name in sets:
        try:
            X, Y, desc = load_set(name, workdir, args.seed)
        except FileNotFoundError as e:
            print(f"# {name}: skipped ({e})")
            continue
        print(f"\n## {desc}: {X.shape[0]} x {X.shape[1]}, {Y.shape[1]} labels")
        print(
            f"{'loss':8s} {'solver':14s} {'ours':>9s} {'paper':>9s} {'paper/ours':>10s} {'F(5 ep)':>10s} {'vs SGD':>6s}"
        )
        for loss in losses:
            sgd_final = None
            for solver in solvers:
                m = LinearMultiLabel(
                    loss=loss,
                    solver=solver,
                    n_epochs=args.n_epochs,
                    learning_rate="1/k",
                    eta0=eta0,
                    alpha=args.alpha,
                    random_state=args.seed,
                    tol=None,
                )
                try:
                    with dmlr.config_context(backend=args.backend, client=client):
                        m.fit(X, Y)
                except FloatingPointError as e:
                    print(f"{loss:8s} {solver:14s} diverged: {e}")
                    continue
                final = m.objective_history_[-1]
                if solver == "sgd":
                    sgd_final = final
                rel = (final - sgd_final) / abs(sgd_final) if sgd_final else 0.0
                verdict = "=" if abs(rel) <= 0.01 else ("+" if rel < 0 else "-")
                paper = PAPER.get(name, {}).get(loss, [None] * len(SOLVERS))[SOLVERS.index(solver)]
                ratio = f"{paper / m.fit_seconds_:.0f}x" if paper else "-"
                print(
                    f"{loss:8s} {solver:14s} {fmt_time(m.fit_seconds_):>9s} {fmt_time(paper):>9s} {ratio:>10s} "
                    f"{final:10.5f} {verdict:>6s}",
                    flush=True,
                )
                curves[(name, loss, solver)] = m.objective_history_
        if name == "mediamill26":
            epoch, floor = sgd_epoch_floor(X, Y, eta0, args.alpha)
            print(
                f"\nSGD epoch (hamming) on MediaMill-26: {epoch * 1e3:.1f} ms; one X @ W pass (1 BLAS thread): "
                f"{floor * 1e3:.2f} ms; ratio {epoch / floor:.1f}x"
            )
    if args.png and curves:
        save_png(curves, sets, losses, solvers, args.png)
        print(f"\ncurves written to {args.png}")
    if client is not None:
        client.close()


def save_png(curves, sets, losses, solvers, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG", file=sys.stderr)
        return
    fig, axes = plt.subplots(len(sets), len(losses), figsize=(4.2 * len(losses), 3.2 * len(sets)), squeeze=False)
    for i, name in enumerate(sets):
        for j, loss in enumerate(losses):
            ax = axes[i][j]
            for solver in solvers:
                h = curves.get((name, loss, solver))
                if h:
                    ax.plot(range(len(h)), h, label=solver, marker=".")
            ax.set_title(f"{name} / {loss}")
            ax.set_xlabel("epoch")
            ax.set_ylabel("objective")
            ax.set_yscale("log")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
