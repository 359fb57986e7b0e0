"""Checkpoints and resume (issue 6): the solver's state, the Zarr checkpoint, a killed client.

* solver level, numpy only: a run interrupted after t iterations and resumed
  from its :class:`~dmlr.solvers.apg.APGState` computes the uninterrupted
  run's numbers bit for bit, for every step rule (backtracking, restart and
  the ``gradient_tol`` reference included);
* model level, in process: the same through the Zarr checkpoint, fingerprint
  checks, a crash in the middle of a checkpoint write, the CLI;
* the client process killed (SIGKILL) in the middle of ``dmlr.fit``, with the
  rows in the process (``backend="local"``) and on a Dask cluster that the
  killed process had started; ``dmlr.fit(..., resume=True)`` then ends at the
  model of an uninterrupted fit.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from problems import least_squares_nuclear
from sklearn.pipeline import make_pipeline

import dmlr
from dmlr.cli import main as cli_main
from dmlr.datasets import make_multilabel
from dmlr.kernel_approximation import KernelFeatures
from dmlr.models import RBRL, KernelRBRL
from dmlr.solvers import apg
from dmlr.solvers import checkpoint as ckpt_mod
from dmlr.solvers.apg import APGState
from dmlr.solvers.checkpoint import Checkpoint, CheckpointMismatchError, Handover
from dmlr.solvers.lbfgs import LBFGSState, lbfgs

# ---------------------------------------------------------------------------
# Solver level (numpy, no cluster)
# ---------------------------------------------------------------------------


class _Interrupted(Exception):
    pass


def _problem(seed=3):
    """min 1/2 ||A W - B||^2 + lam ||W||_* (tests/problems.py), lam = 2."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(60, 8)) * np.linspace(0.2, 2.0, 8)
    B = A @ rng.normal(size=(8, 5)) + 3.0 * rng.normal(size=(60, 5))
    oracle, prox = least_squares_nuclear(A, B, 2.0)
    return oracle, prox, np.linalg.norm(A, 2) ** 2, rng


