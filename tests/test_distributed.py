"""The distributed layer: same model whatever the workers, blocks and chunks; client discovery."""

import logging

import numpy as np
import pytest
import scipy.sparse as sp

import dmlr
from dmlr.datasets import make_multilabel
from dmlr.distributed.chunks import _group_bounds, choose_backend, tree_reduce
from dmlr.distributed.client import cluster_workers
from dmlr.models import RBRL, KernelRBRL

PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=150, tol=1e-6)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "small.zarr"
    make_multilabel(
        path, n_samples=900, n_features=12, n_labels=7, cardinality=2.0, chunk_rows=64, dtype="float64", seed=3
    )
    return path


@pytest.fixture(scope="module")
def local_model(small_store):
    X, Y = dmlr.open_dataset(small_store).arrays("train")
    with dmlr.config_context(backend="local"):
        return RBRL(**PARAMS).fit(X.compute(), Y.compute())


def test_tree_reduce_order_depends_only_on_count():
    combine = lambda a, b: f"({a}+{b})"  # noqa: E731
    assert tree_reduce(list("abcde"), combine) == "(((a+b)+(c+d))+e)"
    assert _group_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert _group_bounds(2, 5) == [(0, 1), (1, 2)]


def test_auto_backend_keeps_small_data_local(monkeypatch):
    assert choose_backend(np.zeros((100, 10))) == "local"
    # larger data go to a configured cluster; with none, they stay here while they fit its memory
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    assert choose_backend(np.zeros((3000, 2000))) == "local"
    monkeypatch.setattr("distributed.system.MEMORY_LIMIT", 8 * 3000 * 2000 * 4)
    assert choose_backend(np.zeros((3000, 2000))) == "dask"
    monkeypatch.undo()
    # few values but many scores (rows x labels): here without a cluster, on one when configured
    assert choose_backend(np.zeros((20_000, 10)), n_labels=1000) == "local"
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")
    assert choose_backend(np.zeros((3000, 2000))) == "dask"
    assert choose_backend(np.zeros((20_000, 10)), n_labels=1000) == "dask"
    assert choose_backend(np.zeros((20_000, 10)), n_labels=100) == "local"
    with pytest.raises(ValueError):
        choose_backend(np.zeros((2, 2)), "gpu")


