"""Numba kernels for the Rank-SVM primal (Park & Choi 2013) on label scores.

All kernels are pure functions of numpy arrays, compiled with
``cache=True, nogil=True`` (as :mod:`dmlr.kernels.ranking`).

Notation. For one instance with scores ``s = M^T x`` (one entry per label),
relevant labels P (y = 1), irrelevant labels Nb (y = 0) and ``N_i = |P| |Nb|``,
the pair argument of the hinge is

    a_kl = 1 - s_k + s_l,   k in P, l in Nb.

* Pairwise hinge (eq. 5):   R_i = 1/N_i sum_{k,l} [a_kl]_+.
* Smoothed hinge (eqs. 9, 12-15): with g of eq. 14, A_i of eq. 13 and
  d(beta) = 1/2 ||beta||^2, each pair's scalar problem is

      max_{beta in [0, 1]}  beta a_kl / N_i - alpha/2 beta^2,

  solved by eq. 15, beta_hat_kl = median(1, z_l - z_k, 0) = clip(a_kl / mu, 0, 1)
  with z_k = (s_k - 1/2) / (alpha N_i), z_l = (s_l + 1/2) / (alpha N_i), i.e. a
  smoothing width (in units of a) of **mu = alpha * N_i**. The per-pair value is
  the Huberized hinge

      0                        a <= 0
      a^2 / (2 mu N_i)         0 < a < mu
      (a - mu/2) / N_i         a >= mu

  so 0 <= R_i - R_i^alpha <= alpha N_i / 2 (eq. 10 with C = max d = N_i / 2).
* Score gradient (eqs. 16-17): dR_i/ds_k = zeta_k / N_i with
  zeta_k = -sum_{l in Nb} beta_hat_kl (k in P), zeta_l = +sum_{k in P} beta_hat_kl
  (l in Nb); dR_i/dM = x (zeta / N_i)^T. The kernels return these coefficients
  ``c = zeta / N_i`` (so that the gradient of a block is X^T C).

``alpha = 0`` gives the plain hinge and a subgradient: beta_hat_kl = 1 where
a_kl > 0 and 0 where a_kl <= 0 (the choice at the kink a = 0 is 0).

A row with no pair (no relevant or no irrelevant label) has loss and
coefficients 0 (:func:`ranksvm_row_naive`); :func:`ranksvm_row` is the fast
path, whose cost its Notes give.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dmlr.kernels.rows import add_row_outer, csr_parts, relevant_labels, row_scores

#: Margin of the pairwise hinge (eq. 4: h(a) = [1 - a]_+).
RANKSVM_MARGIN = 1.0


@njit(cache=True, nogil=True, inline="always")
def _clear_and_count(y, coef_out):
    """Zero a row's coefficients ``coef_out`` and return its number of relevant labels (y != 0)."""
    n_pos = 0
    for j in range(y.shape[0]):
        coef_out[j] = 0.0
        n_pos += y[j] != 0
    return n_pos


