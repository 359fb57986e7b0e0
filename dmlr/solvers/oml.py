r"""Online Metric Learning's update (Gong, Yang, Yuan & Bao, AAAI 2020; seed 001), Algorithm 1; no Dask.

The model and its prediction are :mod:`dmlr.models.oml`. This module holds
the update of V for one round (:func:`oml_update`) and the loop over the
streamed rows (:func:`oml_train_stream`): nearest neighbour of each row in
the memory D (Euclidean, in the input space), the loss l_t of eq. (4), the
update when l_t > 0, then the row appended to D.

The derivation of the update, (D1)-(D9), is in the Notes of
:func:`oml_update`; the other functions cite its steps. The paper's eqs.
(5)-(7) have typos, and the code follows the derivation.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq

from dmlr.data.arrays import as_matrix
from dmlr.kernels.knn import chunk_top_k, merge_top_k

#: Eq. (7) bounds of lambda_t used in the paper's experiments (Sec. V-B).
LAMBDA_MIN, LAMBDA_MAX = 1e-5, 1e5
LAMBDA_RULES = ("exact", "cubic")


# ---------------------------------------------------------------------------------------------
# The update of V (oml_update's Notes, D1-D9)
# ---------------------------------------------------------------------------------------------


def rank2_eigen(a, b, V):
    """Eigen-pairs of A = a a^T - b b^T and the weights w_i = ||V^T e_i||^2 (D4).

    Parameters
    ----------
    a, b : float64 ndarray (q,)
    V : float64 ndarray (q, d)

    Returns
    -------
    mu : float64 (2,)
        Eigenvalues, descending (mu[0] >= 0 >= mu[1]).
    E : float64 (q, 2)
        Orthonormal eigenvectors.
    Z : float64 (d, 2)
        ``V^T E``.
    """
    U = np.column_stack([a, b])
    Qo, R = np.linalg.qr(U)
    B = R @ np.diag([1.0, -1.0]) @ R.T
    mu, W = np.linalg.eigh((B + B.T) / 2)
    mu, W = mu[::-1], W[:, ::-1]
    E = Qo @ W
    return mu, E, V.T @ E


def cubic_coefficients(mu, w, delta):
    """(a, b, c) of the cubic f of eq. (7), derived in (D9): tau_k = sum mu_i^k w_i."""
    tau1, tau2, tau3 = (float(np.sum(mu**k * w)) for k in (1, 2, 3))
    return -4.0 * tau3, -2.0 * tau2, float(delta) - tau1


def cubic_max_point(a, b, c):
    """beta, the maximum point of f(lam) = a lam^3 + b lam^2 + c lam on lam > 0, or None.

    Requires c > 0 (f'(0) = l_t > 0). None when f increases on all lam > 0 (D9).
    """
    if a == 0.0:
        return (-c / (2.0 * b)) if b < 0 else None
    disc = 4.0 * b * b - 12.0 * a * c  # of f'(lam) = 3a lam^2 + 2b lam + c
    if disc < 0:
        return None  # a > 0 here: f' > 0 everywhere
    s = math.sqrt(disc)
    # numerically stable roots of the quadratic 3a x^2 + 2b x + c
    qq = -0.5 * (2.0 * b + math.copysign(s, b if b != 0 else 1.0))
    r1, r2 = (qq / (3.0 * a), c / qq) if qq != 0 else (0.0, 0.0)
    lo, hi = sorted((r1, r2))
    if a < 0:
        return hi  # roots of opposite signs (product c/3a < 0): the positive one
    return lo if lo > 0 else None  # a > 0, both roots positive: f' + then - at the smaller


def exact_lambda(mu, w, delta):
    """lam*, the maximiser of the dual (D6)-(D7), and u* = 1 - 2 lam* mu_1; (None, None) without a root."""
    mu1, mu2 = float(mu[0]), float(mu[1])
    w1, w2 = float(w[0]), float(w[1])
    c1 = mu1 * w1
    if not c1 > 0:
        return None, None
    c2 = mu2 * w2  # <= 0
    r = mu2 / mu1

    def h(u):
        return c1 / (u * u) + c2 / (1.0 - (1.0 - u) * r) ** 2 - delta

    lo = math.sqrt(c1 / (delta - c2))
    hi = min(1.0, math.sqrt(c1 / delta))
    if h(hi) >= 0:  # at u = 1 (lam = 0) h = -l_t < 0; guard rounding
        u = hi
    elif h(lo) <= 0:
        u = lo
    else:
        u = brentq(h, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=200)
    return (1.0 - u) / (2.0 * mu1), u


def oml_update(V, a, b, delta, *, lambda_min=LAMBDA_MIN, lambda_max=LAMBDA_MAX, lambda_rule="exact"):
    """One round of Algorithm 1 with l_t > 0: lambda_t (eq. 7) and V_{t+1} (D3-D4).

    Parameters
    ----------
    V : float64 ndarray (q, d)
        V_t.
    a, b : float64 ndarray (q,)
        ``P^T x_t - y`` (neighbour's labels) and ``P^T x_t - y_t``.
    delta : float
        ``||y_t - y||_1``.
    lambda_min, lambda_max : float
        m and M of eq. (7).
    lambda_rule : {"exact", "cubic"}
        The exact dual maximiser (D6) or the paper's cubic (D9).

    Returns
    -------
    V_new : float64 ndarray (q, d)
    lam : float
        lambda_t.
    clipped : bool
        Whether lambda_t is not the (exact or cubic) maximum point.

    Notes
    -----
    Derivation of the update (the paper's eqs. 5-7 have typos; this is what
    the code does).

    Round t, neighbour (x, y) of x_t in D. Let ``a = P^T x_t - y``,
    ``b = P^T x_t - y_t``, ``Delta = ||y_t - y||_1``, ``A = a a^T - b b^T``
    (q x q, symmetric, rank <= 2), ``Q_t = V_t V_t^T``.

    (D1) ``||V^T a||^2 - ||V^T b||^2 = tr(V^T A V)``, so eq. (3)'s constraint
         ``l(V) = 0`` is ``tr(V^T A V) >= Delta`` and eq. (4) is
         ``l_t = max(0, Delta - tr(Q_t A))``. If Delta = 0 then a = b and l_t = 0.
    (D2) Lagrangian of eq. (2) (eq. 5 with its typo fixed: its first distance is
         to y, not y_t): ``L(V, lam) = 1/2 ||V - V_t||_F^2 + lam (Delta - tr(V^T A V))``.
    (D3) ``dL/dV = V - V_t - 2 lam A V = 0``  =>  ``V(lam) = (I - 2 lam A)^{-1} V_t``,
         i.e. Algorithm 1 line 9, ``V^T = V_t^T (I - 2 lam A)^{-1}`` (A symmetric).
    (D4) A = mu_1 e_1 e_1^T + mu_2 e_2 e_2^T with mu_1 >= 0 >= mu_2 (from the QR of
         [a b] and a 2 x 2 eigen-decomposition). With ``z_i = V_t^T e_i`` and
         ``w_i = ||z_i||^2``:  ``V(lam) = V_t + sum_i e_i z_i^T 2 lam mu_i / (1 - 2 lam mu_i)``,
         an O(qd) update (no q x q inverse).
    (D5) For 0 <= lam < 1/(2 mu_1), I - 2 lam A is positive definite, L is strongly
         convex in V and (D3) minimises it: the dual function is
         ``D(lam) = L(V(lam), lam)`` and (envelope theorem)
         ``D'(lam) = Delta - g(lam)``, ``g(lam) = tr(V(lam)^T A V(lam)) = sum_i mu_i w_i / (1 - 2 lam mu_i)^2``.
    (D6) ``g'(lam) = sum_i 4 mu_i^2 w_i / (1 - 2 lam mu_i)^3 >= 0`` on that interval,
         ``g(0) = tr(Q_t A) = Delta - l_t < Delta`` and g -> +inf at the pole when
         w_1 > 0. So D is concave, increasing at 0, with a unique maximiser
         lam* in (0, 1/(2 mu_1)) where ``g(lam*) = Delta``: V(lam*) satisfies the
         constraint of eq. (2) with equality. This lam* is eq. (7)'s beta, "the
         maximum point of f", for the exact dual f = D. (Eq. (2) is a QCQP with one
         constraint, so by the S-lemma -- Boyd & Vandenberghe App. B, the paper's
         [26] -- there is no duality gap and V(lam*) is its global solution.)
    (D7) Root: with ``u = 1 - 2 lam mu_1 in (0, 1]``,
         ``h(u) = mu_1 w_1 / u^2 + mu_2 w_2 / (1 - (1 - u) mu_2/mu_1)^2 - Delta``
         is decreasing, with the root in ``[sqrt(mu_1 w_1 / (Delta + |mu_2| w_2)), min(1, sqrt(mu_1 w_1 / Delta))]``
         (the second term lies in [mu_2 w_2, 0]); Brent's method to machine
         precision; ``lam* = (1 - u*) / (2 mu_1)`` and the e_1 factor of (D4) is
         ``(1 - u*)/u*``, computed from u* to keep full precision.
    (D8) Eq. (7): ``lam_t = min(max(lam*, m), M)``; with no root (mu_1 w_1 = 0:
         D increasing for every lam) lam_t = M. One deviation: if m >= 1/(2 mu_1),
         raising lam* to m would make I - 2 lam A singular, so lam* is kept
         (counted in ``n_clipped_`` like the other clips).
    (D9) The paper's cubic (``lambda_rule="cubic"``): putting eq. (6)'s first-order
         ``V = (I + 2 lam A) V_t`` into (D2) gives, with ``tau_k = tr(Q_t A^k) = sum_i mu_i^k w_i``,
         ``f(lam) = 2 lam^2 tau_2 + lam Delta - lam (tau_1 + 4 lam tau_2 + 4 lam^2 tau_3)
         = a lam^3 + b lam^2 + c lam`` with
         ``a = -4 tau_3 = 4 (b^T A Q A b - a^T A Q A a)`` (the paper's a),
         ``b = -2 tau_2 = -2 ||V_t^T A||_F^2`` (the paper's b has the Frobenius
         term with the wrong sign and a repeated term) and ``c = Delta - tau_1 = l_t``.
         Since f'(0) = l_t > 0, the maximum point beta is the first positive root
         of ``f'(lam) = 3 a lam^2 + 2 b lam + c`` at which f' goes from + to -:
         the positive root if a < 0; the smaller root if a > 0 and the
         discriminant is >= 0 (otherwise f increases on lam > 0: lam_t = M);
         ``-c / (2 b)`` if a = 0 and b < 0. ``f'(lam) = l_t - 4 tau_2 lam - 12 tau_3 lam^2``
         is the second-order Taylor truncation of ``Delta - g(lam)``
         (g = tau_1 + 4 tau_2 lam + 12 tau_3 lam^2 + 32 tau_4 lam^3 + ...), so beta
         approximates lam* only for small lam, and with "cubic" the constraint of
         eq. (2) holds only approximately. The update is (D3)/(D4) in both cases.
    """
    mu, E, Z = rank2_eigen(a, b, V)
    w = np.einsum("ij,ij->j", Z, Z)
    u = None
    if lambda_rule == "exact":
        lam, u = exact_lambda(mu, w, delta)
    else:
        lam = cubic_max_point(*cubic_coefficients(mu, w, delta))
    clipped = lam is None
    pole = 1.0 / (2.0 * mu[0]) if mu[0] > 0 else np.inf
    if lam is None:
        lam = lambda_max
    elif lam > lambda_max:
        lam, clipped, u = lambda_max, True, None
    elif lam < lambda_min:
        clipped = True
        if lambda_min < pole:  # (D8): never raise lam past the pole
            lam, u = lambda_min, None
    factors = np.empty(2)
    for i in range(2):
        if i == 0 and u is not None:
            factors[i] = (1.0 - u) / u
        else:
            den = 1.0 - 2.0 * lam * mu[i]
            factors[i] = 2.0 * lam * mu[i] / den if (w[i] > 0 and den != 0) else 0.0
    V_new = V + (E * factors) @ Z.T
    return V_new, float(lam), bool(clipped)


def margin(V, a, b) -> float:
    """``||V^T a||^2 - ||V^T b||^2`` (D1)."""
    va, vb = V.T @ a, V.T @ b
    return float(va @ va - vb @ vb)


def _take_rows(X, rows):
    return X[rows] if len(rows) else X[:0]


def oml_train_stream(stream, P, V, memory, init_mask, offset, params):
    """Algorithm 1 over a stream of row blocks, in this process (the model runs it where the data are read).

    Parameters
    ----------
    stream : iterable of blocks
        The rows in training order (global index ``offset + i``): blocks
        with ``X`` (dense or CSR float64), ``Y`` (int8 0/1) and ``n_rows``,
        iterated twice when ``init_mask`` is given; the stream has
        ``n_rows`` and ``n_labels`` (:class:`dmlr.distributed.stream.ChunkStream`).
    P : float64 (p, q)
    V : float64 (q, d)
        V_1 (copied).
    memory : (X, Y) or None
        The memory D before this stream (global indices 0..len-1), or None.
    init_mask : bool ndarray (n,) or None
        Stream rows that initialise D (read in a first pass; not updated on).
    offset : int
        Global index of the stream's first row.
    params : dict
        ``lambda_min``, ``lambda_max``, ``lambda_rule``.

    Returns
    -------
    dict
        ``V`` (q, d), ``losses`` (l_t of every streamed row, float64), ``n_clipped``.
    """
    V = np.array(V, dtype=np.float64, copy=True)
    n, q = stream.n_rows, stream.n_labels
    d_blocks = []  # (X rows, their global indices)
    labels = np.zeros((offset + n, q), dtype=np.int8)
    if memory is not None:
        Xm, Ym = memory
        d_blocks.append((as_matrix(Xm), np.arange(offset, dtype=np.int64)))
        labels[:offset] = np.asarray(Ym, dtype=np.int8)
    if init_mask is not None:  # pass 1: the initial memory
        row0 = 0
        for blk in stream:
            rows = np.flatnonzero(init_mask[row0 : row0 + blk.n_rows])
            if rows.size:
                d_blocks.append((_take_rows(blk.X, rows), offset + row0 + rows))
                labels[offset + row0 + rows] = blk.Y[rows]
            row0 += blk.n_rows
    losses, n_clipped = [], 0
    kw = {"lambda_min": params["lambda_min"], "lambda_max": params["lambda_max"], "lambda_rule": params["lambda_rule"]}
    row0 = 0
    for blk in stream:  # pass 2: Algorithm 1, rows in order
        nb = blk.n_rows
        sel = np.arange(nb) if init_mask is None else np.flatnonzero(~init_mask[row0 : row0 + nb])
        if sel.size == 0:
            row0 += nb
            continue
        Xs, Ys, g = _take_rows(blk.X, sel), blk.Y[sel], offset + row0 + sel
        # line 5: nearest neighbour of each row among D and the earlier rows of this chunk,
        # batched (the neighbour does not depend on V); ties to the lower global index
        parts = [chunk_top_k(Xs, DX, 1, Dg) for DX, Dg in d_blocks]
        parts.append(chunk_top_k(Xs, Xs, 1, g, max_index=g))
        _, nn = merge_top_k(parts, 1)
        labels[g] = Ys  # a row's neighbour may be an earlier row of this chunk
        PX = np.asarray(Xs @ P)
        for i in range(sel.size):
            j = nn[i, 0]
            if j < 0:  # empty memory: nothing to compare with
                losses.append(0.0)
                continue
            yt, y = Ys[i].astype(np.float64), labels[j].astype(np.float64)
            delta = float(np.abs(yt - y).sum())
            loss = 0.0
            if delta > 0:  # Delta = 0 => a = b => l_t = 0 (D1)
                a, b = PX[i] - y, PX[i] - yt
                loss = max(0.0, delta - margin(V, a, b))  # eq. (4)
                if loss > 0:  # lines 7-9
                    V, _, clipped = oml_update(V, a, b, delta, **kw)
                    n_clipped += clipped
            losses.append(loss)
        d_blocks.append((Xs, g))  # line 13: append to D
        row0 += nb
    return {"V": V, "losses": np.asarray(losses, dtype=np.float64), "n_clipped": int(n_clipped)}
