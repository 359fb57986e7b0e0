"""RBRL's per-iteration cost model: measured here, fitted, extrapolated toward internet scale.

What one APG iteration of linear RBRL on the Dask backend does (dmlr/models/rbrl.py,
dmlr/distributed/chunks.py, dmlr/objectives/rbrl.py):

1. the solver, on the worker of block 0 (dmlr/distributed/root.py), sends W (d x l
   float64) down a fixed binary tree of the blocks from worker to worker (ceil(log2 w)
   levels; the previous point stays on each block under a key);
2. each worker runs the fused sparse pass over its rows: scores at W and at the
   extrapolated point G in one sweep over the stored values (2 l per stored value),
   the row losses (the BR hinge and the pairwise ranking hinge, O(|P| l) per row),
   and grad += X_b^T C (l per stored value); it returns (values, grad d x l);
3. the gradients are summed up the same tree on the workers, and the solver receives
   one d x l result, whatever w; it runs the nuclear-norm prox (an eigendecomposition
   of the l x l Gram matrix W^T W, or W W^T when W is wide: d l min(d, l)
   multiply-adds) and APG's d x l bookkeeping. The client only starts the solver's
   segments (a few seconds each) and receives their progress.

So the model of the median iteration's wall time, in ms, fitted by non-negative
least squares on the relative error (scipy.optimize.nnls) over every measured
configuration but the held-out one, except c, which comes from the prox timed
alone after each fit (its term and the cache term both grow with l, so the
totals alone cannot tell them apart):

    t = a  * nnz l / p          fused pass over the stored values (p = min(w, p_eff))
      + a2 * n l (1 + card) / p row losses (BR hinge, pairwise hinge O(|P| l) per row,
                                card = mean |P|)
      + b0 * d l                model-sized work once per iteration (the solver's APG
                                bookkeeping, a worker's pair update and
                                (de)serialization)
      + b  * d l h              the tree's levels, h = ceil(log2 w): W down a level and
                                a gradient up it (and summed), each on the critical path
      + c  * d l min(d, l)      the solver's prox (Gram matrix + eigh + apply)
      + e0 + e1 * h             round-trip latency, one call per tree level
      + a_mem * nnz l / p * min(1, s 3 d l 8 B / LLC)
                                the pass's cache misses: each stored value reads a row of
                                [W | G] and adds to a row of the gradient, 3 d l floats per
                                worker; s workers share the last-level cache (LLC bytes)

p is min(w, p_eff): on this machine at most ``os.cpu_count()`` workers compute at
once, so 4 and 8 single-thread workers add communication and latency but no
compute; p_eff, the cores the workers actually got beside the other jobs of a
shared machine, is fitted too (a grid between 1 and the usable cores). The
alternative terms of the design before the tree, b d l w and e1 w (the client sending
W to every worker and gathering every gradient), are fitted too and their relative
errors reported beside the tree's, as a check of which the data support.

The measurements: synthetic sparse sets (seeded numpy/scipy; binary bag of words,
labels from low-rank scores), varied one factor at a time around a base shape:
n, stored values per row (nnz), d, l, the label cardinality and alpha_nuclear
(which sets rank(W); the rank reached is printed), on local clusters of 1, 2, 4 and 8 single-thread
worker processes, all started at the start and kept alive. Each measurement is
the median of the per-iteration wall times (``objective_seconds_`` differences)
of one fit with the fixed paper step (``solver="paper"``, ``tol=0``, a fixed
number of iterations); the configurations are visited in a seeded random order,
round after round, and each configuration's figure is the median over rounds.

Then the fitted model extrapolates: the Bookmarks shape (87,856 x 2,150 sparse,
1% dense, 208 labels) on 2 workers (the shape measured by
``benchmarks/rbrl_speed.py``), 100x its rows on 64 workers, and 10^4 and 10^5
labels: time per iteration by term, the memory W takes on each worker and on the
solver's (block 0's) worker, the solver's prox, and the volume along the tree's
critical path per iteration (with its time at an assumed 10 Gb/s link, which
replaces the loopback-fitted transfer term when larger). Finally the same shapes under the
design past this one (W sharded by labels, a randomized SVD for the prox; see
docs/cost_model.md), estimated with the same fitted coefficients.

The output is printed and written to docs/benchmarks/cost_model.txt (the docs
page includes it). The machine (CPU model, cores) is in the header. On a
machine shared with other jobs the timings are inflated and noisy: that is why
medians are taken, the configurations interleaved, and the load average printed.

Usage: python benchmarks/cost_model.py [--quick] [--iters 25] [--rounds 3] [--out PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from _common import cpu_model
from scipy.optimize import nnls

import dmlr
from dmlr.models import RBRL
from dmlr.solvers.prox import prox_nuclear_norm

OUT = Path(__file__).resolve().parent.parent / "docs" / "benchmarks" / "cost_model.txt"
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
#: Bytes per second of a link between workers in the extrapolation (10 Gb/s).
LINK_BYTES_PER_S = 10e9 / 8
#: Bytes of a float64.
F8 = 8


def _last_level_cache_bytes(default: int = 32 * 2**20) -> int:
    """This machine's largest CPU cache (sysfs), else ``default``."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            text = f.read_text().strip()
            sizes.append(int(text[:-1]) * {"K": 2**10, "M": 2**20}[text[-1]] if text[-1] in "KM" else int(text))
    return max(sizes, default=default)


