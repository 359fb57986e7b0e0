"""Hyper-parameter search by K-fold cross-validation, parallel on a Dask cluster.

:func:`grid_search_cv` evaluates every point of a parameter grid on K
train/validation splits of the training set (:func:`kfold_indices`). The
unit of work is one fold and one *regularization path*: all grid values of
one parameter (``path_param``: by default RBRL's ``alpha_nuclear``, for models
with ``warm_start``) for one setting of the others. A unit fits the path from the largest to the smallest value with
``warm_start=True``, so each fit starts from the previous solution on the
same fold, and evaluates every fit on the validation fold. Units run as
independent Dask tasks on the data scattered once to the workers, or one
after the other in this process when there is no cluster.

Results are aggregated in a fixed order (grid point, then fold), and every
unit runs with single-threaded BLAS in a fresh estimator with the
in-process backend, so the recorded scores do not depend on the number of
workers, on which worker ran a unit or on the order units completed in.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from dmlr.config import config_context
from dmlr.data.arrays import is_sparse
from dmlr.metrics import LABEL_METRICS, METRIC_NAMES, multilabel_metrics

__all__ = [
    "GridSearchResult",
    "LOSS_METRICS",
    "PAPER_GRID",
    "PAPER_METRICS",
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

#: Name of the default scoring rule (see :func:`grid_search_cv`).
PAPER_MEAN = "paper_mean"


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
class GridSearchResult:
    """Outcome of :func:`grid_search_cv`.

    Attributes
    ----------
    results : list of dict
        One record per grid point, in grid order (:func:`param_grid`):
        ``params`` (dict), ``mean_score`` and ``std_score`` (of the scoring
        metric over the folds, population std), ``fold_scores`` (list,
        fold order), ``mean_<metric>`` for each of :data:`PAPER_METRICS`
        (and the scoring metric), ``fold_n_iter`` and ``mean_n_iter``
        (solver iterations per fit) and ``mean_fit_seconds``.
    best_params : dict
        Parameters of the best grid point (first in grid order on ties).
    best_score : float
        Its ``mean_score``, in the scoring metric's own units.
    best_index : int
        Its position in ``results``.
    best_estimator : estimator or None
        A clone of the estimator with ``best_params``, fitted on all the
        training data (None when ``refit=False``).
    scoring : str
    greater_is_better : bool
        Orientation of ``scoring``.
    n_splits : int
    n_fits : int
        Cross-validation fits (grid points x folds; the refit not counted).
    seconds : float
        Wall time of the cross-validation (the refit not included).
    refit_seconds : float
    path_param : str or None
        The warm-started path parameter (None: every fit started from zero).
    backend : {"local", "dask"}
        Where the units ran: in this process or on the Dask cluster.
    n_warm_fits : int
        Fits that started from the previous path value's solution.
    n_warm_first_test_stops : int
        Of those, fits that stopped at the solver's first stopping test
        (``n_iter_ <= 2``), possibly short of their optimum (see the Notes
        of :func:`grid_search_cv`).
    """

    results: list
    best_params: dict
    best_score: float
    best_index: int
    best_estimator: object
    scoring: str
    greater_is_better: bool
    n_splits: int
    n_fits: int
    seconds: float
    refit_seconds: float = 0.0
    path_param: str | None = None
    backend: str = field(default="local")
    n_warm_fits: int = 0
    n_warm_first_test_stops: int = 0

    def best_params_for(self, metric: str) -> dict:
        """Parameters of the best grid point by one of the recorded metrics.

        Every record carries the fold mean of each of :data:`PAPER_METRICS`,
        so one search also answers "which point is best for subset accuracy"
        without another cross-validation (the protocol of tables that report
        each metric at its own best hyper-parameters).

        Parameters
        ----------
        metric : str
            A metric with a ``mean_<metric>`` entry in the records (one of
            :data:`PAPER_METRICS`, or the search's scoring metric).

        Returns
        -------
        dict
            The best point's parameters (first in grid order on ties).
        """
        recorded = [m for m in METRIC_NAMES if self.results and f"mean_{m}" in self.results[0]]
        if metric not in recorded:
            raise ValueError(f"the search did not record {metric!r}; recorded metrics: {recorded}")
        best = _ranking(self.results, _greater_is_better(metric), key=f"mean_{metric}")[0]
        if math.isnan(self.results[best][f"mean_{metric}"]):
            raise ValueError(f"every grid point scored nan in {metric!r}")
        return dict(self.results[best]["params"])

    def top(self, k: int = 5) -> list[dict]:
        """The ``k`` best records, best first (ties in grid order)."""
        order = _ranking(self.results, self.greater_is_better)
        return [self.results[i] for i in order[:k]]

    def table(self, k: int = 5) -> str:
        """The ``k`` best records as a fixed-width text table."""
        rows = self.top(k)
        names = list(rows[0]["params"]) if rows else []
        head = ["rank", *names, f"{self.scoring}", "std", *(m for m in PAPER_METRICS), "iters"]
        lines = ["  ".join(f"{h:>12}" for h in head)]
        for rank, r in enumerate(rows, 1):
            cells = [
                f"{rank:>12d}",
                *(f"{r['params'][p]:>12.4g}" for p in names),
                f"{r['mean_score']:>12.5f}",
                f"{r['std_score']:>12.5f}",
                *(f"{r['mean_' + m]:>12.5f}" for m in PAPER_METRICS),
                f"{r['mean_n_iter']:>12.1f}",
            ]
            lines.append("  ".join(cells))
        return "\n".join(lines)


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
    scoring: str = PAPER_MEAN,
    seed: int | None = 0,
    client=None,
    refit: bool = True,
    path_param: str | None = "auto",
    verbose: int = 0,
) -> GridSearchResult:
    """Exhaustive grid search with K-fold cross-validation and warm-started paths.

    The RBRL paper (Wu et al. 2020, Sec. 5.2) chooses the hyper-parameters
    by fivefold cross-validation on the training set but does not say which
    metric it maximizes. The default ``scoring="paper_mean"`` is therefore
    the mean of the six metrics the paper reports, each oriented so that
    larger is better: ``1 - hamming_loss``, ``subset_accuracy``,
    ``f1_example``, ``1 - ranking_loss``, ``1 - coverage`` (coverage being
    divided by the number of labels, see :mod:`dmlr.metrics`) and
    ``average_precision``.

    Parameters
    ----------
    estimator : estimator
        Any dmlr estimator. It is cloned, never modified; its other
        parameters (``max_iter``, ``tol``, ``step_rule``, ...) are used for
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
    scoring : str
        ``"paper_mean"`` (default, see above) or a name in
        :data:`dmlr.metrics.METRIC_NAMES`. The losses
        (:data:`~dmlr.metrics.LOSS_METRICS`: hamming_loss, ranking_loss, one_error,
        coverage) are minimized, every other metric maximized.
    seed : int or None
        Seed of the fold permutation.
    client : distributed.Client, "local" or None
        Cluster to run the units on. None: the current Dask client if there
        is one, else run sequentially in this process (no cluster is
        started). "local": sequentially in this process.
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
        Print a progress line every ``verbose`` completed units (0: quiet).

    Returns
    -------
    GridSearchResult

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

    progress = _progress_printer(len(units), len(path_values), verbose, start) if verbose else None
    unit_args = [(type(estimator), base_params, settings[s], path, path_values, f, metric_names) for s, f in units]
    with UnitRunner((X, Y, splits), client) as runner:
        backend = runner.backend
        outputs = runner.map(_fit_path, unit_args, progress)

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
            f"{path!r} value; use step_rule='spectral' or 'backtracking' (whose gradient_tol stops "
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
    return GridSearchResult(
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
    with config_context(**UNIT_CONFIG), threadpool_limits(limits=1, user_api="blas"):
        for value in path_values:
            if path is not None:
                est.set_params(**{path: value})
            t = time.perf_counter()
            est.fit(X_tr, Y_tr)
            S = est.decision_function(X_val)
            values = multilabel_metrics(Y_val, S, est.labels_from_scores(S), metrics=metric_names)
            out.append((values, int(getattr(est, "n_iter_", 0)), time.perf_counter() - t))
    return out


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
    once, at the first :meth:`map`, and kept there for later calls; the units
    run as independent tasks. Without one they run in ``n_jobs`` processes
    (joblib's loky pool, which scikit-learn's own searches use; scikit-learn
    depends on joblib) or one after the other in this process.

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
    n_jobs : int
        Processes without a cluster (1: this process).
    """

    def __init__(self, shared: tuple, client=None, n_jobs: int = 1):
        self.shared = tuple(shared)
        self.client = _resolve_client(client)
        self.n_jobs = int(n_jobs)
        self._scattered = None
        self._owned: list = []

    @property
    def backend(self) -> str:
        return "local" if self.client is None else "dask"

    def map(self, fn, units: list, progress=None) -> list:
        """``[fn(*shared, *unit) for unit in units]``; ``progress(i, result)`` as each finishes."""
        if self.client is not None:
            return self._map_on_cluster(fn, units, progress)
        if self.n_jobs > 1 and len(units) > 1:
            from joblib import Parallel, delayed

            jobs = Parallel(n_jobs=min(self.n_jobs, len(units)), return_as="generator")
            results = jobs(delayed(fn)(*self.shared, *unit) for unit in units)
        else:
            results = (fn(*self.shared, *unit) for unit in units)
        outputs = []
        for i, out in enumerate(results):
            outputs.append(out)
            if progress is not None:
                progress(i, out)
        return outputs

    def _map_on_cluster(self, fn, units, progress):
        from distributed import as_completed
        from distributed.client import FutureCancelledError

        from dmlr.distributed.chunks import LOST_WORKER_WAIT, MAX_RECOVERIES

        client = self.client
        outputs = [None] * len(units)
        for attempt in range(MAX_RECOVERIES + 1):
            todo = [i for i, out in enumerate(outputs) if out is None]
            if self._scattered is None:
                # Scatter to every worker: each of the units reads random rows of the whole set.
                # Futures (data a worker computed from the chunks) are passed as they are.
                from distributed import Future

                client.wait_for_workers(1, timeout=LOST_WORKER_WAIT)
                here = [a for a in self.shared if not isinstance(a, Future)]
                sent = iter(client.scatter(here, broadcast=True, hash=False) if here else [])
                self._scattered = [a if isinstance(a, Future) else next(sent) for a in self.shared]
                self._owned = [f for f, a in zip(self._scattered, self.shared) if f is not a]
            futures = {client.submit(fn, *self._scattered, *units[i], pure=False): i for i in todo}
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


def _progress_printer(n_units: int, fits_per_unit: int, every: int, start: float):
    done = [0]

    def progress(_index=None, _result=None):
        done[0] += 1
        if done[0] % every == 0 or done[0] == n_units:
            elapsed = time.perf_counter() - start
            eta = elapsed / done[0] * (n_units - done[0])
            print(
                f"  units {done[0]:5d}/{n_units} ({done[0] * fits_per_unit} fits)  {elapsed:8.1f} s elapsed, "
                f"~{eta:.0f} s to go",
                flush=True,
            )

    return progress


def _resolve_client(client):
    """The Dask client the units run on, or None to run them in this process."""
    if isinstance(client, str):
        if client != "local":
            raise ValueError(f"client must be a distributed.Client, 'local' or None, got {client!r}")
        return None
    if client is None:  # the current client; never start a cluster here
        from dmlr.distributed.placement import current_client

        return current_client()
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
    if hasattr(X, "dask") and is_sparse(X):
        import dask

        # chunk by chunk to CSR, then stacked by scipy: pydata sparse's own concatenation
        # compiles Numba code at its first call, seconds for a one-off copy
        parts = dask.compute(*X.to_delayed().ravel())
        X = sp.vstack([sp.csr_matrix(p.to_scipy_sparse() if hasattr(p, "to_scipy_sparse") else p) for p in parts])
    elif hasattr(X, "dask"):
        X = X.compute()
    if hasattr(Y, "dask"):
        Y = Y.compute()
    if is_sparse(X):
        # CSR: fast row selection by index (COO/CSC or pydata-sparse chunks are converted).
        X = sp.csr_matrix(X.to_scipy_sparse() if hasattr(X, "to_scipy_sparse") else X)
    else:
        X = np.asarray(X)
    Y = np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"X and Y must be 2-D, got shapes {X.shape} and {Y.shape}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    return X, Y


def _as_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)
