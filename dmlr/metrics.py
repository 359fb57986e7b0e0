"""Multi-label evaluation metrics computed chunk by chunk (map-reduce).

Inputs are ``Y`` (n, l) true 0/1 labels, ``S`` (n, l) real scores (higher
means more relevant) and ``P`` (n, l) predicted 0/1 labels. Each may be a
NumPy array (the whole array is one chunk) or a Dask array; Dask inputs
must share their row chunks and have a single column chunk, and NumPy
inputs mixed with Dask ones are cut into the same row chunks. The score
matrix of a Dask input is never gathered in one place: every row chunk is
reduced to the additive sums of :func:`chunk_statistics`, all chunks in one
``dask.compute`` call (with whatever scheduler or client is active), the
sums are added with :func:`combine` in chunk order and turned into metrics
by :func:`finalize`.

Macro AUC is not a sum over rows; it is computed exactly in two passes
over the chunks, the first within that ``dask.compute`` call, which never
gather ``S`` either (``_macro_auc_pair_counts``).
Within a chunk, the statistics and the pair counts are computed over blocks
of ``BLOCK_ENTRIES`` entries, which bounds the temporary memory.

The definitions of the metrics, their conventions for rows with no or all
relevant labels, and how they relate to scikit-learn's and to the RBRL
reference's are the Notes of :func:`multilabel_metrics`.
"""

from __future__ import annotations

import math

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from dmlr.distributed.chunks import tree_reduce

__all__ = [
    "LABEL_METRICS",
    "LOSS_METRICS",
    "METRIC_NAMES",
    "PS_METRIC_NAMES",
    "chunk_statistics",
    "combine",
    "finalize",
    "label_propensities",
    "label_thresholds",
    "multilabel_metrics",
    "micro_f1_threshold",
    "predict_from_scores",
    "propensities_from_counts",
]

#: Cut-offs of ``precision_at_k`` and ``ndcg_at_k``.
TOP_K = (1, 3, 5)
#: Entries (rows x labels) processed at once within a chunk, by the statistics and by the
#: macro-AUC pair counts: it bounds their temporary memory.
BLOCK_ENTRIES = 2**21

METRIC_NAMES = (
    "hamming_loss",
    "subset_accuracy",
    "accuracy",
    "f1_example",
    "f1_micro",
    "f1_macro",
    "ranking_loss",
    "one_error",
    "coverage",
    "average_precision",
    "auc_macro",
    "auc_instance",
    "precision_at_1",
    "precision_at_3",
    "precision_at_5",
    "ndcg_at_1",
    "ndcg_at_3",
    "ndcg_at_5",
)

#: Propensity-scored metrics; they need the training labels' propensities.
PS_METRIC_NAMES = (
    "psprecision_at_1",
    "psprecision_at_3",
    "psprecision_at_5",
    "psndcg_at_1",
    "psndcg_at_3",
    "psndcg_at_5",
)

#: Metrics for which lower is better; every other metric is higher-better.
LOSS_METRICS = ("hamming_loss", "ranking_loss", "one_error", "coverage")
#: Metrics of the predicted labels P, hence of the model's label rule; the others read the
#: scores only.
LABEL_METRICS = ("hamming_loss", "subset_accuracy", "accuracy", "f1_example", "f1_micro", "f1_macro")

#: Default propensity parameters A and B of Jain et al. (2016), as pyxclib's.
PROPENSITY_A = 0.55
PROPENSITY_B = 1.5


# ----------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------


