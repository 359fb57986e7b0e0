"""RBRL speed: per-iteration time next to the product floor, memory, scaling, and the reference.

Sections (each prints a table):

1. Against the reference (emotions, the reference's split, ``solver="paper"``):
   whole fit, linear and RBF kernel, same iterations and objective, next to
   the Octave reference's 82.9 s and 224.4 s (RESULTS.md).
2. Linear RBRL on a 2-worker local cluster (processes, 1 thread each):
   ``mediamill_discretized`` (train file, 30,970 x 120, 101 labels) and the
   Bookmarks-shaped synthetic set (train split of 87,856 x 2,150 sparse, 208
   labels). Per iteration: the APG's mean ms/iteration in a fit; the floor =
   the two products ``X_b @ [W|G]`` and ``X_b.T @ C`` alone, timed on each
   worker on its own block in the same run (max over workers, as the
   iteration waits for the slowest), and in brackets the issue's floor, one
   product each way (``X_b @ W``, ``X_b.T @ C``); then the median
   iteration over the median of the one-product floor's calls (on a VM
   whose timings jitter, the mean over a best-of-n inflates the ratio with
   the jitter; both are printed); the fused pass = one
   iteration's block work in steady state
   (``block_extrapolated_value_and_grad`` with W_prev held on the block, so
   a dense block multiplies X by W only), timed on the workers within the
   fit itself (median over calls of the slowest worker's) and, in brackets,
   best of 5 outside it; Dask + client = median iteration - the fit's
   median pass (the round trip, the client's sum and prox, waiting).
   Those run on all workers at once, as an iteration runs them; the last
   column times the pass and the one-product floor one worker at a time
   (the others idle), which separates the kernel's own cost from the
   workers' contention for cache and memory.
   Memory: each worker's peak resident memory during
   the iterations above its resident memory before the chunk was loaded, as a
   multiple of the chunk's bytes (so 1x is the chunk alone; one-time memory,
   the kernels' compiled code and the libraries loading imports, is excluded
   by loading the set once and releasing it, then waiting until the workers
   have dropped it and returned its freed heap, before the reading), and in brackets the growth during the
   iterations alone (what the block keeps between iterations, W and for dense
   blocks S(W), plus the pass's temporaries).
3. 1 vs 2 workers on the Bookmarks shape: ms/iteration and speed-up.
5. In-process (the "auto" backend's choice for data this size, as on a
   laptop): linear RBRL on ``mediamill_discretized`` with one block (BLAS on
   every core) and with the default blocks (one per core, side by side on
   threads), next to the floor ``X @ W`` + ``X.T @ C`` on the whole X with
   BLAS on every core (best and median of 9 calls of each product). Then the
   Bookmarks-shaped train split as a laptop fits it (the Zarr arrays, the
   "auto" backend, default blocks), next to the sparse floor: each block's
   ``X_b @ W`` + ``X_b.T @ C`` side by side on threads, as an iteration
   runs them (scipy's sparse products are single-threaded, so the whole X
   on one thread would be a floor twice as slow).
4. Kernel RBRL (RBF) with n = 10,000 rows of a Mediamill-shaped synthetic set
   on the 2-worker cluster: ms/iteration and memory per worker (each keeps its
   5,000 x 10,000 rows of K).

Usage: python benchmarks/rbrl_speed.py [--iters 100] [--workdir DIR] [--sections 1,2,3,4,5]
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
from _common import parser, reference_emotions, staged, work_folder

import dmlr
from dmlr.datasets import staged_store, synthetic_store
from dmlr.distributed.chunks import make_chunkset
from dmlr.distributed.extrapolation import ExtrapolationCache
from dmlr.models import RBRL, KernelRBRL
from dmlr.objectives import rbrl as objective

REFERENCE_SECONDS = {"linear": 82.92, "rbf": 224.36}  # RESULTS.md, Octave 7.3
REFERENCE_ITERS = {"linear": 702, "rbf": 1648}


def timed_ms(fn, repeats=5):
    """(best, median) ms of ``repeats`` calls of ``fn``."""
    times = []  # not _common.seconds_of: this runs on the workers, where only this module is shipped
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1000 * min(times), 1000 * float(np.median(times))


def best_ms(fn, repeats=5):
    return timed_ms(fn, repeats)[0]


def ms_per_iteration(model) -> float:
    """Mean ms per APG iteration of a fit, from its objective timestamps (setup excluded)."""
    ts = model.objective_seconds_
    return 1000 * (ts[-1] - ts[0]) / (len(ts) - 1)


def median_ms_per_iteration(model) -> float:
    """Median ms per APG iteration of a fit.

    On a VM whose timings jitter (one 2-vCPU machine here: p10 38.7, p90 57.3
    ms within one mediamill fit) the mean iteration over the best-of-5 floor
    inflates the ratio with the jitter; the median over the median floor
    compares like with like. Both ratios are printed.
    """
    return 1000 * float(np.median(np.diff(model.objective_seconds_)))


# -- functions run on the workers, on their block -------------------------------------------
def worker_floor_ms(block, points, two_point=True):
    """Products alone: (X_b @ [W|G] + X_b.T @ C, X_b @ W + X_b.T @ C, the latter's median), C: m x l.

    The first is what one APG iteration multiplies (scores at both points, see
    :mod:`dmlr.solvers.apg`); the second is the issue's literal floor, one
    product each way (best of 9 calls of each product), the third the same
    floor from the medians of those calls. With ``two_point=False`` the first
    is not timed (None).
    """
    k, d, l = points.shape
    W1 = np.ascontiguousarray(points[0])
    C = np.ones((block.n_rows, l))
    back = timed_ms(lambda: block.X.T @ C, 9)
    one = timed_ms(lambda: block.X @ W1, 9)
    two = None
    if two_point:
        W = np.ascontiguousarray(points.transpose(1, 0, 2).reshape(d, k * l))
        two = best_ms(lambda: block.X @ W) + back[0]
    return two, one[0] + back[0], one[1] + back[1]


def worker_pass_ms(block, points):
    """One APG iteration's work on the block in steady state: the speculative call with W_prev held."""
    calls = iter(range(1, 10**9))
    held = [objective.block_extrapolated_value_and_grad(block, points[0], 0.5, None, points[1], False, 0.01).held]

    def call():
        W = points[next(calls) % 2]
        held[0] = objective.block_extrapolated_value_and_grad(block, W, 0.5, held[0], None, False, 0.01).held

    return best_ms(call)


def block_bytes(block):
    X = block.X
    nb = (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) if hasattr(X, "indptr") else X.nbytes
    return nb + block.Y.nbytes


def rss_bytes():
    import psutil

    return psutil.Process().memory_info().rss


def reset_peak():
    """Reset this process's peak RSS (VmHWM) counter (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return True


def peak_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return -1


def settle_workers(client, timeout=30.0):
    """Wait until the workers hold no data, then collect garbage and return the freed heap.

    A released block leaves its worker when the scheduler says so, a moment
    after ``close()``; and glibc keeps freed pages (see
    :func:`dmlr.distributed.chunks.release_freed_heap`). A base reading taken
    before both would already contain memory the next load reuses, and the
    load would seem to cost nothing.
    """
    import gc

    from dmlr.distributed.chunks import release_freed_heap

    def n_keys(dask_worker):
        return len(dask_worker.data)

    deadline = time.monotonic() + timeout
    while any(client.run(n_keys).values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    client.run(gc.collect)
    client.run(release_freed_heap)


# -- sections --------------------------------------------------------------------------------
def section_reference():
    Xtr, Ytr = reference_emotions()[:2]
    RBRL(max_iter=5).fit(Xtr, Ytr)  # compile
    print(
        "\n| emotions (reference split) | iterations (reference) | final objective | whole fit, best of 3 "
        "| reference | speed-up |"
    )
    print("|---|---|---|---|---|---|")
    models = {
        "linear": lambda: RBRL(solver="paper", max_iter=1999, scaling=None),
        "rbf": lambda: KernelRBRL("rbf", gamma=1 / 72, solver="paper", max_iter=1999, scaling=None),
    }
    for key, model in models.items():
        fits = [model().fit(Xtr, Ytr) for _ in range(3)]
        best = min(f.fit_seconds_ for f in fits)
        print(
            f"| {key} | {fits[0].n_iter_} ({REFERENCE_ITERS[key]}) | {fits[0].objective_history_[-1]:.10g} | "
            f"{best:.3f} s | {REFERENCE_SECONDS[key]} s | {REFERENCE_SECONDS[key] / best:.0f}x |",
            flush=True,
        )


class ClusterFigures(NamedTuple):
    """What :func:`cluster_measure` measured (times in ms)."""

    #: mean and median ms per iteration of the fit
    per_iter: float
    median_iter: float
    #: (two-point best, one-product best, one-product median), max over workers, timed on all
    #: workers at once, as an iteration runs them
    floor: tuple
    #: (the fit's median pass, slowest worker per call; best of 5 outside the fit, all workers
    #: at once)
    passes: tuple
    #: median iteration - the fit's median pass
    overhead: float
    #: (peak / chunk bytes, growth during the iterations / chunk bytes)
    memory: tuple
    model: object
    #: (one-product floor, fused pass), each the max over workers of its best, timed one worker
    #: at a time while the others wait: their ratio is the kernel's own cost over the
    #: products', without the other workers' share of the cache and memory bus
    alone: tuple


def cluster_measure(X, Y, client, iters) -> ClusterFigures:
    """Time and memory of linear RBRL on ``client`` next to the product floor (see ClusterFigures)."""
    # one-time memory (kernel compilation, imports, first-read caches) is not the chunk's:
    # load the set once and release it before the base reading
    make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client).close()
    settle_workers(client)
    base = client.run(rss_bytes)
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask", client=client)
    d, l = X.shape[1] + 1, Y.shape[1]
    points = np.random.default_rng(0).normal(size=(2, d, l)) * 0.01
    sizes = client.gather([client.submit(block_bytes, f, pure=False) for f in chunks.futures])
    loaded = client.run(rss_bytes)
    client.run(reset_peak)
    # iterations' memory: the chunk, what the block keeps, the pass's temporaries, through the
    # fit's own oracle (the first call's exchange included)
    oracle = ExtrapolationCache(
        chunks, objective.block_extrapolated_value_and_grad, objective.block_wants_pair, (0.01,)
    )
    W_prev = points[1]
    for k in range(4):
        W = points[k % 2].copy()  # a new array each call, as apg's W; W_prev is the last one sent
        oracle(W, W_prev, 0.5, W + 0.5 * (W - W_prev))
        W_prev = W
    peaks = client.run(peak_bytes)
    # timings after the memory reading (the floor's products allocate what an iteration does not)
    floors = client.gather([client.submit(worker_floor_ms, f, points, pure=False) for f in chunks.futures])
    passes = client.gather([client.submit(worker_pass_ms, f, points, pure=False) for f in chunks.futures])
    floors_alone = [
        client.submit(worker_floor_ms, f, points, two_point=False, pure=False).result()[1] for f in chunks.futures
    ]
    passes_alone = [client.submit(worker_pass_ms, f, points, pure=False).result() for f in chunks.futures]
    chunks.close()
    model, fit_pass = fit_with_pass_times(X, Y, client, iters)
    median_iter = median_ms_per_iteration(model)
    mem = max((peaks[w] - base[w]) for w in peaks) / max(sizes)
    temp = max((peaks[w] - loaded[w]) for w in peaks) / max(sizes)
    return ClusterFigures(
        per_iter=ms_per_iteration(model),
        median_iter=median_iter,
        floor=tuple(max(f[i] for f in floors) for i in range(3)),
        passes=(fit_pass, max(passes)),
        overhead=median_iter - fit_pass,
        memory=(mem, temp),
        model=model,
        alone=(max(floors_alone), max(passes_alone)),
    )


#: The block calls a fit can have timed: APG's speculative call and L-BFGS's oracle call.
_BLOCK_CALLS = ("block_extrapolated_value_and_grad", "block_value_and_grad")


def _timed_block_call(name):
    """The block call ``objective.<name>``, its seconds appended to a list on the worker's objective module.

    The list lives on a module of the worker process because the call runs
    on a worker's executor thread, which has no Dask worker context to hang
    it on, and the fit releases its blocks when it ends. The call itself is
    the one :func:`_install_timed` saved in the process it runs in (the
    wrapper travels from worker to worker down the summation tree).
    """

    def timed(block, *args):
        from dmlr.objectives import rbrl as module

        call = module.__dict__["_benchmark_originals"][name]
        t = time.perf_counter()
        out = call(block, *args)
        module.__dict__.setdefault("_benchmark_pass_seconds", []).append(time.perf_counter() - t)
        return out

    return timed


def _pop_pass_seconds():
    from dmlr.objectives import rbrl as module

    return module.__dict__.pop("_benchmark_pass_seconds", [])


def _install_timed(name) -> None:
    """``objective.<name>`` timed (:func:`_timed_block_call`) in this process: here, for a
    solver run here, and on the workers, for a solver run on one of them
    (:mod:`dmlr.distributed.root`) and the block calls it sends on."""
    from dmlr.objectives import rbrl as module

    module.__dict__.setdefault("_benchmark_originals", {}).setdefault(name, getattr(module, name))
    setattr(module, name, _timed_block_call(name))


def _remove_timed(name) -> None:
    """Undo :func:`_install_timed` in this process."""
    from dmlr.objectives import rbrl as module

    originals = module.__dict__.get("_benchmark_originals", {})
    if name in originals:
        setattr(module, name, originals.pop(name))


def _solve_here(chunks, solve, x0, **kwargs):
    """The solver in this process, calling the blocks (in place of
    :func:`dmlr.distributed.root.solve_on_root`)."""
    return solve(chunks, x0, **kwargs)


def fit_with_pass_times(
    X, Y, client, iters, per_call=False, timed="block_extrapolated_value_and_grad", solver_here=False, **params
):
    """(model, median ms of the fit's fused passes, slowest worker per call).

    ``params`` are RBRL's, over ``max_iter=iters, tol=0, scaling=None``.
    ``solver_here``: the solver runs in this process and calls the blocks (the design
    before :mod:`dmlr.distributed.root`, whose oracle calls a timer here can see), not on
    the worker of block 0.
    ``timed`` names the block call timed: APG's speculative call (default) or
    ``"block_value_and_grad"``, L-BFGS's oracle call.
    With ``per_call``, the second item is the array of the slowest worker's
    ms per call, in call order, instead of its median.

    The fit's own block calls are timed on the workers (the objective's
    steady-state call wrapped for this fit only), so median iteration minus
    this median is the time an iteration spends outside the kernels: Dask's
    round trip, the client's sum and prox, and waiting. Best-of-n timings of
    the pass outside the fit cannot give that on a VM whose speed drifts
    minute to minute (one Bookmarks block: 206 ms best of 5 alone, then 351
    ms median within the next fit, for the same call).
    """
    import sys

    import cloudpickle

    if timed not in _BLOCK_CALLS:
        raise ValueError(f"timed must be one of {_BLOCK_CALLS}, got {timed!r}")
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # its functions run on the workers
    try:
        client.run(_pop_pass_seconds)
        _install_timed(timed)
        client.run(_install_timed, timed)
        import dmlr.models.rbrl as rbrl_module

        solve_on_root = rbrl_module.solve_on_root
        if solver_here:
            rbrl_module.solve_on_root = _solve_here
        try:
            with dmlr.config_context(backend="dask", client=client):
                model = RBRL(**{"max_iter": iters, "tol": 0.0, "scaling": None, **params}).fit(X, Y)
        finally:
            rbrl_module.solve_on_root = solve_on_root
            _remove_timed(timed)
            client.run(_remove_timed, timed)
        per_worker = [np.asarray(v) for v in client.run(_pop_pass_seconds).values() if len(v)]
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    if not per_worker:
        raise RuntimeError(f"the fit made no timed block calls: RBRL no longer looks up objective.{timed} when it fits")
    calls = min(len(v) for v in per_worker)
    slowest = 1000 * np.max([v[:calls] for v in per_worker], axis=0)
    return model, slowest if per_call else float(np.median(slowest))


def section_cluster(client, work, iters):
    print(
        "\n| data set (train) | n x d | APG ms/iter | floor ms: X@[W|G] + X.T@C (X@W + X.T@C) "
        "| iter / floor (/ one-product floor) "
        "| median iter / median one-product floor "
        "| fused pass ms: in the fit, median of the slowest worker (best of 5 outside it) "
        "| Dask + client ms/iter: median iter - median pass in the fit "
        "| peak worker memory / chunk bytes (pass temporaries / chunk) "
        "| whole fit | one worker at a time: fused pass / one-product floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    sets = []
    try:
        ds = dmlr.open_dataset(staged_store("mediamill_discretized", work))
        sets.append(("mediamill_discretized", *ds.arrays("train")))
    except FileNotFoundError as e:
        print(f"(skipping mediamill_discretized: {e})")
    sets.append(("bookmarks-shaped synthetic", *dmlr.open_dataset(synthetic_store("bookmarks", work)).arrays("train")))
    for name, X, Y in sets:
        m = cluster_measure(X, Y, client, iters)
        floor, alone = m.floor, m.alone
        print(
            f"| {name} | {X.shape[0]} x {X.shape[1]} | {m.per_iter:.1f} | {floor[0]:.1f} ({floor[1]:.1f}) | "
            f"{m.per_iter / floor[0]:.2f}x ({m.per_iter / floor[1]:.2f}x) | "
            f"{m.median_iter:.1f} / {floor[2]:.1f} = {m.median_iter / floor[2]:.2f}x | "
            f"{m.passes[0]:.1f} ({m.passes[1]:.1f}) | {m.overhead:.1f} | {m.memory[0]:.2f}x ({m.memory[1]:.2f}x) "
            f"| {m.model.fit_seconds_:.1f} s ({m.model.n_iter_} it) "
            f"| {alone[1]:.1f} / {alone[0]:.1f} = {alone[1] / alone[0]:.2f}x |",
            flush=True,
        )


def section_scaling(bk, iters):
    from distributed import Client

    from dmlr.distributed import local_cluster

    X, Y = dmlr.open_dataset(bk).arrays("train")
    print(
        "\n| Bookmarks shape, workers | APG ms/iter | fused pass ms in the fit, median of the slowest worker "
        "| Dask + client ms/iter: median iter - median pass | speed-up |"
    )
    print("|---|---|---|---|---|")
    one = None
    for n in (1, 2):
        with local_cluster(n, 1) as cluster, Client(cluster) as client:
            m = cluster_measure(X, Y, client, iters)
        one = one or m.per_iter
        print(
            f"| {n} | {m.per_iter:.1f} | {m.passes[0]:.1f} | {m.overhead:.1f} | {one / m.per_iter:.2f}x |", flush=True
        )


def section_kernel(client, work, iters):
    X, Y = dmlr.open_dataset(synthetic_store("mediamill", work)).arrays(None)
    X, Y = X[:10000].compute(), Y[:10000].compute()
    base = client.run(rss_bytes)
    client.run(reset_peak)
    with dmlr.config_context(backend="dask", client=client):
        model = KernelRBRL("rbf", max_iter=iters, tol=0.0, solver="spectral", scaling=None).fit(X, Y)
    peaks = client.run(peak_bytes)
    per_iter = ms_per_iteration(model)
    k_rows = 10000 * 10000 * 8 / len(peaks) / 2**20
    print(
        "\n| kernel RBRL (RBF), n = 10,000 x 120, 101 labels, 2 workers | ms/iter | setup s (K rows, Lanczos) "
        "| peak memory per worker above start | its K rows |"
    )
    print("|---|---|---|---|---|")
    mem = max(peaks[w] - base[w] for w in peaks) / 2**20
    print(
        f"| mediamill-shaped synthetic | {per_iter:.1f} | "
        f"{model.fit_seconds_ - model.objective_seconds_[-1]:.1f} | {mem:.0f} MiB "
        f"| {k_rows:.0f} MiB |",
        flush=True,
    )


def section_in_process(work, iters):
    from threadpoolctl import threadpool_info

    from dmlr.distributed.chunks import local_block_count

    try:
        X, Y = staged("mediamill_discretized", work, "train", float64=False)
    except FileNotFoundError as e:
        print(f"(skipping the in-process section: {e})")
        return
    Xb = np.hstack([X, np.ones((X.shape[0], 1))])
    W = np.random.default_rng(0).normal(size=(Xb.shape[1], Y.shape[1])) * 0.01
    C = np.ones((X.shape[0], Y.shape[1]))
    fwd, back = timed_ms(lambda: Xb @ W, 9), timed_ms(lambda: Xb.T @ C, 9)
    floor, floor_median = fwd[0] + back[0], fwd[1] + back[1]
    threads = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
    RBRL(max_iter=5, tol=0.0).fit(X, Y)  # compile
    print(
        f"\n| mediamill_discretized in-process ({X.shape[0]} x {X.shape[1]}) | blocks | APG ms/iter "
        f"| floor ms: X@W + X.T@C, {threads} BLAS threads | iter / floor "
        f"| median iter / median floor |"
    )
    print("|---|---|---|---|---|---|")
    for label, n_blocks in (("one block", 1), ("default (one per core)", local_block_count(X))):
        with dmlr.config_context(n_blocks=n_blocks):
            model = RBRL(max_iter=iters, tol=0.0, scaling=None).fit(X, Y)
        per_iter = ms_per_iteration(model)
        med = median_ms_per_iteration(model)
        print(
            f"| {label} | {n_blocks} | {per_iter:.1f} | {floor:.1f} | {per_iter / floor:.2f}x "
            f"| {med:.1f} / {floor_median:.1f} = {med / floor_median:.2f}x |",
            flush=True,
        )
    section_in_process_sparse(work, iters)


def section_in_process_sparse(work, iters):
    """Section 5's Bookmarks row: the laptop path (auto backend, default blocks) and its floor."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    from dmlr.distributed.chunks import choose_backend, make_chunkset

    X, Y = dmlr.open_dataset(synthetic_store("bookmarks", work)).arrays("train")
    backend = choose_backend(X)
    if backend != "local":
        print(f"(skipping the in-process Bookmarks row: the auto backend chose {backend!r})")
        return
    chunks = make_chunkset(X, Y, fit_intercept=True, backend=backend)
    blocks = chunks.blocks
    W = np.random.default_rng(0).normal(size=(blocks[0].X.shape[1], Y.shape[1])) * 0.01
    Cs = [np.ones((b.n_rows, Y.shape[1])) for b in blocks]
    with ThreadPoolExecutor(len(blocks)) as pool, threadpool_limits(limits=1, user_api="blas"):

        def side_by_side(product):
            return lambda: list(pool.map(product, range(len(blocks))))

        fwd = timed_ms(side_by_side(lambda k: blocks[k].X @ W), 9)
        back = timed_ms(side_by_side(lambda k: blocks[k].X.T @ Cs[k]), 9)
    chunks.close()
    floor, floor_median = fwd[0] + back[0], fwd[1] + back[1]
    model = RBRL(max_iter=iters, tol=0.0, scaling=None).fit(X, Y)
    per_iter, med = ms_per_iteration(model), median_ms_per_iteration(model)
    print(
        f"\n| Bookmarks-shaped train split in-process ({X.shape[0]} x {X.shape[1]} sparse, backend "
        f"{model.backend_!r}) | blocks | APG ms/iter | sparse floor ms: X_b@W + X_b.T@C per block, "
        f"side by side | iter / floor | median iter / median floor |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| default | {len(blocks)} | {per_iter:.1f} | {floor:.1f} | {per_iter / floor:.2f}x "
        f"| {med:.1f} / {floor_median:.1f} = {med / floor_median:.2f}x |",
        flush=True,
    )


def main(argv=None):
    ap = parser(__doc__, full_doc=True, workdir=None)
    ap.add_argument("--iters", type=int, default=100, help="iterations of the timed cluster fits")
    ap.add_argument("--sections", default="1,2,3,4,5")
    args = ap.parse_args(argv)
    work = work_folder(args.workdir)
    sections = set(args.sections.split(","))
    if "1" in sections:
        section_reference()
    if "5" in sections:
        section_in_process(work, args.iters)
    from distributed import Client

    from dmlr.distributed import local_cluster

    with local_cluster(2, 1) as cluster, Client(cluster) as client:
        if "2" in sections:
            section_cluster(client, work, args.iters)
        if "4" in sections:
            section_kernel(client, work, max(20, args.iters // 2))
    if "3" in sections:
        section_scaling(synthetic_store("bookmarks", work), args.iters)


if __name__ == "__main__":
    main()
