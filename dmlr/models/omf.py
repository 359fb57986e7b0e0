"""Online Matrix Factorization for multi-label annotation (Otálora-Montenegro et al.).

Learning (Algorithm 1): find P (k, s), Q (l, s) and latent codes H (n, s)
minimising eq. 1,

    (1 - alpha) ||X - H P^T||^2 + alpha ||Y - H Q^T||^2 + lam (||P||^2 + ||Q||^2 + ||H||^2),

by minibatch SGD on P and Q with the codes of each minibatch in closed form
(:mod:`dmlr.objectives.omf`; the loop is :func:`dmlr.solvers.omf.omf_train_stream`).
Prediction (Algorithm 2): h = (xi I + P^T P)^{-1} P^T x (xi: ``alpha_code``),
scores y = Q h (:meth:`~dmlr.models.OMF.decision_function`), then the top-m labels or the
labels scoring above a threshold (:meth:`~dmlr.models.OMF.predict`).

Streaming. Training reads the rows chunk by chunk from a
:class:`dmlr.distributed.stream.ChunkStream` (one epoch = one pass) inside
:func:`dmlr.distributed.stream.run_streaming`: with dask (Zarr) inputs and a
current client the whole learning loop runs in one task on a worker that
reads the chunks itself, and only P, Q (and a few scalars) come back. The
training set is never gathered.

Determinism. Rows are regrouped, across chunk boundaries, into consecutive
*windows* of ``shuffle_window`` rows of the stream's global row order; each
window is permuted by its own generator, seeded by
``(random_state, epoch, window index)``, and cut into minibatches of
``batch_size`` rows. The minibatches, hence the model, depend on the seed
and the rows only -- not on the storage chunking, the dask chunks, the
number of workers or where the loop runs (BLAS is limited to one thread in
the loop, so sums are done in the same order everywhere). The price: the
paper's SAMPLE-WITHOUT-REPLACEMENT over the whole set is a shuffle within
windows; a window of at least n rows is the paper's global shuffle (it
holds the window in memory, so only do that for in-memory data).
"""

from __future__ import annotations

import time
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dmlr.config import config_context, get_config, stream_where
from dmlr.data.arrays import is_dask
from dmlr.distributed.stream import ChunkStream, run_streaming
from dmlr.errors import DmlrInputError
from dmlr.models.base import (
    NOT_A_ZERO_THRESHOLD,
    SCALING,
    SEED,
    THRESHOLD,
    Axis,
    BaseModel,
    half_decades,
    linear_scores,
    register_model,
    store_params,
)
from dmlr.objectives import omf as objective
from dmlr.solvers.omf import OMFState, omf_train_stream

#: Label rules of :meth:`~dmlr.models.OMF.labels_from_scores` (Algorithm 2: SELECT-TOP or THRESHOLD).
RULES = ("top_k", "threshold")


# ----------------------------------------------------------------------------
# The estimator
# ----------------------------------------------------------------------------


