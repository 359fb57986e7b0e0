"""A fit's solver run on the worker of block 0, the root of the summation tree, in segments.

Driven from the client, every oracle call of a fit on Dask workers leaves the
client for block 0's worker and comes back (:meth:`ClusterChunks.map_reduce
<dmlr.distributed.chunks.ClusterChunks.map_reduce>`), and the solver's own work
(the quasi-Newton pairs, the nuclear norm, the prox) runs on the client while
the workers wait: the client is on every iteration's critical path, twice
(``benchmarks/scale_out.py`` measures it). Run on block 0's worker, the solver
calls the summation tree in that process (:class:`RootChunks`,
:meth:`BlockActor.reduce <dmlr.distributed.chunks.BlockActor.reduce>`): the
client leaves the iteration altogether, and the numbers are the same (the same
tree over the same blocks).

The solver runs there in segments (:func:`solve_on_root`). A segment is one
task that resumes the solver from the state the previous one ended at (the
solvers' checkpoint states, from which a run continues with the same iterates)
and ends at the first step after ``every`` iterations where the solver offers
a checkpoint, returning that state, or the result when the fit ends. Between
segments the client replays the segment's progress to the fit's callback and
writes the fit's checkpoint. The state stays on the worker for the next
segment; the client fetches a copy with each checkpoint, or every
:data:`BACKUP_SECONDS` otherwise. When a worker was lost, the client rebuilds
the lost blocks and repeats the segment from its copy, as it repeats a lost
map-reduce call: the fit ends at the model of an uninterrupted one.

A segment's iterations cannot be interrupted from the client (the callback is
replayed after the segment, its return value not asked for): the solvers'
callbacks here report progress only.
"""

from __future__ import annotations

import asyncio
import operator
import time

from dmlr.distributed.chunks import PROCESS_TOKEN, ChunkSet, Resident, add_results

#: Iterations of a fit's first segment when the fit writes no checkpoint; later
#: segments take about :data:`SEGMENT_SECONDS` at the pace measured so far.
FIRST_SEGMENT = 5
#: Target seconds of a segment: each one costs two tasks and a round trip, and the
#: progress shown lags by one segment.
SEGMENT_SECONDS = 2.0
#: Seconds between the copies of the solver's state that the client fetches (when the fit
#: writes no checkpoint): a lost root worker repeats the segments since the last copy.
BACKUP_SECONDS = 10.0
#: Iterations of a segment, at most.
MAX_SEGMENT = 1000


class SegmentEnd(Exception):
    """Raised by a segment's checkpoint hook to stop the solver at a state it can resume from."""

    def __init__(self, state):
        super().__init__("segment ended")
        self.state = state


class RootChunks(ChunkSet):
    """A :class:`~dmlr.distributed.chunks.ClusterChunks`'s blocks seen from the worker of its block 0.

    Built inside a task on that worker (:func:`solve_on_root`): calls run block 0's
    actor's :meth:`~dmlr.distributed.chunks.BlockActor.reduce` on this worker's event
    loop, as the client's calls do, with this process as the caller (the blocks here
    are handed the caller's arrays, not copies: the solvers never write into a point
    they evaluated).

    Parameters
    ----------
    peers : list of (worker address, actor key)
        Block i's actor, in block order.
    sizes : list of int
        Rows per block.
    """

    backend = "dask"

    def __init__(self, peers: list, sizes: list[int]):
        from distributed import get_worker

        worker = get_worker()
        if peers[0][0] != worker.address:
            raise RuntimeError(f"block 0's actor is on {peers[0][0]}, this task on {worker.address}")
        self._root = worker.state.actors[peers[0][1]]
        self._loop = worker.loop.asyncio_loop
        self._peers = list(peers)
        self._sizes = list(sizes)
        self.n_blocks = len(peers)
        self.n_rows = int(sum(sizes))

    def map_reduce_async(self, fn, *args, combine=add_results):
        """The call down the summation tree from block 0's actor, started; returns its wait."""
        call = self._root.reduce(0, self.n_blocks, self._peers, fn, args, combine, PROCESS_TOKEN)
        return asyncio.run_coroutine_threadsafe(call, self._loop).result

    def map_reduce(self, fn, *args, combine=add_results):
        """``fn(block, *args)`` on every block, combined along the summation tree."""
        return self.map_reduce_async(fn, *args, combine=combine)()

    def map_blocks(self, fn, *args) -> list:
        """``[fn(block, *args) for block in blocks]``, in block order, up the summation tree."""
        return self.map_reduce(_listed, fn, *args, combine=operator.add)

    def _block_sizes(self) -> list[int]:
        return list(self._sizes)


