"""Reproduce Otálora-Montenegro et al. (seed 004), Table 2: micro F1 of Online Matrix
Factorization (OMF) on corel5k, scene, bibtex, medical and Mediamill, plus OMF's time per
epoch and per prediction at the Mediamill shape.

Protocol (what this script does):

* Random 5-fold CV over all rows of each set (train + test files together;
  :func:`dmlr.model_selection.kfold_indices`, seed ``--seed``), as the paper ("a random 5-fold
  cross validation schema", the protocol of its ref. [6]).
* The latent dimension s is the paper's for each set (in parentheses in its Table 2).
* In each outer fold, the paper's alpha, lambda, learning rate, xi and prediction rule
  (OMF's ``label_weight``, ``alpha``, ``eta0``, ``alpha_code`` and ``label_rule``: ``"top_k"``
  with k in 1..ceil(2 x cardinality), or ``"threshold"`` in 0.10..0.70 step 0.05) are chosen by
  :func:`dmlr.models.omf.cross_validate_omf` on the training part only (``--inner`` folds, or
  one 80/20 hold-out split with ``--inner 1``), maximising micro F1; the best setting is refitted
  on the whole training part and scored on the test fold. The paper gives no grid; ours is
  coarse (2 cores): label_weight in {0.1, 0.5}, alpha in {1e-4, 1e-2}, eta0 in {0.3, 3},
  alpha_code in {0.01, 1, 10}; ``--grid wide`` extends its edges (:data:`GRIDS`).
* Algorithm 1 with minibatches of ``--batch`` rows, ``--n-epochs`` epochs, step
  eta0 / (1 + eta0 lambda t), rows shuffled each epoch over the whole training part (the
  training part is in memory here, so the shuffle window covers it: the paper's sampling
  without replacement).
* Features as stored (no scaling), no intercept (the paper has none).
* Results per (set, fold) are cached as JSON in ``--workdir``; ``--cached-only`` prints the
  table from the cache.

Protocols (``--protocols``, after the folds above are cached): where our micro F1 stays below
the paper's, how far would other readings of its protocol go? On the same outer folds, with
the same grid:

* ``ours``: the table's number (every setting chosen by inner CV on the training part);
* ``rule on test``: the CV-chosen fit, with alpha_code and the label rule (top-k or threshold)
  chosen on the test fold itself ("a range of thresholds were evaluated according to the
  range of values of the reconstructed vector", the paper's section 4, read as a choice on the
  test rows);
* ``all on test``: every setting of the grid, fitted on the training part, chosen on the test
  fold (:func:`dmlr.models.omf.cross_validate_omf` with the test fold as its one split);
* ``top-|y|``: the CV-chosen fit, each test row given as many labels as it truly has (an
  oracle of the label count);
* ``5x epochs``: the CV-chosen settings fitted with five times the epochs;
* ``train rows``: the CV-chosen fit's micro F1 on its own training part;
* ``RBRL``, ``RBRL top-|y|``: ``dmlr.fit``'s defaults on the training part (a stronger ranker),
  its own labels and the oracle label count: what the features support.

Timing (``--speed``): one epoch of ``OMF.fit`` (in-process, execution setting
``backend="local"``; one BLAS thread, as in the
learning loop) and ``decision_function`` on mediamill_discretized (43,851 x 120, 101 labels,
s = ``n_components`` = 350), batch sizes 32 and 256.

Data vs the paper (../shared/datasets/MANIFEST.md): corel5k, scene, bibtex, medical are the
MULAN sets of the paper's Table 1 (corel5k has 499 features here, 500 in Table 1: the MULAN file
has one constant feature fewer). mediamill_discretized is NOT the paper's Mediamill: every one of
the 120 features is discretised into 3 bins ({0, 1, 2}), and 43,851 rows instead of 43,907; the
labels are the real ones. Its F1 is not directly comparable with the paper's 0.503.

Commands run for the report (2 shared cores)::

    nice -n 5 python benchmarks/omf_table.py --sets scene,medical,corel5k
    nice -n 5 python benchmarks/omf_table.py --sets bibtex --inner 1 --n-epochs 10
    nice -n 5 python benchmarks/omf_table.py --sets mediamill_discretized --inner 1 --n-epochs 10 --batch 256
    nice -n 5 python benchmarks/omf_table.py --sets medical,scene --grid wide
    nice -n 5 python benchmarks/omf_table.py --sets bibtex --inner 1 --n-epochs 10 --grid wide
    python benchmarks/omf_table.py --speed
    python benchmarks/omf_table.py --cached-only
    python benchmarks/omf_table.py --sets medical,scene,corel5k --protocols --docs
    python benchmarks/omf_table.py --sets medical,scene --grid wide --protocols --docs
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
from _common import best_of, parser, staged, tee, work_folder

DEFAULT_WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "dmlr-omf-table"

#: The paper's Table 2, "Our Method" row: micro F1 (no std given) and the latent dimension s (n_components).
PAPER = {
    "corel5k": (0.26337, 40),
    "scene": (0.691, 10),
    "bibtex": (0.436, 140),
    "medical": (0.896, 70),
    "mediamill_discretized": (0.503, 350),
}
#: Best other method of the paper's Table 2 for context (name, F1).
PAPER_BEST_OTHER = {
    "corel5k": ("MNMF", 0.240),
    "scene": ("MME", 0.698),
    "bibtex": ("CCA", 0.404),
    "medical": ("MME", 0.808),
    "mediamill_discretized": ("MNMF", 0.510),
}
NOTES = {
    "corel5k": "same set (499 features)",
    "scene": "same set",
    "bibtex": "same set",
    "medical": "same set",
    "mediamill_discretized": "features discretised to {0,1,2}, 43,851 rows: NOT comparable",
}
#: ``--grid coarse`` (fit grid, alpha_code candidates) and ``--grid wide``: the coarse grid's choices sat on
#: its edges (label_weight 0.5, eta0 3, alpha_code 0.01 or 10); the wide grid extends every edge.
GRIDS = {
    "coarse": ({"label_weight": [0.1, 0.5], "alpha": [1e-4, 1e-2], "eta0": [0.3, 3.0]}, (0.01, 1.0, 10.0)),
    "wide": (
        {"label_weight": [0.5, 0.9], "alpha": [1e-6, 1e-4, 1e-2], "eta0": [3.0, 10.0, 30.0]},
        (1e-3, 0.01, 0.1, 1.0, 10.0, 100.0),
    ),
}


def base_model(name: str, fold: int, n_train: int, a):
    """OMF with the paper's latent dimension for ``name`` and this run's epochs and minibatch,
    shuffled over the whole training part (one window)."""
    from dmlr.models.omf import OMF

    window = -(-n_train // a.batch) * a.batch
    return OMF(
        n_components=PAPER[name][1], n_epochs=a.n_epochs, batch_size=a.batch, shuffle_window=window, random_state=fold
    )


def _config(a) -> str:
    return f"e{a.n_epochs}-b{a.batch}-i{a.inner}{'' if a.grid == 'coarse' else f'-g{a.grid}'}"


def run_fold(name: str, fold: int, a) -> dict:
    import dmlr
    from dmlr.metrics import multilabel_metrics
    from dmlr.model_selection import kfold_indices
    from dmlr.models.omf import cross_validate_omf

    cache = Path(a.workdir) / f"omf-{name}-f{fold}-{_config(a)}-s{a.seed}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    X, Y = staged(name, a.workdir)
    tr, te = kfold_indices(Y.shape[0], a.folds, seed=a.seed)[fold]
    Xtr, Ytr = X[tr], Y[tr]
    base = base_model(name, fold, len(tr), a)
    if a.inner == 1:  # one 80/20 hold-out split of the training part
        perm = np.random.default_rng([a.seed, 11, fold]).permutation(len(tr))
        cut = round(0.8 * len(tr))
        cv = [(np.sort(perm[:cut]), np.sort(perm[cut:]))]
    else:
        cv = a.inner
    t0 = time.perf_counter()
    grid, alpha_codes = GRIDS[a.grid]
    with dmlr.config_context(backend="local"):
        res = cross_validate_omf(
            base, Xtr, Ytr, grid, alpha_codes=alpha_codes, cv=cv, seed=a.seed + 1 + fold, refit=True
        )
    est = res.best_estimator
    S = est.decision_function(X[te])
    f1 = multilabel_metrics(Y[te], S, est.predict(X[te]), metrics=["f1_micro"])["f1_micro"]
    out = {
        "set": name,
        "fold": fold,
        "f1_micro": f1,
        "best_params": res.best_params,
        "cv_score": res.best_score,
        "seconds": time.perf_counter() - t0,
        "n_train": len(tr),
        "objective_history": est.objective_history_,
    }
    cache.write_text(json.dumps(out))
    print(
        f"  {name} fold {fold}: micro F1 {f1:.4f}  (cv {res.best_score:.4f}, {out['seconds']:.0f} s) {res.best_params}",
        flush=True,
    )
    return out


_CACHE_NAME = re.compile(r"omf-(?P<set>.+)-f(?P<fold>\d+)-(?P<config>e\d+-b\d+-i\d+(?:-g\w+)?)-s(?P<seed>\d+)\.json")


def table(a) -> str:
    """One row per (set, configuration) found in the cache: epochs, batch, inner folds, grid."""
    runs: dict = {}
    for f in sorted(Path(a.workdir).glob(f"omf-*-s{a.seed}.json")):
        m = _CACHE_NAME.fullmatch(f.name)
        if m:
            runs.setdefault((m["set"], m["config"]), []).append(json.loads(f.read_text()))
    rows = []
    head = (
        f"{'set':<22} {'s':>4} {'config':<18} {'ours: micro F1 (std)':>21} {'folds':>5} {'paper':>7} "
        f"{'diff':>7}  {'paper best other':<18} note"
    )
    rows += [head, "-" * len(head)]
    for name, (paper, s) in PAPER.items():
        other = PAPER_BEST_OTHER[name]
        configs = sorted(c for n, c in runs if n == name) or [None]
        for config in configs:
            res = runs.get((name, config), [])
            if not res:
                rows.append(
                    f"{name:<22} {s:>4} {'-':<18} {'not run':>21} {0:>5} {paper:>7.3f} {'':>7}  "
                    f"{other[0] + ' ' + str(other[1]):<18} {NOTES[name]}"
                )
                continue
            f1 = np.array([r["f1_micro"] for r in res])
            rows.append(
                f"{name:<22} {s:>4} {config:<18} {f'{f1.mean():.3f} ({f1.std():.3f})':>21} {len(res):>5} "
                f"{paper:>7.3f} {f1.mean() - paper:>+7.3f}  {other[0] + ' ' + str(other[1]):<18} "
                f"{NOTES[name]}"
            )
    rows.append(
        "config: e<epochs>-b<minibatch>-i<inner CV folds, 1 = one 80/20 hold-out>[-g<grid>, coarse if "
        "absent]. The paper gives no std for its Table 2, so 'within the paper's std' cannot be decided; "
        "diff = ours - paper."
    )
    rows.append("Chosen settings per fold:")
    for (name, config), res in sorted(runs.items()):
        for r in sorted(res, key=lambda r: r["fold"]):
            rows.append(
                f"  {name:<22} {config:<18} fold {r['fold']}: F1 {r['f1_micro']:.4f}, cv {r['cv_score']:.4f}, "
                f"{r['seconds']:.0f} s, {r['best_params']}"
            )
    return "\n".join(rows)


#: Columns of ``--protocols`` (see the module docstring).
PROTOCOLS = ("ours", "rule on test", "all on test", "top-|y|", "5x epochs", "train rows", "RBRL", "RBRL top-|y|")


def top_true_count(S: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """0/1 labels: each row's ``Y.sum()`` highest-scoring labels (an oracle of the label count)."""
    order = np.argsort(-S, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(S.shape[1])[None, :], axis=1)
    return (rank < Y.sum(axis=1, keepdims=True)).astype(np.int8)


