"""Automatic hyper-parameters: K-fold cross-validation along warm-started paths.

:func:`search` chooses a model's regularization by K-fold cross-validation
on the training rows, one parameter after the other (each model class declares
its parameters and their starting grids, ``_search_space``: :func:`search_space`):

* **Paths** (on the search engine, :mod:`dmlr.paths`). One parameter's
  grid is fitted on every fold in lock-step, from the most regularized value
  to the least with ``warm_start`` (where the model has it): each fit starts
  from the fold's previous solution (from the third value on, moved along the
  secant of the fold's last two: :func:`dmlr.paths.predict_path_start`), and
  the most regularized fits, the cheapest, come first.
* **Early abandonment.** A path stops once its mean validation score has
  failed to beat its best for ``patience`` consecutive values, or at once
  when a value scores worse than the best one on every fold: the least
  regularized fits, the slowest, are skipped when they are clearly worse.
  A value counts only where every fold reached it.
* **Grids that widen.** Grids are log-spaced in half decades, scaled by the
  number of training rows where the model's loss is a sum over rows (its
  regularization then keeps its meaning as the data grow). When the best
  value lies on the grid's edge, the grid grows by ``widen_by`` values
  beyond that edge and the new values are fitted (up to ``max_widen``
  times).
* **Stages over rows.** Training sets of :data:`HALVING_MIN_ROWS` rows or more
  are searched by successive halving over rows on :data:`HALVING_FOLDS` folds
  (:func:`stage_rows`): the whole path on a seeded subsample, then, on nested
  subsamples :data:`HALVING_FACTOR` times larger, a walk from the previous
  stage's choice, carried as it is, while the score improves. The few fits of
  the last stage settle where the optimum moved as the rows grew.
* **Where it runs** (:func:`dmlr.paths.stage_data`). Fits whose rows fit
  comfortably in one process run whole there, spread over the workers (or
  this process's threads), with no round trip per iteration; larger rows take
  the chunked path, each fit over a group of workers, disjoint groups running
  different fits at once, with the blocks (hence the scores) of a fit over
  the whole cluster.
* **Resume.** With ``checkpoint=DIR`` every finished fit is written there
  (:class:`dmlr.paths.UnitStore`: JSON and a dmlr model file, atomically);
  ``resume=True`` reuses them, so a search interrupted by a killed client ends
  at the choice of an uninterrupted one.

Fits are deterministic (seeded folds, fixed summation order), so the choice
does not depend on the number of workers or the order fits finish in.
"""

from __future__ import annotations

import copy
import json
import math
import time
from typing import NamedTuple

import numpy as np

from dmlr.metrics import METRIC_NAMES
from dmlr.model_selection import (
    DEFAULT_SCORING,
    LOSS_METRICS,
    SearchResult,
    default_scoring,
    kfold_indices,
)
from dmlr.models.base import Axis
from dmlr.paths import (
    PathContext,
    PathEnd,
    UnitRunner,
    UnitStore,
    cold_start,
    resolve_client,
    run_path,
    search_fit_params,
    stage_data,
)
from dmlr.progress import SearchProgress as _Progress

__all__ = ["Axis", "SearchResult", "default_scoring", "search", "search_space", "stage_rows"]

#: Training sets of at least this many rows are searched in stages over rows (see the module).
#: Below it the full path on every fold costs several final fits, and pays: on the staged sets
#: of 4,000 to 5,000 rows (bibtex, corel5k), one 2-fold stage of 4,096 rows chose values with a
#: worse test ranking loss or average precision. Above it that search costs many final fits
#: (``benchmarks/time_to_model.py``).
HALVING_MIN_ROWS = 10_000
#: Rows of a staged search's first stage: the whole path.
HALVING_FIRST_ROWS = 4_096
#: Rows grow by this factor from one stage to the next (the last stage has all the rows).
HALVING_FACTOR = 4
#: Rows of a staged search's last stage, as a fraction of the training rows (at least
#: :data:`HALVING_FIRST_ROWS`). The value chosen there is carried to the final fit as it is, as
#: it is carried from stage to stage. A last stage on all the rows cost about two final fits
#: (its 2-fold walk: three values, the less regularized ones the slowest to fit); on a
#: quarter, about half of one (``benchmarks/time_to_model.py`` prints both sides).
HALVING_LAST_FRACTION = 0.25
#: Folds of a staged search: thousands of validation rows per fold already.
HALVING_FOLDS = 2
#: Largest number of values a later stage walks from the previous stage's choice.
HALVING_MAX_STEPS = 4


