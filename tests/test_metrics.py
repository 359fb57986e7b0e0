"""Tests of dmlr.metrics: scikit-learn agreement, hand-worked examples, dask == numpy."""

from __future__ import annotations

import math
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn import metrics as skm

from dmlr import metrics
from dmlr.metrics import METRIC_NAMES, multilabel_metrics, predict_from_scores

ANCHORS = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "rbrl_reference"
LOG2_3 = math.log2(3)


def _random_problem(seed, n=120, l=9, density=0.3, ties=False, ranked=True):
    """Random Y, S, P; every row has a relevant and an irrelevant label when ``ranked``."""
    rng = np.random.default_rng(seed)
    Y = (rng.random((n, l)) < density).astype(np.int8)
    if ranked:
        Y[:, 0] = 1
        Y[:, 1] = 0
        for row in Y:  # hide the forced columns among the others
            rng.shuffle(row)
    S = rng.standard_normal((n, l)) + Y
    if ties:
        S = np.round(S, 1)
    P = (rng.random((n, l)) < density).astype(np.int8)
    P[:3] = 0  # rows with an empty prediction exercise the 0/0 rules
    return Y, S, P


def _assert_same(a: dict, b: dict, tol=1e-12):
    assert a.keys() == b.keys()
    for name in a:
        if math.isnan(a[name]):
            assert math.isnan(b[name]), name
        else:
            assert a[name] == pytest.approx(b[name], abs=tol, rel=tol), name


# ----------------------------------------------------------------------------
# (a) agreement with scikit-learn where the definitions coincide
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("ties", [False, True])
def test_matches_sklearn(ties):
    Y, S, P = _random_problem(0, ties=ties)
    assert ((Y.sum(1) > 0) & (Y.sum(1) < Y.shape[1])).all()
    Yi, Pi = Y.astype(np.int64), P.astype(np.int64)  # scikit-learn needs int64, not int8
    got = multilabel_metrics(Y, S, P)
    l = Y.shape[1]
    expected = {
        "hamming_loss": skm.hamming_loss(Yi, Pi),
        "subset_accuracy": skm.accuracy_score(Yi, Pi),
        "accuracy": skm.jaccard_score(Yi, Pi, average="samples", zero_division=0),
        "f1_example": skm.f1_score(Yi, Pi, average="samples", zero_division=0),
        "f1_micro": skm.f1_score(Yi, Pi, average="micro", zero_division=0),
        "f1_macro": skm.f1_score(Yi, Pi, average="macro", zero_division=0),
        "ranking_loss": skm.label_ranking_loss(Yi, S),
        "coverage": (skm.coverage_error(Yi, S) - 1) / l,
        "average_precision": skm.label_ranking_average_precision_score(Yi, S),
        "auc_macro": skm.roc_auc_score(Yi, S, average="macro"),
    }
    if not ties:  # scikit-learn's nDCG averages over tied scores
        expected.update({f"ndcg_at_{k}": skm.ndcg_score(Yi, S, k=k) for k in (1, 3, 5)})
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name


def test_f1_macro_counts_labels_without_any_positive_as_zero():
    Y, S, P = _random_problem(1)
    Y[:, 4] = 0
    P[:, 4] = 0
    got = multilabel_metrics(Y, S, P, metrics=["f1_macro", "f1_micro"])
    Yi, Pi = Y.astype(np.int64), P.astype(np.int64)
    assert got["f1_macro"] == pytest.approx(skm.f1_score(Yi, Pi, average="macro", zero_division=0))
    assert got["f1_micro"] == pytest.approx(skm.f1_score(Yi, Pi, average="micro", zero_division=0))


def test_auc_instance_is_mean_rowwise_roc_auc():
    Y, S, _ = _random_problem(2, ties=True)
    expected = np.mean([skm.roc_auc_score(y.astype(np.int64), s) for y, s in zip(Y, S)])
    assert multilabel_metrics(Y, S, Y, metrics="auc_instance")["auc_instance"] == pytest.approx(expected)


