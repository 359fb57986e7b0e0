"""RBRL: joint Rank-SVM and Binary Relevance with robust low-rank learning.

Wu, Zheng, Tian, Liu, Neural Networks 122 (2020). The linear model
(:class:`RBRL`) minimizes eq. 8,

    1/2 sum_ij max(0, 1 - y_ij x_i w_j)^2 + alpha/2 ||W||_F^2
      + alpha_rank f_r(W) + alpha_nuclear ||W||_*,

(the paper's lambda1, lambda2, lambda3) with f_r the pairwise squared hinge
with margin 2 (eq. 16), by accelerated proximal gradient with singular value
thresholding (Algorithm 1, eqs. 24-27) and the paper's Lipschitz step
(eqs. 22-23) or a faster rule (``solver=``). The kernel model
(:class:`KernelRBRL`, eq. 12, Algorithm 2) optimizes the dual coefficients A
with each row block holding its own rows of K
(:mod:`dmlr.objectives.kernel_rbrl`); ``KernelRBRL(n_components=D)`` is its
Nystroem approximation (the route ``model="auto"`` takes), the same problem as a
Pipeline of :class:`dmlr.kernel_approximation.KernelFeatures` and :class:`RBRL` with
their defaults. ``alpha_rank=0`` gives BRL, the paper's ablation;
``alpha_rank=alpha_nuclear=0`` is binary relevance with the squared hinge.
"""

from __future__ import annotations

import functools
import time
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils._param_validation import Interval, StrOptions

from dmlr.config import chunk_options, get_config
from dmlr.data.arrays import as_matrix
from dmlr.data.blocks import Block
from dmlr.distributed.chunks import make_chunkset
from dmlr.distributed.oracle import ChunkOracle
from dmlr.distributed.root import solve_on_root
from dmlr.errors import DmlrInputError
from dmlr.kernels import warm_up
from dmlr.kernels.approx import KernelFeatureMap, nystroem_features
from dmlr.kernels.gram import KERNELS, KernelSpec, kernel_matrix
from dmlr.models.base import (
    NOT_A_ZERO_THRESHOLD,
    SCALING,
    SEED,
    THRESHOLD,
    Axis,
    BaseModel,
    block_linear_scores,
    half_decades,
    linear_scores,
    register_model,
    store_params,
)
from dmlr.objectives import kernel_rbrl as kernel_objective
from dmlr.objectives import rbrl as objective
from dmlr.preprocessing import apply_scaling
from dmlr.progress import ProgressReporter
from dmlr.solvers import checkpoint as ckpt_store
from dmlr.solvers.apg import apg
from dmlr.solvers.lbfgs import InterceptVariables, lbfgs_then_apg
from dmlr.solvers.prox import prox_nuclear_norm
from dmlr.solvers.result import SolverResult

#: ``solver=`` values; see :class:`RBRL`.
SOLVERS = ("paper", "backtracking", "spectral", "adaptive", "lbfgs")
#: The default ``solver`` of :class:`RBRL` and :class:`KernelRBRL`.
DEFAULT_SOLVER = "lbfgs"


