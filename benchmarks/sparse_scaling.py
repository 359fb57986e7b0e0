"""Which scaling should sparse features get by default? (issue 31, part 1)

For each sparse staged set with an official train/test split and each scaling option

* ``none``    features as stored;
* ``maxabs``  :class:`sklearn.preprocessing.MaxAbsScaler` (each column divided by its largest
  absolute training value; keeps sparsity, no centering);
* ``l2``      :class:`sklearn.preprocessing.Normalizer` ``(norm="l2")`` (each row to unit L2 norm);
* ``tfidf``   :class:`sklearn.feature_extraction.text.TfidfTransformer` ``()`` (columns weighted by
  smoothed inverse document frequency from the training rows, then rows to unit L2 norm),

the transformer is fitted on the training split only and applied to both splits (in memory, CSR),
then

* dmlr's linear :class:`~dmlr.models.RBRL` (``solver="spectral"``, ``tol=1e-4``,
  ``max_iter=500``) is tuned by :func:`dmlr.model_selection.grid_search_cv` (3-fold CV on the
  training split, ``scoring="ranking_loss"``, in-process, warm-started along ``alpha_nuclear``)
  over ``--alpha`` x ``--alpha-rank`` x ``--alpha-nuclear``, refitted on the whole training split
  and scored on the test split;
* as a reference, one-vs-rest logistic regression (scikit-learn, ``liblinear``) with ``C`` chosen
  by :class:`sklearn.model_selection.GridSearchCV` over ``--C`` on the *same* three folds and the
  same metric (:func:`dmlr.scoring.get_scorer`), refitted and scored the same way. Its labels are
  cast to int64: scikit-learn 1.9's ``OneVsRestClassifier`` permutes the columns of an int8 label
  matrix with more than 128 labels.

Test metrics come from :func:`dmlr.metrics.multilabel_metrics` (via :func:`dmlr.evaluate`):
ranking loss (lower is better), average precision and precision at 1 (higher is better). Seconds
are wall time of search + refit for that row (the scaler's fit is included; loading is not).

Sets too large for a 2-core budget may be capped with ``--max-train-rows``: a seeded uniform
subsample (``numpy.random.default_rng(seed)``) of the *training* split, the test split untouched;
the table says when a set was capped. A scaling whose transformed features are exactly those of
an earlier one (max-abs on 0/1 features is the identity) reuses that scaling's fits, marked so.

One table per set, then a summary: on how many sets each scaling wins for RBRL on test ranking
loss and on test average precision (ties are shared). Results per (set, scaling, model) are cached
as JSON in ``--workdir`` under a key of every option that changes them, so an interrupted run
resumes; ``--cached-only`` prints the tables from the cache.

Example::

    DMLR_DATA_DIR=/work/shared/datasets python benchmarks/sparse_scaling.py \\
        --sets enron,medical,bibtex,corel5k --max-train-rows 2000
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _common import arrays, parser, timed

DEFAULT_WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "dmlr-sparse-scaling"
DEFAULT_SETS = "enron,medical,bibtex,corel5k"
SCALINGS = ("none", "maxabs", "l2", "tfidf")
METRICS = ("ranking_loss", "average_precision", "precision_at_1")


def make_scaler(name: str):
    """A fresh, unfitted transformer for scaling ``name``; None for ``"none"``."""
    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.preprocessing import MaxAbsScaler, Normalizer

    factories = {
        "none": lambda: None,
        "maxabs": MaxAbsScaler,
        "l2": lambda: Normalizer(norm="l2"),
        "tfidf": TfidfTransformer,
    }
    if name not in factories:
        raise ValueError(f"unknown scaling {name!r}; choose from {list(factories)}")
    return factories[name]()


def load(name: str, workdir: Path, max_train_rows: int | None, seed: int):
    """Train and test splits of a staged sparse set: CSR float64 X, int8 Y.

    Returns ``(X_train, Y_train, X_test, Y_test, n_train_full)``. Raises ValueError when the set
    is dense or has no train/test split, FileNotFoundError when it is not staged.
    """
    import dmlr
    from dmlr.datasets import staged_store

    workdir.mkdir(parents=True, exist_ok=True)
    store = staged_store(name, workdir)
    ds = dmlr.open_dataset(store)
    if not ds.is_sparse:
        raise ValueError(f"{name} is stored dense")
    if not {"train", "test"} <= set(ds.splits):
        raise ValueError(f"{name} has no official train/test split (splits: {sorted(ds.splits)})")
    (Xtr, Ytr), (Xte, Yte) = arrays(store, "train"), arrays(store, "test")
    n_full = Xtr.shape[0]
    if max_train_rows is not None and n_full > max_train_rows:
        rows = np.sort(np.random.default_rng(seed).choice(n_full, size=max_train_rows, replace=False))
        Xtr, Ytr = Xtr[rows], Ytr[rows]
    return Xtr, Ytr, Xte, Yte, n_full


def scale(name: str, Xtr, Xte):
    """Fit scaling ``name`` on the training rows; return both splits transformed (CSR float64)."""
    import scipy.sparse as sp

    scaler = make_scaler(name)
    if scaler is None:
        return Xtr, Xte
    Xtr_s = scaler.fit_transform(Xtr)
    return sp.csr_matrix(Xtr_s, dtype=np.float64), sp.csr_matrix(scaler.transform(Xte), dtype=np.float64)


def run_rbrl(Xtr, Ytr, Xte, Yte, a) -> dict:
    """Grid-search RBRL by 3-fold CV on the training rows, refit, score on the test rows."""
    import dmlr
    from dmlr.model_selection import grid_search_cv
    from dmlr.models import RBRL

    grid = {"alpha": a.alpha, "alpha_rank": a.alpha_rank, "alpha_nuclear": a.alpha_nuclear}
    est = RBRL(solver="spectral", tol=1e-4, max_iter=a.max_iter, scaling=None)  # the scaling under test only
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        res = grid_search_cv(est, Xtr, Ytr, grid, cv=a.folds, scoring="ranking_loss", seed=a.seed, client="local")
    seconds = time.perf_counter() - t0
    test = dmlr.evaluate(res.best_estimator, (Xte, Yte), metrics=list(METRICS))
    best = res.best_params
    edges = sorted(k for k, v in grid.items() if len(v) > 1 and best[k] in (min(v), max(v)))
    return {
        **test,
        "seconds": seconds,
        "cv_ranking_loss": res.best_score,
        "best_params": best,
        "on_edge": edges,
        "refit_n_iter": int(res.best_estimator.n_iter_),
        "n_warm_first_test_stops": res.n_warm_first_test_stops,
        "n_warm_fits": res.n_warm_fits,
        "warnings": sorted({str(w.message)[:120] for w in caught}),
    }


def run_logreg(Xtr, Ytr, Xte, Yte, a) -> dict:
    """One-vs-rest liblinear logistic regression, C by GridSearchCV on the same folds and metric."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV
    from sklearn.multiclass import OneVsRestClassifier

    from dmlr.metrics import multilabel_metrics
    from dmlr.model_selection import kfold_indices
    from dmlr.scoring import get_scorer

    folds = kfold_indices(Xtr.shape[0], a.folds, a.seed)  # the folds grid_search_cv(cv=a.folds) uses
    Y64 = Ytr.astype(np.int64)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # labels absent from a fold: OneVsRest predicts a constant
        search = GridSearchCV(
            OneVsRestClassifier(LogisticRegression(solver="liblinear")),
            {"estimator__C": a.C},
            scoring=get_scorer("ranking_loss"),
            cv=folds,
            refit=True,
            n_jobs=1,
        ).fit(Xtr, Y64)
    seconds = time.perf_counter() - t0
    model = search.best_estimator_
    S = model.decision_function(Xte)
    test = multilabel_metrics(Yte, S, (S > 0).astype(np.int8), metrics=list(METRICS))
    C = search.best_params_["estimator__C"]
    return {
        **test,
        "seconds": seconds,
        "cv_ranking_loss": -float(search.best_score_),
        "best_params": {"C": C},
        "on_edge": ["C"] if len(a.C) > 1 and C in (min(a.C), max(a.C)) else [],
    }


