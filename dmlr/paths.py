"""The search engine: warm-started paths of fits over cross-validation folds.

Every cross-validated search of dmlr runs its fits here: :func:`dmlr.tuning.search`
(the adaptive search of :func:`dmlr.fit`) and :func:`dmlr.model_selection.grid_search_cv`
(every point of a grid); :func:`dmlr.models.omf.cross_validate_omf` places its units
with the same :class:`UnitRunner`.

* **Lanes and paths.** A lane is one fold under one setting of the other parameters.
  A path is a list of values of one parameter, fitted in order on every lane in
  lock-step (:func:`run_path`): the lanes' fits at one value are one round of
  independent units, and each lane's fit starts from its previous one (``warm_start``),
  moved along the secant of its last two (:func:`predict_path_start`). Whoever runs a
  path decides after each value whether it goes on: the adaptive search abandons a path
  past its best, a grid search runs every value.
* **Where a fit runs** (:func:`stage_data`, :mod:`dmlr.distributed.placement`). Rows
  that fit comfortably in one process are loaded once where the units run, and a unit
  is one whole fit there (:class:`UnitRunner`: a task on a worker beside that worker's
  copy of the data, or a thread of this process), with no round trip per iteration.
  Larger dask data take the chunked path: each fit is the model's own distributed fit,
  disjoint groups of workers running different units at once.
* **Checkpoints** (:class:`UnitStore`). Every finished unit can be written to a
  directory (JSON and a dmlr model file: no pickle) and read back on resume.

Units are deterministic (seeded folds; in memory, one block and one BLAS thread; on
the chunked path, the blocks the fit would have over the whole cluster), so the scores
do not depend on where, or in what order, the units ran.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from dmlr.config import config_context, get_config
from dmlr.data.arrays import chunk_rows, is_dask
from dmlr.metrics import LABEL_METRICS, multilabel_metrics

__all__ = [
    "UNIT_CONFIG",
    "FitOutcome",
    "PathContext",
    "PathEnd",
    "UnitRunner",
    "UnitStore",
    "cold_start",
    "fit_step",
    "path_point",
    "predict_path_start",
    "run_path",
    "search_fit_params",
    "stage_data",
    "unit_label_rule",
]

#: Configuration of a search's unit running in memory: one block, in this process.
UNIT_CONFIG = {"backend": "local", "n_blocks": 1, "client": None}


# ----------------------------------------------------------------------------
# One fit (runs on a worker, on a thread of this process, or over the chunks)
# ----------------------------------------------------------------------------


class FitOutcome(NamedTuple):
    """One cross-validation fit: the validation ``metrics`` (name -> value), the solver's
    ``n_iter``, the fit's and scoring's wall ``seconds`` and the fitted ``model``."""

    metrics: dict
    n_iter: int
    seconds: float
    model: object


def fit_step(X, Y, splits, est, fold, params, metrics, in_process) -> FitOutcome:
    """Fit ``est`` with ``params`` set on the fold's training rows (warm-started from its
    previous fit when it has ``warm_start``) and score it on the fold's validation rows.

    In memory (``in_process``): one block, one BLAS thread, in this process (a unit is
    the parallel grain, see :data:`UNIT_CONFIG`; the same threading everywhere keeps sums
    in the same order, hence identical scores). Dask X and Y too large for one process:
    the rows are selected lazily, by the workers that hold them, and the fit is the
    model's own distributed fit.
    """
    from dmlr._blas import single_threaded_blas

    train_idx, val_idx = splits[fold]
    with contextlib.ExitStack() as stack:
        if in_process:
            stack.enter_context(config_context(**UNIT_CONFIG))
            stack.enter_context(single_threaded_blas())
        t = time.perf_counter()
        est.set_params(**params)
        est.fit(_rows(X, train_idx), _rows(Y, train_idx))
        X_val, Y_val = _rows(X, val_idx), _rows(Y, val_idx)
        S = est.decision_function(X_val)
        values = multilabel_metrics(Y_val, S, est.labels_from_scores(S), metrics=list(metrics))
    return FitOutcome(values, int(getattr(est, "n_iter_", 0)), time.perf_counter() - t, est)


def _rows(A, idx):
    """Rows ``idx`` (sorted) of ``A``; of a dask ``A``, a row mask over its chunks (:func:`chunk_rows`)."""
    return chunk_rows(A, idx) if is_dask(A) else A[idx]


def search_fit_params(estimator, metric_names, *, warm: bool, **overrides) -> dict:
    """The parameters a search's fits of ``estimator`` set over its own: ``overrides`` (the
    search's ``tol``, ``solver``), ``warm_start=True`` along a path (``warm``, where the
    model has it), ``verbose=0`` (the search reports progress, not each fit) and
    ``unit_label_rule``'s."""
    own = estimator.get_params()
    params = dict(overrides)
    if warm and "warm_start" in own:
        params["warm_start"] = True
    if "verbose" in own:
        params["verbose"] = 0
    params.update(unit_label_rule(type(estimator), metric_names))
    return params


