"""The in-memory form of one row chunk that kernels and objectives work on.

A :class:`Block` holds the rows of one chunk with X either dense float64
(C-contiguous) or scipy CSR float64, never densified, the bias column already
appended when the model uses one, and Y as int8 0/1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

#: Row tile of the objectives' passes over a block: a tile's scores (tile x k*l floats) stay
#: near this size, so a worker's extra memory is a few MiB whatever its chunk (S for a whole
#: Bookmarks-shaped chunk would be 146 MB, ten times the sparse chunk itself).
TILE_BYTES = 4 * 2**20


def tile_rows(n_cols: int) -> int:
    """Rows per tile so that a float64 (rows, n_cols) tile is about :data:`TILE_BYTES`."""
    return max(64, TILE_BYTES // (8 * max(n_cols, 1)))


#: Largest M * N * K of a tile's product for which the pass stays on the BLAS's path for small
#: matrices. OpenBLAS's small-matrix DGEMM path (no copy of the operands) covers M*N*K <= 10^6 on
#: AVX-512 x86-64 (OpenMathLib/OpenBLAS pull request 3335); past it the pass's time steps up.
#: Other BLAS builds may have no such path; there the small tiles keep only the cache reuse.
#: ``benchmarks/rbrl_speed.py`` (sections 2 and 5) times the tiled passes.
SMALL_PRODUCT_MNK = 10**6
#: Where the rule would give fewer rows than this, the byte rule instead: very short tiles pay
#: a BLAS call every few rows, which costs more than the cache reuse saves (8-row tiles of a
#: wide block are slower than one whole-block product; 16-row tiles still gain).
MIN_SMALL_TILE_ROWS = 32


def product_tile_rows(X, n_outputs: int, n_score_cols: int) -> int:
    """Rows per tile of a pass that computes ``X_t @ W`` and ``X_t.T @ C`` tile by tile.

    For a dense X whose tiles can be small enough that each product
    (tile x p times p x ``n_outputs``) stays within :data:`SMALL_PRODUCT_MNK`
    with at least :data:`MIN_SMALL_TILE_ROWS` rows, those tiles: the tile is
    still in cache when ``X_t.T @ C`` reads it again, and the products are
    small enough for the BLAS's fast path for small matrices (see
    :data:`SMALL_PRODUCT_MNK`), whereas one product over the whole block
    reads X from memory twice. Otherwise (sparse X, or wide rows such as a
    10,000-column kernel block), :func:`tile_rows`.

    The cost: small products run on one BLAS thread, so where one block is
    given several BLAS threads (the in-process path with a single block,
    :class:`dmlr.distributed.chunks.LocalChunks`) the pass gives up the
    whole-block products' multithreading; the default of one block per core
    keeps every core busy instead. Dask workers run single-threaded BLAS in
    any case. ``benchmarks/rbrl_speed.py --sections 5`` compares one block
    with the default blocks.

    Parameters
    ----------
    X : ndarray (m, p) or scipy.sparse matrix
    n_outputs : int
        Columns of the widest right-hand factor (W's columns, or C's).
    n_score_cols : int
        Columns of the tile's score array, for the :func:`tile_rows` fallback.
    """
    if not sp.issparse(X):
        rows = SMALL_PRODUCT_MNK // max(X.shape[1] * n_outputs, 1)
        if rows >= MIN_SMALL_TILE_ROWS:
            return rows
    return tile_rows(n_score_cols)


@dataclass
class Block:
    """One row chunk of a training set, ready for the kernels.

    Attributes
    ----------
    X : float64 ndarray (m, d) or scipy.sparse.csr_matrix (m, d)
    Y : int8 ndarray (m, l)
    state : dict
        What a solver keeps on the block between calls, where the block
        lives (e.g. the last APG point and its scores,
        :class:`dmlr.distributed.extrapolation.ExtrapolationCache`).
        Empty on a new or rebuilt block: nothing may depend on it but speed.
    """

    X: object
    Y: np.ndarray
    state: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_rows(self) -> int:
        return int(self.Y.shape[0])


def is_dask(a) -> bool:
    """Whether ``a`` is a dask array (checked by attributes: no dask import)."""
    return hasattr(a, "dask") and hasattr(a, "chunks")


def is_sparse(a) -> bool:
    """Whether ``a`` is scipy or pydata sparse, or a dask array of sparse chunks."""
    if sp.issparse(a):
        return True
    if is_dask(a):
        a = a._meta
    return type(a).__module__.startswith("sparse")


def as_matrix(X):
    """Return a chunk as float64 dense ndarray or float64 scipy CSR.

    Accepts numpy arrays, scipy.sparse matrices and pydata ``sparse`` arrays
    (GCXS/COO, the chunk types of sparse dask arrays).
    """
    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64)
    if hasattr(X, "to_scipy_sparse"):  # pydata sparse
        return sp.csr_matrix(X.to_scipy_sparse(), dtype=np.float64)
    return np.ascontiguousarray(np.asarray(X, dtype=np.float64))


def append_bias(X):
    """Append a constant-1 column (the paper's bias by an extra feature)."""
    ones = np.ones((X.shape[0], 1))
    if sp.issparse(X):
        return sp.hstack([X, sp.csr_matrix(ones)], format="csr")
    return np.hstack([X, ones])


def make_block(X, Y, fit_intercept: bool) -> Block:
    """Build a :class:`Block` from any chunk type, appending the bias column if asked."""
    X = as_matrix(X)
    if fit_intercept:
        X = append_bias(X)
    return Block(X=X, Y=np.ascontiguousarray(np.asarray(Y), dtype=np.int8))


def concat_blocks(parts_X, parts_Y, fit_intercept: bool) -> Block:
    """Concatenate adjacent chunks into one block (order kept)."""
    Xs = [as_matrix(x) for x in parts_X]
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs, axis=0)
    return make_block(X, np.concatenate([np.asarray(y) for y in parts_Y], axis=0), fit_intercept)


def _stack(parts_X, parts_Y) -> Block:
    if len(parts_X) == 1:
        return Block(X=parts_X[0], Y=parts_Y[0])
    return concat_blocks(parts_X, parts_Y, fit_intercept=False)


def regroup_rows(blocks, size: int):
    """The rows of an iterable of blocks as consecutive blocks of ``size`` rows (the last one shorter).

    Pieces of adjacent blocks are concatenated, so the groups are fixed global
    row ranges: they do not depend on how the rows were chunked (the seeded
    row orders of the streamed solvers are drawn per group).
    """
    xs, ys, have = [], [], 0
    for blk in blocks:
        a = 0
        while a < blk.n_rows:
            take = min(size - have, blk.n_rows - a)
            xs.append(blk.X[a : a + take])
            ys.append(blk.Y[a : a + take])
            have += take
            a += take
            if have == size:
                yield _stack(xs, ys)
                xs, ys, have = [], [], 0
    if have:
        yield _stack(xs, ys)