class _RBRLBase(BaseModel):
    """APG, step rules, warm starts and checkpoints shared by :class:`RBRL` and :class:`KernelRBRL`."""

    _expected_failed_checks = {
        "check_classifier_multioutput": NOT_A_ZERO_THRESHOLD.format(
            rule="score > threshold_, learned per label on the training rows (threshold='auto')"
        )
    }

    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "alpha_rank": [Interval(Real, 0, None, closed="left")],
        "alpha_nuclear": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "gradient_tol": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left"), None],
        "solver": [StrOptions(set(SOLVERS))],
        "restart": ["boolean", None],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        "scaling": SCALING,
        "threshold": THRESHOLD,
    }
    _learns_threshold = True
    _supports_checkpoint = True
    # coef_ for the linear model and the Nystroem form, dual_coef_ for the exact kernel model
    _warm_start_arrays = ("coef_", "dual_coef_")
    _fitted_attributes = (
        "objective_history_",
        "objective_seconds_",
        "n_iter_",
        "converged_",
        "lipschitz_",
        "n_backtracks_",
        "n_restarts_",
        "n_features_in_",
        "n_labels_",
        "fit_seconds_",
        "backend_",
        "resumed_from_iteration_",
    )
    #: Parameters that define the problem or its stopping rule: a checkpoint records them and
    #: resuming needs the same values (:mod:`dmlr.solvers.checkpoint`).
    _checkpoint_params = ("alpha", "alpha_rank", "alpha_nuclear", "tol", "gradient_tol", "solver", "restart")

    def fit(self, X, y, *, checkpoint=None, checkpoint_every=10, resume=False):
        """Fit on X (numpy, scipy.sparse or dask, (n, d)) and y (0/1 (n, n_labels), or 1-D classes).

        Parameters
        ----------
        X : array-like, sparse matrix or dask array (n, d)
        y : array-like (n, n_labels) of 0/1, or (n,) class labels (:mod:`dmlr.validation`)
        checkpoint : str or Path, optional
            Directory of a Zarr checkpoint of the solver
            (:mod:`dmlr.solvers.checkpoint`): the full APG state is written
            there atomically every ``checkpoint_every`` iterations, and the
            final result when the fit ends (the checkpoint is then marked
            complete, not removed).
        checkpoint_every : int
            Iterations between checkpoints.
        resume : bool
            Continue from ``checkpoint`` if it holds a state: the fit then
            ends at the model of an uninterrupted fit (same iterates,
            ``resumed_from_iteration_`` > 0). With no checkpoint there (or
            one without any state yet) the fit starts from scratch. A
            checkpoint of a different problem (other regularization, kernel,
            solver, tol, data, ...) raises
            :class:`~dmlr.solvers.checkpoint.CheckpointMismatchError` (a
            ``ValueError``); a complete one returns its result without
            iterating. Without ``resume``, an unfinished checkpoint at
            ``checkpoint`` raises :class:`FileExistsError` and a complete
            one is replaced.

        Returns
        -------
        self
        """
        self._validate_params()
        ckpt = ckpt_store.checkpoint_args(checkpoint, checkpoint_every, resume)
        warm_up()  # the cached ranking kernels, as in every later process (see warm_up)
        start = time.perf_counter()
        X, Y = self._fit_data(X, y)
        res = self._fit_arrays(X, Y, ckpt)
        self.objective_history_ = res.objective_history
        self.objective_seconds_ = res.seconds
        self.n_iter_ = res.n_iter
        self.converged_ = res.converged
        self.lipschitz_ = res.lipschitz
        self.n_backtracks_ = res.n_backtracks
        self.n_restarts_ = res.n_restarts
        self.n_labels_ = int(np.shape(Y)[1])  # _fit_arrays learned threshold_ (_learn_threshold)
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _penalized_rows(self) -> slice:
        """Rows of the solver's variable under the ridge and nuclear-norm penalties."""
        return slice(None)

    def _warm_start_point(self, name: str, shape: tuple) -> np.ndarray:
        prev = getattr(self, name, None) if self.warm_start else None
        if prev is not None and np.shape(prev) == shape:
            return np.array(prev, dtype=np.float64)
        return np.zeros(shape)

    def _solve(self, chunks, problem, x0, ckpt=None, data_fp=None, variables=None):
        """The solver (``solver``) on ``problem``; returns its :class:`~dmlr.solvers.result.SolverResult`.

        ``problem(chunks) -> (oracle, paper_L, spectral_L)`` builds the objective's oracle and
        step bounds on a chunk set (picklable: on a Dask cluster the solver runs on the worker
        of block 0, :func:`dmlr.distributed.root.solve_on_root`, and builds them there).
        With ``ckpt = (path, every, resume)``: checkpoints, and resuming from one
        (``data_fp``: :func:`dmlr.solvers.checkpoint.data_fingerprint` of the training data).
        ``variables``: L-BFGS's :class:`~dmlr.solvers.lbfgs.InterceptVariables`, if any.
        """
        params = {k: getattr(self, k) for k in self._checkpoint_params}
        if variables is not None:  # an L-BFGS state saved in them resumes only in them
            params["lbfgs_variables"] = "centred intercept"
        run = ckpt_store.CheckpointRun(
            ckpt,
            lambda: ckpt_store.make_fingerprint(type(self).__name__, params, x0.shape, data_fp),
            self.max_iter,
        )
        self.backend_ = chunks.backend
        if run.done:  # a complete checkpoint: the fit had ended
            self.resumed_from_iteration_ = run.saved.n_iter
            return run.saved
        state = run.saved
        self.resumed_from_iteration_ = 0 if state is None else state.n_iter
        callback = (
            ProgressReporter(int(self.verbose), max_iter=int(self.max_iter), tol=float(self.tol))
            if self.verbose
            else None
        )
        # the parameters only: the estimator travels to the root with each segment
        solve = functools.partial(_run_solver, clone(self), problem, x0.shape, variables=variables)
        with run, chunks.solver_context():
            if chunks.backend == "dask":
                res = solve_on_root(chunks, solve, x0, state=state, checkpoint=run.hook, callback=callback)
            else:
                res = solve(chunks, x0, state=state, checkpoint=run.hook, callback=callback)
        if callback is not None:
            callback.finish(res.converged)
        run.finish(res)
        return res

    def _solve_with(self, oracle, x0, paper_L, spectral_L, *, state, checkpoint, callback, variables=None):
        """This estimator's solver with ``oracle`` from ``x0`` (or ``state``); ``variables``: L-BFGS's."""
        lam3 = float(self.alpha_nuclear)
        restart = self.solver != "paper" if self.restart is None else bool(self.restart)
        gradient_tol = self.gradient_tol
        if gradient_tol == "auto":
            gradient_tol = _AUTO_GRADIENT_TOL[self.solver](float(self.tol))
        rows = self._penalized_rows()

        def prox(V, scaling):
            Z, penalty, low_rank = prox_nuclear_norm(V[rows], lam3, scaling, factors=True)
            if rows != slice(None):  # the bias row passes through, below the low-rank part
                tail = V[rows.stop :]
                Z = np.vstack([Z, tail])
                low_rank = None if low_rank is None else low_rank._replace(tail=tail)
            oracle.note_factors(Z, low_rank)
            return Z, penalty

        if self.solver == "lbfgs":
            return self._solve_lbfgs(
                oracle, prox, x0, paper_L, rows, gradient_tol, callback, state, checkpoint, variables
            )
        return self._solve_apg(
            oracle, prox, x0, paper_L, spectral_L, restart, gradient_tol, callback, state, checkpoint
        )

    def _solve_apg(self, oracle, prox, x0, paper_L, spectral_L, restart, gradient_tol, callback, state, checkpoint):
        """APG with this estimator's step rule (not ``"lbfgs"``), from ``state`` if given."""
        backtracking = self.solver != "paper"
        adaptive = self.solver == "adaptive"
        L_paper = paper_L() if adaptive or (state is None and self.solver != "spectral") else None
        if state is not None:  # L is in the state (it changes under backtracking)
            L = state.lipschitz
        elif self.solver == "spectral":
            L = spectral_L()
        elif self.solver in ("backtracking", "adaptive"):
            L = L_paper / 1024.0
        else:
            L = L_paper
        return apg(
            oracle,
            prox,
            x0,
            lipschitz=L,
            max_iter=int(self.max_iter),
            tol=float(self.tol),
            callback=callback,
            backtracking=backtracking,
            restart=restart,
            gradient_tol=gradient_tol,
            state=state,
            checkpoint=checkpoint,
            adaptive=adaptive,
            tol_lipschitz=L_paper if adaptive else None,
        )

    def _solve_lbfgs(self, oracle, prox, x0, paper_L, rows, gradient_tol, callback, state, checkpoint, variables):
        """:func:`~dmlr.solvers.lbfgs.lbfgs_then_apg` with this estimator's settings."""
        return lbfgs_then_apg(
            oracle,
            prox,
            x0,
            nuclear=float(self.alpha_nuclear),
            rows=rows,
            paper_lipschitz=paper_L,
            tol=float(self.tol),
            gradient_tol=gradient_tol,
            max_iter=int(self.max_iter),
            callback=callback,
            checkpoint=checkpoint,
            state=state,
            variables=variables,
        )

    def _check_loaded_arrays(self, arrays: dict, path) -> None:
        for name, (arr, expected) in arrays.items():
            if arr.ndim != len(expected) or arr.dtype.kind != "f":
                raise DmlrInputError(
                    f"{name} must be a {len(expected)}-D float array, got {arr.dtype} {arr.shape}", path=path
                )
            if arr.shape != expected:
                raise DmlrInputError(f"{name} has shape {arr.shape}, metadata says {expected}", path=path)


