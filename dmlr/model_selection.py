"""Hyper-parameter search by K-fold cross-validation, parallel on a Dask cluster.

:func:`grid_search_cv` evaluates every point of a parameter grid on K
train/validation splits of the training set (:func:`kfold_indices`). The
unit of work is one fold and one *regularization path*: all grid values of
one parameter (``path_param``: by default RBRL's ``alpha_nuclear``, for models
with ``warm_start``) for one setting of the others. A unit fits the path from the largest to the smallest value with
``warm_start=True``, so each fit starts from the previous solution on the
same fold, and evaluates every fit on the validation fold.

Every search of dmlr (this one, :func:`dmlr.tuning.search` and
:func:`dmlr.models.omf.cross_validate_omf`) runs on one engine: its units
are placed by :class:`UnitRunner` (as independent Dask tasks spread over
the workers, each beside its own copy of the data, or on this process's
threads), it reports through :class:`dmlr.progress.SearchProgress` and
returns a :class:`SearchResult`.

Results are aggregated in a fixed order (grid point, then fold), and every
unit runs with single-threaded BLAS in a fresh estimator with the
in-process backend, so the recorded scores do not depend on the number of
workers, on which worker ran a unit or on the order units completed in.
"""

from __future__ import annotations

import itertools
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from dmlr.config import config_context
from dmlr.data.arrays import as_csr, is_dask, is_sparse
from dmlr.metrics import LABEL_METRICS, METRIC_NAMES, multilabel_metrics
from dmlr.progress import SearchProgress

__all__ = [
    "DEFAULT_SCORING",
    "SearchResult",
    "LOSS_METRICS",
    "PAPER_GRID",
    "PAPER_METRICS",
    "default_scoring",
    "grid_search_cv",
    "kfold_indices",
    "param_grid",
]

#: The search grid of the RBRL paper (Wu et al. 2020, Sec. 5.2): each of the
#: three weights in {1e-4, 1e-3, ..., 1e2}.
PAPER_GRID = {name: [10.0**k for k in range(-4, 3)] for name in ("alpha", "alpha_rank", "alpha_nuclear")}

#: The six metrics the RBRL paper reports (its Tables 3-8).
PAPER_METRICS = ("hamming_loss", "subset_accuracy", "f1_example", "ranking_loss", "coverage", "average_precision")

#: Metrics for which lower is better; every other metric of METRIC_NAMES is higher-better.
LOSS_METRICS = ("hamming_loss", "ranking_loss", "one_error", "coverage")

#: grid_search_cv warns when at least this fraction of the warm-started fits stopped at the
#: solver's first stopping test (a symptom of stopping short; see its Notes).
WARM_STOP_WARN_FRACTION = 0.1

#: Name of the mean of the paper's six metrics (see :func:`grid_search_cv`).
PAPER_MEAN = "paper_mean"

#: Default scoring of every search: a ranking metric (every model of dmlr ranks labels),
#: the ranking loss, which RBRL's pairwise term (eq. 16) bounds. Chosen by it, ``alpha``
#: gave a lower test ranking loss than chosen by average precision, at an average
#: precision within 0.01, on the staged sets ``benchmarks/auto_vs_peers.py`` compares.
DEFAULT_SCORING = "ranking_loss"

#: The scoring of a one-label target, where the ranking metrics rank nothing: the label's
#: ROC AUC, which ranks the rows.
ONE_LABEL_SCORING = "auc_macro"


def default_scoring(Y) -> str:
    """:data:`DEFAULT_SCORING`, or :data:`ONE_LABEL_SCORING` for a label matrix of one column."""
    return ONE_LABEL_SCORING if np.ndim(Y) == 2 and np.shape(Y)[1] == 1 else DEFAULT_SCORING


# ----------------------------------------------------------------------------
# Splits and grids
# ----------------------------------------------------------------------------


