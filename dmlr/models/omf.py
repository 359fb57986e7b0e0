"""Online Matrix Factorization for multi-label annotation (Otálora-Montenegro et al.; seed 004).

Learning (Algorithm 1): find P (k, s), Q (l, s) and latent codes H (n, s)
minimising eq. 1,

    (1 - alpha) ||X - H P^T||^2 + alpha ||Y - H Q^T||^2 + lam (||P||^2 + ||Q||^2 + ||H||^2),

by minibatch SGD on P and Q with the codes of each minibatch in closed form
(:mod:`dmlr.objectives.omf`). Prediction (Algorithm 2): h = (xi I + P^T P)^{-1} P^T x,
scores y = Q h (:meth:`OMF.decision_function`), then the top-m labels or the
labels scoring above a threshold (:meth:`OMF.predict`).

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
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from dmlr.distributed.stream import ChunkStream, run_streaming
from dmlr.errors import DmlrInputError
from dmlr.kernels.blocks import append_bias, as_matrix, is_dask, regroup_rows
from dmlr.models.base import (
    BaseModel,
    check_random_state,
    check_training_arrays,
    register_model,
)
from dmlr.objectives import omf as objective

#: Prediction rules of :meth:`OMF.predict` (Algorithm 2: SELECT-TOP or THRESHOLD).
RULES = ("top", "threshold")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and np.isfinite(v)


# ----------------------------------------------------------------------------
# The learning loop (runs where the data are read: a worker or this process)
# ----------------------------------------------------------------------------

def _init_factors(k: int, l: int, s: int, seed, scale: float):
    """P^(0), Q^(0) of Algorithm 1 (RANDOM-MATRIX): N(0, scale^2) entries from ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence([0 if seed is None else int(seed), 4, 0]))
    return scale * rng.standard_normal((k, s)), scale * rng.standard_normal((l, s))


def _checked(stream):
    """The stream's blocks, each checked (finite X, 0/1 Y), which
    :func:`check_training_arrays` does not do for dask input."""
    row0 = 0
    for block in stream:
        X, Y = block.X, block.Y
        vals = X.data if sp.issparse(X) else X
        if not np.all(np.isfinite(vals)):
            bad = int(np.flatnonzero(~np.isfinite(X.toarray() if sp.issparse(X) else X).all(axis=1))[0])
            raise DmlrInputError("X holds a non-finite value (NaN or inf)", row=row0 + bad)
        if Y.size and (Y.min() < 0 or Y.max() > 1):
            bad = int(np.flatnonzero(((Y < 0) | (Y > 1)).any(axis=1))[0])
            raise DmlrInputError("labels must be 0 or 1", row=row0 + bad)
        row0 += block.n_rows
        yield block


