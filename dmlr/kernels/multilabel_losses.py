"""Numba kernels for linear multi-label losses and the stochastic inner loop.

Losses of one row with scores ``s = x W`` (K,) and 0/1 labels ``y`` (K,), each
with its derivative ``dl/ds`` (so the row's gradient is ``x (dl/ds)^T``);
names and equations of Hiranandani & Pareek unless stated:

* ``hamming`` (eq. 16): 1/K sum_k log(1 + exp(-z_k s_k)), z = 2y - 1 (per-label
  logistic regression; the paper's ``- lambda_i ||w_i||^2`` is a sign typo
  for the usual regularizer, added by the solver as lambda/2 ||W||_F^2).
  dl/ds_k = -z_k sigmoid(-z_k s_k) / K, evaluated without overflow.
* ``subset`` (eq. 19): -sum_k y_k log softmax(s)_k = c LSE(s) - sum_k y_k s_k,
  c = sum_k y_k; dl/ds = c softmax(s) - y. Log-sum-exp is shifted by max(s).
* ``gebru`` (eqs. 20-22): 1/2 KL(p || q) + 1/2 KL(q || p), q = softmax(s), p
  the target distribution. The paper's p (1/c on the c relevant labels, 0
  elsewhere) makes KL(q || p) infinite: q > 0 everywhere, so eq. 22 divides
  by zero wherever p_k = 0 (the paper's "set of conditions in our code").
  We smooth the target instead: p = (1 - eps) y / c + eps / K (eps =
  ``GEBRU_EPS``; a row with no relevant label gets the uniform p), which keeps
  both divergences finite and the loss smooth. With log q = s - LSE(s):
  d/ds [1/2 KL(p||q)] = 1/2 (q - p) and d/ds [1/2 KL(q||p)] = 1/2 q (r - KL(q||p)),
  r = log q - log p (derivation: d log q_i / d s_j = delta_ij - q_j).
* ``rank_hinge``: Rank-SVM's pairwise hinge (Park & Choi 2013, eq. 5), averaged over
  the row's ``|P| |N|`` pairs, margin 1 (:func:`dmlr.kernels.ranksvm.ranksvm_row`,
  O(K log K)); a subgradient, so variance reduction has no smooth target here.
* ``rank_squared_hinge``: RBRL's pairwise squared hinge (Wu et al. 2020, eq. 16),
  ``1/2 1/(|P| |N|) sum max(0, 2 - s_p + s_q)^2``
  (:func:`dmlr.kernels.ranking.pairwise_squared_hinge_row`).

:func:`vr_inner_loop` runs the inner loop shared by SGD and the
variance-reduced methods (one row per step, see :mod:`dmlr.solvers.vr`) on
the rows of one block, in place; :func:`block_loss_grad` gives a block's
summed loss and ``X^T dL/dS`` for the full-gradient snapshots.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from dmlr.kernels.ranking import RANK_MARGIN, pairwise_squared_hinge_row
from dmlr.kernels.ranksvm import LAZY_MIN_SCALE, RANKSVM_MARGIN, ranksvm_row
from dmlr.kernels.rows import add_row_outer, csr_parts, row_scores

#: Loss names, in the order of their integer codes in the kernels.
LOSSES = ("hamming", "subset", "gebru", "rank_hinge", "rank_squared_hinge")
#: Target smoothing of the Gebru loss (see the module docstring).
GEBRU_EPS = 1e-3


def loss_code(name: str) -> int:
    """Integer code of a loss name (raises ValueError for an unknown one)."""
    try:
        return LOSSES.index(name)
    except ValueError:
        raise ValueError(f"loss must be one of {LOSSES}, got {name!r}") from None


@njit(cache=True, nogil=True)
def _log_softmax(s, out):
    """out = s - LSE(s); returns LSE(s)."""
    K = s.shape[0]
    mx = s[0]
    for k in range(1, K):
        mx = max(mx, s[k])
    acc = 0.0
    for k in range(K):
        acc += np.exp(s[k] - mx)
    lse = mx + np.log(acc)
    for k in range(K):
        out[k] = s[k] - lse
    return lse


@njit(cache=True, nogil=True)
def row_loss(code, s, y, g, scratch, iscratch, gebru_eps):
    """Loss of one row and its derivative ``g = dl/ds`` (overwritten).

    Parameters
    ----------
    code : int
        Index into :data:`dmlr.kernels.multilabel_losses.LOSSES`.
    s : float64 (K,)
    y : int8 (K,)
    g : float64 (K,)
        Receives dl/ds.
    scratch : float64 (8, K + 1)
        Work space.
    iscratch : int64 (K + 1,)
        Work space.
    gebru_eps : float

    Returns
    -------
    float
    """
    K = s.shape[0]
    if code == 0:  # hamming: with a = -z s and e = exp(-|a|) (one exp per label),
        loss = 0.0  # log(1 + exp(a)) = max(a, 0) + log1p(e), sigmoid(a) = 1/(1 + e) or e/(1 + e)
        for k in range(K):
            z = 1.0 if y[k] != 0 else -1.0
            a = -z * s[k]
            e = np.exp(-abs(a))
            if a > 0.0:
                loss += a + np.log1p(e)
                g[k] = -z / (1.0 + e) / K
            else:
                loss += np.log1p(e)
                g[k] = -z * e / (1.0 + e) / K
        return loss / K
    if code == 1:  # subset: c LSE - y.s
        logq = scratch[0]
        _log_softmax(s, logq)
        c = 0.0
        loss = 0.0
        for k in range(K):
            if y[k] != 0:
                c += 1.0
                loss -= logq[k]
        for k in range(K):
            g[k] = c * np.exp(logq[k]) - (1.0 if y[k] != 0 else 0.0)
        return loss
    if code == 2:  # gebru, smoothed target
        logq = scratch[0]
        logp = scratch[1]
        _log_softmax(s, logq)
        c = 0.0
        for k in range(K):
            if y[k] != 0:
                c += 1.0
        for k in range(K):
            if c > 0.0:
                p = (1.0 - gebru_eps) * (1.0 if y[k] != 0 else 0.0) / c + gebru_eps / K
            else:
                p = 1.0 / K
            logp[k] = np.log(p)
        kl_pq = 0.0
        kl_qp = 0.0
        for k in range(K):
            kl_pq += np.exp(logp[k]) * (logp[k] - logq[k])
            kl_qp += np.exp(logq[k]) * (logq[k] - logp[k])
        for k in range(K):
            q = np.exp(logq[k])
            g[k] = 0.5 * (q - np.exp(logp[k])) + 0.5 * q * ((logq[k] - logp[k]) - kl_qp)
        return 0.5 * kl_pq + 0.5 * kl_qp
    if code == 3:  # rank_hinge
        return ranksvm_row(
            s, y, 0.0, RANKSVM_MARGIN, g, scratch[0], scratch[1], scratch[2], scratch[3], scratch[4], scratch[5]
        )
    # rank_squared_hinge
    return pairwise_squared_hinge_row(
        s, y, RANK_MARGIN, g, True, scratch[0], iscratch, scratch[1], scratch[2], scratch[3], scratch[4]
    )


@njit(cache=True, nogil=True)
def _block_loss_grad(Xd, indptr, indices, data, sparse, Y, rows, W, code, gebru_eps, G, want_grad):
    m = rows.shape[0]
    K = W.shape[1]
    s = np.empty(K)
    g = np.empty(K)
    scratch = np.empty((8, K + 1))
    iscratch = np.empty(K + 1, dtype=np.int64)
    total = 0.0
    for r in range(m):
        i = rows[r]
        row_scores(i, Xd, indptr, indices, data, sparse, W, s)
        total += row_loss(code, s, Y[i], g, scratch, iscratch, gebru_eps)
        if want_grad:
            add_row_outer(i, Xd, indptr, indices, data, sparse, g, 1.0, G)
    return total


def block_loss_grad(X, Y, W, code: int, rows=None, *, want_grad: bool = True, gebru_eps: float = GEBRU_EPS):
    """Summed loss of a block's rows and ``X^T dL/dS`` (the data part of the gradient).

    Parameters
    ----------
    X : float64 (m, d) dense or CSR
    Y : int8 (m, K)
    W : float64 (d, K)
    code : int
        Loss code (:func:`loss_code`).
    rows : int64 array, optional
        Local rows to include (default all).
    want_grad : bool

    Returns
    -------
    loss : float
        Sum over the rows.
    grad : float64 (d, K) or None
        Sum over the rows of x_i (dl_i/ds)^T.

    Notes
    -----
    Row by row in Numba (no BLAS), so the result does not depend on how rows
    are grouped into blocks beyond the order of the final sums.
    """
    rows = np.arange(Y.shape[0], dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
    G = np.zeros(W.shape) if want_grad else np.zeros((0, 0))
    total = _block_loss_grad(
        *csr_parts(X),
        Y,
        rows,
        np.ascontiguousarray(W, dtype=np.float64),
        int(code),
        float(gebru_eps),
        G,
        bool(want_grad),
    )
    return total, (G if want_grad else None)


@njit(cache=True, nogil=True)
def _row_gradients(Xd, indptr, indices, data, sparse, Y, W, code, gebru_eps, U):
    K = W.shape[1]
    s = np.empty(K)
    scratch = np.empty((8, K + 1))
    iscratch = np.empty(K + 1, dtype=np.int64)
    for i in range(Y.shape[0]):
        row_scores(i, Xd, indptr, indices, data, sparse, W, s)
        row_loss(code, s, Y[i], U[i], scratch, iscratch, gebru_eps)


def row_gradients(X, Y, W, code: int, *, gebru_eps: float = GEBRU_EPS) -> np.ndarray:
    """dl_i/ds at W for every row: float64 (m, K) (the SAG/SAGA memory table)."""
    U = np.empty(Y.shape, dtype=np.float64)
    _row_gradients(*csr_parts(X), Y, np.ascontiguousarray(W, dtype=np.float64), int(code), float(gebru_eps), U)
    return U


# The inner loops take their options in these groups (Numba passes a named tuple as one struct), so that the
# three compiled loops and vr_inner_loop name each group once instead of spelling out twenty-odd arguments.
class _Schedule(NamedTuple):
    """Step sizes alpha_r = alpha0 / (1 + decay (t0 + r)) and the ridge weight ``lam`` of the inner loop."""

    lam: float
    alpha0: float
    decay: float
    t0: int


class _Reference(NamedTuple):
    """The SVRG family's reference point: ``W_ref`` and ``mu`` ((0, 0) when absent), the steps that use it."""

    W_ref: np.ndarray
    ref_mask: np.ndarray
    mu: np.ndarray


