"""dmlr's grid search against scikit-learn's GridSearchCV, side by side on a 2-worker Dask cluster.

Issue 30 (item 6) asks whether :func:`dmlr.model_selection.grid_search_cv`
should stay, or give way to scikit-learn's search tools if those measure as
fast on the cluster. This script runs, in one process and one run, the same
cross-validated grid search over linear :class:`dmlr.models.RBRL`
(``solver="spectral"``) four ways:

(a) ``dmlr warm``: ``grid_search_cv(..., client=client)``, one Dask task per
    fold and (alpha, alpha_rank) setting, fitting the ``alpha_nuclear`` path
    from the largest value to the smallest with warm starts, the data
    scattered to the workers once;
(b) ``dmlr cold``: the same with ``path_param=None``: one task per fold and
    grid point, every fit starting from zero;
(c) ``sklearn dask``: ``sklearn.model_selection.GridSearchCV(n_jobs=-1)``
    under ``joblib.parallel_backend("dask")`` on the same cluster;
(d) ``sklearn n_jobs=1``: the same GridSearchCV sequentially in this process
    (no cluster; this process's default BLAS threading), for reference.

All four use the same explicit list of (train, validation) index pairs
(:func:`dmlr.model_selection.kfold_indices`, seeded), score validation
folds by the ranking loss (dmlr's ``scoring="ranking_loss"``;
scikit-learn's ``dmlr.scoring.get_scorer("ranking_loss")``, the negated
loss) and skip the refit on all rows (``refit=False``), so the timed work
is the cross-validation alone. The grid is alpha in {0.1, 1, 10} x
alpha_rank in {0.01, 1} x alpha_nuclear in {0.01, 0.1, 1, 10} (24 points).

Columns of the table, per data set and method:

- ``wall s``: median wall time over ``--repeats`` runs, and their range
  (min-max). An untimed warm-up first compiles the Numba kernels in this
  process and on the workers; then each method's runs are interleaved
  with the others', in forward order on even repeats and reversed order
  on odd ones, so that a drift in the machine's load falls on every
  method alike;
- ``x (a)``: the median wall time divided by that of (a);
- ``fits``: cross-validation fits (grid points x folds);
- ``APG iters``: total solver iterations over all fits (dmlr: the records'
  ``fold_n_iter``; scikit-learn: a second scorer that returns the fitted
  estimator's ``n_iter_``);
- ``best (alpha, alpha_rank, alpha_nuclear)`` and ``best RL``: the chosen
  point and its mean validation ranking loss;
- ``max |dRL| vs (b)``: the largest difference, over all 24 grid points,
  between this method's mean validation ranking loss and (b)'s. (b), (c)
  and (d) fit the same problems from the same start, so they should agree
  to rounding; (a) differs by the solver's stopping accuracy (``tol``).

Data: the MULAN train split of a staged real set through
:func:`dmlr.datasets.staged_store` (``DMLR_DATA_DIR``; skipped with a
message when absent) and the train split of a dense synthetic set from
:func:`dmlr.datasets.make_multilabel` (seeded), each cut to at most
``--max-rows`` rows (a seeded random subset, sorted).

Run (from the repository root)::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/search_tools.py \\
        [--sets yeast synthetic] [--cv 3] [--repeats 3] [--max-iter 500] [--tol 1e-4] \\
        [--max-rows 1500] [--workdir /tmp/dmlr-search-tools]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
from _common import arrays

#: The search grid (24 points).
GRID = {"alpha": [0.1, 1.0, 10.0], "alpha_rank": [0.01, 1.0], "alpha_nuclear": [0.01, 0.1, 1.0, 10.0]}
#: The validation metric (a loss: dmlr minimizes it, scikit-learn maximizes its negation).
METRIC = "ranking_loss"
METHODS = ("(a) dmlr warm", "(b) dmlr cold", "(c) sklearn dask", "(d) sklearn n_jobs=1")
DEFAULT_WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "dmlr-search-tools"


def load(name: str, workdir: Path, max_rows: int, seed: int):
    """Train split of a staged set or of the synthetic set: float64 ndarray or CSR X, int8 Y."""
    import dmlr
    from dmlr.datasets import make_multilabel, staged_store

    workdir.mkdir(parents=True, exist_ok=True)
    if name == "synthetic":
        store = workdir / f"synthetic_seed{seed}.zarr"
        if not store.exists():
            make_multilabel(
                store, n_samples=2000, n_features=100, n_labels=20, cardinality=2.0, test_fraction=0.25, seed=seed
            )
        label = "synthetic (make_multilabel 2000x100, 20 labels, train split)"
    else:
        store = staged_store(name, workdir)
        label = f"{name} (train split)"
    X, Y = arrays(store, "train" if "train" in dmlr.open_dataset(store).splits else None)
    if X.shape[0] > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(X.shape[0], max_rows, replace=False))
        X, Y = X[rows], Y[rows]
        label += f", {max_rows} random rows"
    return X, Y, label


def _n_iter(estimator, X, y):
    """A 'scorer' that records the fitted estimator's APG iterations."""
    return float(estimator.n_iter_)


