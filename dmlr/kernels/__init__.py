"""Numba kernels: pure functions on numpy row chunks."""

import subprocess
import sys
import threading

import numpy as np

_WARM = threading.Lock()
_warmed = False


def warm_up() -> bool:
    """Load the RBRL ranking kernels from Numba's cache, compiling them there first if need be.

    Runs the specializations of :mod:`dmlr.kernels.ranking` that the linear
    and kernel RBRL fits call (tests/test_kernels.py checks that a fit adds
    none), once per process. Where Numba's cache lacks them (first use, or
    the source changed), a child process compiles and caches them, and this
    process loads the cached code: the ranking kernels allow reassociation
    (``fastmath``), and code compiled in a process and the same code loaded
    from the cache sum in different orders, so a process that compiled them
    itself would give other last bits, and then another model, than every
    later process. :func:`dmlr.distributed.chunks.warm_up_workers` runs it on
    each Dask worker, and every RBRL and KernelRBRL fit in its own process.
    The other Numba kernels (k-NN, Rank-SVM, the multi-label losses) compile
    at their first call, in the process that calls them; of those, only the
    multi-label losses' ranking loss reassociates (it calls
    :func:`dmlr.kernels.ranking.pairwise_squared_hinge_row`).
    """
    global _warmed
    with _WARM:
        if _warmed:
            return True
        if not ranking_cached():
            # best effort: where the child cannot write the cache, this process compiles
            subprocess.run([sys.executable, "-c", "from dmlr.kernels import _run_ranking; _run_ranking()"], check=False)
        _run_ranking()
        _warmed = True
    return True


def ranking_cached() -> bool:
    """Whether Numba's cache holds a fresh index for each kernel :func:`warm_up` runs
    (Numba's own test: the index's source stamp and version; a private Numba API, so any
    error counts as cached and leaves the compilation to this process)."""
    from dmlr.kernels import ranking as rk

    kernels = (
        rk.rbrl_score_losses,
        rk.rank_lipschitz_row_stats,
        rk.dense_extrapolated_losses,
        rk.extrapolated_ridge_share,
        rk.advance_point_pair,
        rk.sparse_extrapolated_pass,
        rk.sparse_tile_pass,
    )
    try:
        return all(bool(f._cache._cache_file._load_index()) for f in kernels)
    except Exception:
        return True


def _run_ranking() -> None:
    """Call each RBRL ranking kernel once on tiny inputs of the types the fits pass."""
    import scipy.sparse as sp

    from dmlr.kernels import ranking as rk

    margin = rk.RANK_MARGIN

    Y = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.int8)
    S = np.zeros((3, 4))
    C = np.zeros((3, 2))
    rk.rbrl_score_losses(S, Y, 2, 1, 1.0, margin, C)
    rk.rank_lipschitz_row_stats(Y, np.ones(3), np.zeros(2), np.zeros(2))
    S_W, S_prev = S[:, :2].copy(), S[:, 2:].copy()  # C-contiguous, as in the passes (a Numba specialization)
    rk.dense_extrapolated_losses(S_W, S_prev, 0.5, Y, 1.0, margin, C)
    rk.extrapolated_ridge_share(S_W, S_prev, S_W, S_prev, 0.5, 1.0, C)
    X = sp.csr_matrix(np.eye(3))
    WG = np.zeros((3, 4))
    rk.advance_point_pair(WG, np.zeros((3, 2)), 0.5)
    rk.sparse_extrapolated_pass(X.indptr, X.indices, X.data, Y, WG, 1.0, margin, np.zeros((3, 2)))
    points, br, rank, G = np.zeros((1, 3, 2)), np.zeros(1), np.zeros(1), np.zeros((3, 2))
    for grad_point, C in ((0, np.empty((2, 2))), (-1, np.empty((0, 2)))):
        rk.sparse_tile_pass(
            X.indptr, X.indices, X.data, Y, points, 0, 3, grad_point, 1.0, margin, np.empty((2, 2)), C, br, rank, G
        )
