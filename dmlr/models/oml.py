r"""Online Metric Learning kNN (Gong, Yang, Yuan & Bao, AAAI 2020) and a Euclidean kNN baseline.

Model (paper Sec. III). P (p x q) maps features to the label space, V (q x d)
maps both into a d-dimensional code space; the learned distance of two
instances is ``(P^T x_j - P^T x_t)^T Q (P^T x_j - P^T x_t)`` with Q = V V^T
(Sec. III-C), i.e. the Euclidean distance of the embeddings ``z = x P V``.
Prediction takes the k nearest memory rows in that metric and combines their
labels (the paper is silent on the rule: ``rule="vote"``, the default, is a
per-label majority vote; ``rule="mlknn"`` is the ML-kNN posterior of Zhang &
Zhou 2007, the paper's ref. [33]).

* P solves ``min_P ||P^T X^T - Y^T||_F^2`` (Sec. III-B) from X^T X and X^T Y,
  map-reduced over row chunks, over every training row by default
  (``projection_rows="all"``). The paper's Table I reads X as the
  *initialised* memory D; ``"memory"`` is that literal reading, not the
  default because P from 20% of the rows predicts worse on most sets
  (``benchmarks/oml_figures.py`` compares the two). When X^T X is singular
  (more features than rows, constant columns) a ridge
  ``ridge * mean(diag(X^T X))`` is added (``ridge_used_``).
* D starts as a seeded random ``init_fraction`` (20%, Sec. V-B) of the
  training rows; the other rows are streamed in their order
  (:class:`dmlr.distributed.stream.ChunkStream`), each used for one update of
  V (Algorithm 1) and then appended to D. The nearest neighbour of x_t in D
  (Algorithm 1 line 5) is Euclidean in the input space: the cost the paper
  counts, O(np) (Sec. III-D), and its statement "we use Euclidean metric to
  measure the distances between instances x_t and x" (Sec. III-B).
* V_1 ~ N(0, 1/d) entrywise (the paper: "a normal distributed random
  matrix"; the 1/d makes E[Q_1] = I).

Derivation of the update (the paper's eqs. 5-7 have typos; this is what the code does)
---------------------------------------------------------------------------------------
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

from __future__ import annotations

import math
import time
from numbers import Integral, Real

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from scipy.optimize import brentq
from sklearn.utils._param_validation import Interval, StrOptions

from dmlr.config import chunk_options, get_config, stream_where
from dmlr.errors import DmlrInputError
from dmlr.kernels.blocks import as_matrix, is_dask
from dmlr.kernels.knn import chunk_top_k, merge_top_k
from dmlr.models.base import NOT_A_ZERO_THRESHOLD, SCALING, SEED, BaseModel, register_model

#: Eq. (7) bounds of lambda_t used in the paper's experiments (Sec. V-B).
LAMBDA_MIN, LAMBDA_MAX = 1e-5, 1e5
LAMBDA_RULES = ("exact", "cubic")
AGGREGATIONS = ("vote", "mlknn")


# ---------------------------------------------------------------------------------------------
# The update of V (module docstring, D1-D9)
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


# ---------------------------------------------------------------------------------------------
# Training pieces
# ---------------------------------------------------------------------------------------------


def _normal_equations_block(block):
    """(X^T X, X^T Y) of one row block (dense float64), summed by ``ChunkSet.map_reduce``."""
    X = block.X
    Y = block.Y.astype(np.float64)
    if sp.issparse(X):
        return np.asarray((X.T @ X).toarray()), np.asarray(X.T @ Y)
    return X.T @ X, X.T @ Y


def solve_projection(XtX, XtY, ridge: float):
    """P from the normal equations; ``(P, ridge_used)``.

    X^T X is used as it is when it is numerically non-singular (smallest
    eigenvalue > 1e-10 x the largest); otherwise ``ridge * mean(diag(X^T X))``
    (or ``ridge`` if the diagonal is 0) is added to its diagonal.
    """
    p = XtX.shape[0]
    ev = np.linalg.eigvalsh(XtX)
    if ev[0] > 1e-10 * max(ev[-1], 0.0) and ev[-1] > 0:
        r = 0.0
    else:
        scale = float(np.trace(XtX)) / p
        r = float(ridge) * (scale if scale > 0 else 1.0)
    c, low = scipy.linalg.cho_factor(XtX + r * np.eye(p), lower=True, check_finite=False)
    return scipy.linalg.cho_solve((c, low), XtY, check_finite=False), r


def _take_rows(X, rows):
    return X[rows] if len(rows) else X[:0]


def oml_train_stream(stream, P, V, memory, init_mask, offset, params):
    """Algorithm 1 over a :class:`~dmlr.distributed.stream.ChunkStream`, where the data are read (``run_streaming``).

    Parameters
    ----------
    stream : ChunkStream
        The rows in training order (global index ``offset + i``).
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


