"""Row chunks held in memory (here or on Dask workers) with a map-reduce.

A :class:`ChunkSet` is what full-gradient solvers iterate over: it is built
once per fit, keeps every row block in memory where it will be used, and
offers ``map_reduce(fn, *args)``: call ``fn(block, *args)`` on every block and
sum the results (tuples of arrays and floats) with a pairwise tree in block
order; ``map_blocks`` gives the per-block results unsummed, for merges that
are not sums (top-k lists).

* :class:`LocalChunks` keeps the blocks in this process: small data does not
  pay for distribution.
* :class:`ClusterChunks` keeps them on Dask workers as futures (loaded once,
  reused every iteration), in contiguous runs per worker (:func:`block_workers`).
  Each block's worker runs ``fn`` through a Dask actor that holds the block
  (:class:`BlockActor`), with no task for the scheduler to place. A
  ``map_reduce`` goes from the client to block 0's actor only; the arguments
  travel down the fixed summation tree (:func:`tree_split`) from worker to
  worker and the blocks' results are summed up it on the workers
  (:meth:`BlockActor.reduce`), so the client sends the arguments once and
  receives one result whatever the number of workers
  (``benchmarks/scale_out.py`` counts the bytes). As tasks, a call would pay
  the scheduler's placement of one task per block and per sum, several times
  the actors' overhead per iteration (the "Dask + client" column of
  ``benchmarks/rbrl_speed.py --sections 2`` is that overhead).
  If a worker dies, its actors die with it: the lost blocks are built again,
  the actors rebuilt on the surviving workers and the call repeated, so the
  fit goes on with the same blocks and gives the same result. Blocks read
  from a dask array (Zarr chunks) are recomputed by Dask from its graph.
  Blocks of arrays in this process (numpy, scipy.sparse) were scattered, so
  Dask has nothing to recompute them from: the chunk set keeps the arrays
  (a reference: they are the caller's, already in this process's memory) and
  scatters the lost blocks' rows again (:class:`ArraySource`). A block made by
  :meth:`ClusterChunks.transform` (an exact kernel model's rows of K) is
  rebuilt by rebuilding its source block and transforming it again
  (:class:`TransformSource`).

Both sum along the same tree over the same blocks, so they give the same
numbers wherever the blocks are (up to BLAS threading inside one block).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import time
import uuid
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from dmlr.data.arrays import as_matrix, chunk_rows, is_dask, is_sparse
from dmlr.data.blocks import Block, concat_blocks, make_block
from dmlr.distributed.client import cluster_workers

#: "auto" backend: data with at most this many stored values train in-process.
LOCAL_MAX_VALUES = 2**22
#: "auto" backend for sparse dask input (nnz unknown without reading): row limit.
LOCAL_MAX_SPARSE_ROWS = 2**16
#: "auto" backend with a cluster configured: data whose scores (rows x labels, the n x l
#: matrix every pass computes, sorts by row and multiplies back) have more entries than
#: this go to the cluster even when X itself is small: a pass then costs tens of
#: milliseconds, well above a call's round trip to the workers.
LOCAL_MAX_SCORES = 2**22
_SCATTER_BYTES = 2**20
#: In-process data at most this many stored values run with single-threaded BLAS.
SMALL_BLAS_VALUES = 2**21
#: In-process sparse data at most this many stored values stays one block (see
#: :func:`local_block_count`).
SMALL_SPARSE_VALUES = 2**16


def _stored_values(block) -> int:
    """Stored values of a block's matrix (X, or K for kernel blocks)."""
    M = getattr(block, "K", None)
    if M is None:
        M = block.X
    return int(M.nnz) if hasattr(M, "nnz") else int(np.prod(M.shape))


def add_results(a, b):
    """Elementwise sum of two kernel results (nested tuples of arrays/floats/None)."""
    if a is None and b is None:
        return None
    if isinstance(a, tuple):
        return tuple(add_results(x, y) for x, y in zip(a, b))
    return a + b


def tree_split(lo: int, hi: int) -> int:
    """Where node ``[lo, hi)`` (at least two items) of the fixed summation tree splits.

    At ``lo`` plus the largest power of two below ``hi - lo``: the tree that
    pairing neighbours level by level builds (items 0 and 1, 2 and 3, ...,
    an odd last item carried up). It depends only on the number of items,
    and a contiguous run of items is a subtree, so the workers holding
    contiguous runs of blocks can each sum theirs (:meth:`BlockActor.reduce`).
    """
    return lo + (1 << ((hi - lo - 1).bit_length() - 1))


def tree_reduce(items: list, combine):
    """Combine ``items`` along the fixed tree of :func:`tree_split`, in order.

    The tree depends only on ``len(items)``, so the summation order is the
    same wherever the items were computed.
    """
    if not items:
        raise ValueError("nothing to reduce")

    def node(lo, hi):
        if hi - lo == 1:
            return items[lo]
        m = tree_split(lo, hi)
        return combine(node(lo, m), node(m, hi))

    return node(0, len(items))


