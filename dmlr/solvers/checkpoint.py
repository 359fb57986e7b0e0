"""Solver checkpoints in a Zarr v3 group: resume a fit after the client process died.

``RBRL().fit(X, Y, checkpoint=PATH, checkpoint_every=k)`` (or
``dmlr.fit(..., checkpoint=PATH, checkpoint_every=k)``, or
``dmlr fit ... --checkpoint PATH --checkpoint-every k``) writes the solver's
full state (:class:`dmlr.solvers.apg.APGState`, or
:class:`dmlr.solvers.lbfgs.LBFGSState` under ``solver="lbfgs"``) to
``PATH`` every ``k`` iterations; after the process is killed, the same call with ``resume=True``
continues from the last complete checkpoint and ends at the model the
uninterrupted fit gives (the same iterates: nothing is recomputed).

The directory's layout and its atomic writes are described by
:class:`Checkpoint`, the background writes by :class:`BackgroundWriter`, what
``resume`` does with a complete or a foreign checkpoint by :func:`open_for_fit`,
and what identifies the problem by :func:`make_fingerprint`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import re
import shutil
import threading
import uuid
from pathlib import Path

import numpy as np
import zarr

from dmlr.solvers.apg import APGResult, APGState
from dmlr.solvers.lbfgs import Handover, LBFGSState

CHECKPOINT_FORMAT_VERSION = 1
_KIND = "checkpoint"
_STATE_KIND = "checkpoint-state"
_STATE_RE = re.compile(r"^it-(\d{9,})$")
_PARTIAL_PREFIX = ".partial-"
#: Arrays of an unfinished / final state.
STATE_ARRAYS = ("W", "G", "grad", "objective_history", "seconds")
FINAL_ARRAYS = ("W", "objective_history", "seconds")
LBFGS_ARRAYS = ("x", "grad", "S", "Y", "SY", "YY", "best_x", "objective_history", "seconds")


class CheckpointMismatchError(ValueError):
    """A checkpoint was written for a different problem than the one being fitted."""


# ---------------------------------------------------------------------------
# Fingerprint of the training data (computed on the row blocks)
# ---------------------------------------------------------------------------

_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
#: Rows per tile of the dense hash (a few MiB of temporaries whatever the block).
_HASH_TILE_VALUES = 2**19


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on a uint64 array (arithmetic mod 2^64)."""
    h = h ^ (h >> np.uint64(30))
    h = h * _M1
    h = h ^ (h >> np.uint64(27))
    h = h * _M2
    return h ^ (h >> np.uint64(31))


def _keys(n: int, salt: int) -> np.ndarray:
    """One fixed pseudo-random uint64 key per column (integer hashing: the same everywhere)."""
    return _mix(np.arange(n, dtype=np.uint64) + np.uint64((salt * _GOLDEN) % 2**64))