#: Default ``tol`` of the cross-validation fits (:func:`search`'s ``tol``): a fit whose
#: own ``tol`` is tighter stops at this one inside the search, and the refit on the whole
#: training split uses the estimator's own. A validation score needs fewer digits than the
#: model: 1e-5 chose the values RBRL's default 1e-6 chose, in fewer iterations
#: (``benchmarks/search_settings.py``). Looser is not safe: warm-started fits along a path
#: then stop short of their optimum where the objective moves little (the relative-change
#: test), which acts as extra regularization and moves the choice.
SEARCH_TOL = 1e-5

#: Default ``solver`` of the cross-validation fits (:func:`search`'s ``solver``) of a
#: model that has one: the quasi-Newton method (:mod:`dmlr.solvers.lbfgs`), which took a
#: fraction of the search's time at the model's own settings for the same choices, or
#: neighbours on a flat validation curve (``benchmarks/search_settings.py``). It does not
#: checkpoint a fit; the search checkpoints whole units instead, and the refit uses the
#: model's own rule.
SEARCH_SOLVER = "lbfgs"

SEARCH_FORMAT_VERSION = 4  # 4: units record their metrics, iterations and seconds (dmlr.paths.UnitStore)


def search_space(estimator) -> tuple:
    """The :class:`~dmlr.models.base.Axis` list :func:`search` tunes for ``estimator``: what its
    class declares (``_search_space``, inherited by subclasses; empty: none)."""
    return tuple(getattr(type(estimator), "_search_space", ()))


def searchable(estimator, params) -> list[str]:
    """``params``, names of parameters, in the order of ``estimator``'s search space
    (:func:`search_space`); a ``ValueError`` for a name the space lacks."""
    known = [a.name for a in search_space(estimator)]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"{type(estimator).__name__} cannot search {unknown}; its search space is {known}")
    return [name for name in known if name in params]