class ChunkSet:
    """Row blocks of one training set and a map-reduce over them."""

    n_rows: int
    n_blocks: int
    backend: str

    def map_blocks(self, fn, *args) -> list:  # pragma: no cover - interface
        """``[fn(block, *args) for block in blocks]``, computed where the blocks are, in block order.

        For reductions that are not sums (e.g. merging per-block top-k lists).
        """
        raise NotImplementedError

    def apply_block(self, index: int, fn, *args):  # pragma: no cover - interface
        """``fn(block_index, *args)`` where that block is (for sequential passes over blocks)."""
        raise NotImplementedError

    def map_reduce(self, fn, *args, combine=add_results):
        """``fn(block, *args)`` on every block, combined along the fixed tree of :func:`tree_reduce`.

        ``combine(a, b)`` merges the results of two neighbouring runs of
        blocks (default: their sum, :func:`add_results`).
        """
        return tree_reduce(self.map_blocks(fn, *args), combine)

    def map_reduce_async(self, fn, *args, combine=add_results):
        """:meth:`map_reduce`, started: returns a callable that waits for its result.

        So that the caller's own work (a solver's regularizer, computed from
        the point alone) runs while the blocks compute: a chunk set returns
        once the call is sent to its workers or started on its threads. By
        default the call is made before this returns.
        """
        result = self.map_reduce(fn, *args, combine=combine)
        return lambda: result

    def transform(self, fn, *args) -> ChunkSet:  # pragma: no cover - interface
        """A new chunk set whose block i is ``fn(block_i, (start_i, stop_i), *args)``.

        The new blocks stay where the old ones are (same process or worker);
        the old chunk set stays valid until closed.
        """
        raise NotImplementedError

    @property
    def bounds(self) -> list[tuple[int, int]]:
        """(start, stop) training-row range of each block, in block order."""
        edges = np.concatenate([[0], np.cumsum(self._block_sizes())]).astype(int)
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    def _block_sizes(self) -> list[int]:  # pragma: no cover - interface
        raise NotImplementedError

    def solver_context(self):
        """Context for the solver's own work between map-reduce calls."""
        return contextlib.nullcontext()

    def close(self) -> None:
        """Release the blocks."""


class LocalChunks(ChunkSet):
    """Blocks in this process.

    With several blocks, a call runs them side by side on threads (the
    kernels release the GIL), each with single-threaded BLAS, as a local
    cluster's workers would, but with no data to ship. The Numba pass over
    the scores is single-threaded, so one block with multithreaded BLAS
    leaves the other cores idle during it, while one block per core runs it
    on every core (``benchmarks/rbrl_speed.py --sections 5`` compares the two).
    """

    backend = "local"

    def __init__(self, blocks: list[Block]):
        self.blocks = blocks
        self.n_rows = sum(b.n_rows for b in blocks)
        self.n_blocks = len(blocks)
        self._pool = None

    def map_blocks(self, fn, *args) -> list:
        if len(self.blocks) == 1:
            return [fn(self.blocks[0], *args)]
        return [f.result() for f in self._submit(fn, args)]

    def map_reduce_async(self, fn, *args, combine=add_results):
        """Several blocks run on their threads while the caller goes on (its work then shares
        the cores with theirs); one block runs here, now."""
        if len(self.blocks) == 1:
            return super().map_reduce_async(fn, *args, combine=combine)
        futures = self._submit(fn, args)
        return lambda: tree_reduce([f.result() for f in futures], combine)

    def _submit(self, fn, args: tuple) -> list:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(len(self.blocks), thread_name_prefix="dmlr-block")
        return [self._pool.submit(fn, b, *args) for b in self.blocks]

    def apply_block(self, index: int, fn, *args):
        return fn(self.blocks[index], *args)

    def solver_context(self):
        """Single-threaded BLAS for small data and for several blocks.

        Products of a few hundred rows gain nothing from BLAS threads, and
        OpenBLAS's spin-waiting threads make them many times slower on a busy
        machine, where the threads wait for cores that other processes hold.
        Several blocks already run on threads of their own.
        """
        if len(self.blocks) == 1 and sum(_stored_values(b) for b in self.blocks) > SMALL_BLAS_VALUES:
            return contextlib.nullcontext()
        from dmlr._blas import single_threaded_blas

        return single_threaded_blas()

    def transform(self, fn, *args) -> LocalChunks:
        return LocalChunks([fn(b, bnd, *args) for b, bnd in zip(self.blocks, self.bounds)])

    def _block_sizes(self) -> list[int]:
        return [b.n_rows for b in self.blocks]

    def close(self) -> None:
        self.blocks = []
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


#: Names this process: a call whose arguments were sent from the process it runs in is
#: handed the caller's arrays, not copies of its own.
PROCESS_TOKEN = uuid.uuid4().hex


class Resident(NamedTuple):
    """A task's result kept on the workers (``future``) and this process's copy of it
    (``value``), for :meth:`ClusterChunks.run_on_root`."""

    future: object
    value: object


class PeerLost(RuntimeError):
    """A worker could not reach the worker of another block while summing a call's results."""


