"""Linear Rank-SVM trained online (ANSGD, SGD) or in batch (smoothing + L-BFGS), and MMP.

Park & Choi, ICASSP 2013. Rank-SVM minimizes (eqs. 5-6)

    lambda/2 ||M||_F^2 + 1/n sum_i 1/N_i sum_{k in Y_i, l not in Y_i} [1 - m_k.x_i + m_l.x_i]_+

with the bias as an appended constant feature (``fit_intercept``; regularized
like the rest of M, as the paper's augmented m_k). Solvers
(:mod:`dmlr.solvers.sgd`): ``"ansgd"`` (Algorithm 1 with the smoothed gradient
of eqs. 12-17), ``"sgd"`` (eq. 7) and ``"lbfgs"`` (the batch baseline: the
smoothed objective, fixed smoothing ``smoothing``, by scipy's L-BFGS-B).
:class:`MMP` is Crammer & Singer's multi-class multi-label perceptron (isErr
loss, uniform update), the paper's other online baseline.

The models rank labels: ``decision_function`` gives the scores
``[X, 1] @ coef_``. The pairwise loss only constrains score differences, so 0
is not a calibrated threshold: by default (``threshold="auto"``) ``fit``
learns one per label on the training rows (:func:`dmlr.metrics.label_thresholds`),
kept as ``threshold_``; ``predict`` labels the scores above them, at least one per row
(:func:`dmlr.metrics.predict_from_scores`, the rule ``dmlr.evaluate`` applies
to every model).
"""

from __future__ import annotations

import time
from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from dmlr.config import chunk_options, get_config, stream_where
from dmlr.data.arrays import is_dask
from dmlr.data.blocks import Block, make_block
from dmlr.distributed.chunks import make_chunkset
from dmlr.distributed.stream import ChunkStream, run_streaming, streaming_client
from dmlr.errors import DmlrInputError
from dmlr.metrics import multilabel_metrics, predict_from_scores
from dmlr.models.base import (
    NOT_A_ZERO_THRESHOLD,
    SCALING,
    SEED,
    THRESHOLD,
    Axis,
    LinearModel,
    half_decades,
    register_model,
    store_params,
)
from dmlr.objectives import ranksvm as objective
from dmlr.solvers import sgd as solvers
from dmlr.solvers.lbfgs import scipy_lbfgs

#: Default number of instance updates of the online solvers (the paper's 7 x 10^4).
ONLINE_UPDATES = 70_000
RANKSVM_SOLVERS = ("ansgd", "sgd", "lbfgs")


#: Rows per group of the streamed instance order (``sampling="stream"``).
STREAM_GROUP_ROWS = 1024


def _stream_fit(
    stream, solver, state, n_updates, lam, random_state, average, record_every, group_objective, step_kwargs
):
    """The streamed online fit, run where :func:`run_streaming` puts it (module level: shipped to workers)."""
    return solvers.run_online_stream(
        solver,
        state,
        stream,
        n_updates,
        lam=lam,
        group_rows=STREAM_GROUP_ROWS,
        random_state=random_state,
        average=average,
        group_objective=group_objective,
        record_every=record_every,
        **step_kwargs,
    )