@njit(cache=True, nogil=True)
def ranksvm_row_naive(s, y, alpha, margin, coef_out):
    """Smoothed (alpha > 0) or plain (alpha = 0) pairwise hinge of one row, by the double loop.

    Parameters
    ----------
    s : float64 (K,)
        Scores of the row.
    y : int8 (K,)
        0/1 labels.
    alpha : float
        Smoothing parameter of eq. 9 (>= 0); the width is mu = alpha * N_i.
    margin : float
        Hinge margin (1 in eq. 4).
    coef_out : float64 (K,)
        Receives dR_i/ds (eqs. 16-17 divided by x; a subgradient when alpha = 0).

    Returns
    -------
    float
        R_i (eq. 5) or its smoothing (eq. 9); 0 for a row without pairs.

    Notes
    -----
    Rows with no pair (no relevant or no irrelevant label) have N_i = 0: they
    contribute loss 0 and coefficient 0 (the sum in eq. 5 is empty; the 0/0 of
    1/N_i is taken as 0). They still count as instances in the mean of eq. 5
    (the objective divides by n, all rows), so a stochastic step on such a row is
    the regularizer's step only.

    This loop and the fast path (:func:`ranksvm_row`) both compute a_kl as
    ``s_l - (s_k - margin)``, so that they classify exact ties identically.
    """
    K = s.shape[0]
    n_pos = _clear_and_count(y, coef_out)
    n_neg = K - n_pos
    if n_pos == 0 or n_neg == 0:
        return 0.0
    n_pairs = float(n_pos * n_neg)
    mu = alpha * n_pairs
    loss = 0.0
    for k in range(K):
        if y[k] == 0:
            continue
        u = s[k] - margin
        for l in range(K):
            if y[l] != 0:
                continue
            a = s[l] - u
            if mu > 0.0:
                if a <= 0.0:
                    beta = 0.0
                elif a >= mu:
                    beta = 1.0
                    loss += a - 0.5 * mu
                else:
                    beta = a / mu
                    loss += 0.5 * a * a / mu
            else:
                if a > 0.0:
                    beta = 1.0
                    loss += a
                else:
                    beta = 0.0
            coef_out[k] -= beta
            coef_out[l] += beta
    for j in range(K):
        coef_out[j] /= n_pairs
    return loss / n_pairs


@njit(cache=True, nogil=True)
def ranksvm_row(s, y, alpha, margin, coef_out, u, v, pu1, pu2, pv1, pv2):
    """As :func:`ranksvm_row_naive`, in ``O(K log |P|)`` by sorting the relevant labels (the fast path).

    Parameters
    ----------
    s, y, alpha, margin, coef_out
        As :func:`ranksvm_row_naive`.
    u, v, pu1, pu2, pv1, pv2 : float64 scratch arrays of length >= K + 1
        Reused across rows: u holds the sorted list {s_k - margin}_{k in P}, pu1
        and pu2 its prefix sums of values and squares, v, pv1, pv2 the
        difference arrays of the relevant labels' coefficients.

    Returns
    -------
    float
        Same as :func:`ranksvm_row_naive` (up to rounding of the prefix sums).

    Notes
    -----
    With a_kl = v_l - u_k (v_l = s_l): for an irrelevant l, the relevant labels
    in the linear region (beta = 1) are u_k <= v_l - mu, those in the
    quadratic region (beta = a / mu) are v_l - mu < u_k < v_l, two runs of
    the sorted u found by binary search. The loss is summed over the
    irrelevant labels only:

        linear:     c1 (v - mu/2) - S1(u)
        quadratic:  (c2 v^2 - 2 v S1(u) + S2(u)) / (2 mu)

    and c_l = (c1 + (c2 v - S1(u)) / mu) / N_i. The same runs give the
    relevant labels' coefficients c_k = -(n1_k + (V_k - n2_k u_k) / mu) / N_i
    (n1_k, n2_k: the irrelevant labels that have k in their linear and
    quadratic run, V_k: the sum of the latter's v_l), accumulated in
    difference arrays over the sorted u. Only the relevant list is sorted:
    a multi-label row has few relevant labels among many, so the relevant list
    is the short one, and sorting the long one would cost more than the rest
    of the update.

    Cost. This function sorts the list {s_k - margin}_{k in P} (the
    paper's "sorting of two lists", Section 4, after Zhang et al. 2011, with
    only the relevant list sorted) and, with its prefix sums of values and of
    squares, finds by binary search for each irrelevant label the run of the
    sorted list in the linear region (beta = 1) and in the quadratic region
    (0 < beta < 1); the relevant labels' coefficients follow from the same runs:
    ``O(|P| log |P| + |Nb| log |P|) <= O(K log K)`` per row.
    :func:`ranksvm_row_naive` is the ``O(|P| |Nb|)`` double loop (the reference
    the tests compare against).
    """
    K = s.shape[0]
    n_pos = 0
    lab = np.empty(2 * K, dtype=np.int64)
    for j in range(K):
        coef_out[j] = 0.0
        if y[j] != 0:
            pu2[n_pos] = s[j] - margin
            lab[n_pos] = j
            n_pos += 1
    n_neg = K - n_pos
    if n_pos == 0 or n_neg == 0:
        return 0.0
    n_pairs = float(n_pos * n_neg)
    mu = alpha * n_pairs
    perm = np.argsort(pu2[:n_pos])
    for q in range(n_pos):
        u[q] = pu2[perm[q]]
        lab[K + q] = lab[perm[q]]  # the labels in sorted order
    pu1[0] = 0.0
    pu2[0] = 0.0
    for q in range(n_pos):
        pu1[q + 1] = pu1[q] + u[q]
        pu2[q + 1] = pu2[q] + u[q] * u[q]
    for q in range(n_pos + 1):
        v[q] = 0.0
        pv1[q] = 0.0
        pv2[q] = 0.0
    us = u[:n_pos]
    loss = 0.0
    for l in range(K):
        if y[l] != 0:
            continue
        vl = s[l]
        hi = np.searchsorted(us, vl, side="left")  # u_k < v_l: a > 0
        if hi == 0:
            continue
        if mu > 0.0:
            lo = np.searchsorted(us, vl - mu, side="right")  # u_k <= v_l - mu: beta = 1
            c1 = float(lo)
            c2 = float(hi - lo)
            s1 = pu1[hi] - pu1[lo]
            s2 = pu2[hi] - pu2[lo]
            loss += c1 * (vl - 0.5 * mu) - pu1[lo]
            loss += (c2 * vl * vl - 2.0 * vl * s1 + s2) / (2.0 * mu)
            coef_out[l] = (c1 + (c2 * vl - s1) / mu) / n_pairs
            v[0] += 1.0
            v[lo] -= 1.0
            pv1[lo] += 1.0
            pv1[hi] -= 1.0
            pv2[lo] += vl
            pv2[hi] -= vl
        else:
            c1 = float(hi)
            loss += c1 * vl - pu1[hi]
            coef_out[l] = c1 / n_pairs
            v[0] += 1.0
            v[hi] -= 1.0
    n1 = 0.0
    n2 = 0.0
    vsum = 0.0
    for q in range(n_pos):
        n1 += v[q]
        k = lab[K + q]
        if mu > 0.0:
            n2 += pv1[q]
            vsum += pv2[q]
            coef_out[k] = -(n1 + (vsum - n2 * us[q]) / mu) / n_pairs
        else:
            coef_out[k] = -n1 / n_pairs
    return loss / n_pairs