def test_precision_at_k_against_explicit_top_k():
    Y, S, _ = _random_problem(3, ties=True)
    for k in (1, 3, 5):
        top = np.argsort(-S, axis=1, kind="stable")[:, :k]
        expected = np.take_along_axis(Y, top, axis=1).sum() / (k * len(Y))
        assert multilabel_metrics(Y, S, Y)[f"precision_at_{k}"] == pytest.approx(expected)


# ----------------------------------------------------------------------------
# (b) hand-worked examples
# ----------------------------------------------------------------------------


def test_one_error_tie_rule_and_exclusions():
    Y = np.array([[0, 1, 0], [0, 1, 0], [1, 0, 1], [1, 1, 1], [0, 0, 0]])
    S = np.array(
        [
            [0.9, 0.9, 0.1],  # max tied by labels 0 and 1, 1 relevant: correct
            [0.5, 0.2, 0.5],  # max tied by labels 0 and 2, both irrelevant: error
            [0.3, 0.8, 0.1],  # top label 1 irrelevant: error
            [0.3, 0.2, 0.1],  # all relevant: excluded
            [0.3, 0.2, 0.1],
        ]
    )  # none relevant: excluded
    # 2 errors / 3 ranked rows
    assert multilabel_metrics(Y, S, Y, metrics="one_error")["one_error"] == pytest.approx(2 / 3)


def test_coverage_excludes_rows_without_relevant_labels():
    Y = np.array([[0, 1, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 0]])
    S = np.array(
        [
            [0.4, 0.3, 0.2, 0.1],  # lowest relevant: label 3, rank #{S >= 0.1} = 4 -> 3/4
            [0.1, 0.2, 0.3, 0.4],  # label 3, rank 1 -> 0/4
            [0.1, 0.2, 0.3, 0.4],  # no relevant label: excluded
            [0.5, 0.5, 0.5, 0.1],
        ]
    )  # label 2, rank #{S >= 0.5} = 3 (ties count) -> 2/4
    # (3/4 + 0 + 2/4) / 3 = 5/12
    got = multilabel_metrics(Y, S, Y, metrics="coverage")["coverage"]
    assert got == pytest.approx(5 / 12)
    keep = [0, 1, 3]
    assert got == pytest.approx((skm.coverage_error(Y[keep].astype(np.int64), S[keep]) - 1) / 4)