#: ``gradient_tol="auto"`` of each step rule, from ``tol``. The adaptive rule's sqrt(tol): the
#: squared gradient mapping scales as the distance to the optimum in objective, so a mapping
#: shrunk to sqrt(tol) of its value at the origin is the objective accuracy ``tol`` stands for.
_AUTO_GRADIENT_TOL = {
    "paper": lambda tol: None,
    "backtracking": lambda tol: tol,
    "spectral": lambda tol: tol,
    "adaptive": lambda tol: float(np.sqrt(tol)),
    "lbfgs": lambda tol: float(np.sqrt(tol)),
}

_COMMON_PARAMETERS = """
    alpha : float >= 0
        Frobenius (ridge) weight, the paper's lambda1.
    alpha_rank : float >= 0
        Weight of the pairwise ranking term, the paper's lambda2 (0: BRL;
        with ``alpha_nuclear=0`` too: binary relevance with the squared hinge).
    alpha_nuclear : float >= 0
        Nuclear-norm weight (low rank), the paper's lambda3.
    max_iter : int
        Maximum APG iterations.
    tol : float
        Stop when the relative objective change is at most ``tol``.
    gradient_tol : float, "auto" or None
        Also require the composite gradient mapping to have shrunk to
        ``gradient_tol`` times its norm at the origin
        (:func:`dmlr.solvers.apg.apg`), so that a warm start near the optimum
        of a neighbouring regularization value does not pass the
        relative-change test after a few iterations. "auto": None for
        "paper" (the reference's rule), ``sqrt(tol)`` for "adaptive" (the
        gradient-mapping accuracy that matches an objective accuracy of
        ``tol``, so a cold fit still stops on the relative change), ``tol``
        for the others.
    solver : {"lbfgs", "adaptive", "paper", "backtracking", "spectral"}
        How the objective is minimized. "lbfgs" (default): a quasi-Newton
        method on the objective with the nuclear norm's gradient, which
        exists where W has full rank (:mod:`dmlr.solvers.lbfgs`), finished by
        the "adaptive" APG from its last point where the optimum is
        rank-deficient; each oracle call counts as an iteration. It needs
        about a tenth of the paper step's iterations
        (``benchmarks/step_rules.py``). The other rules are APG with a
        choice of step 1/L. "adaptive": L follows the
        curvature f has along the steps, on levels 2^(j/8), falling by at
        most one level an iteration and raised again by backtracking when a step fails the
        sufficient-decrease test (:func:`dmlr.solvers.apg.apg`,
        ``adaptive``), from (paper L) / 1024; and the relative-change test
        is calibrated to the paper's step (``tol_lipschitz``), so that the
        fit stops near the accuracy at which the paper's step stops with
        ``tol``, not at a tighter one. "paper": the paper's bound (eq. 23 / 33), the reference's
        iterates exactly.
        "backtracking": Beck & Teboulle's backtracking from L = (paper L)
        / 1024. "spectral": L = the largest eigenvalue of a bound on the
        Hessian (Lanczos over the chunks), with backtracking kept as a
        safety net. Every rule checkpoints (``fit(checkpoint=...)``).
    restart : bool, optional
        Adaptive momentum restart (O'Donoghue & Candes); default: on for
        every rule but "paper".
    warm_start : bool
        Start from the current coefficients when their shape matches
        (regularization paths).
    verbose : int
        Print progress every ``verbose`` iterations (0: quiet).
    scaling : {"auto", "standard", "maxabs", "tfidf"} or None
        Feature scaling fitted inside the model and applied by every
        predict-type method (:mod:`dmlr.preprocessing`): "auto" standardizes
        dense features and divides sparse ones by their largest absolute
        value; None uses the features as given.
    threshold : "auto" or float
        The label rule of ``predict``: a label is predicted where its score
        exceeds its threshold, and a row with none gets the label closest to
        its threshold. "auto" (default): thresholds learned per label on the
        training rows' scores after the fit (``threshold_``,
        :func:`dmlr.metrics.label_thresholds`), so that rare labels, which
        rank well but seldom score above 0, are predicted. A number: that
        threshold for every label; 0.0 is the paper's and the reference's
        rule (the virtual label's score).

    Execution (where the row blocks live, how many) is set with
    :func:`dmlr.config_context`, not here.
"""