class _Memory(NamedTuple):
    """SAG/SAGA's memory table ``U`` and its mean ``A`` ((0, 0) and ``mode`` 0 when absent)."""

    U: np.ndarray
    mode: int
    scale: float
    A: np.ndarray
    n_total: int


class _Accumulators(NamedTuple):
    """``W_sum``, ``G_sum`` and ``W_capture`` of the inner loop, with whether each is wanted."""

    W_sum: np.ndarray
    want_sum: bool
    G_sum: np.ndarray
    want_gsum: bool
    capture_at: int
    W_capture: np.ndarray


@njit(cache=True, nogil=True)
def _row_work(K):
    """Work arrays of one step for K labels: s, g, g_ref, coef (K,), scratch (8, K + 1), iscratch (K + 1,)."""
    return np.empty(K), np.empty(K), np.empty(K), np.empty(K), np.empty((8, K + 1)), np.empty(K + 1, dtype=np.int64)


@njit(cache=True, nogil=True)
def _step_size(schedule, r):
    """alpha_r of step r (see :class:`_Schedule`)."""
    return schedule.alpha0 / (1.0 + schedule.decay * (schedule.t0 + r))


@njit(cache=True, nogil=True, inline="always")
def _step_coef(i, Xd, indptr, indices, data, sparse, Y, code, gebru_eps, c_ref, W_ref, memory, work):
    """Row i's loss at the scores ``s``, g = dl/ds, and the step's coefficient ``coef`` (see vr_inner_loop).

    ``work`` is (s, g, g_ref, coef, scratch, iscratch) (:func:`_row_work`).
    c = g, minus dl/ds at ``W_ref`` when ``c_ref``; with a memory table,
    c = scale (g - U_i). ``s`` is overwritten. Inlined into the loops, so
    that taking the arrays out of ``work`` and ``memory`` costs nothing per
    step (a call would count references to each).
    """
    s, g, g_ref, coef, scratch, iscratch = work
    K = s.shape[0]
    loss = row_loss(code, s, Y[i], g, scratch, iscratch, gebru_eps)
    for k in range(K):
        coef[k] = g[k]
    if c_ref:
        row_scores(i, Xd, indptr, indices, data, sparse, W_ref, s)
        row_loss(code, s, Y[i], g_ref, scratch, iscratch, gebru_eps)
        for k in range(K):
            coef[k] -= g_ref[k]
    if memory.mode != 0:
        for k in range(K):
            coef[k] = memory.scale * (g[k] - memory.U[i, k])
    return loss


