"""Numba kernels of the L-BFGS model's algebra (:class:`dmlr.solvers.lbfgs.Pairs`).

The compact form of the L-BFGS inverse Hessian needs, besides 4 BLAS
matrix-vector products over the m stored pairs, two triangular solves and a
product with m x m matrices. As numpy and scipy calls from Python these cost
more than their flops for the pair counts RBRL uses (m <= 100): compiled, they
take a few microseconds (:func:`compact_coefficients`). For a wide model
(thousands of features times hundreds of labels) the work on vectors of W's
size is memory-bound, and numpy's expressions make and read temporaries of
that size: a new pair's curvature test (:func:`pair_products`) and the gradient
in the intercept's variables (:func:`intercept_gradient`) are compiled single
passes instead.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def compact_coefficients(a, b, SY, YY, order):
    """The coefficients of ``H g = gamma g + S^T p - gamma Y^T u`` (the compact form).

    With the pairs in chronological order ``order`` (slots, oldest first), R
    the upper triangle of S^T Y and D its diagonal (Byrd, Nocedal & Schnabel
    1994, eq. 3.13)::

        u = R^-1 a,    p = R^-T (D u + gamma Y^T Y u - gamma b),    gamma = s.y / y.y (newest)

    Parameters
    ----------
    a, b : float64 (c,)
        S g and Y g, by slot.
    SY, YY : float64 (m, m)
        ``SY[i, j] = s_i . y_j`` (i not newer than j) and ``YY[i, j] = y_i . y_j``, by slot.
    order : int64 (c,)
        The slots of the c pairs, oldest first.

    Returns
    -------
    p, u : float64 (c,)
        By slot.
    gamma : float
    """
    c = order.shape[0]
    newest = order[c - 1]
    gamma = SY[newest, newest] / YY[newest, newest]
    u = np.empty(c)  # chronological
    for i in range(c - 1, -1, -1):  # back substitution: R u = a
        oi = order[i]
        acc = a[oi]
        for j in range(i + 1, c):
            acc -= SY[oi, order[j]] * u[j]
        u[i] = acc / SY[oi, oi]
    rhs = np.empty(c)
    for i in range(c):
        oi = order[i]
        acc = SY[oi, oi] * u[i] - gamma * b[oi]
        for j in range(c):
            acc += gamma * YY[oi, order[j]] * u[j]
        rhs[i] = acc
    p = np.empty(c)
    for i in range(c):  # forward substitution: R^T p = rhs
        oi = order[i]
        acc = rhs[i]
        for j in range(i):
            acc -= SY[order[j], oi] * p[j]
        p[i] = acc / SY[oi, oi]
    ps, us = np.empty(c), np.empty(c)
    for i in range(c):
        ps[order[i]] = p[i]
        us[order[i]] = u[i]
    return ps, us, gamma


@njit(cache=True, nogil=True)
def pair_products(x_new, x, g_new, g):
    """``(s . y, s . s, y . y, s . g_new, y . g_new)`` for ``s = x_new - x`` and ``y = g_new - g``
    (float64 (n,) each), in one pass that forms neither s nor y: what L-BFGS needs to decide
    whether to keep the pair before it writes the pair over the oldest one, and the new pair's
    products with the new gradient, which the next direction needs."""
    sy = 0.0
    ss = 0.0
    yy = 0.0
    sg = 0.0
    yg = 0.0
    for i in range(x.shape[0]):
        s = x_new[i] - x[i]
        y = g_new[i] - g[i]
        sy += s * y
        ss += s * s
        yy += y * y
        sg += s * g_new[i]
        yg += y * g_new[i]
    return sy, ss, yy, sg, yg


@njit(cache=True, nogil=True)
def intercept_gradient(G, mean, scale, out):
    """``T^T G`` for the intercept's change of variables ``W = T V``
    (:class:`dmlr.solvers.lbfgs.InterceptVariables`): ``G[:-1] - mean G[-1]^T`` over the
    feature rows, ``scale G[-1]`` in the last, in one pass (numpy would make the outer
    product, a temporary of W's size, and read it again).

    Parameters
    ----------
    G : float64 (d, l)
        A gradient in W (not written).
    mean : float64 (d - 1,)
    scale : float
    out : float64 (d, l), written

    Returns
    -------
    out
    """
    d1 = G.shape[0] - 1
    last = G[d1]
    for i in range(d1):
        m = mean[i]
        for k in range(G.shape[1]):
            out[i, k] = G[i, k] - m * last[k]
    for k in range(G.shape[1]):
        out[d1, k] = scale * last[k]
    return out