class _OnlineRanker(LinearModel):
    """Shared fit / partial_fit / persistence of the linear online label rankers."""

    _solver_name: str = ""
    _fitted_attributes = (
        "objective_history_",
        "objective_iterations_",
        "n_iter_",
        "n_updates_",
        "n_features_in_",
        "n_labels_",
        "fit_seconds_",
        "converged_",
        "backend_",
    )
    _learns_threshold = True
    _expected_failed_checks = {
        "check_classifier_multioutput": NOT_A_ZERO_THRESHOLD.format(
            rule="score > threshold_, learned per label on the training rows (threshold='auto')"
        )
    }
    _parameter_constraints = {
        "n_updates": [Interval(Integral, 1, None, closed="left")],
        "fit_intercept": ["boolean"],
        "random_state": SEED,
        "average": ["boolean"],
        "sampling": [StrOptions({"auto", *solvers.SAMPLING})],
        "record_every": [Interval(Integral, 0, None, closed="left")],
        "threshold": THRESHOLD,
        "scaling": SCALING,
    }

    # -- subclass hooks -------------------------------------------------------------
    def _solver(self) -> str:
        return self._solver_name

    def _lam(self) -> float:
        return 0.0

    def _step_kwargs(self) -> dict:
        return {}

    def _record_objective(self, block):
        """objective(M) -> float for the history (on the rows of the current call)."""
        raise NotImplementedError

    def _fitted_array_names(self) -> tuple:
        if self._solver() == "lbfgs":
            return ("coef_",)
        names = ("coef_", "iterate_", "average_")
        return names + (("psi_",) if self._solver() == "ansgd" else ())

    # -- data -----------------------------------------------------------------------
    def _block(self, X, Y):
        if is_dask(X):
            X = X.compute()
        if is_dask(Y):
            Y = Y.compute()
        return make_block(X, np.asarray(Y), bool(self.fit_intercept))

    # -- fitting --------------------------------------------------------------------
    def fit(self, X, y):
        """Fit from scratch: M_0 ~ N(0, 0.01) from ``random_state``, then ``n_updates`` updates. Returns self.

        In-memory input with ``sampling`` "uniform" or "permutation": the seeded
        instance stream :func:`dmlr.solvers.sgd.instance_order` (the same as
        ``partial_fit(X[order], Y[order])`` on a fresh estimator).
        ``sampling="stream"`` (the default for dask input, e.g. a Zarr store):
        the row chunks are read in order, one at a time with the next one
        prefetched, on a Dask worker when a client is current
        (:func:`dmlr.config_context`), and never gathered; rows are visited by groups of
        :data:`~dmlr.models.ranksvm.STREAM_GROUP_ROWS` in a seeded order within each group
        (:func:`dmlr.solvers.sgd.run_online_stream`), and ``objective_history_``
        holds the objective on the current group's rows.
        """
        self._validate_params()
        for name in self._fitted_array_names() + ("_state",):
            if hasattr(self, name):
                delattr(self, name)
        X, Y = self._fit_data(X, y)
        T = int(self.n_updates)
        if self._sampling(X) == "stream":
            return self._fit_stream(X, Y, T)._learn_threshold(X, Y)
        block = self._block(X, Y)
        order = solvers.instance_order(block.n_rows, T, self.random_state, self._sampling(X))
        self.backend_ = "local"
        return self._run(block, order, int(X.shape[1]), reset=True)._learn_threshold(X, Y)

    def _sampling(self, X) -> str:
        if self.sampling == "auto":
            return "stream" if is_dask(X) else "uniform"
        return self.sampling

    def _fit_stream(self, X, Y, T: int):
        start = time.perf_counter()
        stream = ChunkStream(X, Y, fit_intercept=bool(self.fit_intercept))
        d, K = stream.n_features, stream.n_labels
        state = self._current_state(d, K, int(X.shape[1]), reset=True)
        use = streaming_client(stream, get_config()["client"], stream_where())
        record = self._record_objective
        res = run_streaming(
            _stream_fit,
            stream,
            self._solver(),
            state,
            T,
            self._lam(),
            self.random_state,
            bool(self.average),
            int(self.record_every),
            lambda Xg, Yg: record(Block(Xg, Yg)),
            self._step_kwargs(),
            client=use,
            where="worker" if use is not None else "local",
        )
        self.backend_ = "dask" if use is not None else "local"
        self._state = res.state
        self._store_state(res.state)
        self.objective_history_ = res.objective_history
        self.objective_iterations_ = res.history_iterations
        self.n_labels_ = K
        self.converged_ = False
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def partial_fit(self, X, y, classes=None):
        """Continue the online run on the rows of (X, Y), once each, in the given order.

        The state (iterate, ANSGD's Psi, the update counter t, the running
        average) continues exactly, so ``partial_fit(A).partial_fit(B)`` equals
        ``partial_fit(vstack(A, B))`` and, on a fresh estimator, starts from the
        same seeded M_0 as ``fit``. ``classes``: every class of a 1-D target
        (needed on the first call when later calls may hold other classes).
        The feature scaling is fitted on the first call's rows and kept. Returns self.
        """
        self._validate_params()
        X, Y = self._partial_fit_data(X, y, classes=classes)
        block = self._block(X, Y)
        return self._run(block, np.arange(block.n_rows), int(X.shape[1]), reset=False)._learn_threshold(X, Y)

    def _current_state(self, d: int, K: int, n_features: int, reset: bool):
        state = None if reset else getattr(self, "_state", None)
        if state is None and not reset and hasattr(self, "iterate_"):  # loaded from a file
            state = solvers.OnlineState(
                M=np.array(self.iterate_, dtype=np.float64),
                M_avg=np.array(self.average_, dtype=np.float64),
                t=int(self.n_updates_),
                Psi=(np.array(self.psi_, dtype=np.float64) if self._solver() == "ansgd" else None),
            )
        if state is not None and (state.M.shape != (d, K) or n_features != self.n_features_in_):
            raise DmlrInputError(
                f"partial_fit got {n_features} features and {K} labels; the model has "
                f"{self.n_features_in_} and {self.n_labels_}"
            )
        if state is None:
            state = solvers.init_state((d, K), self.random_state, self._solver())
            self.objective_history_, self.objective_iterations_ = [], []
        return state

    def _run(self, block, order, n_features: int, reset: bool):
        start = time.perf_counter()
        d, K = block.X.shape[1], block.Y.shape[1]
        state = self._current_state(d, K, n_features, reset)
        record = self._record_objective(block) if self.record_every else None
        res = solvers.run_online(
            self._solver(),
            state,
            block.X,
            block.Y,
            order,
            lam=self._lam(),
            average=bool(self.average),
            objective=record,
            record_every=int(self.record_every),
            **self._step_kwargs(),
        )
        self._state = state
        self._store_state(state)
        self.objective_history_ = list(self.objective_history_) + res.objective_history
        self.objective_iterations_ = list(self.objective_iterations_) + res.history_iterations
        self.n_labels_ = K
        self.converged_ = False
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _store_state(self, state) -> None:
        self.iterate_ = state.M
        self.average_ = state.M_avg
        if state.Psi is not None:
            self.psi_ = state.Psi
        self.coef_ = state.output(bool(self.average))
        self.n_updates_ = int(state.t)
        self.n_iter_ = int(state.t)


