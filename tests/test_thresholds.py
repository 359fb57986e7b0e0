"""Learned label thresholds: micro_f1_threshold, label_thresholds and the models' threshold="auto"."""

from __future__ import annotations

import tempfile
from pathlib import Path

import dask.array as da
import numpy as np
import pytest

import dmlr
from dmlr.metrics import label_thresholds, micro_f1_threshold
from dmlr.models import MMP, OML, RBRL, LinearMultiLabel, RankSVM


def _micro_f1(Y, P) -> float:
    tp = float((P * Y).sum())
    return 2.0 * tp / (P.sum() + Y.sum())


def _scores(n=300, n_labels=6, shift=3.0, seed=0):
    """Scores that rank well but sit ``shift`` above 0: thresholding at 0 labels almost everything."""
    rng = np.random.default_rng(seed)
    Y = (rng.random((n, n_labels)) < 0.25).astype(np.int8)
    S = shift + 1.5 * Y + rng.normal(size=Y.shape)
    return Y, S


def test_threshold_maximizes_micro_f1_over_every_candidate():
    Y, S = _scores()
    t = micro_f1_threshold(Y, S)
    best = _micro_f1(Y, (S > t).astype(np.int8))
    # every distinct score, and one below them all, as the threshold: none does better
    candidates = np.concatenate([[S.min() - 1.0], np.unique(S)])
    brute = max(_micro_f1(Y, (S > c).astype(np.int8)) for c in candidates)
    assert best == pytest.approx(brute, rel=1e-12)
    assert best > _micro_f1(Y, (S > 0).astype(np.int8)) + 0.2


def test_threshold_on_dask_scores_is_within_a_bin_of_the_exact_one():
    Y, S = _scores(n=2000)
    exact = _micro_f1(Y, (S > micro_f1_threshold(Y, S)).astype(np.int8))
    t = micro_f1_threshold(da.from_array(Y, chunks=(300, -1)), da.from_array(S, chunks=(300, -1)))
    assert _micro_f1(Y, (S > t).astype(np.int8)) == pytest.approx(exact, abs=2e-3)


def test_threshold_without_relevant_or_irrelevant_entries_is_zero():
    S = np.random.default_rng(0).normal(size=(5, 3))
    assert micro_f1_threshold(np.zeros((5, 3), np.int8), S) == 0.0
    assert micro_f1_threshold(np.ones((5, 3), np.int8), S) == 0.0


def _label_f1(y, p) -> float:
    return 2.0 * float((y & p).sum()) / max(int(y.sum() + p.sum()), 1)


def test_label_thresholds_are_the_lower_of_the_common_and_each_labels_f1_best():
    Y, S = _scores(n=200, n_labels=5)
    Y = Y.astype(bool)
    t = label_thresholds(Y, S)
    assert t.shape == (5,) and t.dtype == np.float64
    common = t.max()
    # the common threshold: as good as the exact micro-F1 one, up to a bin
    best_micro = _micro_f1(Y, (S > micro_f1_threshold(Y, S)).astype(np.int8))
    assert best_micro - 2e-3 <= _micro_f1(Y, (S > common).astype(np.int8)) <= best_micro
    for j in range(5):
        candidates = np.concatenate([[S[:, j].min() - 1.0], np.unique(S[:, j])])
        brute = max(_label_f1(Y[:, j], S[:, j] > c) for c in candidates)
        # alone, a label's threshold is its own F1-best: as good as the best distinct score, up to a bin
        alone = label_thresholds(Y[:, [j]], S[:, [j]])[0]
        assert brute - 0.01 <= _label_f1(Y[:, j], S[:, j] > alone) <= brute
        # among others, the lower of its own and the common one: never worse for it than the common
        assert _label_f1(Y[:, j], S[:, j] > t[j]) >= _label_f1(Y[:, j], S[:, j] > common)


def test_a_rare_label_is_predicted_where_a_common_threshold_never_predicts_it():
    rng = np.random.default_rng(3)
    Y = (rng.random((400, 4)) < [0.5, 0.5, 0.5, 0.03]).astype(np.int8)
    S = 4.0 * Y + rng.normal(size=Y.shape)
    S[:, 3] -= 5.0  # ranked as well as the others, but its scores sit below theirs
    common = micro_f1_threshold(Y, S)
    assert not (S[:, 3] > common).any()
    t = label_thresholds(Y, S)
    assert t[3] < common and np.all(t <= common)
    rare = Y[:, 3].astype(bool)
    assert _label_f1(rare, dmlr.metrics.predict_from_scores(S, common)[:, 3].astype(bool)) == 0.0
    assert _label_f1(rare, dmlr.metrics.predict_from_scores(S, t)[:, 3].astype(bool)) > 0.5