def run_dmlr(est, X, Y, splits, client, warm: bool) -> dict:
    from dmlr.model_selection import grid_search_cv

    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = grid_search_cv(
            est, X, Y, GRID, cv=splits, scoring=METRIC, client=client, refit=False, path_param="auto" if warm else None
        )
    seconds = time.perf_counter() - t
    return {
        "seconds": seconds,
        "fits": res.n_fits,
        "iters": int(sum(sum(r["fold_n_iter"]) for r in res.results)),
        "best": res.best_params,
        "best_score": res.best_score,
        "scores": {_key(r["params"]): r["mean_score"] for r in res.results},
        "note": (f"warm fits {res.n_warm_fits}, first-test stops {res.n_warm_first_test_stops}" if warm else "")
        + "".join(f"; warning: {w.message}" for w in caught),
    }


def run_sklearn(est, X, Y, splits, on_dask: bool) -> dict:
    import joblib
    from sklearn.model_selection import GridSearchCV

    from dmlr.scoring import get_scorer

    search = GridSearchCV(
        est,
        GRID,
        cv=splits,
        scoring={METRIC: get_scorer(METRIC), "n_iter": _n_iter},
        refit=False,
        n_jobs=-1 if on_dask else 1,
        error_score="raise",
    )
    t = time.perf_counter()
    if on_dask:
        with joblib.parallel_backend("dask"):
            search.fit(X, Y)
    else:
        search.fit(X, Y)
    seconds = time.perf_counter() - t
    cv = search.cv_results_
    n_splits = len(splits)
    mean_rl = -cv[f"mean_test_{METRIC}"]
    best = int(np.argmin(mean_rl))  # first in scikit-learn's grid order on ties, as its rank_test_ does
    return {
        "seconds": seconds,
        "fits": len(cv["params"]) * n_splits,
        "iters": int(sum(cv[f"split{k}_test_n_iter"].sum() for k in range(n_splits))),
        "best": dict(cv["params"][best]),
        "best_score": float(mean_rl[best]),
        "scores": {_key(p): float(s) for p, s in zip(cv["params"], mean_rl)},
        "note": "",
    }


def _key(params: dict) -> tuple:
    return tuple(float(params[name]) for name in GRID)


def measure(X, Y, args, client) -> dict:
    from dmlr.model_selection import kfold_indices
    from dmlr.models import RBRL

    est = RBRL(solver="spectral", tol=args.tol, max_iter=args.max_iter)
    splits = kfold_indices(X.shape[0], args.cv, seed=args.seed)
    calls = {
        METHODS[0]: lambda: run_dmlr(est, X, Y, splits, client, warm=True),
        METHODS[1]: lambda: run_dmlr(est, X, Y, splits, client, warm=False),
        METHODS[2]: lambda: run_sklearn(est, X, Y, splits, on_dask=True),
        METHODS[3]: lambda: run_sklearn(est, X, Y, splits, on_dask=False),
    }
    # Untimed: compile the Numba kernels in this process and on every worker for this data's types.
    tiny = RBRL(solver="spectral", tol=args.tol, max_iter=3)
    tiny_splits = kfold_indices(min(X.shape[0], 60), 2, seed=args.seed)
    Xs, Ys = X[:60], Y[:60]
    for _ in range(2):  # each worker gets at least one task
        run_dmlr(tiny, Xs, Ys, tiny_splits, client, warm=True)
        run_sklearn(tiny, Xs, Ys, tiny_splits, on_dask=True)
    run_sklearn(tiny, Xs, Ys, tiny_splits, on_dask=False)
    runs = {m: [] for m in METHODS}
    for r in range(args.repeats):
        order = METHODS if r % 2 == 0 else METHODS[::-1]
        for m in order:
            out = calls[m]()
            runs[m].append(out)
            print(f"    repeat {r + 1}/{args.repeats}  {m:22s} {out['seconds']:8.2f} s", flush=True)
    return runs