def test_two_process_workers_give_the_local_model(small_store, local_model, client2):
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(small_store, "rbrl", client=client2, **PARAMS)
    assert model.backend_ == "dask"
    assert model.n_iter_ == local_model.n_iter_
    np.testing.assert_allclose(model.coef_, local_model.coef_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(model.objective_history_, local_model.objective_history_, rtol=1e-12)


@pytest.mark.parametrize("n_workers", [1, 4])
def test_same_model_with_1_and_4_workers(small_store, local_model, n_workers):
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=False,
            dashboard_address=":0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        with dmlr.config_context(backend="dask"):
            model = dmlr.fit(small_store, "rbrl", client=client, **PARAMS)
        # 2 dask chunks on up to 4 workers: workers without data must not break the fit
        ds = dmlr.open_dataset(small_store, chunk_rows=512)
        with dmlr.config_context(backend="dask", client=client):
            few = RBRL(**PARAMS).fit(*ds.arrays("train"))
    assert model.n_iter_ == local_model.n_iter_
    np.testing.assert_allclose(model.coef_, local_model.coef_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(few.coef_, local_model.coef_, rtol=0, atol=1e-10)


@pytest.mark.parametrize("chunk_rows,n_blocks", [(64, 1), (128, 3), (256, 5)])
def test_same_model_with_other_chunks_and_blocks(small_store, local_model, chunk_rows, n_blocks):
    ds = dmlr.open_dataset(small_store, chunk_rows=chunk_rows)
    X, Y = ds.arrays("train")
    with dmlr.config_context(backend="local", n_blocks=n_blocks):
        model = RBRL(**PARAMS).fit(X, Y)
    with dmlr.config_context(backend="local"):
        ref = RBRL(**PARAMS).fit(*dmlr.open_dataset(small_store).arrays("train"))
    np.testing.assert_allclose(model.coef_, ref.coef_, rtol=0, atol=1e-10)


def test_zarr_fit_evaluate_save_load_on_cluster(small_store, client2, tmp_path):
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(small_store, "rbrl", **PARAMS)
    metrics = dmlr.evaluate(model, small_store)
    assert set(metrics) == set(dmlr.metrics.METRIC_NAMES)
    # learnable signal: far better than predicting by label frequency alone
    assert metrics["ranking_loss"] < 0.25 and metrics["f1_micro"] > 0.4
    again = dmlr.load(model.save(tmp_path / "m.npz"))
    X = dmlr.open_dataset(small_store).X[:50].compute()
    np.testing.assert_array_equal(again.decision_function(X), model.decision_function(X))


def test_get_client_prefers_current_then_configured_address(cluster2, monkeypatch):
    with cluster2.as_current():
        assert dmlr.get_client() is cluster2
    import dask

    addr = cluster2.scheduler.address
    with dask.config.set({"scheduler-address": addr}):
        monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
        from distributed import default_client

        try:
            default_client()
            pytest.skip("another default client is active")
        except ValueError:
            pass
        c = dmlr.get_client(quiet=True)
        try:
            assert c.scheduler.address == addr
        finally:
            c.close()


def test_sparse_store_fits_and_evaluates_the_same_on_both_backends(client2, tmp_path):
    path = make_multilabel(
        tmp_path / "sp.zarr",
        n_samples=1500,
        n_features=300,
        n_labels=9,
        sparse=True,
        density=0.03,
        chunk_rows=256,
        seed=2,
    )
    with dmlr.config_context(backend="local"):
        local = dmlr.fit(path, "rbrl", **PARAMS)
    with dmlr.config_context(backend="dask"):
        remote = dmlr.fit(path, "rbrl", client=client2, **PARAMS)
    assert remote.backend_ == "dask" and local.backend_ == "local"
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=0, atol=1e-10)
    m_local, m_remote = dmlr.evaluate(local, path), dmlr.evaluate(remote, path)
    assert m_local["ranking_loss"] == pytest.approx(m_remote["ranking_loss"], abs=1e-12)
    assert m_local["ranking_loss"] < 0.3


@pytest.mark.parametrize("step", ["paper", "spectral"])
def test_kernel_model_on_two_workers_equals_in_process(small_store, client2, step):
    X, Y = dmlr.open_dataset(small_store).arrays("train")
    params = dict(max_iter=60, tol=1e-6, solver=step)
    with dmlr.config_context(backend="local"):
        local = KernelRBRL("rbf", **params).fit(X.compute(), Y.compute())
    with dmlr.config_context(backend="dask", client=client2):
        remote = KernelRBRL("rbf", **params).fit(X, Y)
    assert remote.backend_ == "dask" and remote.n_iter_ == local.n_iter_
    np.testing.assert_allclose(remote.dual_coef_, local.dual_coef_, rtol=0, atol=1e-9)
    np.testing.assert_allclose(remote.objective_history_, local.objective_history_, rtol=1e-11)


def test_local_cluster_workers_get_the_malloc_setting(client2):
    """dmlr's local workers start with its malloc thresholds (see WORKER_ENVIRON), the trim
    threshold in place of the nanny's own. glibc reads them at process start, so the test
    reads the environment the process was started with (/proc/self/environ), not os.environ."""
    from dmlr.distributed.client import WORKER_ENVIRON

    def start_environ():
        with open("/proc/self/environ", "rb") as fh:
            pairs = [item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item]
        env = {k.decode(): v.decode() for k, v in pairs}
        return {k: env.get(k) for k in (*WORKER_ENVIRON, "MALLOC_TRIM_THRESHOLD_")}

    seen = client2.run(start_environ)
    assert len(seen) == 2
    for env in seen.values():
        assert env["MALLOC_MMAP_THRESHOLD_"] == WORKER_ENVIRON["MALLOC_MMAP_THRESHOLD_"] == str(2**25)
        assert env["MALLOC_TRIM_THRESHOLD_"] == WORKER_ENVIRON["MALLOC_TRIM_THRESHOLD_"] == str(2**26)


def test_local_cluster_workers_run_without_the_statistical_profiler(client2):
    """dmlr's local workers do not sample their threads' stacks (see local_cluster)."""

    def profiler_state(dask_worker):
        import dask

        return dask.config.get("distributed.worker.profile.enabled"), dask_worker.periodic_callbacks.get("profile")

    seen = client2.run(profiler_state)
    assert len(seen) == 2
    assert all(enabled is False and callback is None for enabled, callback in seen.values())


def test_direct_actor_handles_call_the_workers_without_the_scheduler(small_store, client2):
    """The one override of a private attribute of distributed (``Actor._worker_rpc``, in
    ``dmlr.distributed.chunks._direct_actor_handle``): this fails when distributed changes under it,
    i.e. when the handles it makes send their calls through the scheduler's proxy after all."""
    import inspect

    from distributed.actor import Actor

    from dmlr.distributed.chunks import _direct_actor_handle, make_chunkset
    from dmlr.objectives import rbrl as objective

    assert isinstance(inspect.getattr_static(Actor, "_worker_rpc"), property)
    assert isinstance(inspect.getattr_static(_direct_actor_handle(), "_worker_rpc"), property)
    scheduler = client2.cluster.scheduler  # a LocalCluster's scheduler runs in this process
    original = scheduler.handlers["proxy"]
    proxied = []

    async def counting_proxy(msg, worker, serializers=None):
        proxied.append(worker)
        return await original(msg=msg, worker=worker, serializers=serializers)

    X, Y = dmlr.open_dataset(small_store).arrays("train")
    points = np.random.default_rng(0).normal(size=(2, X.shape[1] + 1, Y.shape[1]))
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client2, n_blocks=2)
    scheduler.handlers["proxy"] = counting_proxy
    try:
        direct = chunks.map_reduce(objective.block_value_and_grad, points, 1, 0.01)
        assert proxied == []
        chunks._direct, chunks._actors = False, None  # distributed's own handles, as after the fallback
        through_scheduler = chunks.map_reduce(objective.block_value_and_grad, points, 1, 0.01)
        assert len(proxied) == 1  # the client's one call (to block 0's actor): the count sees it
        chunks.map_blocks(objective.block_value_and_grad, points, 1, 0.01)
        assert len(proxied) == 3  # and one call per block
    finally:
        scheduler.handlers["proxy"] = original
        chunks.close()
    np.testing.assert_array_equal(direct[0], through_scheduler[0])