def multilabel_metrics(Y, S, P, *, metrics=None, propensities=None) -> dict[str, float]:
    """Evaluate multi-label predictions chunk by chunk.

    Parameters
    ----------
    Y : ndarray or dask.array.Array of shape (n, l)
        True labels, 0/1 (any integer, float or bool dtype).
    S : ndarray or dask.array.Array of shape (n, l)
        Finite real scores, higher meaning more relevant.
    P : ndarray or dask.array.Array of shape (n, l)
        Predicted labels, 0/1.
    metrics : str or iterable of str, optional
        Names from :data:`METRIC_NAMES` and, with ``propensities``,
        :data:`PS_METRIC_NAMES`; by default all of :data:`METRIC_NAMES`,
        followed by all of :data:`PS_METRIC_NAMES` when ``propensities``
        is given.
    propensities : array-like of shape (l,), optional
        Propensity ``p_l`` in (0, 1] of every label, estimated from the
        *training* labels (:func:`label_propensities` or
        :func:`propensities_from_counts`). Needed by the propensity-scored
        metrics and used by nothing else.

    Returns
    -------
    dict of str to float
        The requested metrics, in the requested order, as defined in the
        Notes.

    Raises
    ------
    ValueError
        On an unknown metric name, a propensity-scored metric requested
        without ``propensities``, propensities that are not l values in
        (0, 1], inputs that are not 2-D or differ in shape, Dask inputs with different row chunks, more than one column
        chunk or unknown chunk sizes, Y or P not 0/1, or S not finite (for
        Dask inputs the last two are raised while computing).

    Notes
    -----
    Notation: for row ``i``, ``Y+`` / ``Y-`` are its relevant / irrelevant
    labels, ``rank(j) = #{k : S_k >= S_j}`` (ties rank pessimistically), and a
    *ranked row* has ``|Y+| >= 1`` and ``|Y-| >= 1``. For label ``j``,
    ``TP_j, FP_j, FN_j`` count the rows where ``(Y, P)`` is ``(1, 1)``,
    ``(0, 1)``, ``(1, 0)``. The top-k of a row are its k highest scores, ties
    broken by the lower label index (a stable sort of ``-S``), and
    ``k' = min(k, l)``. Every metric is ``nan`` when the set of rows (or labels)
    it averages over is empty. The metrics::

        ================== ============================================= ===================  ==========================
        metric             definition                                    averaged over        0/0 rule
        ================== ============================================= ===================  ==========================
        hamming_loss       #{(i, j) : P_ij != Y_ij} / (n l)              all entries          --
        subset_accuracy    #{i : P_i == Y_i} / n                         all rows             --
        accuracy           mean |P ∩ Y| / |P ∪ Y| (Jaccard)              all rows             row with P ∪ Y empty: 0
        f1_example         mean 2|P ∩ Y| / (|P| + |Y|)                   all rows             row with P, Y empty: 0
        f1_micro           2 TP / (2 TP + FP + FN), summed over labels   all entries          0 when 2TP + FP + FN = 0
        f1_macro           (1/l) sum_j 2 TP_j / (2 TP_j + FP_j + FN_j)   all l labels         such a label counts 0
        ranking_loss       mean #{(p, q) in Y+ x Y- : S_p <= S_q}        ranked rows          other rows excluded
                           / (|Y+| |Y-|)
        one_error          fraction of rows whose top-scored labels      ranked rows          other rows excluded
                           (all those tied at the maximum) are all
                           irrelevant
        coverage           mean (max_{p in Y+} rank(p) - 1) / l          rows with |Y+| >= 1  other rows excluded
        average_precision  mean (1/|Y+|) sum_{p in Y+}                   ranked rows          other rows excluded
                           #{k in Y+ : S_k >= S_p} / rank(p)
        auc_macro          mean_j of the ROC AUC of label j:             labels with >= 1     other labels excluded
                           (#{(a, b) : Y_aj = 1, Y_bj = 0, S_aj > S_bj}  positive and >= 1
                           + #ties / 2) / (n+_j n-_j)                    negative row
        auc_instance       mean (#{(p, q) in Y+ x Y- : S_p > S_q}        ranked rows          other rows excluded
                           + #ties / 2) / (|Y+| |Y-|)
        precision_at_k     mean |top-k ∩ Y+| / k'                        all rows             --
        ndcg_at_k          mean DCG@k / IDCG@k, DCG@k = sum_{r <= k'}    rows with |Y+| >= 1  other rows excluded
                           rel_r / log2(r + 1), IDCG@k = sum_{r <=
                           min(k', |Y+|)} 1 / log2(r + 1)
        ================== ============================================= ===================  ==========================

    ``precision_at_k`` and ``ndcg_at_k`` exist for k = 1, 3, 5; ``rel_r`` is
    1 when the label at position r of the top-k is relevant. ``precision_at_k``
    averages over all rows: a row with no relevant label counts as precision 0
    (the Extreme Classification Repository's convention). Figures "over the
    rows with a relevant label" (as some papers and peers report) are
    ``precision_at_k`` divided by the fraction of such rows.

    Propensity-scored metrics. ``psprecision_at_k`` and ``psndcg_at_k`` (k = 1,
    3, 5, names in :data:`PS_METRIC_NAMES`) are the propensity-scored precision and nDCG of
    Jain, Prabhu & Varma (2016), "Extreme multi-label loss functions for
    recommendation, tagging, ranking & other missing label applications", KDD,
    as the Extreme Classification Repository computes them (pyxclib,
    ``xclib/evaluation/xc_metrics.py``: ``compute_inv_propesity``,
    ``psprecision``, ``psndcg``). A relevant label l at rank r gains its
    inverse propensity ``w_l = 1 / p_l`` instead of 1, ``p_l`` of
    :func:`propensities_from_counts` (Jain et al., Sec. 5). Following pyxclib,
    each metric is normalized by its best achievable value on the same rows:
    the ratio of the sum over rows of the model's score to the sum over rows
    of the score of the ideal ranking, which puts the row's relevant labels in
    decreasing order of ``w_l``::

        psprecision_at_k = sum_i sum_{r <= k'} w_(r) rel_r
                           / sum_i sum_{r <= min(k', |Y+_i|)} w*_(i, r)
        psndcg_at_k      = sum_i PSDCG_i@k / IDCG_i@k
                           / sum_i PSDCG*_i@k / IDCG_i@k,

    where ``w_(r)`` is the weight of the label at position r of the top-k,
    ``w*_(i, 1) >= w*_(i, 2) >= ...`` are the weights of row i's relevant
    labels, ``PSDCG_i@k = sum_{r <= k'} w_(r) rel_r / log2(r + 1)``,
    ``PSDCG*_i@k`` the same for the ideal ranking and ``IDCG_i@k`` the
    unit-gain ideal DCG of ``ndcg_at_k``. The normalization is over the whole
    data set (a ratio of sums), not per row, and it is what makes the value
    lie in [0, 1] (the unnormalized ``(1/k) sum w_(r) rel_r`` of Jain et al.'s
    eq. 6 has no fixed upper bound). Rows without a relevant label add 0 to
    both sums; a metric is ``nan`` when no row has a relevant label. The
    top-k is the same as for ``precision_at_k`` (ties broken by the lower
    label index; pyxclib leaves the order of ties to ``argpartition``).

    The propensities must come from the training labels, so they are never
    estimated from the evaluated ``Y``: that would weight a label by its
    frequency in the very rows being scored and give different weights to the
    same label on different evaluation sets. This function computes the
    propensity-scored metrics only when it is given ``propensities`` and
    raises if one is requested without them.

    Relation to scikit-learn and to the RBRL reference (MATLAB ``measures/*.m``):

    - ``hamming_loss``, ``subset_accuracy`` (``accuracy_score``), ``accuracy``
      (``jaccard_score(average='samples')``), ``f1_example``, ``f1_micro`` and
      ``f1_macro`` (``f1_score`` with ``average`` = ``'samples'``, ``'micro'``,
      ``'macro'``) equal scikit-learn's with ``zero_division=0``. The reference
      skips labels with a zero F1 denominator but still divides by l, which
      gives the same ``f1_macro``.
    - ``ranking_loss`` (ties count as mis-ordered), ``average_precision`` and
      ``(coverage_error - 1) / l`` equal scikit-learn's ``label_ranking_loss``,
      ``label_ranking_average_precision_score`` and ``coverage_error`` when
      every row is a ranked row (for coverage: has a relevant label).
      scikit-learn scores the other rows as perfect (0 loss, precision 1,
      coverage 0) instead of excluding them. The reference excludes them for
      ranking loss, average precision and one-error; its coverage
      (``coverage_new``, eq. 38 of the RBRL paper) gives -1/l to a row without
      relevant labels, which is excluded here.
    - ``one_error`` counts a tie at the maximum as correct if any tied label is
      relevant, as the reference does.
    - ``auc_macro`` equals ``roc_auc_score(average='macro')`` restricted to the
      labels with both classes. The reference counts a tied (positive,
      negative) pair as correct and divides by all l labels; the two agree on
      scores without ties when every label has both classes.
    - ``auc_instance`` is Park & Choi's instance AUC; ``1 - ranking_loss``
      differs from it only by counting ties as 0 instead of 1/2.
    - ``ndcg_at_k`` equals ``ndcg_score(Y, S, k=k)`` on scores without ties when
      every row has a relevant label. scikit-learn averages the gain over tied
      scores instead of breaking ties by label index, and scores a row without
      relevant labels 0 instead of excluding it.
    """
    names = _metric_names(metrics, with_propensities=propensities is not None)
    blocks, lazy = _row_blocks(Y, S, P)
    with_auc = "auc_macro" in names
    extra = ()
    if propensities is not None:
        weights = _inverse_propensities(propensities, np.shape(Y)[1])
        if any(name in PS_METRIC_NAMES for name in names):
            extra = (dask.delayed(weights),) if lazy else (weights,)
    calls = [(chunk_statistics, (*block, *extra)) for block in blocks]
    if with_auc:
        calls += [(_positive_scores, block[:2]) for block in blocks]
    results = _evaluate(calls, lazy)
    stats = combine(results[: len(blocks)])
    if with_auc:
        positives = _sort_positives(results[len(blocks) :], len(stats["tp"]))
        stats.update(_macro_auc_pair_counts(blocks, positives, lazy))
    values = finalize(stats)
    return {name: values[name] for name in names}