def test_a_label_with_no_relevant_row_falls_back_to_the_common_threshold():
    Y, S = _scores(n=200, n_labels=4)
    Y[:, 2] = 0  # too rare to tune
    t = label_thresholds(Y, S)
    assert t[2] == t.max() and t[2] == label_thresholds(Y[:, [0, 1, 3, 2]], S[:, [0, 1, 3, 2]])[3]
    best_micro = _micro_f1(Y, (S > micro_f1_threshold(Y, S)).astype(np.int8))
    assert _micro_f1(Y, (S > t[2]).astype(np.int8)) == pytest.approx(best_micro, abs=2e-3)


def test_label_thresholds_do_not_depend_on_the_chunks():
    Y, S = _scores(n=2000)
    t = label_thresholds(Y, S)
    for rows in (300, 1000, 2000):
        lazy = label_thresholds(da.from_array(Y, chunks=(rows, -1)), da.from_array(S, chunks=(rows, -1)))
        np.testing.assert_array_equal(lazy, t)


def _linear_problem(n=400, d=12, n_labels=5, seed=3):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[rng.random(X.shape) < 0.6] = 0.0
    Y = ((X @ rng.normal(size=(d, n_labels)) + 0.5 * rng.normal(size=(n, n_labels))) > 0.8).astype(np.int8)
    W = rng.normal(size=(d + 1, n_labels))  # the bias row last
    return sp.csr_matrix(X), Y, W


@pytest.mark.parametrize("backend, n_blocks", [("local", 1), ("local", 3), ("local", 7), ("dask", 3)])
def test_thresholds_of_a_chunk_sets_blocks_are_those_of_the_gathered_scores(request, backend, n_blocks):
    from dmlr.distributed.chunks import make_chunkset
    from dmlr.metrics import chunk_label_thresholds
    from dmlr.models.base import block_linear_scores, linear_scores

    X, Y, W = _linear_problem()
    where = {"client": request.getfixturevalue("client2")} if backend == "dask" else {}  # blocks on 2 workers
    chunks = make_chunkset(X, Y, fit_intercept=True, backend=backend, n_blocks=n_blocks, **where)
    try:
        t = chunk_label_thresholds(chunks, block_linear_scores, W)
    finally:
        chunks.close()
    np.testing.assert_array_equal(t, label_thresholds(Y, linear_scores(X, W, True)))


def test_rbrl_learns_its_thresholds_from_its_blocks_without_reading_x_again(monkeypatch):
    # the fitted model's thresholds are those of its scores on its training rows, computed
    # from the blocks of the fit: the training rows' scores are not asked for again
    X, Y, _ = _linear_problem()
    rescored = []
    monkeypatch.setattr(RBRL, "_label_scores", lambda self, X: rescored.append(X) or RBRL._scores_block(self, X))
    model = RBRL(alpha=1.0, scaling=None, max_iter=50).fit(X, Y)
    assert not rescored
    monkeypatch.undo()
    np.testing.assert_array_equal(model.threshold_, label_thresholds(Y, model.decision_function(X)))


def test_every_row_gets_the_label_closest_to_its_threshold():
    S = np.array([[0.0, 0.5, 0.9], [2.0, 0.0, 0.0]])
    t = np.array([1.0, 0.6, 1.5])
    # row 0: nothing clears its threshold; label 1 is 0.1 below its own, the closest
    np.testing.assert_array_equal(dmlr.metrics.predict_from_scores(S, t), [[0, 1, 0], [1, 0, 0]])
    with pytest.raises(ValueError, match="one per label"):
        dmlr.metrics.predict_from_scores(S, np.zeros(2))