def unit_label_rule(cls, metric_names) -> dict:
    """Parameters a search unit of model class ``cls`` overrides when its metrics read scores
    only: no learned thresholds (``threshold=0.0``), which would cost a scoring pass and a
    histogram pass over the training rows per fit and change none of those metrics."""
    if getattr(cls, "_learns_threshold", False) and not any(m in LABEL_METRICS for m in metric_names):
        return {"threshold": 0.0}
    return {}


# ----------------------------------------------------------------------------
# Paths
# ----------------------------------------------------------------------------


@dataclass
class PathContext:
    """What every fit of a search (or of one stage of it) shares.

    ``estimator`` is the template each lane's first fit is built from, with the lane's
    setting and ``fit_params`` (parameters of the cross-validation fits only: ``tol``,
    ``solver``, ``warm_start``, ``verbose``, the label rule). ``metrics``: the names each
    fit is scored on. ``result``: the search's :class:`~dmlr.model_selection.SearchResult`,
    whose counters (``n_fits``, ``n_resumed_units``) the fits update. ``n_rows``: the
    rows of X (a stage's); ``stage_nbytes``: their bytes in memory, on the chunked path.
    """

    estimator: object
    fit_params: dict
    X: object
    Y: object
    splits: list
    metrics: tuple
    in_process: bool
    runner: UnitRunner
    store: UnitStore | None
    result: object
    n_rows: int
    stage_nbytes: int = 0


class PathEnd(NamedTuple):
    """Where a warm-started path stands: each lane's fitted model at ``value`` (None: a
    cold start), and ``behind``, (each lane's :func:`path_point`, value) one path value
    earlier, or None: what the next fit's predictor needs."""

    models: list
    value: float | None
    behind: tuple | None


def cold_start(n_lanes: int) -> PathEnd:
    """The start of a path whose lanes all start from zero."""
    return PathEnd([None] * n_lanes, None, None)


def run_path(ctx: PathContext, name, values, lanes, start: PathEnd, on_value=None, on_fit=None) -> PathEnd | None:
    """Fit ``values`` of parameter ``name``, in order, on every lane in lock-step.

    Parameters
    ----------
    ctx : PathContext
    name : str or None
        The path's parameter; None: one fit per lane at its setting (``values``: ``[None]``).
    values : list
        In the order they are fitted (the most regularized first: the cheapest fits, and
        the best starts for the next).
    lanes : list of (dict, int)
        (setting of the other parameters, fold) of each lane.
    start : PathEnd
        The lanes' models to warm-start from (:func:`cold_start`: none).
    on_value : callable, optional
        ``on_value(value, outcomes) -> bool``, called after each value with the lanes'
        :class:`FitOutcome`, in lane order: True stops the path there.
    on_fit : callable, optional
        ``on_fit()``, called as each fit finishes (read from the checkpoint: not called).

    Returns
    -------
    PathEnd or None
        Where the path ends after its last value, or None when ``on_value`` stopped it.
    """
    base = ctx.estimator.get_params()
    models, from_value, behind = start
    for value in values:
        units = []
        here = None if from_value is None else ([path_point(m) for m in models], from_value)
        for lane, ((setting, fold), model) in enumerate(zip(lanes, models)):
            est = model if model is not None else type(ctx.estimator)(**{**base, **setting, **ctx.fit_params})
            if model is not None and behind is not None:
                predict_path_start(est, behind[0][lane], (behind[1], from_value, value))
            params = {name: value} if name is not None else {}
            units.append((est, fold, params, ctx.metrics, ctx.in_process))
        source = (from_value, None if behind is None else behind[1])
        keys = [_unit_key(setting, name, value, fold, source, ctx.n_rows) for setting, fold in lanes]
        outcomes = _run_units(ctx, units, keys, on_fit)
        models, from_value, behind = [o.model for o in outcomes], value, here
        if on_value is not None and on_value(value, outcomes):
            return None
    return PathEnd(models, from_value, behind)


