"""Faults: a worker process killed (SIGKILL) in the middle of a fit.

The row blocks of a fit on a Zarr store are Dask futures computed from the
Zarr-reading graph, so when the worker holding a block dies Dask can compute
the block again from the store on a surviving worker. The fit must then end
with the model an in-process fit gives: same iterations, same coefficients,
same objective history.

Two ways to die, on a 3-worker cluster of one-thread worker processes (3
row blocks, one per worker):

* ``between_calls``: just before the fit's ``KILL_AT``-th map-reduce call,
  this process SIGKILLs the worker process that is the only holder of a block;
* ``inside_oracle``: at the same point, that worker is armed instead, and
  SIGKILLs itself inside its next loss/gradient call, while the other workers
  compute theirs.

Input with no graph to recompute from is covered too: numpy and
scipy.sparse arrays (scattered from this process, rebuilt from the arrays
the chunk set keeps) and the exact kernel model's rows of K (rebuilt by
building the feature block again and its rows of K from it).

The triggers hook only the chunk set's calls over its blocks from this process
(``ClusterChunks.map_reduce`` and ``map_blocks``, and ``run_on_root``: the
solver's segments on block 0's worker, one iteration each here, see
``_one_iteration_segments``) and the per-block loss/gradient functions that
the fit ships to the workers, so they do not depend on how a call reaches
the blocks or where their results are summed. The
rebuilt block holds none of the APG's state (its last point and scores), so
the fit also goes through the path that sends it again.
"""

import logging
import os
import signal
import sys
import time
from collections import Counter

import cloudpickle
import dask
import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.utils import key_split
from worker_probes import factored_points, record_factored_points, run_on_workers

import dmlr
from dmlr.datasets import make_multilabel
from dmlr.distributed import root
from dmlr.distributed.chunks import ClusterChunks
from dmlr.distributed.client import cluster_workers

# tol=0: the fit runs exactly max_iter iterations
#: APG's adaptive rule: its speculative calls are what the kills interrupt (L-BFGS: below).
PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=60, tol=0.0, solver="adaptive")
KILL_AT = 10  # the kill comes at about this iteration
N_WORKERS = 3
#: Task-name prefix of the row blocks (``concat_blocks`` of the chunks read from Zarr).
BLOCK_TASK = "concat_blocks"
#: ... of blocks of arrays in this process, and of an exact kernel model's rows of K.
ARRAY_BLOCK_TASK, KERNEL_BLOCK_TASK = "make_block", "make_kernel_block"


class _BlockCounter(SchedulerPlugin):
    """Counts the row blocks computed (task results reaching memory) on the scheduler, by task prefix."""

    name = "dmlr-test-block-counter"

    def __init__(self):
        self.computed = {t: Counter() for t in (BLOCK_TASK, ARRAY_BLOCK_TASK, KERNEL_BLOCK_TASK)}

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "memory" and key_split(key) in self.computed:
            self.computed[key_split(key)][key] += 1


@pytest.fixture(autouse=True)
def _one_iteration_segments(monkeypatch):
    """The solver's segments on block 0's worker (:mod:`dmlr.distributed.root`) one iteration
    long after the first: a kill "between calls" then falls between two iterations."""
    monkeypatch.setattr(root, "SEGMENT_SECONDS", 0.0)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("faults") / "set.zarr"
    return make_multilabel(
        path, n_samples=3000, n_features=40, n_labels=10, cardinality=2.0, chunk_rows=128, dtype="float64", seed=11
    )


@pytest.fixture(scope="module")
def local_model(store):
    with dmlr.config_context(backend="local"):
        return dmlr.fit(store, "rbrl", **PARAMS)