def search(
    estimator,
    X,
    Y,
    *,
    params=None,
    cv: int = 5,
    scoring: str = DEFAULT_SCORING,
    seed: int | None = 0,
    client=None,
    patience: int | None = 1,
    tol: float | None = SEARCH_TOL,
    solver: str | None = SEARCH_SOLVER,
    widen_by: int = 2,
    max_widen: int = 3,
    n_jobs: int | None = None,
    checkpoint=None,
    resume: bool = False,
    halving="auto",
    verbose: int = 0,
) -> SearchResult:
    """Choose ``estimator``'s regularization by K-fold cross-validation (see the module).

    Parameters
    ----------
    estimator : dmlr estimator
        Not modified; its other parameters are used for every fit.
    X : ndarray, scipy.sparse matrix or dask array, shape (n, d)
    Y : ndarray or dask array, shape (n, n_labels), 0/1
    params : list of str, optional
        The parameters of :func:`search_space` to tune, searched in the
        space's order (default: its ``default`` axes); the others keep the
        estimator's values.
    cv : int
        Number of shuffled folds (:func:`dmlr.model_selection.kfold_indices`).
    scoring : str
        A name in :data:`dmlr.metrics.METRIC_NAMES`; losses are minimized.
    seed : int or None
        Seed of the folds.
    client : distributed.Client, "local" or None
        Where in-memory units run (None: the configured client,
        ``dmlr.config_context(client=...)``, else the current one if there is
        one, else this process; "local": this process).
    patience : int or None
        Early abandonment: a path stops once its mean validation score (over
        the folds) has failed to beat its best for ``patience`` consecutive
        values, or as soon as a value scores worse than the best value on
        every fold (None: every path runs to its end). The default, 1, stops
        at the first value past the best: validation curves along a path turn
        once (``benchmarks/auto_vs_peers.py``'s sets have no second value past
        the best that scored better).
    tol : float or None
        Stopping tolerance of the cross-validation fits of an estimator that
        has a ``tol`` parameter tighter than this (None: the estimator's own);
        see :data:`SEARCH_TOL`.
    solver : str or None
        Step rule of the cross-validation fits of an estimator that has a
        ``solver`` parameter (None: the estimator's own); see
        :data:`SEARCH_SOLVER`. The refit uses the estimator's own.
    widen_by, max_widen : int
        Values added beyond an edge that holds the best, and how often.
    n_jobs : int or None
        Without a cluster, threads running in-memory units in parallel (a unit's
        work is BLAS calls and Numba kernels, which release the GIL: no
        process start-up or copies of the data); None: one per core, 1: one
        unit at a time in this thread.
    checkpoint : str or Path, optional
        Directory recording finished units (scores as JSON, fitted models as
        dmlr model files: no pickle).
    resume : bool
        Reuse the units recorded in ``checkpoint``. Without it, an existing
        checkpoint raises ``FileExistsError``.
    halving : bool or "auto"
        Search in stages over rows (see the module); "auto": for training
        sets of at least :data:`HALVING_MIN_ROWS` rows, when every searched
        parameter is scaled per row.
    verbose : int
        0: quiet. 1 (what :func:`dmlr.fit` passes by default): a line per
        path value with the stage, the value's place among those planned,
        the folds, the best so far and an estimate of the time left, shown
        once the search has run :data:`dmlr.progress.PROGRESS_AFTER_SECONDS` (a short
        search prints nothing); one updating line in a notebook.
        2: every line from the start.

    Returns
    -------
    dmlr.model_selection.SearchResult

    Raises
    ------
    ValueError
        On a parameter the estimator's search space lacks, an unknown
        scoring, or a checkpoint written for another search.
    """
    start = time.perf_counter()
    searchable(estimator, params or ())
    if scoring not in METRIC_NAMES:
        raise ValueError(f"unknown scoring {scoring!r}; use one of {list(METRIC_NAMES)}")
    if halving not in (True, False, "auto"):
        raise ValueError(f"halving must be True, False or 'auto', got {halving!r}")
    space = [a for a in search_space(estimator) if (a.default if params is None else a.name in params)]

    n = int(X.shape[0])
    halve = halving is True or (halving == "auto" and n >= HALVING_MIN_ROWS)
    sizes = stage_rows(n) if halve and all(a.per_row for a in space) else [n]
    base = estimator.get_params()
    cv_params = {"tol": float(tol)} if tol is not None and "tol" in base and base["tol"] < tol else {}
    if solver is not None and "solver" in base:
        cv_params["solver"] = solver
    store = (
        UnitStore(checkpoint, resume, _fingerprint(estimator, X, Y, cv, seed, scoring, cv_params, sizes))
        if checkpoint
        else None
    )
    staged = sizes != [n]
    folds = min(int(cv), HALVING_FOLDS) if staged else int(cv)
    result = SearchResult(
        best_params={},
        results=[],
        scoring=scoring,
        n_splits=folds,
        n_rows=sizes,
        greater_is_better=scoring not in LOSS_METRICS,
    )
    order = np.random.default_rng(seed).permutation(n) if staged else None
    units_client = resolve_client(client)
    loaded: dict = {}  # the training rows where the units read them, loaded once (stage_data)
    chosen: dict[str, float] = {}  # axis -> chosen value, carried to the next stage as it is
    report = _Progress(verbose, space, sizes, folds, start, staged=staged)
    fit_params = search_fit_params(estimator, [scoring], warm=True, **cv_params)
    for stage, m in enumerate(sizes):
        rows = None if m == n else np.sort(order[:m])
        splits = kfold_indices(m, folds, seed)
        n_train = min(len(tr) for tr, _ in splits)
        X_s, Y_s, chunked, nbytes = stage_data(X, Y, rows, units_client, loaded)
        runner = UnitRunner((X_s, Y_s, splits), client, n_jobs=n_jobs)
        result.backend = "chunks" if chunked else runner.backend
        paths = PathContext(
            estimator, fit_params, X_s, Y_s, splits, (scoring,), not chunked, runner, store, result, m, nbytes
        )
        ctx = _Context(paths, scoring, report)
        try:
            for axis in space:
                setting = {a.name: chosen[a.name] for a in space if a.name in chosen and a.name != axis.name}
                report.begin(stage, axis)
                if stage == 0:
                    _search_axis(ctx, axis, n_train, patience, widen_by, max_widen, staged)
                else:
                    _refine_axis(ctx, axis, n_train, setting, _exponent(axis, chosen[axis.name], n_train))
                best = chosen[axis.name] = result.best_params[axis.name]
                if not (staged and stage == len(sizes) - 1):  # the last stage's: below, with the vertex
                    report.end(stage, axis, best, _mean_at(result, axis.name, best, m))
        finally:
            runner.close()
    if staged:  # between the grid's values, where the last stage's scores say the optimum is
        last = [r for r in result.results if r["n_rows"] == sizes[-1]]
        for axis in space:
            curve = {r["value"]: r["mean_score"] for r in last if r["param"] == axis.name}
            fitted = result.best_params[axis.name]
            result.best_params[axis.name] = _vertex(curve, fitted, axis.step, scoring)
            report.end(len(sizes) - 1, axis, result.best_params[axis.name], curve[fitted], fitted=fitted)
    chosen_at = [
        i
        for i, r in enumerate(result.results)
        if r["n_rows"] == sizes[-1] and all(r["params"].get(k) == v for k, v in result.best_params.items())
    ]
    if chosen_at:  # else the choice lies between the last stage's values
        result.best_index = chosen_at[-1]
        result.best_score = result.results[chosen_at[-1]]["mean_score"]
    result.seconds = time.perf_counter() - start
    return result