def run_protocols(name: str, fold: int, a) -> dict:
    """Micro F1 of each of :data:`PROTOCOLS` on one outer fold (cached as JSON)."""
    from sklearn.base import clone

    import dmlr
    from dmlr.metrics import multilabel_metrics
    from dmlr.model_selection import kfold_indices
    from dmlr.models.omf import cross_validate_omf

    cache = Path(a.workdir) / f"omf-protocols-{name}-f{fold}-{_config(a)}-s{a.seed}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    chosen = run_fold(name, fold, a)
    X, Y = staged(name, a.workdir)
    tr, te = kfold_indices(Y.shape[0], a.folds, seed=a.seed)[fold]
    base = base_model(name, fold, len(tr), a)
    grid, alpha_codes = GRIDS[a.grid]

    def f1(Yt, S, P):
        return multilabel_metrics(Yt, S, P, metrics=["f1_micro"])["f1_micro"]

    with dmlr.config_context(backend="local"):
        on_test = cross_validate_omf(base, X, Y, grid, alpha_codes=alpha_codes, cv=[(tr, te)], refit=False)
        est = base.set_params(**chosen["best_params"]).fit(X[tr], Y[tr])
        longer = clone(est).set_params(n_epochs=5 * a.n_epochs).fit(X[tr], Y[tr])
        rbrl = dmlr.fit((X[tr], Y[tr]), verbose=0)
    fitted = {k: chosen["best_params"][k] for k in grid}
    same_fit = [r["mean_score"] for r in on_test.results if all(r["params"][k] == v for k, v in fitted.items())]
    exact = [r["mean_score"] for r in on_test.results if r["params"] == chosen["best_params"]]
    if not np.isclose(exact[0], chosen["f1_micro"], rtol=0, atol=1e-12):  # the same fit, refitted here
        raise RuntimeError(f"{name} fold {fold}: the refit scores {exact[0]} against the cached {chosen['f1_micro']}")
    S, S_rbrl = est.decision_function(X[te]), np.asarray(rbrl.decision_function(X[te]))
    out = dict(
        zip(
            PROTOCOLS,
            (
                chosen["f1_micro"],
                max(same_fit),
                on_test.best_score,
                f1(Y[te], S, top_true_count(S, Y[te])),
                f1(Y[te], longer.decision_function(X[te]), longer.predict(X[te])),
                f1(Y[tr], est.decision_function(X[tr]), est.predict(X[tr])),
                f1(Y[te], S_rbrl, rbrl.predict(X[te])),
                f1(Y[te], S_rbrl, top_true_count(S_rbrl, Y[te])),
            ),
        )
    )
    cache.write_text(json.dumps(out))
    return out