# step rules as RBRL runs them: "paper" (loose L, plain FISTA), "backtracking" (L far too small,
# restart, gradient_tol), "spectral" (tight L, backtracking + restart + gradient_tol), and a warm
# start (gradient_tol's reference computed at the origin)
RULES = {
    "paper": dict(scale=30.0, backtracking=False, restart=False, gradient_tol=None, warm=False),
    "backtracking": dict(scale=1 / 1024, backtracking=True, restart=True, gradient_tol=1e-7, warm=False),
    "spectral": dict(scale=1.0, backtracking=True, restart=True, gradient_tol=1e-7, warm=False),
    "spectral_warm": dict(scale=0.6, backtracking=True, restart=True, gradient_tol=1e-7, warm=True),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_apg_resumed_from_a_state_repeats_the_uninterrupted_run_bit_for_bit(rule):
    cfg = RULES[rule]
    oracle, prox, L_true, rng = _problem()
    x0 = 0.1 * rng.normal(size=(8, 5)) if cfg["warm"] else np.zeros((8, 5))
    kw = dict(
        lipschitz=cfg["scale"] * L_true,
        max_iter=400,
        tol=1e-9,
        backtracking=cfg["backtracking"],
        restart=cfg["restart"],
        gradient_tol=cfg["gradient_tol"],
    )
    full = apg(oracle, prox, x0, **kw)
    assert 60 < full.n_iter < 400 and full.converged
    if cfg["backtracking"]:
        assert full.n_restarts > 0
    if rule in ("backtracking", "spectral_warm"):
        assert full.n_backtracks > 0

    states = []
    apg(oracle, prox, x0, checkpoint=(7, states.append), **kw)
    assert [s.n_iter for s in states] == list(range(7, full.n_iter, 7))

    for t in (7, 21, 56):  # interrupt right after the checkpoint at t (the process dies there)
        saved = {}

        def save_and_die(state, t=t, saved=saved):
            if state.n_iter == t:
                saved["state"] = copy.deepcopy(state)
                raise _Interrupted

        with pytest.raises(_Interrupted):
            apg(oracle, prox, x0, checkpoint=(7, save_and_die), **kw)
        state = saved["state"]
        assert state.objective_history == full.objective_history[:t]
        # a fresh process knows only the state: no x0 values, no L
        res = apg(oracle, prox, np.full_like(x0, np.nan), state=state, **{**kw, "lipschitz": 1.0})
        assert res.n_iter == full.n_iter and res.converged == full.converged
        assert res.objective_history == full.objective_history  # bitwise, the whole history
        assert np.array_equal(res.x, full.x)
        assert res.lipschitz == full.lipschitz
        assert (res.n_backtracks, res.n_restarts, res.n_oracle_calls) == (
            full.n_backtracks,
            full.n_restarts,
            full.n_oracle_calls,
        )
        assert len(res.seconds) == res.n_iter and res.seconds[t] >= state.seconds[-1]

    # the comparison is sharp: losing any part of the state changes the iterates
    state = states[2]
    for field, value in (
        ("b", 1.0),
        ("lipschitz", state.lipschitz * 2),
        ("G", state.W),
        ("f_G", 0.0),
        ("reference_mapping", 1e-300),
    ):
        if field == "f_G" and not cfg["backtracking"]:
            continue  # f(G) is read by the backtracking test only
        if field == "reference_mapping" and cfg["gradient_tol"] is None:
            continue
        bad = apg(oracle, prox, x0, state=APGState(**{**state.__dict__, field: value}), **kw)
        assert bad.objective_history != full.objective_history, field


@pytest.mark.parametrize("memory", [5, 100])  # the pairs' buffer wraps around; it does not
def test_lbfgs_resumed_from_a_state_repeats_the_uninterrupted_run_bit_for_bit(memory):
    rng = np.random.default_rng(4)
    A = rng.normal(size=(60, 8)) * np.linspace(0.2, 2.0, 8)
    B = A @ rng.normal(size=(8, 5)) + 3.0 * rng.normal(size=(60, 5))
    oracle, _ = least_squares_nuclear(A, B, 0.0)
    x0 = 0.1 * rng.normal(size=(8, 5))  # a warm start: the gradient test's reference is a call at 0
    # gradient_tol well above rounding: at 1e-9, 100 pairs stalled short of it on one CPU and not on another
    kw = dict(nuclear=0.5, tol=1e-13, gradient_tol=1e-8, max_iter=400, memory=memory)
    full = lbfgs(oracle, x0, **kw)
    assert full.converged and 30 < full.n_iter < 400
    assert np.linalg.matrix_rank(full.x, tol=1e-6) == 5  # a smooth optimum: no handover

    states = []
    lbfgs(oracle, x0, checkpoint=(7, states.append), **kw)
    calls = [s.n_iter for s in states]
    assert len(calls) > 3 and all(b - a >= 7 for a, b in zip(calls, calls[1:], strict=False))
    pairs = len(states[-1].S)  # with 5 kept, the buffer has wrapped around
    assert (pairs == 5 and states[-1].newest < 4) if memory == 5 else 5 < pairs < memory
    for state in (states[0], states[len(states) // 2], states[-1]):
        saved = copy.deepcopy(state)  # a fresh process knows only the state: no x0 values
        res = lbfgs(oracle, np.full_like(x0, np.nan), state=saved, **kw)
        assert res.objective_history == full.objective_history  # bitwise, the whole history
        assert np.array_equal(res.x, full.x) and res.converged
        assert (res.n_iter, res.n_oracle_calls) == (full.n_iter, full.n_oracle_calls)

    # the comparison is sharp: losing any part of the state changes the iterates
    state = states[len(states) // 2]
    for changed in (
        {"SY": state.SY * (1 + 1e-6)},
        {"YY": state.YY * (1 + 1e-6)},
        {"S": state.S * (1 + 1e-6)},
        {"products": state.products * (1 + 1e-6)},
        {"step": state.step / 2},
        {"reference": state.reference * 1e6},
    ):
        bad = lbfgs(oracle, x0, state=dataclasses.replace(state, **changed), **kw)
        assert bad.objective_history != full.objective_history, sorted(changed)
    # a state saved without the direction's products (an earlier dmlr's) resumes, computing them
    again = lbfgs(oracle, x0, state=dataclasses.replace(state, products=None), **kw)
    n = min(again.n_iter, full.n_iter)
    assert again.converged and np.allclose(again.objective_history[:n], full.objective_history[:n])
    with pytest.raises(ValueError, match="products"):
        lbfgs(oracle, x0, state=dataclasses.replace(state, products=state.products[:, 1:]), **kw)
    with pytest.raises(ValueError, match="max_iter"):
        lbfgs(oracle, x0, state=state, **{**kw, "max_iter": state.n_iter})
    with pytest.raises(ValueError, match="shape"):
        lbfgs(oracle, np.zeros((8, 4)), state=state, **kw)


def test_apg_state_is_checked():
    oracle, prox, L, _ = _problem()
    states = []
    apg(oracle, prox, np.zeros((8, 5)), lipschitz=L, max_iter=20, tol=0.0, checkpoint=(5, states.append))
    with pytest.raises(ValueError, match="max_iter"):
        apg(oracle, prox, np.zeros((8, 5)), lipschitz=L, max_iter=10, state=states[1])
    with pytest.raises(ValueError, match="shape"):
        apg(oracle, prox, np.zeros((8, 4)), lipschitz=L, state=states[1])
    with pytest.raises(ValueError, match="checkpoint"):
        apg(oracle, prox, np.zeros((8, 5)), lipschitz=L, checkpoint=(0, states.append))
    # no state after the last iteration: a finished run is not a checkpoint
    assert [s.n_iter for s in states] == [5, 10, 15]


# ---------------------------------------------------------------------------
# Model level, in process: through the Zarr checkpoint
# ---------------------------------------------------------------------------

# tol=0: exactly max_iter iterations; n_blocks=2: the same sums in this process and on 2 workers
PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=60, tol=0.0, solver="paper")
#: Execution settings of every fit here (the killed-client subprocess sets them too).
SETTINGS = dict(n_blocks=2)


@pytest.fixture(autouse=True, scope="module")
def _two_blocks():
    with dmlr.config_context(**SETTINGS):
        yield


EVERY = 5


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "set.zarr"
    return make_multilabel(
        path, n_samples=1200, n_features=24, n_labels=8, cardinality=2.0, chunk_rows=128, dtype="float64", seed=5
    )


@pytest.fixture(scope="module")
def reference(store):
    """The uninterrupted in-process fit."""
    with dmlr.config_context(backend="local"):
        return dmlr.fit(store, "rbrl", **PARAMS)


def _interrupt_at(monkeypatch, t: int):
    """Make the fit die (an exception) right after its checkpoint at iteration ``t`` is written."""
    save = Checkpoint.save_state

    def save_then_die(self, state):
        save(self, state)
        if state.n_iter == t:
            raise _Interrupted

    monkeypatch.setattr(Checkpoint, "save_state", save_then_die)


def _assert_same_model(model, ref, attr="coef_"):
    a, b = getattr(model, attr), getattr(ref, attr)
    rel = np.linalg.norm(a - b) / np.linalg.norm(b)
    assert rel <= 1e-12, f"{attr} differs by {rel:.3g} (relative)"
    assert model.n_iter_ == ref.n_iter_ and model.converged_ == ref.converged_
    np.testing.assert_allclose(model.objective_history_, ref.objective_history_, rtol=1e-12, atol=0)
    assert (model.n_backtracks_, model.n_restarts_) == (ref.n_backtracks_, ref.n_restarts_)


VARIANTS = {
    "linear-paper": dict(),
    # gradient_tol "auto" = tol, restart and backtracking on; tol > 0: stops by the tests, not max_iter
    "linear-spectral": dict(solver="spectral", tol=1e-7, max_iter=400),
    "linear-backtracking": dict(solver="backtracking", tol=1e-6, max_iter=400),
    # L falls and rises with the objective values, and the stopping test is calibrated to paper L
    "linear-adaptive": dict(solver="adaptive", tol=1e-6, max_iter=400),
    "kernel-rbf": dict(kernel="rbf", gamma=0.05, solver="spectral", max_iter=100),
    "nystroem": dict(),
}


def _variant_model(variant):
    """A fresh estimator of the variant: RBRL, KernelRBRL, or a Pipeline of Nystroem features and RBRL."""
    params = {**PARAMS, **VARIANTS[variant]}
    if variant == "kernel-rbf":
        return KernelRBRL(**params)
    if variant == "nystroem":
        return make_pipeline(KernelFeatures("rbf", n_components=40, random_state=3), RBRL(**params))
    return RBRL(**params)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_fit_resumed_from_a_zarr_checkpoint_is_the_uninterrupted_fit(store, tmp_path, monkeypatch, variant):
    params = {**PARAMS, **VARIANTS[variant]}
    with dmlr.config_context(backend="local"):
        ref_pipe = ref = dmlr.fit(store, _variant_model(variant))
    if variant == "nystroem":
        ref = ref_pipe[-1]
    assert ref.n_iter_ > 20 and ref.resumed_from_iteration_ == 0
    if params.get("tol"):
        assert ref.converged_ and ref.n_restarts_ > 0
    if variant == "linear-backtracking":
        assert ref.n_backtracks_ > 0
    ck = tmp_path / "ck"
    _interrupt_at(monkeypatch, 20)
    with pytest.raises(_Interrupted):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, _variant_model(variant), checkpoint=ck, checkpoint_every=EVERY)
    monkeypatch.undo()
    assert Checkpoint(ck).states() == [20] and not Checkpoint(ck).info()["complete"]

    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, _variant_model(variant), checkpoint=ck, checkpoint_every=EVERY, resume=True)
    if variant == "nystroem":  # the features were rebuilt from random_state
        assert np.array_equal(model[0].landmarks_, ref_pipe[0].landmarks_)
        model = model[-1]
    assert model.resumed_from_iteration_ == 20
    attr = "dual_coef_" if variant == "kernel-rbf" else "coef_"
    assert np.array_equal(getattr(model, attr), getattr(ref, attr))  # in process: bit for bit
    assert model.objective_history_ == ref.objective_history_
    _assert_same_model(model, ref, attr)
    assert model.lipschitz_ == ref.lipschitz_
    if variant == "kernel-rbf":
        assert np.array_equal(model.support_, ref.support_) and model.gamma_ == ref.gamma_
    # the model file records where the fit came from
    loaded = dmlr.load(model.save(tmp_path / "m.npz"))
    assert loaded.resumed_from_iteration_ == 20

    # the checkpoint is marked complete and holds the final result: resuming again returns it, no iteration
    info = Checkpoint(ck).info()
    assert info["complete"] and info["iteration"] == ref.n_iter_ and Checkpoint(ck).states() == [ref.n_iter_]
    monkeypatch.setattr("dmlr.models.rbrl.apg", None)  # calling the solver would fail
    with dmlr.config_context(backend="local"):
        again = dmlr.fit(store, _variant_model(variant), checkpoint=ck, checkpoint_every=EVERY, resume=True)
    if variant == "nystroem":
        again = again[-1]
    assert again.resumed_from_iteration_ == ref.n_iter_
    assert np.array_equal(getattr(again, attr), getattr(ref, attr))
    assert again.objective_history_ == ref.objective_history_


@pytest.mark.parametrize(
    "alpha_nuclear, kind",
    [(0.1, LBFGSState), (100.0, Handover)],  # full rank at the optimum; rank-deficient: handed to APG
)
def test_lbfgs_fit_resumed_from_a_zarr_checkpoint_is_the_uninterrupted_fit(
    store, tmp_path, monkeypatch, alpha_nuclear, kind
):
    params = {**PARAMS, "solver": "lbfgs", "tol": 1e-7, "max_iter": 400, "alpha_nuclear": alpha_nuclear}
    with dmlr.config_context(backend="local"):
        ref = dmlr.fit(store, RBRL(**params))
    assert ref.converged_ and ref.n_iter_ > 15
    assert np.isfinite(ref.lipschitz_) == (kind is Handover)  # APG ran after L-BFGS
    ck = tmp_path / "ck"
    save, hit = Checkpoint.save_state, []

    def save_then_die(self, state):  # the first checkpoint of that kind from iteration 10 on
        save(self, state)
        if isinstance(state, kind) and state.n_iter >= 10:
            hit.append(state.n_iter)
            raise _Interrupted

    monkeypatch.setattr(Checkpoint, "save_state", save_then_die)
    with pytest.raises(_Interrupted):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, RBRL(**params), checkpoint=ck, checkpoint_every=EVERY)
    monkeypatch.undo()
    assert Checkpoint(ck).states() == hit and isinstance(Checkpoint(ck).load(), kind)

    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, RBRL(**params), checkpoint=ck, checkpoint_every=EVERY, resume=True)
    assert model.resumed_from_iteration_ == hit[0]
    assert np.array_equal(model.coef_, ref.coef_)  # in process: bit for bit
    assert model.objective_history_ == ref.objective_history_
    _assert_same_model(model, ref)
    assert Checkpoint(ck).info()["complete"]