def test_actor_calls_fall_back_to_the_scheduler_when_workers_are_unreachable(small_store, client2, monkeypatch):
    """A client that cannot connect to the workers directly (only to the scheduler) still
    gets every block's result, through the scheduler."""
    import dask
    from distributed.actor import Actor

    import dmlr.distributed.chunks as chunks_module
    from dmlr.distributed.chunks import make_chunkset
    from dmlr.objectives import rbrl as objective

    class Unreachable(Actor):
        @property
        def _worker_rpc(self):
            return self._client.rpc("tcp://127.0.0.1:9")  # the discard port: connection refused

    monkeypatch.setattr(chunks_module, "_direct_actor_handle", lambda: Unreachable)
    X, Y = dmlr.open_dataset(small_store).arrays("train")
    points = np.random.default_rng(0).normal(size=(2, X.shape[1] + 1, Y.shape[1]))
    local = make_chunkset(X.compute(), Y.compute(), fit_intercept=True, backend="local", n_blocks=2)
    expected = local.map_reduce(objective.block_value_and_grad, points, 1, 0.01)
    from distributed import Client

    # a client of its own: its connection pool reads the connect timeout when it is made
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "2s"}),
        Client(client2.scheduler.address, set_as_default=False) as client,
    ):
        remote = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client, n_blocks=2)
        got = remote.map_reduce(objective.block_value_and_grad, points, 1, 0.01)
        assert remote._direct is False
        remote.close()
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12, atol=1e-12)


def _keys_held(keys, dask_worker=None):
    return sorted(str(k) for k in keys if k in dask_worker.data or k in dask_worker.state.actors)


def test_closed_chunks_leave_no_block_or_actor_on_the_workers(small_store, client2):
    """After ``close()`` returns, no worker holds the set's blocks or the actors that hold them,
    without the client's garbage collector: each actor call leaves a reference cycle in
    distributed's handle (and with it the actor's key), which would keep the blocks on the workers
    until a collection happened to run, after the next fit of a search had loaded its own."""
    import gc

    from dmlr.distributed.chunks import make_chunkset
    from dmlr.objectives import rbrl as objective

    X, Y = dmlr.open_dataset(small_store).arrays("train")
    points = np.random.default_rng(0).normal(size=(2, X.shape[1] + 1, Y.shape[1]))
    gc.collect()
    gc.disable()
    try:
        chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client2, n_blocks=2)
        for _ in range(2):
            chunks.map_reduce(objective.block_value_and_grad, points, 1, 0.01)
        keys = [f.key for f in chunks.futures] + [a.key for a in chunks._actors]
        assert any(client2.run(_keys_held, keys).values())
        chunks.close()
        assert client2.run(_keys_held, keys) == {w: [] for w in cluster_workers(client2)}
    finally:
        gc.enable()