def test_ranking_metrics_exclude_all_positive_and_all_negative_rows():
    Y = np.array([[1, 0, 1], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
    S = np.array([[0.9, 0.5, 0.1], [0.2, 0.2, 0.7], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3]])
    got = multilabel_metrics(Y, S, Y)
    # row 0: pairs (0,1) 0.9 > 0.5 ok, (2,1) 0.1 <= 0.5 wrong -> loss 1/2
    # row 1: pairs (0,1) tie -> wrong, (0,2) 0.2 <= 0.7 wrong -> loss 2/2
    # rows 2, 3 excluded: (1/2 + 1) / 2 = 3/4
    assert got["ranking_loss"] == pytest.approx(3 / 4)
    # row 0: label 0 rank 1, 1 relevant at or above -> 1; label 2 rank 3, 2 relevant -> 2/3; AP = 5/6
    # row 1: label 0 rank #{S >= 0.2} = 3, 1 relevant -> AP = 1/3;  mean = (5/6 + 1/3) / 2 = 7/12
    assert got["average_precision"] == pytest.approx(7 / 12)
    # row 0: top label 0 relevant -> 0; row 1: top label 2 irrelevant -> 1;  1/2
    assert got["one_error"] == pytest.approx(1 / 2)
    # scikit-learn scores the excluded rows as perfect instead
    Yi = Y.astype(np.int64)
    assert skm.label_ranking_loss(Yi, S) == pytest.approx((1 / 2 + 1 + 0 + 0) / 4)
    assert skm.label_ranking_loss(Yi[:2], S[:2]) == pytest.approx(got["ranking_loss"])
    assert skm.label_ranking_average_precision_score(Yi[:2], S[:2]) == pytest.approx(got["average_precision"])


def test_auc_instance_hand_worked():
    Y = np.array([[1, 0, 1], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
    S = np.array([[0.9, 0.5, 0.1], [0.2, 0.2, 0.7], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3]])
    # row 0: (0,1) 0.9 > 0.5 -> 1, (2,1) 0.1 < 0.5 -> 0: 1/2
    # row 1: (0,1) tie -> 1/2, (0,2) 0.2 < 0.7 -> 0: (1/2)/2 = 1/4
    # rows 2, 3 excluded: (1/2 + 1/4) / 2 = 3/8
    assert multilabel_metrics(Y, S, Y, metrics="auc_instance")["auc_instance"] == pytest.approx(3 / 8)


def test_auc_macro_skips_labels_with_one_class():
    Y = np.array([[1, 1, 0], [0, 1, 0], [1, 1, 0], [0, 1, 1]])
    S = np.array([[0.8, 0.1, 0.1], [0.3, 0.2, 0.5], [0.3, 0.3, 0.3], [0.5, 0.4, 0.2]])
    # label 0: positives {0.8, 0.3}, negatives {0.3, 0.5}:
    #   (0.8,0.3) 1 + (0.8,0.5) 1 + (0.3,0.3) tie 1/2 + (0.3,0.5) 0 = 2.5 of 4 -> 0.625
    # label 1: all positive, excluded
    # label 2: positive 0.2 above negative 0.1 only, of {0.1, 0.5, 0.3} -> 1/3
    # (0.625 + 1/3) / 2 = 23/48
    got = multilabel_metrics(Y, S, Y, metrics="auc_macro")["auc_macro"]
    assert got == pytest.approx(23 / 48)
    assert got == pytest.approx(skm.roc_auc_score(Y[:, [0, 2]].astype(np.int64), S[:, [0, 2]]))


def test_precision_and_ndcg_at_k_hand_worked():
    Y = np.array([[1, 0, 1, 0, 0, 1], [0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]])
    S = np.array(
        [
            [0.6, 0.5, 0.4, 0.3, 0.2, 0.1],
            [0.3, 0.3, 0.3, 0.3, 0.3, 0.3],  # all tied: top-k = labels 0..k-1, no hit
            [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
        ]
    )  # no relevant label: 0 hits, excluded from nDCG
    got = multilabel_metrics(Y, S, Y)
    # row 0 hits: top-1 {0} 1, top-3 {0,1,2} 2, top-5 {0..4} 2; rows 1, 2: 0; over 3 rows
    assert got["precision_at_1"] == pytest.approx(1 / 3)
    assert got["precision_at_3"] == pytest.approx((2 / 3) / 3)
    assert got["precision_at_5"] == pytest.approx((2 / 5) / 3)
    # row 0: DCG@1 = 1 = IDCG@1; DCG@3 = DCG@5 = 1/log2(2) + 1/log2(4) = 1.5,
    # IDCG@3 = IDCG@5 = 1 + 1/log2(3) + 1/2 (3 relevant); row 1: 0; row 2 excluded
    assert got["ndcg_at_1"] == pytest.approx(1 / 2)
    assert got["ndcg_at_3"] == pytest.approx(1.5 / (1.5 + 1 / LOG2_3) / 2)
    assert got["ndcg_at_5"] == pytest.approx(1.5 / (1.5 + 1 / LOG2_3) / 2)


def test_precision_at_k_with_fewer_labels_than_k():
    Y = np.array([[1, 0]])
    S = np.array([[0.2, 0.9]])
    got = multilabel_metrics(Y, S, Y)
    # top-1 = {1}: 0 hits; top-3 = top-5 = {1, 0}: 1 hit of min(k, 2) = 2
    assert (got["precision_at_1"], got["precision_at_3"], got["precision_at_5"]) == (0.0, 0.5, 0.5)
    # DCG@3 = 0/log2(2) + 1/log2(3), IDCG@3 = 1 (one relevant label)
    assert got["ndcg_at_1"] == 0.0
    assert got["ndcg_at_3"] == pytest.approx(1 / LOG2_3)


def test_empty_valid_sets_give_nan():
    Y = np.zeros((2, 3), dtype=np.int8)
    S = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]])
    got = multilabel_metrics(Y, S, Y)
    for name in (
        "ranking_loss",
        "one_error",
        "coverage",
        "average_precision",
        "auc_macro",
        "auc_instance",
        "ndcg_at_1",
        "ndcg_at_3",
        "ndcg_at_5",
    ):
        assert math.isnan(got[name]), name
    # nothing to predict and nothing predicted: F1 is 0 by the 0/0 rule, the rest perfect
    assert (got["hamming_loss"], got["subset_accuracy"]) == (0.0, 1.0)
    assert (got["f1_micro"], got["f1_macro"], got["f1_example"], got["accuracy"]) == (0.0, 0.0, 0.0, 0.0)
    assert all(isinstance(value, float) for value in got.values())