def protocols_table(a) -> str:
    """Means (std) over the outer folds of each protocol's micro F1, beside the paper's."""
    head = f"{'set':<10} {'paper':>6}  " + "  ".join(f"{p:>14}" for p in PROTOCOLS)
    rows = [f"micro F1 over {a.folds} outer folds, mean (std); config {_config(a)}", head, "-" * len(head)]
    for name in a.sets:
        per_fold = [run_protocols(name, fold, a) for fold in range(a.folds)]
        cells = []
        for p in PROTOCOLS:
            v = np.array([r[p] for r in per_fold])
            cells.append(f"{f'{v.mean():.3f} ({v.std():.3f})':>14}")
        rows.append(f"{name:<10} {PAPER[name][0]:>6.3f}  " + "  ".join(cells))
    return "\n".join(rows)


def speed(a) -> None:
    from threadpoolctl import threadpool_limits

    import dmlr
    from dmlr.models.omf import OMF

    X, Y = staged("mediamill_discretized", a.workdir)
    n = X.shape[0]
    print(f"mediamill_discretized {X.shape[0]} x {X.shape[1]}, {Y.shape[1]} labels, s = 350")
    for b in (32, 256):
        with dmlr.config_context(backend="local"):
            best, m = best_of(
                lambda: OMF(n_components=350, n_epochs=1, batch_size=b, eta0=0.3, shuffle_window=4096).fit(X, Y)
            )
        print(f"  fit, 1 epoch over {n} rows, batch {b:>3}: {best:.2f} s ({best / n * 1e6:.1f} us per row)")
    with threadpool_limits(limits=1, user_api="blas"):
        t = time.perf_counter()
        for _ in range(3):
            m.decision_function(X)
        dt = (time.perf_counter() - t) / 3
        t = time.perf_counter()
        for i in range(200):
            m.decision_function(X[i : i + 1])
        dt1 = (time.perf_counter() - t) / 200
    print(
        f"  decision_function on all {n} rows: {dt:.3f} s ({dt / n * 1e6:.2f} us per row, W = P(xi I + "
        f"P^T P)^-1 Q^T formed once per call, xi = alpha_code); one row per call: {dt1 * 1e3:.2f} ms"
    )


