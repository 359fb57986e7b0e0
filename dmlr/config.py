"""Execution settings: where row chunks live and how they are cut, never model parameters.

A model's parameters say what is learned; these settings say where and in
how many pieces the work runs, and the model does not depend on them (up to
summation order). They follow scikit-learn's ``config_context``: a global
value, changed for a block of code with :func:`config_context` (thread-local,
so concurrent fits in threads do not see each other's settings).

Settings
--------
client : distributed.Client or None
    The client to run on; None: Dask's current client, else
    :func:`dmlr.get_client`'s choice when the data need a cluster. Anything
    else (a scheduler's address, say) is a ``ValueError``: connect with
    :func:`dmlr.get_client` and pass its client.
backend : {"auto", "local", "dask"}
    Where training row blocks live (:func:`dmlr.distributed.chunks.make_chunkset`)
    and where streamed online loops run ("dask": on a worker; "local": in
    this process; "auto": small data in this process, dask input on a worker
    when a client is current).
n_blocks : int or None
    Number of row blocks (None: one per worker thread; in-process, one per
    core above a size threshold, else 1).
workers : tuple of str or None
    Addresses of the workers a fit's row blocks go to (None: every worker
    of the client). A search whose fits each need only some of the workers
    runs several at once on disjoint groups (:mod:`dmlr.tuning`).
chunk_rows : int
    Rows per streamed chunk when in-memory input is streamed (dask input keeps
    its own chunks).
query_batch : int
    Query rows per distributed nearest-neighbour search call.
kernel_memory : {"keep", "recompute"}
    Exact kernel models: each block keeps its rows of K between iterations,
    or rebuilds them at every call (no m x n memory held).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

_DEFAULTS = {
    "client": None,
    "backend": "auto",
    "n_blocks": None,
    "workers": None,
    "chunk_rows": 4096,
    "query_batch": 2048,
    "kernel_memory": "keep",
}
_CHOICES = {"backend": ("auto", "local", "dask"), "kernel_memory": ("keep", "recompute")}
_local = threading.local()


def _config() -> dict:
    if not hasattr(_local, "config"):
        _local.config = dict(_DEFAULTS)
    return _local.config


def get_config() -> dict:
    """A copy of the current execution settings (see the module docstring)."""
    return dict(_config())


def check_config(**settings) -> None:
    """A ``ValueError`` (``TypeError`` for an unknown name) for settings :func:`set_config` would refuse."""
    for key, value in settings.items():
        if key not in _DEFAULTS:
            raise TypeError(f"unknown dmlr setting {key!r}; settings: {sorted(_DEFAULTS)}")
        if key in _CHOICES and value not in _CHOICES[key]:
            raise ValueError(f"{key} must be one of {_CHOICES[key]}, got {value!r}")
        if (
            key == "workers"
            and value is not None
            and (isinstance(value, str) or not value or not all(isinstance(w, str) for w in value))
        ):
            raise ValueError(f"workers must be None or a non-empty sequence of worker addresses, got {value!r}")
        if key == "client" and value is not None:
            from distributed import Client

            if not isinstance(value, Client):
                raise ValueError(
                    f"client must be a distributed.Client or None, got {value!r}; for a scheduler's address "
                    "use dmlr.get_client(address); for this process alone backend='local' "
                    "(dmlr.fit: client='local')"
                )
        positive = key in ("chunk_rows", "query_batch") or (key == "n_blocks" and value is not None)
        if positive and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{key} must be a positive integer, got {value!r}")


def set_config(**settings) -> None:
    """Change execution settings for the rest of this thread (see :func:`config_context`)."""
    check_config(**settings)
    _config().update(settings)


@contextmanager
def config_context(**settings):
    """Execution settings for the duration of a ``with`` block.

    Examples
    --------
    >>> import dmlr
    >>> with dmlr.config_context(backend="local", n_blocks=2):
    ...     pass  # fits here keep their row blocks in this process, in 2 blocks
    """
    check_config(**settings)
    old = get_config()
    set_config(**settings)
    try:
        yield
    finally:
        _config().clear()
        _config().update(old)


def chunk_options() -> dict:
    """``backend``, ``client``, ``n_blocks`` and ``workers`` for :func:`dmlr.distributed.chunks.make_chunkset`."""
    cfg = _config()
    return {"backend": cfg["backend"], "client": cfg["client"], "n_blocks": cfg["n_blocks"], "workers": cfg["workers"]}


def stream_where() -> str:
    """Where a streamed loop runs (:func:`dmlr.distributed.stream.run_streaming`'s ``where``)."""
    return {"auto": "auto", "local": "local", "dask": "worker"}[_config()["backend"]]
