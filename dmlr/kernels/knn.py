"""Exact k-nearest-neighbour search on one row chunk, and the merge of per-chunk results.

Pure functions on in-memory chunks (numpy / scipy CSR), used by
:mod:`dmlr.distributed.knn` (each worker searches its own chunks) and by the
online loop of :class:`dmlr.models.OML` (nearest neighbour in the memory D).

Why not scipy / scikit-learn: ``scipy.spatial.cKDTree`` prunes by
axis-aligned splits, which stop pruning in the hundreds of dimensions of
typical multi-label features: a query then visits most leaves and is slower than a
brute-force scan, and it does not take CSR input. ``np.argpartition`` alone
has no deterministic tie rule, and BLAS distances ``||a||^2 - 2 a.b + ||b||^2``
carry rounding that depends on the GEMM blocking, i.e. on how the rows are
cut into chunks. So the search here is two-stage:

1. *Screen* (BLAS): squared distances of a block of queries to every point by
   ``||a||^2 - 2 a.b + ||b||^2`` (one GEMM), the k-th smallest per query by
   ``np.partition``, and every point within ``kth + slack`` kept as a
   candidate. ``slack`` (:data:`SCREEN_SLACK` x (||a||^2 + max ||b||^2))
   exceeds the GEMM rounding error (about p * eps * (||a||^2 + ||b||^2)) for
   any p below ~10^5, so no true k-nearest point is dropped.
2. *Refine* (Numba): the candidates' distances recomputed exactly as
   ``sum_j (a_j - b_j)^2`` in feature order (strict IEEE order, no fastmath),
   a value that depends only on the two rows; candidates are sorted by
   (distance, global row index) and the first k kept.

Results therefore do not depend on how the points are split into chunks,
nor on the number of workers: ties, e.g. duplicate rows, go to the lower
global row index. Queries are processed in blocks of at most
:data:`BLOCK_ENTRIES` query-point pairs to bound the temporary memory.
"""

from __future__ import annotations

import numba
import numpy as np
import scipy.sparse as sp

from dmlr.kernels.gram import row_sq_norms

#: Query-point pairs per screening block (float64: 32 MiB of distances).
BLOCK_ENTRIES = 2**22
#: Relative slack of the screening stage (see the module docstring).
SCREEN_SLACK = 1e-10


@numba.njit(cache=True, nogil=True)
def _pair_sq_dists(A, B, ia, ib):  # pragma: no cover - compiled
    """``out[t] = sum_j (A[ia[t], j] - B[ib[t], j])^2``, summed in feature order."""
    n = ia.shape[0]
    p = A.shape[1]
    out = np.empty(n)
    for t in range(n):
        a = ia[t]
        b = ib[t]
        s = 0.0
        for j in range(p):
            diff = A[a, j] - B[b, j]
            s += diff * diff
        out[t] = s
    return out


def _dense(X) -> np.ndarray:
    if sp.issparse(X):
        return np.asarray(X.toarray(), dtype=np.float64)
    return np.ascontiguousarray(X, dtype=np.float64)


def _global_index(row_offset, n_points: int) -> np.ndarray:
    if np.ndim(row_offset) == 0:
        return np.arange(int(row_offset), int(row_offset) + n_points, dtype=np.int64)
    gidx = np.asarray(row_offset, dtype=np.int64)
    if gidx.shape != (n_points,):
        raise ValueError(f"row_offset must be an int or {n_points} global indices, got shape {gidx.shape}")
    return gidx


def empty_result(n_queries: int, k: int):
    """The result of a search over no points: distances +inf, indices -1."""
    return np.full((n_queries, k), np.inf), np.full((n_queries, k), -1, dtype=np.int64)


