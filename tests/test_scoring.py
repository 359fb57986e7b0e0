"""Tests of dmlr.scoring: every dmlr metric as a scikit-learn scorer."""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import check_scoring
from sklearn.model_selection import KFold, cross_validate
from sklearn.multiclass import OneVsRestClassifier

from dmlr.metrics import LOSS_METRICS, METRIC_NAMES, PS_METRIC_NAMES, label_propensities, multilabel_metrics
from dmlr.scoring import PREDICTION_METRICS, get_scorer, make_scorer


def _problem(seed=0, n=90, d=6, l=5):
    """Labels that depend on X, so a linear model ranks them better than chance."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    Y = (X @ rng.standard_normal((d, l)) + 0.8 * rng.standard_normal((n, l)) > 0.3).astype(np.int64)
    Y[0] = 1  # every label has both classes in every training fold
    Y[1] = 0
    return X, Y


def _expected(name, Y, S, P, propensities=None):
    """The metric called directly on held-out labels, scores and predictions."""
    value = multilabel_metrics(Y, S, P, metrics=[name], propensities=propensities)[name]
    return -value if name in LOSS_METRICS else value


def test_cross_validate_with_every_dmlr_scorer_matches_the_metric_functions():
    X, Y = _problem()
    propensities = label_propensities(Y)
    scoring = {name: make_scorer(name, propensities=propensities) for name in METRIC_NAMES + PS_METRIC_NAMES}
    estimator = OneVsRestClassifier(LogisticRegression())
    folds = KFold(3, shuffle=True, random_state=0)
    result = cross_validate(estimator, X, Y, scoring=scoring, cv=folds, return_estimator=True, error_score="raise")
    for fold, (train, test) in enumerate(folds.split(X)):
        fitted = result["estimator"][fold]
        S, P = fitted.decision_function(X[test]), fitted.predict(X[test])
        for name in scoring:
            got = result[f"test_{name}"][fold]
            expected = _expected(name, Y[test], S, P, propensities)
            assert got == pytest.approx(expected, rel=1e-12, abs=1e-15), (name, fold)
    # the model is better than chance, and losses are reported negated
    assert result["test_auc_macro"].mean() > 0.6
    assert (result["test_ranking_loss"] < 0).all() and (result["test_hamming_loss"] < 0).all()


class HighThreshold(OneVsRestClassifier):
    """A model whose own label rule (score > 1) differs from thresholding scores at 0."""

    def predict(self, X):
        return (self.decision_function(X) > 1.0).astype(np.int64)


class DaskScores(BaseEstimator):
    """Returns a fitted model's scores as a Dask array of 30-row chunks, as dmlr models do for dask X."""

    def __init__(self, model=None):
        self.model = model

    def decision_function(self, X):
        return da.from_array(self.model.decision_function(X), chunks=(30, -1))


def test_prediction_metrics_use_predict_and_ranking_metrics_decision_function():
    X, Y = _problem(1)
    fitted = HighThreshold(LogisticRegression()).fit(X, Y)
    S = fitted.decision_function(X)
    P_one = fitted.predict(X)
    assert not np.array_equal(P_one, (S > 0).astype(np.int64))
    for name in PREDICTION_METRICS:
        assert get_scorer(name)(fitted, X, Y) == pytest.approx(_expected(name, Y, S, P_one)), name
    for name in ("ranking_loss", "average_precision", "precision_at_3", "auc_macro"):
        assert get_scorer(name)(fitted, X, Y) == pytest.approx(_expected(name, Y, S, Y)), name


def test_greater_is_better_and_sign():
    X, Y = _problem(2)
    fitted = OneVsRestClassifier(LogisticRegression()).fit(X, Y)
    S, P = fitted.decision_function(X), fitted.predict(X)
    for name in METRIC_NAMES:
        scorer = get_scorer(name)
        direct = multilabel_metrics(Y, S, P, metrics=[name])[name]
        assert scorer._sign == (-1 if name in LOSS_METRICS else 1), name
        assert scorer(fitted, X, Y) == pytest.approx(scorer._sign * direct), name
    assert set(LOSS_METRICS) == {"hamming_loss", "ranking_loss", "one_error", "coverage"}


def test_scorer_accepted_by_check_scoring_and_dask_predictions():
    X, Y = _problem(3)
    fitted = OneVsRestClassifier(LogisticRegression()).fit(X, Y)
    scorer = check_scoring(fitted, scoring=get_scorer("ndcg_at_3"))
    assert scorer is not None
    lazy = get_scorer("ndcg_at_3")(DaskScores(fitted), X, da.from_array(Y, chunks=(30, -1)))
    assert lazy == pytest.approx(get_scorer("ndcg_at_3")(fitted, X, Y), rel=1e-14)


def test_one_dimensional_binary_target_is_one_label():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(60) > 0).astype(np.int64)
    fitted = LogisticRegression().fit(X, y)
    accuracy = float(np.mean(fitted.predict(X) == y))
    assert get_scorer("hamming_loss")(fitted, X, y) == pytest.approx(-(1 - accuracy))
    assert get_scorer("subset_accuracy")(fitted, X, y) == pytest.approx(accuracy)
    # one label: no row has both a relevant and an irrelevant label
    assert math.isnan(get_scorer("ranking_loss")(fitted, X, y))


def test_scorer_errors():
    with pytest.raises(ValueError, match="unknown metric"):
        make_scorer("f1")
    with pytest.raises(ValueError, match="needs the label propensities"):
        make_scorer("psprecision_at_3")
    with pytest.raises(ValueError, match="needs the label propensities"):
        get_scorer("psndcg_at_1")
    X, Y = _problem(5)
    fitted = OneVsRestClassifier(LogisticRegression()).fit(X, Y)
    with pytest.raises(ValueError, match="shape \\(5,\\)"):
        make_scorer("psndcg_at_1", propensities=np.full(4, 0.5))(fitted, X, Y)
