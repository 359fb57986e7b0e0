"""Peak worker memory of the hyper-parameter search (:func:`dmlr.tuning.search`) on dask data.

The search runs on the 2-worker local cluster (:func:`dmlr.distributed.local_cluster`,
processes, 1 thread each) on the chunked path (``config_context(backend="dask")``: the
path of dask data above the in-process limit), at two shapes:

* ``mediamill``: the Mediamill-shaped synthetic set (43,907 x 120 dense float32, 101
  labels; :mod:`dmlr.data.synthetic`), all rows;
* ``bookmarks``: the Bookmarks-shaped synthetic set (87,856 x 2,150 CSR float32, density
  0.01, 208 labels), all rows;
* or a staged set by name (``--shapes mediamill_discretized``: the real Mediamill labels,
  its 120 discretized features one-hot encoded by :func:`dmlr.convert` into 360 columns),
  all rows, from ``$DMLR_DATA_DIR``.

What is measured, per worker (the table shows the worker with the largest ratio):

chunk
    The bytes of the data the worker holds for the search: its row block of X and Y in
    the form the fits keep in memory (:func:`dmlr.distributed.chunks.make_chunkset` on all
    rows: X float64, dense or CSR with its indices, the bias column appended; Y int8).
    One stored row chunk of X and Y (the Zarr chunk, in its stored dtype) is printed
    beside it for scale; the stored chunks are smaller than a worker's block.
baseline
    The worker's resident memory (RSS) before the search, with no data loaded: after a
    warm-up search on a small slice of the rows (compiled kernels and imported modules
    are one-time memory, not the data's), once the worker has dropped every key and
    returned its freed heap (``gc.collect``, ``malloc_trim``).
peak
    The worker's peak RSS during the search: the kernel's high-water mark (``VmHWM``),
    reset just before the search, so every spike counts. Sampling RSS at an interval
    (``distributed.diagnostics.MemorySampler`` reads the workers' heartbeats, every 0.5 s
    by default) would miss the short-lived copies made while a fold's rows are selected.
ratio
    (peak - baseline) / chunk. "Peak worker memory under 2x the chunk" means ratio < 2:
    the data count 1x, so everything else the search holds at once (a fold's training
    block, what the solver keeps on it, scores, the kernels' temporaries, chunks read
    from the store) must stay under one more chunk. The same measure as the memory
    column of ``benchmarks/rbrl_speed.py`` (section 2), there for one fit.

How the search holds the data: it never gathers them on the client. A fold is a row
mask over the store's chunks (each chunk's selected rows, read and selected by the
worker that computes it), and each fit is the model's own distributed fit, whose blocks
hold the fold's training rows while it runs; so a worker holds no more than one fold's
rows at a time, not the whole set plus a fold.

The search is capped to keep the run short: ``--grid`` (default three values of
``alpha``, no widening), ``--cv`` folds (default 3) and ``--max-iter`` APG iterations
per fit (default 30): the memory of a fit is reached in its first iterations and
does not grow with their number.

Which worker holds which fold's rows at its peak depends on Dask's scheduling, so
the ratio varies a little from run to run: ``--repeats`` runs each search that
many times, one row each. ``--docs`` also writes the table to
``docs/benchmarks/search_memory.txt`` (the docs include it).

Usage: python benchmarks/search_memory.py [--workdir DIR] [--cv 3] [--max-iter 30]
       [--grid=-1,-2,-3] [--shapes mediamill,bookmarks] [--repeats 1] [--docs]
"""

from __future__ import annotations

import gc
import time

from _common import parser, tee, timed, work_folder

import dmlr
from dmlr import tuning
from dmlr.datasets import STAGED, staged_store, synthetic_store
from dmlr.distributed.chunks import make_chunkset, release_freed_heap
from dmlr.models import RBRL


def rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return True


def peak_bytes() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _n_keys(dask_worker) -> int:
    return len(dask_worker.data)


def settle_workers(client, timeout: float = 30.0) -> None:
    """Wait until the workers hold no keys, then collect garbage and return the freed heap."""
    deadline = time.monotonic() + timeout
    while any(client.run(_n_keys).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    client.run(gc.collect)
    client.run(release_freed_heap)


def array_bytes(a) -> int:
    """Bytes of an in-memory chunk: ndarray, scipy CSR or pydata GCXS (data and indices)."""
    if hasattr(a, "indptr"):
        return int(a.data.nbytes + a.indices.nbytes + a.indptr.nbytes)
    return int(a.nbytes)


def block_bytes(block) -> int:
    return array_bytes(block.X) + array_bytes(block.Y)


def worker_chunk_bytes(client, X, Y) -> dict:
    """Bytes of each worker's block of (X, Y), as a fit on all rows holds them, by worker address."""
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client)
    try:
        sizes = client.gather([client.submit(block_bytes, f, pure=False) for f in chunks.futures])
        where = client.who_has(chunks.futures)
        out: dict = {}
        for f, size in zip(chunks.futures, sizes):
            for w in where[f.key]:
                out[w] = out.get(w, 0) + size
        return out
    finally:
        chunks.close()


