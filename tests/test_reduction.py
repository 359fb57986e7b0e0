"""The blocks' results summed on the workers (``ClusterChunks.map_reduce``).

Along a fixed tree of the blocks, so that a fit gives the same bits whatever
the number of workers and wherever the blocks live; and the client sends the
arguments once and receives one result per call, so that its traffic does not
grow with the workers. Fits that lose a worker (SIGKILL) are in
``test_faults.py``.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from distributed import Client

import dmlr
import dmlr.distributed.chunks as chunks_module
from dmlr.datasets import make_multilabel
from dmlr.distributed.chunks import make_chunkset, tree_reduce, tree_split
from dmlr.distributed.client import cluster_workers
from dmlr.distributed.traffic import CommBytes
from dmlr.models import RBRL
from dmlr.objectives import rbrl as objective

N_WORKERS = 4
N_BLOCKS = 4


@pytest.fixture(scope="module")
def client4():
    from dmlr.distributed import local_cluster

    with local_cluster(N_WORKERS, 1) as cluster, Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(N_WORKERS, timeout=60)
        yield client


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    path = tmp_path_factory.mktemp("reduction") / "set.zarr"
    store = make_multilabel(
        path, n_samples=1600, n_features=30, n_labels=8, cardinality=2.0, chunk_rows=100, dtype="float64", seed=5
    )
    X, Y = dmlr.open_dataset(store).arrays(None)
    return np.asarray(X.compute()), np.asarray(Y.compute())


def test_the_tree_splits_runs_as_pairing_neighbours_level_by_level_does():
    for n in range(2, 40):
        m = tree_split(0, n)
        assert 0 < m < n and m & (m - 1) == 0 and m < n <= 2 * m  # the largest power of two below n
    combine = lambda a, b: f"({a}+{b})"  # noqa: E731
    assert tree_reduce(list("abcdefg"), combine) == "(((a+b)+(c+d))+((e+f)+g))"


@pytest.mark.parametrize(
    "solver, kind", [("lbfgs", "dense"), ("lbfgs", "sparse"), ("adaptive", "dense"), ("adaptive", "sparse")]
)
def test_same_bits_on_1_2_and_4_workers_and_with_the_blocks_moved(client4, arrays, solver, kind, monkeypatch):
    """The same 4 blocks on 1, 2 and 4 workers, and placed on the workers in another order: the
    same objective history and coefficients to the bit (the APG's speculative calls included,
    whose blocks keep their last point on the workers)."""
    X, Y = arrays
    if kind == "sparse":
        X = sp.csr_matrix(np.where(np.abs(X) > 0.8, X, 0.0))
    params = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=40, tol=0.0, solver=solver)
    workers = sorted(cluster_workers(client4))
    fits, where = {}, {}
    placed = chunks_module.block_workers

    def recording(ws, n):
        out = placed(ws, n)
        where[len(fits)] = out
        return out

    monkeypatch.setattr(chunks_module, "block_workers", recording)
    for k in (1, 2, 4):
        with dmlr.config_context(backend="dask", client=client4, n_blocks=N_BLOCKS, workers=workers[:k]):
            fits[f"{k} workers"] = RBRL(**params).fit(X, Y)
    # the blocks moved: block i on worker (3 i + 1) mod 4, no two neighbours on one worker
    monkeypatch.setattr(chunks_module, "block_workers", lambda ws, n: [ws[(3 * i + 1) % len(ws)] for i in range(n)])
    with dmlr.config_context(backend="dask", client=client4, n_blocks=N_BLOCKS, workers=workers):
        fits["moved"] = RBRL(**params).fit(X, Y)

    assert [len(set(w)) for w in where.values()] == [1, 2, 4]  # the fits did use 1, 2 and 4 workers
    reference = fits.pop("1 workers")
    assert reference.backend_ == "dask" and reference.n_iter_ == params["max_iter"]
    for name, model in fits.items():
        np.testing.assert_array_equal(model.objective_history_, reference.objective_history_, err_msg=name)
        np.testing.assert_array_equal(model.coef_, reference.coef_, err_msg=name)
    # and the same sums as the blocks in this process (threads, the same tree)
    with dmlr.config_context(backend="local", n_blocks=N_BLOCKS):
        local = RBRL(**params).fit(X, Y)
    np.testing.assert_allclose(local.objective_history_, reference.objective_history_, rtol=1e-12, atol=0)


def test_client_traffic_per_call_does_not_grow_with_the_workers(client4):
    """Counted on the client's sockets: a summed call sends the points once and receives one
    gradient, on 1, 2 and 4 workers; gathering every block's result (``map_blocks``) receives one
    per worker, which the count sees."""
    rng = np.random.default_rng(0)
    n, d, l = 2000, 199, 40
    X = rng.standard_normal((n, d))
    Y = (rng.random((n, l)) < 0.1).astype(np.int8)
    points = rng.standard_normal((2, d + 1, l))
    point_bytes, grad_bytes = points.nbytes, 8 * (d + 1) * l
    workers = sorted(cluster_workers(client4))
    calls = 5
    summed, gathered = {}, {}
    for k in (1, 2, 4):
        chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client4, workers=workers[:k])
        try:
            assert chunks.n_blocks == k
            reference = chunks.map_reduce(objective.block_value_and_grad, points, 1, 0.01)  # actors built
            with CommBytes.of_client(client4) as counter:
                for out, call in ((summed, chunks.map_reduce), (gathered, chunks.map_blocks)):
                    before = counter.totals()
                    for _ in range(calls):
                        result = call(objective.block_value_and_grad, points, 1, 0.01)
                    out[k] = (counter.totals() - before)[:2] / calls  # [in, out] from and to the workers
        finally:
            chunks.close()
        np.testing.assert_allclose(tree_reduce(result, chunks_module.add_results)[1], reference[1], rtol=1e-12)
    for k in (1, 2, 4):
        received, sent = summed[k]
        assert grad_bytes <= received <= 1.2 * grad_bytes, (k, summed)
        assert point_bytes <= sent <= 1.2 * point_bytes, (k, summed)
    assert summed[4][0] <= 1.1 * summed[1][0] and summed[4][1] <= 1.1 * summed[1][1], summed
    # the count does see per-worker traffic: gathered results grow with the workers
    assert gathered[4][0] >= 3.5 * grad_bytes and gathered[4][1] >= 3.5 * point_bytes, gathered


def _wait_for_file(block, path: str, timeout: float):
    """A block call that returns 1.0 once ``path`` exists, 0.0 if it did not appear in time."""
    import os
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return 1.0
        time.sleep(0.01)
    return 0.0


def test_a_started_call_returns_before_the_blocks_finish(client4, arrays, tmp_path):
    """``map_reduce_async`` sends the call and returns: the blocks here wait for a file that this
    process writes only after it returned (a call that waited for its blocks would see every block
    give up, 0.0)."""
    X, Y = arrays
    gate = tmp_path / "gate"
    chunks = make_chunkset(X, Y, fit_intercept=False, backend="dask", client=client4, n_blocks=N_BLOCKS)
    try:
        assert chunks.map_reduce(_wait_for_file, str(gate), 0.0) == 0.0  # builds the actors
        wait = chunks.map_reduce_async(_wait_for_file, str(gate), 60.0)
        gate.touch()
        assert wait() == N_BLOCKS
    finally:
        chunks.close()


def test_blocks_in_this_process_run_on_their_threads_while_the_caller_goes_on(arrays):
    """Several blocks in this process: a started call returns while its blocks wait for the
    caller, and gives the sum ``map_reduce`` gives, to the bit."""
    import threading

    X, Y = arrays
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="local", n_blocks=N_BLOCKS)
    assert chunks.n_blocks == N_BLOCKS
    gate = threading.Event()

    def gated(block, W):
        assert gate.wait(60), "the caller never went on"
        return objective.block_value_and_grad(block, W, 0, 0.01)

    W = np.random.default_rng(1).normal(size=(1, X.shape[1] + 1, Y.shape[1]))
    wait = chunks.map_reduce_async(gated, W)
    gate.set()  # reached only if the call above returned before its blocks finished
    values, grad = wait()
    expected_values, expected_grad = chunks.map_reduce(objective.block_value_and_grad, W, 0, 0.01)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(grad, expected_grad)
    chunks.close()


@pytest.fixture
def wide(client4):
    """A problem whose W (201 x 40 float64, 64 KB) dwarfs a call's other messages."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1200, 200))
    Y = (rng.random((1200, 40)) < 0.15).astype(np.int8)
    return X, Y