class BlockActor:
    """A Dask actor holding one row block on its worker (see the module docstring)."""

    def __init__(self, block):
        self.block = block

    async def apply(self, fn, *args):
        """``fn(block, *args)`` on one of this worker's task threads.

        A worker runs plain actor methods on a single "actor" thread, so the
        blocks of a worker with several threads would take turns; a coroutine
        method runs on the event loop and hands the work to the worker's
        default executor (``nthreads`` threads), where blocks run side by side.
        """
        import asyncio

        from distributed import get_worker

        executor = get_worker().executors["default"]
        return await asyncio.get_running_loop().run_in_executor(executor, functools.partial(fn, self.block, *args))

    async def reduce(self, lo: int, hi: int, peers: list, fn, args: tuple, combine, sender: str):
        """Node ``[lo, hi)`` of the blocks' summation tree (:func:`tree_split`), run where block ``lo`` is.

        ``fn(block, *args)`` on blocks ``lo`` to ``hi - 1``, combined as
        :func:`tree_reduce` combines them: the left subtree here (block ``lo``
        is this actor's), the right one by block ``m``'s actor, called
        directly when it lives on this worker and through the worker's
        connection to its worker otherwise (``peers[i]`` is the
        (worker address, actor key) of block i). So the client sends the
        arguments once, to block 0's actor, and receives one result; the
        arguments travel down the tree, each worker receiving them once per
        run of its blocks that is a right subtree, and the results travel
        up it. Blocks placed in contiguous runs per worker
        (:func:`block_workers`) cross between workers only near the root.

        The request to block ``m``'s worker is written out before this
        worker starts on its own blocks, so that the other worker starts
        at once and the request's arrays are no longer read here.
        ``sender`` is the caller's :data:`PROCESS_TOKEN`. Arguments that came
        through the network are this process's own copy, which ``fn`` may be
        told it can overwrite (the sparse speculative call does): when the
        right subtree runs on this worker too, the left one is handed a
        copy, so that no two blocks share the arrays.
        """
        import asyncio

        from distributed import get_worker

        worker = get_worker()
        loop = asyncio.get_running_loop()
        executor = worker.executors["default"]
        if hi - lo == 1:
            return await self.apply(fn, *args)
        m = tree_split(lo, hi)
        address, key = peers[m]
        if address == worker.address:
            right = asyncio.ensure_future(worker.state.actors[key].reduce(m, hi, peers, fn, args, combine, sender))
            own = args if sender == PROCESS_TOKEN else copy.deepcopy(args)
        else:
            right = await _send_reduce(worker, address, key, (m, hi, peers, fn, args, combine, sender))
            own = args
        try:
            left = await self.reduce(lo, m, peers, fn, own, combine, sender)
        finally:
            right = await right
        return await loop.run_in_executor(executor, combine, left, right)


async def _send_reduce(worker, address: str, key, call: tuple):
    """Send :meth:`BlockActor.reduce` ``call`` to actor ``key`` on worker ``address``.

    Returns, once the request is written out, an awaitable of the result.
    distributed's ``rpc`` would write and wait in one step; written out
    first, the request's arrays may be overwritten here while the other
    worker computes.
    """
    from distributed.protocol import to_serialize

    def lost():
        return PeerLost(f"the worker {address} could not be reached from {worker.address}")

    comm = None
    try:
        comm = await worker.rpc.connect(address)
        msg = {"op": "actor_execute", "function": "reduce", "actor": key, "reply": True, "kwargs": {}}
        await comm.write({**msg, "args": [to_serialize(a) for a in call]}, on_error="raise")
    except OSError as e:
        if comm is not None:
            comm.abort()
        raise lost() from e

    async def result():
        try:
            reply = await comm.read()
        except OSError as e:
            comm.abort()
            raise lost() from e
        worker.rpc.reuse(address, comm)
        if reply.get("status") == "OK":
            return reply["result"]
        exc = reply.get("exception")
        raise exc if isinstance(exc, BaseException) else RuntimeError(reply.get("exception_text", str(reply)))

    return result()


#: A map-reduce call is repeated at most this many times after losing workers.
MAX_RECOVERIES = 3
#: Seconds to wait, after an actor call failed to reach its worker, for the scheduler to
#: register that worker's death (its connection may close a moment after ours did).
LOST_WORKER_WAIT = 30.0
#: Seconds between a task's checks on block 0's worker for a lost worker (:meth:`ClusterChunks.run_on_root`).
ROOT_POLL = 1.0
#: Seconds :meth:`ClusterChunks.close` waits at most for the workers to let go of the set's
#: blocks and actors (it returns then, the release still under way).
RELEASE_WAIT = 10.0


@functools.cache
def _direct_actor_handle():
    """An actor-handle class whose calls connect to the actor's worker directly.

    distributed's handles go through the scheduler (a ``ProxyRPC``) unless the
    client was made with ``direct_to_workers=True``, and dmlr should not change
    the user's client. Through the scheduler, a call's arguments and result
    (two d x l float64 matrices each way for RBRL) take an extra hop each
    way, which for a model of a few thousand features and hundreds of labels
    costs more than the call's transfer itself. Overrides distributed's private ``Actor._worker_rpc``
    (distributed pinned in deploy/requirements.lock), here only; the test
    ``test_direct_actor_handles_call_the_workers_without_the_scheduler``
    fails when a distributed release stops honouring it. Where the client
    cannot reach the workers, :meth:`ClusterChunks.map_blocks` falls back to
    the proxy.
    """
    from distributed.actor import Actor

    class DirectActor(Actor):
        @property
        def _worker_rpc(self):
            return self._client.rpc(self._address)

    return DirectActor


class ArraySource:
    """Row blocks of arrays held in this process, built on workers; builds lost ones again.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix (n, d)
    Y : ndarray (n, l)
    bounds : list of (start, stop)
        Row range of each block.
    fit_intercept : bool
        Passed to :func:`dmlr.data.blocks.make_block`.
    workers : sequence of str, optional
        The workers the blocks go to (None: every worker); see :func:`placement_workers`.

    Notes
    -----
    Only references to ``X`` and ``Y`` are kept; a block's rows are sliced
    (a view for numpy) and scattered when the block is built.
    """

    def __init__(self, X, Y, bounds, fit_intercept: bool, workers=None):
        self.X, self.Y, self.bounds, self.fit_intercept = X, Y, list(bounds), fit_intercept
        self.workers = workers

    def build(self, client, indices) -> list:
        """Futures of blocks ``indices``, placed by :func:`block_workers`."""
        where = block_workers(placement_workers(client, self.workers), len(self.bounds))
        futures = []
        for i in indices:
            a, b = self.bounds[i]
            w = where[i]
            xf, yf = client.scatter([self.X[a:b], self.Y[a:b]], workers=[w])
            futures.append(
                client.submit(make_block, xf, yf, self.fit_intercept, workers=[w], allow_other_workers=True, pure=False)
            )
        return futures