def kfold_indices(n: int, n_splits: int = 5, seed: int | None = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shuffled K-fold split of ``range(n)``, deterministic for a given seed.

    The rows are permuted by ``numpy.random.default_rng(seed)`` and cut into
    ``n_splits`` consecutive folds; as in scikit-learn's ``KFold``, the first
    ``n % n_splits`` folds have one row more than the others.

    Parameters
    ----------
    n : int
        Number of rows.
    n_splits : int
        Number of folds, ``2 <= n_splits <= n``.
    seed : int or None
        Seed of the permutation (None: fresh entropy, not reproducible).

    Returns
    -------
    list of (ndarray, ndarray)
        ``n_splits`` pairs ``(train_idx, val_idx)`` of sorted int64 row
        indices; the validation sets are disjoint and together cover
        ``range(n)``, and each ``train_idx`` is the complement of its
        ``val_idx``. Sorted indices keep row slicing of CSR and C-ordered
        arrays sequential.

    Raises
    ------
    ValueError
        If ``n_splits < 2`` or ``n_splits > n``.
    """
    n = _as_int(n, "n")
    n_splits = _as_int(n_splits, "n_splits")
    if n_splits < 2:
        raise ValueError(f"cross-validation needs at least 2 folds, got n_splits={n_splits}")
    if n_splits > n:
        raise ValueError(f"cannot split {n} rows into {n_splits} folds (n_splits must be <= the number of rows)")
    perm = np.random.default_rng(seed).permutation(n)
    sizes = np.full(n_splits, n // n_splits, dtype=np.int64)
    sizes[: n % n_splits] += 1
    edges = np.concatenate([[0], np.cumsum(sizes)])
    splits = []
    for a, b in zip(edges[:-1], edges[1:]):
        in_val = np.zeros(n, dtype=bool)
        in_val[perm[a:b]] = True
        splits.append((np.flatnonzero(~in_val).astype(np.int64), np.flatnonzero(in_val).astype(np.int64)))
    return splits


def param_grid(grid: Mapping | None = None, /, **axes) -> list[dict]:
    """All points of a parameter grid (the Cartesian product of the axes).

    Parameters
    ----------
    grid : mapping of str to sequence, optional
        Parameter name -> candidate values, e.g. :data:`PAPER_GRID`.
    **axes : sequence
        More axes, as keywords (added after, and overriding, ``grid``'s).

    Returns
    -------
    list of dict
        One ``{name: value}`` per point, the last axis varying fastest and
        each axis in its given order.

    Raises
    ------
    ValueError
        If there is no axis or an axis has no values.
    """
    axes = _check_axes({**(dict(grid) if grid is not None else {}), **axes})
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


# ----------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------


def _greater_is_better(scoring: str) -> bool:
    return scoring not in LOSS_METRICS


def _needed_metrics(scoring: str) -> tuple[str, ...]:
    """The six paper metrics (always recorded) plus the scoring metric."""
    return PAPER_METRICS if scoring in PAPER_METRICS or scoring == PAPER_MEAN else PAPER_METRICS + (scoring,)


def _score(values: Mapping[str, float], scoring: str) -> float:
    if scoring != PAPER_MEAN:
        return float(values[scoring])
    # Each paper metric oriented larger-is-better; coverage is already divided
    # by the number of labels (dmlr.metrics), so all six lie in [0, 1].
    oriented = [1.0 - values[m] if m in LOSS_METRICS else values[m] for m in PAPER_METRICS]
    return float(np.mean(oriented))


# ----------------------------------------------------------------------------
# Result
# ----------------------------------------------------------------------------


@dataclass
class SearchResult:
    """Outcome of a search: :func:`dmlr.tuning.search`, :func:`grid_search_cv` and
    :func:`dmlr.models.omf.cross_validate_omf` all return it.

    Attributes
    ----------
    best_params : dict
        The chosen value of every searched parameter.
    results : list of dict
        One record per setting fitted on every fold, in search order (a grid
        search: grid order, :func:`param_grid`). Every record has ``params``
        (the setting), ``mean_score`` and ``std_score`` (of the scoring
        metric over the folds, population std), ``fold_scores`` (fold order)
        and ``mean_n_iter`` (solver iterations per fit). A path search's
        records also have ``param``, ``value`` and ``n_rows`` (the stage's
        rows, on whose scale ``value`` is); a grid search's ``mean_<metric>``
        for each metric it recorded, ``fold_n_iter`` and ``mean_fit_seconds``.
    scoring : str
        The metric the search optimized (:data:`dmlr.metrics.METRIC_NAMES`,
        or ``"paper_mean"``).
    n_splits : int
        Folds (of every stage).
    best_score : float
        The best record's ``mean_score`` (nan when the choice lies between
        two records: a staged search's last stage interpolates).
    best_index : int or None
        The best record's position in ``results`` (None as for ``best_score``).
    best_estimator : estimator or None
        Refitted on all the rows with ``best_params`` (``refit=True``).
    greater_is_better : bool
        Orientation of ``scoring``.
    n_fits : int
        Cross-validation fits run (read from a checkpoint or abandoned: not counted).
    n_abandoned : int
        Fold x value fits a path search skipped by early abandonment.
    n_widened : int
        Times a path search's grid grew beyond an edge.
    n_resumed_units : int
        Units read from the checkpoint instead of being fitted.
    seconds : float
        Wall time of the search (the refit not included).
    refit_seconds : float
    backend : {"local", "dask", "chunks"}
        Where the units ran: in this process, as Dask tasks, or each fit
        distributed over the chunks (dask data too large for one process).
    n_rows : list of int or None
        Rows of each stage of a path search (one stage, all the training rows,
        unless it was staged).
    path_param : str or None
        A grid search's warm-started path parameter (None: every fit started
        from zero).
    n_warm_fits : int
        Fits of a grid search that started from the previous path value's solution.
    n_warm_first_test_stops : int
        Of those, fits that stopped at the solver's first stopping test
        (``n_iter_ <= 2``), possibly short of their optimum (see the Notes
        of :func:`grid_search_cv`).
    """

    best_params: dict
    results: list
    scoring: str
    n_splits: int
    best_score: float = math.nan
    best_index: int | None = None
    best_estimator: object = field(default=None, repr=False)
    greater_is_better: bool = True
    n_fits: int = 0
    n_abandoned: int = 0
    n_widened: int = 0
    n_resumed_units: int = 0
    seconds: float = 0.0
    refit_seconds: float = 0.0
    backend: str = "local"
    n_rows: list | None = None
    path_param: str | None = None
    n_warm_fits: int = 0
    n_warm_first_test_stops: int = 0

    def cv_results(self) -> dict:
        """The records as scikit-learn's ``cv_results_`` layout (dict of lists)."""
        out = {
            "params": [r["params"] for r in self.results],
            "mean_test_score": [r["mean_score"] for r in self.results],
            "std_test_score": [r["std_score"] for r in self.results],
            "mean_n_iter": [r["mean_n_iter"] for r in self.results],
        }
        for key in ("param", "value", "n_rows"):
            if self.results and all(key in r for r in self.results):
                out[key] = [r[key] for r in self.results]
        for k in range(self.n_splits):
            out[f"split{k}_test_score"] = [r["fold_scores"][k] for r in self.results]
        return out

    def best_params_for(self, metric: str) -> dict:
        """Parameters of the best record by one of the recorded metrics.

        A grid search's records carry the fold mean of each of
        :data:`PAPER_METRICS`, so one search also answers "which point is best
        for subset accuracy" without another cross-validation (the protocol of
        tables that report each metric at its own best hyper-parameters).

        Parameters
        ----------
        metric : str
            A metric with a ``mean_<metric>`` entry in the records (one of
            :data:`PAPER_METRICS`, or the search's scoring metric).

        Returns
        -------
        dict
            The best record's parameters (first in search order on ties).
        """
        recorded = [m for m in METRIC_NAMES if self.results and f"mean_{m}" in self.results[0]]
        if metric not in recorded:
            raise ValueError(f"the search did not record {metric!r}; recorded metrics: {recorded}")
        best = _ranking(self.results, _greater_is_better(metric), key=f"mean_{metric}")[0]
        if math.isnan(self.results[best][f"mean_{metric}"]):
            raise ValueError(f"every grid point scored nan in {metric!r}")
        return dict(self.results[best]["params"])

    def top(self, k: int = 5) -> list[dict]:
        """The ``k`` best records, best first (ties in search order)."""
        order = _ranking(self.results, self.greater_is_better)
        return [self.results[i] for i in order[:k]]

    def table(self, k: int | None = None) -> str:
        """The records as a fixed-width text table: all of them in search order (the
        chosen setting marked ``*``), or the ``k`` best, best first."""
        rows = self.results if k is None else self.top(k)
        names = list(dict.fromkeys(p for r in rows for p in r["params"]))
        staged = any(r.get("n_rows") != rows[0].get("n_rows") for r in rows) if rows else False
        metrics = [m for m in PAPER_METRICS if rows and all(f"mean_{m}" in r for r in rows)]
        head = [*(["rows"] if staged else []), *names, self.scoring, "std", *metrics, "iters"]
        lines = ["  ".join(f"{h:>12}" for h in head)]
        for r in rows:
            chosen = all(r["params"].get(p) == v for p, v in self.best_params.items())
            cells = [
                *([f"{r['n_rows']:>12d}"] if staged else []),
                *(_cell(r["params"].get(p, math.nan)) for p in names),
                f"{r['mean_score']:>12.5f}",
                f"{r['std_score']:>12.5f}",
                *(f"{r['mean_' + m]:>12.5f}" for m in metrics),
                f"{r['mean_n_iter']:>12.1f}",
            ]
            lines.append("  ".join(cells) + (" *" if chosen and k is None else ""))
        return "\n".join(lines)


def _cell(value) -> str:
    return f"{value:>12.4g}" if isinstance(value, (int, float, np.number)) else f"{value!s:>12}"


#: The former name of :class:`SearchResult` (one result type for every search).
GridSearchResult = SearchResult


def _ranking(records, greater_is_better: bool, key: str = "mean_score") -> list[int]:
    """Record indices best first by ``record[key]``; nan scores last; stable (grid order) on ties."""
    sign = -1.0 if greater_is_better else 1.0
    keys = [(math.isnan(r[key]), sign * r[key] if not math.isnan(r[key]) else 0.0, i) for i, r in enumerate(records)]
    return [k[2] for k in sorted(keys)]


# ----------------------------------------------------------------------------
# The search
# ----------------------------------------------------------------------------


def grid_search_cv(
    estimator,
    X,
    Y,
    grid,
    *,
    cv=5,
    scoring: str | None = None,
    seed: int | None = 0,
    client=None,
    n_jobs: int | None = None,
    refit: bool = True,
    path_param: str | None = "auto",
    verbose: int = 0,
) -> SearchResult:
    """Exhaustive grid search with K-fold cross-validation and warm-started paths.

    The same engine as :func:`dmlr.tuning.search` (units placed by
    :class:`UnitRunner`, :class:`SearchResult`, :class:`dmlr.progress.SearchProgress`),
    over every point of a grid instead of an adaptive path.

    The RBRL paper (Wu et al. 2020, Sec. 5.2) chooses the hyper-parameters
    by fivefold cross-validation on the training set but does not say which
    metric it maximizes. ``scoring="paper_mean"`` is the mean of the six
    metrics the paper reports, each oriented so that larger is better:
    ``1 - hamming_loss``, ``subset_accuracy``, ``f1_example``,
    ``1 - ranking_loss``, ``1 - coverage`` (coverage being divided by the
    number of labels, see :mod:`dmlr.metrics`) and ``average_precision``.

    Parameters
    ----------
    estimator : estimator
        Any dmlr estimator. It is cloned, never modified; its other
        parameters (``max_iter``, ``tol``, ``solver``, ...) are used for
        every fit. Validation scores use the model's own label rule
        (``labels_from_scores``), as :func:`dmlr.evaluate` does.
    X : ndarray, scipy.sparse matrix or dask array, shape (n, d)
        Training features. Dask arrays are computed first: every unit
        needs random rows of the whole set.
    Y : array-like or dask array, shape (n, l)
        Training labels, 0/1.
    grid : mapping of str to sequence
        Parameter name -> candidate values, e.g. :data:`PAPER_GRID`.
    cv : int or sequence of (train_idx, val_idx)
        Number of shuffled folds (:func:`kfold_indices` with ``seed``), or
        explicit splits.
    scoring : str or None
        ``"paper_mean"`` (see above) or a name in
        :data:`dmlr.metrics.METRIC_NAMES`; None: :func:`default_scoring`, the
        default of every search (the ranking loss). The losses
        (:data:`~dmlr.metrics.LOSS_METRICS`: hamming_loss, ranking_loss, one_error,
        coverage) are minimized, every other metric maximized.
    seed : int or None
        Seed of the fold permutation.
    client : distributed.Client, "local" or None
        Cluster to run the units on. None: the configured client
        (``dmlr.config_context(client=...)``), else the current Dask client if
        there is one, else in this process (no cluster is started). "local":
        in this process.
    n_jobs : int or None
        Without a cluster, threads running units side by side (None: one per
        core; 1: one unit at a time in this thread).
    refit : bool
        Fit a clone with the best parameters on all of X, Y (in this
        process's client context, with the estimator's own ``backend``).
    path_param : str, "auto" or None
        Grid parameter whose values form the warm-started path of a unit,
        fitted from the largest value to the smallest (the most regularized
        solution is the cheapest and a good start for the next); needs an
        estimator with ``warm_start``. "auto": ``alpha_nuclear`` for the
        RBRL models, None for the others. None, or a parameter not in the
        grid: every grid point is its own unit and starts from zero.
    verbose : int
        0: quiet. 1: a line per finished unit (units done, time left) once
        the search has run :data:`dmlr.progress.PROGRESS_AFTER_SECONDS`;
        one updating line in a notebook. 2: every line from the start.

    Returns
    -------
    SearchResult

    Raises
    ------
    ValueError
        On a grid parameter (or ``path_param``) the estimator does not have,
        an empty (or duplicated) value list, an unknown scoring name, fewer than 2 folds
        or more folds than rows, or X and Y with different row counts.

    Notes
    -----
    Warm starts change only where the solver starts; each fit still stops by
    the estimator's own rule (``tol``, ``max_iter``), so path and cold-start
    scores agree to the accuracy of that rule. The reference's rule alone
    (the objective changes by at most ``tol``, relative, in one iteration)
    can pass at its first test after a warm start, because the first steps
    from a good start are short, so a warm-started fit may stop after 2
    iterations, above the cold fit's objective. RBRL's ``gradient_tol="auto"``
    (the default under every step rule but ``"paper"``) also requires the
    gradient mapping to have shrunk, which stops that. Check
    ``n_warm_first_test_stops`` of the result (a RuntimeWarning is issued
    when it is at least 10% of the warm-started fits); use a tight ``tol``
    or ``path_param=None`` when that happens.

    On a cluster the data are scattered to every worker once. If every
    worker holding them is lost (killed, or removed after missed
    heartbeats), the units not yet finished are submitted again with the
    data scattered anew, up to
    :data:`dmlr.distributed.chunks.MAX_RECOVERIES` times (a RuntimeWarning
    says so); finished units are kept.

    Each unit runs with single-threaded BLAS (the parallelism is across
    units) so that scores are bit-identical in-process and on any number
    of workers.
    """
    start = time.perf_counter()
    axes = _check_axes(dict(grid))
    valid = set(estimator.get_params())
    unknown = [name for name in axes if name not in valid]
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} in the grid for {type(estimator).__name__}; "
            f"valid parameters: {sorted(valid)}"
        )
    if scoring is None:
        scoring = default_scoring(Y)
    if scoring != PAPER_MEAN and scoring not in METRIC_NAMES:
        raise ValueError(f"unknown scoring {scoring!r}; use {PAPER_MEAN!r} or one of {list(METRIC_NAMES)}")
    if path_param == "auto":
        path_param = "alpha_nuclear" if {"alpha_nuclear", "warm_start"} <= valid else None
    if path_param is not None and path_param not in valid:
        raise ValueError(f"path_param {path_param!r} is not a parameter of {type(estimator).__name__}")
    if path_param is not None and "warm_start" not in valid:
        raise ValueError(f"{type(estimator).__name__} has no warm_start: use path_param=None")
    X, Y = _materialize(X, Y)
    n = X.shape[0]
    splits = _check_cv(cv, n, seed)
    metric_names = _needed_metrics(scoring)

    # Units: (setting of the non-path params) x fold; each unit's path values sorted largest first.
    path = path_param if path_param is not None and path_param in axes else None
    other_axes = {k: v for k, v in axes.items() if k != path}
    settings = param_grid(other_axes) if other_axes else [{}]
    path_values = sorted(axes[path], reverse=True) if path is not None else [None]
    base_params = estimator.get_params()
    units = [(s, f) for s in range(len(settings)) for f in range(len(splits))]

    report = SearchProgress(verbose, (), [n], len(splits), start, staged=False)
    unit_args = [(type(estimator), base_params, settings[s], path, path_values, f, metric_names) for s, f in units]
    with UnitRunner((X, Y, splits), client, n_jobs=n_jobs) as runner:
        backend = runner.backend
        outputs = runner.map(_fit_path, unit_args, lambda *_: report.unit_done(len(units), len(path_values)))

    # Aggregate in grid order (param_grid(axes)), folds in order, whatever order the units finished in.
    per_point: dict[tuple, list] = {}
    for (s, f), unit_out in zip(units, outputs):
        for value, fit_out in zip(path_values, unit_out):
            params = {**settings[s], **({path: value} if path is not None else {})}
            per_point.setdefault(_key(params, axes), [None] * len(splits))[f] = fit_out
    records = [_record(point, per_point[_key(point, axes)], scoring) for point in param_grid(axes)]

    # Warm-started fits (all but the first of each path) that passed the solver's
    # first stopping test: the symptom of a stop short of the optimum (see Notes).
    warm = [fit_out[1] for unit_out in outputs for fit_out in unit_out[1:]] if path is not None else []
    n_short = sum(it <= 2 for it in warm)
    if warm and n_short >= WARM_STOP_WARN_FRACTION * len(warm):
        warnings.warn(
            f"{n_short} of {len(warm)} warm-started fits stopped at the solver's first stopping test "
            f"(n_iter_ <= 2) and may be short of their optimum, scoring like the previous "
            f"{path!r} value; use solver='spectral' or 'backtracking' (whose gradient_tol stops "
            f"them), a tighter tol or path_param=None",
            RuntimeWarning,
            stacklevel=2,
        )

    greater = _greater_is_better(scoring)
    order = _ranking(records, greater)
    best_index = order[0]
    if math.isnan(records[best_index]["mean_score"]):
        raise ValueError(
            f"every grid point scored nan in {scoring!r} (e.g. no validation row has both "
            f"relevant and irrelevant labels); choose another scoring"
        )
    seconds = time.perf_counter() - start

    best_params = dict(records[best_index]["params"])
    best_estimator, refit_seconds = None, 0.0
    if refit:
        t = time.perf_counter()
        best_estimator = type(estimator)(**{**base_params, **best_params})
        on_cluster = client is not None and not isinstance(client, str)
        with config_context(**({"client": client} if on_cluster else {})):
            best_estimator.fit(X, Y)
        refit_seconds = time.perf_counter() - t
    return SearchResult(
        results=records,
        best_params=best_params,
        best_score=records[best_index]["mean_score"],
        best_index=best_index,
        best_estimator=best_estimator,
        scoring=scoring,
        greater_is_better=greater,
        n_splits=len(splits),
        n_fits=len(records) * len(splits),
        seconds=seconds,
        refit_seconds=refit_seconds,
        path_param=path,
        backend=backend,
        n_warm_fits=len(warm),
        n_warm_first_test_stops=n_short,
    )


