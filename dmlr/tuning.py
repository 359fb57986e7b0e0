"""Automatic hyper-parameters: K-fold cross-validation along warm-started paths.

:func:`search` chooses a model's regularization by K-fold cross-validation
on the training rows, one parameter after the other (each model class declares
its parameters and their starting grids, ``_search_space``: :func:`search_space`):

* **Paths.** A unit of work is one fold and one parameter's grid, fitted
  from the most regularized value to the least with ``warm_start`` (where
  the model has it): each fit starts from the previous solution (from the
  third value on, moved along the secant of the fold's last two:
  ``dmlr.model_selection.predict_path_start``), and the most
  regularized fits, the cheapest, come first.
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
* **Where it runs** (:mod:`dmlr.distributed.placement`). Units whose rows fit
  comfortably in one process run whole there, spread over the workers (or
  this process's threads), with no round trip per iteration; larger rows take
  the chunked path, each fit over a group of workers, disjoint groups running
  different units at once, with the blocks (hence the scores) of a fit over
  the whole cluster.
* **Resume.** With ``checkpoint=DIR`` every finished unit is written there
  (JSON, atomically); ``resume=True`` reuses them, so a search interrupted
  by a killed client ends at the choice of an uninterrupted one.

Units are deterministic (seeded folds, fixed summation order), so the choice
does not depend on the number of workers or the order units finish in.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from dmlr.config import config_context, get_config
from dmlr.data.arrays import chunk_rows, is_dask
from dmlr.distributed.placement import data_nbytes, fits_in_memory
from dmlr.metrics import METRIC_NAMES, multilabel_metrics
from dmlr.model_selection import (
    DEFAULT_SCORING,
    LOSS_METRICS,
    UNIT_CONFIG,
    SearchResult,
    UnitRunner,
    _materialize,
    _resolve_client,
    default_scoring,
    kfold_indices,
    path_point,
    predict_path_start,
    row_parts,
    stack_rows,
    unit_label_rule,
)
from dmlr.models.base import Axis
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

SEARCH_FORMAT_VERSION = 3  # 3: units' keys name the predictor's source value


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
        _UnitStore(checkpoint, resume, _fingerprint(estimator, X, Y, cv, seed, scoring, cv_params, sizes))
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
    units_client = _resolve_client(client)
    nbytes, full = None, None
    chosen: dict[str, float] = {}  # axis -> chosen value, carried to the next stage as it is
    report = _Progress(verbose, space, sizes, folds, start, staged=staged)
    for stage, m in enumerate(sizes):
        rows = None if m == n else np.sort(order[:m])
        splits = kfold_indices(m, folds, seed)
        n_train = min(len(tr) for tr, _ in splits)
        where = get_config()["backend"]
        if is_dask(X) and where == "auto":
            if nbytes is None:
                nbytes = data_nbytes(X, Y)
            where = "local" if fits_in_memory(nbytes * m // n, units_client) else "dask"
        chunked = is_dask(X) and where == "dask"
        if chunked and nbytes is None:
            nbytes = data_nbytes(X, Y)
        if chunked:  # lazy row masks over the chunks
            X_s, Y_s = (X, Y) if rows is None else (_chunk_rows(X, rows), _chunk_rows(Y, rows))
        else:  # the units read these rows (in memory, or futures), never the dask arrays
            if full is None:
                full = _load(X, Y, units_client)
            X_s, Y_s = _stage_data(full, rows, units_client)
        runner = UnitRunner((X_s, Y_s, splits), client, n_jobs=n_jobs)
        result.backend = "chunks" if chunked else runner.backend
        ctx = _Context(
            estimator,
            cv_params,
            X_s,
            Y_s,
            splits,
            scoring,
            not chunked,
            runner,
            store,
            result,
            m,
            report,
            nbytes * m // n if chunked else 0,
        )
        try:
            for axis in space:
                setting = {a.name: chosen[a.name] for a in space if a.name in chosen and a.name != axis.name}
                report.begin(stage, axis)
                if stage == 0:
                    _search_axis(ctx, axis, n_train, patience, widen_by, max_widen, staged)
                else:
                    _refine_axis(ctx, axis, n_train, setting, _exponent(axis, chosen[axis.name], n_train))
                best = chosen[axis.name] = result.best_params[axis.name]
                report.end(stage, axis, best, _mean_at(result, axis.name, best, m))
        finally:
            runner.close()
    if staged:  # between the grid's values, where the last stage's scores say the optimum is
        last = [r for r in result.results if r["n_rows"] == sizes[-1]]
        for axis in space:
            curve = {r["value"]: r["mean_score"] for r in last if r["param"] == axis.name}
            result.best_params[axis.name] = _vertex(curve, result.best_params[axis.name], axis.step, scoring)
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


def _load(X, Y, client):
    """(X, Y) in memory where the units run: numpy / CSR here, or, with a cluster and dask
    input, futures of them computed by a worker from the chunks (nothing passes through
    this process)."""
    if client is not None and is_dask(X):
        import dask

        # the chunks as a list, stacked by scipy where the units run (see stack_rows)
        x, y = dask.delayed(stack_rows, nout=2)(row_parts(X), row_parts(Y))
        return tuple(client.compute([x, y]))
    return _materialize(X, Y)


def _stage_data(full, rows, client):
    """Rows ``rows`` (None: all) of the in-memory data :func:`_load` gave."""
    if rows is None:
        return full
    if client is not None and _is_future(full[0]):
        return tuple(client.submit(_chunk_rows, a, rows, pure=False) for a in full)
    return tuple(_chunk_rows(a, rows) for a in full)


def _is_future(obj) -> bool:
    """Whether ``obj`` is a ``distributed.Future`` (without importing distributed)."""
    return type(obj).__name__ == "Future" and type(obj).__module__.startswith("distributed")


@dataclass
class _Context:
    estimator: object
    cv_params: dict  # parameters of the cross-validation fits only (tol, solver)
    X: object
    Y: object
    splits: list
    scoring: str
    in_process: bool
    runner: UnitRunner
    store: object
    result: SearchResult
    n_rows: int  # rows of this stage
    report: object  # _Progress
    stage_nbytes: int = 0  # bytes of this stage's rows in memory (the chunked path's groups)


def _search_axis(
    ctx: _Context, axis: Axis, n_train: int, patience, widen_by: int, max_widen: int, staged: bool
) -> None:
    """Search one parameter: a warm-started path in lock-step over the folds, widened at an edge
    (from :meth:`Axis.path`: a staged search's first stage may start lower)."""
    greater = ctx.scoring not in LOSS_METRICS
    setting = dict(ctx.result.best_params)
    scores: dict[float, list] = {}  # value -> fold scores
    iters: dict[float, list] = {}
    exponents = axis.path(staged)
    value_of = dict(zip(axis.values(exponents, n_train), exponents))
    # The fold models at the smallest value fitted so far: where a downward widening resumes.
    low = _run_path(ctx, axis.name, setting, list(value_of), _cold(ctx), scores, iters, patience)
    abandoned = low is None
    for _ in range(max_widen):
        best = _best(scores, greater)
        if best == max(scores):
            direction, edge, start = 1.0, max(value_of.values()), _cold(ctx)
        elif best == min(scores) and not abandoned:
            direction, edge, start = -1.0, min(value_of.values()), low
        else:
            break
        new = [round(edge + direction * axis.step * (k + 1), 6) for k in range(widen_by)]
        new_values = axis.values(new, n_train)
        value_of.update(zip(new_values, new))
        ctx.result.n_widened += 1
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
        ctx.result.results.append(
            {
                "param": axis.name,
                "value": float(value),
                "n_rows": ctx.n_rows,
                "params": {**setting, axis.name: value},
                "mean_score": float(np.mean(scores[value])),
                "std_score": float(np.std(scores[value])),
                "fold_scores": [float(x) for x in scores[value]],
                "mean_n_iter": float(np.mean(iters[value])),
            }
        )
    ctx.result.best_params[axis.name] = float(best)


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

    def walk(exponents, start: _PathEnd) -> None:
        for value in axis.values(exponents, n_train)[:: 1 if exponents[0] >= exponents[-1] else -1]:
            start = _run_path(ctx, axis.name, setting, [value], start, scores, iters, None)
            if value == first:
                at_first.extend(copy.deepcopy(m) for m in start.models)
            if _best(scores, greater) != value and len(scores) > 1:
                return

    walk([exponent - axis.step * k for k in range(HALVING_MAX_STEPS)], _cold(ctx))
    if len(scores) > 1 and _best(scores, greater) == first:
        walk([exponent + axis.step * (k + 1) for k in range(HALVING_MAX_STEPS)], _PathEnd(at_first, first, None))
    _record(ctx, axis, setting, scores, iters)


class _PathEnd(NamedTuple):
    """Where a warm-started path stands: the fold models at ``value`` (None each: a cold
    start), and ``behind``, (each fold's :func:`~dmlr.model_selection.path_point`, value)
    one path value earlier, or None: what the next fit's predictor needs."""

    models: list
    value: float | None
    behind: tuple | None


def _cold(ctx: _Context) -> _PathEnd:
    return _PathEnd([None] * len(ctx.splits), None, None)


def _run_path(ctx: _Context, name, setting, values, start: _PathEnd, scores, iters, patience):
    """Fit ``values`` (largest first) on every fold in lock-step, each fit warm-started from the
    fold's previous one (``start``), moved along the path's secant where two earlier values
    are known (:func:`~dmlr.model_selection.predict_path_start`).

    Returns the :class:`_PathEnd` at the path's last value, or None when it was abandoned.
    """
    greater = ctx.scoring not in LOSS_METRICS
    before = [_oriented(s, greater) for s in scores.values()]
    run: list[float] = []
    base = ctx.estimator.get_params()
    warm = dict(ctx.cv_params)
    if "warm_start" in base:
        warm["warm_start"] = True
    if "verbose" in base:
        warm["verbose"] = 0  # the search reports progress, not each fit
    warm.update(unit_label_rule(type(ctx.estimator), [ctx.scoring]))
    states, from_value, behind = start
    for k, value in enumerate(values):
        units = []
        here = None if from_value is None else ([path_point(m) for m in states], from_value)
        for fold, state in enumerate(states):
            est = state if state is not None else type(ctx.estimator)(**{**base, **setting, **warm})
            if state is not None and behind is not None:
                predict_path_start(est, behind[0][fold], (behind[1], from_value, value))
            units.append((est, fold, name, value, ctx.scoring, ctx.in_process))
        source = (from_value, None if behind is None else behind[1])
        keys = [_unit_key(setting, name, value, fold, source, ctx.n_rows) for fold in range(len(states))]
        outs = _run_units(ctx, units, keys)
        scores[value] = [o[0] for o in outs]
        iters[value] = [o[1] for o in outs]
        states, from_value, behind = [o[2] for o in outs], value, here
        run.append(_oriented(scores[value], greater))
        ctx.report.value(name, value, float(np.mean(scores[value])), _best(scores, greater), scores)
        if patience is not None:
            stalled = len(run) > patience and max(run[-patience:]) <= max(before + run[:-patience])
            if stalled or _worse_on_every_fold(scores, value, greater):
                ctx.result.n_abandoned += (len(values) - k - 1) * len(states)
                return None
    return _PathEnd(states, from_value, behind)


def _worse_on_every_fold(scores: dict, value: float, greater: bool) -> bool:
    """``value``, past the best other value (smaller: a path runs down), scores worse than it on
    every fold (nan: not worse). A path that widens the grid upward starts at its largest
    value, beyond the next one: it is not abandoned by this rule."""
    others = {v: s for v, s in scores.items() if v != value}
    if not others or _best(others, greater) < value:
        return False
    here, best = np.asarray(scores[value], dtype=float), np.asarray(scores[_best(others, greater)], dtype=float)
    return bool(np.all(here < best) if greater else np.all(here > best))


def _run_units(ctx: _Context, units: list, keys: list) -> list:
    """(score, n_iter, fitted estimator) per unit, read from the checkpoint where recorded."""
    outs = [ctx.store.get(key) if ctx.store is not None else None for key in keys]
    todo = [i for i, o in enumerate(outs) if o is None]
    ctx.result.n_resumed_units += len(units) - len(todo)
    ctx.result.n_fits += len(todo)

    def done(j, out):
        if ctx.store is not None:
            ctx.store.put(keys[todo[j]], out)

    if todo:
        if ctx.in_process:  # tasks on the cluster, or threads here
            new = ctx.runner.map(_fit_step, [units[i] for i in todo], done)
        else:  # each fit distributed over the chunks, on disjoint groups of workers
            new = _run_chunked(ctx, [units[i] for i in todo], done)
        for i, out in zip(todo, new):
            outs[i] = out
    return outs


def _run_chunked(ctx: _Context, units: list, done) -> list:
    """:func:`_fit_step` of each unit, each fit over the chunks of a group of workers.

    A fit needs the workers that hold its rows with room to spare
    (:func:`worker_groups`); when the cluster has several times that many,
    disjoint groups fit different units at the same time, from threads of
    this process (a fit's own work runs on its group's workers). Every fit
    cuts its rows into the blocks it would have over the whole cluster, so
    its sums, hence its scores, do not depend on the group it ran on.
    """
    from concurrent.futures import ThreadPoolExecutor

    from dmlr.distributed.chunks import cluster_block_count, made_current
    from dmlr.distributed.placement import worker_groups

    settings = get_config()
    client = settings["client"] or ctx.runner.client
    groups = worker_groups(client, ctx.stage_nbytes) if client is not None else [None]
    if len(groups) < 2 or len(units) < 2:
        outs = []
        for j, unit in enumerate(units):
            outs.append(_fit_step(ctx.X, ctx.Y, ctx.splits, *unit))
            done(j, outs[-1])
        return outs
    n_blocks = settings["n_blocks"] or cluster_block_count(client)  # the whole cluster's, whatever the group

    def run(j):  # on a thread of its own
        with config_context(**{**settings, "client": client, "workers": groups[j % len(groups)], "n_blocks": n_blocks}):
            return _fit_step(ctx.X, ctx.Y, ctx.splits, *units[j])

    outs = []
    # The client is made current once, here, and each thread runs in a copy of this thread's
    # context, where it is current: Client.as_current also sets dask's global "scheduler"
    # setting, which threads entering and leaving it in turn would leave changed after the
    # search (see dmlr.distributed.chunks.made_current).
    with made_current(client), ThreadPoolExecutor(min(len(groups), len(units))) as pool:
        futures = [pool.submit(contextvars.copy_context().run, run, j) for j in range(len(units))]
        for j, future in enumerate(futures):
            outs.append(future.result())
            done(j, outs[-1])
    return outs


def _fit_step(X, Y, splits, est, fold, name, value, scoring, in_process):
    """Fit ``est`` with ``name=value`` on the fold's training rows (warm-started from its
    previous fit when it has ``warm_start``) and score it on the fold's validation rows.

    In memory (``in_process``): one block, one BLAS thread, in this process (a unit is
    the parallel grain; see :data:`dmlr.model_selection.UNIT_CONFIG`). Dask X and Y too
    large for one process: the rows are selected lazily, by the workers that hold them,
    and the fit is the model's own distributed fit.

    Returns (score, n_iter, est).
    """
    from dmlr._blas import single_threaded_blas

    train_idx, val_idx = splits[fold]
    with contextlib.ExitStack() as stack:
        if in_process:
            stack.enter_context(config_context(**UNIT_CONFIG))
            stack.enter_context(single_threaded_blas())
        est.set_params(**{name: value})
        est.fit(_chunk_rows(X, train_idx), _chunk_rows(Y, train_idx))
        X_val, Y_val = _chunk_rows(X, val_idx), _chunk_rows(Y, val_idx)
        S = est.decision_function(X_val)
        values = multilabel_metrics(Y_val, S, est.labels_from_scores(S), metrics=[scoring])
    return float(values[scoring]), int(getattr(est, "n_iter_", 0)), est


def _chunk_rows(A, idx):
    """Rows ``idx`` (sorted) of ``A``; of a dask ``A``, a row mask over its chunks (:func:`chunk_rows`)."""
    return chunk_rows(A, idx) if is_dask(A) else A[idx]


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


def _unit_key(setting: dict, name: str, value: float, fold: int, source: tuple, n_rows: int) -> str:
    """A unit's name in the checkpoint: the stage's rows, the parameter setting, the fold, and
    the values its warm start came from (``source``: the neighbour's and the predictor's; the
    same fit reached by another path is another unit)."""
    text = json.dumps([n_rows, sorted(setting.items()), name, repr(value), fold, repr(source)], default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class _UnitStore:
    """A directory of finished units: ``search.json`` (the problem) and ``units/<key>.json``."""

    def __init__(self, path, resume: bool, fingerprint: dict):
        self.path = Path(path)
        self.units = self.path / "units"
        meta = self.path / "search.json"
        if meta.exists():
            saved = json.loads(meta.read_text())
            if not resume:
                raise FileExistsError(f"{self.path} holds a search checkpoint: pass resume=True or remove it")
            if saved != fingerprint:
                diff = sorted(k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k))
                raise ValueError(f"the checkpoint at {self.path} is of another search (differs in {diff})")
        else:
            self.units.mkdir(parents=True, exist_ok=True)
            _write_atomic(meta, json.dumps(fingerprint, sort_keys=True))
        self.units.mkdir(parents=True, exist_ok=True)

    def get(self, key: str):
        """(score, n_iter, fitted estimator) of a recorded unit, or None."""
        meta, model = self.units / f"{key}.json", self.units / f"{key}.npz"
        if not meta.exists():
            return None
        score, n_iter = json.loads(meta.read_text())
        if not model.exists():
            return None
        from dmlr.models.base import load_model

        return float(score), int(n_iter), load_model(model)

    def put(self, key: str, out) -> None:
        """Record a finished unit: its fitted model (a dmlr model file), then its scores (the
        unit counts as recorded once both exist)."""
        score, n_iter, est = out
        if hasattr(est, "save"):
            est.save(self.units / f"{key}.npz")  # atomic (BaseModel.save)
        _write_atomic(self.units / f"{key}.json", json.dumps([score, n_iter]))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".partial-{path.name}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
