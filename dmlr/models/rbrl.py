"""RBRL: joint Rank-SVM and Binary Relevance with robust low-rank learning.

Wu, Zheng, Tian, Liu, Neural Networks 122 (2020) (seed 002). The linear model
minimizes eq. 8,

    1/2 sum_ij max(0, 1 - y_ij x_i w_j)^2 + lambda1/2 ||W||_F^2
      + lambda2 f_r(W) + lambda3 ||W||_*,

with f_r the pairwise squared hinge with margin 2 (eq. 16), by accelerated
proximal gradient with singular value thresholding (Algorithm 1, eqs. 24-27)
and the paper's Lipschitz step (eqs. 22-23). ``lambda2=0`` gives BRL, the
paper's ablation; ``lambda2=lambda3=0`` is binary relevance with the squared
hinge.
"""

from __future__ import annotations

import numpy as np

from dmlr.distributed.chunks import make_chunkset
from dmlr.errors import DmlrInputError
from dmlr.kernels.blocks import append_bias, as_matrix
from dmlr.metrics import predict_from_scores
from dmlr.models.base import BaseModel, register_model
from dmlr.objectives import rbrl as objective
from dmlr.solvers.apg import apg
from dmlr.solvers.prox import prox_nuclear_norm


def _progress_printer(every: int):
    def callback(t, obj, seconds):
        if t == 1 or t % every == 0:
            print(f"  iter {t:5d}  objective {obj:.10g}  {seconds:8.2f} s", flush=True)
        return False
    return callback