_COMMON_ATTRIBUTES = """
    objective_history_ : list of float
        Objective after each iteration (at the proximal point).
    objective_seconds_ : list of float
        Wall time from the solver's start to each objective value.
    n_iter_ : int
    converged_ : bool
    lipschitz_ : float
        The constant whose inverse was the last APG step (NaN when
        ``solver="lbfgs"`` needed no APG).
    n_backtracks_, n_restarts_ : int
    n_features_in_, n_labels_ : int
    classes_ : ndarray
        Classes of a 1-D target, ``arange(n_labels)`` for a label matrix.
    fit_seconds_ : float
        Whole fit, including loading the row blocks and the Lipschitz pass.
    resumed_from_iteration_ : int
        The checkpoint iteration this fit continued from (0: started from
        scratch; ``n_iter_``: the checkpoint held the finished fit).
    threshold_ : float64 (n_labels,)
        The label rule's thresholds (see ``threshold``).
"""


@register_model
class RBRL(_RBRLBase):
    __doc__ = (
        """Linear RBRL multi-label classifier (eq. 8), W of shape (d + fit_intercept, n_labels).

    Parameters
    ----------"""
        + _COMMON_PARAMETERS.replace(
            "\n    Execution",
            """
    fit_intercept : bool
        Append a constant-1 feature, whose weights are the labels' biases.
    penalize_intercept : bool
        Regularize the biases as the other weights (the paper's and the
        reference's form, whose bias is a constant-1 feature). False
        (default): the ridge and nuclear-norm terms leave the bias row out,
        as scikit-learn's linear models leave out their intercepts, so that
        strong regularization shrinks the weights towards the labels'
        base rates instead of towards zero scores.

    Execution""",
        )
        + """
    Attributes
    ----------
    coef_ : float64 (n_features + fit_intercept, n_labels)
        W; with ``fit_intercept`` the last row is the bias."""
        + _COMMON_ATTRIBUTES
    )

    _parameter_constraints = {
        **_RBRLBase._parameter_constraints,
        "fit_intercept": ["boolean"],
        "penalize_intercept": ["boolean"],
    }
    _fitted_arrays = ("coef_",)
    _checkpoint_params = _RBRLBase._checkpoint_params + ("fit_intercept", "penalize_intercept")

    #: eq. 8 sums its losses over rows, so its weights are searched per row; the ranking and
    #: nuclear-norm weights only on request (the nuclear-norm weight lowers the test ranking
    #: loss on sets of hundreds of labels, at up to 3 times the search's time:
    #: ``benchmarks/search_vs_default.py --search alpha,alpha_nuclear``). ``alpha``'s grid
    #: starts at 0.1 per row: a ridge weight as large as the data term's per-row scale leaves
    #: W near zero, and a best value on the grid's top edge widens it upwards. A staged search
    #: (thousands of rows per fold) starts ``alpha`` at 10**-2 per row: there the first stage
    #: chose 10**-2.6 per row or less on every staged set (``benchmarks/time_to_model.py``:
    #: tmc2007_500 10**-2.63, delicious 10**-2.70, the Bookmarks shape 10**-3.0,
    #: mediamill_discretized 10**-3.18), and the values above 10**-2 are approach fits, the
    #: first of them cold. The nuclear-norm weight starts at 10**-1.5: its first stage chose
    #: 10**-2 per row or less on the staged sets, where its top value scored worst and could
    #: be the path's costliest fit (mediamill: a rank-3 optimum that L-BFGS approaches slowly
    #: from zero).
    _search_space = (
        Axis("alpha", half_decades(-1.0, -4.0), per_row=True, staged_top=-2.0),
        Axis("alpha_rank", half_decades(1.0, -2.0), default=False),
        Axis("alpha_nuclear", half_decades(-1.0, -4.0), per_row=True, default=False, staged_top=-1.5),
    )

    def __init__(
        self,
        alpha=1.0,
        alpha_rank=0.01,
        alpha_nuclear=0.1,
        *,
        max_iter=2000,
        tol=1e-6,
        gradient_tol="auto",
        solver=DEFAULT_SOLVER,
        restart=None,
        fit_intercept=True,
        penalize_intercept=False,
        warm_start=False,
        verbose=0,
        scaling="auto",
        threshold="auto",
    ):
        store_params(self, locals())

    def _fit_arrays(self, X, Y, ckpt):
        shape = (X.shape[1] + int(self.fit_intercept), int(np.shape(Y)[1]))  # W's, every column
        chunks = make_chunkset(X, Y, fit_intercept=self.fit_intercept, **chunk_options())
        lam1, lam2 = float(self.alpha), float(self.alpha_rank)
        try:
            kept = _active_columns(chunks)
            if kept is not None:  # only the columns with a value in these rows (see _active_columns)
                narrowed = chunks.transform(_block_columns, kept)
                chunks.close()
                chunks = narrowed
            d = shape[0] if kept is None else len(kept)
            problem = functools.partial(_linear_problem, lam1, lam2, self._penalized_rows(), d)
            x0 = self._warm_start_point("coef_", shape)
            x0 = x0 if kept is None else x0[kept]
            data_fp = ckpt_store.data_fingerprint(chunks) if ckpt is not None else None
            res = self._solve(chunks, problem, x0, ckpt, data_fp, self._lbfgs_variables(chunks))
            self.coef_ = res.x
            if kept is not None:
                self.coef_ = np.zeros(shape)
                self.coef_[kept] = res.x
            self._learn_threshold(X, Y, blocks=(chunks, block_linear_scores, res.x))  # the rows in hand
        finally:
            chunks.close()
        return res

    def _penalized_rows(self) -> slice:
        return slice(0, -1) if self.fit_intercept and not self.penalize_intercept else slice(None)

    def _lbfgs_variables(self, chunks) -> InterceptVariables | None:
        """L-BFGS's change of variables for an unpenalized intercept (None: W's own), from the
        feature columns' moments over ``chunks`` (one pass, summed along the blocks' tree)."""
        if self.solver != "lbfgs" or self._penalized_rows() != slice(0, -1):
            return None
        sums, squares, weight = chunks.map_reduce(_feature_moments, float(self.alpha_rank))
        return InterceptVariables.from_moments(sums, squares, weight, float(self.alpha))

    def _validate_loaded(self, path) -> None:
        expected = (int(self.n_features_in_) + int(bool(self.fit_intercept)), int(self.n_labels_))
        self._check_loaded_arrays({"coef_": (self.coef_, expected)}, path)

    def _scores_block(self, X):
        """``[X, 1] @ W`` (see :meth:`~dmlr.models.BaseModel.decision_function`)."""
        return linear_scores(X, self.coef_, bool(self.fit_intercept))


