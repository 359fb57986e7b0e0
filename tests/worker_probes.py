"""Test helpers that run on Dask workers: shipped by value (``client.run``), since a worker
process need not be able to import this directory's modules."""

import sys

import cloudpickle


def run_on_workers(client, fn, *args, **kwargs) -> dict:
    """``client.run(fn, *args)`` with this module's functions shipped by value."""
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        return client.run(fn, *args, **kwargs)
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def record_factored_points() -> None:
    """Record the time of every speculative block call on this worker that received its point
    as low-rank factors (:class:`dmlr.solvers.prox.LowRank`, as a fit's solver sends them);
    :func:`factored_points` returns them.

    The call's function travels down the summation tree from worker to worker, so the wrapper
    may run on another worker than the one it was made on: it finds the log and the original
    function in the module of the process it runs in.
    """
    from dmlr.distributed import extrapolation

    if not hasattr(extrapolation, "_test_answer_block"):
        extrapolation._test_answer_block = extrapolation.answer_block
        extrapolation._test_factored = []

    def answer_block(block, step_fn, wants_pair_fn, W, *args):
        import time

        from dmlr.distributed import extrapolation
        from dmlr.solvers.prox import LowRank

        if isinstance(W, LowRank):
            extrapolation._test_factored.append(time.time())
        return extrapolation._test_answer_block(block, step_fn, wants_pair_fn, W, *args)

    extrapolation.answer_block = answer_block


def factored_points() -> list:
    """The times :func:`record_factored_points` recorded on this worker since the last call."""
    from dmlr.distributed import extrapolation

    log = getattr(extrapolation, "_test_factored", [])
    times = list(log)
    log.clear()
    return times


def set_max_factor_fraction(value: float) -> float:
    """Set :attr:`dmlr.distributed.oracle.ChunkOracle.max_factor_fraction` in this worker (where
    a fit's solver runs); returns the previous value."""
    from dmlr.distributed.oracle import ChunkOracle

    previous = ChunkOracle.max_factor_fraction
    ChunkOracle.max_factor_fraction = value
    return previous