def _terms(bits: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Hash of each (value bits, column) entry; exactly 0 for a 0.0 entry, so CSR and dense agree."""
    return _mix(bits ^ keys) - _mix(keys)


def block_fingerprint(block) -> np.ndarray:
    """An exact content hash of one row block (summed over blocks by ``map_reduce``).

    Each row hashes the bit patterns of its float64 values with their
    column indices, and its labels, to a 64-bit number; the block's hash is
    the sum of its rows' hashes mod 2^64. Integer sums are exact and
    commutative, so the total over all blocks is the same however the rows
    are split into blocks or ordered (neither changes the problem), and
    changes with any change of a value (one bit), of the order of features
    or labels, or of the set of rows. A zero entry hashes to 0: a CSR and a
    dense copy of the same data agree. One pass over the data.

    Returns
    -------
    uint64 (1,)
    """
    X, Y = block.X, block.Y
    m, p = X.shape
    kx = _keys(p, 1)
    if hasattr(X, "indptr"):  # scipy CSR
        bits = np.ascontiguousarray(X.data, dtype=np.float64).view(np.uint64)
        t = _terms(bits, kx[X.indices])
        cs = np.concatenate([np.zeros(1, dtype=np.uint64), np.cumsum(t, dtype=np.uint64)])
        rx = cs[X.indptr[1:]] - cs[X.indptr[:-1]]
    else:
        X = np.ascontiguousarray(X, dtype=np.float64)
        rx = np.empty(m, dtype=np.uint64)
        step = max(1, _HASH_TILE_VALUES // max(p, 1))
        for a in range(0, m, step):
            rx[a : a + step] = _terms(X[a : a + step].view(np.uint64), kx).sum(axis=1, dtype=np.uint64)
    ry = _terms(np.asarray(Y).astype(np.int64).view(np.uint64), _keys(Y.shape[1], 2)).sum(axis=1, dtype=np.uint64)
    rows = _mix(rx + _mix(ry ^ np.uint64(_GOLDEN)))
    return np.array([rows.sum(dtype=np.uint64)], dtype=np.uint64)


def data_fingerprint(chunks) -> dict:
    """The JSON fingerprint of a chunk set's data: row count and :func:`block_fingerprint` summed."""
    h = chunks.map_reduce(block_fingerprint)
    return {"n_rows": int(chunks.n_rows), "hash": f"{int(h[0]):016x}"}


def _jsonable(value):
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def make_fingerprint(model: str, params: dict, x_shape, data: dict) -> dict:
    """The checkpoint fingerprint (JSON) of a fit.

    It says what is being fitted -- the estimator's parameters that change
    the problem or its stopping rule (lambdas, kernel, gamma, degree, coef0,
    kernel approximation, n_components, random_state, tol, gradient_tol,
    fit_intercept, step, restart), the shape of the solver's variable (which
    gives the feature and label counts), and the training data: the row count
    and an exact 64-bit content hash of the rows the solver sees
    (:func:`block_fingerprint`: one pass over the row blocks, independent of how
    they are split into blocks; for approximate-kernel features, the hash of the
    features, rebuilt from ``random_state``). Resuming with a checkpoint of
    another problem raises :class:`CheckpointMismatchError` (a ``ValueError``)
    naming what differs. ``max_iter``, ``backend``, ``n_blocks``, ``verbose``
    and ``kernel_memory`` may differ (the block count changes only the rounding
    of the sums, so a resume on other blocks ends within rounding of the
    uninterrupted model, not bit for bit).
    """
    return json.loads(json.dumps(_jsonable({"model": model, "params": params, "x_shape": list(x_shape), "data": data})))


def compare_fingerprints(saved: dict, current: dict) -> list[str]:
    """What differs between two fingerprints (empty: the same problem)."""
    diffs = []
    if saved.get("model") != current["model"]:
        diffs.append(f"model {current['model']!r} here, {saved.get('model')!r} in the checkpoint")
    sp, cp = saved.get("params", {}), current["params"]
    for key in sorted(set(sp) | set(cp)):
        if sp.get(key, "<absent>") != cp.get(key, "<absent>"):
            diffs.append(f"{key}={cp.get(key, '<absent>')!r} here, {sp.get(key, '<absent>')!r} in the checkpoint")
    if list(saved.get("x_shape", [])) != list(current["x_shape"]):
        diffs.append(
            f"solver variable of shape {tuple(current['x_shape'])} here, "
            f"{tuple(saved.get('x_shape', []))} in the checkpoint"
        )
    sd, cd = saved.get("data", {}), current["data"]
    if sd.get("n_rows") != cd["n_rows"]:
        diffs.append(f"{cd['n_rows']} training rows here, {sd.get('n_rows')} in the checkpoint")
    elif sd.get("hash") != cd["hash"]:
        diffs.append(f"the training data differ (content hash {cd['hash']} here, {sd.get('hash')} in the checkpoint)")
    return diffs


# ---------------------------------------------------------------------------
# The Zarr store
# ---------------------------------------------------------------------------


def _state_name(t: int) -> str:
    return f"it-{int(t):09d}"


def _fsync_tree(path: Path) -> None:
    """Flush every file and directory under ``path`` to disk (best effort on exotic file systems)."""
    for dirpath, _dirnames, filenames in os.walk(path):
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_array(group, name: str, values: np.ndarray) -> None:
    """One float64 array of a state group."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    arr = group.create_array(name, shape=values.shape, dtype="float64")
    arr[...] = values


def _read_array(group, name: str, path) -> np.ndarray:
    try:
        arr = group[name]
    except KeyError:
        raise ValueError(f"{path}: checkpoint state has no array {name!r}") from None
    return np.asarray(arr[...], dtype=np.float64)


class Checkpoint:
    """A checkpoint directory.

    Parameters
    ----------
    path : str or Path

    Notes
    -----
    Layout (format version 1)::

        PATH/                    Zarr v3 group, attrs["dmlr"] = {kind: "checkpoint", format_version: 1,
                                 fingerprint: {...}, dmlr_version, created}
        PATH/it-000000040/       one complete state, attrs["dmlr"] = {kind: "checkpoint-state",
                                 iteration, complete, converged, max_iter, b, lipschitz, f_G,
                                 reference_mapping, n_backtracks, n_restarts, n_oracle_calls, written}
            W                    float64 (d, l)  W_t, the last proximal point (x of the model)
            G                    float64 (d, l)  G_{t+1}, the next extrapolation point   } not in the
            grad                 float64 (d, l)  grad f(G_{t+1})                         } final state
            objective_history    float64 (t,)
            seconds              float64 (t,)

    An L-BFGS state (``solver="lbfgs"``; t counts oracle calls) has attrs
    ``solver: "lbfgs"``, f, step, reference, best_objective, best_smallest and
    n_oracle_calls, and the arrays x, grad (the current iterate and its
    gradient), S, Y (m, d * l) and SY, YY (m, m) (the correction pairs in their
    buffer slots, the newest in slot ``newest``, an attribute, and their inner products),
    best_x, objective_history and seconds. Where L-BFGS handed over to APG (a
    rank-deficient optimum), the APG states carry ``handover: {n_iter,
    n_oracle_calls}`` (the L-BFGS part), and their histories are the whole fit's
    (:class:`~dmlr.solvers.lbfgs.Handover`).

    Floats in the attributes are JSON numbers, which round-trip float64 exactly;
    arrays are float64 with Zarr's lossless default codecs. Nothing is pickled.

    Atomicity: a state group is written under a hidden temporary name inside
    ``PATH`` (``.partial-...``), flushed to disk, and renamed to ``it-<t>`` in
    one ``os.replace``; only then are older states removed. The current state is
    the ``it-*`` group with the highest iteration, so a process killed at any
    moment -- in particular during a write -- leaves the previous state usable
    (leftover partial groups are ignored and removed by the next write). The
    root group is created the same way (written beside ``PATH``, then renamed).
    The path is on a file system of the client (local or mounted): the commit is
    a directory rename, which object stores do not offer.
    """

    def __init__(self, path):
        self.path = Path(path)

    # -- reading -----------------------------------------------------------
    def exists(self) -> bool:
        """Whether ``path`` exists and is not an empty directory."""
        return self.path.exists() and not (self.path.is_dir() and not any(self.path.iterdir()))

    def read_meta(self) -> dict:
        """The root attributes; raises ``ValueError`` if ``path`` is not a dmlr checkpoint."""
        try:
            g = zarr.open_group(str(self.path), mode="r")
            meta = dict(g.attrs).get("dmlr")
        except Exception as e:  # zarr raises several types for a non-group path
            raise ValueError(
                f"{self.path} exists and is not a dmlr checkpoint "
                f"({type(e).__name__}: {e}); refusing to use or overwrite it"
            ) from None
        if not isinstance(meta, dict) or meta.get("kind") != _KIND:
            raise ValueError(
                f"{self.path} exists and is not a dmlr checkpoint (a Zarr group without "
                f"dmlr checkpoint attributes); refusing to use or overwrite it"
            )
        if meta.get("format_version") != CHECKPOINT_FORMAT_VERSION:
            raise ValueError(
                f"{self.path}: checkpoint format version {meta.get('format_version')!r} is not "
                f"supported (this dmlr reads version {CHECKPOINT_FORMAT_VERSION})"
            )
        return meta

    def states(self) -> list[int]:
        """Iterations of the complete states present, ascending."""
        if not self.path.is_dir():
            return []
        its = []
        for entry in self.path.iterdir():
            m = _STATE_RE.match(entry.name)
            if m and entry.is_dir():
                its.append(int(m.group(1)))
        return sorted(its)

    def latest(self) -> int | None:
        """Iteration of the current state (None: no state yet)."""
        its = self.states()
        return its[-1] if its else None

    def info(self) -> dict | None:
        """Attributes of the current state (iteration, complete, ...), or None."""
        t = self.latest()
        if t is None:
            return None
        return dict(zarr.open_group(str(self.path / _state_name(t)), mode="r").attrs)["dmlr"]

    def load(self):
        """The current state: None, an :class:`~dmlr.solvers.apg.APGState`, an
        :class:`~dmlr.solvers.lbfgs.LBFGSState`, a :class:`~dmlr.solvers.lbfgs.Handover`, or (complete)
        ``(APGResult, attrs)``."""
        t = self.latest()
        if t is None:
            return None
        where = self.path / _state_name(t)
        g = zarr.open_group(str(where), mode="r")
        a = dict(g.attrs).get("dmlr")
        if not isinstance(a, dict) or a.get("kind") != _STATE_KIND or a.get("iteration") != t:
            raise ValueError(f"{where}: not a dmlr checkpoint state")
        hist = _read_array(g, "objective_history", where).tolist()
        seconds = _read_array(g, "seconds", where).tolist()
        if a.get("complete"):
            res = APGResult(
                x=_read_array(g, "W", where),
                objective_history=hist,
                n_iter=t,
                converged=bool(a["converged"]),
                seconds=seconds,
                lipschitz=float(a["lipschitz"]),
                n_backtracks=int(a["n_backtracks"]),
                n_restarts=int(a["n_restarts"]),
                n_oracle_calls=int(a["n_oracle_calls"]),
            )
            return res, a
        if a.get("solver") == "lbfgs":
            arrays = {name: _read_array(g, name, where) for name in LBFGS_ARRAYS}
            arrays["objective_history"], arrays["seconds"] = hist, seconds
            # a state written before L-BFGS kept its direction's products has none: computed again
            arrays["products"] = _read_array(g, "products", where) if "products" in g else None
            return LBFGSState(
                n_iter=t,
                f=float(a["f"]),
                step=float(a["step"]),
                reference=float(a["reference"]),
                best_objective=float(a["best_objective"]),
                best_smallest=float(a["best_smallest"]),
                n_oracle_calls=int(a["n_oracle_calls"]),
                newest=int(a["newest"]),
                **arrays,
            )
        ref = a.get("reference_mapping")
        handover = a.get("handover")
        if handover is not None:  # split the joined history at the handover
            k = int(handover["n_iter"])
            offset = seconds[k - 1] if k else 0.0
            before = APGResult(
                x=_read_array(g, "W", where),
                objective_history=hist[:k],
                n_iter=k,
                seconds=seconds[:k],
                n_oracle_calls=int(handover["n_oracle_calls"]),
            )
            t, hist, seconds = t - k, hist[k:], [s - offset for s in seconds[k:]]
        state = APGState(
            n_iter=t,
            W=_read_array(g, "W", where),
            G=_read_array(g, "G", where),
            grad=_read_array(g, "grad", where),
            f_G=float(a["f_G"]),
            b=float(a["b"]),
            lipschitz=float(a["lipschitz"]),
            objective_history=hist,
            seconds=seconds,
            n_backtracks=int(a["n_backtracks"]),
            n_restarts=int(a["n_restarts"]),
            n_oracle_calls=int(a["n_oracle_calls"]),
            reference_mapping=None if ref is None else float(ref),
        )
        return state if handover is None else Handover(before, state)

    # -- writing -----------------------------------------------------------
    def create(self, fingerprint: dict) -> None:
        """Create the (empty) checkpoint group atomically; ``path`` must be absent or an empty directory."""
        from dmlr import __version__

        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}{_PARTIAL_PREFIX}{uuid.uuid4().hex[:8]}")
        try:
            g = zarr.open_group(str(tmp), mode="w")
            g.attrs["dmlr"] = {
                "kind": _KIND,
                "format_version": CHECKPOINT_FORMAT_VERSION,
                "fingerprint": fingerprint,
                "dmlr_version": __version__,
                "created": datetime.datetime.now(datetime.UTC).isoformat(),
            }
            _fsync_tree(tmp)
            os.replace(tmp, self.path)  # replaces an empty directory, fails on a non-empty one
            _fsync_dir(self.path.parent)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def discard(self) -> None:
        """Remove a dmlr checkpoint (renamed aside first, so no half-deleted checkpoint stays at ``path``)."""
        self.read_meta()  # never delete anything that is not a checkpoint
        trash = self.path.with_name(f".{self.path.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(self.path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def _write_state(self, t: int, arrays: dict, attrs: dict) -> None:
        """Write one state group under a temporary name, flush, rename into place, drop the older ones."""
        name = _state_name(t)
        final = self.path / name
        tmp = self.path / f"{_PARTIAL_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        g = zarr.open_group(str(tmp), mode="w")
        for key, values in arrays.items():
            _write_array(g, key, values)
        g.attrs["dmlr"] = {
            "kind": _STATE_KIND,
            "iteration": int(t),
            **attrs,
            "written": datetime.datetime.now(datetime.UTC).isoformat(),
        }
        _fsync_tree(tmp)
        if final.exists():  # (not reached by a fit: iterations only grow) never rename onto a state
            shutil.rmtree(final)
        os.replace(tmp, final)  # the commit point
        _fsync_dir(self.path)
        for entry in self.path.iterdir():  # older states and partial writes of killed processes
            m = _STATE_RE.match(entry.name)
            if (m and int(m.group(1)) < t) or entry.name.startswith(_PARTIAL_PREFIX):
                shutil.rmtree(entry, ignore_errors=True)

    def save_state(self, state) -> None:
        """Write an unfinished state (the solver's ``checkpoint`` hook): an
        :class:`~dmlr.solvers.apg.APGState`, an :class:`~dmlr.solvers.lbfgs.LBFGSState`
        or a :class:`~dmlr.solvers.lbfgs.Handover`."""
        if isinstance(state, LBFGSState):
            self._save_lbfgs(state)
            return
        handover = None
        if isinstance(state, Handover):  # one joined history, and where the APG part starts
            before, state = state
            offset = before.seconds[-1] if before.seconds else 0.0
            handover = {"n_iter": int(before.n_iter), "n_oracle_calls": int(before.n_oracle_calls)}
            state = dataclasses.replace(
                state,
                n_iter=before.n_iter + state.n_iter,
                objective_history=list(before.objective_history) + list(state.objective_history),
                seconds=list(before.seconds) + [offset + s for s in state.seconds],
            )
        attrs = {
            "handover": handover,
            "complete": False,
            "converged": False,
            "b": float(state.b),
            "lipschitz": float(state.lipschitz),
            "f_G": float(state.f_G),
            "reference_mapping": None if state.reference_mapping is None else float(state.reference_mapping),
            "n_backtracks": int(state.n_backtracks),
            "n_restarts": int(state.n_restarts),
            "n_oracle_calls": int(state.n_oracle_calls),
        }
        for key in ("b", "lipschitz", "f_G", "reference_mapping"):
            if attrs[key] is not None and not math.isfinite(attrs[key]):
                raise ValueError(f"cannot checkpoint a non-finite {key} ({attrs[key]})")
        self._write_state(
            state.n_iter,
            {
                "W": state.W,
                "G": state.G,
                "grad": state.grad,
                "objective_history": np.asarray(state.objective_history),
                "seconds": np.asarray(state.seconds),
            },
            attrs,
        )

    def _save_lbfgs(self, state: LBFGSState) -> None:
        attrs = {
            "complete": False,
            "converged": False,
            "solver": "lbfgs",
            "f": float(state.f),
            "step": float(state.step),
            "reference": float(state.reference),
            "best_objective": float(state.best_objective),
            "best_smallest": float(state.best_smallest),
            "n_oracle_calls": int(state.n_oracle_calls),
            "newest": int(state.newest),
        }
        for key in ("f", "step", "reference", "best_objective", "best_smallest"):
            if not math.isfinite(attrs[key]):
                raise ValueError(f"cannot checkpoint a non-finite {key} ({attrs[key]})")
        arrays = {name: np.asarray(getattr(state, name)) for name in LBFGS_ARRAYS}
        if state.products is not None:
            arrays["products"] = np.asarray(state.products)
        self._write_state(state.n_iter, arrays, attrs)

    def save_final(self, result: APGResult, max_iter: int) -> None:
        """Mark the checkpoint complete: write the fit's result as the last state."""
        attrs = {
            "complete": True,
            "converged": bool(result.converged),
            "max_iter": int(max_iter),
            "lipschitz": float(result.lipschitz),
            "n_backtracks": int(result.n_backtracks),
            "n_restarts": int(result.n_restarts),
            "n_oracle_calls": int(result.n_oracle_calls),
        }
        self._write_state(
            result.n_iter,
            {
                "W": result.x,
                "objective_history": np.asarray(result.objective_history),
                "seconds": np.asarray(result.seconds),
            },
            attrs,
        )


class BackgroundWriter:
    """Call ``fn(state)`` in a background thread, one call at a time.

    Calling the writer waits for the previous call to finish (re-raising
    its error, if any) and starts the next one; :meth:`wait` waits for the
    last. The solver thus overlaps a checkpoint write with its next
    iterations.

    A fit's states are written by one such writer, one at a time, while the
    solver goes on: the arrays of a state are never modified after the solver
    hands them over. A write still in progress at the next checkpoint is waited
    for, and a failed write stops the fit there with its error.
    """

    def __init__(self, fn):
        self.fn = fn
        self._thread = None
        self._error = None

    def __call__(self, state) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._run, args=(state,), name="dmlr-checkpoint", daemon=True)
        self._thread.start()

    def _run(self, state) -> None:
        try:
            self.fn(state)
        except BaseException as e:  # re-raised in the solver's thread
            self._error = e

    def wait(self, *, raise_error: bool = True) -> None:
        """Wait for the write in progress; re-raise its error unless ``raise_error=False``."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None and raise_error:
            raise error


def open_for_fit(path, fingerprint: dict, *, resume: bool, max_iter: int):
    """Prepare the checkpoint of a fit.

    When the fit ends, its final result is written as a state with
    ``complete: true`` (``W`` is then the fitted coefficients, no ``G``/``grad``)
    and the intermediate states are removed: the checkpoint is *marked complete*,
    not deleted. ``resume=True`` on a complete checkpoint returns that result
    without iterating (after the same fingerprint check), so a process killed
    between the end of the fit and the saving of the model loses nothing. A new
    fit without ``resume`` replaces a complete checkpoint, but refuses to
    overwrite an unfinished one (:class:`FileExistsError`): pass ``resume=True``
    or remove the directory.

    Returns
    -------
    checkpoint : Checkpoint
        Created (empty) unless resumed.
    saved : None, APGState, LBFGSState, Handover or APGResult
        None: start from scratch (no checkpoint, or no state in it yet, or
        ``resume=False``); a state to continue from; the final
        :class:`~dmlr.solvers.apg.APGResult` of a complete checkpoint (nothing left to do).

    Raises
    ------
    CheckpointMismatchError
        ``resume=True`` with a checkpoint of another problem.
    FileExistsError
        ``resume=False`` and ``path`` holds an unfinished fit.
    ValueError
        ``path`` exists and is not a dmlr checkpoint.
    """
    ckpt = Checkpoint(path)
    if not ckpt.exists():
        ckpt.create(fingerprint)
        return ckpt, None
    meta = ckpt.read_meta()
    if not resume:
        info = ckpt.info()
        if info is not None and not info.get("complete"):
            raise FileExistsError(
                f"{ckpt.path} holds an unfinished fit (checkpoint at iteration "
                f"{info['iteration']}); pass resume=True (--resume) to continue it, or "
                f"remove the directory to start again"
            )
        ckpt.discard()
        ckpt.create(fingerprint)
        return ckpt, None
    diffs = compare_fingerprints(meta.get("fingerprint") or {}, fingerprint)
    if diffs:
        raise CheckpointMismatchError(
            f"cannot resume from {ckpt.path}: it was written for a different problem: " + "; ".join(diffs)
        )
    saved = ckpt.load()
    if isinstance(saved, tuple) and not isinstance(saved, Handover):
        result, attrs = saved
        if not (result.n_iter == max_iter or (result.converged and result.n_iter < max_iter)):
            how = "converged" if result.converged else f"max_iter={attrs.get('max_iter')}"
            raise ValueError(
                f"{ckpt.path} holds a finished fit that stopped at iteration {result.n_iter} ({how}); "
                f"with max_iter={max_iter} it would end elsewhere: remove the checkpoint or fit "
                f"without resume=True"
            )
        return ckpt, result
    return ckpt, saved


def checkpoint_args(checkpoint, every, resume):
    """A fit's checkpoint arguments, validated: ``(path, every, resume)``, or None without a checkpoint."""
    if checkpoint is None:
        if resume:
            raise ValueError("resume=True needs a checkpoint path (checkpoint=...)")
        return None
    if not (isinstance(every, (int, np.integer)) and not isinstance(every, bool) and every >= 1):
        raise ValueError(f"checkpoint_every must be a positive integer, got {every!r}")
    return (checkpoint, int(every), bool(resume))


