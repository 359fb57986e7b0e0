"""Exact k-NN search: chunk kernel, merge, and the distributed search over row chunks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dmlr.distributed.chunks import make_chunkset
from dmlr.distributed.knn import index_chunks, knn_search
from dmlr.kernels.knn import chunk_top_k, merge_top_k


def tied_data(seed=0, n=700, nq=60, p=12):
    """Small-integer features: many exactly tied distances and duplicate rows."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 3, size=(n, p)).astype(np.float64)
    X[5] = X[400]  # duplicate points
    X[6] = X[400]
    Q = rng.integers(0, 3, size=(nq, p)).astype(np.float64)
    Q[0] = X[400]  # a query on the duplicates
    Y = rng.integers(0, 2, size=(n, 4)).astype(np.int8)
    return X, Y, Q


def brute(Q, X, k):
    """Reference: all distances in exact integer arithmetic, sorted by (distance, index)."""
    D = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    order = np.lexsort((np.broadcast_to(np.arange(X.shape[0]), D.shape), D), axis=-1)[:, :k]
    return np.take_along_axis(D, order, axis=1), order


def test_chunk_top_k_equals_brute_force_with_ties():
    X, _, Q = tied_data()
    dist, idx = chunk_top_k(Q, X, 10, 0)
    d_ref, i_ref = brute(Q, X, 10)
    np.testing.assert_array_equal(idx, i_ref)
    np.testing.assert_array_equal(dist, d_ref)
    assert list(idx[0, :3]) == [5, 6, 400]  # duplicates, lower index first


def test_chunk_top_k_matches_sklearn_distances():
    from sklearn.neighbors import NearestNeighbors

    rng = np.random.default_rng(3)
    X, Q = rng.standard_normal((500, 130)), rng.standard_normal((40, 130))  # 130 dims: no ties
    dist, idx = chunk_top_k(Q, X, 7, 100)
    ref_d, ref_i = NearestNeighbors(n_neighbors=7, algorithm="brute").fit(X).kneighbors(Q)
    np.testing.assert_array_equal(idx, ref_i + 100)
    np.testing.assert_allclose(dist, ref_d**2, rtol=1e-12)


def test_sparse_equals_dense_and_max_index():
    X, _, Q = tied_data(1)
    d1, i1 = chunk_top_k(Q, X, 5, 0)
    d2, i2 = chunk_top_k(sp.csr_matrix(Q), sp.csr_matrix(X), 5, 0)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(d1, d2)
    lim = np.full(Q.shape[0], 300)
    d3, i3 = chunk_top_k(Q, X, 5, 0, max_index=lim)
    np.testing.assert_array_equal(i3, brute(Q, X[:300], 5)[1])


def test_merge_of_chunks_equals_one_chunk():
    X, _, Q = tied_data(2)
    one = chunk_top_k(Q, X, 10, 0)
    for cuts in ([0, 350, 700], [0, 3, 9, 200, 201, 650, 700]):
        parts = [chunk_top_k(Q, X[a:b], 10, a) for a, b in zip(cuts[:-1], cuts[1:])]
        for got, want in zip(merge_top_k(parts[::-1], 10), one):  # merge order does not matter
            np.testing.assert_array_equal(got, want)


def test_fewer_points_than_k_are_padded():
    X, _, Q = tied_data(4)
    X = X[[7, 8, 9]] + 0.5  # three distinct points
    dist, idx = chunk_top_k(Q, X, 5, 0)
    assert (idx[:, 3:] == -1).all() and np.isinf(dist[:, 3:]).all()
    assert (np.sort(idx[:, :3], axis=1) == [0, 1, 2]).all()


def test_bad_arguments():
    X, _, Q = tied_data()
    with pytest.raises(ValueError, match="k must be"):
        chunk_top_k(Q, X, 0)
    with pytest.raises(ValueError, match="features"):
        chunk_top_k(Q[:, :5], X, 3)


def search(X, Y, Q, k, **kw):
    chunks = make_chunkset(X, Y, fit_intercept=False, **kw)
    mem = index_chunks(chunks)
    try:
        return knn_search(mem, Q, k)
    finally:
        mem.close()
        chunks.close()


def test_distributed_search_same_for_any_blocking(client2):
    X, Y, Q = tied_data(5)
    d_ref, i_ref = brute(Q, X, 10)
    results = [
        search(X, Y, Q, 10, backend="local", n_blocks=1),
        search(X, Y, Q, 10, backend="local", n_blocks=3),
        search(X, Y, Q, 10, backend="dask", client=client2, n_blocks=2),
        search(X, Y, Q, 10, backend="dask", client=client2, n_blocks=5),
    ]
    for dist, idx, labels in results:
        np.testing.assert_array_equal(idx, i_ref)
        np.testing.assert_array_equal(dist, d_ref)
        np.testing.assert_array_equal(labels, Y[i_ref])
