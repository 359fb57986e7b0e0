"""Scaling out linear RBRL: the client's bytes and time per L-BFGS oracle call on 1 to 8 workers.

Designs of a fit's iterations on the Dask backend, side by side (``--designs``):

* ``root`` (dmlr's, :mod:`dmlr.distributed.root`): the solver runs on the
  worker of block 0 in segments of about 2 s, and calls the summation tree
  below from there: the client only starts segments and receives their
  progress (and, now and then, a copy of the solver's state);
* ``tree`` (:meth:`dmlr.distributed.chunks.ClusterChunks.map_reduce`, the
  solver on the client): the client sends W (d x l float64) once per call,
  to block 0's actor; it travels down a fixed binary tree of the blocks, the
  blocks' gradients are summed up the same tree on the workers, and the
  client receives one d x l result;
* ``tree-wait``: ``tree``, with the solver's nuclear-norm term
  computed after the call returned (as before :meth:`dmlr.solvers.apg.Oracle.submit`);
  ``tree`` computes it while the call is out;
* ``client-sum`` (the design before the tree): the client sends W to every
  block's actor and receives every block's gradient, which it sums; the
  nuclear term after the call.

Issue 49's goals: client bytes per iteration at most 1.5x from 1 to 8
workers, and Dask + client at most 15% of an iteration on 2 workers
(Bookmarks shape).

Shapes (``--shapes``), the train split of each:

* ``bookmarks``: :func:`dmlr.datasets.synthetic_store` ``("bookmarks", seed=0)``,
  87,856 x 2,150 sparse (1% dense), 208 labels (61,405 training rows);
* ``bookmarks4x``: :func:`dmlr.data.synthetic.make_multilabel` with the Bookmarks
  preset's parameters but 4 x 87,856 rows (seed 0; the preset fixes the rows,
  so they are passed one by one);
* ``quick`` (``--quick``): 6,000 x 500 sparse, 40 labels.

For each shape and each count of ``--workers``, a local cluster of that many
single-thread worker processes (:func:`dmlr.distributed.local_cluster`) and a
client in a process of its own (a child of this one, so that its sockets carry
the client's traffic only: the cluster's scheduler runs in this process), which
fits ``RBRL(solver="lbfgs", max_iter=--iters, tol=0, scaling=None,
alpha_nuclear=0.1)`` inside ``dmlr.config_context(backend="dask", client=...)``
on the store's dask arrays (one block per worker), as
``benchmarks/dask_overhead.py`` does. Per oracle call, medians over the calls
of the fit (the first two, the blocks' loading and first exchange, left out):

* client MB in / out: the bytes the client process received and sent on its
  sockets during the call (:class:`dmlr.distributed.traffic.CommBytes`; for
  ``root``, those of all the segments over the calls);
  ``out/W`` is the bytes sent over W's bytes (d = features + 1, the
  intercept): the copies of W the client sent;
* ms: from one oracle call's start to the next one's (for ``root``, from one
  call's end to the next one's, on the solver's clock: ``objective_seconds_``);
* pass: the call's block calls timed on the workers, the slowest worker
  (``benchmarks/rbrl_speed.py``'s ``fit_with_pass_times``);
* Dask + client: ms - pass (the round trip, the client's sum, the solver's
  own work, waiting), also as a share of ms.

A second table gives the whole fit's client traffic over its calls (setup
included) and what of it went to the scheduler. The footer gives, per shape,
the client bytes (in + out) per call at the largest worker count over 1
worker's, and Dask + client's share on 2 workers.

The machine has 2 cores: 4 and 8 workers add traffic and round trips, not
compute (the pass time is shared), which is what the byte columns show.

Usage: python benchmarks/scale_out.py [--workers 1 2 4 8] [--shapes bookmarks,bookmarks4x]
       [--designs client-sum,tree-wait,tree,root] [--iters 30] [--quick] [--workdir DIR] [--docs]

``--docs`` also writes the tables to ``docs/benchmarks/scale_out.txt``.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from _common import Table, names, parser, tee, work_folder

#: make_multilabel's parameters of each shape but the Bookmarks preset itself.
_BOOKMARKS = dict(n_features=2150, n_labels=208, cardinality=2.028, sparse=True, density=0.01)
SHAPES = {
    "bookmarks4x": dict(n_samples=4 * 87856, **_BOOKMARKS),
    "quick": dict(n_samples=6000, n_features=500, n_labels=40, cardinality=2.0, sparse=True, density=0.02),
}
#: Where the solver runs: on block 0's worker (dmlr's) or on the client; how a call's block
#: results are summed: on the workers along the tree, or gathered to the client and summed
#: there (the designs before, for the side-by-side table); and whether the solver's nuclear
#: term is computed while the call is out or after it.
DESIGNS = ("client-sum", "tree-wait", "tree", "root")
SKIP = 2  # oracle calls left out of the medians: the blocks' loading and first exchange
MB = 1e6


def shape_store(name: str, work: Path) -> Path:
    """The store of shape ``name`` in ``work``, generated once (seed 0)."""
    from dmlr.data.synthetic import make_multilabel
    from dmlr.datasets import synthetic_store

    if name == "bookmarks":
        return synthetic_store("bookmarks", work, seed=0)
    if name not in SHAPES:
        raise SystemExit(f"unknown shape {name!r}; known: bookmarks, {', '.join(SHAPES)}")
    dst = work / f"{name}_synthetic_seed0.zarr"
    if not dst.exists():
        make_multilabel(dst, **SHAPES[name], seed=0)
    return dst


# -- in the client's process ------------------------------------------------------------------


def client_fit(address: str, store: str, iters: int, design: str) -> dict:
    """Fit in this (child) process on the cluster at ``address``; per-call bytes and times."""
    import cloudpickle
    import rbrl_speed
    from distributed import Client

    import dmlr
    from dmlr.distributed.chunks import ChunkSet, ClusterChunks
    from dmlr.distributed.oracle import ChunkOracle
    from dmlr.distributed.traffic import CommBytes

    if design == "client-sum":  # the blocks' results gathered and summed here, as before the tree
        ClusterChunks.map_reduce = ChunkSet.map_reduce
    if design in ("client-sum", "tree-wait"):  # the call made and waited for, then the nuclear term
        ClusterChunks.map_reduce_async = ChunkSet.map_reduce_async
    counter = CommBytes.of_address(address).__enter__()  # counts until this child process ends
    cloudpickle.register_pickle_by_value(rbrl_speed)  # its timed block call runs on the workers
    events = []  # (start, end, bytes before, bytes after) per oracle call made here
    segments = []  # (bytes before, bytes after) per segment of a solver on block 0's worker
    submit, run_on_root = ChunkOracle.submit, ClusterChunks.run_on_root  # L-BFGS starts each call, then waits

    def counted(self, *args):
        before, t = counter.totals(), time.perf_counter()
        wait = submit(self, *args)

        def result():
            out = wait()
            events.append((t, time.perf_counter(), before, counter.totals()))
            return out

        return result

    def counted_segment(self, *args):
        before = counter.totals()
        out = run_on_root(self, *args)
        segments.append((before, counter.totals()))
        return out

    with Client(address) as client:
        X, Y = dmlr.open_dataset(store).arrays("train")
        ChunkOracle.submit, ClusterChunks.run_on_root = counted, counted_segment
        try:
            before, t = counter.totals(), time.perf_counter()
            model, passes = rbrl_speed.fit_with_pass_times(
                X,
                Y,
                client,
                iters,
                per_call=True,
                timed="block_value_and_grad",
                solver_here=design != "root",  # the designs before dmlr.distributed.root
                solver="lbfgs",
                alpha_nuclear=0.1,
            )
            wall, after = time.perf_counter() - t, counter.totals()
        finally:
            ChunkOracle.submit, ClusterChunks.run_on_root = submit, run_on_root
        wrapper = len(cloudpickle.dumps(rbrl_speed._timed_block_call("block_value_and_grad")))
    calls = model.n_iter_
    if len(passes) != calls or (design != "root" and len(events) != calls):
        raise RuntimeError(f"{len(passes)} timed passes and {len(events)} calls seen here for {calls} oracle calls")
    rows = []
    if design == "root":  # the calls' ends on the solver's clock; the client's bytes of the segments over the calls
        ends = np.asarray(model.objective_seconds_)
        moved = sum(b - a for a, b in segments) / calls
        for k in range(SKIP, calls - 1):
            step = 1000 * (ends[k + 1] - ends[k])
            rows.append((step, passes[k + 1], step - passes[k + 1], *(moved / MB)))
    for k in range(SKIP, len(events) - 1):
        step = 1000 * (events[k + 1][0] - events[k][0])
        moved = events[k][3] - events[k][2]
        rows.append((step, passes[k], step - passes[k], *(moved / MB)))
    return {
        "shape": X.shape,
        "labels": Y.shape[1],
        "calls": calls,
        "n_iter": int(model.n_iter_),
        "median": np.median(np.array(rows), axis=0).tolist(),  # ms, pass, Dask + client, MB w in/out, s in/out
        "fit": ((after - before) / MB).tolist(),
        "wall": wall,
        "wrapper_bytes": wrapper,
    }


# -- in this process ---------------------------------------------------------------------------


def measure(workers: int, store: Path, iters: int, design: str) -> dict:
    """:func:`client_fit` in a new process, on a new local cluster of ``workers`` single-thread workers."""
    from dmlr.distributed import local_cluster

    with local_cluster(workers, 1) as cluster:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            return pool.submit(client_fit, cluster.scheduler_address, str(store), iters, design).result()


def run(args, work: Path) -> None:
    stores = {name: shape_store(name, work) for name in args.shapes}
    print(
        f"linear RBRL, L-BFGS, {args.iters} oracle calls per fit (tol=0, scaling=None, alpha_nuclear=0.1); "
        f"per oracle call, medians over calls {SKIP + 1}..{args.iters - 1} of one fit"
    )
    table = Table(
        "design:<10; shape:<12; train rows:>10; workers:>7; calls:>5; MB in:>7.2f; MB out:>7.2f; out/W:>6.3f; "
        "ms:>7.1f; pass ms:>7.1f; Dask+client ms:>14.1f; %:>5.1f"
    )
    table.print_header()
    results = {}
    for name, store in stores.items():
        for w in args.workers:
            for design in args.designs:  # side by side, so that the machine's load is shared alike
                r = results[(design, name, w)] = measure(w, store, args.iters, design)
                (n, d), l = r["shape"], r["labels"]
                r["W bytes"] = 8 * (d + 1) * l
                ms, pss, over, w_in, w_out, s_in, s_out = r["median"]
                check = w_out * MB / r["W bytes"]
                table.row(
                    design, name, n, w, r["calls"], w_in + s_in, w_out + s_out, check, ms, pss, over, 100 * over / ms
                )
    print("\nwhole fits: client MB per oracle call, setup included (total over calls), and the share to the scheduler")
    whole = Table(
        "design:<10; shape:<12; workers:>7; calls:>5; MB in:>7.2f; MB out:>7.2f; scheduler in:>12.3f; out:>7.3f; "
        "fit s:>6.1f"
    )
    whole.print_header()
    for (design, name, w), r in results.items():
        w_in, w_out, s_in, s_out = (v / r["calls"] for v in r["fit"])
        whole.row(design, name, w, r["calls"], w_in + s_in, w_out + s_out, s_in, s_out, r["wall"])
    first = next(iter(results.values()))
    print(
        f"\nW: d x l float64 = {first['W bytes'] / MB:.2f} MB ({first['shape'][1]} features + intercept, "
        f"{first['labels']} labels) for {next(iter(stores))}; the timed block call ships "
        f"{first['wrapper_bytes']} bytes of pickled wrapper per call"
    )
    lo, hi = min(args.workers), max(args.workers)
    for design in args.designs:
        for name in stores:
            if lo != hi:
                a, b = (sum(results[(design, name, w)]["median"][3:]) for w in (lo, hi))
                print(
                    f"{design} {name}: client bytes per oracle call, {hi} workers / {lo}: {b / a:.2f}x "
                    "(goal <= 1.5x at 8 vs 1)"
                )
            if 2 in args.workers:
                ms, _, over = results[(design, name, 2)]["median"][:3]
                print(
                    f"{design} {name}: Dask + client on 2 workers: {100 * over / ms:.1f}% of the oracle call "
                    "(goal <= 15%)"
                )


def main(argv=None):
    ap = parser(__doc__, full_doc=True, workdir=None, docs="scale_out")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8], help="local clusters of N workers")
    ap.add_argument("--shapes", type=names, default="bookmarks,bookmarks4x", help="bookmarks, bookmarks4x, quick")
    ap.add_argument("--iters", type=int, default=30, help="oracle calls per fit (max_iter)")
    ap.add_argument(
        "--designs",
        type=names,
        default=",".join(DESIGNS),
        help="root (dmlr's), tree (the solver on the client), tree-wait (nuclear term after the call), "
        "client-sum (before issue 49)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: shape quick, 1 and 2 workers, 6 calls")
    args = ap.parse_args(argv)
    if args.quick:
        args.shapes, args.workers, args.iters = ["quick"], [1, 2], 6
    if args.iters < SKIP + 2:
        ap.error(f"--iters must be at least {SKIP + 2}")
    work = work_folder(args.workdir)
    t = time.perf_counter()
    with tee("scale_out", args.docs):
        run(args, work)
        print(f"run: {time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