class TransformSource:
    """Blocks ``fn(block, bounds, *args)`` of a rebuildable source (see :meth:`ClusterChunks.transform`).

    Parameters
    ----------
    parent : ArraySource or TransformSource
    fn : callable
    bounds : list of (start, stop)
    args : tuple
        As given to ``transform`` (arrays in this process, shipped again on
        each build).
    """

    def __init__(self, parent, fn, bounds, args):
        self.parent, self.fn, self.bounds, self.args = parent, fn, list(bounds), args

    def build(self, client, indices) -> list:
        """Futures of blocks ``indices``: their source blocks built again, then transformed."""
        parents = self.parent.build(client, indices)
        args = tuple(_ship(client, a) for a in self.args)
        return [client.submit(self.fn, f, self.bounds[i], *args, pure=False) for f, i in zip(parents, indices)]


def _ship(client, arg):
    """A large array argument scattered to every worker (a future), else the argument itself."""
    if isinstance(arg, np.ndarray) and arg.nbytes > _SCATTER_BYTES:
        return client.scatter(arg, broadcast=True, hash=False)
    return arg


class ClusterChunks(ChunkSet):
    """Blocks held as futures on Dask workers.

    Parameters
    ----------
    client : distributed.Client
    futures : list of Future
        One per block, in row order.
    n_rows : int
    sizes : list of int, optional
        Rows per block (asked from the workers when needed otherwise).
    source : ArraySource or TransformSource, optional
        Builds lost blocks again; None when Dask can recompute them from
        their graph (blocks read from a dask array).
    held : tuple, optional
        Futures the blocks' tasks depend on (shipped arguments), kept alive
        so that Dask can recompute a lost block from its graph.
    """

    backend = "dask"

    def __init__(self, client, futures: list, n_rows: int, sizes: list[int] | None = None, source=None, held=()):
        self.client = client
        self.futures = futures
        self.n_rows = n_rows
        self.n_blocks = len(futures)
        self._sizes = sizes
        self._source = source
        self._held = tuple(held)
        self._actors = None
        self._actor_workers = ()
        self._direct = True
        self._colocated = None

    def solver_context(self):
        """Single-threaded BLAS in this process while workers on this machine compute.

        The solver's work here (the prox of a d x l matrix per APG step) is
        small, but multithreaded OpenBLAS spin-waits after each call and takes
        the cores that local worker processes need, which slows every oracle
        call on a machine with few cores (``benchmarks/rbrl_speed.py``'s
        section 2 fits on local workers).
        A client whose workers all run elsewhere (a notebook pod and a
        Kubernetes cluster) keeps its BLAS threads: the prox is then the only
        work on its cores.
        """
        if not self._workers_on_this_machine():
            return contextlib.nullcontext()
        from dmlr._blas import single_threaded_blas

        return single_threaded_blas()

    def _workers_on_this_machine(self) -> bool:
        """Whether any worker runs on this process's host (asked once per set)."""
        if self._colocated is None:
            import socket

            here = socket.gethostname()
            self._colocated = any(h == here for h in self.client.run(_host_name).values())
        return self._colocated

    def _make_actors(self) -> list:
        """One :class:`BlockActor` per block, on the worker that holds the block."""
        client = self.client
        where = client.who_has(self.futures)
        actors = []
        for f in self.futures:
            holders = list(where.get(f.key, ()))
            # a block lost with its worker has no holder: no placement (Dask recomputes it
            # from the Zarr chunks wherever the actor goes; allow_other_workers needs workers)
            actors.append(
                client.submit(
                    BlockActor, f, actor=True, pure=False, workers=holders or None, allow_other_workers=bool(holders)
                )
            )
        from distributed.actor import Actor

        handles = [a.result() for a in actors]
        # A handle binds to a worker or client when it is built (distributed's
        # Actor._try_bind_worker_client): with in-process workers the handle we receive is the
        # worker's own object, bound to that worker, and otherwise it takes whatever client
        # is current. Fresh handles built while ours is current call through our client.
        handle = _direct_actor_handle() if self._direct else Actor
        with made_current(client):
            return [handle(h._cls, h._address, h.key) for h in handles]

    def _lost_worker(self, wait: float = 0.0) -> bool:
        """Whether a worker that held one of this set's (latest) actors has left the cluster.

        Waits up to ``wait`` seconds for the scheduler to notice a death.
        """
        deadline = time.monotonic() + wait
        while True:
            alive = set(cluster_workers(self.client))
            if any(a not in alive for a in self._actor_workers):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def map_blocks(self, fn, *args) -> list:
        return self._call(lambda actors: [c.result() for c in [a.apply(fn, *args) for a in actors]])

    def apply_block(self, index: int, fn, *args):
        return self._call(lambda actors: actors[int(index)].apply(fn, *args).result())

    def map_reduce(self, fn, *args, combine=add_results):
        """``fn(block, *args)`` on every block, combined on the workers (:meth:`BlockActor.reduce`).

        The same tree as :func:`tree_reduce`, so the same result as the
        blocks' results gathered and combined here, for a fraction of the
        client's traffic: it sends the arguments once and receives one
        result, whatever the number of workers.
        """
        return self._reduce(fn, args, combine)()

    def map_reduce_async(self, fn, *args, combine=add_results):
        """:meth:`map_reduce`, sent to the workers before this returns; the callable returned
        waits for the result (and recovers from a lost worker as :meth:`map_reduce` does)."""
        return self._reduce(fn, args, combine)

    def _reduce(self, fn, args: tuple, combine):
        def send(actors):  # the call is on its way once this returns (distributed's ActorFuture)
            peers = [(a._address, a.key) for a in actors]
            return actors[0].reduce(0, len(actors), peers, fn, args, combine, PROCESS_TOKEN)

        sent = None
        if self._actors is not None:  # else the first wait builds them
            try:
                sent = send(self._actors).result
            except Exception as e:  # raised at the wait, which recovers as from any failed call
                sent = functools.partial(_reraise, e)
        return lambda: self._call(lambda actors: send(actors).result(), sent)

    def run_on_root(self, task, summary, *args):
        """``task((peers, sizes), *args)`` as a task on block 0's worker: (its future, finished,
        and ``summary`` of its result, computed there and received here).

        ``peers`` are the blocks' (worker address, actor key) and ``sizes`` their rows
        (:class:`dmlr.distributed.root.RootChunks`); the result stays on the worker until the
        future is released or its result asked for. An argument that is a :class:`Resident`
        is passed as its future (a result already on the workers, not sent again) on the
        first attempt, as its value after a lost worker; other arguments are sent to the
        root directly (not in the task's graph, through the scheduler). A lost worker is
        recovered from as :meth:`map_reduce` recovers (the lost blocks built again, the
        actors rebuilt and the task run again), the task's own errors raised as they are.
        The root's death leaves its tasks waiting for a worker that will not return: the
        wait checks every :data:`ROOT_POLL` seconds whether a worker of the blocks left.
        """
        from distributed import Future, wait

        first = True  # after a failed attempt, a result on the workers may be lost

        def call(actors):
            nonlocal first
            peers = [(a._address, a.key) for a in actors]
            root = peers[0][0]
            values = [_resolved(a, first) for a in args]
            first = False
            sent = [i for i, v in enumerate(values) if not isinstance(v, Future)]
            scattered = self.client.scatter([values[i] for i in sent], workers=[root], direct=self._direct, hash=False)
            for i, f in zip(sent, scattered):
                values[i] = f
            on_root = dict(workers=[root], allow_other_workers=False, pure=False)
            future = self.client.submit(task, (peers, self._block_sizes()), *values, **on_root)
            brief = self.client.submit(summary, future, **on_root)
            try:
                while True:
                    try:
                        with made_current(self.client):
                            wait(brief, timeout=ROOT_POLL)
                        break
                    except TimeoutError:
                        if self._lost_worker():
                            raise PeerLost("a worker of the blocks left during the task on block 0") from None
                return future, brief.result()  # raises the task's error
            except BaseException:
                future.cancel()
                raise
            finally:
                brief.cancel()
                for i in sent:
                    values[i].release()

        return self._call(call)

    def _call(self, call, sent=None):
        """``call(actors)`` with the blocks' actors, built first (again after a worker was lost).

        ``sent``: the wait of a call already sent to the current actors, tried first.
        """
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                if sent is not None:
                    wait, sent = sent, None
                    return wait()
                if self._actors is None:
                    self._rebuild_lost_blocks()
                    self._actors = self._make_actors()
                    self._actor_workers = tuple(a._address for a in self._actors)
                return call(self._actors)
            except Exception as e:
                if isinstance(e, OSError) and self._direct and not self._lost_worker():
                    # perhaps this client cannot reach the workers (only the scheduler):
                    # call through the scheduler from now on (a dead worker fails there too)
                    self._direct = False
                    self._drop_actors()
                    continue
                # an error of ``fn`` itself is raised as it is; a lost worker rebuilds the
                # lost blocks and the actors, and repeats the call. A worker we or another
                # worker could not reach may not be gone from the scheduler yet.
                wait = LOST_WORKER_WAIT if isinstance(e, (OSError, PeerLost)) else 0.0
                if attempt == MAX_RECOVERIES or not self._lost_worker(wait):
                    raise
                self._drop_actors()

    def _rebuild_lost_blocks(self) -> None:
        """Build again, from the set's source, the blocks that no live worker holds.

        Without a source, Dask recomputes lost blocks from their graph when
        the actors are made.
        """
        if self._source is None:
            return
        # a scattered block's future is cancelled when its only holder dies (no recipe to recompute)
        alive = [f for f in self.futures if f.status == "finished"]
        where = self.client.who_has(alive) if alive else {}
        lost = [i for i, f in enumerate(self.futures) if f.status != "finished" or not where.get(f.key)]
        if not lost:
            return
        rebuilt = self._source.build(self.client, lost)
        _wait_or_raise(self.client, rebuilt)
        _free_placement(self.client, rebuilt)
        for i, f in zip(lost, rebuilt):
            self.futures[i].release()
            self.futures[i] = f

    def transform(self, fn, *args) -> ClusterChunks:
        shipped = tuple(_ship(self.client, a) for a in args)
        futures = [self.client.submit(fn, f, bnd, *shipped, pure=False) for f, bnd in zip(self.futures, self.bounds)]
        _wait_or_raise(self.client, futures)
        source = None if self._source is None else TransformSource(self._source, fn, self.bounds, args)
        held = [s for s, a in zip(shipped, args) if s is not a]  # the scattered arrays
        return ClusterChunks(self.client, futures, self.n_rows, self._block_sizes(), source, held)

    def _block_sizes(self) -> list[int]:
        if self._sizes is None:
            self._sizes = self.client.gather([self.client.submit(_n_rows, f, pure=False) for f in self.futures])
        return list(self._sizes)

    def _drop_actors(self) -> list:
        """Let go of the actors: release their keys now; returns the keys.

        An actor holds its block on the worker for as long as the client
        holds the actor's key, and the client holds it through every handle
        that has made a call: distributed's handle keeps the key in a
        ``Future`` (``Actor._future``), and each call leaves a reference
        cycle (a coroutine that refers to itself and to the handle), so the
        handle, and with it the block, outlives our last reference to it
        until the client's garbage collector happens to run, which may be
        after the next fit has built its own blocks on the same workers
        (``benchmarks/search_memory.py`` measures the overlap). Releasing
        the handles' futures here frees the keys whatever the cycles.
        """
        actors, self._actors = self._actors or [], None
        keys = []
        for a in actors:
            future = getattr(a, "_future", None)
            if future is not None:
                keys.append(future.key)
                future.release()
        return keys

    def close(self) -> None:
        """Release the blocks and their actors, and wait until the workers have let go of them.

        Waiting (at most :data:`RELEASE_WAIT` seconds) makes the next fit's
        blocks start after these are gone: a release travels from the client
        through the scheduler to the workers, and a fit that loads new
        blocks straight away (the folds of :func:`dmlr.tuning.search`) would
        otherwise hold both sets on a worker for a while.
        """
        keys = self._drop_actors()
        for f in self.futures:
            keys.append(f.key)
            f.release()
        self.futures = []
        self._source = None
        for f in self._held:
            keys.append(f.key)
            f.release()
        self._held = ()
        if keys:
            _wait_released(self.client, keys, RELEASE_WAIT)