class CheckpointRun:
    """One fit's use of its checkpoint, for an estimator that hands a solver the hook.

    Opens the checkpoint (:func:`open_for_fit`) and starts the background
    writer; used as a context manager around the solver's run, it lets a
    write in progress land when the run fails (the run's error wins), and
    :meth:`finish` waits for the last write and stores the final result.

    Parameters
    ----------
    request : tuple or None
        ``(path, every, resume)`` of :func:`~dmlr.solvers.checkpoint.checkpoint_args`; None: no checkpoint
        (every attribute below is None and the methods do nothing).
    fingerprint : callable
        ``fingerprint() -> dict``, the problem's :func:`make_fingerprint`, called only with a
        checkpoint (it may read the data).
    max_iter : int

    Attributes
    ----------
    saved : None, state or SolverResult
        What :func:`open_for_fit` found: None (start afresh), a solver state to continue
        from, or the final result of a complete checkpoint (nothing left to run).
    hook : tuple or None
        ``(every, write)``, the solvers' ``checkpoint`` argument; None when there is nothing
        to run.
    """

    def __init__(self, request, fingerprint, max_iter: int):
        self.saved, self.hook, self._store, self._writer = None, None, None, None
        self.max_iter = int(max_iter)
        if request is None:
            return
        path, every, resume = request
        self._store, self.saved = open_for_fit(path, fingerprint(), resume=resume, max_iter=self.max_iter)
        if not self.done:
            self._writer = BackgroundWriter(self._store.save_state)
            self.hook = (every, self._writer)

    @property
    def done(self) -> bool:
        """Whether the checkpoint holds the fit's final result."""
        return isinstance(self.saved, APGResult)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self._writer is not None:
            self._writer.wait(raise_error=False)
        return False

    def finish(self, result) -> None:
        """Wait for the last state's write, then store ``result`` and mark the checkpoint complete."""
        if self._writer is not None:
            self._writer.wait()
            self._store.save_final(result, self.max_iter)