def _train(stream, state: dict, cfg: dict) -> dict:
    """Run ``cfg["epochs"]`` epochs of Algorithm 1 over ``stream`` from ``state``.

    Parameters
    ----------
    stream : ChunkStream
    state : dict or None
        ``P`` (k, s), ``Q`` (l, s) float64, ``t`` (minibatch updates so far),
        ``epoch`` (epochs so far); None: a fresh start from the seed.
    cfg : dict
        alpha, lam, dim, eta0, decay, batch_size, shuffle_window, seed,
        init_scale, epochs.

    Returns
    -------
    dict
        The new state plus ``history`` (eq. 1 of each epoch run here).
    """
    from threadpoolctl import threadpool_limits

    k, l, n = stream.n_features, stream.n_labels, stream.n_rows
    if state is None:
        P, Q = _init_factors(k, l, int(cfg["dim"]), cfg["seed"], float(cfg["init_scale"]))
        t, epoch = 0, 0
    else:
        P, Q = np.array(state["P"], dtype=np.float64), np.array(state["Q"], dtype=np.float64)
        t, epoch = int(state["t"]), int(state["epoch"])
    alpha, lam, b = float(cfg["alpha"]), float(cfg["lam"]), int(cfg["batch_size"])
    window = int(cfg["shuffle_window"]) or b
    seed = 0 if cfg["seed"] is None else int(cfg["seed"])
    history = []
    # One BLAS thread: the same summation order on any worker and in-process, hence
    # identical models wherever the loop runs.
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(int(cfg["epochs"])):
            total = 0.0
            # windows are fixed global row ranges, whatever the chunking
            for w, win in enumerate(regroup_rows(_checked(stream), window)):
                Xw, Yw = win.X, win.Y
                m = Yw.shape[0]
                if cfg["shuffle_window"]:
                    # SAMPLE-WITHOUT-REPLACEMENT of Algorithm 1, within the window; RESTART-SAMPLING
                    # per epoch (a new permutation from the epoch in the seed).
                    order = np.random.default_rng(np.random.SeedSequence([seed, 4, 1, epoch, w])).permutation(m)
                    Xw, Yw = Xw[order], Yw[order]
                for a in range(0, m, b):
                    lr = objective.learning_rate(t, cfg["eta0"], cfg["decay"])
                    P, Q, loss = objective.sgd_step(Xw[a:a + b], Yw[a:a + b], P, Q, alpha, lam, lr, n)
                    total += loss
                    t += 1
            if not (np.all(np.isfinite(P)) and np.all(np.isfinite(Q))):
                raise FloatingPointError(f"OMF diverged in epoch {epoch + 1} (non-finite P or Q); "
                                         f"lower learning_rate (now {cfg['eta0']})")
            # eq. 1 of the epoch: the rows' shares at the codes and factors they were
            # seen with (progressive), plus the ridge on the epoch's final P, Q.
            history.append(total + lam * (float(np.vdot(P, P)) + float(np.vdot(Q, Q))))
            epoch += 1
    return {"P": P, "Q": Q, "t": t, "epoch": epoch, "history": history}


# ----------------------------------------------------------------------------
# The estimator
# ----------------------------------------------------------------------------