# ----------------------------------------------------------------------------
# One unit of work (runs on a worker or in this process)
# ----------------------------------------------------------------------------


def _fit_path(X, Y, splits, cls, base_params, setting, path, path_values, fold, metric_names):
    """Fit one fold along one path (largest value first, warm-started) and evaluate each fit.

    Returns a list, in ``path_values`` order, of (metric dict, n_iter, seconds).
    """
    from threadpoolctl import threadpool_limits

    train_idx, val_idx = splits[fold]
    X_tr, Y_tr, X_val, Y_val = X[train_idx], Y[train_idx], X[val_idx], Y[val_idx]
    warm = {"warm_start": True} if path is not None else {}
    est = cls(**{**base_params, **setting, **warm, **unit_label_rule(cls, metric_names)})
    out = []
    # In-process backend and one block: the unit is already the parallel grain; a nested
    # cluster (or a client call from inside a task) would only add overhead, and blocks on
    # threads would oversubscribe the cores the other units run on. One BLAS thread: workers
    # run one unit per core, and the same threading in-process keeps sums in the same order,
    # hence identical scores.
    behind = None  # (arrays, value) one path value back: the predictor's (predict_path_start)
    with config_context(**UNIT_CONFIG), threadpool_limits(limits=1, user_api="blas"):
        for k, value in enumerate(path_values):
            if path is not None:
                here = (path_point(est), path_values[k - 1]) if k > 0 else None
                if behind is not None:
                    predict_path_start(est, behind[0], (behind[1], path_values[k - 1], value))
                behind = here
                est.set_params(**{path: value})
            t = time.perf_counter()
            est.fit(X_tr, Y_tr)
            S = est.decision_function(X_val)
            values = multilabel_metrics(Y_val, S, est.labels_from_scores(S), metrics=metric_names)
            out.append((values, int(getattr(est, "n_iter_", 0)), time.perf_counter() - t))
    return out


