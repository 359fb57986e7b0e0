"""Row-at-a-time Numba helpers shared by the kernels: one row's scores, rank-1 update and relevant labels.

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


@njit(cache=True, nogil=True, inline="always")
def relevant_labels(s, y, scores_out, labels_out):
    """Gather the relevant labels (y != 0) of one row, in label order, for the pairwise losses.

    Their scores ``s[j]`` go to ``scores_out`` and their indices ``j`` to
    ``labels_out`` (each at least as long as the number of relevant labels);
    returns that number.
    """
    n_pos = 0
    for j in range(s.shape[0]):
        if y[j] != 0:
            scores_out[n_pos] = s[j]
            labels_out[n_pos] = j
            n_pos += 1
    return n_pos


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