def test_resume_without_a_checkpoint_starts_from_scratch(store, reference, tmp_path):
    ck = tmp_path / "none-yet"
    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, "rbrl", checkpoint=ck, resume=True, **PARAMS)
    assert model.resumed_from_iteration_ == 0
    assert np.array_equal(model.coef_, reference.coef_)
    assert Checkpoint(ck).info()["complete"]
    # killed before its first checkpoint: an empty checkpoint, also a start from scratch
    ck2 = tmp_path / "empty"
    Checkpoint(ck2).create(json.loads(json.dumps(Checkpoint(ck).read_meta()["fingerprint"])))
    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, "rbrl", checkpoint=ck2, resume=True, **PARAMS)
    assert model.resumed_from_iteration_ == 0 and np.array_equal(model.coef_, reference.coef_)
    with pytest.raises(ValueError, match="needs a checkpoint"):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, "rbrl", resume=True, **PARAMS)
    with pytest.raises(ValueError, match="checkpoint_every"):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, "rbrl", checkpoint=ck, checkpoint_every=0, **PARAMS)


def test_a_checkpoint_of_another_problem_is_refused(store, reference, tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    _interrupt_at(monkeypatch, 15)
    with pytest.raises(_Interrupted):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, "rbrl", checkpoint=ck, checkpoint_every=EVERY, **PARAMS)
    monkeypatch.undo()
    X, Y = (a.compute() for a in dmlr.open_dataset(store).arrays("train"))

    def resume(data=store, **changed):
        with dmlr.config_context(backend="local"):
            return dmlr.fit(data, "rbrl", checkpoint=ck, checkpoint_every=EVERY, resume=True, **{**PARAMS, **changed})

    with pytest.raises(CheckpointMismatchError, match=r"alpha_rank=0\.02 here, 0\.01 in the checkpoint"):
        resume(alpha_rank=0.02)
    with pytest.raises(CheckpointMismatchError, match="alpha=.*alpha_nuclear="):
        resume(alpha=2.0, alpha_nuclear=0.2)
    with pytest.raises(ValueError, match="solver='spectral' here"):  # a ValueError, as the issue asks
        resume(solver="spectral")
    with pytest.raises(CheckpointMismatchError, match="fit_intercept"):
        resume(fit_intercept=False)
    with pytest.raises(CheckpointMismatchError, match="training rows"):
        resume(split="all")
    # same shape, other values: a tiny change of one entry, labels of one row, or the feature order
    X2 = X.copy()
    X2[7, 3] *= 1 + 1e-6
    with pytest.raises(CheckpointMismatchError, match="training data differ"):
        resume(data=(X2, Y))
    Y2 = Y.copy()
    Y2[11] = 1 - Y2[11]
    with pytest.raises(CheckpointMismatchError, match="training data differ"):
        resume(data=(X, Y2))
    with pytest.raises(CheckpointMismatchError, match="training data differ"):
        resume(data=(X[:, ::-1].copy(), Y))
    other = make_multilabel(
        tmp_path / "other.zarr",
        n_samples=1200,
        n_features=24,
        n_labels=8,
        cardinality=2.0,
        chunk_rows=128,
        dtype="float64",
        seed=6,
    )
    with pytest.raises(CheckpointMismatchError, match="written for a different problem: .*training"):
        resume(data=other)
    # none of this touched the checkpoint; the same problem (as arrays, in other blocks, with a larger
    # max_iter cap reached later) resumes
    assert Checkpoint(ck).states() == [15]
    with dmlr.config_context(n_blocks=3):
        model = resume(data=(X, Y))
    assert model.resumed_from_iteration_ == 15
    _assert_same_model(model, reference)