@njit(cache=True, nogil=True)
def pairwise_hinge_row(s, y, coef_out, u, v, pu1, pu2, pv1, pv2):
    """Plain pairwise hinge R_i (eq. 5) and a subgradient (eq. 7's dR_t): alpha = 0."""
    return ranksvm_row(s, y, 0.0, RANKSVM_MARGIN, coef_out, u, v, pu1, pu2, pv1, pv2)


@njit(cache=True, nogil=True)
def ranksvm_scores_loss(S, Y, alpha, margin, C):
    """Sum of the per-row (smoothed) pairwise hinges of a block of scores and dR/dS.

    Parameters
    ----------
    S : float64 (m, K)
        Scores X @ M.
    Y : int8 (m, K)
        0/1 labels.
    alpha : float
        Smoothing parameter (0: plain hinge and subgradient).
    margin : float
    C : float64 (m, K)
        Receives the coefficients c_i (row i: dR_i/ds_i), so that the block's
        share of the gradient of the mean loss is X^T C / n.

    Returns
    -------
    float
        sum_i R_i (not divided by the number of rows).
    """
    m, K = Y.shape
    u = np.empty(K + 1)
    v = np.empty(K + 1)
    pu1 = np.empty(K + 1)
    pu2 = np.empty(K + 1)
    pv1 = np.empty(K + 1)
    pv2 = np.empty(K + 1)
    total = 0.0
    for i in range(m):
        total += ranksvm_row(S[i], Y[i], alpha, margin, C[i], u, v, pu1, pu2, pv1, pv2)
    return total


