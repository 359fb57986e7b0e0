"""A linear multi-label model trained by SGD or one of its variance-reduced variants.

Hiranandani & Pareek: the losses of :mod:`dmlr.kernels.multilabel_losses`
(Hamming / per-label logistic, Subset 0/1 surrogate / softmax cross-entropy,
Gebru / symmetric KL, and the Rank-SVM and RBRL pairwise ranking losses) on
scores ``[X, 1] @ coef_``, minimized with the solvers of
:mod:`dmlr.solvers.vr`. Full-gradient snapshots are map-reduced over the row
blocks where they live (this process, or Dask workers for large data); the
stochastic inner loops run block by block where each block is, the iterate
travelling between them; SAG/SAGA memory stays beside its block.

Prediction: scores as above. ``predict`` thresholds the scores at 0 (at least
one label per row) for the Hamming loss, whose scores are per-label
log-odds; for the softmax losses (subset, gebru) it keeps the labels whose
softmax probability is above uniform (1/K), again at least one; the ranking
losses only order labels, so they use the same score-0 rule as Rank-SVM and
are best judged by ranking metrics.
"""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions

from dmlr.config import chunk_options
from dmlr.distributed.chunks import make_chunkset
from dmlr.kernels.multilabel_losses import LOSSES
from dmlr.metrics import predict_from_scores
from dmlr.models.base import (
    NOT_A_ZERO_THRESHOLD,
    SCALING,
    SEED,
    Axis,
    LinearModel,
    half_decades,
    register_model,
    store_params,
)
from dmlr.objectives.multilabel import LinearMultiLabelProblem
from dmlr.solvers import vr

#: Rows per shuffled group (see :mod:`dmlr.solvers.vr`).
GROUP_ROWS = 256


