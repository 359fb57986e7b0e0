"""Numba kernels: pure functions on numpy row chunks."""

import numpy as np


def warm_up() -> bool:
    """Compile (or load from Numba's cache) the RBRL ranking kernels in this process.

    Compiles the specializations of :mod:`dmlr.kernels.ranking` that the
    linear and kernel RBRL fits call (tests/test_kernels.py checks that a fit
    adds none). :func:`dmlr.distributed.chunks.warm_up_workers` runs it on
    each Dask worker when a chunk set is loaded, so that compilation does not
    land in the first iteration's time. The other Numba kernels (k-NN,
    Rank-SVM, the multi-label losses) compile at their first call.
    """
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
    return True