@pytest.fixture
def cluster3():
    # no work stealing: a block stays on the one worker that computed it (stealing an oracle
    # task would copy it to another worker, and the kill would then not lose it)
    with (
        dask.config.set({"distributed.scheduler.work-stealing": False}),
        LocalCluster(
            n_workers=N_WORKERS,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        client.wait_for_workers(N_WORKERS, timeout=60)
        counter = _BlockCounter()
        cluster.scheduler.add_plugin(counter)  # the scheduler runs in this process, idle here
        yield cluster, client, counter


def _sole_block_holder(client, task=BLOCK_TASK) -> tuple[str, str]:
    """(worker address, block key) of a ``task`` block that only one worker holds."""
    holders = {}
    for addr, keys in client.has_what().items():
        for k in keys:
            if key_split(k) == task:
                holders.setdefault(k, []).append(addr)
    sole = sorted((addrs[0], k) for k, addrs in holders.items() if len(addrs) == 1)
    assert sole, f"no {task} block is held by exactly one worker: {holders}"
    return sole[0]


def _arm_self_kill(kill_at: int) -> int:
    """Run on a worker (shipped by value, via client.run): its ``kill_at``-th loss/gradient call from now
    SIGKILLs it.

    Functions travel to workers by reference, so the fit's
    ``dmlr.objectives.rbrl.block_value_and_grad`` and
    ``block_extrapolated_value_and_grad`` (the APG's speculative call) resolve
    to these wrappers on that worker only.
    """
    import os
    import signal

    import dmlr.objectives.rbrl as objective

    calls = [0]
    victim = os.getpid()

    def armed(original):
        # a worker passes the functions it was sent on to other workers (the summation tree), and this
        # wrapper, not importable by name, then travels by value: it kills only the armed worker
        def call(*args, **kwargs):
            calls[0] += 1
            if calls[0] == kill_at and os.getpid() == victim:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(*args, **kwargs)

        return call

    for name in ("block_value_and_grad", "block_extrapolated_value_and_grad"):
        setattr(objective, name, armed(getattr(objective, name)))
    return os.getpid()


def _kill_at(monkeypatch, how, pids, task=BLOCK_TASK) -> dict:
    """Make the fit's ``KILL_AT``-th map-reduce call kill the sole holder of a ``task`` block.

    ``how``: "between_calls" (SIGKILL from here, just before the call) or
    "inside_oracle" (the worker kills itself inside its next loss/gradient
    call). Returns the dict that receives the victim's address and block key.
    """
    killed = {}
    calls = [0]

    def trigger(self):
        calls[0] += 1
        if calls[0] == KILL_AT:
            victim, block = _sole_block_holder(self.client, task)
            killed.update(addr=victim, block=block, time=time.time())
            if how == "between_calls":
                os.kill(pids[victim], signal.SIGKILL)
            else:
                module = sys.modules[__name__]
                cloudpickle.register_pickle_by_value(module)  # ship _arm_self_kill itself, not its name
                try:
                    assert self.client.run(_arm_self_kill, 1, workers=[victim]) == {victim: pids[victim]}
                finally:
                    cloudpickle.unregister_pickle_by_value(module)

    for name in ("map_reduce", "map_reduce_async", "map_blocks", "run_on_root"):
        original = getattr(ClusterChunks, name)

        def counting(self, fn, *args, _original=original, **kwargs):
            trigger(self)
            return _original(self, fn, *args, **kwargs)

        monkeypatch.setattr(ClusterChunks, name, counting)
    return killed


def _assert_victim_gone(client, pids, killed):
    assert killed, "the kill was never triggered"
    assert killed["addr"] not in cluster_workers(client), "the victim worker is still in the cluster"
    with pytest.raises(ProcessLookupError):
        os.kill(pids[killed["addr"]], 0)


def _assert_same_model(model, reference, coef="coef_"):
    """Same iterations, coefficients and objective history as the uninterrupted in-process fit."""
    assert model.backend_ == "dask"
    assert model.n_iter_ == reference.n_iter_ == reference.max_iter
    a, b = getattr(model, coef), getattr(reference, coef)
    rel = np.linalg.norm(a - b) / np.linalg.norm(b)
    assert rel <= 1e-10, f"{coef} differs by {rel:.3g} (relative)"
    assert len(model.objective_history_) == len(reference.objective_history_)
    np.testing.assert_allclose(model.objective_history_, reference.objective_history_, rtol=1e-10, atol=0)


@pytest.mark.parametrize("how", ["between_calls", "inside_oracle"])
def test_fit_survives_a_killed_worker(store, local_model, cluster3, monkeypatch, how):
    cluster, client, counter = cluster3
    pids = client.run(os.getpid)
    assert len(set(pids.values())) == N_WORKERS and os.getpid() not in pids.values()
    killed = _kill_at(monkeypatch, how, pids)
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(store, "rbrl", client=client, **PARAMS)

    _assert_victim_gone(client, pids, killed)
    # the block that only it held was computed again from the Zarr chunks
    computed = counter.computed[BLOCK_TASK]
    assert len(computed) == N_WORKERS, computed
    assert computed[killed["block"]] >= 2, f"the lost block was not recomputed: {computed}"
    _assert_same_model(model, local_model)


def test_fit_survives_every_worker_killed_at_once(store, local_model, cluster3, monkeypatch):
    """Every worker SIGKILLed between two calls (their nannies start new ones at new addresses):
    the blocks are computed again from the Zarr chunks on the new workers, wherever they were
    placed first, and the fit ends at the model of the in-process fit."""
    cluster, client, counter = cluster3
    pids = client.run(os.getpid)
    calls = [0]

    def killing(original):
        def call(self, fn, *args, **kwargs):
            calls[0] += 1
            if calls[0] == KILL_AT:
                for pid in pids.values():
                    os.kill(pid, signal.SIGKILL)
            return original(self, fn, *args, **kwargs)

        return call

    for name in ("map_reduce", "map_reduce_async", "run_on_root"):
        monkeypatch.setattr(ClusterChunks, name, killing(getattr(ClusterChunks, name)))
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(store, "rbrl", client=client, **PARAMS)

    assert calls[0] > KILL_AT
    assert not set(pids) & set(cluster_workers(client)), "an old worker is still in the cluster"
    computed = counter.computed[BLOCK_TASK]
    assert len(computed) == N_WORKERS and all(c >= 2 for c in computed.values()), computed
    _assert_same_model(model, local_model)


def test_lbfgs_fit_survives_a_killed_worker(store, cluster3, monkeypatch):
    # the default solver's plain oracle calls; the reference sums over the same 3 blocks: the
    # quasi-Newton model magnifies the rounding of other block sums beyond 1e-10 in 60 calls
    params = {**PARAMS, "solver": "lbfgs"}
    with dmlr.config_context(backend="local", n_blocks=N_WORKERS):
        reference = dmlr.fit(store, "rbrl", **params)
    cluster, client, counter = cluster3
    pids = client.run(os.getpid)
    killed = _kill_at(monkeypatch, "between_calls", pids)
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(store, "rbrl", client=client, **params)
    _assert_victim_gone(client, pids, killed)
    assert counter.computed[BLOCK_TASK][killed["block"]] >= 2
    _assert_same_model(model, reference)


@pytest.mark.parametrize("backup", ["each segment", "none"])
def test_lbfgs_fit_survives_losing_the_worker_that_runs_its_solver(store, cluster3, monkeypatch, backup):
    """The worker of block 0, where the solver runs (``dmlr.distributed.root``), SIGKILLed
    between two segments: the solver goes on from this process's copy of its state (the last
    segment's, or with no copy yet the start) on the new worker of block 0, to the model of the
    in-process fit on the same blocks."""
    params = {**PARAMS, "solver": "lbfgs"}
    with dmlr.config_context(backend="local", n_blocks=N_WORKERS):
        reference = dmlr.fit(store, "rbrl", **params)
    cluster, client, counter = cluster3
    pids = client.run(os.getpid)
    monkeypatch.setattr(root, "BACKUP_SECONDS", 0.0 if backup == "each segment" else float("inf"))
    killed, segments = {}, [0]
    run_on_root = ClusterChunks.run_on_root

    def killing(self, *args):
        segments[0] += 1
        if segments[0] == 4:  # the first segment has 5 iterations, the others one
            victim = self._actors[0]._address
            killed.update(addr=victim)
            os.kill(pids[victim], signal.SIGKILL)
        return run_on_root(self, *args)

    monkeypatch.setattr(ClusterChunks, "run_on_root", killing)
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(store, "rbrl", client=client, **params)
    _assert_victim_gone(client, pids, killed)
    assert segments[0] > 8  # the fit went on for several segments after the kill
    _assert_same_model(model, reference)


#: A nuclear weight that leaves W of rank <= 2 of 10 labels through the fit, so that its
#: speculative calls ship W's low-rank factors (``ChunkOracle.max_factor_fraction``).
LOW_RANK_PARAMS = {**PARAMS, "alpha_nuclear": 3000.0}


@pytest.mark.parametrize("how", ["between_calls", "inside_oracle"])
def test_fit_shipping_low_rank_factors_survives_a_killed_worker(store, cluster3, monkeypatch, how):

    # the reference sums over the same 3 blocks: at this weight, singular values and the adaptive
    # rule's curvature sit near their thresholds, where 1 and 3 blocks' roundings part ways
    with dmlr.config_context(backend="local", n_blocks=N_WORKERS):
        reference = dmlr.fit(store, "rbrl", **LOW_RANK_PARAMS)
    cluster, client, counter = cluster3
    pids = client.run(os.getpid)
    killed = _kill_at(monkeypatch, how, pids)
    run_on_workers(client, record_factored_points)
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(store, "rbrl", client=client, **LOW_RANK_PARAMS)

    _assert_victim_gone(client, pids, killed)
    # the speculative calls' points reached the surviving workers as factors before the kill and after
    factored = [t for times in run_on_workers(client, factored_points).values() for t in times]
    assert any(t < killed["time"] for t in factored) and any(t > killed["time"] for t in factored), factored
    assert counter.computed[BLOCK_TASK][killed["block"]] >= 2
    _assert_same_model(model, reference)


# ---------------------------------------------------------------------------
# Input with no graph to recompute from: numpy / scipy.sparse arrays, and the kernel rows
# ---------------------------------------------------------------------------
#
# Arrays in this process are scattered to the workers, so Dask holds no recipe for a lost block;
# the chunk set keeps the client-side arrays (references, no copy for numpy) and rebuilds a lost
# block from them. The exact kernel model's blocks (rows of K) are built from such blocks, and are
# rebuilt by building the feature block again and then its rows of K.

ARRAY_PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=40, tol=0.0)


@pytest.fixture(scope="module")
def arrays(store):
    X, Y = dmlr.open_dataset(store).arrays(None)
    return np.asarray(X.compute()), np.asarray(Y.compute())


@pytest.mark.parametrize(
    "kind, how", [("numpy", "between_calls"), ("numpy", "inside_oracle"), ("scipy.sparse", "between_calls")]
)
def test_fit_on_in_memory_arrays_survives_a_killed_worker(arrays, cluster3, monkeypatch, kind, how):
    cluster, client, counter = cluster3
    X, Y = arrays
    if kind == "scipy.sparse":
        X = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))
    with dmlr.config_context(backend="local"):
        reference = dmlr.fit((X, Y), "rbrl", **ARRAY_PARAMS)
    pids = client.run(os.getpid)
    killed = _kill_at(monkeypatch, how, pids, ARRAY_BLOCK_TASK)
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit((X, Y), "rbrl", client=client, **ARRAY_PARAMS)

    _assert_victim_gone(client, pids, killed)
    # the lost block was built again from the arrays here: one more block, under a new key
    assert len(counter.computed[ARRAY_BLOCK_TASK]) == N_WORKERS + 1, counter.computed
    assert killed["block"] in counter.computed[ARRAY_BLOCK_TASK]
    _assert_same_model(model, reference)


def test_exact_kernel_fit_rebuilds_lost_rows_of_k(arrays, cluster3, monkeypatch):
    cluster, client, counter = cluster3
    X, Y = arrays[0][:900], arrays[1][:900]
    params = dict(kernel="rbf", **ARRAY_PARAMS)
    with dmlr.config_context(backend="local"):
        reference = dmlr.fit((X, Y), "kernel_rbrl", **params)
    pids = client.run(os.getpid)
    killed = _kill_at(monkeypatch, "between_calls", pids, KERNEL_BLOCK_TASK)
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit((X, Y), "kernel_rbrl", client=client, **params)

    _assert_victim_gone(client, pids, killed)
    # the lost rows of K were built again: their feature block first, then K's rows from it
    assert len(counter.computed[KERNEL_BLOCK_TASK]) == N_WORKERS + 1, counter.computed
    assert len(counter.computed[ARRAY_BLOCK_TASK]) == N_WORKERS + 1, counter.computed
    _assert_same_model(model, reference, "dual_coef_")