def test_a_crash_during_a_checkpoint_write_leaves_the_previous_one(store, reference, tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    write = ckpt_mod._write_array
    calls = []

    def write_then_crash(group, name, values):
        calls.append(name)
        if len(calls) > 2 * len(ckpt_mod.STATE_ARRAYS) and name == "grad":  # 3rd state (t=15), after W and G
            raise _Interrupted
        write(group, name, values)

    monkeypatch.setattr(ckpt_mod, "_write_array", write_then_crash)
    with pytest.raises(_Interrupted):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, "rbrl", checkpoint=ck, checkpoint_every=EVERY, **PARAMS)
    monkeypatch.undo()
    # the half-written state is there, under its temporary name, and ignored
    partial = [p.name for p in ck.iterdir() if p.name.startswith(".partial-")]
    assert len(partial) == 1 and partial[0].startswith(".partial-it-000000015"), partial
    assert {"W", "G"} <= {p.name for p in (ck / partial[0]).iterdir()}
    assert Checkpoint(ck).states() == [10]
    state = Checkpoint(ck).load()
    assert state.n_iter == 10 and state.objective_history == reference.objective_history_[:10]

    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, "rbrl", checkpoint=ck, checkpoint_every=EVERY, resume=True, **PARAMS)
    assert model.resumed_from_iteration_ == 10
    assert np.array_equal(model.coef_, reference.coef_)
    assert model.objective_history_ == reference.objective_history_
    assert sorted(p.name for p in ck.iterdir()) == ["it-000000060", "zarr.json"]  # partial write cleaned up