def test_predict_from_scores_empty_row_rule():
    S = np.array(
        [
            [-1.0, 0.5, 2.0],
            [-0.3, -0.1, -0.1],  # nothing > 0: first arg-max, label 1
            [0.0, 0.0, -2.0],
        ]
    )  # 0 is not > 0: first arg-max, label 0
    expected = np.array([[0, 1, 1], [0, 1, 0], [1, 0, 0]], dtype=np.int8)
    P = predict_from_scores(S)
    assert P.dtype == np.int8
    np.testing.assert_array_equal(P, expected)
    # threshold 1: row 0 keeps only label 2; row 1 again falls back to label 1
    np.testing.assert_array_equal(predict_from_scores(S, threshold=1.0)[:2], [[0, 0, 1], [0, 1, 0]])
    lazy = predict_from_scores(da.from_array(S, chunks=(2, 1)))
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), expected)


# ----------------------------------------------------------------------------
# (c), (d) the dask path
# ----------------------------------------------------------------------------

ROW_CHUNKS = (7, 13, 50)


def _sparse_problem(seed=4):
    """70 rows with rare labels (label 0 has no positive in two chunks) and tied scores."""
    rng = np.random.default_rng(seed)
    n, l = sum(ROW_CHUNKS), 11
    Y = (rng.random((n, l)) < np.linspace(0.02, 0.5, l)).astype(np.int8)
    Y[: ROW_CHUNKS[0] + ROW_CHUNKS[1], 0] = 0  # label 0: positives in the last chunk only
    Y[40] = 1  # an all-positive row
    Y[10] = 0  # an all-negative row
    S = np.round(rng.standard_normal((n, l)) + Y, 1)
    P = predict_from_scores(S)
    return Y, S, P


def _to_dask(*arrays):
    return [da.from_array(a, chunks=(ROW_CHUNKS, -1)) for a in arrays]


def test_dask_equals_numpy_with_uneven_chunks():
    Y, S, P = _sparse_problem()
    _assert_same(multilabel_metrics(*_to_dask(Y, S, P)), multilabel_metrics(Y, S, P))


def test_mixed_numpy_and_dask_inputs():
    Y, S, P = _sparse_problem()
    Sd = _to_dask(S)[0]
    _assert_same(multilabel_metrics(Y, Sd, predict_from_scores(Sd)), multilabel_metrics(Y, S, P))


def test_dask_with_distributed_client():
    distributed = pytest.importorskip("distributed")
    Y, S, P = _sparse_problem()
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None):
        got = multilabel_metrics(*_to_dask(Y, S, P))
    _assert_same(got, multilabel_metrics(Y, S, P))