def _run_solver(estimator, problem, shape, chunks, x0, *, state, checkpoint, callback, variables=None):
    """``estimator``'s solver on ``problem(chunks)`` from ``x0`` or ``state`` (see
    :meth:`_RBRLBase._solve`); ``x0`` None: zeros of ``shape``, which resuming a state takes
    only the shape of."""
    if x0 is None:
        x0 = np.zeros(shape)
    oracle, paper_L, spectral_L = problem(chunks)
    return estimator._solve_with(
        oracle, x0, paper_L, spectral_L, state=state, checkpoint=checkpoint, callback=callback, variables=variables
    )


def _linear_problem(lam1: float, lam2: float, rows: slice, d: int, chunks):
    """(oracle, paper_L, spectral_L) of the linear RBRL (eq. 17) on ``chunks``: W of ``d``
    rows, the ridge on ``rows``."""

    def paper_L():
        x_fro2, A, B = chunks.map_reduce(objective.block_lipschitz_stats)
        return objective.paper_lipschitz(x_fro2, A, B, lam1, lam2)

    def spectral_L():
        return objective.spectral_lipschitz(
            lambda v: chunks.map_reduce(objective.block_curvature_matvec, v, lam2), d, shift=lam1
        )

    oracle = ChunkOracle(
        chunks,
        (objective.block_value_and_grad, objective.block_extrapolated_value_and_grad, objective.block_wants_pair),
        (lam2,),
        finish=functools.partial(objective.add_ridge, lambda1=lam1, rows=rows),
    )
    return oracle, paper_L, spectral_L