def stage_rows(n: int) -> list[int]:
    """Rows of each stage of a staged search of ``n`` training rows: :data:`HALVING_FIRST_ROWS`,
    times :data:`HALVING_FACTOR` at each stage, up to :data:`HALVING_LAST_FRACTION` of ``n``
    (a stage within a factor of 2 of that is merged into the last)."""
    last = max(min(int(n), HALVING_FIRST_ROWS), int(round(HALVING_LAST_FRACTION * n)))
    sizes = [min(int(n), HALVING_FIRST_ROWS)]
    while sizes[-1] < last:
        nxt = sizes[-1] * HALVING_FACTOR
        sizes.append(last if 2 * nxt > last else nxt)
    if len(sizes) > 1 and sizes[-1] < 2 * sizes[-2]:
        del sizes[-2]  # the whole path on the last stage costs about what two stages would
    return sizes


def _vertex(curve: dict, best: float, step: float, scoring: str) -> float:
    """The optimum of the parabola through ``best`` and its two neighbours on the grid (in
    log10 of the value), within half a step of ``best``; ``best`` when a neighbour is missing
    or the parabola does not turn towards the optimum there.

    A staged search's choice is carried to the final fit as a number, not a grid index, so
    the last stage's grid need not bound its resolution: where the validation curve is
    sharp, a quarter decade off its optimum costs percents of ranking loss.
    """
    sign = -1.0 if scoring in LOSS_METRICS else 1.0  # maximize sign * score
    near = {round(math.log10(v / best) / step): sign * s for v, s in curve.items()}
    if not {-1, 0, 1} <= set(near) or any(math.isnan(near[k]) for k in (-1, 0, 1)):
        return best
    down, mid, up = near[-1], near[0], near[1]
    bend = down - 2.0 * mid + up
    if bend >= 0:  # not a maximum of sign * score
        return best
    shift = 0.5 * step * (down - up) / bend
    return float(best * 10.0 ** max(-step / 2, min(step / 2, shift)))