def test_dask_path_works_chunk_by_chunk(monkeypatch):
    Y, S, P = _sparse_problem()
    seen = {"chunk_statistics": [], "_auc_chunk_counts": []}
    for name, shapes in seen.items():
        original = getattr(metrics, name)

        def recording(Yc, Sc, *rest, _original=original, _shapes=shapes):
            _shapes.append(np.shape(Sc))
            return _original(Yc, Sc, *rest)

        monkeypatch.setattr(metrics, name, recording)
    computes = []
    original_compute = dask.compute
    monkeypatch.setattr(dask, "compute", lambda *a, **k: computes.append(len(a)) or original_compute(*a, **k))
    got = multilabel_metrics(*_to_dask(Y, S, P))
    chunk_shapes = sorted((rows, Y.shape[1]) for rows in ROW_CHUNKS)
    # one call per row chunk, each seeing only that chunk of S
    assert sorted(seen["chunk_statistics"]) == chunk_shapes
    assert sorted(seen["_auc_chunk_counts"]) == chunk_shapes
    # statistics (+ positive scores) in one compute, AUC pair counts in a second
    assert computes == [2 * len(ROW_CHUNKS), len(ROW_CHUNKS)]
    _assert_same(got, multilabel_metrics(Y, S, P))


def test_metrics_subset_skips_auc_pass(monkeypatch):
    Y, S, P = _sparse_problem()
    calls = []
    monkeypatch.setattr(metrics, "_auc_chunk_counts", lambda *a: calls.append(1))
    got = multilabel_metrics(*_to_dask(Y, S, P), metrics=["f1_micro", "ndcg_at_3"])
    assert list(got) == ["f1_micro", "ndcg_at_3"] and not calls


def test_blocks_within_a_chunk_add_up(monkeypatch):
    Y, S, P = _sparse_problem()
    whole = multilabel_metrics(Y, S, P)
    monkeypatch.setattr(metrics, "BLOCK_ENTRIES", 3 * Y.shape[1])  # blocks of 3 rows
    _assert_same(multilabel_metrics(Y, S, P), whole)


# ----------------------------------------------------------------------------
# (e) input validation
# ----------------------------------------------------------------------------


def test_validation_errors():
    Y, S, P = _random_problem(5, n=20, l=4)
    with pytest.raises(ValueError, match="same shape"):
        multilabel_metrics(Y, S[:, :3], P)
    with pytest.raises(ValueError, match="2-D"):
        multilabel_metrics(Y[:, 0], S[:, 0], P[:, 0])
    with pytest.raises(ValueError, match="Y must hold only 0 and 1"):
        multilabel_metrics(2 * Y - 1, S, P)  # the reference's {-1, +1} coding
    with pytest.raises(ValueError, match="P must hold only 0 and 1"):
        multilabel_metrics(Y, S, P * 2)
    bad = S.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="finite"):
        multilabel_metrics(Y, bad, P)
    with pytest.raises(ValueError, match="unknown metric"):
        multilabel_metrics(Y, S, P, metrics=["f1_micro", "auc"])


def test_dask_validation_errors():
    Y, S, P = _random_problem(6, n=20, l=4)
    Yd = da.from_array(Y, chunks=(10, -1))
    with pytest.raises(ValueError, match="identical row chunks"):
        multilabel_metrics(Yd, da.from_array(S, chunks=(5, -1)), P)
    with pytest.raises(ValueError, match="single column chunk"):
        multilabel_metrics(Yd, da.from_array(S, chunks=(10, 2)), P)
    unknown = Yd[Yd[:, 0] >= 0]
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        multilabel_metrics(unknown, S, P)
    with pytest.raises(ValueError, match="Y must hold only 0 and 1"):
        multilabel_metrics(2 * Yd - 1, S, P)


# ----------------------------------------------------------------------------
# the RBRL reference's printed metrics (emotions test split)
# ----------------------------------------------------------------------------