@njit(cache=True, nogil=True)
def ranksvm_scores_loss_naive(S, Y, alpha, margin, C):
    """:func:`ranksvm_scores_loss` by the ``O(|P| |Nb|)`` double loop per row (reference)."""
    m, K = Y.shape
    total = 0.0
    for i in range(m):
        total += ranksvm_row_naive(S[i], Y[i], alpha, margin, C[i])
    return total


def block_loss_and_coef(S, Y, alpha: float = 0.0, margin: float = RANKSVM_MARGIN, naive: bool = False):
    """(sum of R_i, C (m, K)) for a block of scores; grad of the mean loss = X^T C / n.

    ``alpha = 0``: the plain hinge (eq. 5) and a subgradient; ``alpha > 0``:
    the smoothed loss of eq. 9 and its gradient (eqs. 15-17).
    """
    S = np.ascontiguousarray(S, dtype=np.float64)
    Y = np.ascontiguousarray(Y, dtype=np.int8)
    C = np.zeros(S.shape)
    fn = ranksvm_scores_loss_naive if naive else ranksvm_scores_loss
    return float(fn(S, Y, float(alpha), float(margin), C)), C


@njit(cache=True, nogil=True)
def mmp_row(s, y, coef_out):
    """MMP (Crammer & Singer 2003) isErr loss and uniform-update coefficients of one row.

    The error set is E = {(k, l) in P x Nb : s_k <= s_l} (ties are errors, as
    in the MMP paper). isErr = 1 if E is not empty, else 0. The uniform update
    gives every pair of E weight ``1/|E|``, so the perceptron step is
    m_j <- m_j - coef_j x with::

        coef_k = -#{l : (k, l) in E} / |E|   (k in P),
        coef_l = +#{k : (k, l) in E} / |E|   (l in Nb),

    computed by sorting the relevant scores only: for each irrelevant l a
    binary search gives the run of relevant labels with s_k <= s_l (the first
    c_l of the sorted list), and a difference array over the sorted list
    turns those runs into the relevant labels' counts: ``O(|P| log |P| + |Nb|
    log |P|)``. Rows without pairs (or without errors) give 0 and zero
    coefficients.

    Returns
    -------
    float
        isErr (0 or 1).
    """
    K = s.shape[0]
    n_pos = _clear_and_count(y, coef_out)
    n_neg = K - n_pos
    if n_pos == 0 or n_neg == 0:
        return 0.0
    pos = np.empty(n_pos)
    lab = np.empty(n_pos, dtype=np.int64)
    relevant_labels(s, y, pos, lab)
    perm = np.argsort(pos)
    srt = pos[perm]
    runs = np.zeros(n_pos + 1)
    n_err = 0
    for l in range(K):
        if y[l] == 0:
            c = np.searchsorted(srt, s[l], side="right")  # s_k <= s_l
            coef_out[l] = c
            n_err += c
            runs[0] += 1.0
            runs[c] -= 1.0
    if n_err == 0:
        return 0.0
    count = 0.0
    for q in range(n_pos):
        count += runs[q]
        coef_out[lab[perm[q]]] = -count
    for j in range(K):
        coef_out[j] /= n_err
    return 1.0


@njit(cache=True, nogil=True)
def _ansgd_schedule(t, lam, L):
    """(alpha_t, theta_t, eta_t, w1, w2) of Algorithm 1 at update t (1-based); Upsilon_t = w1 M_t + w2 Psi_t."""
    a = 2.0 / (t + 1.0)
    theta = lam * (a + 1.0 / (2.0 * a) - 1.0) + L
    den = lam * (1.0 - a) + theta
    return a, theta, a / (lam + theta), (1.0 - a) * (lam + theta) / den, a * theta / den