def path_point(est) -> dict:
    """The arrays a ``warm_start`` fit of ``est`` would start from (its class's
    ``_warm_start_arrays`` that it holds), by name. References, not copies: a fit assigns
    new arrays to them and never writes into the old ones."""
    names = getattr(type(est), "_warm_start_arrays", ())  # a scikit-learn estimator: none
    return {k: getattr(est, k) for k in names if getattr(est, k, None) is not None}


def predict_path_start(est, behind: dict, values: tuple) -> None:
    """Move the warm start of ``est`` (fitted at ``values[1]``) along the path's secant, for
    its next fit at ``values[2]``: ``W + r (W - W_behind)``, with ``W_behind`` the same
    fold's arrays at ``values[0]`` (``behind``, from :func:`path_point`) and ``r`` the step
    ratio in log of the value, at most 1.

    A path's optima move smoothly with the log of the regularization weight, and from the
    neighbour's optimum alone the next fit starts far off: half a decade of the ridge weight
    moves the objective by a tenth, which L-BFGS, with no curvature pairs yet, takes most of
    its iterations to cover (the predictor-corrector of continuation methods, Allgower &
    Georg 1990, ch. 2; ``benchmarks/time_to_model.py`` measures the search with it). Only a
    step in the same direction as the last is predicted (``r > 0``), and never further
    than that step's length.

    Parameters
    ----------
    est : estimator fitted at ``values[1]``, with ``warm_start=True``
    behind : dict of name -> ndarray
    values : (float, float, float), positive
    """
    before, here, to = (math.log(float(v)) for v in values)
    if before == here:
        return
    ratio = (to - here) / (here - before)
    if not ratio > 0:
        return
    ratio = min(ratio, 1.0)
    for name, W in path_point(est).items():
        old = behind.get(name)
        if old is not None and np.shape(old) == np.shape(W):
            setattr(est, name, W + ratio * (W - old))