REFERENCE_NAMES = {
    "hamming_loss": "HammingLoss",
    "subset_accuracy": "SubsetAccuracy",
    "accuracy": "AccuracyExample",
    "f1_micro": "F1_Micro_Label",
    "f1_macro": "F1_Macro_Label",
    "f1_example": "F1_Example",
    "ranking_loss": "Ranking_Loss",
    "coverage": "Coverage",
    "average_precision": "Average_Precision",
    "one_error": "One_Error",
    "auc_macro": "AUC_Macro_Label",
}


@pytest.mark.realdata
@pytest.mark.skipif(not ANCHORS.is_dir(), reason="RBRL reference anchors not available")
@pytest.mark.parametrize("model", ["linear", "kernel"])
def test_matches_rbrl_reference_on_emotions(model):
    scipy_io = pytest.importorskip("scipy.io")
    Y = (scipy_io.loadmat(ANCHORS / "emotions.mat")["Y_test"] > 0).astype(np.int8)
    S = np.loadtxt(ANCHORS / f"{model}_pre_F_test.txt")
    labels = (np.loadtxt(ANCHORS / f"{model}_pre_Label_test.txt") > 0).astype(np.int8)
    summary = dict(
        line.split(" = ", 1) for line in (ANCHORS / f"{model}_summary.txt").read_text().splitlines() if " = " in line
    )
    P = predict_from_scores(S)
    np.testing.assert_array_equal(P, labels)
    got = multilabel_metrics(Y, S, P, metrics=list(REFERENCE_NAMES))
    for name, key in REFERENCE_NAMES.items():
        assert got[name] == pytest.approx(float(summary[key]), abs=1e-14), name


def test_metric_names_are_all_computed():
    Y, S, P = _random_problem(7, n=30, l=6)
    got = multilabel_metrics(Y, S, P)
    assert tuple(got) == METRIC_NAMES
    assert all(0.0 <= value <= 1.0 for value in got.values())


# ----------------------------------------------------------------------------
# propensity-scored precision and nDCG
# ----------------------------------------------------------------------------

PS_NAMES = ("psprecision_at_1", "psprecision_at_3", "psprecision_at_5", "psndcg_at_1", "psndcg_at_3", "psndcg_at_5")


def test_propensities_hand_worked():
    # Jain et al. (2016): p_l = 1 / (1 + C (N_l + B)^-A), C = (ln N - 1)(B + 1)^A
    counts, n_train = np.array([0, 1, 10, 100]), 100
    C = (math.log(100) - 1) * 2.5**0.55
    expected = [1 / (1 + C * (n_l + 1.5) ** -0.55) for n_l in (0, 1, 10, 100)]
    np.testing.assert_allclose(metrics.propensities_from_counts(counts, n_train), expected, rtol=1e-14)
    # label 2, written out: C = (4.60517 - 1) * 1.65526 = 5.96750; 11.5^-0.55 = 0.260985
    assert metrics.propensities_from_counts(counts, n_train)[2] == pytest.approx(1 / (1 + 5.96750 * 0.260985), rel=1e-5)
    C = (math.log(100) - 1) * 4**0.5  # A = 0.5, B = 3: (N_l + 3)^-0.5 = 1/2 for N_l = 1
    assert metrics.propensities_from_counts(counts, n_train, A=0.5, B=3)[1] == pytest.approx(1 / (1 + C / 2))


def test_label_propensities_numpy_scipy_dask_agree():
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(11)
    Y = (rng.random((70, 9)) < np.linspace(0.0, 0.6, 9)).astype(np.int8)  # label 0 never occurs
    counts = Y.sum(axis=0)
    expected = metrics.propensities_from_counts(counts, 70, A=0.6, B=2.6)
    for array in (
        Y,
        Y.astype(bool),
        sp.csr_matrix(Y),
        da.from_array(Y, chunks=(ROW_CHUNKS, 4)),
        da.from_array(sp.csr_matrix(Y), chunks=(20, -1), asarray=False),
    ):
        np.testing.assert_allclose(metrics.label_propensities(array, A=0.6, B=2.6), expected, rtol=1e-15)
    with pytest.raises(ValueError, match="only 0 and 1"):
        metrics.label_propensities(da.from_array(2 * Y, chunks=(10, -1)))
    with pytest.raises(ValueError, match="only 0 and 1"):
        metrics.label_propensities(sp.csr_matrix(2 * Y))