@njit(cache=True, nogil=True)
def _vr_inner_loop(Xd, indptr, indices, data, sparse, Y, rows, W, code, gebru_eps, schedule, ref, memory, accum):
    d, K = W.shape
    work = _row_work(K)
    s, g, _, coef, _, _ = work
    U, A = memory.U, memory.A
    total = 0.0
    use_ref = ref.W_ref.shape[0] > 0
    use_mu = ref.mu.shape[0] > 0
    for r in range(rows.shape[0]):
        i = rows[r]
        alpha = _step_size(schedule, r)
        row_scores(i, Xd, indptr, indices, data, sparse, W, s)
        c_ref = use_ref and ref.ref_mask[r]
        total += _step_coef(i, Xd, indptr, indices, data, sparse, Y, code, gebru_eps, c_ref, ref.W_ref, memory, work)
        # W <- W - alpha (x coef^T + [mu] + [A] + lam W)   (regularizer exact, not stored)
        shrink = 1.0 - alpha * schedule.lam
        for j in range(d):
            for k in range(K):
                v = shrink * W[j, k]
                if c_ref and use_mu:
                    v -= alpha * ref.mu[j, k]
                if memory.mode != 0:
                    v -= alpha * A[j, k]
                W[j, k] = v
        add_row_outer(i, Xd, indptr, indices, data, sparse, coef, -alpha, W)
        if memory.mode != 0:
            # A = 1/n sum_i x_i u_i^T follows the table; then u_i <- g
            for k in range(K):
                coef[k] = g[k] - U[i, k]
                U[i, k] = g[k]
            add_row_outer(i, Xd, indptr, indices, data, sparse, coef, 1.0 / memory.n_total, A)
        if accum.want_sum:
            for j in range(d):
                for k in range(K):
                    accum.W_sum[j, k] += W[j, k]
        if accum.want_gsum:
            add_row_outer(i, Xd, indptr, indices, data, sparse, g, 1.0, accum.G_sum)
        if r == accum.capture_at:
            for j in range(d):
                for k in range(K):
                    accum.W_capture[j, k] = W[j, k]
    return total