def _kernel_problem(lam1: float, lam2: float, n: int, chunks):
    """(oracle, paper_L, spectral_L) of the kernel RBRL (eq. 12) on ``chunks`` of rows of K
    (``n`` training rows)."""

    def paper_L():
        k_fro2, A, B = chunks.map_reduce(kernel_objective.block_lipschitz_stats)
        return objective.paper_lipschitz(k_fro2, A, B, lam1, lam2, ridge_scale2=k_fro2)

    def spectral_L():
        return objective.spectral_lipschitz(
            lambda v: chunks.map_reduce(kernel_objective.block_curvature_matvec, v, lam1, lam2), n
        )

    oracle = ChunkOracle(
        chunks,
        (
            kernel_objective.block_value_and_grad,
            kernel_objective.block_extrapolated_value_and_grad,
            kernel_objective.block_wants_pair,
        ),
        (lam1, lam2),
    )
    return oracle, paper_L, spectral_L


def _active_columns(chunks) -> np.ndarray | None:
    """The columns of a chunk set's blocks (the bias column included) holding a value, where
    some do not (None: every column does, or none does), counted where the blocks are.

    W's row of a column with no value in the training rows has no data gradient, and the
    ridge and nuclear norms only grow with it, so the optimum (and every iterate from a zero
    start) has it zero: the solver can leave it out, exactly. On sparse high-dimensional
    data (text), most columns of a fold's rows can be empty, and the solver's work on W (its
    quasi-Newton pairs, the nuclear norm's Gram products) then follows the columns used.
    Counted on the blocks, not on the input: a dask input's chunks are read once, by the
    chunk set.
    """
    counts = chunks.map_reduce(_column_counts)
    active = np.flatnonzero(counts)
    return active if 0 < active.size < counts.size else None


def _column_counts(block) -> np.ndarray:
    """Stored values per column of a block's X (an explicitly stored zero counts: the
    column is kept), int64 (d,)."""
    X = block.X
    if sp.issparse(X):
        return np.bincount(X.indices, minlength=X.shape[1]).astype(np.int64)
    return np.count_nonzero(X, axis=0).astype(np.int64)


def _feature_moments(block, lambda2: float) -> tuple[np.ndarray, np.ndarray, float]:
    """A block's feature columns' sums and sums of squares (X's last, the intercept's, left
    out), float64 (d - 1,) each, and the rows' total, all weighted by the rows' curvature
    bound (:func:`~dmlr.objectives.rbrl.curvature_weights`)."""
    X, c = block.X, objective.curvature_weights(block.Y, lambda2)
    if sp.issparse(X):
        d = X.shape[1] - 1
        rows = np.repeat(c, np.diff(X.indptr))
        sums = np.bincount(X.indices, weights=rows * X.data, minlength=X.shape[1])[:d]
        return sums, np.bincount(X.indices, weights=rows * X.data * X.data, minlength=X.shape[1])[:d], float(c.sum())
    F = X[:, :-1]
    return c @ F, c @ (F * F), float(c.sum())