def test_propensity_validation():
    with pytest.raises(ValueError, match="n_train"):
        metrics.propensities_from_counts([0, 1], 2)  # ln 2 < 1 would give propensities above 1
    with pytest.raises(ValueError, match=r"\[0, n_train"):
        metrics.propensities_from_counts([0, 11], 10)
    with pytest.raises(ValueError, match=r"\[0, n_train"):
        metrics.propensities_from_counts([0.5, 1], 10)
    with pytest.raises(ValueError, match="A must be"):
        metrics.propensities_from_counts([0, 1], 10, A=0)
    with pytest.raises(ValueError, match="B must be"):
        metrics.propensities_from_counts([0, 1], 10, B=-1)
    Y, S, P = _random_problem(12, n=20, l=4)
    with pytest.raises(ValueError, match="need the label propensities"):
        multilabel_metrics(Y, S, P, metrics=["precision_at_1", "psndcg_at_3"])
    with pytest.raises(ValueError, match="shape \\(4,\\)"):
        multilabel_metrics(Y, S, P, propensities=np.ones(3))
    with pytest.raises(ValueError, match="not the inverse"):
        multilabel_metrics(Y, S, P, propensities=[1.0, 2.0, 4.0, 0.5])
    with pytest.raises(ValueError, match="not the inverse"):
        multilabel_metrics(Y, S, P, metrics="f1_micro", propensities=[1.0, np.nan, 1.0, 1.0])


def test_ps_metrics_hand_worked():
    # propensities p = (1, 1/2, 1/4, 1/5): weights w = 1/p = (1, 2, 4, 5)
    propensities = np.array([1.0, 0.5, 0.25, 0.2])
    Y = np.array([[1, 0, 1, 0], [0, 1, 1, 1], [0, 0, 0, 0]])
    S = np.array(
        [
            [0.9, 0.8, 0.1, 0.2],  # ranking 0, 1, 3, 2: relevant at ranks 1 (w 1) and 4 (w 4)
            [0.3, 0.1, 0.2, 0.4],  # ranking 3, 0, 2, 1: relevant at ranks 1 (w 5), 3 (w 4), 4 (w 2)
            [0.1, 0.2, 0.3, 0.4],
        ]
    )  # no relevant label: adds 0 to every sum
    got = multilabel_metrics(Y, S, Y, metrics=PS_NAMES, propensities=propensities)
    # ideal rankings by weight: row 0 (4, 1), row 1 (5, 4, 2)
    # PSP@1: gains 1 + 5 = 6, ideal 4 + 5 = 9
    assert got["psprecision_at_1"] == pytest.approx(6 / 9)
    # PSP@3: gains row 0: 1, row 1: 5 + 4 = 9 -> 10; ideal (4 + 1) + (5 + 4 + 2) = 16
    assert got["psprecision_at_3"] == pytest.approx(10 / 16)
    # PSP@5 (k' = 4 labels): gains (1 + 4) + (5 + 4 + 2) = 16 = ideal
    assert got["psprecision_at_5"] == pytest.approx(1.0)
    L3, L5 = math.log2(3), math.log2(5)
    n0 = 1 + 1 / L3  # unit-gain IDCG of row 0 (2 relevant labels), at k >= 2
    n1 = 1 + 1 / L3 + 1 / 2  # row 1 (3 relevant labels), at k >= 3
    ideal = (4 + 1 / L3) / n0 + (5 + 4 / L3 + 2 / 2) / n1
    # PSnDCG@1: unit IDCG@1 = 1; (1 + 5) / (4 + 5)
    assert got["psndcg_at_1"] == pytest.approx(6 / 9)
    # PSnDCG@3: row 0 gains 1 at rank 1; row 1 gains 5 at rank 1, 4 at rank 3 (4 / log2 4 = 2)
    assert got["psndcg_at_3"] == pytest.approx((1 / n0 + (5 + 2) / n1) / ideal)
    # PSnDCG@5: row 0 adds 4 at rank 4, row 1 adds 2 at rank 4
    assert got["psndcg_at_5"] == pytest.approx(((1 + 4 / L5) / n0 + (7 + 2 / L5) / n1) / ideal)