@njit(cache=True, nogil=True)
def _online_updates_dense(
    ansgd, Xd, indptr, indices, data, sparse, Y, order, M, Psi, M_avg, t0, lam, L, omega, margin, ups, s, coef, scratch
):
    d, K = M.shape
    for r in range(order.shape[0]):
        i = order[r]
        t = t0 + r + 1
        if ansgd:
            # Algorithm 1 (see dmlr.solvers.sgd.ansgd_step), fused: one pass builds Upsilon,
            # one pass updates M and Psi (M_t+1 = (1 - eta lam) Ups - eta x c^T,
            # Psi_t+1 = (theta Psi - x c^T) / (lam + theta))
            a, theta, eta, w1, w2 = _ansgd_schedule(t, lam, L)
            for j in range(d):
                for k in range(K):
                    ups[j, k] = w1 * M[j, k] + w2 * Psi[j, k]
            row_scores(i, Xd, indptr, indices, data, sparse, ups, s)
            ranksvm_row(
                s, Y[i], a, margin, coef, scratch[0], scratch[1], scratch[2], scratch[3], scratch[4], scratch[5]
            )
            shrink = 1.0 - eta * lam
            keep = theta / (lam + theta)
            for j in range(d):
                for k in range(K):
                    M[j, k] = shrink * ups[j, k]
                    Psi[j, k] = keep * Psi[j, k]
            add_row_outer(i, Xd, indptr, indices, data, sparse, coef, -eta, M)
            add_row_outer(i, Xd, indptr, indices, data, sparse, coef, -1.0 / (lam + theta), Psi)
        else:
            # eq. 7: M_t+1 = (1 - eta lam) M_t - eta x c^T, eta = 1 / (lam (t + omega))
            eta = 1.0 / (lam * (t + omega))
            row_scores(i, Xd, indptr, indices, data, sparse, M, s)
            ranksvm_row(
                s, Y[i], 0.0, margin, coef, scratch[0], scratch[1], scratch[2], scratch[3], scratch[4], scratch[5]
            )
            shrink = 1.0 - eta * lam
            for j in range(d):
                for k in range(K):
                    M[j, k] *= shrink
            add_row_outer(i, Xd, indptr, indices, data, sparse, coef, -eta, M)
        inv_t = 1.0 / t
        for j in range(d):
            for k in range(K):
                M_avg[j, k] += (M[j, k] - M_avg[j, k]) * inv_t


#: Scale below which the lazy representation is folded back into plain arrays (O(d K),
#: rare: the scales shrink geometrically only through the regularizer and ANSGD's averaging).
LAZY_MIN_SCALE = 1e-3
ANSGD, SGD, MMP = 0, 1, 2


@njit(cache=True, nogil=True)
def _lazy_fold(R, Q, U, co, two):
    """Fold the scalars back into the arrays: R = M, Q = Psi, U = -S, scales 1, sums 0.

    ``co`` = [m, r, p, PM, PR]; M = m R + r Q, Psi = p Q, S = PM R + PR Q - U.
    """
    m, r, p, PM, PR = co[0], co[1], co[2], co[3], co[4]
    d, K = R.shape
    for j in range(d):
        for k in range(K):
            rv = R[j, k]
            qv = Q[j, k] if two else 0.0
            U[j, k] = U[j, k] - PM * rv - PR * qv
            R[j, k] = m * rv + r * qv
            if two:
                Q[j, k] = p * qv
    co[0], co[1], co[2], co[3], co[4] = 1.0, 0.0, 1.0, 0.0, 0.0


