"""Hyper-parameter search by K-fold cross-validation, parallel on a Dask cluster.

:func:`grid_search_cv` evaluates every point of a parameter grid on K
train/validation splits of the training set (:func:`kfold_indices`). The
grid's values of one parameter (``path_param``: by default RBRL's
``alpha_nuclear``, for models with ``warm_start``) form a *regularization path*,
fitted from the largest to the smallest value with ``warm_start=True`` on each
fold under each setting of the others: each fit starts from the previous
solution on the same fold, and is evaluated on the validation fold.

Every search of dmlr (this one, :func:`dmlr.tuning.search` and
:func:`dmlr.models.omf.cross_validate_omf`) runs on one engine,
:mod:`dmlr.paths`: its fits are placed by :class:`~dmlr.paths.UnitRunner` (as
independent Dask tasks spread over the workers, each beside its own copy of
the data, or on this process's threads; data too large for one process take
the chunked path), it reports through :class:`dmlr.progress.SearchProgress`
and returns a :class:`SearchResult`.

Results are aggregated in a fixed order (grid point, then fold), and every
fit in memory runs with single-threaded BLAS and the in-process backend, so
the recorded scores do not depend on the number of workers, on which worker
ran a fit or on the order fits completed in.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dmlr.config import config_context
from dmlr.data.arrays import is_dask
from dmlr.metrics import METRIC_NAMES
from dmlr.paths import (
    PathContext,
    UnitRunner,
    cold_start,
    materialize,
    resolve_client,
    run_path,
    search_fit_params,
    stage_data,
)
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

#: :func:`grid_search_cv` fits the settings of its grid in groups of about this many lanes
#: (setting x fold) per unit that can run at once (``UnitRunner.slots``):
#: enough fits per path value to keep every slot busy, and no more fitted models held
#: between path values than a few rounds' worth.
LANES_PER_SLOT = 4

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

    The same engine as :func:`dmlr.tuning.search` (:func:`dmlr.paths.run_path`, fits
    placed by :class:`~dmlr.paths.UnitRunner`, :class:`SearchResult`,
    :class:`dmlr.progress.SearchProgress`), over every point of a grid instead of an
    adaptive path: the grid's path values are fitted in lock-step over every
    (setting, fold) lane, each round of fits running in parallel.

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
        Training features. Dask arrays that fit comfortably in one process
        are loaded once where the fits run (every fit reads random rows of
        the whole set); larger ones take the chunked path
        (:func:`dmlr.paths.stage_data`).
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
        0: quiet. 1: a line per finished fit (fits done, time left) once
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
    heartbeats), the fits not yet finished are submitted again with the
    data scattered anew, up to
    :data:`dmlr.distributed.chunks.MAX_RECOVERIES` times (a RuntimeWarning
    says so); finished fits are kept.

    Each fit in memory runs with single-threaded BLAS (the parallelism is
    across fits) so that scores are bit-identical in-process and on any
    number of workers.
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
    if not (is_dask(X) or is_dask(Y)):
        X, Y = materialize(X, Y)  # NumPy / CSR, row counts checked
    elif X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    n = int(X.shape[0])
    splits = _check_cv(cv, n, seed)
    metric_names = _needed_metrics(scoring)

    # The settings of the non-path params, and the path's values largest first.
    path = path_param if path_param is not None and path_param in axes else None
    other_axes = {k: v for k, v in axes.items() if k != path}
    settings = param_grid(other_axes) if other_axes else [{}]
    path_values = sorted(axes[path], reverse=True) if path is not None else [None]
    fit_params = search_fit_params(estimator, metric_names, warm=path is not None)

    report = SearchProgress(verbose, (), [n], len(splits), start, staged=False)
    result = SearchResult(best_params={}, results=[], scoring=scoring, n_splits=len(splits), path_param=path)
    n_total = len(settings) * len(splits) * len(path_values)
    per_point: dict[tuple, list] = {}  # grid point -> its folds' FitOutcome
    warm: list[int] = []  # iterations of the fits that started from a path neighbour

    def run_group(ctx, group):
        lanes = [(setting, f) for setting in group for f in range(len(splits))]

        def on_value(value, outs):
            for (setting, f), out in zip(lanes, outs):
                params = {**setting, **({path: value} if path is not None else {})}
                per_point.setdefault(_key(params, axes), [None] * len(splits))[f] = out
            if path is not None and value != path_values[0]:
                warm.extend(out.n_iter for out in outs)
            return False

        run_path(ctx, path, path_values, lanes, cold_start(len(lanes)), on_value, lambda: report.fit_done(n_total))

    units_client = resolve_client(client)
    X_s, Y_s, chunked, nbytes = stage_data(X, Y, None, units_client, {})
    with UnitRunner((X_s, Y_s, splits), client, n_jobs=n_jobs) as runner:
        ctx = PathContext(
            estimator, fit_params, X_s, Y_s, splits, metric_names, not chunked, runner, None, result, n, nbytes
        )
        # Settings in groups of a few rounds' worth of fits: the lanes of a group hold their
        # models between path values, so a large grid's memory stays that of its fits in flight.
        per_group = -(-LANES_PER_SLOT * runner.slots // len(splits))  # ceil: at least that many lanes
        for i in range(0, len(settings), per_group):
            run_group(ctx, settings[i : i + per_group])
        backend = "chunks" if chunked else runner.backend
    # the refit reads the rows the fits read where they are in this process
    refit_data = (X_s, Y_s) if backend == "local" else (X, Y)

    # Aggregate in grid order (param_grid(axes)), folds in order.
    records = [_record(point, per_point[_key(point, axes)], scoring) for point in param_grid(axes)]

    # Warm-started fits (all but the first value of each path) that passed the solver's
    # first stopping test: the symptom of a stop short of the optimum (see Notes).
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
        best_estimator = type(estimator)(**{**estimator.get_params(), **best_params})
        on_cluster = client is not None and not isinstance(client, str)
        with config_context(**({"client": client} if on_cluster else {})):
            best_estimator.fit(*refit_data)
        refit_seconds = time.perf_counter() - t
    result.results = records
    result.best_params = best_params
    result.best_score = records[best_index]["mean_score"]
    result.best_index = best_index
    result.best_estimator = best_estimator
    result.greater_is_better = greater
    result.seconds = seconds
    result.refit_seconds = refit_seconds
    result.backend = backend
    result.n_warm_fits = len(warm)
    result.n_warm_first_test_stops = n_short
    return result


# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


def _record(params: dict, fold_outputs: list, scoring: str) -> dict:
    """The record of one grid point from its folds' :class:`~dmlr.paths.FitOutcome`."""
    fold_scores = [_score(out.metrics, scoring) for out in fold_outputs]
    record = {
        "params": dict(params),
        "mean_score": float(np.mean(fold_scores)),
        "std_score": float(np.std(fold_scores)),
        "fold_scores": fold_scores,
    }
    for name in fold_outputs[0].metrics:
        record[f"mean_{name}"] = float(np.mean([out.metrics[name] for out in fold_outputs]))
    record["fold_n_iter"] = [out.n_iter for out in fold_outputs]
    record["mean_n_iter"] = float(np.mean(record["fold_n_iter"]))
    record["mean_fit_seconds"] = float(np.mean([out.seconds for out in fold_outputs]))
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


def _as_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)
