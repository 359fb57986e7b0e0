"""Row tiles of the kernels' passes over a block (:class:`dmlr.data.blocks.Block`).

How many rows of a block one product or one score array covers at a time,
so that the passes' temporaries stay small and their products stay on the
BLAS's fast path for small matrices.
"""

from __future__ import annotations

import scipy.sparse as sp

#: Row tile of the objectives' passes over a block: a tile's scores (tile x k*l floats) stay
#: near this size, so a worker's extra memory is a few MiB whatever its chunk (S for a whole
#: chunk with many labels can be many times the size of the sparse chunk itself).
TILE_BYTES = 4 * 2**20


def tile_rows(n_cols: int) -> int:
    """Rows per tile so that a float64 (rows, n_cols) tile is about :data:`TILE_BYTES`."""
    return max(64, TILE_BYTES // (8 * max(n_cols, 1)))


#: Largest M * N * K of a tile's product for which the pass stays on the BLAS's path for small
#: matrices. OpenBLAS's small-matrix DGEMM path (no copy of the operands) covers M*N*K <= 10^6 on
#: AVX-512 x86-64 (OpenMathLib/OpenBLAS pull request 3335); past it the pass's time steps up.
#: Other BLAS builds may have no such path; there the small tiles keep only the cache reuse.
#: ``benchmarks/rbrl_speed.py --sections 2,5`` times the tiled passes.
SMALL_PRODUCT_MNK = 10**6
#: Where the rule would give fewer rows than this, the byte rule instead: very short tiles pay
#: a BLAS call every few rows, which costs more than the cache reuse saves.
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
    any case.

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