def cache_key(name: str, scaling: str, model: str, a) -> str:
    """File name of one result: every option that changes it is in the hash."""
    opts = {"max_train_rows": a.max_train_rows, "seed": a.seed, "folds": a.folds}
    if model == "rbrl":
        opts.update(alpha=a.alpha, alpha_rank=a.alpha_rank, alpha_nuclear=a.alpha_nuclear, max_iter=a.max_iter)
    else:
        opts.update(C=a.C)
    digest = hashlib.sha256(json.dumps(opts, sort_keys=True).encode()).hexdigest()[:10]
    return f"{name}-{scaling}-{model}-{digest}.json"


def run_set(name: str, a) -> dict | None:
    """All (scaling, model) results of one set, computed or read from the cache; None if skipped."""
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    models = ("rbrl", "logreg")
    files = {(s, m): work / cache_key(name, s, m, a) for s in a.scalings for m in models}
    info_file = work / f"{name}-info-{a.max_train_rows}-{a.seed}.json"
    if a.cached_only:
        if not info_file.exists():
            return None
        return {
            "info": json.loads(info_file.read_text()),
            "rows": {k: json.loads(f.read_text()) for k, f in files.items() if f.exists()},
        }
    try:
        Xtr, Ytr, Xte, Yte, n_full = load(name, work, a.max_train_rows, a.seed)
    except (FileNotFoundError, ValueError) as e:
        print(f"skipping {name}: {e}", flush=True)
        return None
    binary = bool(np.all(Xtr.data == 1.0) and np.all(Xte.data == 1.0))
    info = {
        "n_train": Xtr.shape[0],
        "n_train_full": n_full,
        "n_test": Xte.shape[0],
        "d": Xtr.shape[1],
        "L": Ytr.shape[1],
        "density": Xtr.nnz / (Xtr.shape[0] * Xtr.shape[1]),
        "binary": binary,
        "value_range": [float(min(Xtr.data.min(), Xte.data.min())), float(max(Xtr.data.max(), Xte.data.max()))],
    }
    info_file.write_text(json.dumps(info))
    print(
        f"{name}: train {info['n_train']} (of {n_full}) x {info['d']}, test {info['n_test']}, "
        f"{info['L']} labels, density {info['density']:.4f}, binary features: {binary}",
        flush=True,
    )
    rows, scaled = {}, {}
    for s in a.scalings:
        Xtr_s = Xte_s = None
        for m in models:
            f = files[(s, m)]
            if f.exists():
                rows[(s, m)] = json.loads(f.read_text())
                continue
            if Xtr_s is None:
                (Xtr_s, Xte_s), scale_seconds = timed(scale, s, Xtr, Xte)
                # A scaling that leaves the features exactly as an earlier one did (max-abs on 0/1
                # features is the identity) gets that scaling's fits, marked, instead of refits.
                same = next((t for t, (A, B) in scaled.items() if _equal(A, Xtr_s) and _equal(B, Xte_s)), None)
                scaled[s] = (Xtr_s, Xte_s)
            if same is not None and (same, m) in rows:
                out = {**rows[(same, m)], "same_as": same}
            else:
                t0 = time.perf_counter()
                try:
                    out = (run_rbrl if m == "rbrl" else run_logreg)(Xtr_s, Ytr, Xte_s, Yte, a)
                    out["seconds"] += scale_seconds
                except (np.linalg.LinAlgError, FloatingPointError, ValueError) as e:
                    # A failed search is a result to report, not a reason to lose the other rows.
                    out = {"error": f"{type(e).__name__}: {e}", "seconds": time.perf_counter() - t0}
                    f.write_text(json.dumps(out))
                    rows[(s, m)] = out
                    print(f"  {name} {s:<6} {m:<6} FAILED after {out['seconds']:.1f} s: {out['error']}", flush=True)
                    continue
            f.write_text(json.dumps(out))
            rows[(s, m)] = out
            print(
                f"  {name} {s:<6} {m:<6} rl {out['ranking_loss']:.4f} ap {out['average_precision']:.4f} "
                f"p@1 {out['precision_at_1']:.4f} {out['seconds']:.1f} s {out['best_params']}",
                flush=True,
            )
    return {"info": info, "rows": rows}