def _resolved(arg, resident: bool):
    """A :class:`Resident`'s future (where ``resident`` and it has one) or value; other arguments as they are."""
    if not isinstance(arg, Resident):
        return arg
    return arg.future if resident and arg.future is not None else arg.value


def _reraise(error: BaseException):
    raise error


def _n_values(X) -> int | None:
    if sp.issparse(X):
        return int(X.nnz)
    if is_dask(X):
        return None if is_sparse(X) else int(np.prod(X.shape))
    if hasattr(X, "nnz"):
        return int(X.nnz)
    return int(np.prod(np.shape(X)))


def choose_backend(X, backend: str = "auto", n_labels: int | None = None) -> str:
    """ "local" or "dask" for ``backend="auto"``: by the size of X, and whether a cluster is there.

    Small data (:data:`LOCAL_MAX_VALUES`, :data:`LOCAL_MAX_SPARSE_ROWS`, and,
    with ``n_labels`` given, at most :data:`LOCAL_MAX_SCORES` scores) stay in
    this process. Larger data go to the cluster when one is configured
    (:func:`dmlr.distributed.placement.cluster_configured`); with none, they stay
    in this process as long as they fit its memory
    (:func:`~dmlr.distributed.placement.fits_in_memory`): on one machine a local
    cluster's processes hold the same memory, and would add a round trip per
    iteration and their start-up.
    """
    from dmlr.distributed.placement import cluster_configured, data_nbytes, fits_in_memory

    if backend not in ("auto", "local", "dask"):
        raise ValueError(f"backend must be 'auto', 'local' or 'dask', got {backend!r}")
    if backend != "auto":
        return backend
    nv = _n_values(X)
    small = X.shape[0] <= LOCAL_MAX_SPARSE_ROWS if nv is None else nv <= LOCAL_MAX_VALUES
    configured = cluster_configured()
    if small and configured and n_labels is not None:
        # the client is not where a configured cluster's work runs
        small = int(X.shape[0]) * int(n_labels) <= LOCAL_MAX_SCORES
    if small:
        return "local"
    if configured:
        return "dask"
    return "local" if fits_in_memory(data_nbytes(X)) else "dask"