def unit_label_rule(cls, metric_names) -> dict:
    """Parameters a search unit of model class ``cls`` overrides when its metrics read scores
    only: no learned thresholds (``threshold=0.0``), which would cost a scoring pass and a
    histogram pass over the training rows per fit and change none of those metrics."""
    if getattr(cls, "_learns_threshold", False) and not any(m in LABEL_METRICS for m in metric_names):
        return {"threshold": 0.0}
    return {}


#: Configuration of a search's unit running in memory: one block, in this process.
UNIT_CONFIG = {"backend": "local", "n_blocks": 1, "client": None}


class UnitRunner:
    """Runs the units of a search, ``fn(*shared, *unit)``, on the Dask cluster or here.

    The units of a search each read their own rows of the ``shared`` data (X,
    Y, the folds). On a cluster the shared data are scattered to every worker
    once, at the first :meth:`map` (a copy on every worker), and kept there for
    later calls; the units run as independent tasks, spread over the workers
    in turn. Without one they run on ``n_jobs`` threads of this process, or
    one after the other in this thread.

    If every worker holding the scattered data is lost (killed, or removed
    after missed heartbeats), the units not yet finished are submitted again
    with the data scattered anew, up to
    :data:`dmlr.distributed.chunks.MAX_RECOVERIES` times per call (a
    RuntimeWarning says so); finished units are kept.

    Parameters
    ----------
    shared : tuple
        Arguments common to every unit (numpy / scipy.sparse data, folds).
    client : distributed.Client, "local" or None
        As :func:`grid_search_cv`'s ``client``.
    n_jobs : int or None
        Threads without a cluster (None: one per core; 1: one unit at a time,
        in this thread).
    """

    def __init__(self, shared: tuple, client=None, n_jobs: int | None = 1):
        self.shared = tuple(shared)
        self.client = _resolve_client(client)
        self.n_jobs = (os.cpu_count() or 1) if n_jobs is None else int(n_jobs)
        self._scattered = None  # worker address -> the shared data there (futures or scattered)
        self._owned: list = []

    @property
    def backend(self) -> str:
        return "local" if self.client is None else "dask"

    def map(self, fn, units: list, progress=None) -> list:
        """``[fn(*shared, *unit) for unit in units]``; ``progress(i, result)`` as each finishes
        (in order without a cluster)."""
        if self.client is not None:
            return self._map_on_cluster(fn, units, progress)
        if self.n_jobs > 1 and len(units) > 1:
            return self._map_threads(fn, units, progress)
        outputs = []
        for i, unit in enumerate(units):
            outputs.append(fn(*self.shared, *unit))
            if progress is not None:
                progress(i, outputs[-1])
        return outputs

    def _map_threads(self, fn, units: list, progress) -> list:
        """The units on ``n_jobs`` threads of this process.

        A unit's work is BLAS calls and Numba kernels that release the GIL, so
        threads use the cores without processes' start-up or copies of the data.
        Each thread runs under this thread's settings
        (``config_context``) and one BLAS thread, which this thread holds for
        the whole call (so that the units' own limits, entered and left in any
        order, never restore more threads).
        """
        from concurrent.futures import ThreadPoolExecutor

        from dmlr._blas import single_threaded_blas
        from dmlr.config import get_config

        settings = get_config()

        def run(unit):
            with config_context(**settings):
                return fn(*self.shared, *unit)

        outputs = []
        with single_threaded_blas(), ThreadPoolExecutor(min(self.n_jobs, len(units))) as pool:
            for i, out in enumerate(pool.map(run, units)):  # in order, each as soon as it is there
                outputs.append(out)
                if progress is not None:
                    progress(i, out)
        return outputs

    def _map_on_cluster(self, fn, units, progress):
        from distributed import as_completed
        from distributed.client import FutureCancelledError

        from dmlr.distributed.chunks import MAX_RECOVERIES

        client = self.client
        outputs = [None] * len(units)
        for attempt in range(MAX_RECOVERIES + 1):
            todo = [i for i, out in enumerate(outputs) if out is None]
            if self._scattered is None:
                self._place(client)
            workers = sorted(self._scattered)
            futures = {}
            for j, i in enumerate(todo):
                # Unit j on worker j mod w, beside that worker's copy of the data: the scheduler
                # would otherwise run units where the data were made, one worker busy and the
                # others idle. A soft choice: a lost worker's units run elsewhere.
                w = workers[j % len(workers)]
                fut = client.submit(
                    fn, *self._scattered[w], *units[i], pure=False, workers=[w], allow_other_workers=True
                )
                futures[fut] = i
            try:
                for fut in as_completed(futures, loop=client.loop):  # not default_client()'s loop
                    i = futures[fut]
                    outputs[i] = fut.result()  # raises the unit's exception, if any
                    fut.release()
                    if progress is not None:
                        progress(i, outputs[i])
                return outputs
            except FutureCancelledError:
                # Scattered data cannot be recomputed: when every worker holding it is gone
                # (killed, or removed by the scheduler after missed heartbeats), the units
                # still to run are cancelled. Keep the finished units, scatter again from
                # this process's copy and submit the rest (units are independent and
                # deterministic, so the result is the uninterrupted run's).
                self.close()
                if attempt == MAX_RECOVERIES:
                    raise
                warnings.warn(
                    f"search: the workers holding the data were lost; resubmitting "
                    f"{sum(out is None for out in outputs)} of {len(units)} units",
                    RuntimeWarning,
                    stacklevel=3,
                )
            finally:
                client.cancel([f for f in futures if f.status == "pending"])
        return outputs  # pragma: no cover - the loop returns or raises

    def _place(self, client) -> None:
        """A copy of the shared data on every worker, once: arrays of this process scattered
        (broadcast), futures (data a worker computed from the chunks) copied by a task on each
        worker, which fetches them once."""
        from distributed import Future

        from dmlr.distributed.chunks import LOST_WORKER_WAIT
        from dmlr.distributed.client import cluster_workers

        client.wait_for_workers(1, timeout=LOST_WORKER_WAIT)
        workers = sorted(cluster_workers(client))
        here = [a for a in self.shared if not isinstance(a, Future)]
        sent = iter(client.scatter(here, broadcast=True, hash=False) if here else [])
        common = [a if isinstance(a, Future) else next(sent) for a in self.shared]
        self._owned = [f for f, a in zip(common, self.shared) if f is not a]
        self._scattered = {}
        for w in workers:
            copies = [
                client.submit(_same, a, pure=False, workers=[w], allow_other_workers=True)
                if isinstance(a, Future)
                else a
                for a in common
            ]
            self._owned += [f for f, a in zip(copies, common) if f is not a]
            self._scattered[w] = copies

    def close(self) -> None:
        """Release the scattered data (the runner scatters again if used later)."""
        if self._scattered is not None:
            for f in self._owned:
                f.release()
            self._scattered, self._owned = None, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _same(obj):
    """``obj``: a task that copies a future's data to the worker it runs on."""
    return obj


