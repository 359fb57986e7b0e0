"""Row-at-a-time Numba helpers shared by the stochastic kernels: one row's scores and rank-1 update.

A block's X reaches these kernels as ``(Xd, indptr, indices, data, sparse)``
(:func:`csr_parts`): a dense matrix, or the three CSR arrays, so one compiled
loop serves both.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def row_scores(i, Xd, indptr, indices, data, sparse, W, s):
    """s = x_i W for row i of a dense (Xd) or CSR (indptr, indices, data) block."""
    K = W.shape[1]
    for k in range(K):
        s[k] = 0.0
    if sparse:
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            v = data[p]
            for k in range(K):
                s[k] += v * W[j, k]
    else:
        d = Xd.shape[1]
        for j in range(d):
            v = Xd[i, j]
            if v != 0.0:
                for k in range(K):
                    s[k] += v * W[j, k]


@njit(cache=True, nogil=True)
def add_row_outer(i, Xd, indptr, indices, data, sparse, c, scale, G):
    """G += scale * x_i c^T."""
    K = G.shape[1]
    if sparse:
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            v = scale * data[p]
            for k in range(K):
                G[j, k] += v * c[k]
    else:
        d = Xd.shape[1]
        for j in range(d):
            v = scale * Xd[i, j]
            if v != 0.0:
                for k in range(K):
                    G[j, k] += v * c[k]


def csr_parts(X):
    """(Xd, indptr, indices, data, sparse) as the kernels take a dense or CSR block."""
    if hasattr(X, "indptr"):
        return (
            np.empty((0, 0)),
            X.indptr.astype(np.int64, copy=False),
            X.indices.astype(np.int64, copy=False),
            X.data.astype(np.float64, copy=False),
            True,
        )
    empty_i = np.empty(0, dtype=np.int64)
    return np.ascontiguousarray(X, dtype=np.float64), empty_i, empty_i, np.empty(0), False
