"""Target shapes: a label matrix of one column (a tag) against a column of class labels."""

from __future__ import annotations

import numpy as np
import pytest

import dmlr
from dmlr.data.store import write_dataset
from dmlr.models import KNN, OML, RBRL


def _one_label(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    Y = (X[:, :1] + 0.3 * rng.normal(size=(n, 1)) > 0.8).astype(np.int8)
    return X, Y


def test_a_one_column_label_matrix_is_one_label_not_a_class_vector():
    X, Y = _one_label()
    model = RBRL().fit(X, Y)
    assert model.target_type_ == "multilabel" and model.classes_.tolist() == [0]
    P = model.predict(X)
    assert P.shape == (300, 1) and model.decision_function(X).shape == (300, 1)
    # one label may be absent: rows without it are not given it by the at-least-one rule
    assert 0 < P.mean() < 0.5
    assert dmlr.evaluate(model, (X, Y), metrics=["f1_micro"])["f1_micro"] > 0.7


def test_a_column_of_class_labels_is_still_a_class_vector():
    X, _ = _one_label()
    y = np.where(X[:, 0] > 0, "yes", "no")[:, None]
    model = RBRL().fit(X, y)
    assert model.target_type_ == "binary" and model.predict(X).shape == (300,)


def test_dmlr_fit_searches_a_one_label_store_by_the_labels_auc(tmp_path):
    X, Y = _one_label()
    store = write_dataset(tmp_path / "one.zarr", X, Y, splits={"train": np.arange(200), "test": np.arange(200, 300)})
    model = dmlr.fit(store, verbose=0)
    assert model.search_.scoring == "auc_macro"
    assert not np.isnan(model.cv_results_["mean_test_score"]).any()
    metrics = dmlr.evaluate(model, store, metrics=["f1_micro", "auc_macro"])
    assert metrics["auc_macro"] > 0.9 and metrics["f1_micro"] > 0.6


def test_a_search_whose_scoring_is_nan_everywhere_says_so():
    X, Y = _one_label()
    with pytest.raises(ValueError, match="'ranking_loss' is nan on every fold.*scoring='auc_macro'"):
        dmlr.fit((X, Y), scoring="ranking_loss", verbose=0)


def test_oml_needs_two_labels_and_says_so_knn_does_not():
    X, Y = _one_label()
    with pytest.raises(ValueError, match="at least 2 labels"):
        OML().fit(X, Y)
    assert KNN().fit(X, Y).predict(X).shape == (300, 1)