@njit(cache=True, nogil=True)
def _fold_scales(V, Z, use_z, Uc, want_sum, m, r, PM, PR):
    """Fold the lazy form's scalars into V (W = m V + r Z becomes V) and Uc (W_sum = PM V + PR Z - Uc
    becomes -Uc); the caller then sets m, r, PM, PR to 1, 0, 0, 0."""
    for j in range(V.shape[0]):
        for k in range(V.shape[1]):
            zv = Z[j, k] if use_z else 0.0
            if want_sum:
                Uc[j, k] -= PM * V[j, k] + PR * zv
            V[j, k] = m * V[j, k] + r * zv


@njit(cache=True, nogil=True)
def _unfold_scales(W, W_sum, V, Z, use_z, Uc, want_sum, m, r, PM, PR):
    """W = m V + r Z and W_sum = PM V + PR Z - Uc: the lazy form written out."""
    for j in range(V.shape[0]):
        for k in range(V.shape[1]):
            zv = Z[j, k] if use_z else 0.0
            W[j, k] = m * V[j, k] + r * zv
            if want_sum:
                W_sum[j, k] = PM * V[j, k] + PR * zv - Uc[j, k]


@njit(cache=True, nogil=True)
def _vr_inner_loop_lazy(
    Xd, indptr, indices, data, sparse, Y, rows, W, code, gebru_eps, schedule, ref, memory, accum, V, Uc
):
    d, K = W.shape
    work = _row_work(K)
    s, g, _, coef, _, _ = work
    s2 = np.empty(K)
    dz = np.empty(K)
    U, A, want_sum = memory.U, memory.A, accum.want_sum
    total = 0.0
    use_ref = ref.W_ref.shape[0] > 0
    # W = m V + r Z with Z = mu (SVRG family: fixed over the loop) or A (SAG/SAGA: changes in x's rows);
    # sum of the iterates W_sum = PM V + PR Z - Uc
    zmode = 1 if (use_ref and ref.mu.shape[0] > 0) else (2 if memory.mode != 0 else 0)
    Z = ref.mu if zmode == 1 else A
    for j in range(d):
        for k in range(K):
            V[j, k] = W[j, k]
            if want_sum:
                Uc[j, k] = -accum.W_sum[j, k]
    m = 1.0
    r = 0.0
    PM = 0.0
    PR = 0.0
    for rr in range(rows.shape[0]):
        i = rows[rr]
        if abs(m) < LAZY_MIN_SCALE:
            _fold_scales(V, Z, zmode != 0, Uc, want_sum, m, r, PM, PR)
            m, r, PM, PR = 1.0, 0.0, 0.0, 0.0
        alpha = _step_size(schedule, rr)
        row_scores(i, Xd, indptr, indices, data, sparse, V, s)
        if zmode != 0:
            row_scores(i, Xd, indptr, indices, data, sparse, Z, s2)
            for k in range(K):
                s[k] = m * s[k] + r * s2[k]
        else:
            for k in range(K):
                s[k] = m * s[k]
        c_ref = use_ref and ref.ref_mask[rr]
        total += _step_coef(i, Xd, indptr, indices, data, sparse, Y, code, gebru_eps, c_ref, ref.W_ref, memory, work)
        # W <- (1 - alpha lam) W - alpha ([mu] + [A]) - alpha x coef^T: the first two change m and r only
        shrink = 1.0 - alpha * schedule.lam
        m_new = shrink * m
        r_new = shrink * r
        if (zmode == 1 and c_ref) or zmode == 2:
            r_new -= alpha
        if m_new == 0.0:
            for j in range(d):
                for k in range(K):
                    if want_sum:
                        Uc[j, k] -= PM * V[j, k]
                    V[j, k] = 0.0
            m_new = 1.0
        if zmode == 2:
            # A += x (g - U_i)^T / n and U_i <- g; V absorbs both rank-1 terms: m' dV = -alpha x coef^T - r' dA
            for k in range(K):
                dz[k] = (g[k] - U[i, k]) / memory.n_total
                U[i, k] = g[k]
                coef[k] = (-alpha * coef[k] - r_new * dz[k]) / m_new
            add_row_outer(i, Xd, indptr, indices, data, sparse, coef, 1.0, V)
            add_row_outer(i, Xd, indptr, indices, data, sparse, dz, 1.0, A)
            if want_sum:
                for k in range(K):
                    coef[k] = PM * coef[k] + PR * dz[k]
                add_row_outer(i, Xd, indptr, indices, data, sparse, coef, 1.0, Uc)
        else:
            add_row_outer(i, Xd, indptr, indices, data, sparse, coef, -alpha / m_new, V)
            if want_sum:
                add_row_outer(i, Xd, indptr, indices, data, sparse, coef, -alpha / m_new * PM, Uc)
        m = m_new
        r = r_new
        PM += m
        PR += r
        if accum.want_gsum:
            add_row_outer(i, Xd, indptr, indices, data, sparse, g, 1.0, accum.G_sum)
        if rr == accum.capture_at:
            for j in range(d):
                for k in range(K):
                    accum.W_capture[j, k] = m * V[j, k] + (r * Z[j, k] if zmode != 0 else 0.0)
    _unfold_scales(W, accum.W_sum, V, Z, zmode != 0, Uc, want_sum, m, r, PM, PR)
    return total