def predict_from_scores(S, threshold=0.0):
    """Threshold scores into 0/1 labels, giving every row at least one label.

    Parameters
    ----------
    S : ndarray or dask.array.Array of shape (n, l)
        Scores.
    threshold : float or array-like of shape (l,)
        A label is predicted where its score is strictly greater: one
        threshold for every label, or one per label (:func:`label_thresholds`).

    Returns
    -------
    ndarray or dask.array.Array of int8, shape (n, l)
        Same array type as ``S``. A row with no score above its threshold
        gets the label with the largest ``S - threshold`` (the first such
        label; with one threshold, the first arg-max of ``S``, the RBRL
        reference's rule), unless ``l = 1``: one label (a tag) may be absent.
    """
    threshold = np.asarray(threshold, dtype=np.float64)
    if isinstance(S, da.Array):
        _check_2d(S, "S")
        _check_thresholds(threshold, S.shape[1])
        return S.rechunk({1: -1}).map_blocks(_predict_block, threshold, dtype=np.int8)
    S = np.asarray(S)
    _check_2d(S, "S")
    _check_thresholds(threshold, S.shape[1])
    return _predict_block(S, threshold)


def _check_thresholds(threshold: np.ndarray, n_labels: int) -> None:
    """Raise unless ``threshold`` is one number or one per label (NaN-free)."""
    if threshold.shape not in ((), (n_labels,)):
        raise ValueError(f"threshold must be a number or one per label ({n_labels},), got shape {threshold.shape}")
    if np.isnan(threshold).any():
        raise ValueError("threshold must not be NaN")


#: A label keeps a threshold of its own (:func:`label_thresholds`) only where its F1 on the
#: rows given reaches this: where the model barely separates a label on its own training
#: rows, the label's F1-best cut lies deep among its irrelevant rows and floods the
#: predictions; a higher floor gives up the macro-F1 the labels' own thresholds bring.
#: Chosen by ``benchmarks/omf_table.py`` and ``benchmarks/auto_vs_peers.py``.
LABEL_F1_MIN = 0.2

#: Histogram bins of :func:`micro_f1_threshold` on dask scores.
THRESHOLD_BINS = 4096


def micro_f1_threshold(Y, S) -> float:
    """The score threshold ``t`` whose labels ``S > t`` have the highest micro-F1 against ``Y``.

    Micro-F1 pools every (row, label) entry, so the best ``t`` is found on the
    flattened scores: in memory exactly (every distinct score is a candidate); for dask
    arrays by map-reduced histograms of all scores and of the relevant ones
    (:data:`THRESHOLD_BINS` bins between the smallest and largest score, the
    candidates being the bin edges), so the scores are never gathered.
    :func:`predict_from_scores`'s at-least-one-label rule is not taken into
    account.

    Parameters
    ----------
    Y : array-like or dask array (n, l) of 0/1
    S : array-like or dask array (n, l) of float
        Scores of the same rows (e.g. a model's scores on its training rows).

    Returns
    -------
    float
        The threshold (0.0 when ``Y`` has no relevant or no irrelevant entry:
        every threshold is then as good on these rows).
    """
    if isinstance(S, da.Array) or isinstance(Y, da.Array):
        return _histogram_thresholds(Y, S)[0]
    y, s = _as_binary(Y, "Y").ravel(), _as_scores(S).ravel()
    if y.shape != s.shape:
        raise ValueError(f"Y and S must have the same shape, got {np.shape(Y)} and {np.shape(S)}")
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.size:
        return 0.0
    # Every distinct score c is a candidate (predict s >= c); counts by binary search in the
    # sorted scores, all and relevant: sorting values, not indices, is several times faster
    # than scikit-learn's precision_recall_curve here, with the same candidates.
    every, relevant = np.sort(s), np.sort(s[y])
    candidates = every[np.r_[True, every[1:] != every[:-1]]]
    predicted = y.size - np.searchsorted(every, candidates, side="left")
    true_pos = n_pos - np.searchsorted(relevant, candidates, side="left")
    best = int(np.argmax(2.0 * true_pos / (predicted + n_pos)))
    return float(np.nextafter(candidates[best], -np.inf))  # the rule is s > threshold


def label_thresholds(Y, S) -> np.ndarray:
    """dmlr's learned label rule: one threshold per label, for ``S > threshold``.

    Label ``j``'s threshold is the lower of two: the threshold with the
    highest micro-F1 over all labels (as :func:`micro_f1_threshold`), and the
    one with the highest F1 of label ``j`` alone (the SCut rule of Yang,
    SIGIR 2001, on the rows given). A label is thus predicted where its score
    clears the common threshold, or where it clears its own, lower one: rare
    labels, whose scores seldom reach the common threshold however well they
    are ranked, are predicted where their own rows say it pays; frequent
    labels keep at least the common threshold's predictions, which micro-F1
    favours. A label with no relevant row (too rare to tune), or whose own
    F1 on these rows is below :data:`LABEL_F1_MIN` (one the model does not
    separate, whose own cut would flood the predictions), falls back to the
    common threshold.

    The candidates are the :data:`THRESHOLD_BINS` bin edges between the
    smallest and the largest score (just below each edge), counted by
    per-label histograms of all scores and of the relevant ones: summed over
    the row chunks of dask arrays along a fixed tree (the scores are never
    gathered), computed at once in memory. Integer counts make the result
    the same however the rows are chunked.

    Parameters
    ----------
    Y : array-like or dask array (n, l) of 0/1
    S : array-like or dask array (n, l) of float
        Scores of the same rows (a model's scores on its training rows).

    Returns
    -------
    ndarray of float64, shape (l,)
    """
    common, own = _histogram_thresholds(Y, S)
    return np.minimum(own, common)