@pytest.mark.parametrize("cls", [RankSVM, MMP, RBRL])
def test_models_learn_their_thresholds_and_keep_them_in_the_file(cls, tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 8))
    Y = (X @ rng.normal(size=(8, 5)) + rng.normal(size=(400, 5)) > 1.0).astype(np.int8)
    Y[0] = 1
    options = {"n_updates": 4000} if cls is not RBRL else {}
    auto = cls(**options).fit(X, Y)
    zero = cls(**options, threshold=0.0).fit(X, Y)
    np.testing.assert_array_equal(auto.coef_, zero.coef_)  # the threshold changes labels only
    S = auto.decision_function(X)
    np.testing.assert_array_equal(auto.threshold_, label_thresholds(Y, S))
    np.testing.assert_array_equal(zero.threshold_, np.zeros(5))
    f1_auto = _micro_f1(Y, auto.predict(X))
    assert f1_auto >= _micro_f1(Y, zero.predict(X))
    np.testing.assert_array_equal(auto.predict(X), dmlr.metrics.predict_from_scores(S, auto.threshold_))
    assert auto.predict(X).sum(axis=1).min() >= 1  # the at-least-one-label rule
    loaded = dmlr.load(auto.save(tmp_path / "m.npz"))
    np.testing.assert_array_equal(loaded.threshold_, auto.threshold_)
    np.testing.assert_array_equal(loaded.predict(X), auto.predict(X))


def _as_version_2(path, drop_param: bool, threshold_attr):
    """Rewrite a model file as dmlr wrote it in format version 2 (one threshold, or none)."""
    import json

    with np.load(path) as npz:
        contents = {k: npz[k] for k in npz.files}
    meta = json.loads(contents.pop("__dmlr__").tobytes())
    meta["format_version"] = 2
    contents.pop("threshold_")
    meta["arrays"].remove("threshold_")
    if drop_param:
        del meta["params"]["threshold"]
    if threshold_attr is not None:
        meta["attributes"]["threshold_"] = threshold_attr
    np.savez(path, __dmlr__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **contents)
    return path


def test_a_version_2_file_keeps_the_labels_it_predicted():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 6))
    Y = (X @ rng.normal(size=(6, 4)) > 0.5).astype(np.int8)
    Y[0] = 1
    rbrl = RBRL().fit(X, Y)  # version 2 RBRL: no threshold parameter, the rule S > 0
    loaded = dmlr.load(_as_version_2(rbrl.save(Path(tmp := tempfile.mkdtemp()) / "r.npz"), True, None))
    assert loaded.threshold == 0.0
    S = rbrl.decision_function(X)
    np.testing.assert_array_equal(loaded.predict(X), dmlr.metrics.predict_from_scores(S, 0.0))
    ranker = RankSVM(n_updates=2000).fit(X, Y)  # version 2 Rank-SVM: one learned threshold
    loaded = dmlr.load(_as_version_2(ranker.save(Path(tmp) / "k.npz"), False, 0.25))
    np.testing.assert_array_equal(loaded.threshold_, np.full(4, 0.25))
    with pytest.raises(dmlr.DmlrInputError, match="version 2"):
        dmlr.load(_as_version_2(ranker.save(Path(tmp) / "bad.npz"), False, "high"))


def test_search_units_learn_thresholds_only_for_label_metrics():
    from dmlr.paths import unit_label_rule

    assert unit_label_rule(RBRL, ["ranking_loss", "average_precision"]) == {"threshold": 0.0}
    assert unit_label_rule(RBRL, ["ranking_loss", "f1_macro"]) == {}  # the model's own rule is scored
    assert unit_label_rule(LinearMultiLabel, ["ranking_loss"]) == {}  # no threshold to skip
    assert unit_label_rule(OML, ["ranking_loss"]) == {}  # a fixed vote threshold, not a learned one


def test_a_label_the_model_does_not_separate_keeps_the_common_threshold():
    rng = np.random.default_rng(4)
    Y = (rng.random((600, 3)) < [0.4, 0.4, 0.05]).astype(np.int8)
    S = 3.0 * Y + rng.normal(size=Y.shape)
    S[:, 2] = rng.normal(size=600)  # a rare label its scores do not separate
    t = label_thresholds(Y, S)
    common = t.max()
    assert t[2] == common  # its own F1-best cut would label many rows for a few hits
    alone = label_thresholds(Y[:, [2]], S[:, [2]])  # alone, common and own coincide
    assert (S[:, 2] > alone[0]).mean() > 0.1 and _label_f1(Y[:, 2].astype(bool), S[:, 2] > alone[0]) < 0.2
