"""Exact k-nearest-neighbour search over a point set held in row chunks (here or on Dask workers).

The point set (the memory D of :class:`dmlr.models.OML` / :class:`dmlr.models.KNN`)
is loaded once into a :class:`dmlr.distributed.chunks.ChunkSet` and never
gathered: :func:`index_chunks` turns every block, where it lives, into an
:class:`IndexedBlock` (its points, optionally mapped into an embedding, with
their global row offset, and its label rows). :func:`knn_search` sends a batch
of queries to every block (``ChunkSet.map_blocks``); each block returns its
local top-k (:func:`dmlr.kernels.knn.chunk_top_k`) and the labels of those k
rows, and the client merges the lists (:func:`dmlr.kernels.knn.merge_top_k`).
Only nq x k x (2 + n_labels) values per block travel back.

Ties go to the lower global row index and the distances are computed
independently of the chunking (see :mod:`dmlr.kernels.knn`), so the result
is the same with one block, several blocks, or blocks on several workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dmlr.data.arrays import as_matrix
from dmlr.kernels.knn import chunk_top_k, merge_top_k


@dataclass
class IndexedBlock:
    """One chunk of the searched set.

    Attributes
    ----------
    X : float64 ndarray (m, e) or scipy CSR (m, e)
        Points (embedded when the chunk set was built with an embedding).
    Y : int8 ndarray (m, l)
        Their labels.
    start : int
        Global row index of the first point.
    """

    X: object
    Y: np.ndarray
    start: int

    @property
    def n_rows(self) -> int:
        return int(self.Y.shape[0])


def _index_block(block, bounds, embed):
    X = block.X
    if embed is not None:
        X = np.ascontiguousarray(np.asarray(X @ embed), dtype=np.float64)
    return IndexedBlock(X=X, Y=block.Y, start=int(bounds[0]))


def index_chunks(chunks, embed=None):
    """A chunk set of :class:`IndexedBlock` built where the blocks are.

    Parameters
    ----------
    chunks : ChunkSet
        From :func:`dmlr.distributed.chunks.make_chunkset` (``fit_intercept=False``).
    embed : float64 ndarray (p, e), optional
        Map every point x to ``x @ embed`` (OML: ``P V``, so that Euclidean
        distance there is the learned metric).

    Returns
    -------
    ChunkSet
        The caller closes it (and the input chunk set, which stays valid).
    """
    return chunks.transform(_index_block, embed)


def _block_top_k(block, queries, k, with_labels):
    dist, idx = chunk_top_k(queries, block.X, k, block.start)
    labels = None
    if with_labels:
        local = np.where(idx >= 0, idx - block.start, 0)
        labels = block.Y[local]  # (nq, k, l)
        labels[idx < 0] = 0
    return dist, idx, labels


def knn_search(chunks, queries, k: int, *, with_labels: bool = True):
    """The k nearest points of the chunk set to every query, with their labels.

    Parameters
    ----------
    chunks : ChunkSet of IndexedBlock
        From :func:`index_chunks`.
    queries : float64 ndarray (nq, e) or scipy CSR
        In the chunk set's coordinates (embedded like its points).
    k : int
    with_labels : bool
        Also return the neighbours' label rows.

    Returns
    -------
    dist : float64 (nq, k)
        Squared distances, ascending (ties: lower index first); +inf padding.
    idx : int64 (nq, k)
        Global row indices (-1 padding when the set has fewer than k rows).
    labels : int8 (nq, k, l) or None
        ``Y[idx]`` (zeros at padding).
    """
    queries = as_matrix(queries)
    results = chunks.map_blocks(_block_top_k, queries, int(k), bool(with_labels))
    pairs = [(r[0], r[1]) for r in results]
    if not with_labels:
        return (*merge_top_k(pairs, int(k)), None)
    return merge_top_k(pairs, int(k), payloads=[r[2] for r in results])