@register_model
class RankSVM(_OnlineRanker):
    """Linear Rank-SVM (Park & Choi 2013, eqs. 5-6) by ANSGD, SGD or smoothing + L-BFGS.

    Parameters
    ----------
    alpha : float
        lambda of eq. 5, the Frobenius weight (> 0 for the online solvers: their steps divide by it).
        Default 10^-3.5, cross-validation's typical choice
        (``benchmarks/default_params.py``).
    solver : {"ansgd", "sgd", "lbfgs"}
        Algorithm 1 (ANSGD), eq. 7 (subgradient SGD, eta_t = 1/(lambda (t + omega))),
        or the batch baseline (L-BFGS-B on the objective smoothed with ``smoothing``).
    n_updates : int
        Online solvers: the number of single-row updates (70 000, the paper's).
    max_iter : int
        "lbfgs": L-BFGS iterations.
    fit_intercept : bool
        Append a constant-1 feature (the bias, regularized).
    random_state : int or None
        Seed of M_0 ~ N(0, 0.01) and of the instance stream.
    average : bool
        Online solvers: ``coef_`` is the averaged solution M_hat = 1/t sum_j M_j
        (the paper, Section 5) rather than the last iterate.
    sampling : {"auto", "uniform", "permutation", "stream"}
        Instance stream of ``fit``: uniform draws with replacement (the paper)
        or epochs of random permutations, both on in-memory data; or
        "stream": row chunks read in order, rows shuffled within groups of
        :data:`~dmlr.models.ranksvm.STREAM_GROUP_ROWS` (see :meth:`~dmlr.models.RankSVM.fit`). "auto": "stream" for dask
        input (a Zarr store), else "uniform".
    omega : float
        SGD's Omega (1e3, the paper's).
    lipschitz : float
        ANSGD's constant in theta_t (the paper's ``+ 1``; see :mod:`dmlr.solvers.sgd`).
    smoothing : float
        "lbfgs": the smoothing parameter alpha of eq. 9; F - F_alpha is between
        0 and alpha * mean(N_i) / 2.
    tol : float
        "lbfgs": gradient tolerance (scipy's gtol).
    record_every : int
        Online solvers: record the objective (eq. 6, unsmoothed, of the output
        on the rows of the current fit / partial_fit call) every this many
        updates (0: never; each record costs a pass over those rows).
        "lbfgs" records the smoothed objective after every iteration regardless.
    threshold : float or "auto"
        Score threshold of ``predict``. "auto": learned per label by ``fit``
        (and each ``partial_fit``, on its rows) on the training rows' scores
        (:func:`dmlr.metrics.label_thresholds`), kept as ``threshold_``,
        float64 (n_labels,). A number: that threshold for every label.
    scaling : {"auto", "standard", "maxabs", "tfidf"} or None
        Feature scaling fitted inside the model and applied by every
        predict-type method (:mod:`dmlr.preprocessing`): "auto" standardizes
        dense features and divides sparse ones by their largest absolute
        value; None uses the features as given.

    Execution ("lbfgs": where the row blocks of the map-reduced gradient
    live; streamed online fits: on a worker or in this process) is set with
    :func:`dmlr.config_context`, not here.

    Attributes
    ----------
    coef_ : float64 (n_features + fit_intercept, n_labels)
        M (last row: bias).
    iterate_, average_ : float64, like ``coef_``
        Online solvers: M_t and M_hat (the state ``partial_fit`` continues).
    psi_ : float64, like ``coef_``
        ANSGD's Psi_t.
    n_updates_, n_iter_ : int
        Online: updates so far (t). "lbfgs": ``n_iter_`` = L-BFGS iterations.
    objective_history_, objective_iterations_ : list
        Recorded objective values and the update count (or L-BFGS iteration) of each.
    converged_ : bool
        "lbfgs": scipy's success flag; online solvers: False (they run ``n_updates`` updates).
    """

    _parameter_constraints = {
        **_OnlineRanker._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
        "solver": [StrOptions(set(RANKSVM_SOLVERS))],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "omega": [Interval(Real, 0, None, closed="left")],
        "lipschitz": [Interval(Real, 0, None, closed="neither")],
        "smoothing": [Interval(Real, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
    }

    _search_space = (Axis("alpha", half_decades(-1.0, -6.0)),)

    def __init__(
        self,
        alpha=10**-3.5,
        solver="ansgd",
        *,
        n_updates=ONLINE_UPDATES,
        max_iter=1000,
        fit_intercept=True,
        random_state=0,
        average=True,
        sampling="auto",
        omega=solvers.SGD_OMEGA,
        lipschitz=1.0,
        smoothing=1e-4,
        tol=1e-8,
        record_every=0,
        threshold="auto",
        scaling="auto",
    ):
        store_params(self, locals())

    def _solver(self) -> str:
        return self.solver

    def _lam(self) -> float:
        return float(self.alpha)

    def _step_kwargs(self) -> dict:
        if self.solver == "ansgd":
            return {"L": float(self.lipschitz)}
        return {"omega": float(self.omega)}

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.solver != "lbfgs" and not self.alpha > 0:
            raise ValueError(f"solver={self.solver!r} needs alpha > 0 (its step sizes divide by it)")

    def _record_objective(self, block):
        lam = float(self.alpha)
        return lambda M: objective.objective(block, M, lam, 0.0)

    def fit(self, X, y):
        if self.solver != "lbfgs":
            return super().fit(X, y)
        self._validate_params()
        start = time.perf_counter()
        X, Y = self._fit_data(X, y)
        # the batch baseline's full gradient is map-reduced over the row blocks where they
        # live (this process for small data, Dask workers otherwise)
        chunks = make_chunkset(X, Y, fit_intercept=bool(self.fit_intercept), **chunk_options())
        try:
            d, K = int(X.shape[1]) + bool(self.fit_intercept), int(np.shape(Y)[1])
            lam, alpha, n = float(self.alpha), float(self.smoothing), chunks.n_rows

            def fun(M):
                value, grad = chunks.map_reduce(objective.block_value_and_grad, M, alpha)
                return objective.finish(value, grad, M, n, lam)

            x0 = solvers.init_weights((d, K), self.random_state)
            with chunks.solver_context():
                res = scipy_lbfgs(fun, x0, max_iter=int(self.max_iter), tol=float(self.tol))
            self.backend_ = chunks.backend
        finally:
            chunks.close()
        self.coef_ = res.x
        self.objective_history_ = res.objective_history
        self.objective_iterations_ = list(range(1, len(res.objective_history) + 1))
        self.n_iter_ = res.n_iter
        self.n_updates_ = 0
        self.converged_ = res.converged
        self.n_labels_ = K
        self.fit_seconds_ = time.perf_counter() - start
        return self._learn_threshold(X, Y)

    def partial_fit(self, X, y, classes=None):
        if self.solver == "lbfgs":
            raise ValueError("partial_fit needs an online solver ('ansgd' or 'sgd'), not 'lbfgs'")
        return super().partial_fit(X, y, classes=classes)


@register_model
class MMP(_OnlineRanker):
    """Multi-class multi-label perceptron (Crammer & Singer 2003), isErr loss, uniform update.

    The paper's online baseline (Park & Choi 2013, Section 5): on each instance
    with a mis-ordered (relevant, irrelevant) pair (ties count), every such pair
    gets weight ``1/|E|`` and ``M <- M - x coef^T`` (:func:`dmlr.kernels.ranksvm.mmp_row`);
    no regularizer. Same initialization, instance stream, averaging,
    ``partial_fit`` and persistence as :class:`RankSVM`'s online solvers;
    ``objective_history_`` records the ranking loss (eq. 2, ties mis-ordered,
    :mod:`dmlr.metrics`) of the output on the rows of the current call.

    Parameters
    ----------
    n_updates : int
        Single-row updates of ``fit`` (70 000, as Rank-SVM's online solvers).
    fit_intercept, random_state, average, sampling, record_every, threshold, scaling
        As :class:`RankSVM`'s.
    """

    _solver_name = "mmp"

    def __init__(
        self,
        *,
        n_updates=ONLINE_UPDATES,
        fit_intercept=True,
        random_state=0,
        average=True,
        sampling="auto",
        record_every=0,
        threshold="auto",
        scaling="auto",
    ):
        store_params(self, locals())

    def _record_objective(self, block):
        def rank_loss(M):
            S = np.asarray(block.X @ M)
            return multilabel_metrics(block.Y, S, predict_from_scores(S), metrics=["ranking_loss"])["ranking_loss"]

        return rank_loss