def _resolve_client(client):
    """The Dask client the units run on, or None to run them in this process."""
    if isinstance(client, str):
        if client != "local":
            raise ValueError(f"client must be a distributed.Client, 'local' or None, got {client!r}")
        return None
    if client is None:  # the configured client, else the current one; never start a cluster here
        from dmlr.config import get_config
        from dmlr.distributed.placement import current_client

        return get_config()["client"] or current_client()
    return client


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


def _record(params: dict, fold_outputs: list, scoring: str) -> dict:
    fold_scores = [_score(values, scoring) for values, _, _ in fold_outputs]
    record = {
        "params": dict(params),
        "mean_score": float(np.mean(fold_scores)),
        "std_score": float(np.std(fold_scores)),
        "fold_scores": fold_scores,
    }
    for name in fold_outputs[0][0]:
        record[f"mean_{name}"] = float(np.mean([values[name] for values, _, _ in fold_outputs]))
    record["fold_n_iter"] = [it for _, it, _ in fold_outputs]
    record["mean_n_iter"] = float(np.mean(record["fold_n_iter"]))
    record["mean_fit_seconds"] = float(np.mean([s for _, _, s in fold_outputs]))
    return record


def _key(params: dict, axes: dict) -> tuple:
    return tuple(params[name] for name in axes)