def _dense_ps_reference(Y, S, propensities, k):
    """PSP@k and PSnDCG@k row by row, as pyxclib's psprecision / psndcg (ties by label index)."""
    w = 1.0 / propensities
    gain_p = ideal_p = gain_n = ideal_n = 0.0
    for y, s in zip(Y, S):
        order = sorted(range(len(y)), key=lambda j: (-s[j], j))[:k]
        best = sorted((w[j] for j in range(len(y)) if y[j]), reverse=True)[:k]
        gains = [w[j] * y[j] for j in order]
        gain_p += sum(gains)
        ideal_p += sum(best)
        if best:
            unit = sum(1 / math.log2(r + 2) for r in range(len(best)))
            gain_n += sum(g / math.log2(r + 2) for r, g in enumerate(gains)) / unit
            ideal_n += sum(g / math.log2(r + 2) for r, g in enumerate(best)) / unit
    return gain_p / ideal_p, gain_n / ideal_n


@pytest.mark.parametrize("ties", [False, True])
def test_ps_metrics_match_dense_reference(ties):
    Y, S, P = _random_problem(13, n=80, l=8, density=0.25, ties=ties, ranked=False)
    propensities = metrics.propensities_from_counts(np.arange(8) * 7, 60)
    got = multilabel_metrics(Y, S, P, propensities=propensities)
    assert tuple(got) == METRIC_NAMES + PS_NAMES
    for k in (1, 3, 5):
        psp, psndcg = _dense_ps_reference(Y, S, propensities, k)
        assert got[f"psprecision_at_{k}"] == pytest.approx(psp, rel=1e-12)
        assert got[f"psndcg_at_{k}"] == pytest.approx(psndcg, rel=1e-12)
        assert 0 < got[f"psprecision_at_{k}"] < 1


def test_ps_metrics_with_unit_propensities_reduce_to_ndcg():
    # w = 1: PSDCG = DCG and the ideal sum counts the rows with a relevant label
    Y, S, P = _sparse_problem()
    got = multilabel_metrics(Y, S, P, propensities=np.ones(Y.shape[1]))
    for k in (1, 3, 5):
        assert got[f"psndcg_at_{k}"] == pytest.approx(got[f"ndcg_at_{k}"], rel=1e-12)


def test_ps_metrics_dask_chunks_equal_one_chunk(monkeypatch):
    Y, S, P = _sparse_problem()
    propensities = metrics.label_propensities(Y[::2])
    whole = multilabel_metrics(Y, S, P, propensities=propensities)
    _assert_same(multilabel_metrics(*_to_dask(Y, S, P), propensities=propensities), whole)
    monkeypatch.setattr(metrics, "BLOCK_ENTRIES", 3 * Y.shape[1])  # blocks of 3 rows within a chunk
    _assert_same(multilabel_metrics(Y, S, P, propensities=propensities), whole)


def test_ps_metrics_nan_without_relevant_labels():
    Y = np.zeros((2, 3), dtype=np.int8)
    S = np.array([[0.1, 0.2, 0.3], [0.3, 0.2, 0.1]])
    got = multilabel_metrics(Y, S, Y, metrics=PS_NAMES, propensities=[0.5, 0.5, 0.5])
    assert all(math.isnan(value) for value in got.values())