def _ok(res: dict, a) -> dict:
    """RBRL rows of one set that finished: scaling -> result."""
    rows = res["rows"]
    return {s: rows[(s, "rbrl")] for s in a.scalings if (s, "rbrl") in rows and "error" not in rows[(s, "rbrl")]}


def _equal(A, B) -> bool:
    """Whether two CSR matrices hold exactly the same values."""
    return A.shape == B.shape and (A != B).nnz == 0


def _fmt_params(p: dict) -> str:
    short = {"alpha": "a", "alpha_rank": "ar", "alpha_nuclear": "an", "C": "C"}
    return " ".join(f"{short.get(k, k)}={v:g}" for k, v in p.items())


def table(name: str, result: dict, a) -> str:
    info, rows = result["info"], result["rows"]
    capped = info["n_train"] < info["n_train_full"]
    lo, hi = info["value_range"]
    title = (
        f"{name}: train {info['n_train']}"
        + (f" (seeded subsample of {info['n_train_full']}, seed {a.seed})" if capped else "")
        + f", test {info['n_test']}, d {info['d']}, L {info['L']}, density {info['density']:.4f}, "
        f"features {'binary' if info['binary'] else f'in [{lo:g}, {hi:g}]'}"
    )
    head = (
        f"{'model':<7} {'scaling':<7} {'test RL':>8} {'test AP':>8} {'test P@1':>8} {'cv RL':>8} "
        f"{'seconds':>8}  chosen (edge)"
    )
    lines = [title, head, "-" * len(head)]
    for m in ("rbrl", "logreg"):
        for s in a.scalings:
            r = rows.get((s, m))
            if r is None:
                lines.append(f"{m:<7} {s:<7} {'(not run)':>8}")
                continue
            if "error" in r:
                lines.append(f"{m:<7} {s:<7} FAILED after {r['seconds']:.1f} s: {r['error']}")
                continue
            edge = f" ({','.join(r['on_edge'])})" if r["on_edge"] else ""
            if "same_as" in r:
                edge += f" [features identical to {r['same_as']!r}: its fit, not refitted]"
            lines.append(
                f"{m:<7} {s:<7} {r['ranking_loss']:>8.4f} {r['average_precision']:>8.4f} "
                f"{r['precision_at_1']:>8.4f} {r['cv_ranking_loss']:>8.4f} {r['seconds']:>8.1f}  "
                f"{_fmt_params(r['best_params'])}{edge}"
            )
    return "\n".join(lines)