def table(label: str, runs: dict, n_rows: int, args) -> str:
    ref = statistics.median(o["seconds"] for o in runs[METHODS[0]])
    cold = runs[METHODS[1]][-1]["scores"]
    head = (
        f"{'method':22s} {'wall s':>8s} {'(min-max)':>15s} {'x (a)':>6s} {'fits':>5s} {'APG iters':>10s}  "
        f"{'best (alpha, alpha_rank, alpha_nuclear)':40s} {'best RL':>9s} {'max |dRL| vs (b)':>17s}"
    )
    lines = [
        f"\n{label}: {n_rows} rows, cv={args.cv}, {args.repeats} repeat(s), "
        f"RBRL(solver='spectral', tol={args.tol:g}, max_iter={args.max_iter})",
        head,
        "-" * len(head),
    ]
    notes = []
    for m in METHODS:
        outs = runs[m]
        secs = [o["seconds"] for o in outs]
        last = outs[-1]
        iters = {o["iters"] for o in outs}
        iters_s = f"{last['iters']}" if len(iters) == 1 else f"{min(iters)}-{max(iters)}"
        best = last["best"]
        best_s = f"({best['alpha']:g}, {best['alpha_rank']:g}, {best['alpha_nuclear']:g})"
        if any(o["best"] != best for o in outs):
            best_s += " varies"
        diff = max(abs(last["scores"][k] - cold[k]) for k in cold)
        med = statistics.median(secs)
        lines.append(
            f"{m:22s} {med:8.2f} {f'({min(secs):.2f}-{max(secs):.2f})':>15s} {med / ref:6.2f} "
            f"{last['fits']:5d} {iters_s:>10s}  {best_s:40s} {last['best_score']:9.5f} {diff:17.2e}"
        )
        if last["note"]:
            notes.append(f"  {m}: {last['note']}")
    return "\n".join(lines + notes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sets",
        nargs="+",
        default=["yeast", "synthetic"],
        help="staged set names (dmlr.datasets.STAGED) and/or 'synthetic'",
    )
    ap.add_argument("--cv", type=int, default=3, help="number of folds")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each method; the table shows the median")
    ap.add_argument("--max-iter", type=int, default=500)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--max-rows", type=int, default=1500, help="cut each set to this many rows (seeded)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the folds, the row subset and the synthetic set")
    ap.add_argument("--workdir", default=str(DEFAULT_WORK), help="where converted Zarr stores are kept")
    args = ap.parse_args(argv)

    from distributed import Client

    from dmlr.distributed import local_cluster

    data = {}
    for name in args.sets:
        try:
            data[name] = load(name, Path(args.workdir), args.max_rows, args.seed)
        except FileNotFoundError as e:
            print(f"SKIP {name}: {e}")
    tables = []
    with local_cluster(2, 1) as cluster, Client(cluster) as client:
        print(
            f"cluster: {len(client.scheduler_info()['workers'])} workers x 1 thread; "
            f"this machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        for name, (X, Y, label) in data.items():
            print(f"  {label}: X {X.shape}, Y {Y.shape}", flush=True)
            runs = measure(X, Y, args, client)
            tables.append(table(label, runs, X.shape[0], args))
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print("\n".join(tables))


if __name__ == "__main__":
    main()
