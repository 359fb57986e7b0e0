"""RBRL: joint Rank-SVM and Binary Relevance with robust low-rank learning.

Wu, Zheng, Tian, Liu, Neural Networks 122 (2020) (seed 002). The linear model
minimizes eq. 8,

    1/2 sum_ij max(0, 1 - y_ij x_i w_j)^2 + lambda1/2 ||W||_F^2
      + lambda2 f_r(W) + lambda3 ||W||_*,

with f_r the pairwise squared hinge with margin 2 (eq. 16), by accelerated
proximal gradient with singular value thresholding (Algorithm 1, eqs. 24-27)
and the paper's Lipschitz step (eqs. 22-23) or a faster rule (``step=``).
The kernel model (eq. 12, Algorithm 2) optimizes the dual coefficients A
with each worker holding its own rows of K (:mod:`dmlr.objectives.kernel_rbrl`);
Nystroem / Fourier features give an approximate kernel model through the
linear path. ``lambda2=0`` gives BRL, the paper's ablation;
``lambda2=lambda3=0`` is binary relevance with the squared hinge.
"""

from __future__ import annotations

import itertools
import uuid

import numpy as np

from dmlr.distributed.chunks import add_results, make_chunkset, tree_reduce
from dmlr.errors import DmlrInputError
from dmlr.kernels.approx import APPROXIMATIONS, KernelFeatureMap, fourier_features, nystroem_features
from dmlr.kernels.blocks import append_bias, as_matrix
from dmlr.kernels.gram import KernelSpec, kernel_matrix
from dmlr.models import checkpoint as ckpt_store
from dmlr.models.base import BaseModel, check_random_state, check_training_arrays, register_model
from dmlr.objectives import kernel_rbrl as kernel_objective
from dmlr.objectives import rbrl as objective
from dmlr.progress import ProgressReporter
from dmlr.solvers.apg import APGResult, apg
from dmlr.solvers.prox import prox_nuclear_norm

#: ``step=`` values; see :class:`RBRL`.
STEP_RULES = ("paper", "backtracking", "spectral")
#: ``kernel=`` values besides None (the primal linear model).
KERNELS = ("rbf", "linear", "poly")
#: Parameters that define the problem or its stopping rule: a checkpoint records them and
#: resuming needs the same values (:mod:`dmlr.models.checkpoint`).
CHECKPOINT_PARAMS = ("lambda1", "lambda2", "lambda3", "kernel", "gamma", "degree", "coef0",
                     "kernel_approximation", "n_components", "random_state", "tol", "gradient_tol",
                     "fit_intercept", "step", "restart")