# ---------------------------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------------------------


def default_code_dim(n_labels: int) -> int:
    """OML's default d: half the labels, at least 2 and below q (the paper's d < q) where q allows.

    Half the labels is the default on every multi-label set; the floor of 2
    matters for 3-label (and 3-class) problems, where one dimension cannot
    keep three label vectors apart.
    """
    return max(1, min(n_labels - 1, max(2, n_labels // 2)))


def _rows(X, a, b):
    part = X[a:b]
    if is_dask(part):
        part = part.compute()
    if hasattr(part, "to_scipy_sparse"):
        part = part.to_scipy_sparse()
    return part


class _NeighbourModel(BaseModel):
    """Prediction shared by :class:`OML` and :class:`KNN`: k nearest memory rows, then a label rule."""

    _expected_failed_checks = {
        "check_classifier_multioutput": NOT_A_ZERO_THRESHOLD.format(
            rule="score > threshold (0.5 of the neighbours' votes)"
        )
    }

    _fitted_attributes = ("n_features_in_", "n_labels_", "n_memory_", "fit_seconds_")
    _parameter_constraints = {
        "k": [Interval(Integral, 1, None, closed="left")],
        "aggregation": [StrOptions(set(AGGREGATIONS))],
        "threshold": [Real],
        "mlknn_smoothing": [Interval(Real, 0, None, closed="neither")],
        "scaling": SCALING,
    }

    def _embedding(self):
        """(p, e) matrix mapping features to the search space, or None (Euclidean in X)."""
        return None

    def _memory_arrays(self):
        return self.memory_X_, self.memory_Y_

    def _fitted_array_names(self) -> tuple:
        names = tuple(self._fitted_arrays)
        if self.aggregation == "mlknn":
            names += ("mlknn_prior_", "mlknn_cond_pos_", "mlknn_cond_neg_")
        return names

    def _open_memory(self):
        """The memory D as a chunk set of IndexedBlock (embedded), where its rows live."""
        from dmlr.distributed.chunks import make_chunkset
        from dmlr.distributed.knn import index_chunks

        Xm, Ym = self._memory_arrays()
        if not is_dask(Ym):
            Ym = np.asarray(Ym, dtype=np.int8)
        chunks = make_chunkset(Xm, Ym, fit_intercept=False, **chunk_options())
        try:
            return index_chunks(chunks, self._embedding())
        finally:
            chunks.close()

    def _queries(self, X):
        Xq = as_matrix(X)
        W = self._embedding()
        return Xq if W is None else np.ascontiguousarray(np.asarray(Xq @ W), dtype=np.float64)

    def kneighbors(self, X):
        """The k nearest memory rows of every row of X in the model's metric.

        Returns
        -------
        dist : float64 (n, k)
            Squared distances (learned metric for OML, Euclidean for KNN).
        idx : int64 (n, k)
            Memory row indices (ties to the lower index; -1 padding if D has < k rows).
        labels : int8 (n, k, n_labels)
        """
        return self._kneighbors(self._predict_data(X))

    def _kneighbors(self, X):
        from dmlr.distributed.knn import knn_search

        mem = self._open_memory()
        try:
            out = [], [], []
            step = int(get_config()["query_batch"])
            for a in range(0, X.shape[0], step):
                res = knn_search(mem, self._queries(_rows(X, a, a + step)), int(self.k))
                for lst, r in zip(out, res):
                    lst.append(r)
        finally:
            mem.close()
        if not out[0]:
            return (
                np.zeros((0, self.k)),
                np.zeros((0, self.k), dtype=np.int64),
                np.zeros((0, self.k, self.n_labels_), dtype=np.int8),
            )
        return tuple(np.concatenate(lst, axis=0) for lst in out)

    def _label_scores(self, X):
        """Per-label scores, float64 (n, n_labels): vote fractions (``aggregation="vote"``) or
        ML-kNN posteriors P(label | neighbour count) (``"mlknn"``), both in [0, 1].

        Dask X is searched ``query_batch`` rows at a time (the memory stays in its
        chunks); the scores come back as a dask array with X's row chunks, already computed.
        """
        _, idx, labels = self._kneighbors(X)
        counts = labels.sum(axis=1, dtype=np.int64)  # (n, l)
        if self.aggregation == "vote":
            n_valid = np.maximum((idx >= 0).sum(axis=1, keepdims=True), 1)
            S = counts / n_valid
        else:
            cols = np.arange(self.n_labels_)
            p1 = self.mlknn_prior_[None, :] * self.mlknn_cond_pos_[counts, cols]
            p0 = (1.0 - self.mlknn_prior_[None, :]) * self.mlknn_cond_neg_[counts, cols]
            S = p1 / (p1 + p0)
        if is_dask(X):
            import dask.array as da

            return da.from_array(S, chunks=(X.chunks[0], S.shape[1]))
        return S

    def labels_from_scores(self, S):
        """Score > ``threshold`` (0.5: a strict majority of the k neighbours, or posterior > 1/2).
        Rows may get no label (unlike :func:`dmlr.metrics.predict_from_scores`)."""
        return (S > float(self.threshold)).astype(np.int8)

    def _fit_mlknn(self):
        """ML-kNN tables (Zhang & Zhou 2007) from leave-one-out neighbours of every memory row."""
        from dmlr.distributed.knn import knn_search

        k, s = int(self.k), float(self.mlknn_smoothing)
        L = self.n_labels_
        Xm, Ym = self._memory_arrays()
        n = Xm.shape[0]
        pos, neg = np.zeros((k + 1, L)), np.zeros((k + 1, L))
        n_pos = np.zeros(L)
        mem = self._open_memory()
        try:
            step = int(get_config()["query_batch"])
            for a in range(0, n, step):
                Xb = _rows(Xm, a, a + step)
                Yb = np.asarray(_rows(Ym, a, a + step), dtype=np.int8)
                _, idx, labs = knn_search(mem, self._queries(Xb), k + 1)
                own = np.arange(a, a + Yb.shape[0])[:, None]
                drop = idx == own
                none = ~drop.any(axis=1)
                drop[none, -1] = True  # self beyond k+1 ties
                first = np.argmax(drop, axis=1)
                keep = np.ones_like(drop)
                keep[np.arange(drop.shape[0]), first] = False
                labs = labs[keep].reshape(Yb.shape[0], k, L)
                c = labs.sum(axis=1, dtype=np.int64)
                cols = np.broadcast_to(np.arange(L), c.shape)
                np.add.at(pos, (c[Yb == 1], cols[Yb == 1]), 1.0)
                np.add.at(neg, (c[Yb == 0], cols[Yb == 0]), 1.0)
                n_pos += Yb.sum(axis=0)
        finally:
            mem.close()
        self.mlknn_prior_ = (s + n_pos) / (2 * s + n)
        self.mlknn_cond_pos_ = (s + pos) / (s * (k + 1) + pos.sum(axis=0, keepdims=True))
        self.mlknn_cond_neg_ = (s + neg) / (s * (k + 1) + neg.sum(axis=0, keepdims=True))

    def _validate_loaded(self, path) -> None:
        p, L = int(self.n_features_in_), int(self.n_labels_)
        if self.memory_X_.shape[1] != p or self.memory_Y_.shape != (self.memory_X_.shape[0], L):
            raise DmlrInputError("memory arrays do not match n_features_in_ / n_labels_", path=path)
        if self.aggregation == "mlknn":
            shape = (int(self.k) + 1, L)
            if (
                self.mlknn_cond_pos_.shape != shape
                or self.mlknn_cond_neg_.shape != shape
                or self.mlknn_prior_.shape != (L,)
            ):
                raise DmlrInputError("ML-kNN tables do not match k and n_labels_", path=path)


@register_model
class KNN(_NeighbourModel):
    """Euclidean k-nearest-neighbour multi-label classifier (the paper's kNN baseline, Sec. V-B).

    The memory is the training set (features as stored); prediction is the
    same as :class:`OML`'s with the Euclidean metric of the input space.

    Parameters
    ----------
    k : int
        Neighbours (10, the paper's).
    aggregation : {"vote", "mlknn"}
        How the neighbours' labels become scores: per-label vote fractions or
        the ML-kNN posterior.
    threshold : float
        ``predict``: label where score > threshold (0.5).
    mlknn_smoothing : float
        ML-kNN's Laplace smoothing s (1).
    scaling : {"auto", "standard", "maxabs"} or None
        Feature scaling fitted inside the model and applied by every
        predict-type method (:mod:`dmlr.preprocessing`): "auto" standardizes
        dense features and divides sparse ones by their largest absolute
        value; None uses the features as given.

    Execution (where the memory's row chunks live, in how many blocks, query
    rows per search call) is set with :func:`dmlr.config_context`.

    Attributes
    ----------
    memory_X_ : (n, p) ndarray, scipy.sparse or dask array
        The training features (a dask input is kept lazy, not gathered).
    memory_Y_ : int8 (n, L) ndarray or dask array
    mlknn_prior_ : float64 (L,)
        ``aggregation="mlknn"`` only.
    mlknn_cond_pos_, mlknn_cond_neg_ : float64 (k + 1, L)
        ``aggregation="mlknn"`` only.
    n_features_in_, n_labels_, n_memory_ : int
    """

    _fitted_arrays = ("memory_X_", "memory_Y_")

    def __init__(self, k=10, *, aggregation="vote", threshold=0.5, mlknn_smoothing=1.0, scaling="auto"):
        self.k = k
        self.aggregation = aggregation
        self.threshold = threshold
        self.mlknn_smoothing = mlknn_smoothing
        self.scaling = scaling

    def fit(self, X, y):
        """Store (X, Y) as the memory (and the ML-kNN tables for ``aggregation="mlknn"``). Returns self."""
        self._validate_params()
        X, Y = self._fit_data(X, y)
        start = time.perf_counter()
        self.memory_X_ = X
        self.memory_Y_ = Y
        self.n_labels_ = int(np.shape(Y)[1])
        self.n_memory_ = int(X.shape[0])
        if self.aggregation == "mlknn":
            self._fit_mlknn()
        self.fit_seconds_ = time.perf_counter() - start
        return self


@register_model
class OML(_NeighbourModel):
    """Online Metric Learning for multi-label kNN (Gong et al. 2020, Algorithm 1).

    See the module docstring for the model, the derivation of the update and
    the choices the paper leaves open.

    Parameters
    ----------
    k : int
        Neighbours used for prediction (10, the paper's).
    n_components : int, optional
        d, the code dimension (the paper requires d < q and gives no value);
        default :func:`~dmlr.models.oml.default_code_dim`.
    init_fraction : float
        Fraction of the training rows (a seeded random choice) that
        initialises D (0.2, the paper's); the rest are streamed.
    lambda_min, lambda_max : float
        m and M of eq. (7) (1e-5 and 1e5, the paper's).
    lambda_rule : {"exact", "cubic"}
        lambda_t's maximum point: of the exact dual function (D6-D7, the
        constraint of eq. 2 then holds with equality) or of the paper's
        cubic approximation (D9).
    aggregation : {"vote", "mlknn"}
        Scores from the k neighbours: per-label vote fractions (the default;
        the paper does not say) or the ML-kNN posterior.
    threshold : float
        ``predict``: label where score > threshold (0.5).
    alpha : float
        Relative ridge on P, added to X^T X when it is singular (see
        :func:`~dmlr.models.oml.solve_projection`); ``ridge_used_`` records the absolute value.
    projection_rows : {"memory", "all"}
        Rows of the least-squares problem for P: every training row (the
        default) or the initial memory only (the paper's X, Table I).
    mlknn_smoothing : float
        ML-kNN's Laplace smoothing s (1).
    random_state : int or None
        Seed of the initial memory and of V_1.
    record_every : int
        ``objective_history_`` gets the running mean of l_t every this many updates.
    scaling : {"auto", "standard", "maxabs"} or None
        Feature scaling fitted inside the model and applied by every
        predict-type method (:mod:`dmlr.preprocessing`): "auto" standardizes
        dense features and divides sparse ones by their largest absolute
        value; None uses the features as given.

    Execution (where row chunks live for P's map-reduce and the search,
    streamed chunk rows, query rows per search call) is set with
    :func:`dmlr.config_context`.

    Attributes
    ----------
    P_ : float64 (p, q)
    V_ : float64 (q, d)
        V after the last update.
    memory_X_, memory_Y_ : (n_memory, p), int8 (n_memory, q)
        D: the training rows in their order (dask inputs kept lazy, never gathered).
    mlknn_prior_, mlknn_cond_pos_, mlknn_cond_neg_ : float64
        ``aggregation="mlknn"`` only.
    objective_history_ : list of float
        Running mean of the loss l_t (eq. 4) over the updates so far.
    objective_iterations_ : list of int
        The update count of each record.
    n_updates_ : int
        Streamed rows (rounds t) so far; ``n_active_``: rounds with l_t > 0;
        ``n_clipped_``: rounds whose lambda_t was clipped by eq. (7) (D8).
    cumulative_loss_ : float
        Sum of l_t (the quantity bounded by Theorem 1).
    ridge_used_ : float
    n_features_in_, n_labels_, n_memory_, n_components_ : int
    fit_seconds_ : float
    """

    _fitted_arrays = ("P_", "V_", "memory_X_", "memory_Y_")
    _fitted_attributes = _NeighbourModel._fitted_attributes + (
        "objective_history_",
        "objective_iterations_",
        "n_updates_",
        "n_active_",
        "n_clipped_",
        "cumulative_loss_",
        "ridge_used_",
        "n_components_",
    )

    _parameter_constraints = {
        **_NeighbourModel._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "init_fraction": [Interval(Real, 0, 1, closed="right")],
        "lambda_min": [Interval(Real, 0, None, closed="neither")],
        "lambda_max": [Interval(Real, 0, None, closed="neither")],
        "lambda_rule": [StrOptions(set(LAMBDA_RULES))],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "projection_rows": [StrOptions({"memory", "all"})],
        "random_state": SEED,
        "record_every": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        k=10,
        n_components=None,
        *,
        init_fraction=0.2,
        lambda_min=LAMBDA_MIN,
        lambda_max=LAMBDA_MAX,
        lambda_rule="exact",
        aggregation="vote",
        threshold=0.5,
        alpha=1e-6,
        projection_rows="all",
        mlknn_smoothing=1.0,
        random_state=0,
        record_every=100,
        scaling="auto",
    ):
        self.k = k
        self.n_components = n_components
        self.init_fraction = init_fraction
        self.lambda_min = lambda_min
        self.lambda_max = lambda_max
        self.lambda_rule = lambda_rule
        self.aggregation = aggregation
        self.threshold = threshold
        self.alpha = alpha
        self.projection_rows = projection_rows
        self.mlknn_smoothing = mlknn_smoothing
        self.random_state = random_state
        self.record_every = record_every
        self.scaling = scaling

    def _validate_params(self) -> None:
        super()._validate_params()
        if not self.lambda_min < self.lambda_max < np.inf:
            raise ValueError(f"need lambda_min < lambda_max < inf, got {self.lambda_min!r}, {self.lambda_max!r}")

    def _embedding(self):
        return self.P_ @ self.V_

    def _params(self):
        return {
            "lambda_min": float(self.lambda_min),
            "lambda_max": float(self.lambda_max),
            "lambda_rule": self.lambda_rule,
        }

    def _record(self, losses, reset: bool):
        t0 = 0 if reset else int(self.n_updates_)
        total0 = 0.0 if reset else float(self.cumulative_loss_)
        hist = [] if reset else list(self.objective_history_)
        its = [] if reset else list(self.objective_iterations_)
        csum = total0 + np.cumsum(losses)
        every = int(self.record_every)
        for i in range(len(losses)):
            t = t0 + i + 1
            if t % every == 0 or i == len(losses) - 1:
                hist.append(float(csum[i] / t))
                its.append(int(t))
        self.objective_history_, self.objective_iterations_ = hist, its
        self.n_updates_ = t0 + len(losses)
        self.n_active_ = (0 if reset else int(self.n_active_)) + int(np.count_nonzero(losses > 0))
        self.cumulative_loss_ = float(csum[-1]) if len(losses) else total0

    def fit(self, X, y, classes=None):
        """Algorithm 1 on the rows of (X, Y) in order, from a seeded initial memory. Returns self.

        1. D_0: a seeded random ``init_fraction`` of the rows.
        2. P: least squares on D_0 (or all rows), X^T X and X^T Y map-reduced over row chunks.
        3. V_1 ~ N(0, 1/d); the other rows streamed in order
           (:func:`dmlr.distributed.stream.run_streaming`: on a Dask worker for dask
           input with a client, else here), one update each, appended to D.
        """
        from dmlr.distributed.chunks import make_chunkset
        from dmlr.distributed.stream import ChunkStream, run_streaming

        self._validate_params()
        for name in self._fitted_array_names() + ("mlknn_prior_", "mlknn_cond_pos_", "mlknn_cond_neg_"):
            if hasattr(self, name):
                delattr(self, name)
        X, Y = self._fit_data(X, y, classes=classes)
        start = time.perf_counter()
        n, q = int(X.shape[0]), int(np.shape(Y)[1])
        d = int(self.n_components) if self.n_components is not None else default_code_dim(q)
        rng = np.random.default_rng(self.random_state)
        n_init = min(n, max(1, int(round(float(self.init_fraction) * n))))
        init_idx = np.sort(rng.choice(n, n_init, replace=False))
        init_mask = np.zeros(n, dtype=bool)
        init_mask[init_idx] = True
        V1 = rng.standard_normal((q, d)) / math.sqrt(d)
        Ynp = Y
        if self.projection_rows == "memory":
            Xp, Yp = X[init_idx], Ynp[init_idx]
        else:
            Xp, Yp = X, Ynp
        chunks = make_chunkset(Xp, Yp, fit_intercept=False, **chunk_options())
        try:
            XtX, XtY = chunks.map_reduce(_normal_equations_block)
        finally:
            chunks.close()
        P, self.ridge_used_ = solve_projection(XtX, XtY, float(self.alpha))
        stream = ChunkStream(X, Ynp, chunk_rows=int(get_config()["chunk_rows"]))
        res = run_streaming(
            oml_train_stream,
            stream,
            P,
            V1,
            None,
            init_mask,
            0,
            self._params(),
            client=get_config()["client"],
            where=stream_where(),
        )
        self.P_, self.V_ = P, res["V"]
        self.memory_X_, self.memory_Y_ = X, Ynp
        self.n_labels_, self.n_components_ = q, d
        self.n_memory_ = n
        self.n_clipped_ = res["n_clipped"]
        self._record(res["losses"], reset=True)
        if self.aggregation == "mlknn":
            self._fit_mlknn()
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def partial_fit(self, X, y, classes=None):
        """Continue Algorithm 1 on the rows of (X, Y), in order, with the current D, P and V.

        On an unfitted estimator this is :meth:`~dmlr.models.OML.fit`. Otherwise every row is
        one round (nearest neighbour in D, update of V, appended to D); P is
        kept. This runs in this process and holds D in memory here (a dask
        memory is computed). ``classes``: every class of a 1-D target (needed
        on the first call when later calls may hold other classes). The feature scaling of the
        first call (fit) is kept. Returns self.
        """
        if not hasattr(self, "V_"):
            return self.fit(X, y, classes=classes)
        from dmlr.distributed.stream import ChunkStream, run_streaming

        self._validate_params()
        X, Y = self._partial_fit_data(X, y)
        start = time.perf_counter()
        Xm, Ym = _rows(self.memory_X_, 0, None), np.asarray(_rows(self.memory_Y_, 0, None), dtype=np.int8)
        Xn = _rows(X, 0, None)
        Yn = np.asarray(_rows(Y, 0, None), dtype=np.int8) if is_dask(Y) else np.asarray(Y, dtype=np.int8)
        stream = ChunkStream(Xn, Yn, chunk_rows=int(get_config()["chunk_rows"]))
        res = run_streaming(
            oml_train_stream, stream, self.P_, self.V_, (Xm, Ym), None, int(Xm.shape[0]), self._params(), where="local"
        )
        self.V_ = res["V"]
        Xm, Xn = as_matrix(Xm), as_matrix(Xn)
        self.memory_X_ = (
            sp.vstack([Xm, Xn], format="csr")
            if (sp.issparse(Xm) or sp.issparse(Xn))
            else np.concatenate([Xm, Xn], axis=0)
        )
        self.memory_Y_ = np.concatenate([Ym, Yn], axis=0)
        self.n_memory_ = int(self.memory_X_.shape[0])
        self.n_clipped_ = int(self.n_clipped_) + res["n_clipped"]
        self._record(res["losses"], reset=False)
        if self.aggregation == "mlknn":
            self._fit_mlknn()
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _validate_loaded(self, path) -> None:
        super()._validate_loaded(path)
        p, q, d = int(self.n_features_in_), int(self.n_labels_), int(self.n_components_)
        if self.P_.shape != (p, q) or self.V_.shape != (q, d) or self.P_.dtype.kind != "f" or self.V_.dtype.kind != "f":
            raise DmlrInputError(f"P_ must be float ({p}, {q}) and V_ float ({q}, {d})", path=path)
