"""Dask and client time per iteration of linear RBRL on the Bookmarks shape, by part.

On a 2-worker local cluster (processes, 1 thread each), the Bookmarks-shaped
synthetic train split (87,856 x 2,150 sparse, 208 labels). The solver runs on
the client here (``fit_with_pass_times(solver_here=True)``), as it did before
:mod:`dmlr.distributed.root` moved it to the worker of block 0, so that its
calls can be timed by part from this process; ``benchmarks/scale_out.py``
puts the two designs side by side.

APG (``solver="adaptive"``): fits of
``--iters`` iterations (``tol=0``, ``scaling=None``)
at each ``alpha_nuclear`` of ``--alphas`` (the default 0.1 leaves W full
rank; a large one makes it low rank). Two paths for the speculative call:

* ``whole W``: W (d x l float64) is shipped to every worker
  (``ChunkOracle.max_factor_fraction = 0``);
* ``factors``: when the prox formed W from thin factors, the factors go
  instead (:class:`dmlr.solvers.prox.LowRank`, the default), and each
  worker forms W by the same product.

Both paths give the same numbers, so one fit can take them in turns: the
path alternates call by call within each fit, and every call is put beside
its neighbours of the other path under the same load. Per APG step (an
iteration, or a rejected step), in ms, medians over the steps of
``--rounds`` fits:

* step: from one prox's start to the next one's (the first two steps, the
  blocks' first exchange, left out);
* pass: that step's block calls timed on the workers, the slowest worker
  (as ``benchmarks/rbrl_speed.py`` section 2 times them);
* round trip: the client's speculative oracle call (ship, form W from the
  factors, compute, gather, sum, ridge term) minus that pass;
* prox: the client's nuclear-norm prox;
* bookkeeping: step - oracle call - prox (APG's own d x l work);
* Dask + client: step - pass (the issue's figure).

Then the transport alone: a no-op block call on every worker carrying
nothing, W or W's factors at the rank reached, and returning nothing or a
d x l matrix, the variants in turns, median of ``--repeats`` calls each.
Then what shipping the factors changes in the message: for W and its factors
at the ranks reached, the frames Dask writes for a block call's argument
(``distributed.protocol.dumps`` of ``to_serialize(point)``, as the calls send
it), their bytes, the serializer Dask picked, the seconds to write and read
them back, and the seconds a worker takes to form W from the factors
(:meth:`dmlr.solvers.prox.LowRank.expand`): here, on one BLAS thread, and
inside a block call on the workers, where each call forms a new d x l array
from factors just received; medians of ``--repeats``. The next table compares the models of fits made with one path
only (largest coefficient difference over the largest coefficient).

L-BFGS (``solver="lbfgs"``, the default): fits of ``--iters`` oracle calls
at ``alpha_nuclear=0.1`` (W full rank, where L-BFGS runs; factors never
apply), per oracle call, in ms, medians over the calls of ``--rounds`` fits
(the first two calls left out):

* step: from one oracle call's start to the next one's;
* pass: that call's block calls timed on the workers, the slowest worker;
* round trip: the oracle call, from its start to its result (ship W,
  compute, gather, sum, ridge term) minus that pass;
* nuclear: the client's nuclear-norm value and gradient
  (:func:`dmlr.solvers.lbfgs.nuclear_value_and_grad`), computed while the
  call is out, so within the round trip;
* bookkeeping: step - oracle call (the direction from the correction pairs,
  the line search's vector updates);
* Dask + client: step - pass.

After the serialization table, what a round trip costs when the cores were idle before it: tree calls
(:meth:`~dmlr.distributed.chunks.ClusterChunks.map_reduce`, W out, a d x l
result back, as an oracle call) whose blocks sleep 0, 20, 50 or 150 ms before
they answer, each wait's calls back to back; the ms above the wait. A pass leaves the
client idle, and the client's own work leaves the workers idle: where the
operating system halts an idle core (a virtual machine's vCPU, here), each
message that wakes a process waits for its core, which a call repeated at
once does not show.

The machine has 2 cores shared with other jobs: the timings are noisy, hence
the medians and the turns; the ratios between paths in one run are the
figures to read.

Usage: python benchmarks/dask_overhead.py [--iters 30] [--lbfgs-iters 40] [--rounds 2]
       [--alphas 0.1,300] [--repeats 40] [--workdir DIR] [--docs]

``--docs`` also writes the tables to ``docs/benchmarks/dask_overhead.txt`` (the docs include it).
"""