@pytest.mark.parametrize("solver", ["lbfgs", "adaptive"])
def test_a_fit_on_the_workers_leaves_the_client_out_of_its_iterations(client4, wide, solver, monkeypatch):
    """The solver runs on block 0's worker (``dmlr.distributed.root``): 60 more iterations add
    no call over the blocks from the client and less than one W to its traffic either way
    (driven from the client, each iteration sent W out and received a gradient back)."""
    from dmlr.distributed import root
    from dmlr.distributed.chunks import ClusterChunks

    monkeypatch.setattr(root, "BACKUP_SECONDS", float("inf"))  # no copies of the state here
    X, Y = wide
    W_bytes = 8 * (X.shape[1] + 1) * Y.shape[1]
    calls = [0]

    def counting(original):
        def call(self, *args, **kwargs):
            calls[0] += 1
            return original(self, *args, **kwargs)

        return call

    for name in ("map_reduce", "map_reduce_async", "map_blocks"):
        monkeypatch.setattr(ClusterChunks, name, counting(getattr(ClusterChunks, name)))
    params = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, tol=0.0, solver=solver)
    moved, n_calls = {}, {}
    with CommBytes.of_client(client4) as counter, dmlr.config_context(backend="dask", client=client4, n_blocks=4):
        for iters in (20, 80):
            before, calls[0] = counter.totals(), 0
            model = RBRL(max_iter=iters, **params).fit(X, Y)
            assert model.backend_ == "dask" and model.n_iter_ == iters
            moved[iters], n_calls[iters] = (counter.totals() - before)[:2], calls[0]
    assert n_calls[80] == n_calls[20], n_calls
    received, sent = moved[80] - moved[20]
    assert received < W_bytes and sent < W_bytes, (moved, W_bytes)