#: Rows whose scores the dense inner loop computes together (see :func:`vr_inner_loop`):
#: large enough for the block products to run as matrix products, small enough that the
#: in-block corrections (O(B^2 K) per block) stay below the products' cost.
DENSE_BLOCK_ROWS = 16


@njit(cache=True, nogil=True)
def _vr_inner_loop_dense(Xd, Y, rows, W, code, gebru_eps, schedule, ref, accum, n_block):
    # The lazy loop's W = m V + r mu and W_sum = PM V + PR mu - Uc, with V's rank-1 changes of
    # n_block consecutive steps deferred: their rows' scores come from one product X_B V, corrected
    # by the Gram matrix X_B X_B^T for the changes made earlier in the block, and the changes land in
    # V (and Uc, G_sum) as one product X_B^T C_B at the block's end.
    d, K = W.shape
    nr = rows.shape[0]
    W_ref, mu, G_sum, want_sum = ref.W_ref, ref.mu, accum.G_sum, accum.want_sum
    use_ref = W_ref.shape[0] > 0
    zmode = use_ref and mu.shape[0] > 0
    s, g, g_ref, coef, scratch, iscratch = _row_work(K)
    XB = np.empty((n_block, d))
    CV = np.empty((n_block, K))
    CU = np.empty((n_block, K))
    CG = np.empty((n_block, K))
    V = W.copy()
    Uc = np.empty((0, 0))
    if want_sum:
        Uc = -accum.W_sum
    m = 1.0
    r = 0.0
    PM = 0.0
    PR = 0.0
    total = 0.0
    start = 0
    while start < nr:
        if abs(m) < LAZY_MIN_SCALE:
            _fold_scales(V, mu, zmode, Uc, want_sum, m, r, PM, PR)
            m, r, PM, PR = 1.0, 0.0, 0.0, 0.0
        b = min(n_block, nr - start)
        if start <= accum.capture_at < start + b:
            b = accum.capture_at - start + 1
        for t in range(b):
            i = rows[start + t]
            for j in range(d):
                XB[t, j] = Xd[i, j]
        Xb = XB[:b]
        S = Xb @ V
        G = Xb @ Xb.T
        Sz = Xb @ mu if zmode else S
        Sr = Xb @ W_ref if use_ref else S
        done = b
        for t in range(b):
            if t > 0 and abs(m) < LAZY_MIN_SCALE:
                done = t  # fold the scale back first (next block)
                break
            rr = start + t
            i = rows[rr]
            alpha = _step_size(schedule, rr)
            for k in range(K):
                acc = S[t, k]
                for q in range(t):
                    acc += G[t, q] * CV[q, k]
                s[k] = m * acc + (r * Sz[t, k] if zmode else 0.0)
            total += row_loss(code, s, Y[i], g, scratch, iscratch, gebru_eps)
            for k in range(K):
                coef[k] = g[k]
            c_ref = use_ref and ref.ref_mask[rr]
            if c_ref:
                for k in range(K):
                    s[k] = Sr[t, k]
                row_loss(code, s, Y[i], g_ref, scratch, iscratch, gebru_eps)
                for k in range(K):
                    coef[k] -= g_ref[k]
            shrink = 1.0 - alpha * schedule.lam
            m_new = shrink * m
            r_new = shrink * r
            if zmode and c_ref:
                r_new -= alpha
            f = -alpha / m_new
            for k in range(K):
                CV[t, k] = f * coef[k]
                CU[t, k] = f * PM * coef[k]
                CG[t, k] = g[k]
            m = m_new
            r = r_new
            PM += m
            PR += r
        Xd_done = XB[:done]
        V += Xd_done.T @ CV[:done]
        if want_sum:
            Uc += Xd_done.T @ CU[:done]
        if accum.want_gsum:
            G_sum += Xd_done.T @ CG[:done]
        start += done
        if start - 1 == accum.capture_at:
            for j in range(d):
                for k in range(K):
                    accum.W_capture[j, k] = m * V[j, k] + (r * mu[j, k] if zmode else 0.0)
    _unfold_scales(W, accum.W_sum, V, mu, zmode, Uc, want_sum, m, r, PM, PR)
    return total