from __future__ import annotations

import importlib
import time

import cloudpickle
import numpy as np
import rbrl_speed
from _common import in_turns, parser, seconds_of, tee, work_folder

import dmlr
from dmlr.datasets import synthetic_store
from dmlr.distributed.chunks import make_chunkset
from dmlr.models import RBRL
from dmlr.models import rbrl as rbrl_module
from dmlr.solvers.prox import LowRank

# the module, not the function of the same name that dmlr.solvers exports
lbfgs_module = importlib.import_module("dmlr.solvers.lbfgs")
PATHS = {"whole W": 0.0, "factors": rbrl_module.ChunkOracle.max_factor_fraction}
PARTS = ("step", "pass", "round trip", "prox", "bookkeeping", "Dask + client")
LBFGS_PARTS = ("step", "pass", "round trip", "nuclear", "bookkeeping", "Dask + client")


class ClientTimer:
    """Times the client's prox and speculative calls of the fits made while installed, paths in turns.

    Call k ships factors when it can if ``k % 2`` (``factors`` path), W whole otherwise.
    """

    def __init__(self):
        self.events = []  # (kind, start, end, path), in order

    def __enter__(self):
        self._prox, self._call = rbrl_module.prox_nuclear_norm, rbrl_module.ChunkOracle.extrapolated
        calls = []

        def prox(*args, **kwargs):
            t = time.perf_counter()
            out = self._prox(*args, **kwargs)
            self.events.append(("prox", t, time.perf_counter(), None))
            return out

        def call(oracle, *args):
            path = list(PATHS)[len(calls) % 2]
            calls.append(path)
            rbrl_module.ChunkOracle.max_factor_fraction = PATHS[path]
            t = time.perf_counter()
            out = self._call(oracle, *args)
            self.events.append(("call", t, time.perf_counter(), path))
            return out

        rbrl_module.prox_nuclear_norm, rbrl_module.ChunkOracle.extrapolated = prox, call
        return self

    def __exit__(self, *exc):
        rbrl_module.prox_nuclear_norm, rbrl_module.ChunkOracle.extrapolated = self._prox, self._call
        rbrl_module.ChunkOracle.max_factor_fraction = PATHS["factors"]

    def steps(self, skip=2):
        """Per APG step, from one prox's start to the next's: (path, step, prox, call, call index), seconds.

        The first ``skip`` steps (the blocks' first exchange) are left out.
        """
        index = {id(e): k for k, e in enumerate(e for e in self.events if e[0] == "call")}
        starts = [i for i, e in enumerate(self.events) if e[0] == "prox"]
        out = []
        for a, b in zip(starts[skip:], starts[skip + 1 :]):
            span = self.events[a:b]
            calls = [e for e in span if e[0] == "call"]
            if len(calls) == 1:
                c = calls[0]
                out.append((c[3], self.events[b][1] - span[0][1], span[0][2] - span[0][1], c[2] - c[1], index[id(c)]))
        return out


def measure(X, Y, client, iters, alpha_nuclear):
    """({path: [(step, pass, round trip, prox, bookkeeping, Dask + client) ms per step]}, model, rank of W)."""
    with ClientTimer() as timer:
        model, passes = rbrl_speed.fit_with_pass_times(
            X, Y, client, iters, per_call=True, solver_here=True, alpha_nuclear=alpha_nuclear, solver="adaptive"
        )
    steps = timer.steps()
    n_calls = sum(e[0] == "call" for e in timer.events)
    if len(passes) != n_calls:
        raise RuntimeError(f"{len(passes)} timed block passes for {n_calls} speculative calls")
    out = {p: [] for p in PATHS}
    for path, step, prox, call, k in steps:
        step, prox, call = 1000 * step, 1000 * prox, 1000 * call
        out[path].append((step, passes[k], call - passes[k], prox, step - call - prox, step - passes[k]))
    s = np.linalg.svd(model.coef_, compute_uv=False)
    return out, model, int((s > 1e-12 * s[0]).sum())


