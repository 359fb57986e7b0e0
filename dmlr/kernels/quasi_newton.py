"""Numba kernel of the L-BFGS direction (:mod:`dmlr.solvers.lbfgs`).

The two-loop recursion is 4 m n flops over m stored pairs of length n, in a
sequence of dot products and axpys whose scalars depend on each other; as numpy
calls from Python each of the 4 m operations costs a call's overhead, several
times the flops for the pair counts and sizes RBRL uses.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def two_loop(g, S, Y, rho, newest, count):
    """H g for the L-BFGS inverse-Hessian model (Nocedal & Wright, Algorithm 7.4).

    Parameters
    ----------
    g : float64 (n,)
    S, Y : float64 (m, n)
        Circular buffers of the steps s_k and gradient changes y_k.
    rho : float64 (m,)
        1 / (s_k . y_k).
    newest : int
        Row of the newest pair; the ``count`` pairs before it (cyclically) are the others.
    count : int
        Stored pairs (0: H = I).

    Returns
    -------
    float64 (n,)
        H g, with H0 = (s.y / y.y) I from the newest pair.
    """
    m, n = S.shape
    q = g.copy()
    alpha = np.empty(count)
    for j in range(count):  # newest to oldest
        i = (newest - j) % m
        a = rho[i] * np.dot(S[i], q)  # BLAS: a strict-order reduction does not vectorize
        alpha[j] = a
        for k in range(n):
            q[k] -= a * Y[i, k]
    if count > 0:
        gamma = 1.0 / (rho[newest] * np.dot(Y[newest], Y[newest]))
        for k in range(n):
            q[k] *= gamma
    for j in range(count - 1, -1, -1):  # oldest to newest
        i = (newest - j) % m
        b = rho[i] * np.dot(Y[i], q)
        for k in range(n):
            q[k] += (alpha[j] - b) * S[i, k]
    return q
