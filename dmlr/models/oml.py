r"""Online Metric Learning kNN (Gong, Yang, Yuan & Bao, AAAI 2020) and a Euclidean kNN baseline.

Model (paper Sec. III). P (p x q) maps features to the label space, V (q x d)
maps both into a d-dimensional code space; the learned distance of two
instances is ``(P^T x_j - P^T x_t)^T Q (P^T x_j - P^T x_t)`` with Q = V V^T
(Sec. III-C), i.e. the Euclidean distance of the embeddings ``z = x P V``.
Prediction takes the k nearest memory rows in that metric and combines their
labels (the paper is silent on the rule: ``aggregation="vote"`` is a per-label
majority vote; ``aggregation="mlknn"``, OML's default, is the ML-kNN posterior
of Zhang & Zhou 2007, the paper's ref. [33]).

* P solves ``min_P ||P^T X^T - Y^T||_F^2`` (Sec. III-B) from X^T X and X^T Y,
  map-reduced over row chunks, over every training row by default
  (``projection_rows="all"``). The paper's Table I reads X as the
  *initialised* memory D; ``"memory"`` is that literal reading, not the
  default because a least-squares fit on a fifth of the rows is noisier
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

The update of V (Algorithm 1, with the paper's eqs. 5-7 derived again, D1-D9) and the
loop over the streamed rows are :mod:`dmlr.solvers.oml`.
"""

from __future__ import annotations

import math
import time
from numbers import Integral, Real

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.utils._param_validation import Interval, StrOptions

from dmlr.config import chunk_options, get_config, stream_where
from dmlr.data.arrays import as_matrix, is_dask, to_scipy
from dmlr.errors import DmlrInputError
from dmlr.models.base import NOT_A_ZERO_THRESHOLD, SCALING, SEED, BaseModel, register_model, store_params
from dmlr.solvers.oml import (  # noqa: F401 (the update's functions, public names of this module too)
    LAMBDA_MAX,
    LAMBDA_MIN,
    LAMBDA_RULES,
    cubic_coefficients,
    cubic_max_point,
    margin,
    oml_train_stream,
    oml_update,
    rank2_eigen,
)

AGGREGATIONS = ("vote", "mlknn")


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


# ---------------------------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------------------------


def default_code_dim(n_labels: int) -> int:
    """OML's default d: the number of labels q, a full-rank metric on the projected label space.

    The paper requires d < q and gives no value. The neighbours are found in the
    d-dimensional code V^T P^T x, so a small d discards what the projection
    keeps: with d = q/2 the code of a 6-label set has 3 dimensions.
    ``n_components`` below q gives the paper's form. Chosen by
    ``benchmarks/oml_figures.py`` (OML-def against OML-q/2).
    """
    return int(n_labels)


def _rows(X, a, b):
    part = X[a:b]
    if is_dask(part):
        part = part.compute()
    return to_scipy(part)


class _NeighbourModel(BaseModel):
    """Prediction shared by :class:`OML` and :class:`KNN`: k nearest memory rows, then a label rule."""

    _expected_failed_checks = {
        "check_classifier_multioutput": NOT_A_ZERO_THRESHOLD.format(
            rule="score > threshold (0.5: a majority vote, or an ML-kNN posterior above 1/2)"
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
    scaling : {"auto", "standard", "maxabs", "tfidf"} or None
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
        store_params(self, locals())

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

    See the module docstring for the model and the choices the paper leaves
    open, and :func:`dmlr.solvers.oml.oml_update` for the derivation of the
    update.

    Parameters
    ----------
    k : int
        Neighbours used for prediction (5). With ``aggregation="mlknn"``,
        the pair cross-validation picks most often
        (``benchmarks/default_params.py --models oml``); the paper's setting is ``k=10,
        aggregation="vote"``.
    n_components : int, optional
        d, the code dimension (the paper requires d < q and gives no value);
        default :func:`~dmlr.models.oml.default_code_dim`: q.
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
        Scores from the k neighbours: per-label vote fractions or the ML-kNN
        posterior P(label | neighbours with it) ("mlknn", the default, see
        ``k``; the paper does not say). The posterior's tables are counted at
        ``fit`` from the leave-one-out neighbours of every memory row.
    threshold : float
        ``predict``: label where score > threshold (0.5: posterior above 1/2,
        or a strict majority of the neighbours).
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
    scaling : {"auto", "standard", "maxabs", "tfidf"} or None
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
        k=5,
        n_components=None,
        *,
        init_fraction=0.2,
        lambda_min=LAMBDA_MIN,
        lambda_max=LAMBDA_MAX,
        lambda_rule="exact",
        aggregation="mlknn",
        threshold=0.5,
        alpha=1e-6,
        projection_rows="all",
        mlknn_smoothing=1.0,
        random_state=0,
        record_every=100,
        scaling="auto",
    ):
        store_params(self, locals())

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
        if q < 2:  # the update's eigen-decomposition is in the 2-D span of two label vectors
            raise ValueError(
                "OML learns a metric between label vectors and needs at least 2 labels; got 1 label "
                "column (KNN, RBRL and the other models take one)"
            )
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
