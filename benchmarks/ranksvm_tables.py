"""Reproduce Park & Choi 2013 (seed 000): Table 2 (AUC of batch / SGD / MMP / ANSGD Rank-SVM),
Fig. 1 (test regularized hinge ranking loss vs t, ANSGD vs SGD) and the ANSGD per-update cost.

Protocol (paper Sec. 5, what this script does):

* The paper's regularization constant lambda is ``RankSVM``'s ``alpha``; the online solvers'
  ``--iters`` updates are ``RankSVM``'s and ``MMP``'s ``n_updates``, the batch method's
  L-BFGS iterations ``RankSVM(solver="lbfgs")``'s ``max_iter``.
* Table 2: random 5-fold CV (seeded permutation of all rows of the set, train + test files
  together). In each fold, lambda is chosen from ``--lambdas`` (default {1e-6, ..., 1e0}) by
  the ranking loss (dmlr.metrics ``ranking_loss``) on a random validation part
  (``--val-frac``, default 20%) of the training part, fitting on the other 80% with the batch
  method (``RankSVM(solver="lbfgs")``, at most ``--select-iter`` L-BFGS iterations; the paper:
  "chosen ... by minimizing the ranking loss on the randomly selected validation set ... This
  estimated regularization constant was used for SGD and our method"). Then batch
  (``RankSVM(solver="lbfgs")``, ``--batch-iter`` iterations), SGD, MMP and ANSGD
  (``--iters`` = 7 x 10^4 uniform random draws, averaged solution M_hat) are trained on the
  whole training part and scored on the test fold. ``--select-once`` picks lambda on fold 0
  only and reuses it; ``--run-folds k`` runs only the first k of the ``--folds`` folds (the
  partition, hence the 80/20 train/test ratio, stays that of 5-fold CV).
* AUC: the paper computes, per test instance, the ROC curve of its K label scores and averages
  over the test instances ("1 - ranking loss = AUC"), i.e. the instance AUC =
  ``dmlr.metrics`` ``auc_instance`` (ties count 1/2; rows without a relevant or without an
  irrelevant label excluded). That is the main table; the macro label AUC (``auc_macro``) is
  printed after it for reference only.
* Fig. 1: fold 0 of the same CV, lambda chosen as above for fold 0 (or ``--fig1-lam``);
  ANSGD and SGD from the same M_0 and instance stream; every ``--record-every`` updates the
  test objective lambda/2 ||M||_F^2 + 1/|T| sum_i R_i(M) (eq. 6, unsmoothed) of the iterate M_t
  (the paper's formula) and of the average M_hat. PNG in benchmarks/out/ranksvm_fig1.png (both
  sets; ranksvm_fig1_<set>.png when one set is plotted). Curves are cached in ``--workdir``, so
  ``--fig1`` after runs that computed them only re-plots.
* Speed: ANSGD (and SGD, MMP) for ``--iters`` updates on mediamill_discretized (the library's
  ``run_online`` loop on a prepared block, and ``RankSVM.fit`` end to end) against the floor:
  ``--iters`` x (one score evaluation x @ M and one rank-1 update M += outer(x, c)), timed in
  numpy and in a Numba loop, plus the O(K log K) oracle alone; ratio = solver / floor.

Features are used as stored (no scaling); the bias is the appended constant feature.

Commands (what was run for the report, on 2 cores; the sections can run alone; the data are
converted / generated once into ``--workdir``)::

    export OMP_NUM_THREADS=1
    python benchmarks/ranksvm_tables.py --speed --speed-reps 2
    python benchmarks/ranksvm_tables.py --table2 --fig1 --fig1-sets corel5k \
        --sets corel5k,rcv1subset1_top944,tmc2007_500                          # 5 folds each
    python benchmarks/ranksvm_tables.py --table2 --fig1 --fig1-sets mediamill_discretized \
        --sets mediamill_discretized --run-folds 2 --select-once            # (in parallel with the above)
    python benchmarks/ranksvm_tables.py --table2 --sets bibtex --run-folds 2        # then, after it:
    python benchmarks/ranksvm_tables.py --table2 --sets bookmarks_synthetic --run-folds 1 \
        --select-iter 50 --batch-iter 200
    python benchmarks/ranksvm_tables.py --fig1         # re-plots both Fig. 1 panels from the cache
    python benchmarks/ranksvm_tables.py --table2 --cached-only --select-once mediamill_discretized \
        --sets corel5k,rcv1subset1_top944,bibtex,tmc2007_500,mediamill_discretized   # one table
    # not run (time): rcv1subset1 (full 47,236 features; before the lazy online updates,
    # online 15-55 min per method and fold)

Staged data vs the paper's (Table 1 of the paper; ../shared/datasets/MANIFEST.md):

* corel5k: MULAN Corel5k, 5000 x 499, 374 labels -- the paper's set.
* bibtex: MULAN bibtex, 7395 x 1836, 159 labels -- the paper's set.
* rcv1subset1: RCV1-v2 subset 1, 6000 x 47,236 tf-idf, 101 labels -- the paper's "rcv1v2"
  shape. When the tables were run, the online steps cost O(D K) per update (dense M updates),
  7e4 updates 15-55 min per method and fold, so ``rcv1subset1_top944`` (the same rows and
  labels, 944 binary top words) stood in for it; it is NOT the paper's input. The online
  updates are now lazy, O(nnz(x) K) (``benchmarks/online_lazy.py``), which makes the online
  columns on rcv1subset1 affordable; the batch column (L-BFGS on 47,237 x 101 weights) was
  not re-timed.
* tmc2007_500: 28,596 x 500 binary (the standard 500-feature version); the paper's tmc2007
  has 49,060 features (not staged), so the inputs differ.
* mediamill_discretized: 43,851 x 120, every feature discretised to {0, 1, 2}, ~56 rows of
  the real 43,907 missing; the paper used the real-valued Mediamill. Labels are the real ones,
  the features are not: accuracy numbers are not directly comparable.
* bookmarks_synthetic: ``dmlr.datasets.make_multilabel(preset="bookmarks")`` -- Bookmarks'
  shape only (87,856 x 2,150 sparse binary, 208 labels, cardinality 2.028), synthetic labels
  from a rank-10 latent model: its AUC says nothing about the real Bookmarks.

Usage: python benchmarks/ranksvm_tables.py [--table2] [--fig1] [--speed] [--sets a,b]
       [--folds 5] [--run-folds k] [--iters 70000] [--lambdas 1e-6,...,1e0] [--jobs 2] ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import lru_cache
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from _common import Table, arrays, seconds_of, timed

OUT = Path(__file__).resolve().parent / "out"
DEFAULT_WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "dmlr-ranksvm-tables"

PAPER_LAMBDAS = [10.0**e for e in range(-6, 1)]
METHODS = ("batch", "sgd", "mmp", "ansgd")
METHOD_TITLES = {"batch": "Batch", "sgd": "SGD", "mmp": "MMP", "ansgd": "ANSGD (ours)"}

#: Park & Choi 2013, Table 2: AUC mean (std) over the 5 folds; columns Batch, SGD, MMP, Our method.
PAPER_TABLE2 = {
    "corel5K": {"batch": (0.895, 0.002), "sgd": (0.885, 0.003), "mmp": (0.843, 0.007), "ansgd": (0.887, 0.003)},
    "rcv1v2": {"batch": (0.969, 0.001), "sgd": (0.963, 0.001), "mmp": (0.964, 0.002), "ansgd": (0.964, 0.001)},
    "bibtex": {"batch": (0.946, 0.001), "sgd": (0.935, 0.003), "mmp": (0.935, 0.002), "ansgd": (0.945, 0.001)},
    "tmc2007": {"batch": (0.958, 0.001), "sgd": (0.954, 0.002), "mmp": (0.956, 0.001), "ansgd": (0.957, 0.002)},
    "mediamill": {"batch": (0.953, 0.001), "sgd": (0.945, 0.001), "mmp": (0.948, 0.001), "ansgd": (0.946, 0.001)},
    "bookmark": {"batch": (0.922, 0.001), "sgd": (0.905, 0.002), "mmp": (0.906, 0.002), "ansgd": (0.913, 0.001)},
}
#: Our set -> (the paper's row, what differs).
PAPER_ROW = {
    "corel5k": ("corel5K", "same set"),
    "rcv1subset1": ("rcv1v2", "same shape (47,236 tf-idf)"),
    "rcv1subset1_top944": ("rcv1v2", "944 binary top words, not the paper's 47,236 tf-idf"),
    "bibtex": ("bibtex", "same set"),
    "tmc2007_500": ("tmc2007", "500 features, paper 49,060"),
    "mediamill_discretized": ("mediamill", "features discretised to {0,1,2}, 43,851 rows"),
    "mediamill_subset2000": ("mediamill", "2000-row subset of real features"),
    "bookmarks_synthetic": ("bookmark", "synthetic, Bookmarks' shape only"),
}
DEFAULT_SETS = "corel5k,rcv1subset1,bibtex,tmc2007_500,mediamill_discretized,bookmarks_synthetic"
FIG1_SETS = ("corel5k", "mediamill_discretized")


# -- data -----------------------------------------------------------------------------
def prepare(name: str, workdir: Path) -> Path:
    """The Zarr store of ``name`` (converted / generated once into ``workdir``)."""
    from dmlr.datasets import staged_store, synthetic_store

    workdir.mkdir(parents=True, exist_ok=True)
    if name == "bookmarks_synthetic":
        return synthetic_store("bookmarks", workdir)
    return staged_store(name, workdir)


@lru_cache(maxsize=4)
def load(name: str, workdir: str):
    """All rows (train + test files together) as float64 numpy / CSR and int8 labels."""
    return arrays(prepare(name, Path(workdir)))


def fold_indices(n: int, n_folds: int, fold: int, seed: int):
    """(train, test) rows of ``fold`` of a seeded random ``n_folds``-fold partition."""
    perm = np.random.default_rng(np.random.SeedSequence([seed, 7])).permutation(n)
    parts = np.array_split(perm, n_folds)
    test = np.sort(parts[fold])
    train = np.sort(np.concatenate([p for j, p in enumerate(parts) if j != fold]))
    return train, test


def ranking_metrics(Y, S) -> dict:
    from dmlr.metrics import multilabel_metrics, predict_from_scores

    return multilabel_metrics(Y, S, predict_from_scores(S), metrics=["auc_instance", "auc_macro", "ranking_loss"])


# -- lambda selection ------------------------------------------------------------------
def _select_key(name, fold, a) -> str:
    key = json.dumps(
        [name, fold, a["folds"], a["seed"], a["val_frac"], a["lambdas"], a["select_with"], a["select_iter"], a["iters"]]
    )
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def select_lambda(name: str, fold: int, a: dict):
    """(lambda, {lambda: validation ranking loss}, seconds); cached in the work dir."""
    cache = Path(a["workdir"]) / f"select-{name}-{fold}-{_select_key(name, fold, a)}.json"
    if cache.exists():
        d = json.loads(cache.read_text())
        return d["lam"], {float(k): v for k, v in d["losses"].items()}, 0.0
    from dmlr.models import RankSVM

    t0 = time.perf_counter()
    X, Y = load(name, a["workdir"])
    train, _ = fold_indices(Y.shape[0], a["folds"], fold, a["seed"])
    rng = np.random.default_rng(np.random.SeedSequence([a["seed"], 11, fold]))
    perm = rng.permutation(train)
    n_val = round(a["val_frac"] * len(perm))
    val, fit = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    losses = {}
    for lam in a["lambdas"]:
        if a["select_with"] == "lbfgs":
            est = RankSVM(alpha=lam, solver="lbfgs", max_iter=a["select_iter"], random_state=fold)
        else:
            est = RankSVM(alpha=lam, solver=a["select_with"], n_updates=a["iters"], random_state=fold)
        est.fit(X[fit], Y[fit])
        losses[lam] = ranking_metrics(Y[val], est.decision_function(X[val]))["ranking_loss"]
    lam = min(losses, key=lambda k: (losses[k], -k))  # ties: the larger lambda
    cache.write_text(json.dumps({"lam": lam, "losses": {repr(k): v for k, v in losses.items()}}))
    return lam, losses, time.perf_counter() - t0


# -- Table 2 ---------------------------------------------------------------------------
def table2_fold(name: str, fold: int, a: dict) -> dict:
    """Select lambda, fit the four methods on the training part, score the test fold."""
    from dmlr.models import MMP, RankSVM

    once = a["select_once"]
    sel_fold = 0 if (once == "all" or name in once.split(",")) else fold
    key = hashlib.sha1(json.dumps([_select_key(name, sel_fold, a), fold, a["batch_iter"], a["methods"]]).encode())
    cache = Path(a["workdir"]) / f"table2-{name}-{fold}-{key.hexdigest()[:16]}.json"
    if cache.exists():  # a fold finished by an earlier run with the same settings
        out = json.loads(cache.read_text())
        out["val_losses"] = {float(k): v for k, v in out["val_losses"].items()}
        return out
    if a.get("cached_only"):
        return None
    t0 = time.perf_counter()
    X, Y = load(name, a["workdir"])
    train, test = fold_indices(Y.shape[0], a["folds"], fold, a["seed"])
    lam, losses, sel_secs = select_lambda(name, sel_fold, a)
    Xtr, Ytr, Xte, Yte = X[train], Y[train], X[test], Y[test]
    out = {
        "name": name,
        "fold": fold,
        "lam": lam,
        "val_losses": losses,
        "select_seconds": sel_secs,
        "auc": {},
        "auc_macro": {},
        "seconds": {},
    }
    for method in a["methods"]:
        if method == "batch":
            est = RankSVM(alpha=lam, solver="lbfgs", max_iter=a["batch_iter"], random_state=fold)
        elif method == "mmp":
            est = MMP(n_updates=a["iters"], random_state=fold)
        else:
            est = RankSVM(alpha=lam, solver=method, n_updates=a["iters"], random_state=fold)
        _, out["seconds"][method] = timed(est.fit, Xtr, Ytr)
        m = ranking_metrics(Yte, est.decision_function(Xte))
        out["auc"][method] = m["auc_instance"]
        out["auc_macro"][method] = m["auc_macro"]
    out["wall"] = time.perf_counter() - t0
    cache.write_text(json.dumps(dict(out, val_losses={repr(k): v for k, v in losses.items()})))
    return out


def cell(vals) -> str:
    v = np.array([x for x in vals if x is not None], dtype=float)
    if v.size == 0:
        return "-"
    return f"{v.mean():.3f}±{v.std():.3f}" if v.size > 1 else f"{v[0]:.3f}"


def print_table2(results: dict, a: dict) -> None:
    names = [n for n in a["sets"] if results.get(n)]
    if not names:
        return
    print(
        "\n### Table 2 -- instance AUC (dmlr.metrics auc_instance = the paper's sample-averaged ROC AUC), "
        "ours (mean±std over the folds run) vs paper Table 2 mean(std)\n"
    )
    head = (
        "| data set (paper row) | folds | "
        + " | ".join(f"{METHOD_TITLES[m]} ours | paper" for m in a["methods"])
        + " |"
    )
    print(head)
    print("|" + "---|" * (2 + 2 * len(a["methods"])))
    for n in names:
        rs = results[n]
        prow, diff = PAPER_ROW.get(n, (None, "not in the paper"))
        paper = PAPER_TABLE2.get(prow, {})
        cells = []
        for m in a["methods"]:
            p = paper.get(m)
            cells += [cell([r["auc"][m] for r in rs]), f"{p[0]:.3f}({p[1]:.3f})" if p else "-"]
        print(f"| {n} ({prow}; {diff}) | {len(rs)}/{a['folds']} | " + " | ".join(cells) + " |")
    print("\nMacro label AUC (auc_macro; for reference, not what the paper reports):\n")
    print("| data set | " + " | ".join(METHOD_TITLES[m] for m in a["methods"]) + " |")
    print("|" + "---|" * (1 + len(a["methods"])))
    for n in names:
        print(f"| {n} | " + " | ".join(cell([r["auc_macro"][m] for r in results[n]]) for m in a["methods"]) + " |")
    print("\nChosen lambda per fold, mean fit seconds per method, wall seconds per fold:\n")
    print(
        "| data set | lambda per fold | "
        + " | ".join(f"{METHOD_TITLES[m]} s" for m in a["methods"])
        + " | selection s | fold wall s |"
    )
    print("|" + "---|" * (4 + len(a["methods"])))
    for n in names:
        rs = sorted(results[n], key=lambda r: r["fold"])
        lams = ", ".join(f"{r['lam']:g}" for r in rs)
        secs = " | ".join(f"{np.mean([r['seconds'][m] for r in rs]):.1f}" for m in a["methods"])
        print(
            f"| {n} | {lams} | {secs} | {np.mean([r['select_seconds'] for r in rs]):.1f} | "
            f"{np.mean([r['wall'] for r in rs]):.1f} |"
        )
    sys.stdout.flush()


# -- Fig. 1 ----------------------------------------------------------------------------
def fig1_curve(name: str, solver: str, a: dict) -> dict:
    """Test objective of M_t and M_hat every ``record_every`` updates, fold 0."""
    from dmlr.data.blocks import make_block
    from dmlr.objectives import ranksvm as objective
    from dmlr.solvers import sgd as solvers

    key = hashlib.sha1(json.dumps([_select_key(name, 0, a), a["fig1_lam"], a["record_every"]]).encode())
    cache = Path(a["workdir"]) / f"fig1-{name}-{solver}-{key.hexdigest()[:16]}.json"
    if cache.exists():  # a curve computed by an earlier run with the same settings
        return json.loads(cache.read_text())
    t0 = time.perf_counter()
    X, Y = load(name, a["workdir"])
    train, test = fold_indices(Y.shape[0], a["folds"], 0, a["seed"])
    lam = a["fig1_lam"] if a["fig1_lam"] is not None else select_lambda(name, 0, a)[0]
    tr = make_block(X[train], Y[train], True)
    te = make_block(X[test], Y[test], True)
    state = solvers.init_state(tr.X.shape[1:] + (tr.Y.shape[1],), 0, solver)
    order = solvers.instance_order(tr.n_rows, a["iters"], 0, "uniform")
    ts, f_iter, f_avg = [0], [objective.objective(te, state.M, lam)], [objective.objective(te, state.M_avg, lam)]

    def record(_):
        ts.append(int(state.t))
        f_iter.append(objective.objective(te, state.M, lam))
        f_avg.append(objective.objective(te, state.M_avg, lam))
        return f_iter[-1]

    step_kw = {"L": 1.0} if solver == "ansgd" else {"omega": solvers.SGD_OMEGA}
    solvers.run_online(
        solver, state, tr.X, tr.Y, order, lam=lam, objective=record, record_every=a["record_every"], **step_kw
    )
    out = {
        "name": name,
        "solver": solver,
        "lam": lam,
        "n_train": tr.n_rows,
        "n_test": te.n_rows,
        "t": ts,
        "iterate": f_iter,
        "average": f_avg,
        "wall": time.perf_counter() - t0,
    }
    cache.write_text(json.dumps(out))
    return out


def report_fig1(curves: list, a: dict) -> None:
    by = {}
    for c in curves:
        by.setdefault(c["name"], {})[c["solver"]] = c
    print(
        "\n### Fig. 1 -- test regularized hinge ranking loss lambda/2||M||^2 + mean_test R_i(M) vs t "
        "(fold 0; M_t = iterate as in the paper's caption, M_hat = running average)\n"
    )
    for name, d in by.items():
        if not {"ansgd", "sgd"} <= set(d):
            continue
        an, sg = d["ansgd"], d["sgd"]
        print(
            f"{name}: lambda = {an['lam']:g}, fold 0: {an['n_train']} training / {an['n_test']} test rows, "
            f"record every {a['record_every']}; "
            f"wall ANSGD {an['wall']:.0f} s, SGD {sg['wall']:.0f} s (including the recording passes)\n"
        )
        Table("t; ANSGD F(M_t); SGD F(M_t); ANSGD F(M_hat); SGD F(M_hat)", markdown=True).print_header()
        T = an["t"]
        want = sorted({0, 1000, 2000, 5000, 10000, 20000, 30000, 50000, a["iters"]})
        for t in want:
            if t in T:
                i = T.index(t)
                print(
                    f"| {t} | {an['iterate'][i]:.4f} | {sg['iterate'][i]:.4f} | {an['average'][i]:.4f} | "
                    f"{sg['average'][i]:.4f} |"
                )
        print()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: Fig. 1 PNG skipped (pip install matplotlib)")
        return
    names = [n for n in by if {"ansgd", "sgd"} <= set(by[n])]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        for solver, color in (("ansgd", "C0"), ("sgd", "C3")):
            c = by[name][solver]
            lab = "ANSGD (ours)" if solver == "ansgd" else "SGD"
            ax.plot(c["t"], c["iterate"], color=color, label=f"{lab}, $M_t$")
            ax.plot(c["t"], c["average"], color=color, ls="--", label=f"{lab}, $\\hat M_t$")
        ax.set_yscale("log")
        ax.set_xlabel("t (updates)")
        ax.set_ylabel("test regularized hinge ranking loss")
        ax.set_title(f"{name} ($\\lambda$={by[name]['ansgd']['lam']:g})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    OUT.mkdir(exist_ok=True)
    path = OUT / ("ranksvm_fig1.png" if len(names) > 1 else f"ranksvm_fig1_{names[0]}.png")
    fig.savefig(path, dpi=110)
    print(f"Fig. 1 saved to {path}")


# -- speed -----------------------------------------------------------------------------
def _numba_floor():
    from numba import njit

    @njit(cache=False)
    def floor_loop(X, order, M, c):
        d, K = M.shape
        s = np.empty(K)
        acc = 0.0
        for i in order:
            for k in range(K):
                s[k] = 0.0
            for j in range(d):
                xj = X[i, j]
                for k in range(K):
                    s[k] += xj * M[j, k]
            acc += s[0]
            for j in range(d):
                xj = X[i, j]
                for k in range(K):
                    M[j, k] += xj * c[k]
        return acc

    return floor_loop


def speed(a: dict) -> None:
    from dmlr.data.blocks import make_block
    from dmlr.models import MMP, RankSVM
    from dmlr.solvers import sgd as solvers

    name = a["speed_set"]
    X, Y = load(name, a["workdir"])
    blk = make_block(X, Y, True)
    if sp.issparse(blk.X):
        raise SystemExit("--speed expects a dense set (mediamill_discretized)")
    Xb, Yb = blk.X, blk.Y
    n, d = Xb.shape
    K = Yb.shape[1]
    T = a["iters"]
    order = solvers.instance_order(n, T, 0, "uniform")
    lam = a["speed_lam"]
    print(
        f"\n### Speed -- {T} updates on {name} (n={n}, D+1={d}, K={K}), lambda={lam:g}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}\n"
    )

    def best(fn, reps=a["speed_reps"]):
        return min(seconds_of(fn, reps))

    # floor (numpy): one score evaluation and one rank-1 update per row
    c = np.full(K, 1e-9)
    M = np.zeros((d, K))

    def floor_numpy():
        for i in order:
            x = Xb[i]
            s = x @ M  # noqa: F841
            M.__iadd__(np.outer(x, c))

    floor_np = best(floor_numpy)
    fl = _numba_floor()
    fl(Xb, order[:10], np.zeros((d, K)), c)
    floor_nb = best(lambda: fl(Xb, order, np.zeros((d, K)), c))
    # the O(K log K) oracle alone (scores precomputed outside the timing)
    orc = solvers.RankSVMOracle(K)
    S = Xb[order[:2000]] @ solvers.init_weights((d, K), 0)
    orc(S[0], Yb[order[0]], 0.5)

    def oracle_only():
        for j, i in enumerate(order):
            orc(S[j % 2000], Yb[i], 2.0 / (j + 2.0))

    t_oracle = best(oracle_only)
    rows = [
        ("floor: numpy x @ M + M += outer(x, c)", floor_np),
        ("floor: Numba loop (same work, no allocation)", floor_nb),
        ("ranksvm_row oracle alone (K log K part)", t_oracle),
    ]
    for solver in ("ansgd", "sgd", "mmp"):

        def run(solver=solver):
            st = solvers.init_state((d, K), 0, solver)
            kw = {"L": 1.0} if solver == "ansgd" else ({"omega": solvers.SGD_OMEGA} if solver == "sgd" else {})
            solvers.run_online(solver, st, Xb, Yb, order, lam=lam, **kw)

        rows.append((f"{solver.upper()} run_online loop", best(run)))
    est = RankSVM(alpha=lam, solver="ansgd", n_updates=T, random_state=0)
    t_fit = best(lambda: est.fit(X, Y), reps=1)
    rows.append(("ANSGD RankSVM.fit end to end (incl. block copy)", t_fit))
    mmp = MMP(n_updates=T, random_state=0)
    rows.append(("MMP.fit end to end", best(lambda: mmp.fit(X, Y), reps=1)))
    rows.append(("floor incl. oracle: Numba loop + ranksvm_row", floor_nb + t_oracle))
    Table("what; seconds; us / update; x numpy floor; x Numba floor", markdown=True).print_header()
    for label, secs in rows:
        print(f"| {label} | {secs:.3f} | {secs / T * 1e6:.1f} | {secs / floor_np:.1f} | {secs / floor_nb:.1f} |")
    ans = dict(rows)["ANSGD run_online loop"]
    print(
        f"\n(best of {a['speed_reps']} repeats, fits: 1 run; the two floors do not include the oracle, whose "
        f"K log K cost is its own row.) ANSGD / (Numba floor + oracle) = "
        f"{ans / (floor_nb + t_oracle):.1f}; ANSGD / numpy floor = {ans / floor_np:.1f}."
    )
    sys.stdout.flush()


# -- main ------------------------------------------------------------------------------
def parse_lambdas(s: str) -> list:
    return [float(v) for v in s.split(",") if v.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table2", action="store_true", help="Table 2 (AUC, 4 methods, CV)")
    ap.add_argument("--fig1", action="store_true", help="Fig. 1 curves (corel5k, mediamill_discretized)")
    ap.add_argument("--speed", action="store_true", help="ANSGD cost vs the per-update floor")
    ap.add_argument("--sets", default=DEFAULT_SETS, help="Table 2 sets, comma separated")
    ap.add_argument("--fig1-sets", default=",".join(FIG1_SETS))
    ap.add_argument("--folds", type=int, default=5, help="folds of the random CV partition")
    ap.add_argument("--run-folds", type=int, default=None, help="run only the first k folds")
    ap.add_argument(
        "--iters", type=int, default=70_000, help="online updates, RankSVM's and MMP's n_updates (paper: 7e4)"
    )
    ap.add_argument(
        "--lambdas",
        default=",".join(f"{v:g}" for v in PAPER_LAMBDAS),
        help="candidate RankSVM alpha values (the paper's lambda)",
    )
    ap.add_argument("--val-frac", type=float, default=0.2)
    ap.add_argument(
        "--select-with",
        choices=("lbfgs", "ansgd", "sgd"),
        default="lbfgs",
        help="solver of the lambda selection (paper: the batch method)",
    )
    ap.add_argument("--select-iter", type=int, default=300, help="L-BFGS iterations (max_iter) per selection fit")
    ap.add_argument(
        "--select-once",
        nargs="?",
        const="all",
        default="",
        help="select lambda on fold 0 only and reuse it (all sets, or the comma-separated sets given)",
    )
    ap.add_argument("--batch-iter", type=int, default=1000, help="L-BFGS iterations (max_iter) of the batch method")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--record-every", type=int, default=1000)
    ap.add_argument("--fig1-lam", type=float, default=None, help="fixed lambda (alpha) for Fig. 1 (default: selected)")
    ap.add_argument("--speed-set", default="mediamill_discretized")
    ap.add_argument("--speed-lam", type=float, default=1e-4, help="lambda (alpha) of the speed section")
    ap.add_argument("--speed-reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (folds / curves in parallel)")
    ap.add_argument(
        "--cached-only",
        action="store_true",
        help="Table 2: only print the folds finished by earlier runs (cached in --workdir)",
    )
    ap.add_argument("--workdir", default=str(DEFAULT_WORK), help="converted stores and the selection cache")
    args = ap.parse_args(argv)
    if not (args.table2 or args.fig1 or args.speed):
        ap.error("choose at least one of --table2, --fig1, --speed")
    a = {
        "sets": [s for s in args.sets.split(",") if s],
        "folds": args.folds,
        "iters": args.iters,
        "lambdas": parse_lambdas(args.lambdas),
        "val_frac": args.val_frac,
        "select_with": args.select_with,
        "select_iter": args.select_iter,
        "select_once": args.select_once,
        "batch_iter": args.batch_iter,
        "methods": [m for m in args.methods.split(",") if m],
        "record_every": args.record_every,
        "fig1_lam": args.fig1_lam,
        "speed_set": args.speed_set,
        "speed_lam": args.speed_lam,
        "speed_reps": args.speed_reps,
        "seed": args.seed,
        "workdir": args.workdir,
        "cached_only": args.cached_only,
    }
    run_folds = min(args.run_folds or args.folds, args.folds)
    print(f"# ranksvm_tables: {' '.join(sys.argv[1:])}")
    print(
        f"# folds {run_folds}/{args.folds}, iters {args.iters}, lambdas {a['lambdas']}, val {args.val_frac:.0%} "
        f"of the training part, selection by {args.select_with}"
        f"{f' ({args.select_iter} L-BFGS its)' if args.select_with == 'lbfgs' else ''}"
        f"{f', on fold 0 only ({args.select_once})' if args.select_once else ', per fold'}; "
        f"batch {args.batch_iter} L-BFGS its; "
        f"seed {args.seed}",
        flush=True,
    )
    t_start = time.perf_counter()
    if args.speed:
        prepare(args.speed_set, Path(args.workdir))
        speed(a)
    fig_sets = [s for s in args.fig1_sets.split(",") if s] if args.fig1 else []
    todo = list(dict.fromkeys((a["sets"] if args.table2 else []) + fig_sets))
    for name in todo:
        try:
            prepare(name, Path(args.workdir))
        except FileNotFoundError as e:
            print(f"skip {name}: {e}")
            a["sets"] = [s for s in a["sets"] if s != name]
            fig_sets = [s for s in fig_sets if s != name]
    tasks = []
    if args.table2:
        for name in a["sets"]:
            tasks += [("t2", name, f) for f in range(run_folds)]
            if name in fig_sets:  # after the set's folds: Fig. 1 reuses fold 0's cached selection
                tasks += [("fig", name, s) for s in ("ansgd", "sgd")]
    tasks += [("fig", n, s) for n in fig_sets for s in ("ansgd", "sgd") if ("fig", n, s) not in tasks]
    results, curves = {}, []
    remaining = {n: sum(1 for t in tasks if t[0] == "t2" and t[1] == n) for n in a["sets"]}

    def handle(task, res):
        if res is None:  # --cached-only and not cached
            remaining[task[1]] -= 1
            print(f"{task[1]} fold {task[2]}: not in the cache, skipped (--cached-only)")
            if remaining[task[1]] == 0 and results.get(task[1]):
                print_table2(results, dict(a, sets=[task[1]]))
            return
        if task[0] == "t2":
            results.setdefault(task[1], []).append(res)
            print(
                f"[{time.perf_counter() - t_start:6.0f} s] {task[1]} fold {task[2]}: lambda={res['lam']:g} "
                f"(val ranking loss {', '.join(f'{k:g}:{v:.4f}' for k, v in res['val_losses'].items())}) "
                + " ".join(f"{m}={res['auc'][m]:.4f} ({res['seconds'][m]:.0f}s)" for m in a["methods"])
                + f" wall {res['wall']:.0f} s",
                flush=True,
            )
            remaining[task[1]] -= 1
            if remaining[task[1]] == 0:
                a_one = dict(a, sets=[task[1]])
                print_table2(results, a_one)
        else:
            curves.append(res)
            print(
                f"[{time.perf_counter() - t_start:6.0f} s] Fig. 1 {task[1]} {task[2]}: lambda={res['lam']:g}, "
                f"final F(M_t)={res['iterate'][-1]:.4f}, F(M_hat)={res['average'][-1]:.4f}, "
                f"{res['wall']:.0f} s",
                flush=True,
            )

    if args.jobs > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            futs = {pool.submit(_run_task, t, a): t for t in tasks}
            for fu in as_completed(futs):
                handle(futs[fu], fu.result())
    else:
        for t in tasks:
            handle(t, _run_task(t, a))
    if args.table2 and len(results) > 1 or args.cached_only:
        print("\n## All sets")
        print_table2(results, a)
    if curves:
        report_fig1(curves, a)
    print(f"\n# total wall {time.perf_counter() - t_start:.0f} s")


def _run_task(task, a):
    return table2_fold(task[1], task[2], a) if task[0] == "t2" else fig1_curve(task[1], task[2], a)


if __name__ == "__main__":
    main()
