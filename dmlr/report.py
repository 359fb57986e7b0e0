"""Pictures of a fitted model: convergence, per-label F1 and AUC, score distributions.

::

    from dmlr.report import write_report
    write_report(model, "data.zarr", "report.png", split="test")   # or: dmlr report MODEL.npz DATA.zarr

writes a PNG with four panels (top row: 1 and 4; bottom row: 2 and 3) under a
headline of the split's main metrics (:func:`headline`: ranking loss, average
precision, P@1 over all rows, micro- and macro-F1):

- panel 1, **convergence**: ``F_t - min_t F_t`` against the iteration t on a log
  scale (F = the training objective recorded in ``objective_history_``;
  the minimum is over the run itself, so the last points approach 0 and
  the iteration at the minimum is not drawn);
- panels 2 and 3, **per-label F1** and **per-label ROC AUC** on the chosen split, one
  bar per label, labels sorted by their number of relevant rows in that
  split (most frequent first), the macro average dashed. F1 uses the
  model's own labels (``model.labels_from_scores``, as :func:`dmlr.evaluate`); a label with no
  relevant and no predicted row has F1 0 (``zero_division=0``); a label
  without both relevant and irrelevant rows has no AUC (no bar). Their
  means are exactly ``f1_macro`` and ``auc_macro`` of :func:`dmlr.evaluate`;
- panel 4, **score distributions**: histograms (as densities) of the decision
  scores of the relevant and of the irrelevant (instance, label) pairs,
  with the model's (common) score threshold where its label rule has one and
  the number of labels with a lower threshold of their own.

When the model was searched by :func:`dmlr.fit` (an in-memory model: model files keep the
chosen values, ``best_params_``, not the search), a fifth panel below shows the search's
validation curve (:func:`plot_search`).

The numbers come from :func:`report_statistics`, without gathering the
score matrix. The plotting functions (:func:`plot_convergence`, :func:`plot_label_metrics`,
:func:`plot_score_distributions`) draw on given Matplotlib axes, for
notebooks.

Matplotlib is an optional dependency (``pip install 'dmlr[plot]'``),
imported only when drawing.
"""

from __future__ import annotations

import math
from pathlib import Path

import dask
import numpy as np

# The per-label numbers are dmlr.metrics' per-chunk sums and two-pass macro AUC (label_f1,
# label_auc), with the score histograms computed in the same two passes.
from dmlr.metrics import (
    _auc_chunk_counts,
    _evaluate,
    _positive_scores,
    _row_blocks,
    _sort_positives,
    chunk_statistics,
    combine,
    finalize,
    label_auc,
    label_f1,
    predict_from_scores,
)

__all__ = [
    "MatplotlibMissingError",
    "headline",
    "label_metrics",
    "plot_convergence",
    "plot_label_metrics",
    "plot_report",
    "plot_search",
    "plot_score_distributions",
    "report_statistics",
    "write_report",
]

#: Labels up to which the per-label panels draw one bar per label (beyond: a filled step curve).
MAX_BARS = 200
#: Labels up to which the per-label panels name each label on the x axis.
MAX_TICK_LABELS = 30


class MatplotlibMissingError(ImportError):
    """Raised when a plot is asked for and Matplotlib is not installed."""


def _matplotlib():
    try:
        import matplotlib
    except ImportError as e:
        raise MatplotlibMissingError(
            "dmlr.report draws with matplotlib, which is not installed; install the "
            "'plot' extra: pip install 'dmlr[plot]'"
        ) from e
    return matplotlib


# ----------------------------------------------------------------------------
# Numbers
# ----------------------------------------------------------------------------


def _score_range(S) -> np.ndarray:
    S = np.asarray(S, dtype=np.float64)
    return np.array([S.min(), S.max()]) if S.size else np.array([np.inf, -np.inf])