@register_model
class OMF(BaseModel):
    """Online Matrix Factorization multi-label classifier (Algorithms 1 and 2 of the paper).

    Parameters
    ----------
    n_components : int
        s, the dimension of the latent space.
    label_weight : float in [0, 1]
        Weight of the label reconstruction in eq. 1 (the paper's alpha; 1 -
        label_weight weighs the features).
    alpha : float > 0
        lambda of eq. 1 (ridge on P, Q and the codes H).
    alpha_code : float >= 0
        xi of eq. 2, the ridge on the code h at prediction.
    n_epochs : int >= 1
        Passes over the data in ``fit``.
    batch_size : int >= 1
        Rows per SGD update (the paper's minibatch extension; 1 is Algorithm 1 as printed).
    eta0 : float > 0
        The first step size.
    decay : float >= 0 or None
        Step sizes eta0 / (1 + eta0 decay t), t = updates so far;
        None: decay = alpha (the classical choice for an alpha-strongly convex term).
    shuffle_window : int >= 0
        Rows per shuffling window (a multiple of ``batch_size``); 0: rows in stored order.
    init_scale : float > 0
        P^(0), Q^(0) entries ~ N(0, init_scale^2).
    label_rule : {"threshold", "top_k"}
        Algorithm 2's rule from scores to labels: the scores > ``threshold``
        (THRESHOLD), or the ``top_k`` highest scores (SELECT-TOP).
    top_k : int >= 1
    threshold : float or "auto"
        "auto": learned per label by ``fit`` (and each ``partial_fit``) on
        the training rows' scores (:func:`dmlr.metrics.label_thresholds`),
        kept as ``threshold_``. A number: that threshold for every label.
        The scores' scale depends on the data and on every other parameter,
        so no one fixed threshold suits every data set.
    fit_intercept : bool
        Append a constant-1 feature (not in the paper; off by default).
    random_state : int >= 0 or None
        Seed of P^(0), Q^(0) and of the window permutations (None: 0).
    scaling : {"auto", "standard", "maxabs", "tfidf"} or None
        Feature scaling fitted inside the model and applied by every
        predict-type method (:mod:`dmlr.preprocessing`): "auto" standardizes
        dense features and divides sparse ones by their largest absolute
        value; None uses the features as given.

    Execution (where the learning loop runs, rows per streamed chunk of
    in-memory input) is set with :func:`dmlr.config_context`; the model does
    not depend on it.

    Attributes
    ----------
    P_ : float64 (n_features + fit_intercept, n_components)
    Q_ : float64 (n_labels, n_components)
    objective_history_ : list of float
        Eq. 1 after each epoch on the rows of that epoch: the codes and the
        data terms of each minibatch at the factors it was seen with (a
        progressive value, no extra pass), plus alpha (||P||^2 + ||Q||^2) at
        the epoch's end. Continued by ``partial_fit``.
    n_epochs_ : int
        Epochs run so far (also the index of the next epoch's permutations).
    n_updates_ : int
        SGD updates so far (the t of the step-size schedule).
    n_features_in_, n_labels_ : int
    threshold_ : float64 (n_labels,)
        The ``"threshold"`` rule's thresholds (``threshold``, or the learned ones).
    fit_seconds_ : float

    Notes
    -----
    Deviations from the paper, all for correctness or streaming:

    * The codes are the exact minimisers of eq. 1 for every label_weight (the
      paper's Algorithm 1 formula is the 1/2 case) and are computed for the
      current minibatch before the step (the printed algorithm uses the
      previous sample's h).
    * Each row carries alpha / n of the ridge on P, Q, so that an epoch of
      steps is an SGD on eq. 1 itself; the paper's eq. 3 puts lambda on P, Q
      for every row (n lambda per epoch). Minimising eq. 1 with weight c
      lambda on P, Q is the same as with weight lambda' = lambda sqrt(c) on
      everything, up to rescaling P, Q by c^(-1/4) and xi by c^(-1/2): the
      two give the same family of predictors, so the cross-validated results
      are comparable.
    * The step-size schedule is eta0 / (1 + eta0 decay t) (see
      :func:`dmlr.objectives.omf.learning_rate`).
    * Shuffling is within windows of ``shuffle_window`` rows, not global.
    """

    _expected_failed_checks = {
        "check_classifier_multioutput": NOT_A_ZERO_THRESHOLD.format(
            rule="score > threshold_, learned per label on the training rows (threshold='auto'), or Algorithm 2's top_k"
        )
    }
    _fitted_arrays = ("P_", "Q_")
    _fitted_attributes = (
        "objective_history_",
        "n_epochs_",
        "n_updates_",
        "n_features_in_",
        "n_labels_",
        "fit_seconds_",
    )
    _learns_threshold = True
    _parameter_constraints = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "label_weight": [Interval(Real, 0, 1, closed="both")],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "alpha_code": [Interval(Real, 0, None, closed="left")],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "eta0": [Interval(Real, 0, None, closed="neither")],
        "decay": [Interval(Real, 0, None, closed="left"), None],
        "shuffle_window": [Interval(Integral, 0, None, closed="left")],
        "init_scale": [Interval(Real, 0, None, closed="neither")],
        "label_rule": [StrOptions(set(RULES))],
        "top_k": [Interval(Integral, 1, None, closed="left")],
        "threshold": THRESHOLD,
        "fit_intercept": ["boolean"],
        "random_state": SEED,
        "scaling": SCALING,
    }

    #: Searched on request only: the fits do not warm-start, and the defaults follow the paper.
    _search_space = (Axis("alpha", half_decades(-1.0, -5.0), default=False),)

    def __init__(
        self,
        n_components=50,
        *,
        label_weight=0.1,
        alpha=1e-4,
        alpha_code=1.0,
        n_epochs=10,
        batch_size=32,
        eta0=1.0,
        decay=None,
        shuffle_window=4096,
        init_scale=0.1,
        label_rule="threshold",
        top_k=1,
        threshold="auto",
        fit_intercept=False,
        random_state=0,
        scaling="auto",
    ):
        store_params(self, locals())

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.shuffle_window % self.batch_size:
            raise ValueError(
                f"shuffle_window must be 0 or a positive multiple of batch_size={self.batch_size}, "
                f"got {self.shuffle_window!r}"
            )

    def _config(self, epochs: int) -> dict:
        return {
            "alpha": float(self.label_weight),
            "lam": float(self.alpha),
            "dim": int(self.n_components),
            "eta0": float(self.eta0),
            "decay": float(self.alpha if self.decay is None else self.decay),
            "batch_size": int(self.batch_size),
            "shuffle_window": int(self.shuffle_window),
            "seed": self.random_state,
            "init_scale": float(self.init_scale),
            "epochs": int(epochs),
        }

    def _stream(self, X, Y) -> ChunkStream:
        return ChunkStream(X, Y, fit_intercept=bool(self.fit_intercept), chunk_rows=int(get_config()["chunk_rows"]))

    # -- fitting -----------------------------------------------------------------------
    def fit(self, X, y):
        """Algorithm 1 from a fresh seeded start: ``n_epochs`` passes over (X, y). Returns self.

        Parameters
        ----------
        X : ndarray, scipy.sparse or dask array, shape (n, k)
        y : array-like (n, l) of 0/1, or (n,) classes; or a dask array (n, l)
        """
        self._validate_params()
        for name in self._fitted_arrays:
            if hasattr(self, name):
                delattr(self, name)
        X, Y = self._fit_data(X, y)
        return self._run(X, Y, None, int(self.n_epochs))

    def partial_fit(self, X, y, classes=None):
        """One more epoch over (X, y), continuing P, Q, the update count and the epoch index.

        ``fit(X, y)`` with ``n_epochs=e`` followed by ``partial_fit(X, y)`` gives
        the model of ``fit`` with ``n_epochs=e + 1``, bit for bit. On an unfitted
        estimator it starts from the seeded P^(0), Q^(0). The ridge weight per
        row is 1 / (rows of this call). ``classes``: every class of a 1-D
        target (needed on the first call when later calls may hold other
        classes). The feature scaling is fitted on the first call's rows and kept. Returns self.
        """
        self._validate_params()
        state = None
        if hasattr(self, "P_"):
            if self.P_.shape[1] != self.n_components:
                raise DmlrInputError(
                    f"partial_fit with n_components={self.n_components}; the model has {self.P_.shape[1]}"
                )
            state = OMFState(self.P_, self.Q_, self.n_updates_, self.n_epochs_)
        X, Y = self._partial_fit_data(X, y, classes=classes)
        return self._run(X, Y, state, 1)

    def _run(self, X, Y, state, epochs: int):
        start = time.perf_counter()
        stream = self._stream(X, Y)
        out = run_streaming(
            omf_train_stream, stream, state, self._config(epochs), client=get_config()["client"], where=stream_where()
        )
        self.P_, self.Q_ = out.state.P, out.state.Q
        prev = list(getattr(self, "objective_history_", [])) if state is not None else []
        self.objective_history_ = prev + [float(v) for v in out.objective_history]
        self.n_updates_ = int(out.state.t)
        self.n_epochs_ = int(out.state.epoch)
        self.n_labels_ = int(np.shape(Y)[1])
        self.fit_seconds_ = time.perf_counter() - start
        return self._learn_threshold(X, Y)  # X is scaled already

    # -- prediction --------------------------------------------------------------------
    def prediction_matrix(self) -> np.ndarray:
        """W = P (alpha_code I + P^T P)^{-1} Q^T, float64 (n_features + fit_intercept, n_labels):
        scores = [X, 1] @ W."""
        check_is_fitted(self)
        return objective.prediction_matrix(self.P_, self.Q_, float(self.alpha_code))

    def _label_scores(self, X):
        """Label scores y = Q h, h = (alpha_code I + P^T P)^{-1} P^T x (Algorithm 2), (n, n_labels).

        W is formed once per call and travels with the graph (dask in, dask out).
        """
        return self._map_rows(X, linear_scores, self.prediction_matrix(), bool(self.fit_intercept))

    def labels_from_scores(self, S):
        """0/1 labels (int8, (n, n_labels)) by ``label_rule``: the scores > ``threshold_`` or the
        ``top_k`` best scores."""
        check_is_fitted(self)
        t = self.threshold_
        if is_dask(S):
            return S.map_blocks(apply_rule, self.label_rule, self.top_k, t, dtype=np.int8)
        return apply_rule(S, self.label_rule, self.top_k, t)

    # -- persistence -------------------------------------------------------------------
    def _validate_loaded(self, path) -> None:
        k = int(self.n_features_in_) + int(bool(self.fit_intercept))
        for name, shape in (("P_", (k, int(self.n_components))), ("Q_", (int(self.n_labels_), int(self.n_components)))):
            arr = getattr(self, name)
            if arr.dtype.kind != "f" or arr.shape != shape:
                raise DmlrInputError(
                    f"{name} must be a float array of shape {shape}, got {arr.dtype} {arr.shape}", path=path
                )


