"""Which hyper-parameter values cross-validation picks on the staged small sets: the defaults' table.

For each model and each set (the official MULAN training split of emotions, yeast, scene,
enron, medical; features scaled by the model's own ``scaling="auto"``), the model's
regularization is chosen by K-fold cross-validation on the training split; the table prints
the value chosen on each set and the most frequent choice, which is the model's default.

* ``linear``: :class:`dmlr.models.LinearMultiLabel` (defaults otherwise), ``alpha`` by
  :func:`dmlr.tuning.search` (its half-decade grid, widened at an edge; scoring: example-based
  average precision, the search's default).
* ``ranksvm``: :class:`dmlr.models.RankSVM` (defaults otherwise), ``alpha`` as for ``linear``.
* ``oml``: :class:`dmlr.models.OML` (defaults otherwise), ``k`` and ``aggregation`` on a grid
  (:data:`OML_GRID`) by :func:`dmlr.model_selection.grid_search_cv` (average precision). The
  two interact (a vote of few neighbours ties many labels, the ML-kNN posterior does not), so
  the default is the most frequent *pair* (:data:`JOINT`), not each one's most frequent value;
  the table also gives each set's CV score at the default and at its own choice.
* ``omf``: :class:`dmlr.models.OMF` (defaults otherwise), ``label_weight``, ``alpha``,
  ``eta0`` and ``n_components`` on a grid, then ``alpha_code`` and the label rule (top-k or a
  threshold) on the same fits, by :func:`dmlr.models.omf.cross_validate_omf` (scoring: micro-F1,
  the paper's measure).

Then, on each set's test split, the old defaults, the new defaults and the set's own CV
choice are scored (micro-F1 for OMF, average precision for the others).

Results are cached as JSON per (model, set) in ``--workdir``; ``--cached-only`` prints the
table from the cache. Run (one process; a few minutes per model on 2 cores)::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/default_params.py [--models linear,omf] [--sets ...]
"""

from __future__ import annotations

import collections
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
from _common import parser, staged, work_folder

import dmlr
from dmlr.metrics import multilabel_metrics
from dmlr.models import OMF, OML, LinearMultiLabel, RankSVM

SETS = ("emotions", "yeast", "scene", "enron", "medical")
MODELS = {"linear": LinearMultiLabel, "ranksvm": RankSVM, "oml": OML, "omf": OMF}
DEFAULT_WORK = Path(os.environ.get("TMPDIR", "/tmp")) / "dmlr-default-params"

#: The defaults before this table (for the before/after columns).
OLD_DEFAULTS = {
    "ranksvm": {"alpha": 1e-4},
    "oml": {"k": 10, "aggregation": "vote"},
    "linear": {"solver": "sgd", "alpha": 1e-4, "n_epochs": 5, "learning_rate": "1/k", "tol": None},
    "omf": {
        "n_components": 10,
        "label_weight": 0.5,
        "alpha": 1e-3,
        "alpha_code": 1.0,
        "eta0": 0.1,
        "label_rule": "top_k",
        "top_k": 1,
        "threshold": 0.5,
    },
}
#: OMF's fitted grid (alpha_code and the label rule are scored on the same fits).
OMF_GRID = {
    "n_components": [10, 50],
    "label_weight": [0.1, 0.5, 0.9],
    "alpha": [1e-4, 1e-2],
    "eta0": [0.1, 1.0],
}
OMF_ALPHA_CODES = (1e-2, 1e-1, 1.0, 10.0)
OMF_THRESHOLDS = (0.02, 0.05) + tuple(np.round(np.arange(0.1, 0.75, 0.05), 2))
#: ``--grid wide``: every choice of the first grid but label_weight and alpha_code sat on an edge
#: (n_components 50, alpha 1e-4, eta0 1 on all five sets); this one extends those edges.
OMF_WIDE_GRID = {
    "n_components": [50, 150],
    "label_weight": [0.03, 0.1, 0.5],
    "alpha": [1e-6, 1e-4],
    "eta0": [1.0, 3.0, 10.0],
}
#: Parameters whose choice the table reports, per model.
REPORTED = {
    "linear": ("alpha",),
    "ranksvm": ("alpha",),
    "oml": ("k", "aggregation"),
    "omf": ("n_components", "label_weight", "alpha", "eta0", "alpha_code", "label_rule", "top_k", "threshold"),
}
SCORE = {"linear": "average_precision", "ranksvm": "average_precision", "oml": "average_precision", "omf": "f1_micro"}
#: OML's grid: neighbours and how their labels are aggregated. (A first grid, k in {5, 10, 20,
#: 40}, had every choice on an edge: 40 on three sets, 5 on two; this one extends both edges. Its
#: top, 320, is more than the training folds' rows on emotions and medical: every row votes.)
OML_GRID = {"k": [3, 5, 10, 20, 40, 80, 160, 320], "aggregation": ["vote", "mlknn"]}
#: Parameters whose default is the most frequent joint choice, per model.
JOINT = {"oml": ("k", "aggregation")}


