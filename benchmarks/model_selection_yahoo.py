"""Grid search with fivefold CV for linear RBRL on yahoo_arts, on a 2-worker local cluster.

The RBRL paper (Wu et al. 2020, Sec. 5.2) tunes lambda1, lambda2, lambda3
(dmlr's ``alpha``, ``alpha_rank``, ``alpha_nuclear``) over
{1e-4, ..., 1e2} by fivefold cross-validation on the training set. This
script does that search: the full :data:`dmlr.model_selection.PAPER_GRID`
(7^3 = 343 points) x 5 folds = 1715 fits, on a seeded random 60% training
part of yahoo_arts (../shared/datasets/yahoo_arts/arts.mat: 5000 x 462
dense, 26 labels; 3000 training rows, so each fit sees 2400 rows). The
work is spread as 49 (alpha, alpha_rank) settings x 5 folds = 245 Dask
tasks, each fitting the 7-value alpha_nuclear path from 1e2 down to 1e-4 with warm
starts, on a LocalCluster(n_workers=2, threads_per_worker=1).

Solver inside CV (the defaults below): ``solver="spectral"`` (Lanczos bound on
the Hessian plus backtracking and adaptive restart: the fewest iterations in
a probe on this set), ``tol=1e-4`` on the relative objective change and
``max_iter=500``. CV only has to rank grid points, not solve each to full
accuracy; a probe on this set showed that the weakly regularized corner
(alpha and alpha_nuclear both small) does not reach tol=1e-6 within 2000
iterations (~14 s per fit here), which would put the search at several
hours on two cores, while at tol=1e-4 most fits stop after tens to a few
hundred iterations and the cap bounds the rest. The refit on the whole
training part uses the same settings. Override with --tol/--max-iter/--solver.

Warm starts and stopping (printed as a count): the relative-objective-change
test alone passes at its first chance (2 iterations) after a warm start, short
of the optimum, because the first steps from a good start are short. RBRL's
default ``gradient_tol="auto"`` also requires the composite gradient mapping to
fall to ``tol`` times its size at the origin, which keeps warm fits going to
their optimum; the count of first-test stops shows whether any still stop
there. ``--cold`` fits every point from zero (no warm starts) to compare.

Prints the elapsed time, fits per second, the best parameters and score
(``paper_mean``: the mean of the six paper metrics oriented larger-better)
and the top-5 table.

Usage: python benchmarks/model_selection_yahoo.py [--tol 1e-4] [--max-iter 500] [--solver spectral] [--cold]
                                                  [--checkpoint FILE]  # resumable, one alpha value at a time
                                                  [--settings N]  # only the first N (alpha, alpha_rank) settings
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np

from dmlr.datasets import data_dir
from dmlr.model_selection import PAPER_GRID, GridSearchResult, grid_search_cv
from dmlr.models import RBRL


def load_arts():
    import scipy.io as sio

    path = data_dir() / "yahoo_arts" / "arts.mat"
    if not path.exists():
        print(f"SKIP: {path} is absent (set DMLR_DATA_DIR to the staged ../shared/datasets folder)")
        sys.exit(0)
    m = sio.loadmat(path)
    X = np.asarray(m["data"], dtype=np.float64)
    Y = (np.asarray(m["target"]).T > 0).astype(np.int8)  # stored labels x instances in -1/+1
    return X, Y


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--max-iter", type=int, default=500)
    ap.add_argument("--solver", "--step", default="spectral", help="RBRL's solver")
    ap.add_argument("--train-fraction", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--cold", action="store_true", help="no warm starts: every grid point fitted from zero (path_param=None)"
    )
    ap.add_argument(
        "--checkpoint",
        default=None,
        help="JSON file: run one alpha value at a time, save each, resume a killed run from it",
    )
    ap.add_argument(
        "--settings", type=int, default=None, help="probe: only the first N (alpha, alpha_rank) settings of the grid"
    )
    args = ap.parse_args(argv)

    X, Y = load_arts()
    rng = np.random.default_rng(args.seed)
    train = np.sort(rng.permutation(X.shape[0])[: int(round(args.train_fraction * X.shape[0]))])
    X_tr, Y_tr = X[train], Y[train]
    grid = dict(PAPER_GRID)
    if args.settings is not None:
        # Grid order is alpha-major, so the first settings are the slowest (weakest ridge) corner.
        pairs = [(a, b) for a in grid["alpha"] for b in grid["alpha_rank"]][: args.settings]
        grid = {
            "alpha": sorted({a for a, _ in pairs}),
            "alpha_rank": sorted({b for _, b in pairs}),
            "alpha_nuclear": grid["alpha_nuclear"],
        }
    n_points = int(np.prod([len(v) for v in grid.values()]))
    print(
        f"yahoo_arts: training part {X_tr.shape[0]} x {X_tr.shape[1]}, {Y_tr.shape[1]} labels "
        f"(seed {args.seed}); grid {n_points} points x 5 folds; RBRL(solver={args.solver!r}, "
        f"tol={args.tol:g}, max_iter={args.max_iter}); "
        f"{'cold fits' if args.cold else 'warm-started alpha_nuclear paths'}; "
        f"cores: {os.cpu_count()}; load average at start: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )

    from distributed import Client

    from dmlr.distributed import local_cluster

    est = RBRL(solver=args.solver, tol=args.tol, max_iter=args.max_iter, scaling=None)  # the paper's protocol
    path_param = None if args.cold else "alpha_nuclear"
    config = {
        "tol": args.tol,
        "max_iter": args.max_iter,
        "solver": args.solver,
        "seed": args.seed,
        "train_fraction": args.train_fraction,
        "cold": args.cold,
        "grid": grid,
    }
    state = load_checkpoint(args.checkpoint, config)
    with local_cluster(2, 1) as cluster, Client(cluster) as client:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the count is printed below
            if args.checkpoint is None:
                res = grid_search_cv(
                    est,
                    X_tr,
                    Y_tr,
                    grid,
                    cv=5,
                    seed=args.seed,
                    client=client,
                    path_param=path_param,
                    verbose=25,
                    scoring="paper_mean",
                )
            else:
                # One alpha value (49 points) at a time, each saved when done: a killed run resumes
                # where it stopped. Units are independent, so the records equal one whole-grid call's.
                for value in grid["alpha"]:
                    if repr(value) in state["slices"]:
                        continue
                    part = grid_search_cv(
                        est,
                        X_tr,
                        Y_tr,
                        {**grid, "alpha": [value]},
                        cv=5,
                        seed=args.seed,
                        client=client,
                        path_param=path_param,
                        refit=False,
                        verbose=49,
                        scoring="paper_mean",
                    )
                    state["slices"][repr(value)] = {
                        "results": part.results,
                        "seconds": part.seconds,
                        "n_warm_fits": part.n_warm_fits,
                        "n_warm_first_test_stops": part.n_warm_first_test_stops,
                    }
                    save_checkpoint(args.checkpoint, state)
                    print(f"  alpha={value:g} done in {part.seconds:.1f} s (saved to {args.checkpoint})", flush=True)
                res = combine_slices(state, grid, est, X_tr, Y_tr)
        elapsed = time.perf_counter() - t

    capped = sum(r["mean_n_iter"] >= args.max_iter for r in res.results)
    if args.checkpoint is None:
        print(f"elapsed: {elapsed:.1f} s total ({res.seconds:.1f} s CV + {res.refit_seconds:.1f} s refit)")
    else:
        print(
            f"elapsed: {res.seconds:.1f} s CV (sum over the {len(grid['alpha'])} alpha slices, "
            f"{state['runs']} process run(s); this run {elapsed:.1f} s) + {res.refit_seconds:.1f} s refit"
        )
    print(
        f"fits: {res.n_fits} CV fits, {res.n_fits / res.seconds:.2f} fits/s "
        f"({2 * res.seconds / res.n_fits:.2f} worker-seconds per fit on 2 workers)"
    )
    print(
        f"mean solver iterations per fit: {np.mean([r['mean_n_iter'] for r in res.results]):.1f}; "
        f"grid points whose every fold hit max_iter: {capped} of {len(res.results)}"
    )
    if not args.cold:
        # The solver's relative-objective-change test can pass at its first chance
        # (2 iterations) after a warm start without being near the optimum.
        print(
            f"warm-started fits that stopped at the first stopping test (2 iterations): "
            f"{res.n_warm_first_test_stops} of {res.n_warm_fits}"
        )
    print(f"best params: {res.best_params}")
    print(f"best {res.scoring}: {res.best_score:.5f} (std over folds {res.results[res.best_index]['std_score']:.5f})")
    print(f"load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("top 5:")
    print(res.table(5))


def load_checkpoint(path, config) -> dict:
    """Saved slices of an interrupted run with the same settings (else a fresh state)."""
    state = {"config": config, "slices": {}, "runs": 1}
    if path is not None and os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if saved.get("config") != json.loads(json.dumps(config)):
            sys.exit(
                f"{path} holds a run with other settings: {saved.get('config')}; remove it or choose "
                f"another --checkpoint"
            )
        state["slices"], state["runs"] = saved["slices"], saved.get("runs", 1) + 1
        print(f"resuming from {path}: alpha slices done: {sorted(state['slices'], key=float)}", flush=True)
    return state


def save_checkpoint(path, state) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)  # atomic: a kill mid-write leaves the previous checkpoint


def combine_slices(state, grid, est, X, Y) -> GridSearchResult:
    """The whole-grid result from the alpha slices (grid order is alpha-major), refit included."""
    records = [rec for value in grid["alpha"] for rec in state["slices"][repr(value)]["results"]]
    slices = state["slices"].values()
    best_index = max(range(len(records)), key=lambda i: (records[i]["mean_score"], -i))  # paper_mean: max
    best_params = dict(records[best_index]["params"])
    t = time.perf_counter()
    best = RBRL(**{**est.get_params(), **best_params}).fit(X, Y)
    return GridSearchResult(
        results=records,
        best_params=best_params,
        best_score=records[best_index]["mean_score"],
        best_index=best_index,
        best_estimator=best,
        scoring="paper_mean",
        greater_is_better=True,
        n_splits=5,
        n_fits=5 * len(records),
        seconds=sum(sl["seconds"] for sl in slices),
        refit_seconds=time.perf_counter() - t,
        n_warm_fits=sum(sl["n_warm_fits"] for sl in slices),
        n_warm_first_test_stops=sum(sl["n_warm_first_test_stops"] for sl in slices),
    )


if __name__ == "__main__":
    main()