def _block_arrays(block):
    return block.X, block.Y


def _dependencies(keys, dask_scheduler=None):
    return {str(k): sorted(str(d.key) for d in dask_scheduler.tasks[k].dependencies) for k in keys}


@pytest.mark.parametrize("sparse_chunks", [False, True])
def test_blocks_are_built_part_by_part_in_their_own_task(client2, sparse_chunks):
    """A block's task reads its row parts one at a time (the worker holds the block and one part,
    or, sparse, the converted parts), rather than depending on one task per part, whose results
    would all be in memory beside the block; the block is the one ``concat_blocks`` makes."""
    import dask.array as da
    import sparse

    from dmlr.data.blocks import concat_blocks
    from dmlr.distributed.chunks import make_chunkset

    rng = np.random.default_rng(5)
    Xn = rng.standard_normal((135, 6)).astype(np.float32)
    if sparse_chunks:
        Xn[rng.random(Xn.shape) < 0.6] = 0.0
    Yn = (rng.random((135, 5)) < 0.3).astype(np.int8)
    X = da.from_array(Xn, chunks=((30, 30, 30, 45), (6,))) * 2.0  # a graph of two layers
    if sparse_chunks:
        X = X.map_blocks(sparse.COO.from_numpy, dtype=X.dtype)
    Y = da.from_array(Yn, chunks=((30, 30, 30, 45), (5,)))
    cs = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client2, n_blocks=2)
    try:
        keys = [f.key for f in cs.futures]
        assert client2.run_on_scheduler(_dependencies, keys) == {str(k): [] for k in keys}
        blocks = client2.gather([client2.submit(_block_arrays, f, pure=False) for f in cs.futures])
    finally:
        cs.close()
    for (Xb, Yb), (a, b) in zip(blocks, [(0, 68), (68, 135)]):
        expected = concat_blocks([X[a:b].compute()], [Yn[a:b]], fit_intercept=True)
        assert Yb.dtype == np.int8
        np.testing.assert_array_equal(Yb, expected.Y)
        if sparse_chunks:
            assert sp.isspmatrix_csr(Xb) and Xb.dtype == np.float64
            for name in ("data", "indices", "indptr"):
                np.testing.assert_array_equal(getattr(Xb, name), getattr(expected.X, name))
        else:
            assert Xb.dtype == np.float64 and Xb.flags.c_contiguous
            np.testing.assert_array_equal(Xb, expected.X)


def test_concat_blocks_consuming_its_sparse_parts_gives_the_same_block():
    from dmlr.data.blocks import concat_blocks

    rng = np.random.default_rng(2)
    parts = [sp.random(n, 7, density=0.3, format="csr", random_state=rng) for n in (4, 9, 5)]
    ys = [np.zeros((p.shape[0], 2), dtype=np.int8) for p in parts]
    kept = concat_blocks(parts, ys, True)
    consumed = list(parts)
    block = concat_blocks(consumed, ys, True, consume=True)
    assert consumed == [None, None, None] and all(p is not None for p in parts)
    for name in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(getattr(block.X, name), getattr(kept.X, name))


_INTERVALS: list = []


def _sleep_and_record(block, seconds):
    import time

    start = time.perf_counter()
    time.sleep(seconds)
    _INTERVALS.append((start, time.perf_counter()))
    return np.zeros(1)


def test_blocks_on_one_multithreaded_worker_run_side_by_side(small_store):
    """Two blocks on one worker with two threads are computed at the same time, not in turn."""
    from distributed import Client, LocalCluster

    from dmlr.distributed.chunks import make_chunkset

    X, Y = dmlr.open_dataset(small_store).arrays("train")
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0", silence_logs=logging.ERROR
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client)
        assert chunks.n_blocks == 2
        _INTERVALS.clear()
        chunks.map_reduce(_sleep_and_record, 0.5)
        chunks.close()
    (a0, a1), (b0, b1) = sorted(_INTERVALS)
    assert b0 < a1, f"the second block started {b0 - a1:.2f} s after the first ended"