def _score_histograms(Y, S, edges) -> dict:
    Y = np.asarray(Y) != 0
    S = np.asarray(S, dtype=np.float64)
    return {
        "relevant": np.histogram(S[Y], bins=edges)[0].astype(np.int64),
        "irrelevant": np.histogram(S[~Y], bins=edges)[0].astype(np.int64),
    }


def report_statistics(Y, S, P=None, *, bins: int = 50) -> dict:
    """Per-label F1 and ROC AUC and the score histograms, chunk by chunk.

    It reuses the map-reduce of :mod:`dmlr.metrics` (per-chunk counts, exact
    two-pass AUC): two ``dask.compute`` calls, and the score matrix is never
    gathered.

    Parameters
    ----------
    Y, S, P : ndarray or dask.array.Array (n, l)
        True 0/1 labels, scores, predicted 0/1 labels (default:
        :func:`dmlr.metrics.predict_from_scores` of S); as for
        :func:`dmlr.metrics.multilabel_metrics`.
    bins : int
        Histogram bins, evenly spaced between the smallest and largest score.

    Returns
    -------
    dict
        ``n_rows``; per label (arrays of length l): ``n_positive`` (relevant
        rows), ``f1``, ``auc`` (nan for a label without both classes);
        ``f1_macro``, ``auc_macro`` (equal to those of
        :func:`dmlr.metrics.multilabel_metrics`); ``order``: label indices
        by decreasing ``n_positive`` (ties: lower index first);
        ``edges`` (bins + 1), ``relevant`` and ``irrelevant`` (bins): the
        histogram counts of the scores of relevant / irrelevant pairs;
        ``metrics``: every metric of :func:`dmlr.metrics.multilabel_metrics`
        on these rows (the report's headline).
    """
    if P is None:
        P = predict_from_scores(S)
    blocks, lazy = _row_blocks(Y, S, P)
    k = len(blocks)
    first = _evaluate(
        [(chunk_statistics, b) for b in blocks]
        + [(_positive_scores, b[:2]) for b in blocks]
        + [(_score_range, b[1:2]) for b in blocks],
        lazy,
    )
    stats = combine(first[:k])
    n_labels = len(stats["tp"])
    positives = _sort_positives(first[k : 2 * k], n_labels)
    ranges = np.array(first[2 * k :])
    lo, hi = float(ranges[:, 0].min()), float(ranges[:, 1].max())
    if not lo < hi:  # one score value (or no rows): a unit-wide bin range around it
        lo, hi = (lo - 0.5, lo + 0.5) if math.isfinite(lo) else (-0.5, 0.5)
    edges = np.linspace(lo, hi, int(bins) + 1)
    if lazy:
        positives = [dask.delayed(a) for a in positives]
    second = _evaluate(
        [(_auc_chunk_counts, (*b[:2], *positives)) for b in blocks]
        + [(_score_histograms, (*b[:2], edges)) for b in blocks],
        lazy,
    )
    twice_correct = combine(second[:k])["auc_twice_correct"]
    hist = combine(second[k:])

    n = int(stats["n_rows"])
    f1 = label_f1(stats)
    auc = label_auc({**stats, "auc_twice_correct": twice_correct})
    metrics = finalize({**stats, "auc_twice_correct": twice_correct})
    n_pos = (stats["tp"] + stats["fn"]).astype(np.int64)
    return {
        "n_rows": n,
        "n_positive": n_pos,
        "f1": f1,
        "auc": auc,
        "f1_macro": float(f1.mean()) if n else math.nan,
        "auc_macro": float(np.nanmean(auc)) if not np.isnan(auc).all() else math.nan,
        "order": np.argsort(-n_pos, kind="stable"),
        "edges": edges,
        "relevant": hist["relevant"],
        "irrelevant": hist["irrelevant"],
        "metrics": metrics,
    }