LLC_BYTES = _last_level_cache_bytes()
#: Workers per host (sharing one last-level cache of LLC_BYTES) in the extrapolation.
WORKERS_PER_HOST = 8


class Shape(NamedTuple):
    """A training set's shape and the nuclear-norm weight of its fit."""

    n: int
    d: int
    l: int
    nnz_row: int
    alpha_nuclear: float = 0.1
    #: expected relevant labels per row
    card: float = 2.0

    @property
    def label(self) -> str:
        extra = f" card={self.card:g}" if self.card != 2.0 else ""
        return f"n={self.n} d={self.d} l={self.l} nnz/row={self.nnz_row} a_nuc={self.alpha_nuclear:g}{extra}"


def configurations(quick: bool):
    """([(Shape, worker counts)] for the fit, [(Shape, worker counts)] held out, all worker counts).

    One factor at a time around a base shape, plus one Bookmarks-like shape (its d, l and
    nnz per row, 32,000 rows); the held-out shape (the Bookmarks shape itself, full mode
    only) is measured in the same rounds but not used by the fit, as a check of the
    model's prediction at 2.7 times the largest fitted shape's rows.
    """
    if quick:
        base = Shape(4000, 500, 50, 10)
        return (
            [
                (base, (1, 2)),
                (base._replace(nnz_row=20), (1, 2)),
                (base._replace(l=150), (1, 2)),
                (base._replace(d=1500), (1, 2)),
                (base._replace(alpha_nuclear=1000.0), (1, 2)),
                (base._replace(card=6.0), (1, 2)),
            ],
            [],
            (1, 2),
        )
    base = Shape(16000, 1000, 100, 10)
    many = (1, 2, 4, 8)
    return (
        [
            (base, many),
            (base._replace(n=32000), many),
            (base._replace(nnz_row=5), (1, 2)),
            (base._replace(nnz_row=20), (1, 2)),
            (base._replace(d=500), (1, 2)),
            (base._replace(d=2500), many),
            (base._replace(l=50), (1, 2)),
            (base._replace(l=250), many),
            (base._replace(l=400), (1, 2)),
            (base._replace(d=200, l=400), (1, 2)),
            (base._replace(alpha_nuclear=1000.0), (1, 2)),
            (base._replace(card=8.0), (1, 2)),
            (Shape(32000, 2150, 208, 22), (1, 2)),
        ],
        [(BOOKMARKS, (1, 2))],
        many,
    )