def _block_first_row_or_fail(block, fail_on):
    if block.n_rows == fail_on:
        raise ValueError("this block fails")
    return block.X[0, 0]


def test_in_process_blocks_run_side_by_side_in_block_order():
    from dmlr.distributed.chunks import make_chunkset

    X = np.arange(60, dtype=float).reshape(30, 2)
    Y = (X[:, :1] > 20).astype(np.int8) * np.ones((1, 2), dtype=np.int8)
    chunks = make_chunkset(X, Y, fit_intercept=False, backend="local", n_blocks=3)
    _INTERVALS.clear()
    chunks.map_reduce(_sleep_and_record, 0.5)
    (a0, a1), (b0, b1), _ = sorted(_INTERVALS)
    assert b0 < a1, f"the second block started {b0 - a1:.2f} s after the first ended"
    # results in block order (rows 0, 10, 20 start the blocks), and a block's error is raised here
    assert chunks.map_blocks(_block_first_row_or_fail, -1) == [0.0, 20.0, 40.0]
    with pytest.raises(ValueError, match="this block fails"):
        chunks.map_blocks(_block_first_row_or_fail, 10)
    chunks.close()


def test_in_process_data_gets_a_block_per_core_only_when_big(monkeypatch):
    import os

    from dmlr.distributed import chunks as chunks_module

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    small = np.zeros((1000, 10))
    assert chunks_module.local_block_count(small) == 1
    big = np.zeros((chunks_module.SMALL_BLAS_VALUES // 10 + 10, 10))
    assert chunks_module.local_block_count(big) == 3
    made = chunks_module.make_chunkset(big, np.zeros((big.shape[0], 2), dtype=np.int8), fit_intercept=True)
    assert made.backend == "local" and made.n_blocks == 3
    made.close()


def test_in_process_sparse_data_gets_a_block_per_core_from_a_smaller_size(monkeypatch):
    # a sparse block's passes run on one thread whatever its size, so sparse data is
    # split from SMALL_SPARSE_VALUES stored values; a sparse dask array by its rows
    import os

    import dask.array as da
    import scipy.sparse as sp
    import sparse

    from dmlr.distributed import chunks as chunks_module

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    small = chunks_module.SMALL_SPARSE_VALUES
    assert small < chunks_module.SMALL_BLAS_VALUES
    rows = 4096
    few = sp.random(rows, 64, density=(small - 100) / (rows * 64), format="csr", random_state=0)
    many = sp.random(rows, 64, density=(small + 1000) / (rows * 64), format="csr", random_state=0)
    assert few.nnz <= small < many.nnz <= chunks_module.SMALL_BLAS_VALUES
    assert chunks_module.local_block_count(few) == 1
    assert chunks_module.local_block_count(many) == 3
    short = sp.random(2100, 64, density=0.6, format="csr", random_state=0)
    assert short.nnz > small and chunks_module.local_block_count(short) == 2  # one block per 1,024 rows at most
    assert chunks_module.local_block_count(many.toarray()) == 1  # the same values dense: one BLAS block
    lazy = da.from_array(sparse.COO.from_scipy_sparse(many), chunks=(1024, 64))
    assert chunks_module.local_block_count(lazy) == 3
    assert chunks_module.local_block_count(lazy[:1000]) == 1
    made = chunks_module.make_chunkset(many, np.zeros((rows, 2), dtype=np.int8), fit_intercept=True)
    assert made.backend == "local" and made.n_blocks == 3
    made.close()


def _block_rows(block):
    return block.n_rows, block.X.toarray() if hasattr(block.X, "toarray") else np.asarray(block.X), block.Y


@pytest.mark.parametrize("sparse", [False, True])
def test_blocks_of_uneven_dask_chunks_get_near_equal_rows_in_order(client2, sparse):
    # chunks of 30, 30, 30, 45 rows: whole-chunk blocks would be 60 + 75; row runs are 68 + 67
    import dask.array as da
    import scipy.sparse as sp

    from dmlr.distributed.chunks import make_chunkset

    rng = np.random.default_rng(4)
    Xn = rng.standard_normal((135, 6)) * (rng.random((135, 6)) < 0.4)
    Yn = (rng.random((135, 5)) < 0.3).astype(np.int8)
    chunks = ((30, 30, 30, 45), (6,))
    X = da.from_array(sp.csr_matrix(Xn), chunks=chunks, asarray=False) if sparse else da.from_array(Xn, chunks=chunks)
    Y = da.from_array(Yn, chunks=((30, 30, 30, 45), (5,)))
    for backend in ("local", "dask"):
        cs = make_chunkset(X, Y, fit_intercept=False, backend=backend, client=client2, n_blocks=2)
        blocks = (
            cs.client.gather([cs.client.submit(_block_rows, f, pure=False) for f in cs.futures])
            if backend == "dask"
            else [_block_rows(b) for b in cs.blocks]
        )
        cs.close()
        assert [b[0] for b in blocks] == [68, 67], backend
        np.testing.assert_array_equal(np.vstack([b[1] for b in blocks]), Xn)
        np.testing.assert_array_equal(np.vstack([b[2] for b in blocks]), Yn)


def test_solver_keeps_its_blas_threads_only_when_no_worker_shares_its_machine(small_store, client2, monkeypatch):
    import socket

    from threadpoolctl import threadpool_info, threadpool_limits

    from dmlr.distributed.chunks import make_chunkset

    def blas_threads():
        return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

    X, Y = dmlr.open_dataset(small_store).arrays("train")
    with threadpool_limits(limits=2, user_api="blas"):
        cs = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client2)
        with cs.solver_context():  # local workers: one BLAS thread while they compute
            assert blas_threads() == 1
        cs.close()
        monkeypatch.setattr(socket, "gethostname", lambda: "a-notebook-pod")  # workers elsewhere
        cs = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client2)
        with cs.solver_context():
            assert blas_threads() == 2
        cs.close()