def label_metrics(model, data, split: str | None = "test", *, bins: int = 50) -> dict:
    """:func:`report_statistics` of a fitted model on a data set (as :func:`dmlr.evaluate` reads it).

    Parameters
    ----------
    model : fitted estimator, or path of a saved model
    data : str, Path, Dataset or (X, Y)
    split : str or None
        Named split (None or "all": every row).

    Returns
    -------
    dict
        :func:`report_statistics`' output plus ``split`` and ``label_names``
        (from the store, else None).
    """
    from dmlr.api import _as_dataset, final_estimator, resolve_arrays, resolve_split

    model = _as_model(model)
    ds = _as_dataset(data)
    if ds is not None:  # the split read: every row of a store without splits
        split = resolve_split(ds, split, default_split="test", stacklevel=3)
    X, Y = resolve_arrays(data if ds is None else ds, split, default_split="test")
    S = model.decision_function(X)
    final = final_estimator(model)
    out = report_statistics(Y, S, final.labels_from_scores(S), bins=bins)
    out["thresholds"] = _label_thresholds(final)
    out["split"] = split
    out["label_names"] = list(ds.label_names) if ds is not None and ds.label_names else None
    return out


def _label_thresholds(final):
    """The label rule's thresholds (float64 (n_labels,)), None for a rule without them."""
    if getattr(final, "label_rule", "threshold") != "threshold":
        return None
    if hasattr(final, "threshold_"):
        return np.asarray(final.threshold_, dtype=np.float64)
    t = getattr(final, "threshold", None)
    return np.full(len(final.classes_), float(t)) if isinstance(t, (int, float)) else None


def _as_model(model):
    if isinstance(model, (str, Path)):
        from dmlr.models.base import load_model

        return load_model(model)
    return model


# ----------------------------------------------------------------------------
# Panels
# ----------------------------------------------------------------------------


def _new_axes(n: int = 1):
    _matplotlib()
    import matplotlib.pyplot as plt

    _, axes = plt.subplots(1, n, figsize=(5 * n, 3.6), squeeze=False)
    return list(axes[0])


def plot_convergence(model, ax=None):
    """Objective gap ``F_t - min F`` against the iteration, log scale.

    Parameters
    ----------
    model : fitted estimator (with ``objective_history_``) or a sequence of objective values
    ax : matplotlib Axes, optional
        Default: a new pyplot figure.

    Returns
    -------
    matplotlib Axes
    """
    ax = ax if ax is not None else _new_axes()[0]
    history = np.asarray(getattr(model, "objective_history_", model), dtype=np.float64)
    t = np.arange(1, history.size + 1)
    if history.size == 0:
        ax.set_title("objective: no iterations recorded")
        return ax
    best = history.min()
    gap = history - best
    shown = gap > 0
    if shown.any():
        ax.semilogy(t[shown], gap[shown], lw=1.2)
        ax.set_ylabel(r"$F_t - \min F$")
    else:
        ax.plot(t, history, lw=1.2)
        ax.set_ylabel("objective F")
    converged = getattr(model, "converged_", None)
    status = "" if converged is None else (", converged" if converged else ", stopped at max_iter")
    ax.set_title(f"objective: {history.size} iterations{status}\nmin F = {best:.6g}", fontsize=10)
    ax.set_xlabel("iteration")
    ax.grid(True, which="both", alpha=0.3)
    return ax


def _bars(ax, values, color):
    x = np.arange(len(values))
    if len(values) <= MAX_BARS:
        ax.bar(x, values, width=0.8, color=color)
    else:
        ax.stairs(np.nan_to_num(values), np.arange(len(values) + 1) - 0.5, fill=True, color=color)
    ax.set_xlim(-0.6, len(values) - 0.4)


