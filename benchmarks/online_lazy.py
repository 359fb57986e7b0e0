"""Online solvers before and after the lazy O(nnz(x) K) updates, side by side in one run.

Two sections:

* **Rank-SVM online solvers** (Park & Choi 2013, seed 000): ``--updates``
  (default the paper's 7 x 10^4) uniform draws through
  :func:`dmlr.solvers.sgd.run_online` for ANSGD, SGD and MMP on each of
  ``--sets`` (all rows of the staged set, bias appended, as
  ``benchmarks/ranksvm_tables.py`` loads them). "before" is the plain path
  (``lazy=False``: every entry of M, Psi and the average updated at each
  update, the compiled loop for ANSGD / SGD and the numpy ``mmp_step`` loop
  for MMP); "after" is the default lazy path. Both start from the same M_0
  and see the same rows; the last column is the largest difference between
  their averaged outputs M_hat (the iterate equality, also asserted in
  ``tests/test_ranksvm.py``). mediamill_discretized is there for dense rows
  (72% nonzero), where the lazy form saves the shrink and average passes
  only. Its rows are long (||x||^2 up to 373, where ANSGD's L = 1 assumes
  ||x|| <= 1), and there ANSGD amplifies rounding differences by about 10^3
  every 10^4 updates, whichever two implementations are compared: after
  7 x 10^4 updates the plain compiled loop and the numpy ``ansgd_step``
  loop (both the code before the lazy form) differ by 1.2e-3 in M_hat, the
  lazy and the plain loop by 1.6e-3; after 3,000 updates all three agree
  to 3e-14. The column shows that, not a fault of the lazy form.
* **One SGD epoch on MediaMill-26** (Pillai et al., seed 003; the set of
  ``benchmarks/vr_table.py``: 26 labels of ``mediamill_discretized`` drawn
  with ``--seed``, rows with at least one of them, standardized: dense):
  :func:`dmlr.kernels.multilabel_losses.vr_inner_loop` over one epoch's
  row order (hamming loss, lam ``--lam``, step 1): plain, lazy row by row
  (the path of dense rows before the block products) and lazy with the
  block products (the default for dense rows), against one ``X @ W`` pass
  (BLAS, one thread) and against parts of the per-row work: the row-by-row
  score pass with the loss and gradient (``block_loss_grad``), with and
  without the rank-1 updates, and the rows' losses alone on precomputed
  scores (their exp and log1p calls, which no product removes). An epoch
  does at least two products of ``X @ W``'s size (the scores and the
  updates) and the losses.

Timings are medians of ``--repeats`` runs (the plain Rank-SVM runs, which
take tens of seconds each, of ``--before-repeats``); the first call of each
kernel (compilation) is not timed.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/online_lazy.py [--sets corel5k,bibtex,mediamill_discretized]
        [--updates 70000] [--repeats 5] [--before-repeats 3] [--sections ranksvm,mediamill] [--workdir DIR]
"""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
from _common import Table, parser, seconds_of, work_folder
from numba import njit
from ranksvm_tables import load
from vr_table import load_set

from dmlr.data.blocks import make_block
from dmlr.kernels import multilabel_losses
from dmlr.kernels.multilabel_losses import (
    DENSE_BLOCK_ROWS,
    GEBRU_EPS,
    block_loss_grad,
    loss_code,
    row_loss,
    vr_inner_loop,
)
from dmlr.solvers import sgd as solvers
from dmlr.solvers.vr import epoch_order


def median_seconds(fn, repeats: int) -> float:
    return float(np.median(seconds_of(fn, repeats)))


def ranksvm_section(sets, n_updates: int, lam: float, repeats: int, before_repeats: int, workdir: str) -> None:
    print(
        f"## Rank-SVM online solvers: {n_updates} uniform updates, lambda={lam:g}, median of {repeats} "
        f"(before: {before_repeats}) runs\n"
    )
    table = Table(
        "set; n x d (+bias), K; nnz/row:.1f; solver; before s:.2f; after s:.3f; before/after; max |dM_hat|:.1e",
        markdown=True,
    )
    table.print_header()
    for name in sets:
        try:
            X, Y = load(name, workdir)
        except FileNotFoundError as e:
            table.skip(name, e)
            continue
        blk = make_block(X, Y, True)
        n, d = blk.X.shape
        K = blk.Y.shape[1]
        nnz = blk.X.nnz / n if hasattr(blk.X, "nnz") else float(np.count_nonzero(blk.X)) / n
        order = solvers.instance_order(n, n_updates, 0, "uniform")
        for solver in ("ansgd", "sgd", "mmp"):
            kw = {"L": 1.0} if solver == "ansgd" else ({"omega": solvers.SGD_OMEGA} if solver == "sgd" else {})
            out = {}

            def run(lazy, rows=order):
                state = solvers.init_state((d, K), 0, solver)
                solvers.run_online(solver, state, blk.X, blk.Y, rows, lam=lam, lazy=lazy, **kw)
                out[lazy] = state.M_avg

            for lazy in (False, True):
                run(lazy, order[:5])  # compile
            before = median_seconds(lambda: run(False), before_repeats)
            after = median_seconds(lambda: run(True), repeats)
            diff = float(np.abs(out[True] - out[False]).max())
            table.row(name, f"{n} x {d}, {K}", nnz, solver.upper(), before, after, f"{before / after:.1f}x", diff)