def test_checkpoint_paths_that_are_not_ours_are_left_alone(store, reference, tmp_path, monkeypatch):
    # the data store by mistake: refused, not overwritten
    for resume in (False, True):
        with pytest.raises(ValueError, match="not a dmlr checkpoint"):
            with dmlr.config_context(backend="local"):
                dmlr.fit(store, "rbrl", checkpoint=store, resume=resume, **PARAMS)
    assert dmlr.open_dataset(store).n_samples == 1200
    # an unfinished checkpoint is not overwritten by a fit that does not resume it
    ck = tmp_path / "ck"
    _interrupt_at(monkeypatch, 10)
    with pytest.raises(_Interrupted):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, "rbrl", checkpoint=ck, checkpoint_every=EVERY, **PARAMS)
    monkeypatch.undo()
    with pytest.raises(FileExistsError, match="unfinished fit .*iteration 10"):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, "rbrl", checkpoint=ck, checkpoint_every=EVERY, **PARAMS)
    assert Checkpoint(ck).states() == [10]
    # a complete one is replaced by a new fit (of another problem, here)
    with dmlr.config_context(backend="local"):
        dmlr.fit(store, "rbrl", checkpoint=ck, resume=True, **PARAMS)
    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, "rbrl", checkpoint=ck, **{**PARAMS, "alpha": 0.5})
    assert model.resumed_from_iteration_ == 0
    assert Checkpoint(ck).read_meta()["fingerprint"]["params"]["alpha"] == 0.5
    # a complete checkpoint that stopped at max_iter cannot stand for a fit with another max_iter
    with pytest.raises(ValueError, match="finished fit"):
        with dmlr.config_context(backend="local"):
            dmlr.fit(store, "rbrl", checkpoint=ck, resume=True, **{**PARAMS, "alpha": 0.5, "max_iter": 80})