def main(argv=None) -> None:
    p = parser(__doc__, sets=PAPER, workdir=str(DEFAULT_WORK))
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--run-folds", type=int, default=None, help="run only the first k folds")
    p.add_argument("--inner", type=int, default=3, help="inner CV folds (1: one 80/20 hold-out split)")
    p.add_argument("--n-epochs", "--epochs", type=int, default=20, help="OMF's n_epochs")
    p.add_argument("--batch", type=int, default=32, help="OMF's batch_size")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--grid", choices=sorted(GRIDS), default="coarse")
    p.add_argument("--speed", action="store_true")
    p.add_argument("--cached-only", action="store_true")
    p.add_argument("--protocols", action="store_true", help="the table of protocols (see the module)")
    p.add_argument("--docs", action="store_true", help="with --protocols: docs/benchmarks/omf_protocols_<grid>.txt")
    a = p.parse_args(argv)
    work_folder(a.workdir)
    if a.speed:
        speed(a)
        return
    if a.protocols:
        with tee(f"omf_protocols_{a.grid}", a.docs):
            print(protocols_table(a))
        return
    if not a.cached_only:
        for name in a.sets:
            if name not in PAPER:
                sys.exit(f"unknown set {name!r}; known: {list(PAPER)}")
            try:
                staged(name, a.workdir)
            except FileNotFoundError as e:
                print(f"skip {name}: {e}")
                continue
            for fold in range(a.run_folds or a.folds):
                run_fold(name, fold, a)
    print(table(a))


if __name__ == "__main__":
    main()