def _check_axes(axes: dict) -> dict:
    if not axes:
        raise ValueError("the parameter grid is empty: give at least one parameter with a list of values")
    checked = {}
    for name, values in axes.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            raise ValueError(f"grid values for {name!r} must be a list of candidates, got {values!r}")
        values = list(values)
        if not values:
            raise ValueError(f"grid values for {name!r} are empty; give at least one value")
        if len(set(map(repr, values))) != len(values):
            raise ValueError(f"grid values for {name!r} repeat a value: {values}")
        checked[name] = values
    return checked


def _check_cv(cv, n: int, seed) -> list:
    if isinstance(cv, (int, np.integer)) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"cv must be at least 2 folds, got cv={cv}")
        if cv > n:
            raise ValueError(f"cv={cv} folds is more than the {n} training rows")
        return kfold_indices(n, int(cv), seed)
    splits = [(np.asarray(tr, dtype=np.int64), np.asarray(va, dtype=np.int64)) for tr, va in cv]
    if len(splits) < 1:
        raise ValueError("cv gave no (train_idx, val_idx) splits")
    for tr, va in splits:
        if tr.size == 0 or va.size == 0 or min(tr.min(), va.min()) < 0 or max(tr.max(), va.max()) >= n:
            raise ValueError(f"every cv split needs non-empty train and validation indices in [0, {n})")
    return splits