def _exponent(axis: Axis, value: float, n_train: int) -> float:
    """The grid exponent of ``value`` (``value = scale * 10**e``, see :meth:`Axis.values`)."""
    scale = float(n_train) if axis.per_row else 1.0
    return round(math.log10(value / scale) / (axis.step / 2)) * (axis.step / 2)


def _mean_at(result: SearchResult, name: str, value: float, n_rows: int) -> float:
    return next(
        r["mean_score"]
        for r in reversed(result.results)
        if r["param"] == name and r["value"] == value and r["n_rows"] == n_rows
    )


class _Context(NamedTuple):
    """A stage of the search: the engine's context (:class:`~dmlr.paths.PathContext`), the
    scoring, the progress report."""

    paths: PathContext
    scoring: str
    report: object  # _Progress


def _search_axis(
    ctx: _Context, axis: Axis, n_train: int, patience, widen_by: int, max_widen: int, staged: bool
) -> None:
    """Search one parameter: a warm-started path in lock-step over the folds, widened at an edge
    (from :meth:`Axis.path`: a staged search's first stage may start lower)."""
    greater = ctx.scoring not in LOSS_METRICS
    setting = dict(ctx.paths.result.best_params)
    scores: dict[float, list] = {}  # value -> fold scores
    iters: dict[float, list] = {}
    exponents = axis.path(staged)
    value_of = dict(zip(axis.values(exponents, n_train), exponents))
    # The fold models at the smallest value fitted so far: where a downward widening resumes.
    low = _run_path(ctx, axis.name, setting, list(value_of), cold_start(len(ctx.paths.splits)), scores, iters, patience)
    abandoned = low is None
    for _ in range(max_widen):
        best = _best(scores, greater)
        if best == max(scores):
            direction, edge, start = 1.0, max(value_of.values()), cold_start(len(ctx.paths.splits))
        elif best == min(scores) and not abandoned:
            direction, edge, start = -1.0, min(value_of.values()), low
        else:
            break
        new = [round(edge + direction * axis.step * (k + 1), 6) for k in range(widen_by)]
        new_values = axis.values(new, n_train)
        value_of.update(zip(new_values, new))
        ctx.paths.result.n_widened += 1
        end = _run_path(ctx, axis.name, setting, new_values, start, scores, iters, patience)
        if direction < 0:
            low, abandoned = end, end is None
    _record(ctx, axis, setting, scores, iters)


def _record(ctx: _Context, axis: Axis, setting: dict, scores: dict, iters: dict) -> None:
    """Append the records of one axis at one stage and set its best value."""
    if all(math.isnan(float(np.mean(s))) for s in scores.values()):
        raise ValueError(
            f"the search's scoring {ctx.scoring!r} is nan on every fold at every value: the validation "
            "rows give it nothing to measure (the ranking metrics need rows with relevant and irrelevant "
            "labels; with one label column, use scoring='auc_macro')"
        )
    best = _best(scores, ctx.scoring not in LOSS_METRICS)
    for value in sorted(scores, reverse=True):
        ctx.paths.result.results.append(
            {
                "param": axis.name,
                "value": float(value),
                "n_rows": ctx.paths.n_rows,
                "params": {**setting, axis.name: value},
                "mean_score": float(np.mean(scores[value])),
                "std_score": float(np.std(scores[value])),
                "fold_scores": [float(x) for x in scores[value]],
                "mean_n_iter": float(np.mean(iters[value])),
            }
        )
    ctx.paths.result.best_params[axis.name] = float(best)