def _block_columns(block, bounds, columns) -> Block:
    """The block with X's ``columns`` (sorted) only, a chunk set's ``transform``.

    Every stored value of a CSR X lies in ``columns`` (:func:`_active_columns`), so its
    column indices are renumbered and its values and row pointers shared with the
    block's, not copied: the new block costs its column indices alone beside the old.
    """
    X = block.X
    if sp.issparse(X):
        position = np.zeros(X.shape[1], dtype=X.indices.dtype)
        position[columns] = np.arange(len(columns), dtype=X.indices.dtype)
        X = sp.csr_matrix((X.data, position[X.indices], X.indptr), shape=(X.shape[0], len(columns)), copy=False)
    else:
        X = np.ascontiguousarray(X[:, columns])
    return Block(X=X, Y=block.Y)


@register_model(name="kernel_rbrl")
class KernelRBRL(_RBRLBase):
    __doc__ = (
        """Kernel RBRL multi-label classifier (eq. 12, Algorithm 2): dual coefficients A (n, n_labels).

    Each row block builds and keeps its own rows of K (or rebuilds them at
    every call, ``dmlr.config_context(kernel_memory="recompute")``): n x n
    floats in all, spread over the workers. With ``n_components`` the model
    is fitted on a Nystroem approximation of the kernel instead (Williams &
    Seeger 2001): features F = k(X, landmarks) K_mm^{-1/2} of D landmark
    rows, on which the linear :class:`RBRL` (standardized F, unpenalized
    biases) is solved chunk by chunk; with K ~ F F^T, A^T K A ~ W^T W for
    W = F^T A, so ``alpha`` keeps its meaning. It costs O(n D) memory and
    O(n D l) an iteration instead of O(n^2) and O(n^2 l), and the model
    file holds the D landmarks, not the training rows.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"}
    gamma : float, optional
        Kernel coefficient (RBF, poly); default 1 / n_features (the paper).
    degree, coef0 : int, float
        Polynomial kernel (gamma x.y + coef0) ** degree.
    n_components : int or None
        None (default): the exact kernel. An int: D, the landmarks of the
        Nystroem approximation (at most the number of training rows).
    random_state : int or None
        Seed of the landmark sample (``n_components`` only)."""
        + _COMMON_PARAMETERS
        + """
    Attributes
    ----------
    dual_coef_ : float64 (n_train, n_labels)
        A (exact kernel).
    support_ : float64 (n_train, n_features)
        The training rows (exact kernel; dense or CSR in memory; saved dense).
    landmarks_ : float64 (D, n_features)
        The landmark rows (``n_components``).
    projection_ : float64 (D, D)
        K_mm^{-1/2} (``n_components``).
    component_offset_, component_scale_ : float64 (D,)
        Standardization of the features F (``n_components``).
    coef_ : float64 (D + 1, n_labels)
        W on the standardized F, the bias row last (``n_components``).
    gamma_ : float
        The kernel coefficient used."""
        + _COMMON_ATTRIBUTES
    )

    _parameter_constraints = {
        **_RBRLBase._parameter_constraints,
        "kernel": [StrOptions(set(KERNELS))],
        "gamma": [Interval(Real, 0, None, closed="neither"), None],
        "degree": [Interval(Integral, 1, None, closed="left")],
        "coef0": [Real],
        "n_components": [Interval(Integral, 1, None, closed="left"), None],
        "random_state": SEED,
    }
    _fitted_arrays = ("dual_coef_", "support_")
    _approximate_arrays = ("landmarks_", "projection_", "component_offset_", "component_scale_", "coef_")
    _fitted_attributes = _RBRLBase._fitted_attributes + ("gamma_",)
    _checkpoint_params = _RBRLBase._checkpoint_params + (
        "kernel",
        "gamma",
        "degree",
        "coef0",
        "n_components",
        "random_state",
    )

    _search_space = (Axis("alpha", half_decades(0.0, -4.0), per_row=True),)

    def __init__(
        self,
        kernel="rbf",
        alpha=1.0,
        alpha_rank=0.01,
        alpha_nuclear=0.1,
        *,
        gamma=None,
        degree=3,
        coef0=1.0,
        n_components=None,
        random_state=0,
        max_iter=2000,
        tol=1e-6,
        gradient_tol="auto",
        solver=DEFAULT_SOLVER,
        restart=None,
        warm_start=False,
        verbose=0,
        scaling="auto",
        threshold="auto",
    ):
        store_params(self, locals())

    def _fitted_array_names(self) -> tuple:
        return self._fitted_arrays if self.n_components is None else self._approximate_arrays

    def _fit_arrays(self, X, Y, ckpt):
        spec = KernelSpec.resolve(self.kernel, self.gamma, self.degree, self.coef0, X.shape[1])
        fit = self._fit_approximate if self.n_components is not None else self._fit_exact
        res = fit(X, Y, spec, ckpt)
        self._learn_threshold(X, Y)
        return res

    def _fit_exact(self, X, Y, spec, ckpt):
        """The kernel model on the exact kernel matrix (its solver result)."""
        X_all = as_matrix(X.compute() if hasattr(X, "dask") else X)
        chunks = make_chunkset(
            X_all, Y if not hasattr(Y, "dask") else Y.compute(), fit_intercept=False, **chunk_options()
        )
        lam1, lam2 = float(self.alpha), float(self.alpha_rank)
        n = X_all.shape[0]
        try:
            data_fp = ckpt_store.data_fingerprint(chunks) if ckpt is not None else None
            kchunks = chunks.transform(
                kernel_objective.make_kernel_block, X_all, spec, get_config()["kernel_memory"] == "keep"
            )
        finally:
            chunks.close()
        try:
            problem = functools.partial(_kernel_problem, lam1, lam2, n)
            x0 = self._warm_start_point("dual_coef_", (n, int(np.shape(Y)[1])))
            res = self._solve(kchunks, problem, x0, ckpt, data_fp)
        finally:
            kchunks.close()
        self.dual_coef_ = res.x
        self.support_ = X_all
        self.gamma_ = spec.gamma
        return res

    def _fit_approximate(self, X, Y, spec, ckpt):
        """The linear RBRL, fitted by its own ``fit``, on the Nystroem features of X (its solver result)."""
        previous = self._feature_map() if self.warm_start and hasattr(self, "landmarks_") else None
        D = min(int(self.n_components), int(X.shape[0]))
        fmap = nystroem_features(X, spec, D, self.random_state, reuse=previous)
        names = (
            "alpha",
            "alpha_rank",
            "alpha_nuclear",
            "max_iter",
            "tol",
            "gradient_tol",
            "solver",
            "restart",
            "verbose",
        )
        # its labels are not used (this model learns its own threshold_): one number, no pass
        linear = RBRL(
            **{k: getattr(self, k) for k in names}, warm_start=self.warm_start, scaling="standard", threshold=0.0
        )
        if self.warm_start and getattr(self, "coef_", None) is not None:
            linear.coef_ = self.coef_
        request = {} if ckpt is None else dict(zip(("checkpoint", "checkpoint_every", "resume"), ckpt))
        linear.fit(fmap.transform(X), Y, **request)
        res = SolverResult(
            x=linear.coef_,
            objective_history=linear.objective_history_,
            seconds=linear.objective_seconds_,
            n_iter=linear.n_iter_,
            converged=linear.converged_,
            lipschitz=linear.lipschitz_,
            n_backtracks=linear.n_backtracks_,
            n_restarts=linear.n_restarts_,
        )
        self.landmarks_, self.projection_ = fmap.landmarks, fmap.projection
        self.component_offset_, self.component_scale_ = linear.feature_offset_, linear.feature_scale_
        self.coef_ = linear.coef_
        self.gamma_ = spec.gamma
        self.backend_, self.resumed_from_iteration_ = linear.backend_, linear.resumed_from_iteration_
        return res

    def _feature_map(self) -> KernelFeatureMap:
        spec = KernelSpec.resolve(self.kernel, self.gamma_, self.degree, self.coef0, self.n_features_in_)
        return KernelFeatureMap("nystroem", spec, self.landmarks_, self.projection_)

    def _validate_loaded(self, path) -> None:
        if self.n_components is not None:
            D = np.shape(self.landmarks_)[0]
            self._check_loaded_arrays(
                {
                    "landmarks_": (self.landmarks_, (D, int(self.n_features_in_))),
                    "projection_": (self.projection_, (D, D)),
                    "component_offset_": (self.component_offset_, (D,)),
                    "component_scale_": (self.component_scale_, (D,)),
                    "coef_": (self.coef_, (D + 1, int(self.n_labels_))),
                },
                path,
            )
            return
        n = np.shape(self.dual_coef_)[0]
        self._check_loaded_arrays(
            {
                "dual_coef_": (self.dual_coef_, (n, int(self.n_labels_))),
                "support_": (self.support_, (n, int(self.n_features_in_))),
            },
            path,
        )

    def _scores_block(self, X):
        """``k(X, support) @ A``, or ``[F, 1] @ W`` of the standardized Nystroem features F (see
        :meth:`~dmlr.models.BaseModel.decision_function`)."""
        X = as_matrix(X)
        if self.n_components is not None:
            F = apply_scaling(
                self._feature_map().transform(X), self.component_offset_, self.component_scale_, "standard"
            )
            return linear_scores(F, self.coef_, True)
        spec = KernelSpec.resolve(self.kernel, self.gamma_, self.degree, self.coef0, self.n_features_in_)
        support, A = self.support_, self.dual_coef_
        S = np.zeros((X.shape[0], A.shape[1]))
        step = _PREDICT_SUPPORT_ROWS
        for a in range(0, support.shape[0], step):  # bounded memory: m x step kernel entries at a time
            S += kernel_matrix(X, support[a : a + step], spec) @ A[a : a + step]
        return S


_PREDICT_SUPPORT_ROWS = 4096