#: The Bookmarks set's shape (87,856 x 2,150, 1% of the features per row, 208 labels).
BOOKMARKS = Shape(87856, 2150, 208, 22)
#: Bookmarks' label cardinality (the synthetic preset's).
BOOKMARKS_CARD = 2.028


def make_set(shape: Shape, seed: int = 0, latent_rank: int = 10):
    """Seeded synthetic sparse set: X binary CSR (n, d), Y int8 (n, l).

    Each row stores ``nnz_row`` uniformly drawn columns (duplicates merged, so
    slightly fewer); the labels are the top ``card / l`` fraction of
    low-rank scores X A B + noise, so the labels are correlated and W's rank
    responds to alpha_nuclear.
    """
    rng = np.random.default_rng(seed)
    n, d, l, k = shape.n, shape.d, shape.l, shape.nnz_row
    cols = rng.integers(0, d, size=(n, k))
    X = sp.csr_matrix((np.ones(n * k), (np.repeat(np.arange(n), k), cols.ravel())), shape=(n, d))
    X.sum_duplicates()
    X.data[:] = 1.0
    A = rng.normal(size=(d, latent_rank))
    B = rng.normal(size=(latent_rank, l))
    S = X @ A @ B + rng.normal(scale=np.sqrt(k * latent_rank), size=(n, l))
    Y = (S > np.quantile(S, 1.0 - shape.card / l)).astype(np.int8)
    return X, Y


