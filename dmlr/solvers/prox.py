"""Proximal operators, jaxopt style: ``prox(x, hyperparam, scaling)``."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

#: The Gram route of :func:`prox_nuclear_norm` is taken when the threshold or the smallest
#: singular value is at least this fraction of the largest; otherwise an SVD. The Gram matrix's
#: eigenvalues carry an absolute error of about eps * sigma_max^2, so singular values below about
#: 1e-8 sigma_max are noise there: when the threshold falls among them, the result is off by up to
#: 1e-8 relative. Above this fraction every sigma that decides the result is resolved to about
#: 1e-4 relative or better, which moves Z by at most about 1e-10 relative whatever tau
#: (tests/test_solvers.py checks both routes against the SVD's definition over 3 and 10 decades).
GRAM_MIN_RELATIVE = 1e-6


class LowRank(NamedTuple):
    """A matrix kept as two factors, ``left @ right``, and rows after them (``tail``).

    The low-rank route of :func:`prox_nuclear_norm` forms its result by this
    very product, so :meth:`expand` anywhere the same BLAS runs gives the
    same numbers: a caller may ship the factors, (d + l) k floats, in place
    of the d x l matrix.

    Attributes
    ----------
    left : float64 (d, k)
    right : float64 (k, l)
    tail : float64 (m, l) or None
        Rows below the product, outside the low-rank part (an unpenalized
        bias row).
    """

    left: np.ndarray
    right: np.ndarray
    tail: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        extra = 0 if self.tail is None else self.tail.shape[0]
        return (self.left.shape[0] + extra, self.right.shape[1])

    @property
    def size(self) -> int:
        """Floats held by the factors."""
        return int(self.left.size + self.right.size + (0 if self.tail is None else self.tail.size))

    def expand(self) -> np.ndarray:
        """``left @ right`` (with ``tail`` below it), float64 (d + m, l)."""
        Z = self.left @ self.right
        return Z if self.tail is None else np.vstack([Z, self.tail])


def prox_nuclear_norm(W: np.ndarray, reg: float, scaling: float = 1.0, *, factors: bool = False):
    """Singular value thresholding (Wu et al. 2020, eq. 24).

    Solves ``argmin_Z 1/2 ||Z - W||_F^2 + scaling * reg * ||Z||_*``.

    With W = U Sigma V^T, Z = U max(Sigma - tau, 0) V^T = W V diag(f) V^T with
    f = max(1 - tau / sigma, 0). The right singular vectors and the sigma are
    taken from the eigendecomposition of the small Gram matrix W^T W (l x l;
    W W^T when W is wide), which costs two matrix products and an l x l
    eigensolve instead of a d x l SVD, much cheaper for a tall W (d several
    times l). This runs on the client
    once per APG iteration while the workers wait. When both
    the threshold and the smallest singular value are below
    :data:`GRAM_MIN_RELATIVE` of sigma_max the Gram route is not accurate
    enough and an SVD is used.

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
    low_rank : LowRank or None
        Only with ``factors=True``: Z's factors when Z was formed as their
        product (the low-rank route, at most half of the directions kept),
        else None. Z is ``low_rank.expand()`` exactly.
    """
    if reg == 0.0:
        return (W, 0.0, None) if factors else (W, 0.0)
    tau = scaling * reg
    wide = W.shape[0] < W.shape[1]
    lam, V = np.linalg.eigh(W @ W.T if wide else W.T @ W)
    sigma = np.sqrt(np.maximum(lam, 0.0))
    if max(tau, sigma[0]) >= GRAM_MIN_RELATIVE * sigma[-1]:  # eigh: ascending
        kept = sigma > tau
        Vk = V[:, kept]
        f = 1.0 - tau / sigma[kept]
        low_rank = None
        if 2 * Vk.shape[1] > V.shape[0]:
            # most directions kept: one product with the small map M = V_k diag(f) V_k^T
            # instead of two through V_k (one d x l x l product instead of two d x l x k ones)
            M = (Vk * f) @ Vk.T
            Z = M @ W if wide else W @ M
        else:  # low rank: only the kept directions
            low_rank = LowRank(Vk * f, Vk.T @ W) if wide else LowRank((W @ Vk) * f, Vk.T)
            Z = low_rank.expand()
        penalty = float(reg * (sigma[kept] - tau).sum())
        return (Z, penalty, low_rank) if factors else (Z, penalty)
    U, s, Vt = np.linalg.svd(W, full_matrices=False)
    s = np.maximum(s - tau, 0.0)
    Z, penalty = (U * s) @ Vt, float(reg * s.sum())
    return (Z, penalty, None) if factors else (Z, penalty)


def nuclear_norm(W: np.ndarray) -> float:
    """Sum of singular values."""
    return float(np.linalg.svd(W, compute_uv=False).sum())
