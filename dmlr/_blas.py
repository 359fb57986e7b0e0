"""BLAS helpers: single-threaded BLAS for a block of code, and in-place scaled sums.

``threadpoolctl.threadpool_limits`` builds a new controller at every call, which
lists every shared library the process has loaded (2,000+ modules after
``import dmlr``), and a search's fit enters it twice (the unit, then the solver):
for the small fits of a search that scan costs as much as the fit. The controller
here is built once and rebuilt only when modules were imported since (an import is
what loads another BLAS), so a call costs no scan.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

_lock = threading.Lock()
_controller = [None, -1]  # the ThreadpoolController, len(sys.modules) when it was built


def _current_controller():
    from threadpoolctl import ThreadpoolController

    with _lock:
        if _controller[0] is None or _controller[1] != len(sys.modules):
            n_modules = len(sys.modules)
            _controller[:] = [ThreadpoolController(), n_modules]
        return _controller[0]


def single_threaded_blas():
    """A context manager that limits every loaded BLAS to one thread (and restores it after),
    as ``threadpoolctl.threadpool_limits(limits=1, user_api="blas")``."""
    return _current_controller().limit(limits=1, user_api="blas")


def _blas_ready(*arrays) -> bool:
    """Whether BLAS can take the arrays as they are: C-contiguous float64 NumPy arrays, not
    empty, of fewer than 2**31 values (BLAS's 32-bit lengths)."""
    return all(
        isinstance(a, np.ndarray) and a.dtype == np.float64 and a.flags.c_contiguous and 0 < a.size < 2**31
        for a in arrays
    )


def add_scaled(y: np.ndarray, alpha: float, x: np.ndarray) -> None:
    """``y += alpha * x`` in place, by BLAS's axpy where both are C-contiguous float64.

    numpy's expression first makes ``alpha * x``, a temporary of x's size: for a
    gradient of a model's d x l weights, written each oracle call, making and
    reading it costs several times the sum itself.

    Parameters
    ----------
    y : float64 ndarray, written
    alpha : float
    x : ndarray of y's shape
    """
    from scipy.linalg.blas import daxpy

    if np.shape(x) != y.shape:
        raise ValueError(f"x has shape {np.shape(x)}, y {y.shape}")
    if _blas_ready(y, x):
        daxpy(x.reshape(-1), y.reshape(-1), a=float(alpha))  # writes into y's memory
    else:
        y += alpha * x


def add_combination(y: np.ndarray, alpha: float, A: np.ndarray, x: np.ndarray) -> None:
    """``y += alpha * (x @ A)`` in place, by BLAS's gemv where all are C-contiguous float64:
    a combination of A's rows added to y.

    numpy's expression makes ``x @ A`` and ``alpha * (x @ A)``, temporaries of y's
    size, and reads them again; gemv accumulates into y (``y = alpha A^T x + beta y``,
    A^T being A's memory read as a Fortran array), which for the pairs of a wide model's
    L-BFGS (:class:`dmlr.solvers.lbfgs.Pairs`) is most of the work.

    Parameters
    ----------
    y : float64 (n,), written
    alpha : float
    A : (c, n)
    x : (c,)
    """
    from scipy.linalg.blas import dgemv

    if np.ndim(A) != 2 or np.shape(x) != (np.shape(A)[0],) or y.shape != (np.shape(A)[1],):
        raise ValueError(f"A has shape {np.shape(A)}, x {np.shape(x)}, y {y.shape}")
    if _blas_ready(y, A):
        out = dgemv(float(alpha), A.T, np.asarray(x, dtype=np.float64), beta=1.0, y=y, overwrite_y=True)
        if out is not y:  # pragma: no cover - scipy writes a contiguous float64 y in place
            y[...] = out
    else:
        y += alpha * (np.asarray(x) @ A)
