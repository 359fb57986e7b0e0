"""Kernel functions between row sets (the Gram blocks of kernel RBRL, eq. 12).

Each call computes one rectangular block ``k(A_i, B_j)``; the full n x n
matrix is never formed by dmlr outside a test. Dense or CSR input; the
result is dense float64.

Kernels (``gamma`` defaults to 1 / n_features, the paper's setting, Sec. 5.2):

* ``"rbf"``:    exp(-gamma ||a - b||^2)
* ``"linear"``: a . b
* ``"poly"``:   (gamma a . b + coef0) ** degree
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

KERNELS = ("rbf", "linear", "poly")


@dataclass(frozen=True)
class KernelSpec:
    """A kernel with its parameters resolved (gamma is a number here).

    Attributes
    ----------
    name : {"rbf", "linear", "poly"}
    gamma : float
    degree : int
    coef0 : float
    """

    name: str
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 1.0

    @classmethod
    def resolve(cls, name: str, gamma, degree: int, coef0: float, n_features: int) -> KernelSpec:
        """Validate the estimator's kernel parameters; ``gamma=None`` -> 1 / n_features."""
        if name not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {name!r}")
        if gamma is None:
            gamma = 1.0 / max(int(n_features), 1)
        if not (np.isfinite(gamma) and gamma > 0):
            raise ValueError(f"gamma must be a positive number, got {gamma!r}")
        if name == "poly" and not (isinstance(degree, (int, np.integer)) and degree >= 1):
            raise ValueError(f"degree must be a positive integer, got {degree!r}")
        return cls(name=name, gamma=float(gamma), degree=int(degree), coef0=float(coef0))


def row_sq_norms(X) -> np.ndarray:
    """||x_i||^2 of each row of a dense or CSR matrix, float64 (m,)."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1)).ravel()
    return np.einsum("ij,ij->i", X, X)


def _dot(A, B) -> np.ndarray:
    P = A @ B.T
    return P.toarray() if sp.issparse(P) else np.asarray(P)


def kernel_matrix(A, B, spec: KernelSpec, B_sq_norms: np.ndarray | None = None) -> np.ndarray:
    """The Gram block ``k(A, B)``.

    Parameters
    ----------
    A : float64 (m, p) dense or CSR
    B : float64 (n, p) dense or CSR
    spec : KernelSpec
    B_sq_norms : float64 (n,), optional
        ``||b_j||^2`` when already known (RBF only), to save a pass over B.

    Returns
    -------
    float64 (m, n)

    Notes
    -----
    RBF uses ||a||^2 + ||b||^2 - 2 a.b (one BLAS product) rather than the
    reference's explicit differences; the rounding error is ~1e-16 ||a||^2,
    clipped at 0, which the kernel-parity test bounds at 1e-6 of the objective.
    """
    G = _dot(A, B)
    if spec.name == "linear":
        return G
    if spec.name == "poly":
        return (spec.gamma * G + spec.coef0) ** spec.degree
    b2 = row_sq_norms(B) if B_sq_norms is None else B_sq_norms
    D = row_sq_norms(A)[:, None] + b2[None, :] - 2.0 * G
    np.maximum(D, 0.0, out=D)
    D *= -spec.gamma
    return np.exp(D, out=D)
