"""Finding the Dask client dmlr runs on.

Order: the current client (``distributed.default_client()``); else the
scheduler address from the ``address`` argument, ``DASK_SCHEDULER_ADDRESS``
or dask config ``scheduler-address`` (what the Dask Helm chart sets in the
Jupyter pod); else a ``LocalCluster`` sized to this machine, started once per
process and closed at exit.
"""

from __future__ import annotations

import atexit
import logging
import os

import dask

logger = logging.getLogger("dmlr")

_LOCAL = {"cluster": None, "client": None}


def local_cluster_size(n_cores: int | None = None) -> tuple[int, int]:
    """(n_workers, threads_per_worker) for a local cluster on ``n_cores`` cores.

    One single-threaded worker process per core, at most 8: the kernels
    release the GIL, but separate processes keep BLAS and Numba threads from
    oversubscribing the cores.
    """
    n = n_cores or os.cpu_count() or 1
    return max(1, min(n, 8)), 1


#: Environment of dmlr's worker processes (merged over Dask's own ``pre-spawn-environ``).
#: Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` to 64 KiB, and setting any malloc tunable turns
#: off glibc's dynamic mmap threshold, leaving it at 128 KiB: every allocation above that (a
#: tile's scores, a CSR row slice, the output of ``X.T @ C``) would be a fresh ``mmap`` whose
#: pages fault on first touch, which makes the kernels markedly slower on a worker than in one
#: process (a search unit, a chunked fit's passes). The mmap threshold is set back to 32 MiB,
#: the ceiling glibc's dynamic threshold itself rises to on 64-bit systems, at the same peak
#: worker memory as a 1 MiB threshold. The trim threshold goes with it to twice that, the
#: pair glibc's dynamic rule keeps: at 64 KiB every free at the top of the heap hands the
#: pages back to the system, and the next call's arrays fault them in again; a worker keeps
#: instead up to the threshold of freed memory per malloc arena between calls
#: (``benchmarks/worker_malloc.py`` measures the time and the memory of each setting). On a
#: cluster that dmlr does not start, give the workers the same variables through Dask's
#: ``pre-spawn-environ`` (``deploy/Dockerfile``).
WORKER_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": str(2**25), "MALLOC_TRIM_THRESHOLD_": str(2**26)}


def local_cluster(n_workers: int | None = None, threads_per_worker: int | None = None, **kwargs):
    """A ``LocalCluster`` of worker processes with :data:`WORKER_ENVIRON` set and no profiler.

    Parameters
    ----------
    n_workers, threads_per_worker : int, optional
        Default: :func:`local_cluster_size` of this machine.
    **kwargs
        Passed to ``distributed.LocalCluster`` (``processes=True``,
        ``dashboard_address=":0"`` and quiet logs unless given).

    Returns
    -------
    distributed.LocalCluster
    """
    from distributed import LocalCluster

    default_workers, default_threads = local_cluster_size()
    kwargs.setdefault("processes", True)
    kwargs.setdefault("dashboard_address", ":0")
    kwargs.setdefault("silence_logs", logging.ERROR)
    # glibc reads its tunables once, at process start: they must be in the environment the
    # worker process is spawned with (the nanny's "pre-spawn-environ", which each nanny
    # reads when it is created and reuses for restarts), not set later as the nanny's
    # ``env=`` variables are
    pre_spawn = {**dask.config.get("distributed.nanny.pre-spawn-environ", {}), **WORKER_ENVIRON}
    # The workers' statistical profiler (the dashboard's profile page) samples every thread's
    # stack at a fixed interval, a cost on every iteration for a page dmlr does not use. Bring
    # your own cluster to keep it.
    with dask.config.set(
        {"distributed.nanny.pre-spawn-environ": pre_spawn, "distributed.worker.profile.enabled": False}
    ):
        return LocalCluster(
            n_workers=n_workers or default_workers, threads_per_worker=threads_per_worker or default_threads, **kwargs
        )


def _close_local():
    client, cluster = _LOCAL["client"], _LOCAL["cluster"]
    _LOCAL["client"] = _LOCAL["cluster"] = None
    for obj in (client, cluster):
        if obj is not None:
            try:
                obj.close()
            except Exception:  # best effort at interpreter exit
                pass


def cluster_workers(client) -> dict:
    """The scheduler's record of each of ``client``'s workers (address -> info: ``nthreads``,
    ``memory_limit``, ...), asked of the scheduler now.

    Not ``client.scheduler_info()["workers"]``: that method refreshes the client's cached
    identity and then returns the cache, which distributed's own periodic refresh overwrites
    with a record that lists no worker (it asks for totals only). From another thread, or
    between the two steps, the workers then read as none.
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def get_client(address: str | None = None, *, quiet: bool = False):
    """Return the Dask client dmlr should use.

    Parameters
    ----------
    address : str, optional
        Scheduler address (e.g. ``tcp://dask-scheduler:8786``); overrides
        the environment and dask config.
    quiet : bool
        Do not print the dashboard link of a newly started local cluster.

    Returns
    -------
    distributed.Client
    """
    from distributed import Client, default_client

    if address is None:
        try:
            return default_client()
        except ValueError:
            pass
        address = os.environ.get("DASK_SCHEDULER_ADDRESS") or dask.config.get("scheduler-address", None)
    if address:
        client = Client(address)
        if not quiet:
            print(f"dmlr: connected to {address}; dashboard: {client.dashboard_link}")
        return client
    if _LOCAL["client"] is not None and _LOCAL["client"].status == "running":
        return _LOCAL["client"]
    from dmlr.distributed.placement import unguarded_script

    if unguarded_script():
        # Spawned worker processes would run the script's top level again (and start a cluster
        # each): one worker of threads in this process instead, which needs no re-import.
        n_workers, threads = 1, local_cluster_size()[0]
        cluster = local_cluster(n_workers, threads, processes=False)
        kind = f"1 in-process worker x {threads} threads: the call is not under if __name__ == '__main__'"
    else:
        n_workers, threads = local_cluster_size()
        cluster = local_cluster(n_workers, threads)
        kind = f"{n_workers} workers x {threads} thread"
    client = Client(cluster, set_as_default=True)
    _LOCAL["cluster"], _LOCAL["client"] = cluster, client
    atexit.register(_close_local)
    if not quiet:
        print(f"dmlr: started a local Dask cluster ({kind}); dashboard: {client.dashboard_link}")
    return client