@pytest.mark.parametrize("kind", ["dense32", "dense64", "csr", "gcxs"])
def test_block_built_in_one_pass_equals_stacking_then_the_bias(kind):
    # concat_blocks writes the parts and the bias column into one allocation: the same
    # matrix as stacking the parts and appending the bias (same CSR entries, in order)
    import sparse

    from dmlr.data.arrays import as_matrix
    from dmlr.data.blocks import append_bias, concat_blocks

    rng = np.random.default_rng(0)
    parts, labels = [], []
    for m in (5, 0, 7, 3):
        A = rng.random((m, 6)) * (rng.random((m, 6)) < 0.3)
        if m:
            A[1] = 0.0  # an empty row
        parts.append(
            {
                "dense32": lambda a: a.astype(np.float32),
                "dense64": lambda a: a,
                "csr": sp.csr_matrix,
                "gcxs": lambda a: sparse.GCXS.from_numpy(a, compressed_axes=(0,)),
            }[kind](A)
        )
        labels.append(rng.integers(0, 2, (m, 3)))
    for bias in (False, True):
        stacked = [as_matrix(p) for p in parts]
        X = sp.vstack(stacked, format="csr") if sp.issparse(stacked[0]) else np.concatenate(stacked)
        X = append_bias(X) if bias else X
        block = concat_blocks(parts, labels, bias)
        if sp.issparse(X):
            assert block.X.format == "csr" and block.X.has_sorted_indices
            for name in ("indptr", "indices", "data"):
                np.testing.assert_array_equal(getattr(block.X, name), getattr(X, name))
        else:
            assert block.X.dtype == np.float64 and block.X.flags.c_contiguous
            np.testing.assert_array_equal(block.X, X)
        assert block.Y.dtype == np.int8
        np.testing.assert_array_equal(block.Y, np.concatenate(labels))


def test_dask_scores_carry_the_model_once_not_in_every_task():
    # decision_function on dask X: the model (its coef_) is a key of the graph of its own, sent
    # once to a worker, not a copy inlined in every chunk's task (a worker holds the copies of
    # all the tasks it was given)
    import cloudpickle
    import dask.array as da

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 300))
    Y = (X[:, :20] > 0).astype(np.int8)
    model = RBRL(max_iter=5).fit(X, Y)
    Xd = da.from_array(X, chunks=(50, -1))
    S = model.decision_function(Xd)
    data_keys = set(Xd.__dask_graph__())  # the chunks of X themselves
    tasks = [t for k, t in dict(S.__dask_graph__()).items() if k not in data_keys]
    sizes = sorted(len(cloudpickle.dumps(t)) for t in tasks)
    assert len(sizes) > 8 and sum(s > model.coef_.nbytes for s in sizes) <= 1, sizes
    np.testing.assert_allclose(S.compute(), model.decision_function(X), rtol=1e-12)