def choose(model: str, X, Y, cv: int, seed: int, grid: str = "coarse") -> tuple[dict, list | None]:
    """The CV choice on (X, Y): ({param: value}, [[params, mean CV score], ...] or None)."""
    if model in ("linear", "ranksvm"):
        from dmlr.tuning import search

        res = search(MODELS[model](), X, Y, params=["alpha"], cv=cv, seed=seed, client="local", n_jobs=1)
        return dict(res.best_params), None
    if model == "oml":
        from dmlr.model_selection import grid_search_cv

        res = grid_search_cv(
            MODELS[model](), X, Y, OML_GRID, cv=cv, seed=seed, scoring="average_precision", client="local", refit=False
        )
        return dict(res.best_params), [[r["params"], r["mean_score"]] for r in res.results]
    from dmlr.models.omf import DEFAULT_THRESHOLDS, cross_validate_omf

    res = cross_validate_omf(
        OMF(),
        X,
        Y,
        OMF_WIDE_GRID if grid == "wide" else OMF_GRID,
        alpha_codes=OMF_ALPHA_CODES,
        thresholds=OMF_THRESHOLDS if grid == "wide" else DEFAULT_THRESHOLDS,
        cv=cv,
        seed=seed,
        refit=False,
    )
    return dict(res.best_params), None


def test_score(model: str, params: dict, Xtr, Ytr, Xte, Yte) -> float:
    cls = MODELS[model]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = cls(**params).fit(Xtr, Ytr)
    S = est.decision_function(Xte)
    metric = SCORE[model]
    return float(multilabel_metrics(Yte, S, est.labels_from_scores(S), metrics=[metric])[metric])