@register_model(name="linear")
class LinearMultiLabel(LinearModel):
    """Linear multi-label model: ``loss`` minimized by ``solver`` until the optimum is certified.

    Defaults. ``solver="lbfgs"`` with ``tol=1e-4`` stops at a relative gap of
    at most 1e-4 to the optimum of the objective (certified by the bound of
    :mod:`dmlr.solvers.vr`, for the convex losses): it adapts to the curvature,
    where the paper's stochastic solvers, with a step 1/L that must assume the
    worst row, converge slowly (``benchmarks/linear_convergence.py``).
    ``alpha=1e-2`` is cross-validation's most frequent choice
    (``benchmarks/default_params.py``).

    Parameters
    ----------
    loss : {"hamming", "subset", "gebru", "rank_hinge", "rank_squared_hinge"}
    solver : {"lbfgs", "sgd", "svrg1", "svrg2", "svrg3", "saga", "sag", "s2gd", "vrlite", "batching_svrg", \
"mixed_svrg"}
        "lbfgs": L-BFGS-B over the full gradient, map-reduced over the row
        blocks (:func:`dmlr.solvers.vr.minimize_lbfgs`); the others: the
        paper's Algorithms 1-8.
    alpha : float
        Ridge weight alpha/2 ||W||_F^2 (bias row included).
    n_epochs : int
        Epochs of a stochastic solver: at most this many with ``tol``, exactly
        this many without (the paper's runs: 5).
    max_iter : int
        L-BFGS iterations at most (``solver="lbfgs"``).
    learning_rate : {"constant", "1/k", "decay"}
        Step schedule of a stochastic solver: a constant eta0 (what the
        variance-reduced methods' convergence needs), eta0 / k with k the epoch
        (the paper's 1/k; plain SGD needs a decreasing step), or eta0 / (1 +
        decay t) with t the global step.
    eta0 : float, optional
        Base step; default 1/L from the loss's curvature bound and the largest
        row norm (:meth:`~dmlr.objectives.multilabel.LinearMultiLabelProblem.default_step_size`). The
        paper's schedule is ``solver="sgd", learning_rate="1/k", eta0=1``.
    decay : float
        For ``learning_rate="decay"``.
    batch_size : int, optional
        Batching/Mixed SVRG's ``|B|`` (default ceil(n/10)).
    s2gd_nu : float, optional
        S2GD's nu (default ``alpha``).
    group_rows : int
        Rows per shuffled group (the unit of the seeded row order).
    fit_intercept : bool
        Append a constant-1 feature (the bias).
    random_state : int
        Seeds the row order, batches and output draws. W starts at 0.
    record : bool
        Record F(W) before training and after each epoch (L-BFGS: iteration)
        in ``objective_history_``.
    tol : float or None
        Stop once the relative gap (F(W) - F*) / F* is certified below
        ``tol`` (from F(W) and its gradient; :mod:`dmlr.solvers.vr`), checked
        after every epoch or iteration; a ``ConvergenceWarning`` when the cap
        comes first. Needs ``alpha > 0``. None: the stochastic solvers run
        ``n_epochs`` epochs, L-BFGS stops by scipy's own test.
    scaling : {"auto", "standard", "maxabs", "tfidf"} or None
        Feature scaling fitted inside the model and applied by every
        predict-type method (:mod:`dmlr.preprocessing`): "auto" standardizes
        dense features and divides sparse ones by their largest absolute
        value; None uses the features as given.

    Execution (where the row blocks live, how many) is set with
    :func:`dmlr.config_context`, not here.

    Attributes
    ----------
    coef_ : float64 (n_features + fit_intercept, n_labels)
    objective_history_ : list of float
        F(W) at epochs (L-BFGS: iterations) ``history_epochs_`` (0 = the start).
    step_size_ : float
        The base step used (NaN for L-BFGS).
    n_iter_ : int
        Epochs (L-BFGS: iterations) run.
    converged_ : bool
        The stopping rule was met (with ``tol=None``: L-BFGS's own test; the
        stochastic solvers: False).
    gap_bound_ : float
        The certified bound on F(W) - F* at the returned W (inf with alpha = 0,
        NaN when the stochastic solvers run without ``tol``).
    fit_seconds_ : float
        Wall time of the solver, the objective evaluations of the history included.
    """

    _expected_failed_checks = {
        "check_classifier_multioutput": NOT_A_ZERO_THRESHOLD.format(
            rule="score > 0 (softmax losses: probability > 1/n_labels) with at least one label per row"
        )
    }
    _parameter_constraints = {
        "loss": [StrOptions(set(LOSSES))],
        "solver": [StrOptions(set(vr.SOLVERS + vr.BATCH_SOLVERS))],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "n_epochs": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [StrOptions(set(vr.STEP_RULES))],
        "eta0": [Interval(Real, 0, None, closed="neither"), None],
        "decay": [Interval(Real, 0, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "s2gd_nu": [Interval(Real, 0, None, closed="left"), None],
        "group_rows": [Interval(Integral, 1, None, closed="left")],
        "fit_intercept": ["boolean"],
        "random_state": SEED,
        "record": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="neither"), None],
        "scaling": SCALING,
    }
    _fitted_arrays = ("coef_",)
    _fitted_attributes = (
        "objective_history_",
        "history_epochs_",
        "step_size_",
        "n_iter_",
        "converged_",
        "gap_bound_",
        "fit_seconds_",
        "n_features_in_",
        "n_labels_",
        "backend_",
    )

    #: ``alpha`` is searched by default: the full-gradient solver ends at the optimum, and the
    #: value cross-validation picks spans several decades (``benchmarks/default_params.py``).
    _search_space = (Axis("alpha", half_decades(-1.0, -6.0)),)

    def __init__(
        self,
        loss="hamming",
        solver="lbfgs",
        *,
        alpha=1e-2,
        n_epochs=100,
        max_iter=1000,
        learning_rate="constant",
        eta0=None,
        decay=0.0,
        batch_size=None,
        s2gd_nu=None,
        group_rows=GROUP_ROWS,
        fit_intercept=True,
        random_state=0,
        record=True,
        tol=1e-4,
        scaling="auto",
    ):
        store_params(self, locals())

    def fit(self, X, y):
        """Train from W = 0; returns self."""
        self._validate_params()
        X, Y = self._fit_data(X, y)
        chunks = make_chunkset(
            X, Y, fit_intercept=bool(self.fit_intercept), align_rows=int(self.group_rows), **chunk_options()
        )
        try:
            problem = LinearMultiLabelProblem(chunks, self.loss, float(self.alpha), int(self.group_rows))
            d = int(X.shape[1]) + bool(self.fit_intercept)
            K = int(np.shape(Y)[1])
            start = time.perf_counter()
            with chunks.solver_context():
                res = vr.minimize(
                    problem,
                    np.zeros((d, K)),
                    self.solver,
                    epochs=int(self.max_iter if self.solver in vr.BATCH_SOLVERS else self.n_epochs),
                    step=self.learning_rate,
                    step_size=self.eta0,
                    step_decay=float(self.decay),
                    batch_size=self.batch_size,
                    s2gd_nu=self.s2gd_nu,
                    random_state=self.random_state,
                    record=bool(self.record),
                    tol=None if self.tol is None else float(self.tol),
                )
        finally:
            backend = chunks.backend
            chunks.close()
        if self.tol is not None and not res.converged:
            warnings.warn(
                f"LinearMultiLabel({self.solver}) stopped after {res.n_iter} "
                f"{'iterations' if self.solver in vr.BATCH_SOLVERS else 'epochs'} before the relative gap "
                f"was certified below tol={self.tol:g} (bound on F - F*: {res.gap_bound:.3g})"
                + ("; with alpha=0 there is no bound: set tol=None" if self.alpha == 0 else ""),
                ConvergenceWarning,
                stacklevel=2,
            )
        if not np.all(np.isfinite(res.x)):
            raise FloatingPointError(
                f"{self.solver} diverged (non-finite weights) with step size {res.step_size:g}: use a smaller eta0"
            )
        self.coef_ = res.x
        self.objective_history_ = [float(v) for v in res.objective_history]
        self.history_epochs_ = [int(k) for k in res.history_iterations]
        self.step_size_ = float(res.step_size)
        self.n_iter_ = int(res.n_iter)
        self.converged_ = bool(res.converged)
        self.gap_bound_ = float(res.gap_bound)
        self.fit_seconds_ = time.perf_counter() - start
        self.n_labels_ = K
        self.backend_ = backend
        return self

    def labels_from_scores(self, S):
        """0/1 labels (see the module docstring for the rule of each loss)."""
        if self.loss in ("subset", "gebru"):
            # log softmax - log(1/K) > 0  <=>  probability above uniform
            S = S - S.max(axis=1, keepdims=True)
            S = S - np.log(np.exp(S).sum(axis=1, keepdims=True)) + np.log(self.n_labels_)
        return predict_from_scores(S, 0.0)