def _no_zero_shrink(n_steps, lam, alpha0, decay, t0) -> bool:
    """Whether no step's shrink 1 - alpha_r lam is exactly 0 (where W restarts from its dense terms)."""
    alpha = alpha0 / (1.0 + decay * (t0 + np.arange(n_steps, dtype=np.float64)))
    return not np.any(1.0 - alpha * lam == 0.0)


def vr_inner_loop(
    X,
    Y,
    rows,
    W,
    code: int,
    *,
    lam: float,
    alpha0: float,
    decay: float = 0.0,
    t0: int = 0,
    W_ref=None,
    ref_mask=None,
    mu=None,
    U=None,
    mem_scale: float = 1.0,
    A=None,
    n_total: int = 1,
    W_sum=None,
    G_sum=None,
    capture_at: int = -1,
    W_capture=None,
    gebru_eps: float = GEBRU_EPS,
    lazy: bool = True,
) -> float:
    """One row per step over ``rows`` of a block; updates W (and the optional accumulators) in place.

    Step r (row i = rows[r]), alpha_r = alpha0 / (1 + decay (t0 + r)), g = dl_i/ds at W::

        W <- W - alpha_r (x_i c^T + [mu] + [A] + lam W)

    * plain SGD: c = g;
    * with ``W_ref`` (SVRG family) and ``ref_mask[r]`` true:
      c = g - dl_i/ds(W_ref) and ``mu`` (the data part of the snapshot
      gradient) is added; a false mask entry (Mixed SVRG outside its batch)
      is a plain SGD step;
    * with a memory table ``U`` (n_block, K) and its mean ``A`` =
      1/n sum_i x_i U_i^T (SAGA: ``mem_scale`` = 1; SAG: 1/n): c =
      mem_scale (g - U_i), then A and U_i follow g. For a linear model the
      stored gradient x_i U_i^T is one scalar per label: n x K memory, not
      n x d x K.

    The regularizer lam W is applied exactly at every step, not through the
    reference point or the memory (the usual SAGA/SVRG treatment of a known
    deterministic term).

    Accumulators: ``W_sum`` += W after each step (SVRG option 2, VR-Lite),
    ``G_sum`` += x_i g^T (VR-Lite), ``W_capture`` = W after step
    ``capture_at`` (SVRG option 3, S2GD, Batching/Mixed SVRG).

    ``lazy=True`` (the default) costs O(nnz(x_i) K) per step instead of
    O(d K): W is kept as m V + r Z, with Z the fixed ``mu`` (SVRG family) or
    the table mean ``A`` (SAG/SAGA), so the shrink and the dense terms change
    the scalars m, r only, and V (and A) change in x_i's rows; ``W_sum`` is
    kept as PM V + PR Z - Uc (PM, PR the sums of the m's and r's, Uc
    collecting the rank-1 changes of V and Z weighted by them), the
    bookkeeping of :func:`dmlr.kernels.ranksvm.online_updates`. The scalars
    fold back into V when m falls below
    :data:`dmlr.kernels.ranksvm.LAZY_MIN_SCALE`. ``lazy=False`` runs the
    plain loop (every entry of W each step); both give the same W up to
    rounding. On a dense block without a memory table the lazy form saves
    little (x_i has d nonzeros), so there ``lazy=True`` defers V's rank-1
    changes instead: the scores of :data:`DENSE_BLOCK_ROWS` consecutive steps
    come from one matrix product X_B V, corrected by the Gram matrix
    X_B X_B^T for the changes made earlier in the block, and the changes land
    as one product X_B^T C_B. The steps, their order and their values are
    those of the loop; only the summation order of the scores differs, as a
    BLAS product's does.

    Returns
    -------
    float
        Sum of the rows' losses at the iterate each was evaluated at.
    """
    none2 = np.zeros((0, 0))
    rows = np.asarray(rows, dtype=np.int64)
    schedule = _Schedule(float(lam), float(alpha0), float(decay), int(t0))
    ref = _Reference(
        W_ref if W_ref is not None else none2,
        np.ones(rows.shape[0], dtype=np.bool_) if ref_mask is None else np.asarray(ref_mask, dtype=np.bool_),
        mu if mu is not None else none2,
    )
    accum = _Accumulators(
        W_sum if W_sum is not None else none2,
        W_sum is not None,
        G_sum if G_sum is not None else none2,
        G_sum is not None,
        int(capture_at),
        W_capture if W_capture is not None else none2,
    )
    if lazy and U is None and not hasattr(X, "indptr") and _no_zero_shrink(rows.shape[0], lam, alpha0, decay, t0):
        Xd = np.ascontiguousarray(X, dtype=np.float64)
        return _vr_inner_loop_dense(Xd, Y, rows, W, int(code), float(gebru_eps), schedule, ref, accum, DENSE_BLOCK_ROWS)
    memory = _Memory(
        U if U is not None else none2,
        0 if U is None else 1,
        float(mem_scale),
        A if A is not None else none2,
        int(n_total),
    )
    args = (*csr_parts(X), Y, rows, W, int(code), float(gebru_eps), schedule, ref, memory, accum)
    if lazy and not (W_ref is not None and mu is not None and U is not None):
        return _vr_inner_loop_lazy(*args, np.empty_like(W), np.empty_like(W) if W_sum is not None else none2)
    return _vr_inner_loop(*args)