def _histogram_thresholds(Y, S) -> tuple[float, np.ndarray]:
    """(common micro-F1 threshold, per-label F1 thresholds) from per-label histograms on
    :data:`THRESHOLD_BINS` common bins (``inf`` for a label with no relevant row, or whose best
    F1 on these rows is below :data:`LABEL_F1_MIN`)."""
    if isinstance(S, da.Array) or isinstance(Y, da.Array):
        S, Y = da.asarray(S), da.asarray(Y)
        _check_2d(S, "S")
        if Y.shape != S.shape:
            raise ValueError(f"Y and S must have the same shape, got {Y.shape} and {S.shape}")
        # the scores are held where they were computed (a model's scores read its rows from
        # the store again): the range, then the histograms on that range, read them twice
        S = S.rechunk({1: -1}).persist()
        Y = Y.rechunk(S.chunks)
        lo, hi = (float(v) for v in dask.compute(S.min(), S.max()))
        parts = [
            dask.delayed(_threshold_counts)(s, y, lo, hi)
            for s, y in zip(S.to_delayed().ravel(), Y.to_delayed().ravel())
        ]
        counts, positives = dask.compute(tree_reduce(parts, dask.delayed(_add_counts)))[0]
    else:
        S = _as_scores(S)
        _check_2d(S, "S")
        if np.shape(Y) != S.shape:
            raise ValueError(f"Y and S must have the same shape, got {np.shape(Y)} and {S.shape}")
        lo, hi = float(S.min()), float(S.max())
        counts, positives = _threshold_counts(S, Y, lo, hi)
    return _thresholds_from_counts(counts, positives, lo, hi)


def _thresholds_from_counts(counts, positives, lo: float, hi: float) -> tuple[float, np.ndarray]:
    """(common, per-label) thresholds of :func:`_histogram_thresholds` from the per-label
    histograms of all scores (``counts``) and of the relevant ones (``positives``), int64 (l,
    :data:`THRESHOLD_BINS`), on bins from ``lo`` to ``hi``."""
    edges = np.linspace(lo, hi, THRESHOLD_BINS + 1)
    n_pos = positives.sum(axis=1)
    total_pos = int(n_pos.sum())
    if total_pos == 0 or total_pos == int(counts.sum()) or not hi > lo:
        common = 0.0
    else:
        common = float(_best_cut(counts.sum(axis=0, keepdims=True), positives.sum(axis=0, keepdims=True), edges)[0][0])
    own, f1 = _best_cut(counts, positives, edges)
    return common, np.where((n_pos > 0) & (f1 >= LABEL_F1_MIN), own, np.inf)


def chunk_label_thresholds(chunks, scores, *args) -> np.ndarray:
    """:func:`label_thresholds` of the scores of a chunk set's row blocks, computed where the
    blocks are.

    A model just fitted on the blocks (:class:`~dmlr.distributed.chunks.ChunkSet`) learns its
    thresholds from the rows they hold, instead of reading its training rows again from where
    they came from (a store, on a cluster). Two map-reduces over the blocks: the scores' range,
    then the per-label histograms on it (integer counts, summed along the blocks' tree): the
    same thresholds as :func:`label_thresholds` of the same scores, however the rows are blocked.

    Parameters
    ----------
    chunks : ChunkSet
        Blocks with ``Y`` int8 (m, l) of 0/1.
    scores : callable
        ``scores(block, *args)`` -> float64 (m, l), the block's scores.

    Returns
    -------
    ndarray of float64, shape (l,)
    """
    lo, hi = chunks.map_reduce(_block_score_range, scores, *args, combine=_widest_range)
    counts, positives = chunks.map_reduce(_block_threshold_counts, scores, lo, hi, *args)
    common, own = _thresholds_from_counts(counts, positives, lo, hi)
    return np.minimum(own, common)


def _block_score_range(block, scores, *args) -> tuple[float, float]:
    S = scores(block, *args)
    return (float(S.min()), float(S.max())) if S.size else (math.inf, -math.inf)


def _widest_range(a, b):
    return min(a[0], b[0]), max(a[1], b[1])


def _block_threshold_counts(block, scores, lo: float, hi: float, *args):
    return _threshold_counts(scores(block, *args), block.Y, lo, hi)


def _best_cut(counts: np.ndarray, positives: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of (rows, bins) histograms, the threshold of the highest F1 of ``S > t``, and
    that F1.

    Above edge ``k`` the bins from ``k`` up are predicted. F1 does not change across empty
    bins, so the best edge opens a run of equally good ones, up to the next non-empty bin:
    the threshold is the middle of that run, half-way between the scores on either side
    (up to a bin), not hard against the highest score left out.
    """
    bins = counts.shape[1]
    predicted = np.cumsum(counts[:, ::-1], axis=1)[:, ::-1]
    true_pos = np.cumsum(positives[:, ::-1], axis=1)[:, ::-1]
    n_pos = true_pos[:, :1]
    with np.errstate(invalid="ignore"):
        f1 = np.nan_to_num(2.0 * true_pos / (predicted + n_pos))
    best = np.argmax(f1, axis=1)
    rows = np.arange(len(best))
    # the first non-empty bin at or above each bin (bins: none above)
    filled = np.where(counts > 0, np.arange(bins), bins)
    next_filled = np.minimum.accumulate(filled[:, ::-1], axis=1)[:, ::-1]
    top = next_filled[rows, best]
    cut = 0.5 * (edges[best] + edges[np.minimum(top, bins)])
    return np.where(top > best, cut, np.nextafter(edges[best], -np.inf)), f1[rows, best]  # S > t keeps bin `best`


def _threshold_counts(S, Y, lo: float, hi: float):
    """Per-label histograms of one chunk's scores, all and relevant: two (l, bins) arrays."""
    S = _as_scores(S)
    Y = _as_binary(Y.toarray() if sp.issparse(Y) else Y, "Y")
    n_labels = S.shape[1]
    bins = THRESHOLD_BINS
    scale = bins / (hi - lo) if hi > lo else 0.0
    index = np.clip(((S - lo) * scale).astype(np.int64), 0, bins - 1) + np.arange(n_labels) * bins
    # int32 halves the (l, bins) tables a chunk sends; a chunk holds fewer than 2**31 rows
    counts = np.bincount(index.ravel(), minlength=n_labels * bins).astype(np.int32)
    positives = np.bincount(index[Y], minlength=n_labels * bins).astype(np.int32)
    return counts.reshape(n_labels, bins), positives.reshape(n_labels, bins)


def _add_counts(a, b):
    """The tree's node: the sum of two chunks' (or subtrees') histograms."""
    return (a[0] + b[0], a[1] + b[1])


def propensities_from_counts(
    label_counts, n_train: int, *, A: float = PROPENSITY_A, B: float = PROPENSITY_B
) -> np.ndarray:
    """Propensities of Jain et al. (2016) from the training label counts.

    ``p_l = 1 / (1 + C (N_l + B)^(-A))`` with ``C = (ln N - 1) (B + 1)^A``
    (Jain, Prabhu & Varma, KDD 2016, Sec. 5; pyxclib's
    ``compute_inv_propesity`` returns ``1 / p_l``). A frequent label has a
    propensity near 1, a rare one a small propensity and hence a large
    weight ``1 / p_l`` in the propensity-scored metrics.

    Parameters
    ----------
    label_counts : array-like of shape (l,)
        ``N_l``, the number of training rows with label l (non-negative
        integers, at most ``n_train``).
    n_train : int
        ``N``, the number of training rows; at least 3, so that
        ``ln N > 1`` and every propensity lies in (0, 1].
    A, B : float
        The model's parameters, both positive; the Extreme Classification
        Repository uses A = 0.55, B = 1.5 except for Wikipedia (0.5, 0.4)
        and Amazon (0.6, 2.6) data sets.

    Returns
    -------
    ndarray of float64, shape (l,)

    Raises
    ------
    ValueError
        On counts that are not a 1-D array of integers in [0, n_train], or
        ``n_train``, A or B out of range.
    """
    counts = np.asarray(label_counts)
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(f"label_counts must be a 1-D array of l >= 1 counts, got shape {counts.shape}")
    if isinstance(n_train, (bool, np.bool_)) or not isinstance(n_train, (int, np.integer)) or n_train < 3:
        raise ValueError(f"n_train must be an integer >= 3 (C = (ln N - 1)(B + 1)^A must be positive), got {n_train!r}")
    if not (
        np.issubdtype(counts.dtype, np.number)
        and np.all(np.isfinite(counts))
        and np.all(counts == np.round(counts))
        and np.all((counts >= 0) & (counts <= n_train))
    ):
        raise ValueError(f"label_counts must be integers in [0, n_train={n_train}]")
    for name, value in (("A", A), ("B", B)):
        if not (
            isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value) and value > 0
        ) or isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    C = (math.log(n_train) - 1.0) * (B + 1.0) ** A
    return 1.0 / (1.0 + C * (counts.astype(np.float64) + B) ** -A)


