"""Row chunks read in order, one at a time: the data source of the online solvers.

Online methods (ANSGD, SGD, MMP, OML, OMF) visit rows in order, so they do not
need a training set in memory, only the chunk they are on. A
:class:`ChunkStream` reads the row chunks of (X, Y) in order -- each dask chunk
computed on its own (for a Zarr store, a read of that chunk), the next one
read in a background thread while the solver works on the current one -- and
yields them as :class:`dmlr.data.blocks.Block`. At most two chunks are in
memory at a time; the whole set is never gathered.

:func:`run_streaming` runs ``fn(stream, *args)`` where the data is read: in a
task on a Dask worker when a distributed client is given or current and the
data are dask arrays (the worker reads the Zarr chunks itself; only ``fn``'s
result, e.g. a d x K weight matrix, comes back to the client), otherwise in
this process. The stream's rows and their order do not depend on where it
runs, so the result does not either.
"""

from __future__ import annotations

import concurrent.futures
from dataclasses import dataclass

import numpy as np

from dmlr.data.arrays import is_dask
from dmlr.data.blocks import Block, make_block


@dataclass
class ChunkStream:
    """The row chunks of (X, Y), read in order with one chunk of read-ahead.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix or dask array (n, d)
        Dask arrays are read chunk by chunk along their row chunks;
        in-memory arrays are cut into ``chunk_rows`` rows.
    Y : array-like or dask array (n, l) of 0/1
    fit_intercept : bool
        Append the constant-1 column to every block.
    chunk_rows : int
        Rows per block for in-memory input (dask input keeps its chunks).
    prefetch : bool
        Read the next chunk in a background thread while the current one is used.

    Iterating yields :class:`Block` objects (dense float64 or CSR X, int8 Y).
    """

    X: object
    Y: object
    fit_intercept: bool = False
    chunk_rows: int = 4096
    prefetch: bool = True

    def __post_init__(self):
        if self.X.shape[0] != np.shape(self.Y)[0]:
            raise ValueError(f"X has {self.X.shape[0]} rows but Y has {np.shape(self.Y)[0]}")
        if int(self.chunk_rows) < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {self.chunk_rows!r}")

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Columns of the blocks (with the bias column when ``fit_intercept``)."""
        return int(self.X.shape[1]) + bool(self.fit_intercept)

    @property
    def n_labels(self) -> int:
        return int(np.shape(self.Y)[1])

    def _readers(self) -> list:
        """One zero-argument callable per chunk, returning ``(X_chunk, Y_chunk)``."""
        X, Y = self.X, self.Y
        if is_dask(X):
            import dask

            from dmlr.distributed.chunks import _align

            X, Y = _align(X, Y)
            xs, ys = X.to_delayed().ravel(), Y.to_delayed().ravel()
            # the synchronous scheduler: inside a worker task, no nested tasks on the cluster
            return [lambda x=x, y=y: dask.compute(x, y, scheduler="sync") for x, y in zip(xs, ys)]
        Y = np.asarray(Y)
        step = int(self.chunk_rows)
        return [lambda a=a: (X[a : a + step], Y[a : a + step]) for a in range(0, X.shape[0], step)]

    def __iter__(self):
        readers = self._readers()

        def to_block(part):
            return make_block(part[0], part[1], bool(self.fit_intercept))

        if not self.prefetch or len(readers) < 2:
            for read in readers:
                yield to_block(read())
            return
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dmlr-prefetch") as pool:
            pending = pool.submit(readers[0])
            for nxt in readers[1:] + [None]:
                part = pending.result()
                if nxt is not None:
                    pending = pool.submit(nxt)
                yield to_block(part)

    def blocks(self) -> list[Block]:
        """Every block (reads the whole set: for small data and tests only)."""
        return list(self)


def _current_client():
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def streaming_client(stream: ChunkStream, client=None, where: str = "auto"):
    """The client whose worker should run a streamed fit, or None to run it in this process.

    ``where``: ``"auto"`` -- a worker when the data are dask arrays and a
    client is given or current; ``"worker"`` -- always (a client from
    :func:`dmlr.get_client` if none is current); ``"local"`` -- never.
    """
    if where not in ("auto", "worker", "local"):
        raise ValueError(f"where must be 'auto', 'worker' or 'local', got {where!r}")
    if where == "local":
        return None
    client = client or _current_client()
    if where == "auto" and (client is None or not is_dask(stream.X)):
        return None
    if client is None:
        from dmlr.distributed.client import get_client

        client = get_client()
    return client


def run_streaming(fn, stream: ChunkStream, *args, client=None, where: str = "auto"):
    """``fn(stream, *args)``, on a Dask worker or in this process (see :func:`streaming_client`).

    Parameters
    ----------
    fn : callable
        Iterates the stream (once or several times: each pass re-reads the
        chunks) and returns a small result.
    stream : ChunkStream
    client : distributed.Client, optional
        Default: the current client, if any.
    where : {"auto", "worker", "local"}

    Returns
    -------
    fn's result
    """
    client = streaming_client(stream, client, where)
    if client is None:
        return fn(stream, *args)
    # The stream goes to the task as one object: dask collections inside a
    # plain object are not computed by the client before the task runs.
    return client.submit(fn, stream, *args, pure=False).result()