def local_block_count(X) -> int:
    """Blocks for in-process data: one per core (and per 1,024 rows) when X is big enough to be worth threads.

    Dense data with at most :data:`SMALL_BLAS_VALUES` values stays one block:
    one block's BLAS products use every core already. A sparse block's passes
    (scipy's products, the fused Numba pass) run on one thread whatever its
    size, so sparse data is split once it has more than
    :data:`SMALL_SPARSE_VALUES` stored values, or, for a sparse dask array
    (nnz unknown without reading it), by its rows alone. Threads pay down to
    a few tens of thousands of stored values, with the same objective to
    rounding; the :data:`SMALL_SPARSE_VALUES` floor keeps only tiny sets in
    one block (``benchmarks/rbrl_speed.py --sections 5``).
    """
    import os

    nv = _n_values(X)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_core = max(1, min(cores, X.shape[0] // 1024))
    if is_sparse(X):
        return 1 if nv is not None and nv <= SMALL_SPARSE_VALUES else per_core
    return 1 if nv is None or nv <= SMALL_BLAS_VALUES else per_core


def _group_bounds(n_items: int, n_groups: int) -> list[tuple[int, int]]:
    """Split ``range(n_items)`` into ``n_groups`` contiguous, near-equal runs."""
    n_groups = max(1, min(n_groups, n_items))
    edges = np.linspace(0, n_items, n_groups + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _align(X, Y):
    """Dask X and Y with identical row chunks and a single column chunk each."""
    import dask.array as da

    if not is_dask(Y):
        Y = da.from_array(np.asarray(Y), chunks=(X.chunks[0], -1))
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    if Y.chunks[0] != X.chunks[0] or len(Y.chunks[1]) > 1:
        Y = Y.rechunk((X.chunks[0], -1))
    return X, Y


def _aligned_bounds(n_rows: int, n_blocks: int, align_rows: int) -> list[tuple[int, int]]:
    """Near-equal contiguous runs of rows whose boundaries are multiples of ``align_rows``."""
    n_units = -(-n_rows // align_rows)
    return [(a * align_rows, min(b * align_rows, n_rows)) for a, b in _group_bounds(n_units, n_blocks)]


def placement_workers(client, workers=None) -> list:
    """The workers row blocks go to, sorted: ``workers`` (a group of the cluster's) that are
    alive, or every worker of the client when none is given or none of the group is left."""
    return _placement(cluster_workers(client), workers)


def _placement(info: dict, workers) -> list:
    """:func:`placement_workers` from one reading of the cluster's workers (``info``:
    :func:`~dmlr.distributed.client.cluster_workers`)."""
    alive = sorted(info)
    if not alive:
        raise RuntimeError("the Dask cluster has no workers")
    chosen = [w for w in sorted(workers or ()) if w in alive]
    return chosen or alive


def cluster_block_count(client, workers=None) -> int:
    """Row blocks of a fit over ``workers`` (default: the whole cluster): one per worker thread."""
    info = cluster_workers(client)  # read once: the workers counted are the ones placed on
    return sum(info[w]["nthreads"] for w in _placement(info, workers))


def block_workers(workers: list, n_blocks: int) -> list:
    """The worker of each of ``n_blocks`` blocks: contiguous runs of near-equal length, in order.

    Contiguous runs keep the lower levels of the summation tree
    (:meth:`BlockActor.reduce`) within each worker.
    """
    return [workers[i * len(workers) // n_blocks] for i in range(n_blocks)]


def make_chunkset(
    X,
    Y,
    *,
    fit_intercept: bool,
    backend: str = "auto",
    client=None,
    n_blocks: int | None = None,
    align_rows: int | None = None,
    workers=None,
) -> ChunkSet:
    """Load a training set into row blocks where the kernels will run.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix or dask array (n, d)
        Dask arrays must be chunked by rows. Blocks take near-equal runs of
        rows whatever the chunks (a chunk on a block boundary is read by both
        blocks, once, at load): blocks of whole chunks can be uneven, and the
        slowest block sets every iteration's time (chunks of 7,308, 7,308, 7,308
        and 9,046 rows would make 2 blocks of 14,616 and 16,354 rows).
    Y : array-like or dask array (n, l) of 0/1
    fit_intercept : bool
        Append the constant-1 column while building each block.
    backend : {"auto", "local", "dask"}
        Where the blocks live; "auto" keeps small data in this process.
    client : distributed.Client, optional
        Client for the "dask" backend (default: :func:`dmlr.get_client`).
    n_blocks : int, optional
        Number of blocks (default: one per worker thread; in-process,
        :func:`local_block_count`).
    workers : sequence of str, optional
        The workers the blocks go to (default: every worker of the client;
        :func:`placement_workers`).
    align_rows : int, optional
        Make every block boundary a multiple of this many rows, so that fixed
        global row groups of that size never straddle two blocks
        (:mod:`dmlr.solvers.vr`).

    Returns
    -------
    ChunkSet
    """
    if X.shape[0] != np.shape(Y)[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {np.shape(Y)[0]}")
    where = choose_backend(X, backend, n_labels=int(np.shape(Y)[1]))

    def row_bounds(n_groups):
        if align_rows is None:
            return _group_bounds(X.shape[0], n_groups)
        return _aligned_bounds(X.shape[0], n_groups, int(align_rows))

    def delayed_rows(a, b):
        """Lists of delayed chunks of X[a:b] and Y[a:b]."""
        rows = np.arange(a, b)
        return list(chunk_rows(X, rows).to_delayed().ravel()), list(chunk_rows(Y, rows).to_delayed().ravel())

    if is_dask(X):
        X, Y = _align(X, Y)
    if where == "local":
        n_blocks = n_blocks or local_block_count(X)
        if is_dask(X):
            import dask

            parts = dask.compute(*[delayed_rows(a, b) for a, b in row_bounds(n_blocks)], scheduler="threads")
            blocks = [concat_blocks(px, py, fit_intercept) for px, py in parts]
        else:
            Y = np.asarray(Y)
            blocks = [make_block(X[a:b], Y[a:b], fit_intercept) for a, b in row_bounds(n_blocks)]
        return LocalChunks(blocks)

    from dmlr.distributed.client import get_client

    client = client or get_client()
    warm_up_workers(client)
    group = workers
    workers = placement_workers(client, group)
    bounds = row_bounds(n_blocks or cluster_block_count(client, workers))
    source = None
    if is_dask(X):
        import dask

        where = block_workers(workers, len(bounds))
        futures = []
        streamed = _streamable(X)
        for i, (a, b) in enumerate(bounds):
            if streamed:
                xs, ys = delayed_rows(a, b)
                d, l = int(X.shape[1]), int(Y.shape[1])
                # named as the blocks of concat_blocks are (the block task of every dask fit)
                part = dask.delayed(_stream_block, pure=False)(
                    _PartGraphs(xs),
                    _PartGraphs(ys),
                    b - a,
                    d,
                    l,
                    fit_intercept,
                    dask_key_name=f"concat_blocks-{uuid.uuid4()}",
                )
            else:
                part = dask.delayed(concat_blocks)(*delayed_rows(a, b), fit_intercept)
            futures.append(client.compute(part, workers=[where[i]], allow_other_workers=True))
    else:
        source = ArraySource(X, np.asarray(Y), bounds, fit_intercept, workers=group)  # places its blocks
        futures = source.build(client, range(len(source.bounds)))
    _wait_or_raise(client, futures)
    _free_placement(client, futures)
    client.run(release_freed_heap)
    return ClusterChunks(client, futures, int(X.shape[0]), source=source)


def _streamable(X) -> bool:
    """Whether the blocks of dask X are built by :func:`_stream_block`: a graph any process can
    compute (no futures of a persisted array in it)."""
    from distributed.client import futures_of

    return not futures_of(X)


class _PartGraphs:
    """The graphs of a block's row parts (delayed chunks), each culled to what its part needs.

    A container Dask does not look into: the block's task carries the graphs
    and computes its parts itself (:func:`_stream_block`), rather than
    depending on them as tasks of their own.
    """

    def __init__(self, parts):
        import dask

        self.parts = []
        for part in parts:
            (part,) = dask.optimize(part)
            self.parts.append((dict(part.__dask_graph__()), part.key))

    def __iter__(self):
        """The parts, computed one at a time in this process (Dask's synchronous scheduler)."""
        from dask.local import get_sync

        for graph, key in self.parts:
            yield get_sync(graph, key)


def _stream_block(parts_X, parts_Y, n_rows: int, d: int, l: int, fit_intercept: bool) -> Block:
    """The block of its parts computed one at a time, each converted or copied into the block and let go.

    The same block as :func:`dmlr.data.blocks.concat_blocks` of the parts,
    which, as a task depending on the parts' tasks, needs them all in the
    worker's memory at once beside the block it builds (they are as large as
    the block: float64 after the model's scaling): the worker building a
    block holds the block and one part, with that part's chunk as read from
    the store, instead. Dense parts are copied into the preallocated block as
    they come. Sparse ones are converted to float64 CSR as they come (their
    stored form, COO or GCXS float32, is dropped), and copied into the block,
    whose size is known once all are there, each part released once copied
    (:func:`~dmlr.data.blocks.concat_blocks`'s ``consume``).
    ``benchmarks/search_memory.py`` measures the peak of a search, which
    builds a fold's blocks at every fit.
    """
    parts_X, parts_Y = iter(parts_X), iter(parts_Y)
    X, csr = None, None  # the dense block, or the sparse parts converted
    Y = np.empty((n_rows, l), dtype=np.int8)
    a = 0
    for px in parts_X:
        py = np.asarray(next(parts_Y))
        b = a + int(px.shape[0])
        if a == 0 and b == n_rows and not fit_intercept:  # one part: no copy needed
            return concat_blocks([px], [py], fit_intercept)
        if a == 0 and is_sparse(px):
            csr = []
        Y[a:b] = py
        if csr is not None:
            csr.append(sp.csr_matrix(as_matrix(px)))
        else:
            if X is None:
                X = np.empty((n_rows, d + int(fit_intercept)))
            X[a:b, :d] = px
        del px, py
        a = b
    if a != n_rows:
        raise ValueError(f"the parts of a block hold {a} rows, expected {n_rows}")
    if csr is not None:
        return concat_blocks(csr, [Y], fit_intercept, consume=True)
    if fit_intercept:
        X[:, d] = 1.0
    return Block(X=X, Y=Y)


def release_freed_heap() -> bool:
    """Give the C heap's free pages back to the OS (glibc ``malloc_trim``); False elsewhere.

    Building a block (Zarr chunks decoded, concatenated, the bias column
    appended) frees several times the block's size, which glibc keeps in
    the worker's heap, so a worker would stay well above its memory before
    loading by several block sizes. ``benchmarks/rbrl_speed.py`` (section 2)
    measures the workers' memory over the chunk. Dask's own advice for
    unmanaged memory is the same call.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError, TypeError):
        return False


def _host_name() -> str:
    """The host name of the process that runs it (a worker, through ``client.run``)."""
    import socket

    return socket.gethostname()


def _n_rows(block) -> int:
    return int(block.n_rows)


def _holds_any(keys, dask_worker=None) -> bool:
    """Whether this worker (through ``client.run``) still holds the data or actor of any of ``keys``."""
    state = dask_worker.state
    return any(k in dask_worker.data or k in state.actors for k in keys)


def _wait_released(client, keys: list, timeout: float) -> bool:
    """Wait until no worker holds any of ``keys`` (released by this client); False on timeout.

    Best effort: a client or cluster shutting down, or a key something else
    still wants, ends the wait without an error.
    """
    deadline = time.monotonic() + timeout
    try:
        while any(client.run(_holds_any, keys).values()):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
    except Exception:
        return False
    return True


def made_current(client):
    """``client.as_current()``, unless ``client`` is already current in this thread (then nothing).

    ``Client.as_current`` also sets dask's global ``scheduler`` setting, and
    threads that enter and leave it in turn can leave that setting changed
    after they are done (thread A saves "unset", B saves A's value, A
    restores "unset", B restores A's value), so that later computations
    here ask for a client that is not current. The threads of a search run
    in a context where the client is already current
    (``dmlr.paths._run_chunked``), and do not touch the setting.
    """
    from distributed import Client

    try:
        current = Client.current(allow_global=False)
    except ValueError:
        current = None
    return contextlib.nullcontext() if current is client else client.as_current()


def _free_placement(client, futures) -> None:
    """Drop the worker restrictions of built blocks: a block Dask computes again may go to any worker.

    The restrictions placed each block once (:func:`block_workers`). Kept,
    they would name workers that may die: distributed places a task whose
    loose restrictions (``allow_other_workers``) name only dead workers on
    any live one, but once every worker has died it leaves such a task
    waiting for good, since a joining worker is offered only the waiting
    tasks it satisfies (``Scheduler.bulk_schedule_unrunnable_after_adding_worker``),
    and the fit would hang. ``set_restrictions`` is the scheduler's own handler.
    """
    client.sync(client.scheduler.set_restrictions, worker={f.key: None for f in futures})


def _wait_or_raise(client, futures) -> None:
    from distributed import wait

    with made_current(client):  # distributed.wait uses the current client
        wait(futures)
    for f in futures:
        if f.status == "error":
            f.result()  # raises the worker's exception here


_WARMED: set = set()


def warm_up_workers(client) -> None:
    """Compile the RBRL ranking kernels (:func:`dmlr.kernels.warm_up`) on every worker, once per client.

    So that compilation (or loading Numba's cache) does not land in the
    first iteration's time.
    """
    key = id(client)
    if key not in _WARMED:
        from dmlr.kernels import warm_up

        client.run(warm_up)
        _WARMED.add(key)