def test_checkpoint_writes_overlap_the_next_iterations(store, reference, tmp_path, monkeypatch):
    from dmlr.models import rbrl

    steps = []  # APG steps (prox calls) of the solver
    prox = rbrl.prox_nuclear_norm
    monkeypatch.setattr(rbrl, "prox_nuclear_norm", lambda *a, **k: (steps.append(1), prox(*a, **k))[1])
    save = Checkpoint.save_state
    seen = []

    def slow_save(self, state):
        before = len(steps)
        time.sleep(0.3)
        seen.append((state.n_iter, before, len(steps)))
        save(self, state)

    monkeypatch.setattr(Checkpoint, "save_state", slow_save)
    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, "rbrl", checkpoint=tmp_path / "ck", checkpoint_every=EVERY, **PARAMS)
    assert [t for t, _, _ in seen] == list(range(EVERY, PARAMS["max_iter"], EVERY))
    # the solver went on while each state was being written (up to the next checkpoint, where it waits)
    assert all(after > before for _, before, after in seen), seen
    assert np.array_equal(model.coef_, reference.coef_)


def test_background_writer_runs_one_write_at_a_time_and_reraises():
    import threading

    from dmlr.solvers.checkpoint import BackgroundWriter

    release, log = threading.Event(), []

    def write(x):
        if x == 1:
            assert release.wait(10)
        if x == 3:
            raise OSError("disk full")
        log.append(x)

    w = BackgroundWriter(write)
    w(1)  # returns while the write waits
    assert log == []
    release.set()
    w(2)  # waits for 1 first
    assert log[0] == 1
    w.wait()
    assert log == [1, 2]
    w(3)
    with pytest.raises(OSError, match="disk full"):
        w(4)  # the failed write stops the next checkpoint
    assert log == [1, 2]
    w(5)
    w.wait()
    w(3)
    w.wait(raise_error=False)  # a fit that fails for another reason keeps its own error
    w.wait()
    assert log == [1, 2, 5]


