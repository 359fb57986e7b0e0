"""The array types dmlr accepts and the in-memory form its kernels compute on.

Predicates on the arrays a user passes (numpy, scipy.sparse, pydata
``sparse``, dask arrays of any of them) and :func:`as_matrix`, which turns
one chunk into float64 dense (C-contiguous) or float64 CSR. They import
nothing of dmlr, so every layer (models, the distributed layer, kernels)
reaches them downward.
"""

from __future__ import annotations

import functools

import numpy as np
import scipy.sparse as sp


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


def to_scipy(a):
    """A pydata ``sparse`` array (GCXS/COO, the chunk types of sparse dask arrays) as scipy
    sparse; anything else (numpy, scipy) as it is."""
    return a.to_scipy_sparse() if hasattr(a, "to_scipy_sparse") else a


def gcxs_meta(dtype):
    """The meta of a dask array of pydata ``sparse.GCXS`` (CSR) row chunks: an empty 0 x 0 GCXS.

    0 x 0, because dask slices a meta to 0 x 0, which pydata sparse returns as is. Any
    other indexing or elementwise operation on a GCXS (a 0 x d meta's slicing, ``astype``)
    makes pydata sparse JIT-compile its code, seconds in each process.
    """
    return _gcxs()(
        (np.zeros(0, dtype=dtype), np.zeros(0, dtype=np.intp), np.zeros(1, dtype=np.intp)),
        shape=(0, 0),
        compressed_axes=(0,),
    )


def gcxs_from_csr(m):
    """A scipy CSR matrix as a pydata ``sparse.GCXS`` row chunk, sharing its arrays."""
    return _gcxs()((m.data, m.indices, m.indptr), shape=m.shape, compressed_axes=(0,))


@functools.cache
def _gcxs():
    """pydata sparse's ``GCXS``, with Numba's disk cache on for the check its constructor runs.

    The constructor validates its arrays with a Numba function that pydata sparse compiles
    in every process, once per combination of dtypes (a fit on a sparse store meets several:
    the meta, the chunks' values and indices), about half a second each, in the client and
    in every worker. Cached, a process after the first loads it instead. The function is
    pydata sparse's private ``_validate_gcxs_arrays``: where it is not found, or caching fails,
    it compiles as before.
    """
    import sparse as pydata_sparse

    try:
        from sparse.numba_backend._compressed.compressed import _validate_gcxs_arrays

        _validate_gcxs_arrays.enable_caching()
    except Exception:  # noqa: BLE001 - an optimization only
        pass
    return pydata_sparse.GCXS


def take_rows(chunk, rows):
    """Rows ``rows`` (a slice or an int array) of one chunk, in the chunk's type.

    A pydata sparse chunk is cut in scipy (:func:`gcxs_meta` says why).
    """
    if hasattr(chunk, "to_scipy_sparse"):
        return gcxs_from_csr(as_csr(chunk)[rows])
    return chunk[rows]


def chunk_rows(A, idx):
    """Rows ``idx`` (sorted, distinct) of a dask array ``A`` chunked by rows, selected within each chunk.

    Output chunk i holds the selected rows of A's chunk i (chunks without any
    are left out, whole chunks pass as they are), cut where that chunk is
    computed (:func:`take_rows`). Dask's own ``A[idx]`` may regroup the rows
    into other chunks, made by concatenating pieces of several input chunks
    (larger chunks, and copies, in the workers' memory), and indexes pydata
    sparse chunks through pydata sparse.
    """
    import dask.array as da

    idx = np.asarray(idx, dtype=np.int64)
    edges = np.cumsum((0,) + tuple(A.chunks[0]))
    cuts = np.searchsorted(idx, edges)
    parts = []
    for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        if hi == lo:
            continue
        local = idx[lo:hi] - edges[i]
        block = A.blocks[i]
        if local.size == edges[i + 1] - edges[i]:
            parts.append(block)
            continue
        contiguous = local[-1] - local[0] + 1 == local.size
        sel = slice(int(local[0]), int(local[-1]) + 1) if contiguous else local
        chunks = ((int(local.size),),) + tuple(A.chunks[1:])
        parts.append(block.map_blocks(take_rows, sel, chunks=chunks, dtype=A.dtype, meta=A._meta))
    if not parts:
        return A[:0]
    return da.concatenate(parts, axis=0)


def as_csr(X):
    """A scipy or pydata ``sparse`` matrix (GCXS/COO, the chunk types of sparse dask arrays)
    as scipy CSR, its dtype kept."""
    return sp.csr_matrix(to_scipy(X))


def as_matrix(X):
    """Return a chunk as float64 dense ndarray or float64 scipy CSR.

    Accepts numpy arrays, scipy.sparse matrices and pydata ``sparse`` arrays
    (GCXS/COO, the chunk types of sparse dask arrays).
    """
    if sp.issparse(X) or hasattr(X, "to_scipy_sparse"):
        return sp.csr_matrix(as_csr(X), dtype=np.float64)
    return np.ascontiguousarray(np.asarray(X, dtype=np.float64))