@njit(cache=True, nogil=True)
def _online_updates_lazy(
    kind,
    Xd,
    indptr,
    indices,
    data,
    sparse,
    Y,
    order,
    M,
    Psi,
    M_avg,
    t0,
    lam,
    L,
    omega,
    margin,
    R,
    Q,
    U,
    co,
    resume,
    s,
    s2,
    coef,
    scratch,
):
    d, K = M.shape
    two = kind == ANSGD
    n = order.shape[0]
    if not resume:
        # M = m R + r Q, Psi = p Q, S_t = sum_{j<=t} M_j = PM R + PR Q - U; co = [m, r, p, PM, PR]
        for j in range(d):
            for k in range(K):
                R[j, k] = M[j, k]
                U[j, k] = -t0 * M_avg[j, k]
                if two:
                    Q[j, k] = Psi[j, k]
        co[0], co[1], co[2], co[3], co[4] = 1.0, 0.0, 1.0, 0.0, 0.0
    if n == 0:
        return
    for rr in range(n):
        i = order[rr]
        t = t0 + rr + 1
        if abs(co[0]) < LAZY_MIN_SCALE or (two and abs(co[2]) < LAZY_MIN_SCALE):
            _lazy_fold(R, Q, U, co, two)
        m, r, p = co[0], co[1], co[2]
        if kind == ANSGD:
            a, theta, eta, w1, w2 = _ansgd_schedule(t, lam, L)
            # Upsilon = w1 M + w2 Psi = cR R + cQ Q
            cR = w1 * m
            cQ = w1 * r + w2 * p
            row_scores(i, Xd, indptr, indices, data, sparse, R, s)
            row_scores(i, Xd, indptr, indices, data, sparse, Q, s2)
            for k in range(K):
                s[k] = cR * s[k] + cQ * s2[k]
            ranksvm_row(
                s, Y[i], a, margin, coef, scratch[0], scratch[1], scratch[2], scratch[3], scratch[4], scratch[5]
            )
            shrink = 1.0 - eta * lam
            m_new = shrink * cR
            r_new = shrink * cQ
            p_new = theta / (lam + theta) * p
            gq = -1.0 / ((lam + theta) * p_new)  # Q += gq x c^T
            g_m = -eta - r_new * gq  # m_new R += g_m x c^T
        else:
            row_scores(i, Xd, indptr, indices, data, sparse, R, s)
            for k in range(K):
                s[k] = m * s[k]
            if kind == SGD:
                eta = 1.0 / (lam * (t + omega))
                ranksvm_row(
                    s, Y[i], 0.0, margin, coef, scratch[0], scratch[1], scratch[2], scratch[3], scratch[4], scratch[5]
                )
                m_new = (1.0 - eta * lam) * m
                g_m = -eta
            else:
                if mmp_row(s, Y[i], coef) == 0.0:  # no error: M unchanged, only the sums move
                    co[3] += m
                    continue
                m_new = m
                g_m = -1.0
            r_new = 0.0
            p_new = 1.0
            gq = 0.0
        if m_new == 0.0:
            # the step drops R from M altogether: move R's share of S into U, restart R at 0
            for j in range(d):
                for k in range(K):
                    U[j, k] -= co[3] * R[j, k]
                    R[j, k] = 0.0
            m_new = 1.0
        gr = g_m / m_new
        if two:
            add_row_outer(i, Xd, indptr, indices, data, sparse, coef, gq, Q)
        add_row_outer(i, Xd, indptr, indices, data, sparse, coef, gr, R)
        add_row_outer(i, Xd, indptr, indices, data, sparse, coef, co[3] * gr + co[4] * gq, U)
        co[0], co[1], co[2] = m_new, r_new, p_new
        co[3] += m_new
        co[4] += r_new
    m, r, p, PM, PR = co[0], co[1], co[2], co[3], co[4]
    inv_t = 1.0 / (t0 + n)
    for j in range(d):
        for k in range(K):
            rv = R[j, k]
            qv = Q[j, k] if two else 0.0
            M[j, k] = m * rv + r * qv
            M_avg[j, k] = (PM * rv + PR * qv - U[j, k]) * inv_t
            if two:
                Psi[j, k] = p * qv