def measure_lbfgs(X, Y, client, iters, skip=2):
    """([(step, pass, round trip, nuclear, bookkeeping, Dask + client) ms per oracle call], model)."""
    events = []  # (kind, start, end)
    submit, nuclear = rbrl_module.ChunkOracle.submit, lbfgs_module.nuclear_value_and_grad

    def timed_submit(*args):  # L-BFGS starts the call, computes the nuclear term, then waits
        t = time.perf_counter()
        wait = submit(*args)

        def result():
            out = wait()
            events.append(("call", t, time.perf_counter()))
            return out

        return result

    def timed_nuclear(*args):
        t = time.perf_counter()
        out = nuclear(*args)
        events.append(("nuclear", t, time.perf_counter()))
        return out

    rbrl_module.ChunkOracle.submit, lbfgs_module.nuclear_value_and_grad = timed_submit, timed_nuclear
    try:
        model, passes = rbrl_speed.fit_with_pass_times(
            X,
            Y,
            client,
            iters,
            per_call=True,
            timed="block_value_and_grad",
            solver_here=True,
            alpha_nuclear=0.1,
            solver="lbfgs",
        )
    finally:
        rbrl_module.ChunkOracle.submit, lbfgs_module.nuclear_value_and_grad = submit, nuclear
    calls = [e for e in events if e[0] == "call"]
    nuclears = [e for e in events if e[0] == "nuclear"]
    if len(passes) != len(calls) or len(nuclears) != len(calls):
        raise RuntimeError(f"{len(passes)} timed passes, {len(calls)} oracle calls, {len(nuclears)} nuclear gradients")
    out = []
    for k in range(skip, len(calls) - 1):
        step = 1000 * (calls[k + 1][1] - calls[k][1])
        c, nu = 1000 * (calls[k][2] - calls[k][1]), 1000 * (nuclears[k][2] - nuclears[k][1])
        out.append((step, passes[k], c - passes[k], nu, step - c, step - passes[k]))
    return out, model


def _null_call(block, point, back):
    """A block call that only receives ``point`` and returns a d x l matrix (``back``) or nothing."""
    if isinstance(point, LowRank):
        point = point.expand()  # as a block call does
    return np.zeros(point.shape) if back else 0.0


def transport_table(client, X, Y, ranks, repeats):
    """The no-op calls' table (see the module); returns their chunk set, still open."""
    chunks = make_chunkset(X[:2048], Y[:2048], fit_intercept=True, backend="dask", client=client)
    d, l = X.shape[1] + 1, Y.shape[1]
    rng = np.random.default_rng(0)
    W = rng.normal(size=(d, l))
    tiny = np.zeros((1, 1))
    variants = [("empty", tiny, False), ("W back", tiny, True), ("W out", W, False), ("W out, W back", W, True)]
    for k in sorted(set(ranks)):
        if (d + l) * k < d * l:
            low = LowRank(rng.normal(size=(d, k)), np.ascontiguousarray(rng.normal(size=(l, k))).T)
            variants += [(f"factors (rank {k}) out", low, False), (f"factors (rank {k}) out, W back", low, True)]
    calls = {label: (lambda p=point, b=back: chunks.map_blocks(_null_call, p, b)) for label, point, back in variants}
    times = {label: [1000 * s for s in seconds] for label, seconds in in_turns(calls, repeats).items()}
    print(
        f"\n| no-op call on {chunks.n_blocks} workers, variants in turns, median of {repeats} | out | back | ms "
        "| ms above the empty call |"
    )
    print("|---|---|---|---|---|")
    base = float(np.median(times["empty"]))
    for label, point, back in variants:
        out = "-" if point is tiny else f"{8 * point.size / 1e6:.2f} MB"
        ms = float(np.median(times[label]))
        print(f"| {label} | {out} | {'%.2f MB' % (8 * d * l / 1e6) if back else '-'} | {ms:.2f} | {ms - base:.2f} |")
    return chunks


