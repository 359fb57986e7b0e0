"""The array types dmlr accepts and the in-memory form its kernels compute on.

Predicates on the arrays a user passes (numpy, scipy.sparse, pydata
``sparse``, dask arrays of any of them) and :func:`as_matrix`, which turns
one chunk into float64 dense (C-contiguous) or float64 CSR. They import
nothing of dmlr, so every layer (models, the distributed layer, kernels)
reaches them downward.
"""

from __future__ import annotations

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
