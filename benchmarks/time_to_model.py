"""Time to a model: ``dmlr.fit`` with its defaults beside its own final fit and two peers.

For each set (official train/test splits; the Bookmarks shape is dmlr's synthetic
preset, 87,856 x 2,150 sparse, 208 labels), in one process, one after the other:

* dmlr: ``model = dmlr.fit(store)`` (defaults: the model ``model="auto"`` picks and
  the search of its regularization): total seconds, of which search and final fit,
  and the choice;
* final fit alone: a clone of that model (chosen values) fitted on the training
  split, timed alone: the floor of the total;
* sklearn: ``OneVsRestClassifier(LogisticRegression())`` at its default C, on the
  features scaled as dmlr's model scaled them, ``n_jobs`` = the cores, one BLAS
  thread each;
* omikuji: its defaults, as many threads as cores (a benchmark extra: skipped
  when not installed).

Each row gives seconds and test P@1, P@3, P@5 (rows with no relevant label count
as precision 0, as :func:`dmlr.evaluate` does), ranking loss and average
precision. ``ratio`` is dmlr's total over its final fit alone; the goal is at most
2 (or the final fit plus 10 s) on every set of 10,000 training rows or more.
``searched`` is the search's iterations (its fits' oracle calls, summed over the folds and
values), ``iters`` the final fit's (the solver's oracle calls), with its
milliseconds per iteration (between its first and last recorded objective): a
fit's iterations depend on the order in which its row blocks' sums are added, so
two runs can differ in iterations as well as in time per iteration.

``--workers 1 2`` runs dmlr inside local clusters of 1 and 2 single-thread workers
(and prints the speedup of the default fit from the first to the last count)
instead of in this process; ``--repeats N`` runs the counts N times in turns and
prints each speedup and their median (on a small machine one run's speedup moves by
several percent). The fits on the workers have one row block per worker thread, so
1 and 2 workers sum in different orders; ``--blocks N`` gives every fit N blocks (the
execution setting ``n_blocks``), hence the same iterations on any worker count, so
that the speedup is that of the time per iteration.

With ``--workers 1 N``, each repeat also measures the machine's ceiling for that
speedup (:func:`machine_ceiling`), on the N-worker cluster right after its fit: the
time per iteration of one worker fitting all the training rows (the final fit's first
iterations, about ``--ceiling-seconds``) over that of N workers each fitting its share
of the rows at once, with no summation and no round trip. On a machine whose cores
slow each other down (memory bandwidth, a virtual machine's host) it is below N, and
dmlr's speedup can be read against it. Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/time_to_model.py [--sets a,b] [--workers 1 2]
        [--repeats N] [--blocks N] [--ceiling-seconds S] [--docs]

``--docs`` also writes the table to ``docs/benchmarks/time_to_model.txt``
(``time_to_model_workers.txt`` with ``--workers``, ``time_to_model_workers_blocks<N>.txt``
with ``--blocks N`` too).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from _common import parser, peer_arrays, peer_scaler, stores, tee, timed, work_folder
from rbrl_speed import ms_per_iteration
from sklearn.base import clone
from threadpoolctl import threadpool_limits

import dmlr
from dmlr.api import final_estimator
from dmlr.datasets import staged_store, synthetic_store
from dmlr.metrics import multilabel_metrics

SETS = ("emotions", "enron", "bibtex", "tmc2007_500", "mediamill_discretized", "delicious", "bookmarks")
METRICS = ("precision_at_1", "precision_at_3", "precision_at_5", "ranking_loss", "average_precision")


def store_of(name: str, workdir: Path) -> Path:
    if name == "bookmarks":
        return synthetic_store("bookmarks", workdir, seed=0)
    return staged_store(name, workdir)


def run_dmlr(store: Path) -> dict:
    model, total = timed(dmlr.fit, store, verbose=0)
    search = getattr(model, "search_seconds_", 0.0)
    X, Y = dmlr.open_dataset(store).arrays("train")
    _, final_alone = timed(clone(model).fit, X, Y)
    final = final_estimator(model)
    iters = getattr(final, "n_iter_", None)
    values = dmlr.evaluate(model, store, metrics=list(METRICS))
    chosen = ", ".join(f"{k}={v:.3g}" for k, v in getattr(model, "best_params_", {}).items())
    found = getattr(model, "search_", None)
    rows = getattr(found, "n_rows", None)
    searched = round(sum(r["mean_n_iter"] for r in found.results) * found.n_splits) if found is not None else None
    return dict(
        total=total,
        search=search,
        final=total - search,
        final_alone=final_alone,
        iters=iters,
        searched=searched,
        ms_per_iter=ms_per_iteration(final) if len(getattr(final, "objective_seconds_", ())) > 1 else None,
        choice=f"{type(model).__name__} {chosen} stages={rows}",
        final_model=final,
        **values,
    )


def machine_ceiling(client, store: Path, final, iters: int) -> float:
    """What the machine gives ``client``'s w single-thread workers on dmlr's own work, with
    nothing to wait for: the time per iteration of one worker fitting all the training rows,
    over that of w workers each fitting its share of them at once (contiguous row ranges, as
    the w-worker fit's blocks), with no summation and no round trip (w if the workers never
    slowed each other down).

    Each fit is the first ``iters`` iterations of the final fit (a clone of ``final``, the
    chosen values, ``tol=0``), held whole in its worker: one block, one BLAS thread
    (:func:`dmlr.paths.fit_step`, a search unit). The shares do the same work per iteration
    as the w-worker fit's blocks, and each does the solver's own work too, which that fit
    does once: a bound on what summing over the workers could reach. The one-worker fit runs
    before and after the w at once; the ceiling uses their mean.
    """
    from dmlr.paths import UnitRunner, fit_step, stage_data

    X, Y = dmlr.open_dataset(store).arrays("train")
    n, w = int(X.shape[0]), len(client.scheduler_info()["workers"])
    X, Y, _, _ = stage_data(X, Y, None, client, {})  # computed by a worker from the chunks
    validation = np.arange(min(n, 1_000))
    edges = np.linspace(0, n, w + 1).round().astype(int)
    splits = [(np.arange(n), validation)] + [(np.arange(a, b), validation) for a, b in zip(edges[:-1], edges[1:])]
    est = clone(final).set_params(max_iter=iters, tol=0.0, verbose=0)
    whole, shares = (est, 0, {}, ("ranking_loss",), True), [(est, 1 + k, {}, ("ranking_loss",), True) for k in range(w)]

    def pace(outs) -> float:  # seconds per iteration of the slowest fit
        return max(out.seconds / max(out.n_iter, 1) for out in outs)

    with UnitRunner((X, Y, splits), client) as runner:
        runner.map(fit_step, shares)  # the data on every worker, the kernels loaded
        before = pace(runner.map(fit_step, [whole]))
        together = pace(runner.map(fit_step, shares))  # share k on worker k
        after = pace(runner.map(fit_step, [whole]))
    return (before + after) / 2 / together


def run_sklearn(store: Path, scaling: str) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.pipeline import make_pipeline

    X, Y = peer_arrays(store, "train")
    X_te, Y_te = peer_arrays(store, "test")
    model = make_pipeline(
        peer_scaler(scaling), OneVsRestClassifier(LogisticRegression(max_iter=1000), n_jobs=os.cpu_count())
    )
    t = time.perf_counter()
    with warnings.catch_warnings(), threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("ignore")
        model.fit(X, Y)
    seconds = time.perf_counter() - t
    S = model.decision_function(X_te)
    return dict(total=seconds, **multilabel_metrics(Y_te, S, (S > 0).astype(np.int8), metrics=list(METRICS)))


def run_omikuji(store: Path, metrics=METRICS) -> dict | None:
    try:
        import omikuji
    except ImportError:
        return None
    X, Y = peer_arrays(store, "train")
    X_te, Y_te = peer_arrays(store, "test")
    X, X_te = sp.csr_matrix(X), sp.csr_matrix(X_te)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.txt"
        with open(path, "w") as f:  # the XMC repository's format, which omikuji reads
            f.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
            for i in range(X.shape[0]):
                labels = ",".join(map(str, np.flatnonzero(Y[i])))
                row = X[i]
                feats = " ".join(f"{j}:{v:.6g}" for j, v in zip(row.indices, row.data))
                f.write(f"{labels} {feats}".rstrip() + "\n")  # omikuji refuses a trailing space
        with _quiet_stdout():  # omikuji's Rust logger writes its progress to file descriptors 1 and 2
            model, seconds = timed(
                omikuji.Model.train_on_data, str(path), omikuji.Model.default_hyper_param(), os.cpu_count()
            )
    S = np.full(Y_te.shape, -np.inf)
    for i in range(X_te.shape[0]):
        row = X_te[i]
        for label, score in model.predict(list(zip(row.indices.tolist(), row.data.tolist())), top_k=Y.shape[1]):
            S[i, label] = score
    S[np.isneginf(S)] = -1e9
    return dict(total=seconds, **multilabel_metrics(Y_te, S, (S > 0.5).astype(np.int8), metrics=list(metrics)))


@contextlib.contextmanager
def _quiet_stdout():
    """File descriptors 1 and 2 to /dev/null for the block (what a native library prints there:
    omikuji's progress bars)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def line(name: str, who: str, r: dict | None) -> str:
    if r is None:
        return f"{name:22} {who:12} (not installed)"
    cells = " ".join(f"{r[m]:7.4f}" for m in METRICS)
    extra = ""
    if "search" in r:
        ratio = r["total"] / r["final_alone"] if r["final_alone"] > 0 else float("nan")
        iters = f"  searched {r['searched']:5d}" if r.get("searched") else ""
        if r.get("iters"):
            iters += f"  iters {r['iters']:4d}"
            if r.get("ms_per_iter"):
                iters += f" ({r['ms_per_iter']:5.1f} ms)"
        extra = (
            f"  search {r['search']:7.1f}  final {r['final']:6.1f}  alone {r['final_alone']:6.1f}  "
            f"ratio {ratio:4.1f}{iters}  {r['choice']}"
        )
    return f"{name:22} {who:12} {r['total']:8.1f} {cells}{extra}"


def main(argv=None) -> int:
    p = parser(__doc__, sets=SETS, workdir=None)
    p.add_argument("--workers", type=int, nargs="*", default=None, help="local clusters of N single-thread workers")
    p.add_argument("--repeats", type=int, default=1, help="with --workers: runs of each count, in turns")
    p.add_argument("--blocks", type=int, default=None, help="with --workers: row blocks of every fit")
    p.add_argument(
        "--ceiling-seconds",
        type=float,
        default=4.0,
        help="with --workers 1 N: about how long the machine ceiling's fits run (0: no ceiling)",
    )
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--docs", action="store_true", help="also write the table to docs/benchmarks/")
    args = p.parse_args(argv)
    name = "time_to_model_workers" if args.workers else "time_to_model"
    with tee(f"{name}_blocks{args.blocks}" if args.workers and args.blocks else name, args.docs):
        return _run(args)


def _run(args) -> int:
    workdir = work_folder(args.workdir, prefix="time_to_model-")
    head = f"{'set':22} {'who':12} {'seconds':>8} " + " ".join(f"{m[:7]:>7}" for m in METRICS)
    print(head, flush=True)
    for name, store in stores(args.sets, workdir, store_of):
        if args.workers:
            from distributed import Client

            from dmlr.distributed import local_cluster

            speedups, ceilings = [], []
            for _ in range(args.repeats):  # the worker counts in turns, so that they share the machine's drift
                totals, single_block_ms = [], None
                for n in args.workers:
                    with (
                        local_cluster(n, 1) as cluster,
                        Client(cluster) as client,
                        dmlr.config_context(n_blocks=args.blocks),
                    ):
                        client.run(lambda: None)
                        r = run_dmlr(store)
                        if n == 1:  # one worker, one block: the pace of the ceiling's whole fit
                            single_block_ms = r["ms_per_iter"]
                        if n == args.workers[-1] > args.workers[0] == 1 and args.ceiling_seconds > 0:
                            iters = max(5, round(1000 * args.ceiling_seconds / (single_block_ms or 100.0)))
                            ceilings.append(machine_ceiling(client, store, r["final_model"], iters))
                    totals.append(r["total"])
                    print(line(name, f"dmlr {n}w", r), flush=True)
                speedups.append(totals[0] / totals[-1])
            print(
                f"{name:22} speedup of dmlr.fit, {args.workers[0]} -> {args.workers[-1]} workers: "
                + _per_repeat(speedups),
                flush=True,
            )
            if ceilings:
                print(
                    f"{name:22} machine ceiling, 1 worker fitting all the rows against {args.workers[-1]} "
                    f"fitting their shares at once, time per iteration (about {args.ceiling_seconds:g} s): "
                    + _per_repeat(ceilings),
                    flush=True,
                )
        else:
            r = run_dmlr(store)
            print(line(name, "dmlr", r), flush=True)
        if not args.no_peers:
            scaling = dmlr.fit(store, search=False, verbose=0, max_iter=1).scaling_
            print(line(name, "sklearn", run_sklearn(store, scaling)), flush=True)
            print(line(name, "omikuji", run_omikuji(store)), flush=True)
    return 0


def _per_repeat(ratios: list[float]) -> str:
    """``"1.62x, 1.70x (median 1.65x)"``: each repeat's ratio, and their median when there are several."""
    text = ", ".join(f"{v:.2f}x" for v in ratios)
    return text + (f" (median {np.median(ratios):.2f}x)" if len(ratios) > 1 else "")


if __name__ == "__main__":
    raise SystemExit(main())