def machine_header(args) -> str:
    import dask
    import distributed
    import numba

    load = " ".join(f"{v:.2f}" for v in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return "\n".join(
        [
            "RBRL per-iteration cost model (benchmarks/cost_model.py"
            + (" --quick" if args.quick else "")
            + f", --iters {args.iters} --rounds {args.rounds})",
            f"machine: {cpu_model()}, os.cpu_count() = {os.cpu_count()}, usable cores = {CORES}, "
            f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
            f"numpy {np.__version__}, dask {dask.__version__}, distributed {distributed.__version__}, "
            f"numba {numba.__version__}",
            f"load average at start (1, 5, 15 min): {load}",
            "NOTE: this machine is shared with other jobs: timings are inflated and noisy. Each figure is a",
            "median of per-iteration times, configurations interleaved in a seeded random order, median over",
            "rounds. Workers are local processes with 1 thread each; client <-> workers over loopback TCP.",
        ]
    )


# -- measuring ----------------------------------------------------------------------------------
def measure_fit(client, X, Y, shape: Shape, iters: int):
    """(median ms per iteration, rank of W, median ms of the prox) of one fixed-step fit on ``client``.

    The prox is timed apart, right after the fit, on the fit's final W with its
    threshold (alpha_nuclear / L), with one BLAS thread as the solver runs it while
    local workers compute (``ClusterChunks.solver_context``): its term d l min(d, l)
    grows with l as the pass's cache term does, so the fit of the totals alone cannot
    tell them apart.
    """
    from threadpoolctl import threadpool_limits

    with dmlr.config_context(backend="dask", client=client):
        model = RBRL(alpha_nuclear=shape.alpha_nuclear, max_iter=iters, tol=0.0, solver="paper", scaling=None).fit(X, Y)
    per_iter = 1000 * np.diff(model.objective_seconds_)
    W, step = model.coef_, 1.0 / model.lipschitz_
    prox_times = []
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(5):
            t = time.perf_counter()
            prox_nuclear_norm(W - 1e-3 * step, shape.alpha_nuclear, step)
            prox_times.append(1000 * (time.perf_counter() - t))
    s = np.linalg.svd(W, compute_uv=False)
    rank = int((s > 1e-9 * s[0]).sum()) if s[0] > 0 else 0
    return float(np.median(per_iter)), rank, float(np.median(prox_times))


class Measurement(NamedTuple):
    """One configuration's figures: ms is the median over rounds of each fit's median iteration."""

    shape: Shape
    workers: int
    nnz: int
    ms: float
    spread: tuple  # (min, max) over rounds
    rank: int
    #: median over rounds of the prox's median ms, timed apart on the client
    prox_ms: float


def measure_all(configs, worker_counts, iters, rounds, log):
    from distributed import Client

    from dmlr.distributed import local_cluster

    data = {shape: make_set(shape) for shape, _ in configs}
    runs = [(shape, w) for shape, ws in configs for w in ws]
    times = {run: [] for run in runs}
    proxes = {run: [] for run in runs}
    ranks = {}
    with contextlib.ExitStack() as stack:
        clients = {}
        for w in worker_counts:
            cluster = stack.enter_context(local_cluster(w, 1))
            clients[w] = stack.enter_context(Client(cluster, set_as_default=False))
        warm = make_set(Shape(2000, 100, 20, 5))
        for w, client in clients.items():  # compile / load the kernels on every worker
            measure_fit(client, *warm, Shape(2000, 100, 20, 5), 3)
        order_rng = np.random.default_rng(1)
        for r in range(rounds):
            t0 = time.perf_counter()
            for i in order_rng.permutation(len(runs)):
                shape, w = runs[i]
                ms, rank, prox = measure_fit(clients[w], *data[shape], shape, iters)
                times[(shape, w)].append(ms)
                proxes[(shape, w)].append(prox)
                ranks[(shape, w)] = rank
            log(f"(round {r + 1}/{rounds}: {len(runs)} fits in {time.perf_counter() - t0:.0f} s)")
    return [
        Measurement(
            shape,
            w,
            int(data[shape][0].nnz),
            float(np.median(v)),
            (min(v), max(v)),
            ranks[(shape, w)],
            float(np.median(proxes[(shape, w)])),
        )
        for (shape, w), v in times.items()
    ]


# -- the model ----------------------------------------------------------------------------------
TERMS = (
    ("a", "nnz l / p", "fused pass"),
    ("a2", "n l (1 + card) / p", "row losses"),
    ("b0", "d l", "model-sized work"),
    ("b", "d l h", "tree levels: W down, grads up"),
    ("c", "d l min(d,l)", "solver prox"),
    ("e0", "1", "round trip"),
    ("e1", "h", "latency per tree level"),
    ("a_mem", "nnz l / p * min(1, s 3 d l 8 B / LLC)", "pass's cache misses"),
)
#: Column of the prox term, fitted apart from its own timings (see :func:`measure_fit`).
PROX = 4
#: Candidate effective core counts of the workers (see :func:`fit_model`).
P_EFF_GRID = np.round(np.arange(1.0, CORES + 1e-9, 0.05), 2)


def tree_levels(w: int) -> int:
    """Levels of the summation tree over w workers' blocks (one block per worker): ceil(log2 w)."""
    return math.ceil(math.log2(w)) if w > 1 else 0


def features(n, d, l, nnz, w, p, card=2.0, reduction="tree", sharing=None):
    """The model's terms (columns in the order of :data:`TERMS`) for one shape.

    p: the workers computing side by side; sharing: the workers whose model arrays share
    one last-level cache (default min(w, usable cores), this machine's). ``reduction``
    "tree" (dmlr's: the tree's levels) or "linear" (the client gathering from w workers).
    """
    comm = tree_levels(w) if reduction == "tree" else w
    sharing = min(w, CORES) if sharing is None else sharing
    return np.array(
        [
            nnz * l / p,
            n * l * (1 + card) / p,
            d * l,
            d * l * comm,
            d * l * min(d, l),
            1.0,
            comm,
            nnz * l / p * cache_miss_fraction(d, l, sharing),
        ],
        dtype=float,
    )


def cache_miss_fraction(d, l, sharing):
    """min(1, working set / last-level cache): the share of the pass's model rows read from memory.

    Each stored value (row i, column j) reads row j of [W | G] (2l floats) and adds to row
    j of the gradient (l floats), so the pass's working set is 3 d l floats per worker, and
    the workers on one machine share its last-level cache. Once the sets of the workers
    that share it exceed it, the rows come from memory: the term saturates at 1, where the
    pass is memory-bound (an assumption beyond the measured range, which stays below it).
    """
    return min(1.0, sharing * 3 * d * l * F8 / LLC_BYTES)


class Model(NamedTuple):
    """Fitted coefficients (ms per unit of each term) and the workers' effective cores here."""

    coef: np.ndarray
    p_eff: float
    reduction: str

    def terms(self, ms: list[Measurement]) -> np.ndarray:
        """(len(ms), len(TERMS)) ms of each term for each measurement (d counts the intercept)."""
        return self.coef * design_matrix(ms, self.p_eff, self.reduction)

    def predict(self, ms: list[Measurement]) -> np.ndarray:
        return self.terms(ms).sum(axis=1)


def design_matrix(ms: list[Measurement], p_eff: float, reduction="tree"):
    return np.array(
        [
            features(
                m.shape.n, m.shape.d + 1, m.shape.l, m.nnz, m.workers, min(m.workers, p_eff), m.shape.card, reduction
            )
            for m in ms
        ]
    )


def fit_model(ms: list[Measurement], reduction="tree") -> Model:
    """Non-negative least squares on relative errors, over a grid of the workers' effective cores.

    p = min(w, p_eff): the workers compute side by side on at most p_eff cores. On a
    dedicated machine p_eff would be its core count; on a shared one the other jobs
    take part of the cores, so p_eff (between 1 and the usable cores) is fitted too,
    by the smallest sum of squared relative errors over :data:`P_EFF_GRID`. The
    extrapolation assumes dedicated cores (p = w).
    """
    t = np.array([m.ms for m in ms])
    # c from the prox timed apart (relative least squares through the origin), then the
    # other coefficients from the totals less that term
    x_c = design_matrix(ms, 1.0)[:, PROX]
    prox = np.array([m.prox_ms for m in ms])
    c = float(np.sum(x_c / prox) / np.sum((x_c / prox) ** 2))
    others = [j for j in range(len(TERMS)) if j != PROX]
    best = None
    for p_eff in P_EFF_GRID:
        A = design_matrix(ms, float(p_eff), reduction)
        rest = A[:, others]
        scale = rest.max(axis=0)
        scale[scale == 0] = 1.0
        sol, resid = nnls((rest / scale) / t[:, None], 1.0 - c * x_c / t)
        if best is None or resid < best[0]:
            coef = np.zeros(len(TERMS))
            coef[others] = sol / scale
            coef[PROX] = c
            best = (resid, Model(coef, float(p_eff), reduction))
    return best[1]


# -- printing -----------------------------------------------------------------------------------
def fmt_ms(x: float) -> str:
    if x >= 1e5:
        return f"{x / 1000:,.0f} s"
    if x >= 1e3:
        return f"{x / 1000:.2f} s"
    return f"{x:.1f} ms" if x >= 1 else f"{x:.2f} ms"


def fmt_bytes(x: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:.0f} B"


#: Header of :func:`measurement_row`'s tables.
MEASUREMENT_HEADER = (
    "| shape | workers | nnz | rank(W) | measured | [min, max] | model | error | model, linear in w | error "
    "| prox alone: measured / c d l min(d,l) |\n|---|---|---|---|---|---|---|---|---|---|---|"
)


def measurement_row(m: Measurement, pred: float, pred_log: float, prox_model: float) -> str:
    """A table row: the measurement, the model's prediction, the linear-in-w alternative's, the prox."""
    return (
        f"| {m.shape.label} | {m.workers} | {m.nnz} | {m.rank} | {m.ms:.1f} "
        f"| [{m.spread[0]:.1f}, {m.spread[1]:.1f}] | {pred:.1f} | {100 * (pred / m.ms - 1):+.0f}% "
        f"| {pred_log:.1f} | {100 * (pred_log / m.ms - 1):+.0f}% | {m.prox_ms:.1f} / {prox_model:.1f} |"
    )


def fit_table(ms, model: Model, model_log: Model, log):
    pred, pred_log = model.predict(ms), model_log.predict(ms)
    log(
        "\n## Measurements and the model (ms per iteration; median over rounds, [min, max] of the rounds)\n\n"
        + MEASUREMENT_HEADER
    )
    prox = model.terms(ms)[:, PROX]
    for m, p, q, x in sorted(zip(ms, pred, pred_log, prox), key=lambda r: (r[0].workers, r[0].shape)):
        log(measurement_row(m, p, q, x))
    t = np.array([m.ms for m in ms])
    w = np.array([m.workers for m in ms])
    for name, pr in (("tree model", pred), ("linear-in-w alternative", pred_log)):
        err = np.abs(pr / t - 1)
        small = err[w <= 2]
        log(
            f"\n{name}: median |error| {100 * np.median(err):.0f}%, max {100 * err.max():.0f}%; at 1-2 workers "
            f"median {100 * np.median(small):.0f}%, max {100 * small.max():.0f}%, "
            f"{int((small <= 0.25).sum())}/{small.size} within 25%"
        )
    log(
        "\n## Fitted coefficients (c from the prox timed alone; the others by non-negative least squares on"
        " relative error)\n"
    )
    log("| coefficient | term | what | value | per unit |")
    log("|---|---|---|---|---|")
    for (name, term, what), v in zip(TERMS, model.coef):
        log(f"| {name} | {term} | {what} | {v:.4g} ms | {v * 1e6:.4g} ns |")
    log(
        f"\np = min(workers, p_eff), p_eff = {model.p_eff:g} fitted (linear alternative: {model_log.p_eff:g}): "
        f"the cores the workers got side by side\nout of {CORES} usable; d counts the intercept column; "
        "a coefficient at 0 means the fit did not need that term."
    )


def held_out_table(ms, model: Model, model_log: Model, log):
    """The held-out shapes (not in the fit) against the model's prediction."""
    if not ms:
        return
    log("\n## Held out of the fit: the Bookmarks shape (ms per iteration)\n")
    log(MEASUREMENT_HEADER)
    for m, p, q, x in zip(ms, model.predict(ms), model_log.predict(ms), model.terms(ms)[:, PROX]):
        log(measurement_row(m, p, q, x))
    log(
        "\nthe model's terms there (ms): "
        + "; ".join(
            f"{m.workers} worker(s): " + ", ".join(f"{what} {v:.1f}" for (_, _, what), v in zip(TERMS, row))
            for m, row in zip(ms, model.terms(ms))
        )
    )


def per_worker_memory(d, l):
    """Bytes a worker holds for the model in steady state: the pair [W | G] (d x 2l), the W it
    was sent, which becomes the gradient it returns (d x l)."""
    return 3 * d * l * F8


def solver_memory(d, l):
    """Bytes of model-sized arrays on the solver's worker (block 0's): APG's W, G, grad,
    W_new, G_next and the prox's work array, the one summed gradient it receives, and its
    block's (:func:`per_worker_memory`)."""
    return 7 * d * l * F8 + per_worker_memory(d, l)


def extrapolation_shapes():
    bm = dict(n=87856, d=2150, nnz_row=21.5)  # the Bookmarks preset: 1% of 2,150 features per row
    return [
        ("Bookmarks shape", bm["n"], bm["d"], 208, bm["nnz_row"], 2),
        ("Bookmarks shape", bm["n"], bm["d"], 208, bm["nnz_row"], 64),
        ("100x Bookmarks rows", 100 * bm["n"], bm["d"], 208, bm["nnz_row"], 64),
        ("100x rows, 10^4 labels", 100 * bm["n"], bm["d"], 10_000, bm["nnz_row"], 64),
        ("100x rows, 10^5 labels", 100 * bm["n"], bm["d"], 100_000, bm["nnz_row"], 64),
        ("100x rows, 10^5 labels, 10^5 features", 100 * bm["n"], 100_000, 100_000, bm["nnz_row"], 64),
    ]


def extrapolation_table(coef, log):
    log(
        "\n## Extrapolation of this design (W whole on every worker, gradients summed along a tree among the "
        "workers, the solver on the tree's root worker)\n"
        "\nTimes per iteration by term from the fitted coefficients, with one core per worker (p = w),\n"
        f"{WORKERS_PER_HOST} workers per host sharing a {LLC_BYTES / 2**20:.0f} MiB last-level cache (this machine's), "
        "and links at\n10 Gb/s. 'tree' is the larger of the fitted term of the tree's h = ceil(log2 w) levels and "
        "their bytes\nover such links (W down and a gradient up each level); 'solver' the fitted model-sized work "
        "on the\nroot worker (the client sends and receives nothing per iteration). Memory is float64.\n"
    )
    log(
        "| shape | workers | nnz | pass + rows | tree (bytes on its path) | solver "
        "| prox | latency | total | W memory per worker | solver's worker memory | bottleneck |"
    )
    log("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, n, d0, l, nnz_row, w in extrapolation_shapes():
        d, nnz = d0 + 1, int(n * nnz_row)
        f = features(n, d, l, nnz, w, w, BOOKMARKS_CARD, sharing=min(w, WORKERS_PER_HOST)) * coef
        tree_bytes = 2 * tree_levels(w) * d * l * F8
        terms = {
            "pass + rows": f[0] + f[1] + f[7],
            "tree": max(f[3], 1000 * tree_bytes / LINK_BYTES_PER_S),
            "solver": f[2],
            "prox": f[4],
            "latency": f[5] + f[6],
        }
        total = sum(terms.values())
        worst = max(terms, key=terms.get)
        log(
            f"| {name} ({n:,} x {d0:,}, {l:,} labels) | {w} | {nnz:.3g} | {fmt_ms(terms['pass + rows'])} "
            f"| {fmt_ms(terms['tree'])} ({fmt_bytes(tree_bytes)}) | {fmt_ms(terms['solver'])} "
            f"| {fmt_ms(terms['prox'])} | {fmt_ms(terms['latency'])} | {fmt_ms(total)} "
            f"| {fmt_bytes(per_worker_memory(d, l))} | {fmt_bytes(solver_memory(d, l))} "
            f"| {worst} ({100 * terms[worst] / total:.0f}%) |"
        )


def sharded_table(coef, log, rank=100, oversample=10, power_iters=2, worker_model_bytes=2e9):
    """The large shapes under the design past this one, estimated with the same coefficients.

    W is split by label columns over g label shards, each shard held by r row groups (a
    2-D grid, g r = w): a worker holds d x l/g and passes over n/r rows. g is the smallest
    power of two that keeps a worker's model memory (:func:`per_worker_memory`) under
    ``worker_model_bytes``. The gradient is summed within each shard's row group by a tree
    among workers (ceil(log2 r) hops of d l/g floats), and the ranking term's cross-label
    coupling all-gathers each row's relevant-label scores (n |P| floats, |P| = 2). The
    prox is the cheaper of two routes, both on the shards:

    * exact: the m x m Gram matrix (m = min(d, l); W W^T = sum of the shards' W_s W_s^T
      when d < l) summed over the shards, its eigendecomposition (m^3) in one place, the
      thresholded map applied on each shard;
    * randomized SVD (Halko, Martinsson, Tropp 2011): k = rank + oversample columns,
      power_iters power iterations, 2 power_iters + 2 shard products of d x l/g x k
      with an all-reduce of d x k each, and (power_iters + 1) orthonormalizations of
      d x k in one place. Exact when rank(prox(W)) < k, which the run can check on the
      (k+1)-th singular value estimate and grow k when not.

    Multiply-adds are costed at the fitted prox rate c (the solver's, one thread).
    """
    c, a, a2, b0, a_mem = coef[4], coef[0], coef[1], coef[2], coef[7]
    k = rank + oversample
    log(
        "\n## Past this design: W sharded by labels, the prox on the shards (estimates)\n"
        f"\nSame coefficients; multiply-adds at the fitted prox rate c. g label shards x r row groups = w\n"
        f"workers, g the smallest power of 2 keeping a worker's model memory under {fmt_bytes(worker_model_bytes)}. "
        "Gradients tree-summed\n"
        "within a shard's row group over 10 Gb/s links; the ranking term's coupling: each row's relevant-\n"
        "label scores all-gathered. Prox: the cheaper of the exact Gram route (m = min(d, l)) and a\n"
        f"randomized SVD with k = {k} columns (rank(W) <= {rank} assumed), {power_iters} power iterations.\n"
    )
    log(
        "| shape | workers (g shards x r rows) | pass + rows | tree-sum of grads + coupling | prox on the shards "
        "| total | W memory per worker |"
    )
    log("|---|---|---|---|---|---|---|")
    for name, n, d0, l, nnz_row, w in extrapolation_shapes():
        if w < 64:
            continue
        d, nnz = d0 + 1, int(n * nnz_row)
        g = 1
        while g < w and per_worker_memory(d, l / g) > worker_model_bytes:
            g *= 2
        r = w // g
        miss = cache_miss_fraction(d, l / g, min(w, WORKERS_PER_HOST))
        pass_rows = (a + a_mem * miss) * nnz * (l / g) / r + a2 * n * (l / g) * (1 + BOOKMARKS_CARD) / r
        hop = 1000 * d * (l / g) * F8 / LINK_BYTES_PER_S
        tree = math.ceil(math.log2(r)) * (hop + b0 * d * l / g) if r > 1 else 0.0
        coupling = 1000 * n * 2 * F8 / LINK_BYTES_PER_S if g > 1 else 0.0
        hops = math.ceil(math.log2(g)) if g > 1 else 0
        m = min(d, l)
        exact = 2 * c * d * (l / g) * m + c * m**3 + hops * 1000 * m * m * F8 / LINK_BYTES_PER_S
        randomized = (2 * power_iters + 2) * (c * d * (l / g) * k + hops * 1000 * d * k * F8 / LINK_BYTES_PER_S) + (
            power_iters + 1
        ) * c * d * k * k
        prox, route = (exact, f"exact, m={m:,}") if exact <= randomized else (randomized, f"randomized, k={k}")
        total = pass_rows + tree + coupling + prox
        log(
            f"| {name} ({n:,} x {d0:,}, {l:,} labels) | {w} ({g} x {r}) | {fmt_ms(pass_rows)} "
            f"| {fmt_ms(tree + coupling)} | {fmt_ms(prox)} ({route}) | {fmt_ms(total)} "
            f"| {fmt_bytes(per_worker_memory(d, l / g))} |"
        )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: small shapes, 1-2 workers, one round")
    ap.add_argument("--iters", type=int, default=None, help="APG iterations per fit (default 25; quick 6)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds over the configurations (default 3; quick 1)")
    ap.add_argument("--out", default=None, help=f"output file (default {OUT}; quick: none)")
    args = ap.parse_args(argv)
    args.iters = args.iters or (6 if args.quick else 25)
    args.rounds = args.rounds or (1 if args.quick else 3)
    out_path = Path(args.out) if args.out else (None if args.quick else OUT)
    buf = io.StringIO()

    def log(line=""):
        print(line, flush=True)
        buf.write(line + "\n")

    start = time.perf_counter()
    log(machine_header(args))
    configs, held_out, worker_counts = configurations(args.quick)
    ms = measure_all(configs + held_out, worker_counts, args.iters, args.rounds, log)
    held = {shape for shape, _ in held_out}
    fitted = [m for m in ms if m.shape not in held]
    model, model_log = fit_model(fitted), fit_model(fitted, "linear")
    fit_table(fitted, model, model_log, log)
    held_out_table([m for m in ms if m.shape in held], model, model_log, log)
    extrapolation_table(model.coef, log)
    sharded_table(model.coef, log)
    log(f"\n(whole run {time.perf_counter() - start:.0f} s)")
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(buf.getvalue())
        print(f"written to {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