def _materialize(X, Y):
    """NumPy / CSR copies of the training data (dask inputs computed)."""
    if is_dask(X) or is_dask(Y):
        import dask

        X, Y = dask.compute(row_parts(X), row_parts(Y))
    return stack_rows(X, Y)


def row_parts(A):
    """The row chunks of dask ``A`` as a list of delayed blocks, for :func:`stack_rows`: the
    chunks' task graph, without dask's own concatenation. Any other ``A`` as it is."""
    if not is_dask(A):
        return A
    if len(A.chunks[1]) > 1:
        A = A.rechunk({1: -1})
    return list(A.to_delayed().ravel())


def stack_rows(X, Y):
    """(X, Y) as NumPy / CSR (fast row selection by index): X a matrix or a list of row blocks
    (:func:`row_parts`), Y too.

    Sparse blocks are converted to CSR block by block and stacked by scipy: pydata sparse's
    own concatenation (what dask's would call) compiles Numba code at its first call in a
    process, seconds for a one-off copy on every fresh worker.
    """
    if isinstance(X, list):
        X = sp.vstack([as_csr(p) for p in X], format="csr") if is_sparse(X[0]) else np.concatenate(X)
    X = as_csr(X) if is_sparse(X) else np.asarray(X)
    Y = np.concatenate([np.asarray(p) for p in Y]) if isinstance(Y, list) else np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"X and Y must be 2-D, got shapes {X.shape} and {Y.shape}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    return X, Y


def _as_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)