def path_point(est) -> dict:
    """The arrays a ``warm_start`` fit of ``est`` would start from (its class's
    ``_warm_start_arrays`` that it holds), by name. References, not copies: a fit assigns
    new arrays to them and never writes into the old ones."""
    names = getattr(type(est), "_warm_start_arrays", ())  # a scikit-learn estimator: none
    return {k: getattr(est, k) for k in names if getattr(est, k, None) is not None}


def predict_path_start(est, behind: dict, values: tuple) -> None:
    """Move the warm start of ``est`` (fitted at ``values[1]``) along the path's secant, for
    its next fit at ``values[2]``: ``W + r (W - W_behind)``, with ``W_behind`` the same
    lane's arrays at ``values[0]`` (``behind``, from :func:`path_point`) and ``r`` the step
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


def _run_units(ctx: PathContext, units: list, keys: list, on_fit=None) -> list:
    """The :class:`FitOutcome` of each unit, read from the checkpoint where recorded
    (``on_fit()`` as each of the others finishes)."""
    outs = [ctx.store.get(key) if ctx.store is not None else None for key in keys]
    todo = [i for i, o in enumerate(outs) if o is None]
    ctx.result.n_resumed_units += len(units) - len(todo)
    ctx.result.n_fits += len(todo)

    def done(j, out):
        if ctx.store is not None:
            ctx.store.put(keys[todo[j]], out)
        if on_fit is not None:
            on_fit()

    if todo:
        if ctx.in_process:  # tasks on the cluster, or threads here
            new = ctx.runner.map(fit_step, [units[i] for i in todo], done)
        else:  # each fit distributed over the chunks, on disjoint groups of workers
            new = _run_chunked(ctx, [units[i] for i in todo], done)
        for i, out in zip(todo, new):
            outs[i] = out
    return outs


def _run_chunked(ctx: PathContext, units: list, done) -> list:
    """:func:`fit_step` of each unit, each fit over the chunks of a group of workers.

    A fit needs the workers that hold its rows with room to spare
    (:func:`~dmlr.distributed.placement.worker_groups`); when the cluster has several
    times that many, disjoint groups fit different units at the same time, from threads
    of this process (a fit's own work runs on its group's workers). Every fit cuts its
    rows into the blocks it would have over the whole cluster, so its sums, hence its
    scores, do not depend on the group it ran on.
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
            outs.append(fit_step(ctx.X, ctx.Y, ctx.splits, *unit))
            done(j, outs[-1])
        return outs
    n_blocks = settings["n_blocks"] or cluster_block_count(client)  # the whole cluster's, whatever the group

    def run(j):  # on a thread of its own
        with config_context(**{**settings, "client": client, "workers": groups[j % len(groups)], "n_blocks": n_blocks}):
            return fit_step(ctx.X, ctx.Y, ctx.splits, *units[j])

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


# ----------------------------------------------------------------------------
# Where the data are
# ----------------------------------------------------------------------------


def stage_data(X, Y, rows, client, loaded: dict) -> tuple:
    """(X, Y, chunked, nbytes): rows ``rows`` (sorted; None: all) of the training data, where
    a search's units read them.

    In memory when they fit comfortably in one process (:func:`dmlr.distributed.placement.fits_in_memory`,
    under the ``backend="auto"`` setting; ``"local"``: always): numpy / CSR in this process,
    or, with a cluster and dask input, futures of them computed by a worker from the chunks
    (nothing passes through this process); ``chunked`` False. Else (``chunked`` True) lazy
    row masks over the dask chunks, and ``nbytes`` their size in memory (for the chunked
    path's worker groups; 0 in memory). ``loaded``: a dict this function keeps the full data
    in between calls (a staged search's stages select rows of one load).
    """
    from dmlr.distributed.placement import data_nbytes, fits_in_memory

    n = int(X.shape[0])
    m = n if rows is None else len(rows)
    where = get_config()["backend"]
    if is_dask(X) and where != "local":
        if "nbytes" not in loaded:
            loaded["nbytes"] = data_nbytes(X, Y)
        nbytes = loaded["nbytes"] * m // n
        if where == "dask" or not fits_in_memory(nbytes, client):
            return (X, Y, True, nbytes) if rows is None else (_rows(X, rows), _rows(Y, rows), True, nbytes)
    if "data" not in loaded:
        loaded["data"] = _load(X, Y, client)
    full = loaded["data"]
    if rows is None:
        return (*full, False, 0)
    if client is not None and _is_future(full[0]):
        return (*(client.submit(_rows, a, rows, pure=False) for a in full), False, 0)
    return (*(_rows(a, rows) for a in full), False, 0)