def stored_chunk_bytes(X, Y) -> int:
    """Bytes of the first stored row chunk of X and Y, in their stored dtypes."""
    return array_bytes(X.blocks[0].compute(scheduler="sync")) + array_bytes(Y.blocks[0].compute(scheduler="sync"))


def run_search(X, Y, client, grid, cv, max_iter):
    """The search, capped: ``alpha`` over ``grid`` (exponents, per row), no widening."""
    axis = tuning.Axis("alpha", tuple(grid), per_row=True)
    saved = RBRL._search_space
    RBRL._search_space = (axis,)
    try:
        with dmlr.config_context(backend="dask", client=client):
            return tuning.search(RBRL(max_iter=max_iter), X, Y, params=["alpha"], cv=cv, max_widen=0)
    finally:
        RBRL._search_space = saved


def measure(name, X, Y, client, args) -> dict:
    """One shape: warm-up, baseline, the search under a reset high-water mark, the ratios."""
    chunk = worker_chunk_bytes(client, X, Y)
    stored = stored_chunk_bytes(X, Y)
    n_warm = min(int(X.shape[0]), 2 * X.chunks[0][0])
    run_search(X[:n_warm], Y[:n_warm], client, args.grid[:1], 2, 2)
    settle_workers(client)
    base = client.run(rss_bytes)
    client.run(reset_peak)
    result, seconds = timed(run_search, X, Y, client, args.grid, args.cv, args.max_iter)
    peaks = client.run(peak_bytes)
    ratios = {w: (peaks[w] - base[w]) / chunk[w] for w in peaks}
    w = max(ratios, key=ratios.get)
    return {
        "name": name,
        "shape": f"{X.shape[0]} x {X.shape[1]}{' CSR' if hasattr(X._meta, 'nnz') else ''}, {Y.shape[1]} labels",
        "stored": stored,
        "chunk": chunk[w],
        "base": base[w],
        "peak": peaks[w],
        "ratio": ratios[w],
        "fits": result.n_fits,
        "seconds": seconds,
        "backend": result.backend,
    }


def main(argv=None):
    ap = parser(__doc__, full_doc=True, workdir=None, docs="search_memory")
    ap.add_argument("--cv", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=30)
    ap.add_argument("--grid", default="-1,-2,-3", help="base-10 exponents of alpha per training row")
    ap.add_argument("--shapes", default="mediamill,bookmarks")
    ap.add_argument("--repeats", type=int, default=1, help="searches per data set, one row each")
    args = ap.parse_args(argv)
    args.grid = [float(g) for g in args.grid.split(",")]
    work = work_folder(args.workdir)
    sets = []
    for shape in args.shapes.split(","):
        if shape in STAGED:
            sets.append((shape, staged_store(shape, work)))
        else:
            sets.append((f"{shape}-shaped synthetic", synthetic_store(shape, work)))

    from distributed import Client

    from dmlr.distributed import local_cluster

    with tee("search_memory", args.docs):
        print(
            f"search: RBRL alpha over 10^({args.grid}) x n_train, {args.cv} folds, max_iter={args.max_iter}, "
            "2 workers x 1 thread, backend='dask'"
        )
        print(
            "\n| data set (all rows) | shape | stored row chunk of X+Y | worker's chunk of X+Y | baseline RSS "
            "| peak RSS | (peak - baseline) / chunk | under 2x | fits | search s |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|")
        mib = 2.0**20
        with local_cluster(2, 1) as cluster, Client(cluster) as client:
            for name, path in sets:
                X, Y = dmlr.open_dataset(path).arrays(None)
                for _ in range(args.repeats):
                    m = measure(name, X, Y, client, args)
                    print(
                        f"| {m['name']} | {m['shape']} | {m['stored'] / mib:.1f} MiB | {m['chunk'] / mib:.1f} MiB "
                        f"| {m['base'] / mib:.0f} MiB | {m['peak'] / mib:.0f} MiB | {m['ratio']:.2f}x "
                        f"| {'yes' if m['ratio'] < 2 else 'no'} | {m['fits']} | {m['seconds']:.0f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