@njit
def losses_alone(S, Y, code):
    """Sum of row_loss over the rows of precomputed scores S: the per-row work no product removes."""
    K = S.shape[1]
    g = np.empty(K)
    s = np.empty(K)
    scratch = np.empty((8, K + 1))
    iscratch = np.empty(K + 1, dtype=np.int64)
    total = 0.0
    for i in range(S.shape[0]):
        for k in range(K):
            s[k] = S[i, k]
        total += row_loss(code, s, Y[i], g, scratch, iscratch, GEBRU_EPS)
    return total


def mediamill_section(seed: int, lam: float, repeats: int, workdir: str) -> None:
    from threadpoolctl import threadpool_limits

    X, Y, desc = load_set("mediamill26", workdir, seed)
    blk = make_block(X, Y, True)
    Xb, Yb = blk.X, blk.Y
    n, d = Xb.shape
    K = Yb.shape[1]
    code = loss_code("hamming")
    order = epoch_order(n, 1024, np.random.default_rng(seed))
    W0 = np.zeros((d, K))
    Wt = np.random.default_rng(seed).normal(size=(d, K)) * 0.01
    out = {}

    def epoch(lazy, blocked=True):
        W = W0.copy()
        if blocked:
            vr_inner_loop(Xb, Yb, order, W, code, lam=lam, alpha0=1.0, lazy=lazy)
        else:  # the O(nnz(x) K) form row by row, which dense rows took before the block products
            with mock.patch.object(multilabel_losses, "_no_zero_shrink", lambda *a: False):
                vr_inner_loop(Xb, Yb, order, W, code, lam=lam, alpha0=1.0, lazy=lazy)
        out[lazy, blocked] = W

    for lazy, blocked in ((False, True), (True, False), (True, True)):
        epoch(lazy, blocked)
    block_loss_grad(Xb[:5], Yb[:5], Wt, code)
    S = Xb @ Wt
    losses_alone(S[:5], Yb[:5], code)
    with threadpool_limits(limits=1):
        floor = median_seconds(lambda: Xb @ Wt, max(repeats, 9))
    rows = [
        ("one X @ W pass (BLAS, 1 thread)", floor),
        (
            "row by row: scores + loss and gradient",
            median_seconds(lambda: block_loss_grad(Xb, Yb, Wt, code, want_grad=False), repeats),
        ),
        (
            "row by row: scores + loss and gradient + rank-1 update",
            median_seconds(lambda: block_loss_grad(Xb, Yb, Wt, code, want_grad=True), repeats),
        ),
        (
            "the rows' losses and dl/ds alone, on scores given",
            median_seconds(lambda: losses_alone(S, Yb, code), repeats),
        ),
        ("SGD epoch, plain: W shrunk in full each step", median_seconds(lambda: epoch(False), repeats)),
        ("SGD epoch, lazy scale, row by row", median_seconds(lambda: epoch(True, False), repeats)),
        (
            f"SGD epoch, lazy scale, {DENSE_BLOCK_ROWS}-row block products (default)",
            median_seconds(lambda: epoch(True), repeats),
        ),
    ]
    print(
        f"\n## One SGD epoch (hamming, lam={lam:g}, step 1) on MediaMill-26: {desc}; "
        f"{n} x {d} (+bias), {K} labels; median of {repeats} runs\n"
    )
    table = Table("what; ms:.1f; x X @ W:.1f", markdown=True)
    table.print_header()
    for label, secs in rows:
        table.row(label, secs * 1e3, secs / floor)
    plain = out[False, True]
    print(
        f"\nmax |W - W_plain| after the epoch: row by row {np.abs(out[True, False] - plain).max():.1e}, "
        f"block products {np.abs(out[True, True] - plain).max():.1e} (max |W| {np.abs(plain).max():.2f})"
    )


def main(argv=None):
    ap = parser(__doc__, sets=("corel5k", "bibtex", "mediamill_discretized"), workdir=None)
    ap.add_argument("--sections", default="ranksvm,mediamill")
    ap.add_argument("--updates", type=int, default=70_000)
    ap.add_argument(
        "--lam",
        type=float,
        default=1e-4,
        help="regularization lambda, the solvers' lam (RankSVM's alpha), also the SGD epoch's",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--before-repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="MediaMill-26's label draw and row order")
    a = ap.parse_args(argv)
    workdir = work_folder(a.workdir, prefix="dmlr-online-")
    sections = a.sections.split(",")
    print(
        f"# OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} CPUs; "
        f"load average before: {' '.join(f'{v:.1f}' for v in os.getloadavg())}\n"
    )
    if "ranksvm" in sections:
        ranksvm_section(a.sets, a.updates, a.lam, a.repeats, a.before_repeats, workdir)
    if "mediamill" in sections:
        try:
            mediamill_section(a.seed, a.lam, a.repeats, workdir)
        except FileNotFoundError as e:
            print(f"\n# MediaMill-26 skipped: {e}")
    print(f"\n# load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