def _load(X, Y, client):
    """(X, Y) in memory where the units run: numpy / CSR here, or, with a cluster and dask
    input, futures of them computed by a worker from the chunks."""
    if client is not None and is_dask(X):
        import dask

        # the chunks as a list, stacked by scipy where the units run (see stack_rows)
        x, y = dask.delayed(stack_rows, nout=2)(row_parts(X), row_parts(Y))
        return tuple(client.compute([x, y]))
    return materialize(X, Y)


def _is_future(obj) -> bool:
    """Whether ``obj`` is a ``distributed.Future`` (without importing distributed)."""
    return type(obj).__name__ == "Future" and type(obj).__module__.startswith("distributed")


def materialize(X, Y):
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
    import scipy.sparse as sp

    from dmlr.data.arrays import as_csr, is_sparse

    if isinstance(X, list):
        X = sp.vstack([as_csr(p) for p in X], format="csr") if is_sparse(X[0]) else np.concatenate(X)
    X = as_csr(X) if is_sparse(X) else np.asarray(X)
    Y = np.concatenate([np.asarray(p) for p in Y]) if isinstance(Y, list) else np.asarray(Y)
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"X and Y must be 2-D, got shapes {X.shape} and {Y.shape}")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    return X, Y


# ----------------------------------------------------------------------------
# Units on the cluster or on threads
# ----------------------------------------------------------------------------


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
        As :func:`~dmlr.model_selection.grid_search_cv`'s ``client``.
    n_jobs : int or None
        Threads without a cluster (None: one per core; 1: one unit at a time,
        in this thread).
    """

    def __init__(self, shared: tuple, client=None, n_jobs: int | None = 1):
        self.shared = tuple(shared)
        self.client = resolve_client(client)
        self.n_jobs = (os.cpu_count() or 1) if n_jobs is None else int(n_jobs)
        self._scattered = None  # worker address -> the shared data there (futures or scattered)
        self._owned: list = []

    @property
    def backend(self) -> str:
        return "local" if self.client is None else "dask"

    @property
    def slots(self) -> int:
        """Units that run at once: the cluster's worker threads, or ``n_jobs``."""
        if self.client is None:
            return max(1, self.n_jobs)
        from dmlr.distributed.client import cluster_workers

        return max(1, sum(int(w.get("nthreads", 1)) for w in cluster_workers(self.client).values()))

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


def resolve_client(client):
    """The Dask client the units run on, or None to run them in this process."""
    if isinstance(client, str):
        if client != "local":
            raise ValueError(f"client must be a distributed.Client, 'local' or None, got {client!r}")
        return None
    if client is None:  # the configured client, else the current one; never start a cluster here
        from dmlr.distributed.placement import current_client

        return get_config()["client"] or current_client()
    return client


# ----------------------------------------------------------------------------
# Checkpoint of finished units
# ----------------------------------------------------------------------------


def _unit_key(setting: dict, name, value, fold: int, source: tuple, n_rows: int) -> str:
    """A unit's name in the checkpoint: the stage's rows, the parameter setting, the fold, and
    the values its warm start came from (``source``: the neighbour's and the predictor's; the
    same fit reached by another path is another unit)."""
    text = json.dumps([n_rows, sorted(setting.items()), name, repr(value), fold, repr(source)], default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class UnitStore:
    """A directory of finished units: ``search.json`` (the search, ``fingerprint``) and
    ``units/<key>.json`` (metrics, iterations, seconds) beside ``units/<key>.npz`` (the
    fitted model, a dmlr model file).

    Parameters
    ----------
    path : str or Path
    resume : bool
        Reuse the units recorded there; without it an existing checkpoint raises
        ``FileExistsError``.
    fingerprint : dict
        What identifies the search (JSON); a checkpoint of another search raises ``ValueError``.
    """

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

    def get(self, key: str) -> FitOutcome | None:
        """The :class:`FitOutcome` of a recorded unit, or None."""
        meta, model = self.units / f"{key}.json", self.units / f"{key}.npz"
        if not meta.exists() or not model.exists():
            return None
        values, n_iter, seconds = json.loads(meta.read_text())
        from dmlr.models.base import load_model

        return FitOutcome({k: float(v) for k, v in values.items()}, int(n_iter), float(seconds), load_model(model))

    def put(self, key: str, out: FitOutcome) -> None:
        """Record a finished unit: its fitted model (a dmlr model file), then its outcome (the
        unit counts as recorded once both exist)."""
        if hasattr(out.model, "save"):
            out.model.save(self.units / f"{key}.npz")  # atomic (BaseModel.save)
        _write_atomic(self.units / f"{key}.json", json.dumps([out.metrics, out.n_iter, out.seconds]))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".partial-{path.name}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