#: Milliseconds the block calls of the idle table wait before they answer (the pass they stand for).
IDLE_MS = (0, 20, 50, 150)


def _idle_call(block, point, idle_ms):
    """A block call that waits ``idle_ms`` (sleeping, the cores left idle) and returns a d x l matrix."""
    time.sleep(idle_ms / 1000)
    return np.zeros(point.shape[1:])


def idle_table(chunks, d: int, l: int, repeats: int) -> None:
    """Tree calls (:meth:`~dmlr.distributed.chunks.ClusterChunks.map_reduce`, W out and a d x l
    result back, as an oracle call) whose blocks wait before they answer, each wait's in a row:
    the ms above the wait is what a call costs beside its pass when the machine's cores were
    idle meanwhile (see the module)."""
    W = np.random.default_rng(0).normal(size=(1, d, l))
    # each wait's calls back to back (the first two left out): in turns, every call would
    # follow a long wait
    times = {
        ms: [1000 * s for s in seconds_of(lambda ms=ms: chunks.map_reduce(_idle_call, W, ms), repeats + 2)[2:]]
        for ms in IDLE_MS
    }
    print(
        f"\n| tree call on {chunks.n_blocks} workers, W out and back, blocks waiting (idle), each wait's calls "
        f"back to back, median of {repeats} | wait ms | ms | ms above the wait |"
    )
    print("|---|---|---|---|")
    for ms in IDLE_MS:
        med = float(np.median(times[ms]))
        print(f"| | {ms} | {med:.2f} | {med - ms:.2f} |")


def _expand_ms(block, point) -> float:
    """Milliseconds a block call takes to form W from the factors it received."""
    t = time.perf_counter()
    point.expand()
    return 1000 * (time.perf_counter() - t)


def serialization_table(chunks, d: int, l: int, ranks, repeats: int) -> None:
    """Frames, bytes, serializer and (de)serialization time of W and of its factors at ``ranks``,
    and the time to expand the factors here on one BLAS thread and in a block call on the
    workers of ``chunks`` (see the module)."""
    from distributed.protocol import dumps, loads, serialize, to_serialize
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    points = [("W", rng.normal(size=(d, l)))]
    for k in sorted(set(ranks)):
        if (d + l) * k < d * l:
            low = LowRank(rng.normal(size=(d, k)), np.ascontiguousarray(rng.normal(size=(l, k))).T)
            points.append((f"factors (rank {k})", low))

    def median_ms(fn):
        return 1000 * float(np.median(seconds_of(fn, repeats)))

    print(
        f"\n| a block call's point, {d} x {l}, median of {repeats} | frames | MB | serializer | dumps ms | loads ms "
        "| expand ms here | expand ms in a block call |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, point in points:
        frames = dumps({"args": [to_serialize(point)]})
        nbytes = sum(memoryview(f).nbytes for f in frames)
        family = serialize(point)[0].get("serializer", "-")
        expand = on_workers = float("nan")
        if isinstance(point, LowRank):
            with threadpool_limits(1, user_api="blas"):
                expand = median_ms(point.expand)
            on_workers = float(np.median([chunks.map_blocks(_expand_ms, point) for _ in range(repeats)]))
        print(
            f"| {label} | {len(frames)} | {nbytes / 1e6:.2f} | {family} | "
            f"{median_ms(lambda p=point: dumps({'args': [to_serialize(p)]})):.3f} | "
            f"{median_ms(lambda f=frames: loads(f)):.3f} | {expand:.3f} | {on_workers:.3f} |"
        )


def main(argv=None):
    ap = parser(__doc__, full_doc=True, workdir=None, docs="dask_overhead")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--lbfgs-iters", type=int, default=40, help="oracle calls per L-BFGS fit")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--alphas", default="0.1,300", help="alpha_nuclear values, comma-separated")
    ap.add_argument("--repeats", type=int, default=40, help="calls of each no-op variant")
    args = ap.parse_args(argv)
    work = work_folder(args.workdir)
    alphas = [float(a) for a in args.alphas.split(",")]
    X, Y = dmlr.open_dataset(synthetic_store("bookmarks", work)).arrays("train")
    cloudpickle.register_pickle_by_value(rbrl_speed)  # its timed block pass runs on the workers
    with tee("dask_overhead", args.docs):
        run(X, Y, alphas, args)