def _label_axis(ax, stats):
    order = stats["order"]
    names = stats.get("label_names")
    counts = stats["n_positive"]
    if len(order) <= MAX_TICK_LABELS:
        ticks = [f"{names[j] if names else j} ({counts[j]})" for j in order]
        ax.set_xticks(np.arange(len(order)), ticks, rotation=90, fontsize=7)
        ax.set_xlabel("label (relevant rows), most frequent first")
    elif names:  # every step-th label named, up to MAX_TICK_LABELS names
        step = -(-len(order) // MAX_TICK_LABELS)
        at = np.arange(0, len(order), step)
        ax.set_xticks(at, [f"{names[order[k]]} ({counts[order[k]]})" for k in at], rotation=90, fontsize=7)
        ax.set_xlabel(f"label (relevant rows), most frequent first; one named every {step}")
    else:
        ax.set_xlabel("labels by frequency rank (most frequent first)")


def plot_label_metrics(stats, axes=None):
    """Per-label F1 and ROC AUC bars, labels sorted by frequency.

    Parameters
    ----------
    stats : dict
        :func:`label_metrics` / :func:`report_statistics` output.
    axes : pair of matplotlib Axes, optional
        (F1 axes, AUC axes); default: a new pyplot figure.

    Returns
    -------
    (Axes, Axes)
    """
    ax_f1, ax_auc = axes if axes is not None else _new_axes(2)
    order = stats["order"]
    where = f" ({stats['split']!r} split)" if stats.get("split") else ""
    _bars(ax_f1, stats["f1"][order], "tab:blue")
    ax_f1.axhline(stats["f1_macro"], color="k", ls="--", lw=1, label=f"macro {stats['f1_macro']:.3f}")
    ax_f1.set_ylim(0, 1.02)
    ax_f1.set_ylabel("F1")
    ax_f1.set_title(f"per-label F1{where}", fontsize=10)
    ax_f1.legend(loc="upper right", fontsize=8)
    _label_axis(ax_f1, stats)

    auc = stats["auc"][order]
    missing = int(np.isnan(auc).sum())
    _bars(ax_auc, auc, "tab:green")
    ax_auc.axhline(0.5, color="gray", ls=":", lw=1, label="chance")
    if math.isfinite(stats["auc_macro"]):
        ax_auc.axhline(stats["auc_macro"], color="k", ls="--", lw=1, label=f"macro {stats['auc_macro']:.3f}")
    ax_auc.set_ylim(0, 1.02)
    ax_auc.set_ylabel("ROC AUC")
    note = f"\n{missing} label(s) without both classes: no AUC" if missing else ""
    ax_auc.set_title(f"per-label ROC AUC{where}{note}", fontsize=10)
    ax_auc.legend(loc="lower right", fontsize=8)
    _label_axis(ax_auc, stats)
    return ax_f1, ax_auc


def plot_score_distributions(stats, ax=None):
    """Histograms (densities) of the scores of relevant and irrelevant (instance, label) pairs.

    Parameters
    ----------
    stats : dict
        :func:`label_metrics` / :func:`report_statistics` output.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    ax = ax if ax is not None else _new_axes()[0]
    edges = stats["edges"]
    for key, color in (("irrelevant", "tab:red"), ("relevant", "tab:blue")):
        counts = stats[key]
        total = int(counts.sum())
        if total:
            ax.stairs(counts / (total * np.diff(edges)), edges, color=color, lw=1.5, label=f"{key} ({total:,} pairs)")
    thresholds = stats.get("thresholds")
    if thresholds is not None:
        t = float(thresholds.max())  # the common threshold; labels with their own sit below it
        lower = int((thresholds < t).sum())
        own = f", {lower} labels lower (their own)" if lower else ""
        ax.axvline(t, color="k", ls="--", lw=1, label=f"threshold {t:.3g}{own}")
    ax.set_xlabel("decision score")
    ax.set_ylabel("density")
    where = f" ({stats['split']!r} split)" if stats.get("split") else ""
    ax.set_title(f"score distributions{where}", fontsize=10)
    ax.legend(fontsize=8)
    return ax


def plot_search(result, ax=None):
    """The search's validation curve: mean score (with its standard deviation over the folds)
    against each searched value, one line per parameter and stage, the chosen value marked.

    Parameters
    ----------
    result : :class:`dmlr.model_selection.SearchResult`
        A searched model's ``search_``.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    ax = ax if ax is not None else _new_axes()[0]
    groups: dict = {}
    for r in result.results:
        groups.setdefault((r["param"], r["n_rows"]), []).append(r)
    for (param, n_rows), records in groups.items():
        records = sorted(records, key=lambda r: r["value"])
        values = [r["value"] for r in records]
        ax.errorbar(
            values,
            [r["mean_score"] for r in records],
            yerr=[r["std_score"] for r in records],
            marker="o",
            ms=3,
            capsize=2,
            label=f"{param}, {n_rows:,} rows",
        )
    for param, value in result.best_params.items():
        ax.axvline(value, color="k", ls="--", lw=1, label=f"chosen {param} = {value:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("value")
    ax.set_ylabel(f"mean validation {result.scoring}")
    ax.set_title(f"search: {result.n_splits}-fold cross-validation, {result.n_fits} fits", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return ax


def plot_report(model, stats, fig):
    """Draw the panels on ``fig`` (a matplotlib Figure): the four, and below them the search's
    curve when ``model`` carries one (``search_``, set by :func:`dmlr.fit`). Returns the axes."""
    searched = _searched(model)
    rows = [["convergence", "scores"], ["f1", "auc"]] + ([["search", "search"]] if searched else [])
    axes = fig.subplot_mosaic(rows)
    plot_convergence(model, axes["convergence"])
    plot_score_distributions(stats, axes["scores"])
    plot_label_metrics(stats, (axes["f1"], axes["auc"]))
    if searched:
        plot_search(model.search_, axes["search"])
    return axes


def _searched(model) -> bool:
    """Whether ``model`` carries a search with records to draw (:func:`plot_search`)."""
    return getattr(model, "search_", None) is not None and bool(model.search_.results)


def headline(metrics: dict) -> str:
    """One line of the report's main numbers, each with its direction and P@k's convention."""
    m = metrics
    return (
        f"ranking loss {m['ranking_loss']:.4f} (lower is better) · average precision {m['average_precision']:.4f} · "
        f"P@1 {m['precision_at_1']:.3f} (a row with no relevant label counts 0) · "
        f"micro-F1 {m['f1_micro']:.3f} · macro-F1 {m['f1_macro']:.3f}"
    )


def write_report(model, data, path, split: str | None = "test", *, dpi: int = 100, bins: int = 50) -> Path:
    """Write the four-panel report of a fitted model on a data set to a PNG file.

    It renders with Matplotlib's Agg backend on its own figure, without
    touching pyplot's state.

    Parameters
    ----------
    model : fitted estimator, or path of a saved model
    data : str, Path, Dataset or (X, Y)
        As for :func:`dmlr.evaluate`.
    path : str or Path
        PNG file to write (its folder is created).
    split : str or None
        Named split to evaluate on (None or "all": every row).
    dpi : int
        Resolution (the figure is 13 x 9 inches, 13 x 12 with the search's curve).
    bins : int
        Bins of the score histograms.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    MatplotlibMissingError
        (an ImportError) when Matplotlib is not installed.
    """
    _matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    model = _as_model(model)
    stats = label_metrics(model, data, split, bins=bins)
    fig = Figure(figsize=(13, 12 if _searched(model) else 9), layout="constrained")
    FigureCanvasAgg(fig)
    plot_report(model, stats, fig)
    source = "arrays" if isinstance(data, tuple) else Path(str(getattr(data, "path", data))).name
    split_text = "all rows" if stats["split"] in (None, "all") else f"split {stats['split']!r}"
    title = f"{type(model).__name__} on {source}, {split_text}: {stats['n_rows']:,} rows, {len(stats['f1'])} labels"
    fig.suptitle(f"{title}\n{headline(stats['metrics'])}", fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path