@register_model
class RBRL(BaseModel):
    """Linear RBRL multi-label classifier (scikit-learn estimator contract).

    Parameters
    ----------
    lambda1 : float
        Frobenius (ridge) weight.
    lambda2 : float
        Weight of the pairwise ranking term (0: BRL).
    lambda3 : float
        Nuclear-norm weight (low rank).
    max_iter : int
        Maximum APG iterations.
    tol : float
        Stop when the relative objective change is at most ``tol``.
    fit_intercept : bool
        Append a constant-1 feature (the bias is regularized, as the paper).
    step : {"paper"}
        Step rule: the paper's Lipschitz bound (eq. 23).
    backend : {"auto", "local", "dask"}
        Where the row chunks live during training; "auto" keeps small data
        in this process (see :func:`dmlr.distributed.make_chunkset`).
    n_blocks : int, optional
        Number of row blocks (default: one per Dask worker thread).
    verbose : int
        Print progress every ``verbose`` iterations (0: quiet).

    Attributes
    ----------
    coef_ : float64 (n_features + fit_intercept, n_labels)
        W; with ``fit_intercept`` the last row is the bias.
    objective_history_ : list of float
        Objective after each iteration (at the proximal point).
    objective_seconds_ : list of float
        Wall time from the solver's start to each objective value.
    n_iter_ : int
    converged_ : bool
    lipschitz_ : float
        The constant whose inverse was the step.
    n_features_in_, n_labels_ : int
    fit_seconds_ : float
        Whole fit, including loading the row blocks and the Lipschitz pass.
    """

    _fitted_arrays = ("coef_",)
    _fitted_attributes = ("objective_history_", "objective_seconds_", "n_iter_", "converged_", "lipschitz_",
                          "n_features_in_", "n_labels_", "fit_seconds_", "backend_")

    def __init__(self, lambda1=1.0, lambda2=0.01, lambda3=0.1, max_iter=2000, tol=1e-6,
                 fit_intercept=True, step="paper", backend="auto", n_blocks=None, verbose=0):
        self.lambda1 = lambda1
        self.lambda2 = lambda2
        self.lambda3 = lambda3
        self.max_iter = max_iter
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.step = step
        self.backend = backend
        self.n_blocks = n_blocks
        self.verbose = verbose

    def _validate_params(self) -> None:
        for name in ("lambda1", "lambda2", "lambda3"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not (isinstance(self.max_iter, (int, np.integer)) and self.max_iter >= 1):
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        if not (self.tol >= 0):
            raise ValueError(f"tol must be >= 0, got {self.tol!r}")
        if self.step != "paper":
            raise ValueError(f"step must be 'paper', got {self.step!r}")

    def fit(self, X, Y, *, client=None):
        """Fit on X (numpy, scipy.sparse or dask, (n, d)) and Y (0/1, (n, l)).

        Returns
        -------
        self
        """
        import time

        self._validate_params()
        start = time.perf_counter()
        if X.ndim != 2 or np.ndim(Y) != 2:
            raise DmlrInputError(f"X and Y must be 2-D, got shapes {X.shape} and {np.shape(Y)}")
        if X.shape[0] != np.shape(Y)[0]:
            raise DmlrInputError(f"X has {X.shape[0]} rows but Y has {np.shape(Y)[0]}")
        if not hasattr(Y, "dask"):
            _check_binary(Y)
        chunks = make_chunkset(X, Y, fit_intercept=self.fit_intercept, backend=self.backend,
                               client=client, n_blocks=self.n_blocks)
        try:
            d = X.shape[1] + int(self.fit_intercept)
            l = np.shape(Y)[1]
            x_fro2, A, B = chunks.map_reduce(objective.block_lipschitz_stats)
            L = objective.paper_lipschitz(x_fro2, A, B, self.lambda1, self.lambda2)
            lam1, lam2, lam3 = float(self.lambda1), float(self.lambda2), float(self.lambda3)

            def oracle(points, grad_point):
                values, grad = chunks.map_reduce(objective.block_value_and_grad, points, grad_point, lam2)
                return objective.add_ridge(values, grad, points, grad_point, lam1)

            def prox(V, scaling):
                return prox_nuclear_norm(V, lam3, scaling)

            callback = _progress_printer(self.verbose) if self.verbose else None
            with chunks.solver_context():
                res = apg(oracle, prox, np.zeros((d, l)), lipschitz=L, max_iter=int(self.max_iter),
                          tol=float(self.tol), callback=callback)
            self.backend_ = chunks.backend
        finally:
            chunks.close()
        self.coef_ = res.x
        self.objective_history_ = res.objective_history
        self.objective_seconds_ = res.seconds
        self.n_iter_ = res.n_iter
        self.converged_ = res.converged
        self.lipschitz_ = L
        self.n_features_in_ = int(X.shape[1])
        self.n_labels_ = int(l)
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def _validate_loaded(self, path) -> None:
        W = self.coef_
        if W.ndim != 2 or W.dtype.kind != "f":
            raise DmlrInputError(f"coef_ must be a 2-D float array, got {W.dtype} {W.shape}", path=path)
        expected = (int(self.n_features_in_) + int(bool(self.fit_intercept)), int(self.n_labels_))
        if W.shape != expected:
            raise DmlrInputError(f"coef_ has shape {W.shape}, metadata says {expected}", path=path)

    # -- prediction -------------------------------------------------------------
    def decision_function(self, X):
        """Scores ``[X, 1] @ W``, shape (n, n_labels); dask in, dask out (row chunks kept)."""
        self._check_fitted()
        if X.shape[-1] != self.n_features_in_:
            raise DmlrInputError(f"X has {X.shape[-1]} features, the model was fitted on {self.n_features_in_}")
        if hasattr(X, "dask"):
            if len(X.chunks[1]) > 1:
                X = X.rechunk({1: -1})
            return X.map_blocks(self._scores_block, dtype=np.float64, chunks=(X.chunks[0], (self.n_labels_,)),
                                meta=np.empty((0, 0), dtype=np.float64))
        return self._scores_block(X)

    def _scores_block(self, X):
        X = as_matrix(X)
        if self.fit_intercept:
            X = append_bias(X)
        return np.asarray(X @ self.coef_)

    def predict(self, X):
        """0/1 labels by the sign of the score, at least one per row
        (the reference's rule, :func:`dmlr.metrics.predict_from_scores`)."""
        return predict_from_scores(self.decision_function(X))


def _check_binary(Y) -> None:
    Y = np.asarray(Y)
    if not np.isin(Y, (0, 1)).all():
        bad = np.argwhere(~np.isin(Y, (0, 1)))[0]
        raise DmlrInputError(f"labels must be 0 or 1; found {Y[tuple(bad)].item()!r} at label {int(bad[1])}",
                             row=int(bad[0]))