def run(X, Y, alphas, args):
    """Every table, on a 2-worker local cluster."""
    from distributed import Client

    from dmlr.distributed import local_cluster

    steps = {(a, p): [] for a in alphas for p in PATHS}
    ranks, models = {}, {}
    with local_cluster(2, 1) as cluster, Client(cluster) as client:
        for r in range(args.rounds):
            for a in alphas:
                out, model, ranks[a] = measure(X, Y, client, args.iters, a)
                for p in PATHS:
                    steps[(a, p)] += out[p]
                print(f"round {r}, alpha_nuclear={a:g}: {model.n_iter_} iterations, rank {ranks[a]}", flush=True)
        print(
            f"\n| Bookmarks shape, 2 workers, ms per APG step (median over the steps of {args.rounds} fits of "
            f"{args.iters} iterations, paths in turns) | rank of W | path | steps | " + " | ".join(PARTS) + " |"
        )
        print("|---|---|---|---|" + "---|" * len(PARTS))
        for a in alphas:
            med = {p: np.median(np.array(steps[(a, p)]), axis=0) for p in PATHS}
            for p in PATHS:
                cells = " | ".join(f"{v:.1f}" for v in med[p])
                print(f"| alpha_nuclear={a:g} | {ranks[a]} | {p} | {len(steps[(a, p)])} | {cells} |")
            ratio = " | ".join(f"{x / y:.2f}" for x, y in zip(med["factors"], med["whole W"]))
            print(f"| alpha_nuclear={a:g} | | factors / whole W | | {ratio} |")
        lbfgs_steps = []
        for r in range(args.rounds):
            out, model = measure_lbfgs(X, Y, client, args.lbfgs_iters)
            lbfgs_steps += out
            print(f"round {r}, L-BFGS: {model.n_iter_} oracle calls", flush=True)
        med = np.median(np.array(lbfgs_steps), axis=0)
        print(
            f"\n| Bookmarks shape, 2 workers, ms per L-BFGS oracle call (median over the calls of {args.rounds} fits "
            f"of {args.lbfgs_iters} calls) | calls | " + " | ".join(LBFGS_PARTS) + " |"
        )
        print("|---|---|" + "---|" * len(LBFGS_PARTS))
        print(f"| alpha_nuclear=0.1 | {len(lbfgs_steps)} | " + " | ".join(f"{v:.1f}" for v in med) + " |")
        chunks = transport_table(client, X, Y, ranks.values(), args.repeats)
        serialization_table(chunks, X.shape[1] + 1, Y.shape[1], ranks.values(), args.repeats)
        idle_table(chunks, X.shape[1] + 1, Y.shape[1], args.repeats)
        chunks.close()
        for a in alphas:  # one path per fit: the models must agree
            for p, fraction in PATHS.items():
                rbrl_module.ChunkOracle.max_factor_fraction = fraction
                with dmlr.config_context(backend="dask", client=client):
                    models[(a, p)] = RBRL(
                        max_iter=args.iters, tol=0.0, scaling=None, alpha_nuclear=a, solver="adaptive"
                    ).fit(X, Y)
        rbrl_module.ChunkOracle.max_factor_fraction = PATHS["factors"]
    print("\n| alpha_nuclear | max |coef (whole W) - coef (factors)| / max |coef| | iterations (both) |")
    print("|---|---|---|")
    for a in alphas:
        old, new = (models[(a, p)] for p in PATHS)
        diff = np.abs(old.coef_ - new.coef_).max() / np.abs(old.coef_).max()
        print(f"| {a:g} | {diff:.2e} | {old.n_iter_}, {new.n_iter_} |")


if __name__ == "__main__":
    main()
