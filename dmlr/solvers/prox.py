"""Proximal operators, jaxopt style: ``prox(x, hyperparam, scaling)``."""

from __future__ import annotations

import numpy as np


def prox_nuclear_norm(W: np.ndarray, reg: float, scaling: float = 1.0):
    """Singular value thresholding (Wu et al. 2020, eq. 24).

    Solves ``argmin_Z 1/2 ||Z - W||_F^2 + scaling * reg * ||Z||_*``.

    Parameters
    ----------
    W : float64 (d, l)
    reg : float
        Weight of the nuclear norm (lambda3).
    scaling : float
        Step size (1/L in APG); the threshold is ``scaling * reg``.

    Returns
    -------
    Z : float64 (d, l)
        The prox point ``U max(Sigma - scaling*reg, 0) V^T``.
    penalty : float
        ``reg * ||Z||_*``, known from the thresholded singular values, so
        the objective needs no second SVD.
    """
    if reg == 0.0:
        return W, 0.0
    U, s, Vt = np.linalg.svd(W, full_matrices=False)
    s = np.maximum(s - scaling * reg, 0.0)
    return (U * s) @ Vt, float(reg * s.sum())


def nuclear_norm(W: np.ndarray) -> float:
    """Sum of singular values."""
    return float(np.linalg.svd(W, compute_uv=False).sum())
