"""Where a job runs: in this process, whole inside one worker, or over the chunks of many.

A job whose data fit comfortably in one process runs there, with no round
trip per iteration: a search's unit inside one worker (units spread over the
workers), a fit in this process when no cluster is configured. Only data too
large for that take the chunked path, one fit spread over the workers
(:func:`dmlr.distributed.chunks.make_chunkset`).

"Comfortably" compares the data's in-memory size with the memory limit of the
process that would hold them (a worker's ``memory_limit``, or this machine's
memory as Dask measures it, cgroup limits included), leaving
:data:`MEMORY_HEADROOM` for the copies a job makes (a fold's training and
validation rows, one per unit running at once) and its working arrays.
"""

from __future__ import annotations

import ast
import os
import sys

import numpy as np
import scipy.sparse as sp

from dmlr.data.arrays import is_dask, is_sparse
from dmlr.distributed.client import cluster_workers

__all__ = [
    "MEMORY_HEADROOM",
    "cluster_configured",
    "data_nbytes",
    "fits_in_memory",
    "memory_limit",
    "unguarded_script",
]

#: Data fit in a process when their size is at most this fraction of its memory limit: a
#: unit holds the data, a copy of its fold's rows and its working arrays, and each of a
#: worker's threads runs a unit.
MEMORY_HEADROOM = 8


def data_nbytes(*arrays) -> int:
    """Bytes the arrays take in memory: dense values, or CSR's values, indices and row pointers.

    A sparse dask array's stored values are counted from its chunks (one pass
    over them, reading only what each chunk's ``nnz`` needs).
    """
    total = 0
    for a in arrays:
        if a is None:
            continue
        itemsize = np.dtype(a.dtype).itemsize
        if not is_sparse(a):
            total += int(np.prod(a.shape)) * itemsize
            continue
        if sp.issparse(a) or hasattr(a, "nnz") and not is_dask(a):
            nnz = int(a.nnz)
        else:
            import dask

            nnz = int(sum(dask.compute(*[dask.delayed(_nnz)(c) for c in a.to_delayed().ravel()])))
        total += nnz * (itemsize + 4) + (int(a.shape[0]) + 1) * 8
    return total


def _nnz(chunk) -> int:
    return int(chunk.nnz)


def cluster_configured() -> bool:
    """Whether a Dask cluster is there to use: a client in dmlr's settings or Dask's current
    one, ``DASK_SCHEDULER_ADDRESS`` or dask's ``scheduler-address`` (what the Dask Helm chart
    sets in the Jupyter pod)."""
    import dask

    from dmlr.config import get_config

    if get_config()["client"] is not None or current_client() is not None:
        return True
    return bool(os.environ.get("DASK_SCHEDULER_ADDRESS") or dask.config.get("scheduler-address", None))


def current_client():
    """The current ``distributed.Client``, or None (never starts one)."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def memory_limit(client=None) -> int:
    """Bytes one process may hold: the smallest worker ``memory_limit`` of ``client``'s
    cluster (a worker without a limit counts as this machine's memory), or, with no
    client, this machine's memory (``distributed.system.MEMORY_LIMIT``)."""
    from distributed.system import MEMORY_LIMIT

    return int(MEMORY_LIMIT) if client is None else _smallest_limit(cluster_workers(client))


def _smallest_limit(info: dict) -> int:
    """:func:`memory_limit` from one reading of the cluster's workers (``info``:
    :func:`~dmlr.distributed.client.cluster_workers`)."""
    from distributed.system import MEMORY_LIMIT

    limits = [int(w.get("memory_limit") or 0) for w in info.values()]
    limits = [m if m > 0 else int(MEMORY_LIMIT) for m in limits]
    return min(limits) if limits else int(MEMORY_LIMIT)


def fits_in_memory(nbytes: int, client=None) -> bool:
    """``nbytes`` of data fit comfortably in one process (see :data:`MEMORY_HEADROOM`)."""
    return int(nbytes) * MEMORY_HEADROOM <= memory_limit(client)


def worker_groups(client, nbytes: int) -> list[tuple[str, ...]]:
    """Disjoint groups of ``client``'s workers, each able to hold ``nbytes`` of data with room to
    spare (:data:`MEMORY_HEADROOM`, against the smallest worker's memory limit): as many
    groups as the workers make, in sorted address order (one group of all the workers when
    the data need them all)."""
    info = cluster_workers(client)  # read once: the limit is that of the workers grouped
    workers = sorted(info)
    per_worker = max(_smallest_limit(info) // MEMORY_HEADROOM, 1)
    size = max(1, -(-int(nbytes) // per_worker))
    n_groups = max(1, len(workers) // size)
    if n_groups == 1:
        return [tuple(workers)]
    return [tuple(workers[g::n_groups]) for g in range(n_groups)]


def unguarded_script() -> bool:
    """Whether this call comes from a script's top-level code outside ``if __name__ == "__main__":``.

    Worker processes of a local cluster are spawned, and a spawned process
    imports the main script again: top-level code that starts the cluster
    would start it again in every worker, which fails. Such a script gets a
    cluster of threads in this process instead (:func:`dmlr.get_client`).
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return False  # an interactive session or a notebook: nothing is re-imported
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "<module>" and frame.f_globals is vars(main)):
        frame = frame.f_back
    if frame is None:
        return False  # called from a function: its caller decides (the guard is above, if anywhere)
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return True
    line = frame.f_lineno
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_guard(node.test) and node.lineno <= line <= node.end_lineno:
            return False
    return True


def _is_main_guard(test) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    consts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and consts == ["__main__"]
