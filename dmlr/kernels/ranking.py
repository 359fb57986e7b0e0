"""Numba kernels for the RBRL losses on one row chunk of scores.

All kernels are pure functions of numpy arrays, compiled with
``cache=True, nogil=True`` so that dask worker threads run them in parallel
and a worker compiles them once per machine, not once per process start.

Notation (Wu et al. 2020): for instance i with scores ``s`` (one row
of ``X @ W``), relevant labels P and irrelevant labels N::

    BR term (eq. 5, first term):  1/2 sum_j max(0, 1 - y_j s_j)^2, y in {-1, +1}
    pairwise term f_r (eq. 16):   1/2 * 1/(|P||N|) sum_{p in P, q in N}
                                  max(0, margin - s_p + s_q)^2, margin = 2

The derivative of the pairwise term with respect to the scores (eq. 19, before
the product with x_i) is, per row::

    d/ds_p = -1/(|P||N|) sum_{q in N} h_pq,   d/ds_q = +1/(|P||N|) sum_{p in P} h_pq,
    h_pq = max(0, margin - s_p + s_q).

:func:`pairwise_squared_hinge_row` has two evaluations:

* direct, ``O(|P| l)``, for rows with at most :data:`DIRECT_MAX_POS` relevant
  labels (nearly every row of typical sets): for each relevant p, one
  branch-free pass over all l labels, h = max(0, margin - s_p + s_j) masked to
  the irrelevant j. The pass vectorizes (SIMD), which the sorted path's
  data-dependent loop does not, so for the few relevant labels per row of
  typical sets it is the faster of the two.
* sorted, ``O((|P| + |N|) log |P|)``, for rows with many relevant labels: sort the
  relevant scores once, find for each irrelevant label q the prefix of
  relevant labels it is active against (s_p < s_q + margin), read that
  prefix's count, sum and sum of squares from prefix sums, and scatter the
  per-positive totals through a difference array over the sorted positives.

Rows with no relevant or no irrelevant label have no pairs and contribute
nothing (the reference would divide 0 by 0 there). The kernels are compiled
with reassociation allowed (``fastmath``), which is what lets the row sums
vectorize; it changes only the order of the additions within a row.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from dmlr.kernels.rows import add_row_outer, relevant_labels

RANK_MARGIN = 2.0
#: Rows with at most this many relevant labels take the direct (vectorized) pairwise path.
DIRECT_MAX_POS = 32
#: Reassociation (and no signed zeros, fused multiply-add) only: no assumption about inf or nan.
_FASTMATH = {"reassoc", "nsz", "contract"}


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def pairwise_direct(s, y, pos_order, n_pos, margin, masked, coef_out, want_coef):
    """The direct ``O(|P| l)`` pairwise evaluation of one row, unweighted (see the module docstring).

    The row's scores are first copied with the relevant labels' set to
    -inf, so each relevant label's pass over all l labels is
    h = max(margin - s_p + masked_j, 0) with no mask to multiply by; the
    caller applies the weight ``1 / (|P| |N|)`` to the returned sum and to
    ``coef_out``. Masking through -inf keeps the inner loop to one max,
    one multiply-add and two adds, which vectorizes; multiplying by a 0/1
    mask and the weight inside the pass, or zeroing ``coef_out`` and
    branching on ``want_coef`` here rather than in the caller, makes the
    stacked losses (:func:`rbrl_score_losses`) slower.

    Parameters
    ----------
    s : float64 (l,)
        Scores of the row.
    y : int8 (l,)
        0/1 labels of the row.
    pos_order : int64 (>= n_pos,)
        Indices of the relevant labels (any order).
    n_pos : int
    margin : float
    masked : float64 (>= l,)
        Scratch.
    coef_out : float64 (l,)
        When ``want_coef``, the derivative of the returned sum with respect
        to s is added to it (the caller zeroes it).
    want_coef : bool

    Returns
    -------
    float
        1/2 sum over relevant p and irrelevant q of max(0, margin - s_p + s_q)^2,
        the row's f_r (eq. 16) times ``|P| |N|``.
    """
    l = s.shape[0]
    for j in range(l):
        masked[j] = s[j] if y[j] == 0 else -np.inf
    loss = 0.0
    for a in range(n_pos):
        shift = margin - s[pos_order[a]]
        if want_coef:
            tot = 0.0
            for j in range(l):  # branch-free, vectorized: relevant j give max(-inf, 0) = 0
                h = max(shift + masked[j], 0.0)
                loss += h * h
                tot += h
                coef_out[j] += h
            coef_out[pos_order[a]] -= tot
        else:
            for j in range(l):
                h = max(shift + masked[j], 0.0)
                loss += h * h
    return 0.5 * loss


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def pairwise_squared_hinge_row(
    s, y, margin, coef_out, want_coef, pos_scores, pos_order, prefix1, prefix2, cnt_diff, sum_diff
):
    """Pairwise squared hinge of one row and, optionally, its score derivative.

    Parameters
    ----------
    s : float64 (l,)
        Scores of the row.
    y : int8 (l,)
        0/1 labels of the row.
    margin : float
        Pairwise margin (2 in RBRL).
    coef_out : float64 (l,)
        Receives d f_r(row) / d s (overwritten) when ``want_coef``.
    want_coef : bool
    pos_scores, pos_order, prefix1, prefix2, cnt_diff, sum_diff : scratch arrays
        Work space of length >= l + 1, reused across rows (nothing is
        allocated per row).

    Returns
    -------
    float
        ``1/2 * 1/(|P| |N|)`` times the sum of squared pair hinges (0 for rows without pairs).
    """
    l = s.shape[0]
    n_pos = relevant_labels(s, y, pos_scores, pos_order)
    n_neg = l - n_pos
    if want_coef:
        for j in range(l):
            coef_out[j] = 0.0
    if n_pos == 0 or n_neg == 0:
        return 0.0
    weight = 1.0 / (n_pos * n_neg)
    if n_pos <= DIRECT_MAX_POS:
        loss = pairwise_direct(s, y, pos_order, n_pos, margin, prefix2, coef_out, want_coef)
        if want_coef:
            for j in range(l):
                coef_out[j] *= weight
        return weight * loss
    # Sort the relevant scores with their label indices in place (argsort: the
    # rows here have more than DIRECT_MAX_POS relevant labels).
    order = np.argsort(pos_scores[:n_pos], kind="mergesort")
    pos_scores[:n_pos] = pos_scores[:n_pos][order]
    pos_order[:n_pos] = pos_order[:n_pos][order]
    sorted_pos = pos_scores[:n_pos]
    prefix1[0] = 0.0
    prefix2[0] = 0.0
    for k in range(n_pos):
        prefix1[k + 1] = prefix1[k] + sorted_pos[k]
        prefix2[k + 1] = prefix2[k] + sorted_pos[k] * sorted_pos[k]
        cnt_diff[k] = 0.0
        sum_diff[k] = 0.0
    cnt_diff[n_pos] = 0.0
    sum_diff[n_pos] = 0.0
    loss = 0.0
    for q in range(l):
        if y[q] != 0:
            continue
        a = margin + s[q]
        # positives with s_p < s_q + margin, i.e. h_pq > 0, are a prefix of sorted_pos
        k = np.searchsorted(sorted_pos, a)
        if k == 0:
            continue
        sum_h = k * a - prefix1[k]
        loss += k * a * a - 2.0 * a * prefix1[k] + prefix2[k]
        if want_coef:
            coef_out[q] = weight * sum_h
            cnt_diff[0] += 1.0
            cnt_diff[k] -= 1.0
            sum_diff[0] += s[q]
            sum_diff[k] -= s[q]
    if want_coef:
        cnt = 0.0
        tot = 0.0
        for k in range(n_pos):
            cnt += cnt_diff[k]
            tot += sum_diff[k]
            if cnt > 0.0:
                j = pos_order[k]
                coef_out[j] = -weight * (cnt * (margin - sorted_pos[k]) + tot)
    return 0.5 * weight * loss


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def rbrl_score_losses(S, Y, n_points, grad_point, lambda2, margin, C):
    """RBRL data losses of stacked score blocks and the score-gradient of one.

    Parameters
    ----------
    S : float64 (m, n_points * l)
        ``X @ [W_0 | W_1 | ...]``: the scores of ``n_points`` parameter
        matrices side by side.
    Y : int8 (m, l)
        0/1 labels.
    n_points : int
    grad_point : int
        Index of the point whose score-gradient is wanted, or -1 for none.
    lambda2 : float
        Weight of the pairwise term in the gradient coefficients.
    margin : float
        Pairwise margin.
    C : float64 (m, l)
        Receives dL/dS for point ``grad_point``:
        ``-y * max(0, 1 - y s) + lambda2 * d f_r / d s`` (eqs. 18-19 before ``X.T @``).

    Returns
    -------
    br : float64 (n_points,)
        1/2 sum max(0, 1 - y s)^2 per point.
    rank : float64 (n_points,)
        f_r per point (eq. 16, without lambda2).
    """
    br = np.zeros(n_points)
    rank = np.zeros(n_points)
    rbrl_score_losses_into(S, Y, n_points, grad_point, lambda2, margin, C, br, rank)
    return br, rank


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def rbrl_score_losses_into(S, Y, n_points, grad_point, lambda2, margin, C, br, rank):
    """:func:`rbrl_score_losses` that adds the losses to ``br`` and ``rank`` (float64 (n_points,)).

    The rows' terms are added to them one row after another, in row order, as
    :func:`rbrl_score_losses` adds them to its zeros: consecutive row runs
    passed in order give, in the same two arrays, the sums of one call over
    all the rows, to the bit (:func:`sparse_tile_pass` scores a tile in runs).
    """
    m, l = Y.shape
    pos_scores = np.empty(l + 1)
    pos_order = np.empty(l + 1, dtype=np.int64)
    pos_order2 = np.empty(l + 1, dtype=np.int64)
    prefix1 = np.empty(l + 1)
    prefix2 = np.empty(l + 1)
    cnt_diff = np.empty(l + 1)
    sum_diff = np.empty(l + 1)
    coef = np.empty(l)
    masked = np.empty(l)
    sign = np.empty(l)
    for i in range(m):
        y = Y[i]
        # the row's signs and relevant labels, once for all points; two loops, so that the
        # first vectorizes and the second gathers without a branch
        for j in range(l):
            sign[j] = 2.0 * (y[j] != 0) - 1.0
        n_pos = 0
        for j in range(l):
            pos_order[n_pos] = j
            n_pos += y[j] != 0
        pairs = n_pos > 0 and n_pos < l
        for p in range(n_points):
            s = S[i, p * l : (p + 1) * l]
            want = p == grad_point
            acc = 0.0
            # branch-free: the active set of the hinge is unpredictable row to row
            if want:
                for j in range(l):
                    r = max(1.0 - sign[j] * s[j], 0.0)
                    acc += r * r
                    C[i, j] = -sign[j] * r
            else:
                for j in range(l):
                    r = max(1.0 - sign[j] * s[j], 0.0)
                    acc += r * r
            br[p] += 0.5 * acc
            if lambda2 == 0.0 or not pairs:
                continue
            if n_pos <= DIRECT_MAX_POS:
                weight = 1.0 / (n_pos * (l - n_pos))
                if want:
                    for j in range(l):
                        coef[j] = 0.0
                rank[p] += weight * pairwise_direct(s, y, pos_order, n_pos, margin, masked, coef, want)
                scale = lambda2 * weight
            else:
                rank[p] += pairwise_squared_hinge_row(
                    s, y, margin, coef, want, pos_scores, pos_order2, prefix1, prefix2, cnt_diff, sum_diff
                )
                scale = lambda2
            if want:
                for j in range(l):
                    C[i, j] += scale * coef[j]


@njit(cache=True, nogil=True)
def rank_lipschitz_row_stats(Y, row_sq_norms, A, B):
    """Accumulate the A_j, B_j sums of eq. 22 (Proposition 1) over a chunk.

    Parameters
    ----------
    Y : int8 (m, l)
    row_sq_norms : float64 (m,)
        ||x_i||^2 (with the bias feature when one is appended).
    A, B : float64 (l,)
        Updated in place::

            A_j += [j in P]|N| + [j in N]|P|
            B_j += ([j in P]|N| + [j in N]|P|) ||x_i||^4 / (|P|^2 |N|^2)

        Rows without pairs are skipped (the reference divides 0 by 0 there).
    """
    m, l = Y.shape
    for i in range(m):
        n_pos = 0
        for j in range(l):
            n_pos += Y[i, j] != 0
        n_neg = l - n_pos
        if n_pos == 0 or n_neg == 0:
            continue
        x4 = row_sq_norms[i] * row_sq_norms[i] / (n_pos * n_pos * n_neg * n_neg)
        for j in range(l):
            c = n_neg if Y[i, j] != 0 else n_pos
            A[j] += c
            B[j] += c * x4


#: Rows per tile of :func:`sparse_extrapolated_pass` and :func:`dense_extrapolated_losses`: the
#: tile's scores at two points and its score-gradient (64 x 3l floats) stay in the core's cache
#: for the label counts of typical sets.
SCORE_TILE_ROWS = 64


@njit(cache=True, nogil=True)
def advance_point_pair(WG, W_new, momentum):
    """Move the held pair [W | G] to the next APG point, in place.

    G <- W_new + momentum (W_new - W), then W <- W_new. No fastmath: G is
    then bit for bit apg's own ``W_new + momentum * (W_new - W)``, so a block
    that holds the pair and one that is sent apg's G compute the same numbers.

    Parameters
    ----------
    WG : float64 (d, 2l)
        W in columns :l, G in columns l:; overwritten.
    W_new : float64 (d, l)
    momentum : float
    """
    d, l = W_new.shape
    for j in range(d):
        for k in range(l):
            w = W_new[j, k]
            WG[j, l + k] = w + momentum * (w - WG[j, k])
            WG[j, k] = w


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def sparse_extrapolated_pass(indptr, indices, data, Y, WG, lambda2, margin, grad):
    """One pass over a CSR block: losses at W and at G, grad += X^T dL/dS(G).

    The sparse block's steady-state APG call, fused: for a tile of
    :data:`SCORE_TILE_ROWS` rows, the scores at both points, X_tile [W | G],
    in one sweep over each row's stored values,
    :func:`rbrl_score_losses` on the tile, then grad += x_i c_i^T
    (:func:`dmlr.kernels.rows.add_row_outer`). Nothing of size (m, l) is
    formed, so the call's memory beyond the block is [W | G] and grad
    whatever its rows; the products visit the stored values in the order of
    scipy's CSR products.

    Why W and G side by side in one (d, 2l) array (see
    :func:`advance_point_pair`): a stored value reads one contiguous row of
    2l floats instead of a row of W and a row of W_prev, d l floats apart.
    Workers on one machine contend for the shared cache and memory, and
    that contention is where this pass loses to the product floor
    (``X @ W`` + ``X.T @ C``); one contiguous row per stored value keeps
    the pass's memory traffic close to the floor's. Sweeping X twice per
    tile, once per matrix, halves the working set but is slower.

    Parameters
    ----------
    indptr, indices, data
        The block's CSR arrays (m rows; sorted or unsorted indices).
    Y : int8 (m, l)
    WG : float64 (d, 2l)
        [W | G], G = W + momentum (W - W_prev).
    lambda2, margin : float
    grad : float64 (d, l)
        Accumulates the data gradient at G.

    Returns
    -------
    br, rank : float64 (2,)
        The BR term and f_r at W and at G.
    """
    m, l = Y.shape
    br = np.zeros(2)
    rank = np.zeros(2)
    S = np.empty((SCORE_TILE_ROWS, 2 * l))
    C = np.empty((SCORE_TILE_ROWS, l))
    no_dense = np.empty((0, 0))
    for a in range(0, m, SCORE_TILE_ROWS):
        b = min(a + SCORE_TILE_ROWS, m)
        for i in range(a, b):
            s = S[i - a]
            s[:] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                v = data[p]
                wg = WG[j]
                for k in range(2 * l):
                    s[k] += v * wg[k]
        tb, tr = rbrl_score_losses(S[: b - a], Y[a:b], 2, 1, lambda2, margin, C[: b - a])
        br += tb
        rank += tr
        for i in range(a, b):
            add_row_outer(i, no_dense, indptr, indices, data, True, C[i - a], 1.0, grad)
    return br, rank


@njit(cache=True, nogil=True)
def sparse_rows_times_points(indptr, indices, data, a, b, points, S):
    """S[i - a] = x_i [P_0 | P_1 | ...] for the rows a..b of a CSR block.

    The stored values of a row are visited in order and each adds its
    multiple of a row of every point, as scipy's CSR product
    ``X[a:b] @ W`` (W the points side by side) does: the same numbers, to
    the bit (no ``fastmath``, so no fused multiply-add either).

    Parameters
    ----------
    indptr, indices, data
        The block's CSR arrays.
    a, b : int
        The rows.
    points : float64 (k, d, l)
    S : float64 (>= b - a, k * l)
        Receives the scores, point p in columns p*l:(p+1)*l.
    """
    k, _, l = points.shape
    for i in range(a, b):
        s = S[i - a]
        for c in range(k * l):
            s[c] = 0.0
        for q in range(indptr[i], indptr[i + 1]):
            j = indices[q]
            v = data[q]
            for p in range(k):
                w = points[p, j]
                o = p * l
                for c in range(l):
                    s[o + c] += v * w[c]


@njit(cache=True, nogil=True)
def sparse_add_rows_outer(indptr, indices, data, a, b, C, G):
    """G += X[a:b].T @ C for the rows a..b of a CSR block, C (>= b - a, l).

    Row after row, each stored value adding its multiple of the row's C to a
    row of G, as scipy's ``X[a:b].T @ C`` (a CSC product) adds them to its
    zeros: into a zero G, the same numbers to the bit (no ``fastmath``).
    """
    l = G.shape[1]
    for i in range(a, b):
        c = C[i - a]
        for q in range(indptr[i], indptr[i + 1]):
            g = G[indices[q]]
            v = data[q]
            for t in range(l):
                g[t] += v * c[t]


@njit(cache=True, nogil=True)
def sparse_tile_pass(indptr, indices, data, Y, points, a, b, grad_point, lambda2, margin, S, C, br, rank, G):
    """One tile (rows a..b) of the linear objective's pass over a CSR block, in runs of rows.

    For each run of ``S.shape[0]`` rows: the scores at every point
    (:func:`sparse_rows_times_points`), the losses and the score-gradient
    (:func:`rbrl_score_losses_into`, added to ``br`` and ``rank``) and, with
    ``grad_point >= 0``, G += X_run^T C_run (:func:`sparse_add_rows_outer`).
    Run by run, the additions are those of one whole-tile pass (scores
    ``X[a:b] @ W``, :func:`rbrl_score_losses` on them, ``X[a:b].T @ C``) in
    the same order, so a zero ``br``, ``rank`` and G end with its numbers,
    while the scores and coefficients held take ``S.shape[0]`` rows, not
    ``b - a``.

    Parameters
    ----------
    indptr, indices, data
        The block's CSR arrays.
    Y : int8 (m, l)
    points : float64 (k, d, l)
    a, b : int
    grad_point : int
        Index of the gradient point, or -1 for none (C and G unused).
    lambda2, margin : float
    S : float64 (run, k * l), C : float64 (run, l)
        Work buffers (C may have no rows when ``grad_point < 0``).
    br, rank : float64 (k,)
        Accumulate the tile's losses.
    G : float64 (d, l)
        Accumulates the tile's gradient (unused when ``grad_point < 0``).
    """
    run = S.shape[0]
    for r in range(a, b, run):
        e = min(r + run, b)
        sparse_rows_times_points(indptr, indices, data, r, e, points, S)
        Cr = C[: min(e - r, C.shape[0])]
        rbrl_score_losses_into(S[: e - r], Y[r:e], points.shape[0], grad_point, lambda2, margin, Cr, br, rank)
        if grad_point >= 0:
            sparse_add_rows_outer(indptr, indices, data, r, e, C, G)


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def dense_extrapolated_losses(S_W, S_prev, momentum, Y, lambda2, margin, C):
    """Losses at W and at G = W + momentum (W - W_prev) from the scores at W and W_prev.

    The dense block's steady-state APG call (see
    :func:`dmlr.objectives.rbrl.block_extrapolated_value_and_grad`): by
    linearity S(G) = S(W) + momentum (S(W) - S(W_prev)). It is formed
    :data:`SCORE_TILE_ROWS` rows at a time beside S(W) in a small buffer
    that stays in cache, and :func:`rbrl_score_losses` scores both points
    together, so the row masks are built once and no (m, l) temporary is made.

    Parameters
    ----------
    S_W, S_prev : float64 (m, l)
    momentum : float
    Y : int8 (m, l)
    lambda2, margin : float
    C : float64 (m, l)
        Receives the score-gradient at G.

    Returns
    -------
    br, rank : float64 (2,)
        The BR term and f_r at W and at G.
    """
    m, l = Y.shape
    br = np.zeros(2)
    rank = np.zeros(2)
    S = np.empty((SCORE_TILE_ROWS, 2 * l))
    for a in range(0, m, SCORE_TILE_ROWS):
        b = min(a + SCORE_TILE_ROWS, m)
        for i in range(a, b):
            s = S[i - a]
            for j in range(l):
                w = S_W[i, j]
                s[j] = w
                s[l + j] = w + momentum * (w - S_prev[i, j])
        tb, tr = rbrl_score_losses(S[: b - a], Y[a:b], 2, 1, lambda2, margin, C[a:b])
        br += tb
        rank += tr
    return br, rank


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def extrapolated_ridge_share(R_W, R_prev, S_W, S_prev, momentum, lambda1, C):
    """The kernel model's ridge share of one tile at W and at G = W + momentum (W - W_prev).

    With R the tile's rows of the point (rows ``B`` of the dual matrix A, see
    :mod:`dmlr.objectives.kernel_rbrl`) and S = K_B A its scores, the ridge
    term lambda1/2 tr(A^T K A) contributes sum(R o S) per point and lambda1 R
    to the score-gradient at G. R(G) and S(G) are formed entry by entry with
    apg's expression (as :func:`dense_extrapolated_losses` forms S(G)), so the
    call makes no tile-sized array (the numpy expressions it replaces made
    seven per tile).

    Parameters
    ----------
    R_W, R_prev : float64 (m, l)
        The tile's rows of W and W_prev.
    S_W, S_prev : float64 (m, l)
        The tile's scores at W and W_prev.
    momentum, lambda1 : float
    C : float64 (m, l)
        The score-gradient at G; lambda1 R(G) is added.

    Returns
    -------
    float64 (2,)
        sum(R(W) o S(W)) and sum(R(G) o S(G)).
    """
    m, l = R_W.shape
    dots = np.zeros(2)
    for i in range(m):
        for j in range(l):
            r = R_W[i, j]
            r_g = r + momentum * (r - R_prev[i, j])
            s = S_W[i, j]
            dots[0] += r * s
            dots[1] += r_g * (s + momentum * (s - S_prev[i, j]))
            C[i, j] += lambda1 * r_g
    return dots