def test_cli_checkpoint_and_resume(store, tmp_path, monkeypatch, capsys):
    ck, out = tmp_path / "ck", tmp_path / "m.npz"
    with dmlr.config_context(backend="local"):
        reference = dmlr.fit(store, "rbrl", **PARAMS)
    args = [
        "fit",
        str(store),
        "--out",
        str(out),
        "--model",
        "rbrl",
        "--alpha",
        "1",
        "--alpha-rank",
        "0.01",
        "--alpha-nuclear",
        "0.1",
        "--max-iter",
        "60",
        "--tol",
        "0",
        "--solver",
        "paper",
        "--backend",
        "local",
        "--quiet",
        "--checkpoint",
        str(ck),
        "--checkpoint-every",
        "4",
    ]
    _interrupt_at(monkeypatch, 24)
    with pytest.raises(_Interrupted):
        cli_main(args)
    monkeypatch.undo()
    capsys.readouterr()
    assert cli_main(args) == 2
    assert "unfinished fit" in capsys.readouterr().err
    assert cli_main(args + ["--resume"]) == 0
    assert f"resumed from the checkpoint at iteration 24 in {ck}" in capsys.readouterr().out
    model = dmlr.load(out)
    assert model.resumed_from_iteration_ == 24
    assert np.array_equal(model.coef_, reference.coef_)
    assert model.objective_history_ == reference.objective_history_
    assert cli_main(["fit", str(store), "--out", str(out), "--resume"]) == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# The client process killed (SIGKILL) in the middle of dmlr.fit
# ---------------------------------------------------------------------------

#: Run in a subprocess: ``dmlr.fit`` of the store with a checkpoint, the model saved at the end.
FIT_SCRIPT = """
import json
import os
import sys
import time
from pathlib import Path

import dmlr
import dmlr.models.rbrl as rbrl


def main():
    cfg = json.loads(sys.argv[1])
    if cfg["sleep"]:
        # a slower client, so that the test can kill it mid-fit: each APG step (the prox, which
        # runs in this process whatever the backend) waits; the numbers are not touched
        prox = rbrl.prox_nuclear_norm

        def slow_prox(*args, **kwargs):
            time.sleep(cfg["sleep"])
            return prox(*args, **kwargs)

        rbrl.prox_nuclear_norm = slow_prox
    if cfg["backend"] == "dask":
        from distributed import Client
        from dmlr.distributed import local_cluster

        with local_cluster(2, 1) as cluster, Client(cluster, set_as_default=False) as client:
            Path(cfg["pids"]).write_text(json.dumps(sorted(client.run(os.getpid).values())))
            model = fit(cfg, client)
    else:
        model = fit(cfg, None)
    model.save(cfg["out"])
    print(json.dumps({"resumed_from": model.resumed_from_iteration_, "backend": model.backend_}))


def fit(cfg, client):
    with dmlr.config_context(backend=cfg["backend"], **cfg["settings"]):
        return dmlr.fit(cfg["store"], "rbrl", client=client, checkpoint=cfg["checkpoint"],
                        checkpoint_every=cfg["every"], resume=cfg["resume"], **cfg["params"])


if __name__ == "__main__":  # worker processes are spawned: they import this file
    main()
"""
KILL_PARAMS = {**PARAMS, "max_iter": 100}
KILL_AFTER = 15  # iterations in the checkpoint before the kill
SLEEP = 0.05  # seconds per APG step of the killed client: 100 iterations take >= 5 s