def chunk_top_k(queries, block_points, k: int, row_offset=0, *, max_index=None):
    """The k nearest points of one chunk to each query (squared Euclidean).

    Parameters
    ----------
    queries : float ndarray (nq, p) or scipy.sparse (nq, p)
    block_points : float ndarray (nb, p) or scipy.sparse (nb, p)
        The chunk's points.
    k : int
        Neighbours per query (>= 1).
    row_offset : int or int64 ndarray (nb,)
        Global row index of the chunk's first point (its points are
        ``row_offset, row_offset + 1, ...``), or the global index of every point.
    max_index : int64 ndarray (nq,), optional
        Query i only sees points of global index < ``max_index[i]`` (the
        online loop: a row's neighbours are the rows seen before it).

    Returns
    -------
    dist : float64 ndarray (nq, k)
        Exact squared distances, ascending; +inf where fewer than k points qualify.
    global_idx : int64 ndarray (nq, k)
        Global row indices of the neighbours (-1 where none); ties in distance
        go to the lower index.
    """
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    nq, nb = queries.shape[0], block_points.shape[0]
    if queries.shape[1] != block_points.shape[1]:
        raise ValueError(f"queries have {queries.shape[1]} features, points {block_points.shape[1]}")
    dist, idx = empty_result(nq, k)
    if nq == 0 or nb == 0:
        return dist, idx
    gidx = _global_index(row_offset, nb)
    sparse_q, sparse_p = sp.issparse(queries), sp.issparse(block_points)
    if sparse_q:
        queries = sp.csr_matrix(queries, dtype=np.float64)
    else:
        queries = np.ascontiguousarray(queries, dtype=np.float64)
    if sparse_p:
        points = sp.csr_matrix(block_points, dtype=np.float64)
        points_T = points.T.tocsc()
    else:
        points = np.ascontiguousarray(block_points, dtype=np.float64)
        points_T = points.T
    pn = row_sq_norms(points)
    pn_max = float(pn.max())
    qb = max(1, min(nq, BLOCK_ENTRIES // max(nb, 1)))
    for q0 in range(0, nq, qb):
        q1 = min(nq, q0 + qb)
        Q = queries[q0:q1]
        qn = row_sq_norms(Q)
        G = Q @ points_T
        G = G.toarray() if sp.issparse(G) else np.asarray(G)
        # screen: BLAS distances (rounded; refined below)
        D = qn[:, None] - 2.0 * G + pn[None, :]
        if max_index is not None:
            D[gidx[None, :] >= np.asarray(max_index, dtype=np.int64)[q0:q1, None]] = np.inf
        kk = min(k, nb)
        kth = np.partition(D, kk - 1, axis=1)[:, kk - 1]
        slack = SCREEN_SLACK * (qn + pn_max) + 1e-300
        cand = (D <= (kth + slack)[:, None]) & np.isfinite(D)
        rows, cols = np.nonzero(cand)
        if rows.size == 0:
            continue
        # refine: exact distances of the candidates, independent of the chunking
        Qd = _dense(Q)
        if sparse_p:
            ucols, inv = np.unique(cols, return_inverse=True)
            exact = _pair_sq_dists(Qd, _dense(points[ucols]), rows.astype(np.int64), inv.astype(np.int64))
        else:
            exact = _pair_sq_dists(Qd, points, rows.astype(np.int64), cols.astype(np.int64))
        g = gidx[cols]
        order = np.lexsort((g, exact, rows))
        rows, exact, g = rows[order], exact[order], g[order]
        starts = np.searchsorted(rows, np.arange(q1 - q0))
        pos = np.arange(rows.size) - starts[rows]
        keep = pos < k
        dist[q0 + rows[keep], pos[keep]] = exact[keep]
        idx[q0 + rows[keep], pos[keep]] = g[keep]
    return dist, idx


def merge_order(D: np.ndarray, I: np.ndarray, k: int) -> np.ndarray:
    """Columns of the k best candidates per query, ranked by (distance, global index).

    ``D`` float64 and ``I`` int64 (nq, c) are the concatenated candidate
    lists; invalid entries (index -1, distance +inf) go last.

    Returns
    -------
    order : int64 ndarray (nq, k)
    """
    # -1 (no point) sorts after every real index at the same (+inf) distance
    key_idx = np.where(I < 0, np.iinfo(np.int64).max, I)
    return np.lexsort((key_idx, D), axis=-1)[:, :k]


def merge_top_k(list_of_results, k: int, payloads=None):
    """Merge per-chunk ``(dist, global_idx)`` results into the global top-k.

    Parameters
    ----------
    list_of_results : list of (float64 (nq, k_i), int64 (nq, k_i))
        Results of :func:`chunk_top_k` on disjoint chunks (any order).
    k : int
    payloads : list of ndarray (nq, k_i, ...), optional
        Per-candidate values that travel with the candidates (e.g. their label
        rows), one array per result; zeros at padding.

    Returns
    -------
    dist : float64 ndarray (nq, k)
    global_idx : int64 ndarray (nq, k)
        As :func:`chunk_top_k` over the union of the chunks: ascending
        distance, ties to the lower global index; +inf / -1 padding.
    payload : ndarray (nq, k, ...)
        Only when ``payloads`` is given: the merged payloads.
    """
    if not list_of_results:
        raise ValueError("nothing to merge")
    dists = [r[0] for r in list_of_results]
    idxs = [r[1] for r in list_of_results]
    payloads = None if payloads is None else list(payloads)
    nq = dists[0].shape[0]
    total = sum(d.shape[1] for d in dists)
    if total < k:
        pad_d, pad_i = empty_result(nq, k - total)
        dists, idxs = dists + [pad_d], idxs + [pad_i]
        if payloads is not None:
            first = payloads[0]
            payloads.append(np.zeros((nq, k - total) + first.shape[2:], dtype=first.dtype))
    D, I = np.concatenate(dists, axis=1), np.concatenate(idxs, axis=1)
    order = merge_order(D, I, k)
    D, I = np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)
    if payloads is None:
        return D, I
    Pl = np.concatenate(payloads, axis=1)
    return D, I, np.take_along_axis(Pl, order.reshape(order.shape + (1,) * (Pl.ndim - 2)), axis=1)


def warm_up() -> bool:
    """Compile the refine kernel in this process.

    dmlr does not call it (the kernel compiles at its first call); a caller
    timing the search can run it first, on workers through ``client.run``.
    """
    A = np.zeros((2, 3))
    _pair_sq_dists(A, A, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    return True