def apply_rule(S, rule: str, top_k: int = 1, threshold: float = 0.5) -> np.ndarray:
    """Algorithm 2's SELECT-TOP(m, y) or THRESHOLD(param, y) on a score block.

    Parameters
    ----------
    S : float ndarray (n, l)
    rule : {"top_k", "threshold"}
    top_k : int
        "top_k": the min(top_k, l) highest scores of each row (ties: the lower label index).
    threshold : float or float ndarray (l,)
        "threshold": the labels scoring strictly above it (a row may get none, as in the paper);
        one threshold per label, or one for all.

    Returns
    -------
    int8 ndarray (n, l)
    """
    S = np.asarray(S)
    if rule == "threshold":
        return (S > threshold).astype(np.int8)
    if rule != "top_k":
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    m = min(int(top_k), S.shape[1])
    out = np.zeros(S.shape, dtype=np.int8)
    idx = np.argsort(-S, axis=1, kind="stable")[:, :m]
    np.put_along_axis(out, idx, 1, axis=1)
    return out


# ----------------------------------------------------------------------------
# Cross-validation of the model and prediction parameters
# ----------------------------------------------------------------------------

#: A coarse default grid (the paper gives none): fitted parameters ...
DEFAULT_FIT_GRID = {"label_weight": [0.1, 0.5], "alpha": [1e-3, 1e-1]}
#: ... and prediction-only ones (no refit needed).
DEFAULT_ALPHA_CODES = (1e-3, 1e-1, 1.0)
DEFAULT_THRESHOLDS = tuple(np.round(np.arange(0.1, 0.75, 0.05), 2))
#: Scoring of :func:`cross_validate_omf`: micro F1, the paper's Table 2 measure.
OMF_SCORING = "f1_micro"