@register_model
class OMF(BaseModel):
    """Online Matrix Factorization multi-label classifier (Algorithms 1 and 2 of the paper).

    Parameters
    ----------
    dim : int
        s, the dimension of the latent space.
    alpha : float in [0, 1]
        Weight of the label reconstruction in eq. 1 (1 - alpha: the features).
    lam : float > 0
        lambda of eq. 1 (ridge on P, Q and the codes H).
    xi : float >= 0
        Ridge of the prediction embedding, eq. 2.
    epochs : int >= 1
        Passes over the data in ``fit``.
    batch_size : int >= 1
        Rows per SGD update (the paper's minibatch extension; 1 is Algorithm 1 as printed).
    learning_rate : float > 0
        eta0, the first step size.
    decay : float >= 0 or None
        Step sizes gamma_t = eta0 / (1 + eta0 decay t), t = updates so far;
        None: decay = lam (the classical choice for a lam-strongly convex term).
    shuffle_window : int >= 0
        Rows per shuffling window (a multiple of ``batch_size``); 0: rows in stored order.
    init_scale : float > 0
        P^(0), Q^(0) entries ~ N(0, init_scale^2).
    rule : {"top", "threshold"}
        Prediction rule: the ``top_m`` highest scores, or the scores > ``threshold``.
    top_m : int >= 1
    threshold : float
    fit_intercept : bool
        Append a constant-1 feature (not in the paper; off by default).
    random_state : int >= 0 or None
        Seed of P^(0), Q^(0) and of the window permutations (None: 0).
    chunk_rows : int
        Rows per chunk for in-memory input (dask input keeps its chunks);
        the model does not depend on it.
    where : {"auto", "worker", "local"}
        Where the learning loop runs (:func:`dmlr.distributed.stream.run_streaming`).

    Attributes
    ----------
    P_ : float64 (n_features + fit_intercept, dim)
    Q_ : float64 (n_labels, dim)
    objective_history_ : list of float
        Eq. 1 after each epoch on the rows of that epoch: the codes and the
        data terms of each minibatch at the factors it was seen with (a
        progressive value, no extra pass), plus lam (||P||^2 + ||Q||^2) at the
        epoch's end. Continued by ``partial_fit``.
    n_epochs_ : int
        Epochs run so far (also the index of the next epoch's permutations).
    n_updates_ : int
        SGD updates so far (the t of the step-size schedule).
    n_features_in_, n_labels_ : int
    fit_seconds_ : float

    Notes
    -----
    Deviations from the paper, all for correctness or streaming:

    * The codes are the exact minimisers of eq. 1 for every alpha (the
      paper's Algorithm 1 formula is the alpha = 1/2 case) and are computed
      for the current minibatch before the step (the printed algorithm uses
      the previous sample's h).
    * Each row carries lam / n of the ridge on P, Q, so that an epoch of
      steps is an SGD on eq. 1 itself; the paper's eq. 3 puts lam on P, Q for
      every row (n lam per epoch). Minimising eq. 1 with weight c lam on P, Q
      is the same as with weight lam' = lam sqrt(c) on everything, up to
      rescaling P, Q by c^(-1/4) and xi by c^(-1/2): the two give the same
      family of predictors, so the cross-validated results are comparable.
    * The step-size schedule is eta0 / (1 + eta0 decay t) (see
      :func:`dmlr.objectives.omf.learning_rate`).
    * Shuffling is within windows of ``shuffle_window`` rows, not global.
    """

    _fitted_arrays = ("P_", "Q_")
    _fitted_attributes = ("objective_history_", "n_epochs_", "n_updates_", "n_features_in_", "n_labels_",
                          "fit_seconds_")

    def __init__(self, dim=10, alpha=0.5, lam=1e-3, xi=1.0, epochs=10, batch_size=32, learning_rate=0.1,
                 decay=None, shuffle_window=4096, init_scale=0.1, rule="top", top_m=1, threshold=0.5,
                 fit_intercept=False, random_state=0, chunk_rows=4096, where="auto"):
        self.dim = dim
        self.alpha = alpha
        self.lam = lam
        self.xi = xi
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.decay = decay
        self.shuffle_window = shuffle_window
        self.init_scale = init_scale
        self.rule = rule
        self.top_m = top_m
        self.threshold = threshold
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.chunk_rows = chunk_rows
        self.where = where

    # -- checks ------------------------------------------------------------------------
    def _check_params(self) -> None:
        for name in ("dim", "epochs", "batch_size", "chunk_rows"):
            v = getattr(self, name)
            if not (_is_int(v) and v >= 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not (_is_real(self.alpha) and 0.0 <= self.alpha <= 1.0):
            raise ValueError(f"alpha must be a number in [0, 1], got {self.alpha!r}")
        if not (_is_real(self.lam) and self.lam > 0):
            raise ValueError(f"lam must be a finite number > 0 (it makes the code system definite), got {self.lam!r}")
        if not (_is_real(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a finite number > 0, got {self.learning_rate!r}")
        if self.decay is not None and not (_is_real(self.decay) and self.decay >= 0):
            raise ValueError(f"decay must be None or a finite number >= 0, got {self.decay!r}")
        if not (_is_real(self.init_scale) and self.init_scale > 0):
            raise ValueError(f"init_scale must be a finite number > 0, got {self.init_scale!r}")
        sw = self.shuffle_window
        if not (_is_int(sw) and sw >= 0 and sw % self.batch_size == 0):
            raise ValueError(f"shuffle_window must be 0 or a positive multiple of batch_size={self.batch_size}, "
                             f"got {sw!r}")
        if self.where not in ("auto", "worker", "local"):
            raise ValueError(f"where must be 'auto', 'worker' or 'local', got {self.where!r}")
        check_random_state(self.random_state)
        self._check_predict_params()

    def _check_predict_params(self) -> None:
        if not (_is_real(self.xi) and self.xi >= 0):
            raise ValueError(f"xi must be a finite number >= 0, got {self.xi!r}")
        if self.rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {self.rule!r}")
        if not (_is_int(self.top_m) and self.top_m >= 1):
            raise ValueError(f"top_m must be a positive integer, got {self.top_m!r}")
        if not _is_real(self.threshold):
            raise ValueError(f"threshold must be a finite number, got {self.threshold!r}")

    def _config(self, epochs: int) -> dict:
        return {"alpha": float(self.alpha), "lam": float(self.lam), "dim": int(self.dim),
                "eta0": float(self.learning_rate),
                "decay": float(self.lam if self.decay is None else self.decay),
                "batch_size": int(self.batch_size), "shuffle_window": int(self.shuffle_window),
                "seed": self.random_state, "init_scale": float(self.init_scale), "epochs": int(epochs)}

    def _stream(self, X, Y) -> ChunkStream:
        if not hasattr(X, "shape"):
            X = np.asarray(X)
        if not is_dask(Y):
            Y = np.asarray(Y)
        check_training_arrays(X, Y)
        if X.shape[0] == 0:
            raise DmlrInputError("X has no rows")
        if (not is_dask(X) and not sp.issparse(X) and not hasattr(X, "to_scipy_sparse")
                and not np.issubdtype(np.asarray(X).dtype, np.number)):
            raise DmlrInputError(f"X must be numeric, got dtype {np.asarray(X).dtype}")
        return ChunkStream(X, Y, fit_intercept=bool(self.fit_intercept), chunk_rows=int(self.chunk_rows))

    # -- fitting -----------------------------------------------------------------------
    def fit(self, X, Y, *, client=None):
        """Algorithm 1 from a fresh seeded start: ``epochs`` passes over (X, Y). Returns self.

        Parameters
        ----------
        X : ndarray, scipy.sparse or dask array, shape (n, k)
        Y : array-like or dask array (n, l) of 0/1
        client : distributed.Client, optional
            Where to run the loop for dask input (default: the current client).
        """
        self._check_params()
        for name in self._fitted_arrays:
            if hasattr(self, name):
                delattr(self, name)
        return self._run(X, Y, None, int(self.epochs), client)

    def partial_fit(self, X, Y, *, client=None):
        """One more epoch over (X, Y), continuing P, Q, the update count and the epoch index.

        ``fit(X, Y)`` with ``epochs=e`` followed by ``partial_fit(X, Y)`` gives
        the model of ``fit`` with ``epochs=e + 1``, bit for bit. On an unfitted
        estimator it starts from the seeded P^(0), Q^(0). The ridge weight per
        row is 1 / (rows of this call). Returns self.
        """
        self._check_params()
        state = None
        if hasattr(self, "P_"):
            k = int(X.shape[1]) + int(bool(self.fit_intercept))
            if self.P_.shape[0] != k or self.Q_.shape[0] != int(np.shape(Y)[1]) or self.P_.shape[1] != self.dim:
                raise DmlrInputError(f"partial_fit got {X.shape[1]} features and {np.shape(Y)[1]} labels (dim "
                                     f"{self.dim}); the model has {self.n_features_in_}, {self.n_labels_} "
                                     f"(dim {self.P_.shape[1]})")
            state = {"P": self.P_, "Q": self.Q_, "t": self.n_updates_, "epoch": self.n_epochs_}
        return self._run(X, Y, state, 1, client)

    def _run(self, X, Y, state, epochs: int, client):
        start = time.perf_counter()
        stream = self._stream(X, Y)
        out = run_streaming(_train, stream, state, self._config(epochs), client=client, where=self.where)
        self.P_, self.Q_ = out["P"], out["Q"]
        prev = list(getattr(self, "objective_history_", [])) if state is not None else []
        self.objective_history_ = prev + [float(v) for v in out["history"]]
        self.n_updates_ = int(out["t"])
        self.n_epochs_ = int(out["epoch"])
        self.n_features_in_ = int(X.shape[1])
        self.n_labels_ = int(np.shape(Y)[1])
        self.fit_seconds_ = time.perf_counter() - start
        return self

    # -- prediction --------------------------------------------------------------------
    def prediction_matrix(self) -> np.ndarray:
        """W = P (xi I + P^T P)^{-1} Q^T, float64 (n_features + fit_intercept, n_labels): scores = [X, 1] @ W."""
        self._check_fitted()
        self._check_predict_params()
        return objective.prediction_matrix(self.P_, self.Q_, float(self.xi))

    def decision_function(self, X):
        """Label scores y = Q h, h = (xi I + P^T P)^{-1} P^T x (Algorithm 2), shape (n, n_labels).

        Dask in, dask out (row chunks kept).
        """
        self._W = self.prediction_matrix()   # once per call, not once per chunk
        try:
            return super().decision_function(X)
        finally:
            del self._W

    def _scores_block(self, X):
        W = getattr(self, "_W", None)
        if W is None:
            W = self.prediction_matrix()
        X = as_matrix(X)
        if self.fit_intercept:
            X = append_bias(X)
        return np.asarray(X @ W)

    def labels_from_scores(self, S):
        """0/1 labels (int8, (n, n_labels)) by ``rule``: the ``top_m`` best scores or the scores > ``threshold``."""
        if is_dask(S):
            return S.map_blocks(apply_rule, self.rule, self.top_m, self.threshold, dtype=np.int8)
        return apply_rule(S, self.rule, self.top_m, self.threshold)

    # -- persistence -------------------------------------------------------------------
    def _validate_loaded(self, path) -> None:
        k = int(self.n_features_in_) + int(bool(self.fit_intercept))
        for name, shape in (("P_", (k, int(self.dim))), ("Q_", (int(self.n_labels_), int(self.dim)))):
            arr = getattr(self, name)
            if arr.dtype.kind != "f" or arr.shape != shape:
                raise DmlrInputError(f"{name} must be a float array of shape {shape}, got {arr.dtype} {arr.shape}",
                                     path=path)


def apply_rule(S, rule: str, top_m: int = 1, threshold: float = 0.5) -> np.ndarray:
    """Algorithm 2's SELECT-TOP(m, y) or THRESHOLD(param, y) on a score block.

    Parameters
    ----------
    S : float ndarray (n, l)
    rule : {"top", "threshold"}
    top_m : int
        "top": the min(top_m, l) highest scores of each row (ties: the lower label index).
    threshold : float
        "threshold": the labels scoring strictly above it (a row may get none, as in the paper).

    Returns
    -------
    int8 ndarray (n, l)
    """
    S = np.asarray(S)
    if rule == "threshold":
        return (S > threshold).astype(np.int8)
    if rule != "top":
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    m = min(int(top_m), S.shape[1])
    out = np.zeros(S.shape, dtype=np.int8)
    idx = np.argsort(-S, axis=1, kind="stable")[:, :m]
    np.put_along_axis(out, idx, 1, axis=1)
    return out


# ----------------------------------------------------------------------------
# Cross-validation of the model and prediction parameters
# ----------------------------------------------------------------------------

#: A coarse default grid (the paper gives none): fitted parameters ...
DEFAULT_FIT_GRID = {"alpha": [0.1, 0.5], "lam": [1e-3, 1e-1]}
#: ... and prediction-only ones (no refit needed).
DEFAULT_XIS = (1e-3, 1e-1, 1.0)
DEFAULT_THRESHOLDS = tuple(np.round(np.arange(0.1, 0.75, 0.05), 2))


@dataclass
class OMFSearchResult:
    """Outcome of :func:`cross_validate_omf`.

    Attributes
    ----------
    best_params : dict
        OMF parameters of the best point (fit grid, xi, rule, top_m / threshold).
    best_score : float
        Its mean validation score over the folds.
    results : list of dict
        One record per evaluated point: ``params``, ``mean_score``, ``fold_scores``.
    best_estimator : OMF or None
        Refitted on all the data with ``best_params`` (``refit=True``).
    seconds : float
    """

    best_params: dict
    best_score: float
    results: list = field(repr=False)
    best_estimator: object = None
    seconds: float = 0.0


def _f1_micro(Y: np.ndarray, Pr: np.ndarray) -> float:
    from dmlr.metrics import multilabel_metrics

    return multilabel_metrics(Y, np.zeros(Y.shape), Pr, metrics=["f1_micro"])["f1_micro"]


def cross_validate_omf(estimator: OMF, X, Y, fit_grid=None, *, xis=DEFAULT_XIS, top_ms=None,
                       thresholds=DEFAULT_THRESHOLDS, cv=5, seed=0, scoring=None, refit=True,
                       verbose=False) -> OMFSearchResult:
    """Choose OMF's alpha, lam, dim (...), xi and prediction rule by K-fold cross-validation.

    Why not :func:`dmlr.model_selection.grid_search_cv`: it re-fits every grid
    point and scores with a fixed threshold rule, while xi, the rule and m or
    the threshold only change Algorithm 2. Here each fold fits once per
    point of ``fit_grid`` and then scores every (xi, rule) on the validation
    part from the same P, Q: fits = |fit_grid| x folds. The splits are
    :func:`dmlr.model_selection.kfold_indices` (seeded), the grid
    enumeration :func:`dmlr.model_selection.param_grid`.

    Parameters
    ----------
    estimator : OMF
        Base parameters (copied; not fitted).
    X : ndarray or scipy.sparse (n, k)
        In memory (CV needs random rows); dask inputs are computed.
    Y : ndarray (n, l) of 0/1
    fit_grid : mapping of str to list, optional
        Fitted parameters (e.g. alpha, lam, dim, learning_rate); default
        :data:`DEFAULT_FIT_GRID`.
    xis : sequence of float
        Candidate xi (eq. 2).
    top_ms : sequence of int, optional
        Candidate m of the "top" rule (default 1 .. ceil(2 x mean labels per row), at most 10).
    thresholds : sequence of float
        Candidate thresholds of the "threshold" rule (empty: top rule only).
    cv : int or list of (train_idx, val_idx)
    seed : int
        Seed of the folds.
    scoring : callable (Y, P01) -> float, optional
        Higher is better; default micro F1 (the paper's Table 2 measure).
    refit : bool
    verbose : bool

    Returns
    -------
    OMFSearchResult
    """
    from dmlr.model_selection import _check_cv, _materialize, param_grid

    start = time.perf_counter()
    X, Y = _materialize(X, Y)
    Y = np.asarray(Y, dtype=np.int8)
    scoring = scoring or _f1_micro
    splits = _check_cv(cv, X.shape[0], seed)
    points = param_grid(fit_grid if fit_grid is not None else DEFAULT_FIT_GRID)
    if top_ms is None:
        card = float(Y.sum(axis=1).mean())
        top_ms = list(range(1, min(10, max(1, int(np.ceil(2 * card)))) + 1))
    rules = [("top", int(m)) for m in top_ms] + [("threshold", float(t)) for t in thresholds]
    if not rules or not list(xis):
        raise ValueError("cross_validate_omf needs at least one xi and one top_m or threshold")
    base = estimator.get_params()
    # scores[(point, xi, rule, param)] = list over folds
    scores: dict = {}
    for f, (tr, va) in enumerate(splits):
        for i, point in enumerate(points):
            try:
                est = OMF(**{**base, **point, "where": "local"}).fit(X[tr], Y[tr])
            except FloatingPointError:   # a too large learning rate in the grid: score it -inf
                for xi in xis:
                    for rule, param in rules:
                        scores.setdefault((i, float(xi), rule, param), []).append(-np.inf)
                continue
            for xi in xis:
                est.set_params(xi=float(xi))
                S = est.decision_function(X[va])
                for rule, param in rules:
                    Pr = apply_rule(S, rule, top_m=param if rule == "top" else 1,
                                    threshold=param if rule == "threshold" else 0.0)
                    scores.setdefault((i, float(xi), rule, param), []).append(scoring(Y[va], Pr))
            if verbose:
                print(f"  fold {f} point {point}: {time.perf_counter() - start:.1f} s", flush=True)
    results = []
    for (i, xi, rule, param), fold_scores in scores.items():
        params = {**points[i], "xi": xi, "rule": rule, **({"top_m": param} if rule == "top" else {"threshold": param})}
        results.append({"params": params, "mean_score": float(np.mean(fold_scores)), "fold_scores": fold_scores})
    best = max(range(len(results)), key=lambda j: (results[j]["mean_score"], -j))
    best_params = results[best]["params"]
    best_est = OMF(**{**base, **best_params}).fit(X, Y) if refit else None
    return OMFSearchResult(best_params=best_params, best_score=results[best]["mean_score"], results=results,
                           best_estimator=best_est, seconds=time.perf_counter() - start)