def online_updates(
    solver: str,
    X,
    Y,
    order,
    M,
    Psi,
    M_avg,
    t0: int,
    *,
    lam: float,
    L: float = 1.0,
    omega: float = 1e3,
    margin: float = RANKSVM_MARGIN,
    lazy: bool = True,
    carry=None,
):
    """ANSGD (Algorithm 1), SGD (eq. 7) or MMP updates over rows ``order``, in place, in one compiled loop.

    The same updates as :func:`dmlr.solvers.sgd.ansgd_step` / ``sgd_step`` /
    ``mmp_step`` with :class:`dmlr.solvers.sgd.RankSVMOracle` (MMP:
    :func:`mmp_row`), equal up to rounding, without Python or numpy
    temporaries per update.

    ``lazy=True`` (the default) costs O(nnz(x) K + K log K) per update: the
    regularizer's shrink, ANSGD's combination of M and Psi and the running
    average are kept as scalars next to arrays that change only in the rows
    of x's nonzeros (the just-in-time bookkeeping of sparse SGD; Bottou's
    scaled weights and Xu's averaged-SGD sums)::

        M = m R + r Q,   Psi = p Q,   sum_{j<=t} M_j = PM R + PR Q - U,

    with PM = sum of the m's, PR = sum of the r's. One update is a
    2 x 2 linear map of (M, Psi) (Algorithm 1: Upsilon, the shrink
    1 - eta lam, Psi's factor theta / (lam + theta)), which only changes the
    scalars, plus the rank-1 terms x c^T, which change R, Q and U in x's rows:
    Q += gq x c^T with gq = -1 / ((lam + theta) p'), R += (-eta - r' gq) / m'
    x c^T, U += (PM gR + PR gQ) x c^T (the sums taken before the update).
    SGD and MMP are the case r = 0 (no Q); MMP never shrinks (m = 1). When a
    scale falls below :data:`LAZY_MIN_SCALE` the scalars are folded back into
    the arrays (O(d K), a few times per run), so R stays within a factor
    1/LAZY_MIN_SCALE of M and the cancellation in PM R - U stays small. A
    step whose map drops R altogether (ANSGD's first: alpha_1 = 1 gives
    Upsilon_1 = Psi_1) moves R's share of the sum into U and restarts R at 0.
    ``lazy=False`` runs the plain loop (every entry of M, Psi and the average
    updated at each step: O(d K)); ANSGD and SGD only.

    Parameters
    ----------
    solver : {"ansgd", "sgd", "mmp"}
    X : float64 (n, d) dense or CSR
    Y : int8 (n, K)
    order : int64 array
    M, M_avg : float64 (d, K), C-contiguous, updated in place
    Psi : float64 (d, K) (ANSGD) or None
    t0 : int
        Updates done before the first of ``order``.
    lazy : bool
    carry : tuple, optional
        What a previous lazy call returned, when M, Psi and M_avg are that
        call's output unchanged: the run continues from its arrays and scalars
        (bit for bit the same as one longer call) instead of from M, Psi, M_avg.

    Returns
    -------
    tuple or None
        (R, Q, U, scalars) of the lazy run, for ``carry``; None when ``lazy`` is False.
    """
    K = M.shape[1]
    kind = {"ansgd": ANSGD, "sgd": SGD, "mmp": MMP}[solver]
    two = kind == ANSGD
    # the arguments both compiled loops take after their first
    problem = (
        *csr_parts(X),
        np.ascontiguousarray(Y, dtype=np.int8),
        np.asarray(order, dtype=np.int64),
        M,
        Psi if two else M,
        M_avg,
        int(t0),
        float(lam),
        float(L),
        float(omega),
        float(margin),
    )
    scratch = np.empty((6, K + 1))
    resume = carry is not None
    if not lazy:
        if kind == MMP:
            raise ValueError("the plain compiled loop covers ANSGD and SGD only")
        _online_updates_dense(
            two,
            *problem,
            np.empty_like(M) if two else np.empty((0, 0)),
            np.empty(K),
            np.empty(K),
            scratch,
        )
        return None
    if carry is None:
        carry = (np.empty_like(M), np.empty_like(M) if two else np.empty((0, 0)), np.empty_like(M), np.empty(5))
    R, Q, U, co = carry
    _online_updates_lazy(
        kind,
        *problem,
        R,
        Q,
        U,
        co,
        resume,
        np.empty(K),
        np.empty(K),
        np.empty(K),
        scratch,
    )
    return carry