def cross_validate_omf(
    estimator: OMF,
    X,
    Y,
    fit_grid=None,
    *,
    alpha_codes=DEFAULT_ALPHA_CODES,
    top_ks=None,
    thresholds=DEFAULT_THRESHOLDS,
    cv=5,
    seed=0,
    scoring: str = OMF_SCORING,
    client=None,
    n_jobs: int | None = None,
    refit=True,
    verbose: int = 0,
):
    """Choose OMF's label_weight, alpha, n_components (...), alpha_code and label rule by K-fold CV.

    A grid search on the engine of :func:`dmlr.model_selection.grid_search_cv`
    (units placed by :class:`~dmlr.paths.UnitRunner`, on the cluster
    or on this process's threads; :class:`~dmlr.model_selection.SearchResult`;
    :class:`~dmlr.progress.SearchProgress`), whose unit is one fold and one
    point of ``fit_grid``: alpha_code, the label rule and k or the threshold
    only change Algorithm 2, so a unit fits once and scores every (alpha_code,
    rule) on the validation part from the same P, Q: fits = ``len(fit_grid)``
    x folds. The splits are :func:`dmlr.model_selection.kfold_indices` (seeded),
    the grid enumeration :func:`dmlr.model_selection.param_grid`.

    Parameters
    ----------
    estimator : OMF
        Base parameters (copied; not fitted).
    X : ndarray or scipy.sparse (n, k)
        In memory (CV needs random rows); dask inputs are computed.
    Y : ndarray (n, l) of 0/1
    fit_grid : mapping of str to list, optional
        Fitted parameters (e.g. label_weight, alpha, n_components, eta0); default
        :data:`DEFAULT_FIT_GRID`.
    alpha_codes : sequence of float
        Candidate alpha_code (xi of eq. 2).
    top_ks : sequence of int, optional
        Candidate k of the "top_k" rule (default 1 .. ceil(2 x mean labels per row), at most 10).
    thresholds : sequence of float
        Candidate thresholds of the "threshold" rule (empty: top rule only).
    cv : int or list of (train_idx, val_idx)
    seed : int
        Seed of the folds.
    scoring : str
        A label metric of :data:`dmlr.metrics.LABEL_METRICS` (higher is
        better): :data:`OMF_SCORING` by default, the paper's Table 2 measure.
        Not the searches' common default, the ranking loss: the label rule
        searched here leaves every score, hence every ranking metric, as it is.
    client : distributed.Client, "local" or None
        As :func:`~dmlr.model_selection.grid_search_cv`'s.
    n_jobs : int or None
        Threads without a cluster (None: one per core).
    refit : bool
    verbose : int
        As :func:`~dmlr.model_selection.grid_search_cv`'s.

    Returns
    -------
    dmlr.model_selection.SearchResult
        Records have ``params``, ``mean_score``, ``std_score``, ``fold_scores``
        and ``mean_n_iter``.
    """
    from dmlr.metrics import LABEL_METRICS
    from dmlr.model_selection import SearchResult, _check_cv, param_grid
    from dmlr.paths import UnitRunner, materialize
    from dmlr.progress import SearchProgress

    if scoring not in LABEL_METRICS or scoring == "hamming_loss":
        raise ValueError(
            f"scoring must be a label metric to maximize, one of {sorted(set(LABEL_METRICS) - {'hamming_loss'})}"
        )
    start = time.perf_counter()
    X, Y = materialize(X, Y)
    Y = np.asarray(Y, dtype=np.int8)
    splits = _check_cv(cv, X.shape[0], seed)
    points = param_grid(fit_grid if fit_grid is not None else DEFAULT_FIT_GRID)
    if top_ks is None:
        card = float(Y.sum(axis=1).mean())
        top_ks = list(range(1, min(10, max(1, int(np.ceil(2 * card)))) + 1))
    rules = [("top_k", int(m)) for m in top_ks] + [("threshold", float(t)) for t in thresholds]
    alpha_codes = [float(xi) for xi in alpha_codes]
    if not rules or not alpha_codes:
        raise ValueError("cross_validate_omf needs at least one alpha_code and one top_k or threshold")
    base = estimator.get_params()
    unit_points = [i for _ in splits for i in range(len(points))]  # the grid point of each unit
    units = [(base, points[i], f, alpha_codes, rules, scoring) for f in range(len(splits)) for i in range(len(points))]
    report = SearchProgress(verbose, (), [X.shape[0]], len(splits), start, staged=False)
    with UnitRunner((X, Y, splits), client, n_jobs=n_jobs) as runner:
        backend = runner.backend
        outputs = runner.map(_omf_unit, units, lambda *_: report.fit_done(len(units)))
    # scores[(point, alpha_code, rule, param)] = list over folds, in fold order
    scores: dict = {}
    n_iter: dict = {}
    for i, (unit_scores, iters) in zip(unit_points, outputs):
        for (xi, rule, param), value in unit_scores.items():
            scores.setdefault((i, xi, rule, param), []).append(value)
            n_iter.setdefault((i, xi, rule, param), []).append(iters)
    results = []
    for key, fold_scores in scores.items():
        i, xi, rule, param = key
        params = {
            **points[i],
            "alpha_code": xi,
            "label_rule": rule,
            **({"top_k": param} if rule == "top_k" else {"threshold": param}),
        }
        results.append(
            {
                "params": params,
                "mean_score": float(np.mean(fold_scores)),
                "std_score": float(np.std(fold_scores)),
                "fold_scores": fold_scores,
                "mean_n_iter": float(np.mean(n_iter[key])),
            }
        )
    best = max(range(len(results)), key=lambda j: (results[j]["mean_score"], -j))
    best_params = results[best]["params"]
    seconds = time.perf_counter() - start
    best_est = OMF(**{**base, **best_params}).fit(X, Y) if refit else None
    return SearchResult(
        best_params=best_params,
        results=results,
        scoring=scoring,
        n_splits=len(splits),
        best_score=results[best]["mean_score"],
        best_index=best,
        best_estimator=best_est,
        greater_is_better=True,
        n_fits=len(units),
        seconds=seconds,
        refit_seconds=time.perf_counter() - start - seconds,
        backend=backend,
    )


def _omf_unit(X, Y, splits, base, point, fold, alpha_codes, rules, scoring):
    """One fold and one fit-grid point of :func:`cross_validate_omf`: fit once, score every
    (alpha_code, rule). Returns ({(alpha_code, rule, param): score}, minibatch updates); a fit
    that diverges (a too large learning rate in the grid) scores -inf."""
    from dmlr.metrics import multilabel_metrics

    tr, va = splits[fold]
    try:
        with config_context(backend="local"):
            est = OMF(**{**base, **point}).fit(X[tr], Y[tr])
    except FloatingPointError:
        return {(xi, rule, param): -np.inf for xi in alpha_codes for rule, param in rules}, 0
    out = {}
    for xi in alpha_codes:
        est.set_params(alpha_code=xi)
        S = est.decision_function(X[va])
        for rule, param in rules:
            Pr = apply_rule(
                S, rule, top_k=param if rule == "top_k" else 1, threshold=param if rule == "threshold" else 0.0
            )
            out[(xi, rule, param)] = float(multilabel_metrics(Y[va], S, Pr, metrics=[scoring])[scoring])
    return out, int(est.n_updates_)
