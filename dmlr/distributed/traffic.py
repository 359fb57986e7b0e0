"""Bytes through this process's Dask TCP connections, by peer.

A diagnostic for the distributed layer's traffic: how many bytes a client
sends to and receives from the workers (and the scheduler) per call, which
:meth:`dmlr.distributed.chunks.ClusterChunks.map_reduce` keeps independent of
the number of workers. ``benchmarks/scale_out.py`` and the tests count with it.

It wraps Tornado's ``IOStream.read_from_fd`` and ``write_to_fd`` (the socket
``recv_into`` and ``send`` under distributed's TCP comms) while it is
installed: ``/proc/self/io`` does not count socket traffic, and distributed
keeps no per-connection byte counts of its own.
"""

from __future__ import annotations

import threading

import numpy as np


class CommBytes:
    """Count the bytes this process's Tornado streams move, split by peer.

    Parameters
    ----------
    scheduler : (host, port)
        The scheduler's address: streams to it count as "scheduler", and
        the streams of a scheduler that runs in this process (those whose
        local port is its port) are not counted at all. Every other stream
        counts as "workers".

    Use as a context manager; :meth:`totals` reads the counts at any time.
    """

    def __init__(self, scheduler: tuple):
        self.scheduler = (scheduler[0], int(scheduler[1]))
        self.counts = {"workers": [0, 0], "scheduler": [0, 0]}  # [in, out]
        self._lock = threading.Lock()
        self._saved = None

    @classmethod
    def of_address(cls, address: str) -> CommBytes:
        """A counter split at the scheduler at ``address`` (``tcp://host:port``)."""
        host, port = address.split("://", 1)[-1].rsplit(":", 1)
        return cls((host, int(port)))

    @classmethod
    def of_client(cls, client) -> CommBytes:
        """A counter for the connections of ``client``'s process, split at its scheduler."""
        return cls.of_address(client.scheduler.address)

    def _peer(self, stream):
        peer = getattr(stream, "_dmlr_peer", False)
        if peer is False:
            try:
                there = stream.socket.getpeername()[:2]
                here = stream.socket.getsockname()[:2]
            except OSError:
                return None
            if here[1] == self.scheduler[1] and there != self.scheduler:
                peer = None  # the server side of a scheduler in this process
            else:
                peer = "scheduler" if tuple(there) == self.scheduler else "workers"
            stream._dmlr_peer = peer
        return peer

    def _count(self, stream, k: int, n) -> None:
        if n:
            peer = self._peer(stream)
            if peer is not None:
                with self._lock:
                    self.counts[peer][k] += n

    def __enter__(self) -> CommBytes:
        from tornado.iostream import IOStream

        if self._saved is not None:
            raise RuntimeError("this counter is already installed")
        read, write = IOStream.read_from_fd, IOStream.write_to_fd
        self._saved = (read, write)
        counter = self

        def read_from_fd(stream, buf):
            n = read(stream, buf)
            counter._count(stream, 0, n)
            return n

        def write_to_fd(stream, data):
            n = write(stream, data)
            counter._count(stream, 1, n)
            return n

        IOStream.read_from_fd, IOStream.write_to_fd = read_from_fd, write_to_fd
        return self

    def __exit__(self, *exc) -> None:
        from tornado.iostream import IOStream

        IOStream.read_from_fd, IOStream.write_to_fd = self._saved
        self._saved = None

    def totals(self) -> np.ndarray:
        """int64 [workers in, workers out, scheduler in, scheduler out]: bytes so far."""
        with self._lock:
            return np.array(self.counts["workers"] + self.counts["scheduler"], dtype=np.int64)