def summary(results: dict, a) -> str:
    """Wins per scaling for RBRL (test ranking loss, test AP, cv ranking loss); ties shared."""
    wins = {k: dict.fromkeys(a.scalings, 0) for k in ("ranking_loss", "average_precision", "cv_ranking_loss")}
    winners_by_set = []
    for name, res in results.items():
        got = _ok(res, a)
        if len(got) < 2:
            continue
        failed = sorted(set(a.scalings) - set(got))
        per = []
        for metric in wins:
            vals = {s: round(r[metric], 6) for s, r in got.items()}
            best = (max if metric == "average_precision" else min)(vals.values())
            w = [s for s, v in vals.items() if v == best]
            for s in w:
                wins[metric][s] += 1
            per.append("/".join(w))
        winners_by_set.append(
            f"  {name:<18} test RL: {per[0]:<14} test AP: {per[1]:<14} cv RL: {per[2]}"
            + (f"  (failed, not counted: {', '.join(failed)})" if failed else "")
        )
    n = len(winners_by_set)
    lines = [
        f"RBRL: sets won by each scaling ({n} sets; ties shared; a failed fit wins nothing)",
        f"{'scaling':<8} {'test RL':>8} {'test AP':>8} {'cv RL':>8}",
    ]
    for s in a.scalings:
        lines.append(
            f"{s:<8} {wins['ranking_loss'][s]:>8} {wins['average_precision'][s]:>8} {wins['cv_ranking_loss'][s]:>8}"
        )
    lines += ["winners per set:"] + winners_by_set
    # Mean relative gap of each scaling to the per-set best, a tie-free view of the same numbers.
    gaps = []
    for s in a.scalings:
        g_rl, g_ap = [], []
        for res in results.values():
            got = _ok(res, a)
            if s not in got or len(got) < 2:
                continue
            b_rl = min(r["ranking_loss"] for r in got.values())
            b_ap = max(r["average_precision"] for r in got.values())
            g_rl.append(got[s]["ranking_loss"] / b_rl - 1)
            g_ap.append(1 - got[s]["average_precision"] / b_ap)
        if g_rl:
            gaps.append(f"{s:<8} {100 * np.mean(g_rl):>12.1f}% {100 * np.mean(g_ap):>12.1f}%")
    lines += [f"{'scaling':<8} {'RL above best':>13} {'AP below best':>13}  (RBRL, mean relative gap over sets)"]
    lines += gaps
    return "\n".join(lines)


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",")]


def main(argv=None) -> int:
    p = parser(__doc__, sets=DEFAULT_SETS.split(","), workdir=str(DEFAULT_WORK))
    p.add_argument(
        "--max-train-rows",
        type=int,
        default=None,
        help="cap every training split at this many rows (seeded subsample); default: no cap",
    )
    p.add_argument("--scalings", default=",".join(SCALINGS), help="comma-separated subset of " + ",".join(SCALINGS))
    p.add_argument("--alpha", type=floats, default=[0.01, 0.1, 1.0, 10.0])
    p.add_argument("--alpha-rank", type=floats, default=[0.1])
    p.add_argument("--alpha-nuclear", type=floats, default=[0.01, 0.1, 1.0])
    p.add_argument("--C", type=floats, default=[0.01, 0.1, 1.0, 10.0, 100.0])
    p.add_argument("--max-iter", type=int, default=500)
    p.add_argument("--folds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cached-only", action="store_true", help="print the tables from the cache, fit nothing")
    a = p.parse_args(argv)
    a.scalings = [s.strip() for s in a.scalings.split(",") if s.strip()]
    for s in a.scalings:
        make_scaler(s)  # unknown names fail here, before any work
    t0 = time.perf_counter()
    results = {}
    for name in a.sets:
        res = run_set(name, a)
        if res is not None:
            results[name] = res
    grid = (
        f"RBRL grid alpha {a.alpha} x alpha_rank {a.alpha_rank} x alpha_nuclear {a.alpha_nuclear}, "
        f"solver='spectral', tol=1e-4, max_iter={a.max_iter}; logistic regression C {a.C}; "
        f"{a.folds}-fold CV on ranking loss, seed {a.seed}"
    )
    print("\n" + grid + "\n")
    for name, res in results.items():
        print(table(name, res, a) + "\n")
    if results:
        print(summary(results, a))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
