"""Learned label thresholds: micro_f1_threshold and the rankers' threshold="auto"."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import dmlr
from dmlr.metrics import micro_f1_threshold
from dmlr.models import MMP, RankSVM


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


@pytest.mark.parametrize("cls", [RankSVM, MMP])
def test_rankers_learn_their_threshold_and_keep_it_in_the_file(cls, tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 8))
    Y = (X @ rng.normal(size=(8, 5)) + rng.normal(size=(400, 5)) > 1.0).astype(np.int8)
    Y[0] = 1
    auto = cls(n_updates=4000).fit(X, Y)
    zero = cls(n_updates=4000, threshold=0.0).fit(X, Y)
    np.testing.assert_array_equal(auto.coef_, zero.coef_)  # the threshold changes labels only
    S = auto.decision_function(X)
    assert auto.threshold_ == micro_f1_threshold(Y, S) and zero.threshold_ == 0.0
    f1_auto = _micro_f1(Y, auto.predict(X))
    assert f1_auto >= _micro_f1(Y, zero.predict(X))
    np.testing.assert_array_equal(auto.predict(X), dmlr.metrics.predict_from_scores(S, auto.threshold_))
    loaded = dmlr.load(auto.save(tmp_path / "m.npz"))
    assert loaded.threshold_ == auto.threshold_
    np.testing.assert_array_equal(loaded.predict(X), auto.predict(X))