@register_model
class RBRL(BaseModel):
    """RBRL multi-label classifier, linear or kernel (scikit-learn estimator contract).

    Parameters
    ----------
    lambda1 : float
        Frobenius (ridge) weight.
    lambda2 : float
        Weight of the pairwise ranking term (0: BRL; with lambda3=0 too:
        binary relevance with the squared hinge).
    lambda3 : float
        Nuclear-norm weight (low rank).
    kernel : {None, "rbf", "linear", "poly"}
        None: the primal linear model (eq. 8), W of shape (d [+1], l).
        Otherwise the kernel model (eq. 12) with dual coefficients A (n, l).
    gamma : float, optional
        Kernel coefficient (RBF, poly); default 1 / n_features (the paper).
    degree, coef0 : int, float
        Polynomial kernel (gamma x.y + coef0) ** degree.
    kernel_memory : {"keep", "recompute"}
        Kernel model: each worker keeps its rows of K (m x n floats) between
        iterations, or recomputes them at each call (no m x n memory held).
    kernel_approximation : {None, "nystroem", "fourier"}
        With a kernel: None fits the exact kernel model (eq. 12). "nystroem"
        (any kernel) or "fourier" (random Fourier features, RBF only) map X
        to ``n_components`` approximate kernel features
        (:mod:`dmlr.kernels.approx`) and fit the linear model (eq. 8) on
        them: no n x n matrix, so it scales like the linear model. Not the
        same problem as eq. 12 (W, not A, is regularized). Needs ``kernel``.
    n_components : int
        Number of approximate kernel features (Nystroem: landmark rows
        sampled from the training set, at most n_train).
    random_state : int or None
        Seed of the landmark sample / random features.
    max_iter : int
        Maximum APG iterations.
    tol : float
        Stop when the relative objective change is at most ``tol``.
    gradient_tol : float, "auto" or None
        Also require the composite gradient mapping to have shrunk to
        ``gradient_tol`` times its norm at the origin (see
        :func:`dmlr.solvers.apg.apg`): without it a warm start near the
        optimum of a neighbouring regularization value can pass the
        relative-change test after 2 iterations. "auto": ``tol`` for every
        step rule but "paper" (None there, the reference's rule). On a
        yahoo_arts lambda3 path at tol 1e-4 this took warm fits from 0.2-6%
        above the optimum to 1e-4 (and cold fits from 0.3% to 7e-5).
        It is the stricter test, so such a fit can take more iterations than
        ``step="paper"`` and stop lower: on the reference's emotions split
        (RBF, gamma = 1/72, tol 1e-6) "spectral" took 6,637 iterations to
        415.6065 where "paper" stops after 1,648 at 415.8058 (which
        "spectral" passes at iteration 1,157); with ``gradient_tol=1e-3`` it
        stops after 1,244 at 415.7608. A looser ``gradient_tol`` than ``tol``
        gives the short warm stops back: at sqrt(tol) the yahoo_arts path
        stopped exactly where ``None`` did.
    fit_intercept : bool
        Linear model: append a constant-1 feature (the bias is regularized,
        as the paper). Kernel models have no separate bias.
    step : {"paper", "backtracking", "spectral"}
        Step rule. "paper": 1/L with the paper's bound (eq. 23 / 33), the
        reference's iterates exactly. "backtracking": Beck & Teboulle's
        backtracking from L = (paper L) / 1024. "spectral": L = the largest
        eigenvalue of a bound on the Hessian, lambda1 + ||X^T diag(c) X||_2
        (:func:`dmlr.objectives.rbrl.curvature_weights`), by Lanczos over the
        chunks, with backtracking kept as a safety net.
    restart : bool, optional
        Adaptive momentum restart (O'Donoghue & Candes); default: on for
        every rule but "paper".
    warm_start : bool
        Start from the current ``coef_`` / ``dual_coef_`` when shapes match
        (regularization paths).
    backend : {"auto", "local", "dask"}
        Where the row chunks live during training; "auto" keeps small data
        in this process (see :func:`dmlr.distributed.make_chunkset`).
    n_blocks : int, optional
        Number of row blocks (default: one per Dask worker thread; in-process, one per core
        for data above 2M stored values, else 1).
    verbose : int
        Print progress every ``verbose`` iterations (0: quiet).

    Attributes
    ----------
    coef_ : float64 (n_features + fit_intercept, n_labels)
        Linear model: W; with ``fit_intercept`` the last row is the bias.
        Approximate kernel model: (n_components + fit_intercept, n_labels).
    feature_landmarks_, feature_projection_ : float64 (n_components, n_features), (n_components, n_components)
        Approximate kernel model, "nystroem": landmark rows and K_mm^{-1/2}.
    feature_omega_, feature_offset_ : float64 (n_features, n_components), (n_components,)
        Approximate kernel model, "fourier": Omega and b.
    dual_coef_ : float64 (n_train, n_labels)
        Kernel model: A.
    support_ : float64 (n_train, n_features)
        Kernel model: the training rows (dense or CSR in memory; saved dense).
    gamma_ : float
        Kernel model: the kernel coefficient used.
    objective_history_ : list of float
        Objective after each iteration (at the proximal point).
    objective_seconds_ : list of float
        Wall time from the solver's start to each objective value.
    n_iter_ : int
    converged_ : bool
    lipschitz_ : float
        The constant whose inverse was the last step.
    n_backtracks_, n_restarts_ : int
    n_features_in_, n_labels_ : int
    fit_seconds_ : float
        Whole fit, including loading the row blocks and the Lipschitz pass.
    resumed_from_iteration_ : int
        The checkpoint iteration this fit continued from (0: started from
        scratch; ``n_iter_``: the checkpoint held the finished fit).
    """

    _fitted_arrays = ("coef_",)
    _fitted_attributes = ("objective_history_", "objective_seconds_", "n_iter_", "converged_", "lipschitz_",
                          "n_backtracks_", "n_restarts_", "n_features_in_", "n_labels_", "fit_seconds_",
                          "backend_", "gamma_", "resumed_from_iteration_")

    def __init__(self, lambda1=1.0, lambda2=0.01, lambda3=0.1, kernel=None, gamma=None, degree=3, coef0=1.0,
                 kernel_memory="keep", kernel_approximation=None, n_components=256, random_state=0,
                 max_iter=2000, tol=1e-6, gradient_tol="auto", fit_intercept=True, step="paper", restart=None,
                 warm_start=False, backend="auto", n_blocks=None, verbose=0):
        self.lambda1 = lambda1
        self.lambda2 = lambda2
        self.lambda3 = lambda3
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_memory = kernel_memory
        self.kernel_approximation = kernel_approximation
        self.n_components = n_components
        self.random_state = random_state
        self.max_iter = max_iter
        self.tol = tol
        self.gradient_tol = gradient_tol
        self.fit_intercept = fit_intercept
        self.step = step
        self.restart = restart
        self.warm_start = warm_start
        self.backend = backend
        self.n_blocks = n_blocks
        self.verbose = verbose

    def _fitted_array_names(self) -> tuple:
        if self.kernel is None:
            return ("coef_",)
        # -- approximate kernel features (dmlr.kernels.approx) --
        if self.kernel_approximation == "nystroem":
            return ("coef_", "feature_landmarks_", "feature_projection_")
        if self.kernel_approximation == "fourier":
            return ("coef_", "feature_omega_", "feature_offset_")
        # --
        return ("dual_coef_", "support_")

    def _validate_params(self) -> None:
        for name in ("lambda1", "lambda2", "lambda3"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not (isinstance(self.max_iter, (int, np.integer)) and self.max_iter >= 1):
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        if not (self.tol >= 0):
            raise ValueError(f"tol must be >= 0, got {self.tol!r}")
        if not (self.gradient_tol is None or self.gradient_tol == "auto"
                or (isinstance(self.gradient_tol, (int, float)) and self.gradient_tol >= 0)):
            raise ValueError(f"gradient_tol must be 'auto', None or a number >= 0, got {self.gradient_tol!r}")
        if self.step not in STEP_RULES:
            raise ValueError(f"step must be one of {STEP_RULES}, got {self.step!r}")
        if self.kernel is not None and self.kernel not in KERNELS:
            raise ValueError(f"kernel must be None or one of {KERNELS}, got {self.kernel!r}")
        if self.kernel_memory not in ("keep", "recompute"):
            raise ValueError(f"kernel_memory must be 'keep' or 'recompute', got {self.kernel_memory!r}")
        # -- approximate kernel features (dmlr.kernels.approx) --
        if self.kernel_approximation not in (None,) + APPROXIMATIONS:
            raise ValueError(f"kernel_approximation must be None or one of {APPROXIMATIONS}, "
                             f"got {self.kernel_approximation!r}")
        if not (isinstance(self.n_components, (int, np.integer)) and not isinstance(self.n_components, bool)
                and self.n_components >= 1):
            raise ValueError(f"n_components must be a positive integer, got {self.n_components!r}")
        check_random_state(self.random_state)
        if self.kernel is None and self.kernel_approximation is not None:
            raise ValueError(f"kernel_approximation={self.kernel_approximation!r} needs a kernel "
                             f"(e.g. kernel='rbf'); the linear model has none to approximate")
        if self.kernel is not None and self.kernel_approximation == "fourier" and self.kernel != "rbf":
            raise ValueError(f"kernel_approximation='fourier' approximates the RBF kernel only, "
                             f"not kernel={self.kernel!r}; use 'nystroem'")
        # --

    def fit(self, X, Y, *, client=None, checkpoint=None, checkpoint_every=10, resume=False):
        """Fit on X (numpy, scipy.sparse or dask, (n, d)) and Y (0/1, (n, l)).

        Parameters
        ----------
        X, Y : arrays
        client : distributed.Client, optional
            For ``backend="dask"`` (default: :func:`dmlr.get_client`).
        checkpoint : str or Path, optional
            Directory of a Zarr checkpoint of the solver
            (:mod:`dmlr.models.checkpoint`): the full APG state is written
            there atomically every ``checkpoint_every`` iterations, and the
            final result when the fit ends (the checkpoint is then marked
            complete, not removed). Covers every RBRL variant: linear,
            kernel (``dual_coef_``) and approximate-kernel features (which
            need an integer ``random_state`` to be rebuilt on resume).
        checkpoint_every : int
            Iterations between checkpoints.
        resume : bool
            Continue from ``checkpoint`` if it holds a state: the fit then
            ends at the model of an uninterrupted fit (same iterates,
            ``resumed_from_iteration_`` > 0). With no checkpoint there (or
            one without any state yet) the fit starts from scratch. A
            checkpoint of a different problem (other lambdas, kernel, step
            rule, tol, data, ...) raises
            :class:`~dmlr.models.checkpoint.CheckpointMismatchError` (a
            ``ValueError``); a complete one returns its result without
            iterating. Without ``resume``, an unfinished checkpoint at
            ``checkpoint`` raises :class:`FileExistsError` and a complete
            one is replaced.

        Returns
        -------
        self
        """
        import time

        self._validate_params()
        ckpt = self._checkpoint_request(checkpoint, checkpoint_every, resume)
        start = time.perf_counter()
        check_training_arrays(X, Y)
        l = int(np.shape(Y)[1])
        if self.kernel is None:
            res = self._fit_linear(X, Y, client, ckpt)
            self.coef_ = res.x
        elif self.kernel_approximation is not None:  # approximate kernel features (dmlr.kernels.approx)
            res = self._fit_linear(self._fit_feature_map(X).transform(X), Y, client, ckpt)
            self.coef_ = res.x
        else:
            res = self._fit_kernel(X, Y, client, ckpt)
            self.dual_coef_ = res.x
        self.objective_history_ = res.objective_history
        self.objective_seconds_ = res.seconds
        self.n_iter_ = res.n_iter
        self.converged_ = res.converged
        self.lipschitz_ = res.lipschitz
        self.n_backtracks_ = res.n_backtracks
        self.n_restarts_ = res.n_restarts
        self.n_features_in_ = int(X.shape[1])
        self.n_labels_ = l
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _checkpoint_request(self, checkpoint, every, resume):
        """Validated ``(path, every, resume)``, or None without a checkpoint."""
        if checkpoint is None:
            if resume:
                raise ValueError("resume=True needs a checkpoint path (checkpoint=...)")
            return None
        if not (isinstance(every, (int, np.integer)) and not isinstance(every, bool) and every >= 1):
            raise ValueError(f"checkpoint_every must be a positive integer, got {every!r}")
        if self.kernel_approximation is not None and self.random_state is None:
            raise ValueError("checkpointing a fit on approximate kernel features needs an integer random_state "
                             "(the features are rebuilt from it on resume)")
        return (checkpoint, int(every), bool(resume))

    # -- the two models -----------------------------------------------------------
    def _fit_linear(self, X, Y, client, ckpt=None):
        chunks = make_chunkset(X, Y, fit_intercept=self.fit_intercept, backend=self.backend,
                               client=client, n_blocks=self.n_blocks)
        lam1, lam2 = float(self.lambda1), float(self.lambda2)
        try:
            d = X.shape[1] + int(self.fit_intercept)

            def paper_L():
                x_fro2, A, B = chunks.map_reduce(objective.block_lipschitz_stats)
                return objective.paper_lipschitz(x_fro2, A, B, lam1, lam2)

            def spectral_L():
                return objective.spectral_lipschitz(
                    lambda v: chunks.map_reduce(objective.block_curvature_matvec, v, lam2), d, shift=lam1)

            def oracle(points, grad_point):
                values, grad = chunks.map_reduce(objective.block_value_and_grad, points, grad_point, lam2)
                return objective.add_ridge(values, grad, points, grad_point, lam1)

            x0 = self._warm_start_point("coef_", (d, int(np.shape(Y)[1])))
            data_fp = ckpt_store.data_fingerprint(chunks) if ckpt is not None else None
            return self._solve(chunks, oracle, x0, paper_L, spectral_L, ckpt, data_fp,
                               extrapolated_oracle=_extrapolated_oracle(
                                   chunks, objective.block_extrapolated_value_and_grad,
                                   (lam2, chunks.private_arguments),
                                   lambda values, grad, W, G: objective.add_ridge(values, grad, (W, G), 1, lam1)))
        finally:
            chunks.close()

    def _fit_kernel(self, X, Y, client, ckpt=None):
        spec = KernelSpec.resolve(self.kernel, self.gamma, self.degree, self.coef0, X.shape[1])
        X_all = as_matrix(X.compute() if hasattr(X, "dask") else X)
        chunks = make_chunkset(X_all, Y if not hasattr(Y, "dask") else Y.compute(), fit_intercept=False,
                               backend=self.backend, client=client, n_blocks=self.n_blocks)
        lam1, lam2 = float(self.lambda1), float(self.lambda2)
        n = X_all.shape[0]
        try:
            data_fp = ckpt_store.data_fingerprint(chunks) if ckpt is not None else None
            kchunks = chunks.transform(kernel_objective.make_kernel_block, X_all, spec,
                                       self.kernel_memory == "keep")
        finally:
            chunks.close()
        try:
            def paper_L():
                k_fro2, A, B = kchunks.map_reduce(kernel_objective.block_lipschitz_stats)
                return objective.paper_lipschitz(k_fro2, A, B, lam1, lam2, ridge_scale2=k_fro2)

            def spectral_L():
                return objective.spectral_lipschitz(
                    lambda v: kchunks.map_reduce(kernel_objective.block_curvature_matvec, v, lam1, lam2), n)

            def oracle(points, grad_point):
                return kchunks.map_reduce(kernel_objective.block_value_and_grad, points, grad_point, lam1, lam2)

            x0 = self._warm_start_point("dual_coef_", (n, int(np.shape(Y)[1])))
            res = self._solve(kchunks, oracle, x0, paper_L, spectral_L, ckpt, data_fp,
                              extrapolated_oracle=_extrapolated_oracle(
                                  kchunks, kernel_objective.block_extrapolated_value_and_grad, (lam1, lam2),
                                  lambda values, grad, A, G: (values, grad)))
        finally:
            kchunks.close()
        self.support_ = X_all
        self.gamma_ = spec.gamma
        return res

    # -- approximate kernel features (dmlr.kernels.approx) -------------------------
    def _fit_feature_map(self, X) -> KernelFeatureMap:
        """Build the Nystroem / Fourier map on X and keep its arrays as fitted attributes."""
        spec = KernelSpec.resolve(self.kernel, self.gamma, self.degree, self.coef0, X.shape[1])
        if self.kernel_approximation == "nystroem":
            fmap = nystroem_features(X, spec, int(self.n_components), self.random_state)
            self.feature_landmarks_, self.feature_projection_ = fmap.landmarks, fmap.projection
        else:
            fmap = fourier_features(X.shape[1], spec, int(self.n_components), self.random_state)
            self.feature_omega_, self.feature_offset_ = fmap.projection, fmap.offset
        self.gamma_ = spec.gamma
        return fmap

    def _feature_map(self) -> KernelFeatureMap:
        """The fitted (or loaded) feature map, rebuilt from the saved arrays."""
        spec = KernelSpec.resolve(self.kernel, self.gamma_, self.degree, self.coef0, self.n_features_in_)
        if self.kernel_approximation == "nystroem":
            return KernelFeatureMap("nystroem", spec, np.asarray(self.feature_landmarks_, dtype=np.float64),
                                    np.asarray(self.feature_projection_, dtype=np.float64))
        return KernelFeatureMap("fourier", spec, None, np.asarray(self.feature_omega_, dtype=np.float64),
                                np.asarray(self.feature_offset_, dtype=np.float64))
    # --

    def _warm_start_point(self, name: str, shape: tuple) -> np.ndarray:
        prev = getattr(self, name, None) if self.warm_start else None
        if prev is not None and np.shape(prev) == shape:
            return np.array(prev, dtype=np.float64)
        return np.zeros(shape)

    def _solve(self, chunks, oracle, x0, paper_L, spectral_L, ckpt=None, data_fp=None, extrapolated_oracle=None):
        """APG with this estimator's step rule; returns the :class:`APGResult`.

        With ``ckpt = (path, every, resume)``: checkpoints, and resuming from
        one (``data_fp``: :func:`dmlr.models.checkpoint.data_fingerprint` of
        the training data).
        """
        lam3 = float(self.lambda3)
        restart = self.step != "paper" if self.restart is None else bool(self.restart)
        gradient_tol = self.gradient_tol
        if gradient_tol == "auto":
            gradient_tol = None if self.step == "paper" else float(self.tol)

        def prox(V, scaling):
            return prox_nuclear_norm(V, lam3, scaling)

        store, saved = None, None
        if ckpt is not None:
            path, every, resume = ckpt
            fingerprint = ckpt_store.make_fingerprint(
                type(self).__name__, {k: getattr(self, k) for k in CHECKPOINT_PARAMS}, x0.shape, data_fp)
            store, saved = ckpt_store.open_for_fit(path, fingerprint, resume=resume, max_iter=int(self.max_iter))
        self.backend_ = chunks.backend
        if isinstance(saved, APGResult):  # a complete checkpoint: the fit had ended
            self.resumed_from_iteration_ = saved.n_iter
            return saved
        state = saved
        self.resumed_from_iteration_ = 0 if state is None else state.n_iter
        callback = (ProgressReporter(int(self.verbose), max_iter=int(self.max_iter), tol=float(self.tol))
                    if self.verbose else None)
        writer = ckpt_store.BackgroundWriter(store.save_state) if store is not None else None
        try:
            with chunks.solver_context():
                backtracking = self.step != "paper"
                if state is not None:  # L is in the state (it changes under backtracking)
                    L = state.lipschitz
                elif self.step == "spectral":
                    L = spectral_L()
                elif self.step == "backtracking":
                    L = paper_L() / 1024.0
                else:
                    L = paper_L()
                res = apg(oracle, prox, x0, lipschitz=L, max_iter=int(self.max_iter), tol=float(self.tol),
                          callback=callback, backtracking=backtracking, restart=restart,
                          gradient_tol=gradient_tol, state=state,
                          checkpoint=(every, writer) if writer is not None else None,
                          extrapolated_oracle=extrapolated_oracle)
        except BaseException:
            if writer is not None:  # let the checkpoint being written land; the fit's error wins
                writer.wait(raise_error=False)
            raise
        if callback is not None:
            callback.finish(res.converged)
        if writer is not None:
            writer.wait()
            store.save_final(res, int(self.max_iter))
        return res

    def _validate_loaded(self, path) -> None:
        l = int(self.n_labels_)
        if self.kernel is None:
            W = self.coef_
            expected = (int(self.n_features_in_) + int(bool(self.fit_intercept)), l)
            arrays = {"coef_": (W, expected)}
        elif self.kernel_approximation is not None:  # approximate kernel features (dmlr.kernels.approx)
            D, d = int(self.n_components), int(self.n_features_in_)
            arrays = {"coef_": (self.coef_, (D + int(bool(self.fit_intercept)), l))}
            if self.kernel_approximation == "nystroem":
                arrays.update(feature_landmarks_=(self.feature_landmarks_, (D, d)),
                              feature_projection_=(self.feature_projection_, (D, D)))
            else:
                arrays.update(feature_omega_=(self.feature_omega_, (d, D)),
                              feature_offset_=(self.feature_offset_, (D,)))
        else:
            n = np.shape(self.dual_coef_)[0]
            arrays = {"dual_coef_": (self.dual_coef_, (n, l)),
                      "support_": (self.support_, (n, int(self.n_features_in_)))}
        for name, (arr, expected) in arrays.items():
            if arr.ndim != len(expected) or arr.dtype.kind != "f":
                raise DmlrInputError(f"{name} must be a {len(expected)}-D float array, got {arr.dtype} {arr.shape}",
                                     path=path)
            if arr.shape != expected:
                raise DmlrInputError(f"{name} has shape {arr.shape}, metadata says {expected}", path=path)

    # -- prediction -------------------------------------------------------------
    def _scores_block(self, X):
        """``[X, 1] @ W``, or ``k(X, support) @ A`` for a kernel model (see
        :meth:`BaseModel.decision_function`)."""
        X = as_matrix(X)
        if self.kernel is None:
            if self.fit_intercept:
                X = append_bias(X)
            return np.asarray(X @ self.coef_)
        if self.kernel_approximation is not None:  # approximate kernel features (dmlr.kernels.approx)
            Z = self._feature_map().transform(X)
            if self.fit_intercept:
                Z = append_bias(Z)
            return Z @ self.coef_
        spec = KernelSpec.resolve(self.kernel, self.gamma_, self.degree, self.coef0, self.n_features_in_)
        support, A = self.support_, self.dual_coef_
        S = np.zeros((X.shape[0], A.shape[1]))
        step = _PREDICT_SUPPORT_ROWS
        for a in range(0, support.shape[0], step):  # bounded memory: m x step kernel entries at a time
            S += kernel_matrix(X, support[a:a + step], spec) @ A[a:a + step]
        return S


_PREDICT_SUPPORT_ROWS = 4096


def _extrapolated_oracle(chunks, block_fn, block_args: tuple, finish):
    """The APG's speculative call with W_prev kept on the blocks (``apg(extrapolated_oracle=)``).

    ``block_fn(block, W, W_prev or None, momentum, prev_key, key, *block_args)``
    is the block's call (the linear or kernel model's
    ``block_extrapolated_value_and_grad``); ``finish(values, grad, W, G)``
    adds what is computed here (the linear model's ridge term, at W and at
    apg's G; the blocks form their own G from W and W_prev).

    Each call names its W with a fresh key; when the next call's W_prev is
    the W this oracle sent last (the same array: apg hands it back), only its
    key travels. A block that does not hold it (new, or rebuilt after a lost
    worker) answers None and is sent W_prev, or, a sparse block,
    ``SEND_POINT_PAIR`` and is sent [W | G] (see
    :func:`dmlr.objectives.rbrl.block_extrapolated_value_and_grad`). So the
    first call asks the blocks before it sends either. Blocks in this
    process (``not chunks.private_arguments``) that asked for the pair are
    sent one pair per call, which they read and do not keep: two threads
    reading one pair share the cache that two held copies would contend for.
    """
    run = uuid.uuid4().hex          # keys of another fit on the same blocks never match
    calls = itertools.count()
    last = {"W": None, "key": None}
    share_pair = not chunks.private_arguments
    wants_pair = set()              # blocks that asked for [W | G]

    def extrapolated_oracle(W, W_prev, momentum, G):
        key = (run, next(calls))
        held = last["W"] is W_prev
        pair = None
        if share_pair and len(wants_pair) == chunks.n_blocks:
            pair = np.concatenate([W, G], axis=1)
            parts = chunks.map_blocks(block_fn, W, pair, momentum, None, key, *block_args)
        else:
            parts = chunks.map_blocks(block_fn, W, None, momentum, last["key"] if held else None, key,
                                      *block_args)
        for i, part in enumerate(parts):
            if part is None:
                parts[i] = chunks.apply_block(i, block_fn, W, W_prev, momentum, None, key, *block_args)
            elif isinstance(part, str) and part == objective.SEND_POINT_PAIR:
                wants_pair.add(i)
                pair = np.concatenate([W, G], axis=1) if pair is None else pair
                parts[i] = chunks.apply_block(i, block_fn, W, pair, momentum, None, key, *block_args)
        last.update(W=W, key=key)
        values, grad = tree_reduce(parts, add_results)
        return finish(values, grad, W, G)

    return extrapolated_oracle