@pytest.mark.parametrize("solver", ["lbfgs", "adaptive"])
def test_segments_of_one_iteration_give_the_same_bits(client4, arrays, solver, monkeypatch):
    """The solver resumed from its state at every iteration on the workers (one-iteration
    segments, the state copied to the client after each) ends at the bits of one long segment."""
    from dmlr.distributed import root

    X, Y = arrays
    params = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=40, tol=0.0, solver=solver)
    with dmlr.config_context(backend="dask", client=client4, n_blocks=N_BLOCKS):
        monkeypatch.setattr(root, "FIRST_SEGMENT", 1000)
        whole = RBRL(**params).fit(X, Y)
        monkeypatch.setattr(root, "FIRST_SEGMENT", 1)
        monkeypatch.setattr(root, "SEGMENT_SECONDS", 0.0)
        monkeypatch.setattr(root, "BACKUP_SECONDS", 0.0)
        segmented = RBRL(**params).fit(X, Y)
    assert whole.n_iter_ == segmented.n_iter_ == params["max_iter"]
    np.testing.assert_array_equal(segmented.objective_history_, whole.objective_history_)
    np.testing.assert_array_equal(segmented.coef_, whole.coef_)


def test_a_fit_on_the_workers_reports_its_progress(client4, arrays, monkeypatch, capsys):
    """The iterations run on a worker; their progress lines appear here, in order."""
    import re

    from dmlr.distributed import root

    monkeypatch.setattr(root, "SEGMENT_SECONDS", 0.0)
    X, Y = arrays
    with dmlr.config_context(backend="dask", client=client4):
        RBRL(alpha=1.0, max_iter=30, tol=0.0, verbose=10).fit(X, Y)
    shown = [int(t) for t in re.findall(r"iter\s+(\d+)", capsys.readouterr().out)]
    assert shown == [1, 10, 20, 30], shown