def test_single_threaded_blas_limits_every_blas_and_sees_later_imports(monkeypatch):
    import sys
    import types

    from threadpoolctl import threadpool_info, threadpool_limits

    from dmlr import _blas

    def blas_threads():
        return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})

    with threadpool_limits(limits=2, user_api="blas"):
        with _blas.single_threaded_blas():
            assert blas_threads() == [1]
            with _blas.single_threaded_blas():  # nested: restores the outer limit
                assert blas_threads() == [1]
            assert blas_threads() == [1]
        assert blas_threads() == [2]
        built = _blas._current_controller()
        assert _blas._current_controller() is built  # no import since: the libraries are not listed again
        monkeypatch.setitem(sys.modules, "dmlr_test_new_extension", types.ModuleType("dmlr_test_new_extension"))
        assert _blas._current_controller() is not built  # an import may have loaded another BLAS
        with _blas.single_threaded_blas():
            assert blas_threads() == [1]
        assert blas_threads() == [2]


def test_worker_groups_and_their_placement():
    from dmlr.distributed.chunks import placement_workers
    from dmlr.distributed.placement import MEMORY_HEADROOM, worker_groups

    class FakeClient:
        def __init__(self, n, memory):
            self.info = {f"tcp://w{i}": {"memory_limit": memory, "nthreads": 1} for i in range(n)}

        def sync(self, fn, **kwargs):  # as a client asks its scheduler (cluster_workers)
            return fn(**kwargs)

        @property
        def scheduler(self):
            return self

        def identity(self, n_workers):
            return {"workers": self.info}

    client = FakeClient(5, 8 * MEMORY_HEADROOM * 100)  # each worker holds 800 bytes of data with room
    assert worker_groups(client, 100) == [(f"tcp://w{i}",) for i in range(5)]
    assert worker_groups(client, 1000) == [("tcp://w0", "tcp://w2", "tcp://w4"), ("tcp://w1", "tcp://w3")]
    assert worker_groups(client, 10**6) == [tuple(f"tcp://w{i}" for i in range(5))]
    # a group's blocks go to its live workers; with none of them left, to every worker
    assert placement_workers(client, ("tcp://w3", "tcp://w1")) == ["tcp://w1", "tcp://w3"]
    assert placement_workers(client, ("tcp://gone",)) == sorted(client.info)
    with pytest.raises(ValueError, match="worker addresses"):
        dmlr.config_context(workers="tcp://w0").__enter__()


def test_a_search_with_a_client_not_current_leaves_dask_settings_as_they_were(cluster2, small_store):
    """A search's units on threads, one group of workers each, with a client that is not the default
    one: dask's global "scheduler" setting is as before the fit (``Client.as_current`` sets it, and
    threads entering and leaving it in turn used to leave it set to a client that was not current
    here), so the final fit, which computes the scaling with dask, works."""
    import dask

    before = dask.config.get("scheduler", None)
    with dmlr.config_context(backend="dask"):
        model = dmlr.fit(small_store, "rbrl", client=cluster2, alpha_nuclear=0.1, max_iter=30, tol=0.0, verbose=0)
    assert dask.config.get("scheduler", None) == before
    assert "alpha" in model.best_params_ and model.backend_ == "dask"


def test_the_workers_are_asked_of_the_scheduler_not_read_from_the_clients_cache(client2, monkeypatch):
    """distributed's periodic refresh of a client's cached identity lists no worker; placing
    blocks or choosing groups from that cache found "no workers" on a live cluster."""
    from dmlr.distributed.chunks import cluster_block_count, placement_workers
    from dmlr.distributed.placement import memory_limit, worker_groups

    async def refresh_without_workers(n_workers=0):  # what the periodic refresh leaves
        client2._scheduler_identity = {**client2._scheduler_identity, "workers": {}}

    monkeypatch.setattr(client2, "_update_scheduler_info", refresh_without_workers)
    assert client2.scheduler_info()["workers"] == {}  # the cache, as a racing refresh leaves it
    assert len(placement_workers(client2)) == 2
    assert cluster_block_count(client2) == 2
    assert len(worker_groups(client2, 1)) == 2
    assert memory_limit(client2) == min(w["memory_limit"] for w in cluster_workers(client2).values())
