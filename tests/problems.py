"""Small optimization problems shared by the solver tests (numpy only)."""

import numpy as np

from dmlr.solvers import prox_nuclear_norm


def least_squares_nuclear(A, B, lam):
    """``oracle`` and ``prox`` of min 1/2 ||A W - B||_F^2 + lam ||W||_* in :func:`dmlr.solvers.apg`'s form.

    ``oracle(points, grad_point)`` gives the smooth part at a stack of points
    (k, d, l) and its gradient at ``points[grad_point]`` (None for -1);
    ``prox(V, s)`` is singular value thresholding.
    """

    def oracle(points, grad_point):
        R = np.einsum("ij,kjl->kil", A, points) - B
        grad = A.T @ R[grad_point] if grad_point >= 0 else None
        return 0.5 * (R**2).sum(axis=(1, 2)), grad

    def prox(V, s):
        return prox_nuclear_norm(V, lam, s)

    return oracle, prox