@pytest.fixture(scope="module")
def kill_reference(store):
    with dmlr.config_context(backend="local"):
        return dmlr.fit(store, "rbrl", **KILL_PARAMS)


def _script(tmp_path, cfg, name) -> tuple[list, Path, Path]:
    script = tmp_path / "fit_script.py"
    script.write_text(FIT_SCRIPT)
    return [sys.executable, str(script), json.dumps(cfg)], tmp_path / f"{name}.out", tmp_path / f"{name}.err"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _fit_and_kill(tmp_path, cfg, timeout=240.0) -> int:
    """Start the fit in a subprocess, SIGKILL it once the checkpoint holds >= KILL_AFTER iterations."""
    cmd, out, err = _script(tmp_path, cfg, "killed")
    ck = Checkpoint(cfg["checkpoint"])
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=tmp_path)
    try:
        deadline = time.monotonic() + timeout
        while (ck.latest() or 0) < KILL_AFTER:  # polls the checkpoint group's states
            assert proc.poll() is None, f"the fit ended before the kill:\n{err.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no checkpoint after {timeout} s:\n{err.read_text()[-3000:]}"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not Path(cfg["out"]).exists()
    info = ck.info()  # the kill may have come during a checkpoint write: the last complete state counts
    assert not info["complete"]
    t = info["iteration"]
    assert KILL_AFTER <= t < cfg["params"]["max_iter"] and t % cfg["every"] == 0
    return t


def _check_resumed(model, ref, t):
    assert model.resumed_from_iteration_ == t > 0
    _assert_same_model(model, ref)


def test_killed_client_in_process_fit_resumes_to_the_same_model(store, kill_reference, tmp_path):
    ck = tmp_path / "ck"
    cfg = dict(
        store=str(store),
        backend="local",
        checkpoint=str(ck),
        every=EVERY,
        resume=False,
        sleep=SLEEP,
        params=KILL_PARAMS,
        settings=SETTINGS,
        out=str(tmp_path / "never.npz"),
        pids=None,
    )
    t = _fit_and_kill(tmp_path, cfg)
    saved = Checkpoint(ck).load()
    assert saved.n_iter == t
    np.testing.assert_allclose(saved.objective_history, kill_reference.objective_history_[:t], rtol=1e-12, atol=0)

    with dmlr.config_context(backend="local"):
        model = dmlr.fit(store, "rbrl", checkpoint=ck, checkpoint_every=EVERY, resume=True, **KILL_PARAMS)
    _check_resumed(model, kill_reference, t)
    assert model.objective_history_[:t] == saved.objective_history  # the first part is the checkpoint's
    assert model.objective_seconds_[t - 1] == saved.seconds[-1]
    assert Checkpoint(ck).info()["complete"]


def test_killed_client_with_its_own_dask_cluster_resumes_to_the_same_model(store, kill_reference, tmp_path):
    ck, pids = tmp_path / "ck", tmp_path / "pids.json"
    cfg = dict(
        store=str(store),
        backend="dask",
        checkpoint=str(ck),
        every=EVERY,
        resume=False,
        sleep=SLEEP,
        params=KILL_PARAMS,
        settings=SETTINGS,
        out=str(tmp_path / "model.npz"),
        pids=str(pids),
    )
    workers = []
    try:
        t = _fit_and_kill(tmp_path, cfg)
        workers = json.loads(pids.read_text())
        assert len(workers) == 2
        # the worker processes die with the client that started them
        deadline = time.monotonic() + 60
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in workers), "worker processes outlived the killed client"

        # a new client process, a new cluster: resume
        cmd, _, _ = _script(tmp_path, {**cfg, "resume": True, "sleep": 0}, "resumed")
        done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        report = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert report == {"resumed_from": t, "backend": "dask"}
    finally:
        for p in workers:  # only if the test failed above: the worker processes of the killed client
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    model = dmlr.load(cfg["out"])
    _check_resumed(model, kill_reference, t)
    assert Checkpoint(ck).info()["complete"]