def label_propensities(Y, *, A: float = PROPENSITY_A, B: float = PROPENSITY_B) -> np.ndarray:
    """Propensities of every label, counted from training labels chunk by chunk.

    Parameters
    ----------
    Y : ndarray, scipy.sparse matrix or dask.array.Array of shape (N, l)
        The *training* labels, 0/1. A Dask array is reduced chunk by chunk
        (per-chunk label counts added in one ``dask.compute``); its chunks
        may be NumPy or scipy.sparse blocks.
    A, B : float
        See :func:`propensities_from_counts`.

    Returns
    -------
    ndarray of float64, shape (l,)
        :func:`propensities_from_counts` of the label counts and ``N``.

    Raises
    ------
    ValueError
        If Y is not 2-D, holds a value other than 0/1, or has fewer than 3
        rows.
    """
    if isinstance(Y, da.Array):
        _check_2d(Y, "Y")
        blocks = Y.rechunk({1: -1}).to_delayed().ravel()
        stats = combine(_evaluate([(_label_counts, (block,)) for block in blocks], lazy=True))
    else:
        if not sp.issparse(Y):
            Y = np.asarray(Y)
        _check_2d(Y, "Y")
        stats = _label_counts(Y)
    return propensities_from_counts(stats["label_counts"], int(stats["n_rows"]), A=A, B=B)


def chunk_statistics(Y, S, P, inverse_propensities=None) -> dict:
    """Additive sums of one row chunk, from which :func:`finalize` derives the metrics.

    Parameters
    ----------
    Y, S, P : ndarray of shape (m, l)
        True labels (0/1), scores (finite) and predicted labels (0/1) of
        the same rows.
    inverse_propensities : ndarray of float64, shape (l,), optional
        ``1 / p_l`` of every label; with it, the sums of the
        propensity-scored metrics are added.

    Returns
    -------
    dict of str to numpy scalar or ndarray
        Counts and sums whose elementwise sum over the chunks of a data set
        are the statistics of the whole data set (see :func:`combine`).

    Raises
    ------
    ValueError
        If Y or P holds a value other than 0/1 or S is not finite.
    """
    Y = _as_binary(Y, "Y")
    P = _as_binary(P, "P")
    S = _as_scores(S)
    return combine(
        [
            {
                **_classification_statistics(Y[rows], P[rows]),
                **_ranking_statistics(Y[rows], S[rows], inverse_propensities),
            }
            for rows in _row_slices(Y.shape)
        ]
    )


def combine(stats_list) -> dict:
    """Add per-chunk statistics elementwise, in the order given.

    Parameters
    ----------
    stats_list : sequence of dict
        Outputs of :func:`chunk_statistics` (at least one), all with the same keys.

    Returns
    -------
    dict
        The elementwise sums.
    """
    total = dict(stats_list[0])
    for stats in stats_list[1:]:
        for key in total:
            total[key] = total[key] + stats[key]
    return total


def finalize(stats) -> dict[str, float]:
    """Turn combined statistics into metric values.

    Parameters
    ----------
    stats : dict
        :func:`combine` of :func:`chunk_statistics` outputs, optionally
        updated with the macro-AUC pair counts (key ``"auc_twice_correct"``).

    Returns
    -------
    dict of str to float
        Every metric of :data:`METRIC_NAMES` (``auc_macro`` only when the
        pair counts are present) and of :data:`PS_METRIC_NAMES` when their
        sums are present; ``nan`` where nothing is averaged over.
    """
    n_labels = len(stats["tp"])
    n = int(stats["n_rows"])
    tp, fp, fn = (stats[key].astype(np.float64) for key in ("tp", "fp", "fn"))
    f1_per_label = label_f1(stats)
    micro_denominator = 2 * tp.sum() + fp.sum() + fn.sum()
    f1_zero = 0.0 if n else math.nan  # F1 of 0/0 (zero_division=0), unless there are no rows
    ranked = stats["ranked_rows"]
    positive = stats["positive_rows"]
    values = {
        "hamming_loss": _ratio(stats["mismatches"], n * n_labels),
        "subset_accuracy": _ratio(stats["exact_rows"], n),
        "accuracy": _ratio(stats["jaccard_sum"], n),
        "f1_example": _ratio(stats["f1_example_sum"], n),
        "f1_micro": _ratio(2 * tp.sum(), micro_denominator) if micro_denominator else f1_zero,
        "f1_macro": float(f1_per_label.mean()) if n else math.nan,
        "ranking_loss": _ratio(stats["ranking_loss_sum"], ranked),
        "one_error": _ratio(stats["one_error_rows"], ranked),
        "coverage": _ratio(stats["coverage_depth_sum"], positive * n_labels),
        "average_precision": _ratio(stats["average_precision_sum"], ranked),
        "auc_instance": _ratio(stats["auc_instance_sum"], ranked),
    }
    for k in TOP_K:
        values[f"precision_at_{k}"] = _ratio(stats[f"hits_at_{k}"], n * min(k, n_labels))
        values[f"ndcg_at_{k}"] = _ratio(stats[f"ndcg_at_{k}_sum"], positive)
        for name in (f"psprecision_at_{k}", f"psndcg_at_{k}"):
            if f"{name}_gain" in stats:
                values[name] = _ratio(stats[f"{name}_gain"], stats[f"{name}_ideal"])
    if "auc_twice_correct" in stats:
        values["auc_macro"] = _macro_auc(stats, n)
    return values