def run(model: str, name: str, a) -> dict:
    cache = _cache(model, name, a)
    if cache.exists():
        return json.loads(cache.read_text())
    Xtr, Ytr = staged(name, a.workdir, "train")
    t = time.perf_counter()
    with dmlr.config_context(backend="local"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # non-converged fits at the grid's weakest regularization
        best, scores = choose(model, Xtr, Ytr, a.cv, a.seed, a.grid)
    out = {"model": model, "set": name, "best_params": best, "seconds": time.perf_counter() - t}
    if scores is not None:
        out["cv_scores"] = scores
    cache.write_text(json.dumps(out))
    print(f"  {model} {name}: {best} ({out['seconds']:.0f} s)", flush=True)
    return out


def _cache(model: str, name: str, a) -> Path:
    tag = f"-g{a.grid}" if model == "omf" and a.grid != "coarse" else ""
    return Path(a.workdir) / f"{model}-{name}-cv{a.cv}{tag}-s{a.seed}.json"


def most_frequent(values, former=None):
    """The most frequent value; a tie goes to the tied value nearest the former default (log
    scale for positive numbers), else to the first in the table's order."""
    counts = collections.Counter(json.dumps(v) for v in values)
    top = max(counts.values())
    tied = [v for v in dict.fromkeys(values, None) if counts[json.dumps(v)] == top]
    if len(tied) > 1 and isinstance(former, (int, float)) and all(isinstance(v, (int, float)) for v in tied):
        return min(tied, key=lambda v: abs(np.log(v / former)) if v > 0 and former > 0 else abs(v - former))
    if len(tied) > 1 and former in tied:
        return former
    return tied[0]


def table(model: str, results: list, a) -> tuple[str, dict]:
    keys = [k for k in REPORTED[model] if any(k in r["best_params"] for r in results)]
    head = f"{'set':<10}" + "".join(f"{k:>14}" for k in keys) + f"{'seconds':>9}"
    grid = f", {a.grid} grid" if model == "omf" else ""
    lines = [f"{model}: CV choice on the training split ({a.cv}-fold, seed {a.seed}{grid})", head, "-" * len(head)]
    for r in results:
        bp = r["best_params"]
        lines.append(f"{r['set']:<10}" + "".join(f"{_fmt(bp.get(k)):>14}" for k in keys) + f"{r['seconds']:>9.0f}")
    default = {}
    joint = [k for k in JOINT.get(model, ()) if k in keys]
    if joint:
        pairs = [tuple(r["best_params"][k] for k in joint) for r in results]
        former = tuple(OLD_DEFAULTS[model].get(k) for k in joint)
        default.update(zip(joint, most_frequent(pairs, former)))
    for k in keys:
        if k in joint:
            continue
        if k in ("top_k", "threshold"):
            continue  # OMF: the chosen thresholds differ on every set; the model learns its own
        former = OLD_DEFAULTS[model].get(k)
        default[k] = most_frequent([r["best_params"][k] for r in results if k in r["best_params"]], former)
    if model == "omf":
        default["threshold"] = "auto"
    lines.append(f"{'default':<10}" + "".join(f"{_fmt(default.get(k, '-')):>14}" for k in keys))
    if all("cv_scores" in r for r in results):
        lines += ["", f"{model}: mean CV {SCORE[model]} at the default and at the set's own choice"]
        for r in results:
            cv = {json.dumps(p, sort_keys=True): v for p, v in r["cv_scores"]}
            at = cv.get(json.dumps({k: default[k] for k in keys}, sort_keys=True), float("nan"))
            lines.append(f"{r['set']:<10} {at:>8.4f} {cv[json.dumps(r['best_params'], sort_keys=True)]:>8.4f}")
    return "\n".join(lines), default


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def main(argv=None):
    ap = parser(__doc__, sets=SETS, workdir=str(DEFAULT_WORK))
    ap.add_argument("--models", default="linear,ranksvm,oml,omf")
    ap.add_argument("--cv", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grid", default="wide", choices=["coarse", "wide"], help="OMF's grid")
    ap.add_argument("--cached-only", action="store_true")
    ap.add_argument("--no-test", action="store_true", help="skip the test-split before/after columns")
    a = ap.parse_args(argv)
    work_folder(a.workdir)
    sets = a.sets
    for model in a.models.split(","):
        results = []
        for name in sets:
            cache = _cache(model, name, a)
            if a.cached_only and not cache.exists():
                continue
            results.append(run(model, name, a))
        if not results:
            continue
        text, default = table(model, results, a)
        print("\n" + text)
        if a.no_test:
            continue
        metric = SCORE[model]
        print(f"\n{model}: test-split {metric}: old defaults, new defaults (the row above), the set's own CV choice")
        for r in results:
            Xtr, Ytr = staged(r["set"], a.workdir, "train")
            Xte, Yte = staged(r["set"], a.workdir, "test")
            with dmlr.config_context(backend="local"):
                old = test_score(model, OLD_DEFAULTS[model], Xtr, Ytr, Xte, Yte)
                new = test_score(model, default, Xtr, Ytr, Xte, Yte)
                own = test_score(model, r["best_params"], Xtr, Ytr, Xte, Yte)
            print(f"{r['set']:<10} {old:>8.4f} {new:>8.4f} {own:>8.4f}", flush=True)


if __name__ == "__main__":
    main()