def _listed(block, fn, *args) -> list:
    return [fn(block, *args)]


def solve_on_root(chunks, solve, x0, *, state=None, checkpoint=None, callback=None):
    """Run ``solve`` on the worker of ``chunks``'s block 0, segment after segment (see the module).

    Parameters
    ----------
    chunks : ClusterChunks
    solve : callable
        ``solve(chunkset, x0, state=, checkpoint=, callback=) -> SolverResult``, picklable:
        builds the oracle on the chunk set it is given and runs the solver from ``x0`` or
        ``state`` with the solvers' ``checkpoint`` and ``callback`` arguments. ``x0`` is None
        when there is a state (which holds the point: not sent again with each segment).
    x0 : ndarray
        The start, where there is no state.
    state : optional
        The solver's state to start from (a resumed checkpoint).
    checkpoint : (every, write), optional
        The fit's checkpoint: segments then end every ``every`` iterations, where the solver
        would have written, and ``write(state)`` is called here with each segment's state.
    callback : callable, optional
        The solver's callback, called here with each segment's calls after the segment.

    Returns
    -------
    SolverResult
    """
    every = FIRST_SEGMENT if checkpoint is None else int(checkpoint[0])
    # what a segment resumes from, as a segment returns it: the start (x0, or the state given)
    previous = Resident(None, ("start", x0, []) if state is None else ("state", state, []))
    backed_up = time.perf_counter()
    try:
        while True:
            start = time.perf_counter()
            future, (kind, calls) = chunks.run_on_root(_segment, _summary, solve, previous, every)
            # the state's copy here (for a lost root): the result, a checkpoint, or a backup now and then
            due = kind == "result" or checkpoint is not None or start - backed_up >= BACKUP_SECONDS
            if previous.future is not None:
                previous.future.release()
            previous = Resident(future, future.result() if due else previous.value)
            backed_up = start if due else backed_up
            if callback is not None:
                for call in calls:
                    callback(*call)
            if kind == "result":
                return previous.value[1]
            if checkpoint is not None:
                checkpoint[1](previous.value[1])
            else:
                pace = (time.perf_counter() - start) / max(len(calls), 1)
                every = int(min(MAX_SEGMENT, max(1, SEGMENT_SECONDS / max(pace, 1e-9))))
    finally:
        if previous.future is not None:
            previous.future.release()


def _summary(outcome) -> tuple:
    """(kind, calls) of a segment's return, without its state."""
    return outcome[0], outcome[2]


def _segment(where, solve, previous, every: int):
    """One segment, as a task on block 0's worker, from ``previous``: the last segment's
    return, ("state", the solver's state, calls), or the fit's start, ("start", x0, []).
    Returns ("state", the solver's state, calls) at the first checkpoint after ``every``
    iterations, or ("result", SolverResult, calls); ``calls`` are the callback's (t,
    objective, seconds) of the segment."""
    from distributed import secede

    secede()  # the blocks' calls on this worker run on its task threads: leave them one
    chunks = RootChunks(*where)
    calls = []

    def record(t, objective, seconds):
        calls.append((t, objective, seconds))
        return False

    def end(state):
        raise SegmentEnd(state)

    x0, state = (previous[1], None) if previous[0] == "start" else (None, previous[1])
    try:
        result = solve(chunks, x0, state=state, checkpoint=(every, end), callback=record)
    except SegmentEnd as e:
        return "state", e.state, calls
    return "result", result, calls