# ----------------------------------------------------------------------------
# Input handling
# ----------------------------------------------------------------------------


def _metric_names(metrics, *, with_propensities: bool = False) -> tuple[str, ...]:
    """Validate the requested metric names (by default all those the inputs allow)."""
    if metrics is None:
        return METRIC_NAMES + PS_METRIC_NAMES if with_propensities else METRIC_NAMES
    names = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    unknown = [name for name in names if name not in METRIC_NAMES + PS_METRIC_NAMES]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; choose from {list(METRIC_NAMES + PS_METRIC_NAMES)}")
    needing = [name for name in names if name in PS_METRIC_NAMES]
    if needing and not with_propensities:
        raise ValueError(
            f"{needing} need the label propensities of the training set; pass "
            f"propensities=dmlr.metrics.label_propensities(Y_train)"
        )
    return names


def _check_2d(array, name: str) -> None:
    """Raise unless ``array`` is 2-D with at least one column."""
    if array.ndim != 2 or array.shape[1] == 0:
        raise ValueError(f"{name} must be a 2-D (n, l) array with l >= 1, got shape {array.shape}")


def _row_blocks(Y, S, P):
    """Validate the inputs and split them into aligned row blocks.

    Returns
    -------
    blocks : list of tuple
        ``(Y, S, P)`` per row chunk: NumPy arrays, or ``Delayed`` chunks.
    lazy : bool
        Whether the blocks are ``Delayed`` (some input was a Dask array).
    """
    names = ("Y", "S", "P")
    arrays = [a if isinstance(a, da.Array) else np.asarray(a) for a in (Y, S, P)]
    for array, name in zip(arrays, names):
        _check_2d(array, name)
        if isinstance(array, da.Array) and any(math.isnan(c) for c in array.chunks[0]):
            raise ValueError(f"{name} has unknown chunk sizes; call compute_chunk_sizes() first")
    shapes = [array.shape for array in arrays]
    if len(set(shapes)) != 1:
        raise ValueError(f"Y, S and P must have the same shape, got {shapes}")
    reference = next((a for a in arrays if isinstance(a, da.Array)), None)
    if reference is None:
        return [tuple(arrays)], False
    arrays = [a if isinstance(a, da.Array) else da.from_array(a, chunks=reference.chunks) for a in arrays]
    for array, name in zip(arrays, names):
        if len(array.chunks[1]) != 1:
            raise ValueError(
                f"{name} must have a single column chunk, got column chunks {array.chunks[1]}; rechunk with {{1: -1}}"
            )
    if len({array.chunks[0] for array in arrays}) != 1:
        raise ValueError(f"Y, S and P must have identical row chunks, got {[array.chunks[0] for array in arrays]}")
    columns = [array.to_delayed().ravel() for array in arrays]
    return list(zip(*columns)), True


def _as_binary(array, name: str) -> np.ndarray:
    """Return a 0/1 array as bool, or raise."""
    array = np.asarray(array)
    if array.dtype != bool:
        if not np.all((array == 0) | (array == 1)):
            raise ValueError(f"{name} must hold only 0 and 1")
        array = array != 0
    return array