def _refine_axis(ctx: _Context, axis: Axis, n_train: int, setting: dict, exponent: float) -> None:
    """A later stage of a staged search: from the previous stage's choice ``exponent``, walk
    down the grid while the score improves; if the first step down does not improve, walk
    up from the first value the same way. At most :data:`HALVING_MAX_STEPS` values each way.

    The first value starts cold: from the previous stage's fold models (other rows) the
    solver took more iterations than from zero. Every later value
    starts from its neighbour's fold models, as along a path (:func:`_run_path`).
    """
    greater = ctx.scoring not in LOSS_METRICS
    scores: dict[float, list] = {}
    iters: dict[float, list] = {}
    first = axis.values([exponent], n_train)[0]
    at_first: list = []  # the fold models at the first value, before the walk down refits them

    def walk(exponents, start: PathEnd) -> None:
        for value in axis.values(exponents, n_train)[:: 1 if exponents[0] >= exponents[-1] else -1]:
            start = _run_path(ctx, axis.name, setting, [value], start, scores, iters, None)
            if value == first:
                at_first.extend(copy.deepcopy(m) for m in start.models)
            if _best(scores, greater) != value and len(scores) > 1:
                return

    walk([exponent - axis.step * k for k in range(HALVING_MAX_STEPS)], cold_start(len(ctx.paths.splits)))
    if len(scores) > 1 and _best(scores, greater) == first:
        walk([exponent + axis.step * (k + 1) for k in range(HALVING_MAX_STEPS)], PathEnd(at_first, first, None))
    _record(ctx, axis, setting, scores, iters)


def _run_path(ctx: _Context, name, setting, values, start: PathEnd, scores, iters, patience) -> PathEnd | None:
    """Fit ``values`` (largest first) on every fold in lock-step (:func:`dmlr.paths.run_path`),
    record each value's fold scores and iterations in ``scores`` and ``iters``, and abandon
    the path (return None) once it has failed to beat its best for ``patience`` values or a
    value scores worse than the best on every fold (None: never)."""
    greater = ctx.scoring not in LOSS_METRICS
    before = [_oriented(s, greater) for s in scores.values()]
    run: list[float] = []

    def on_value(value, outcomes) -> bool:
        scores[value] = [float(o.metrics[ctx.scoring]) for o in outcomes]
        iters[value] = [o.n_iter for o in outcomes]
        run.append(_oriented(scores[value], greater))
        ctx.report.value(name, value, float(np.mean(scores[value])), _best(scores, greater), scores)
        if patience is None:
            return False
        stalled = len(run) > patience and max(run[-patience:]) <= max(before + run[:-patience])
        if stalled or _worse_on_every_fold(scores, value, greater):
            ctx.paths.result.n_abandoned += (len(values) - len(run)) * len(outcomes)
            return True
        return False

    lanes = [(setting, fold) for fold in range(len(ctx.paths.splits))]
    return run_path(ctx.paths, name, values, lanes, start, on_value)


def _worse_on_every_fold(scores: dict, value: float, greater: bool) -> bool:
    """``value``, past the best other value (smaller: a path runs down), scores worse than it on
    every fold (nan: not worse). A path that widens the grid upward starts at its largest
    value, beyond the next one: it is not abandoned by this rule."""
    others = {v: s for v, s in scores.items() if v != value}
    if not others or _best(others, greater) < value:
        return False
    here, best = np.asarray(scores[value], dtype=float), np.asarray(scores[_best(others, greater)], dtype=float)
    return bool(np.all(here < best) if greater else np.all(here > best))


def _oriented(fold_scores, greater: bool) -> float:
    """The mean of a value's fold scores, larger is better, nan as the worst."""
    m = float(np.mean(fold_scores))
    return -math.inf if math.isnan(m) else (m if greater else -m)


def _best(scores: dict, greater: bool) -> float:
    """The value with the best mean score; ties go to the larger (more regularized) value."""
    return max(scores, key=lambda value: (_oriented(scores[value], greater), value))


# ----------------------------------------------------------------------------
# Checkpoint of finished units
# ----------------------------------------------------------------------------


def _fingerprint(estimator, X, Y, cv, seed, scoring, cv_params, sizes) -> dict:
    from dask.base import tokenize

    params = {k: v for k, v in {**estimator.get_params(), **cv_params}.items() if k not in ("verbose",)}
    return {
        "format": SEARCH_FORMAT_VERSION,
        "estimator": type(estimator).__name__,
        "params": json.loads(json.dumps(params, default=repr)),
        "shape": [int(s) for s in X.shape] + [int(Y.shape[1])],
        "data": tokenize(X, Y),
        "cv": int(cv),
        "seed": seed,
        "scoring": scoring,
        "stages": [int(m) for m in sizes],
    }