def _as_scores(array) -> np.ndarray:
    """Return finite scores as float64, or raise."""
    array = np.asarray(array, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise ValueError("S must be finite (no NaN or infinity)")
    return array


def _label_counts(Y) -> dict:
    """Rows and per-label positives of one 0/1 block (NumPy or scipy.sparse), or raise."""
    if sp.issparse(Y):
        Y = sp.csr_array(Y)
        if not np.all((Y.data == 0) | (Y.data == 1)):
            raise ValueError("Y must hold only 0 and 1")
        counts = np.bincount(Y.indices[Y.data != 0], minlength=Y.shape[1])
    else:
        counts = _as_binary(Y, "Y").sum(axis=0, dtype=np.int64)
    return {"n_rows": np.int64(Y.shape[0]), "label_counts": counts.astype(np.int64)}


def _inverse_propensities(propensities, n_labels: int) -> np.ndarray:
    """Validate l propensities in (0, 1] and return their inverses ``w_l = 1 / p_l``."""
    if propensities is None:
        raise ValueError("the propensity-scored metrics need propensities")
    p = np.asarray(propensities, dtype=np.float64)
    if p.shape != (n_labels,):
        raise ValueError(f"propensities must have shape ({n_labels},), one per label, got {p.shape}")
    if not np.all((p > 0) & (p <= 1)):  # also false for NaN
        raise ValueError("propensities must lie in (0, 1]; pass p_l, not the inverse propensities 1/p_l")
    return 1.0 / p


def _row_slices(shape):
    """Slices cutting ``shape[0]`` rows into blocks of about :data:`BLOCK_ENTRIES` entries (at least one)."""
    n_rows, n_labels = shape
    step = max(1, BLOCK_ENTRIES // n_labels)
    return [slice(start, start + step) for start in range(0, max(n_rows, 1), step)]


def _evaluate(calls, lazy: bool) -> list:
    """Run ``[(func, args), ...]``: eagerly, or as delayed tasks in one ``dask.compute``."""
    if not lazy:
        return [func(*args) for func, args in calls]
    return list(dask.compute(*[dask.delayed(func)(*args) for func, args in calls]))


def _ratio(numerator, denominator) -> float:
    """``numerator / denominator`` as a Python float, ``nan`` when the denominator is 0."""
    return float(numerator) / float(denominator) if denominator else math.nan


def _predict_block(S: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """:func:`predict_from_scores` of one NumPy block."""
    P = (S > threshold).astype(np.int8)
    if S.shape[1] > 1:  # with one label, "at least one" would label every row
        empty = np.flatnonzero(~P.any(axis=1))
        P[empty, np.argmax(S[empty] - threshold, axis=1)] = 1
    return P


# ----------------------------------------------------------------------------
# Per-chunk statistics
# ----------------------------------------------------------------------------


def _classification_statistics(Y: np.ndarray, P: np.ndarray) -> dict:
    """Sums for the metrics of the 0/1 predictions (bool Y, P of one chunk)."""
    both = Y & P
    intersection = both.sum(axis=1)
    union = (Y | P).sum(axis=1)
    size_sum = Y.sum(axis=1) + P.sum(axis=1)
    return {
        "n_rows": np.int64(Y.shape[0]),
        "mismatches": np.int64(np.count_nonzero(Y != P)),
        "exact_rows": np.int64(np.count_nonzero(union == intersection)),
        "jaccard_sum": _safe_divide(intersection, union).sum(),
        "f1_example_sum": _safe_divide(2 * intersection, size_sum).sum(),
        "tp": both.sum(axis=0, dtype=np.int64),
        "fp": (P & ~Y).sum(axis=0, dtype=np.int64),
        "fn": (Y & ~P).sum(axis=0, dtype=np.int64),
    }


def _safe_divide(numerator, denominator) -> np.ndarray:
    """Elementwise float division with 0 where the denominator is 0."""
    return np.divide(numerator, denominator, out=np.zeros(len(numerator)), where=denominator > 0)


def _ranking_statistics(Y: np.ndarray, S: np.ndarray, inverse_propensities=None) -> dict:
    """Sums for the metrics of the row-wise ranking of the labels by S."""
    y_sorted, n_ge, n_gt, rel_ge, rel_gt, top_labels = _ranked_positions(Y, S)
    n_labels = Y.shape[1]
    n_pos = y_sorted.sum(axis=1, dtype=np.int64)
    ranked = (n_pos > 0) & (n_pos < n_labels)
    pairs = (n_pos * (n_labels - n_pos))[ranked]
    irr_ge = np.where(y_sorted, n_ge - rel_ge, 0).sum(axis=1, dtype=np.int64)[ranked]
    irr_gt = np.where(y_sorted, n_gt - rel_gt, 0).sum(axis=1, dtype=np.int64)[ranked]
    precision = np.where(y_sorted, rel_ge / n_ge, 0.0).sum(axis=1)
    depth = np.where(y_sorted, n_ge, 0).max(axis=1).astype(np.int64)
    stats = {
        "ranked_rows": np.int64(np.count_nonzero(ranked)),
        "positive_rows": np.int64(np.count_nonzero(n_pos)),
        "ranking_loss_sum": (irr_ge / pairs).sum(),
        "auc_instance_sum": (1.0 - (irr_ge + irr_gt) / (2.0 * pairs)).sum(),
        "average_precision_sum": (precision[ranked] / n_pos[ranked]).sum(),
        "one_error_rows": np.int64(np.count_nonzero(ranked & (rel_ge[:, 0] == 0))),
        "coverage_depth_sum": (depth[n_pos > 0] - 1).sum(),
    }
    stats.update(_top_k_statistics(y_sorted, n_pos))
    if inverse_propensities is not None:
        stats.update(_propensity_statistics(Y, y_sorted, n_pos, top_labels, inverse_propensities))
    return stats


def _ranked_positions(Y: np.ndarray, S: np.ndarray):
    """Sort every row by decreasing score and count, per sorted position, what ranks above.

    Ties are broken by the lower label index. For the label at sorted
    position p of a row, with score s, the returned (m, l) arrays give:
    whether it is relevant, ``n_ge`` = #{k : S_k >= s}, ``n_gt`` =
    #{k : S_k > s}, and ``rel_ge``, ``rel_gt`` the same counts restricted
    to relevant labels. Last, the (m, min(max(TOP_K), l)) label indices of
    the first positions.
    """
    m, n_labels = S.shape
    order = np.argsort(-S, axis=1, kind="stable")
    y_sorted = np.take_along_axis(Y, order, axis=1)
    s_sorted = np.take_along_axis(S, order, axis=1)
    top_labels = order[:, : max(TOP_K)].copy()
    del order
    group_end = np.ones((m, n_labels), dtype=bool)
    group_end[:, :-1] = s_sorted[:, :-1] != s_sorted[:, 1:]
    del s_sorted
    group_start = np.ones((m, n_labels), dtype=bool)
    group_start[:, 1:] = group_end[:, :-1]
    position = np.arange(n_labels, dtype=np.int32)
    # first tie-group end at or after p, last tie-group start at or before p
    last_tied = np.minimum.accumulate(np.where(group_end, position, n_labels - 1)[:, ::-1], axis=1)[:, ::-1]
    first_tied = np.maximum.accumulate(np.where(group_start, position, 0), axis=1)
    relevant_before = np.zeros((m, n_labels + 1), dtype=np.int32)  # relevant in positions < q
    np.cumsum(y_sorted, axis=1, dtype=np.int32, out=relevant_before[:, 1:])
    n_ge = last_tied + 1
    rel_ge = np.take_along_axis(relevant_before, n_ge, axis=1)
    rel_gt = np.take_along_axis(relevant_before, first_tied, axis=1)
    return y_sorted, n_ge, first_tied, rel_ge, rel_gt, top_labels


def _discounts(n_positions: int):
    """``1 / log2(r + 1)`` for r = 1..n_positions, and their running sums (the unit-gain IDCG)."""
    discount = 1.0 / np.log2(np.arange(2, n_positions + 2))
    return discount, np.cumsum(discount)


def _top_k_statistics(y_sorted: np.ndarray, n_pos: np.ndarray) -> dict:
    """Hits and nDCG sums of the top-k positions, for every k in :data:`TOP_K`."""
    n_labels = y_sorted.shape[1]
    discount, ideal = _discounts(n_labels)
    has_positive = n_pos > 0
    stats = {}
    for k in TOP_K:
        top = y_sorted[:, : min(k, n_labels)]
        dcg = top @ discount[: top.shape[1]]
        best = ideal[np.minimum(n_pos[has_positive], top.shape[1]) - 1]
        stats[f"hits_at_{k}"] = np.int64(np.count_nonzero(top))
        stats[f"ndcg_at_{k}_sum"] = (dcg[has_positive] / best).sum()
    return stats


def _propensity_statistics(Y, y_sorted, n_pos, top_labels, weights) -> dict:
    """Gain and ideal-gain sums of the propensity-scored metrics, for every k in :data:`TOP_K`.

    ``weights`` are the inverse propensities ``w_l``; ``top_labels`` the
    label indices of the first sorted positions (see :func:`_ranked_positions`).
    The ideal ranking of a row puts its relevant labels in decreasing order
    of ``w_l``; only its first ``min(max(TOP_K), l)`` weights are needed.
    """
    n_labels = Y.shape[1]
    depth = top_labels.shape[1]
    gained = np.where(y_sorted[:, :depth], weights[top_labels], 0.0)
    # the best weights of each row, from its relevant entries only (Y is mostly 0 in XC data)
    rows, labels = np.nonzero(Y)
    relevant = weights[labels]
    order = np.lexsort((-relevant, rows))
    rows, relevant = rows[order], relevant[order]
    row_start = np.zeros(len(n_pos) + 1, dtype=np.int64)
    np.cumsum(n_pos, out=row_start[1:])
    position = np.arange(len(rows)) - row_start[rows]
    kept = position < depth
    best = np.zeros(gained.shape)
    best[rows[kept], position[kept]] = relevant[kept]
    discount, unit_ideal = _discounts(depth)
    has_positive = n_pos > 0
    stats = {}
    for k in TOP_K:
        cut = min(k, n_labels)
        norm = unit_ideal[np.minimum(n_pos[has_positive], cut) - 1]
        stats[f"psprecision_at_{k}_gain"] = gained[:, :cut].sum()
        stats[f"psprecision_at_{k}_ideal"] = best[:, :cut].sum()
        stats[f"psndcg_at_{k}_gain"] = (gained[has_positive, :cut] @ discount[:cut] / norm).sum()
        stats[f"psndcg_at_{k}_ideal"] = (best[has_positive, :cut] @ discount[:cut] / norm).sum()
    return stats


# ----------------------------------------------------------------------------
# Macro AUC (two passes)
# ----------------------------------------------------------------------------


def _macro_auc_pair_counts(blocks, positives, lazy: bool) -> dict:
    """Pass 2 over all chunks: per-label doubled counts of correctly ordered pairs.

    ``positives`` is the ``(indptr, scores)`` output of :func:`_sort_positives`.

    Macro AUC is not a sum over rows. It is computed exactly in two passes that
    never gather ``S``: the first pass (:func:`_positive_scores`, in the same ``dask.compute`` call as the
    statistics) collects only the scores of positive entries, nnz(Y) values,
    and sorts them per label; the second pass maps over the chunks and counts,
    per label, the (positive, negative) pairs in which the positive scores
    higher, plus one half per tie, with two binary searches of every positive
    among the chunk's sorted negatives of its label.
    """
    if lazy:
        positives = [dask.delayed(array) for array in positives]
    return combine(_evaluate([(_auc_chunk_counts, (*block[:2], *positives)) for block in blocks], lazy))


def _positive_scores(Y, S):
    """Pass 1: ``(labels, scores)`` of the positive entries of one chunk."""
    Y = _as_binary(Y, "Y")
    S = _as_scores(S)
    rows, labels = np.nonzero(Y)
    return labels, S[rows, labels]


def _sort_positives(parts, n_labels: int):
    """Concatenate the positive scores of all chunks, sorted by label then score.

    Returns
    -------
    indptr : ndarray of int64, shape (n_labels + 1,)
        The positives of label j are ``scores[indptr[j]:indptr[j + 1]]``.
    scores : ndarray of float64
    """
    labels = np.concatenate([part[0] for part in parts])
    scores = np.concatenate([part[1] for part in parts])
    order = np.lexsort((scores, labels))
    indptr = np.zeros(n_labels + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=n_labels), out=indptr[1:])
    return indptr, scores[order]


def _auc_chunk_counts(Y, S, indptr, scores) -> dict:
    """Pass 2: for each label, twice the number of correctly ordered pairs in one chunk.

    A (positive, negative) pair counts 2 when the positive scores higher
    and 1 on a tie; the doubling keeps the sums exact integers.
    """
    Y = _as_binary(Y, "Y")
    S = _as_scores(S)
    return combine(
        [{"auc_twice_correct": _auc_block_counts(Y[rows], S[rows], indptr, scores)} for rows in _row_slices(Y.shape)]
    )


def _auc_block_counts(Y: np.ndarray, S: np.ndarray, indptr, scores) -> np.ndarray:
    """:func:`_auc_chunk_counts` of one block, the negatives of each label given by its rows."""
    # per label, the block's negative scores in increasing order, then +inf for its positives
    negatives = np.sort(np.where(Y, np.inf, S).T, axis=1)
    twice_correct = np.zeros(len(indptr) - 1, dtype=np.int64)
    for j in np.flatnonzero(np.diff(indptr)):
        positives = scores[indptr[j] : indptr[j + 1]]
        below = np.searchsorted(negatives[j], positives, side="left")
        not_above = np.searchsorted(negatives[j], positives, side="right")
        twice_correct[j] = (below + not_above).sum()
    return twice_correct


def label_f1(stats) -> np.ndarray:
    """Per-label F1, 2 TP_j / (2 TP_j + FP_j + FN_j), 0 where that is 0/0 (``zero_division=0``).

    Parameters
    ----------
    stats : dict
        :func:`combine` of :func:`chunk_statistics` outputs.

    Returns
    -------
    float64 (l,)
    """
    tp, fp, fn = (stats[key].astype(np.float64) for key in ("tp", "fp", "fn"))
    denominator = 2 * tp + fp + fn
    return np.divide(2 * tp, denominator, out=np.zeros(len(tp)), where=denominator > 0)


def label_auc(stats) -> np.ndarray:
    """Per-label ROC AUC (ties count 1/2), nan for a label without both classes.

    Parameters
    ----------
    stats : dict
        Combined statistics with the macro-AUC pair counts (key ``"auc_twice_correct"``).

    Returns
    -------
    float64 (l,)
    """
    n = int(stats["n_rows"])
    n_pos = stats["tp"] + stats["fn"]
    pairs = (n_pos * (n - n_pos)).astype(np.float64)
    auc = np.full(len(pairs), np.nan)
    np.divide(stats["auc_twice_correct"], 2.0 * pairs, out=auc, where=pairs > 0)
    return auc


def _macro_auc(stats, n: int) -> float:
    """Mean ROC AUC over the labels that have both classes."""
    auc = label_auc(stats)
    valid = ~np.isnan(auc)
    if not valid.any():
        return math.nan
    return float(np.mean(auc[valid]))
