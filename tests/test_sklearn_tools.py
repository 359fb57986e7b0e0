"""scikit-learn's tools on dmlr's estimators, as a notebook would use them.

Pipeline + GridSearchCV over every estimator, ``cross_validate`` with dmlr
scorers, the other searches, joblib's Dask backend, dask arrays in and out,
pickling, and one label rule wherever labels are scored.
"""

import pickle

import dask.array as da
import numpy as np
import pytest
from scipy.stats import loguniform
from sklearn.base import clone
from sklearn.datasets import make_multilabel_classification
from sklearn.experimental import enable_halving_search_cv  # noqa: F401
from sklearn.model_selection import GridSearchCV, HalvingGridSearchCV, KFold, RandomizedSearchCV, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import dmlr
from dmlr.metrics import multilabel_metrics
from dmlr.model_selection import grid_search_cv
from dmlr.models import KNN, MMP, OMF, OML, RBRL, KernelRBRL, LinearMultiLabel, RankSVM
from dmlr.scoring import get_scorer

#: Every estimator, small enough for a test, with one parameter to search.
CASES = [
    (RBRL(max_iter=300, solver="spectral"), "alpha", [0.1, 10.0]),
    (KernelRBRL("rbf", max_iter=200, solver="spectral"), "gamma", [0.05, 0.5]),
    (RankSVM(n_updates=3000), "alpha", [1e-3, 1e-1]),
    (MMP(n_updates=3000), "n_updates", [300, 3000]),
    (LinearMultiLabel(n_epochs=3), "alpha", [1e-4, 1e-1]),
    (OML(), "k", [3, 9]),
    (KNN(), "k", [3, 9]),
    (OMF(n_components=4, n_epochs=5, eta0=0.05), "alpha_code", [0.1, 3.0]),
]
IDS = [type(est).__name__ for est, _, _ in CASES]


@pytest.fixture(scope="module")
def data():
    X, Y = make_multilabel_classification(n_samples=150, n_features=8, n_classes=5, n_labels=2, random_state=0)
    return X * 3.0 + 1.0, Y  # unscaled features, int64 labels


@pytest.mark.parametrize(("est", "name", "values"), CASES, ids=IDS)
def test_pipeline_in_grid_search_cv(data, est, name, values):
    X, Y = data
    pipe = make_pipeline(StandardScaler(), est)
    step = pipe.steps[-1][0]
    search = GridSearchCV(
        pipe,
        {f"{step}__{name}": values},
        cv=KFold(3, shuffle=True, random_state=0),
        scoring=get_scorer("average_precision"),
    ).fit(X, Y)
    assert search.best_params_[f"{step}__{name}"] in values
    scores = search.cv_results_["mean_test_score"]
    assert np.all(np.isfinite(scores)) and search.best_score_ == scores.max()
    P = search.predict(X)
    assert P.shape == Y.shape and P.dtype == Y.dtype
    # the refitted model is the one a fresh fit with the best parameters gives (seeded, deterministic)
    again = clone(pipe).set_params(**search.best_params_).fit(X, Y)
    np.testing.assert_array_equal(again.predict(X), P)
    np.testing.assert_allclose(again.decision_function(X), search.decision_function(X), rtol=1e-12)


@pytest.mark.parametrize(("est", "name", "values"), CASES, ids=IDS)
def test_dask_in_dask_out_and_pickle(data, est, name, values):
    X, Y = data
    model = clone(est).fit(X, Y)
    Xd = da.from_array(X, chunks=(40, -1))
    S, P = model.decision_function(Xd), model.predict(Xd)
    assert isinstance(S, da.Array) and isinstance(P, da.Array)
    np.testing.assert_allclose(S.compute(), model.decision_function(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(P.compute(), model.predict(X))
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


@pytest.mark.parametrize(("est", "name", "values"), CASES, ids=IDS)
def test_grid_search_cv_scores_with_the_models_own_label_rule(data, est, name, values):
    """dmlr's grid search works for every model and scores the labels ``predict`` gives."""
    X, Y = data
    splits = [(np.arange(50, 150), np.arange(50))]
    res = grid_search_cv(clone(est), X, Y, {name: values}, cv=splits, scoring="f1_micro", client="local", refit=False)
    assert len(res.results) == len(values)
    for record in res.results:
        model = clone(est).set_params(**record["params"]).fit(X[50:], Y[50:])
        f1 = multilabel_metrics(Y[:50], model.decision_function(X[:50]), model.predict(X[:50]), metrics=["f1_micro"])[
            "f1_micro"
        ]
        assert record["mean_score"] == pytest.approx(f1, rel=1e-9)


def test_cross_validate_with_dmlr_scorers_equals_the_metrics(data):
    X, Y = data
    cv = KFold(3, shuffle=True, random_state=1)
    scoring = {"ranking_loss": get_scorer("ranking_loss"), "f1_micro": get_scorer("f1_micro")}
    out = cross_validate(OMF(n_components=4, n_epochs=5, eta0=0.05), X, Y, cv=cv, scoring=scoring)
    for k, (train, test) in enumerate(cv.split(X)):
        model = OMF(n_components=4, n_epochs=5, eta0=0.05).fit(X[train], Y[train])
        want = multilabel_metrics(
            Y[test], model.decision_function(X[test]), model.predict(X[test]), metrics=["ranking_loss", "f1_micro"]
        )
        assert out["test_ranking_loss"][k] == pytest.approx(-want["ranking_loss"], rel=1e-12)
        assert out["test_f1_micro"][k] == pytest.approx(want["f1_micro"], rel=1e-12)


def test_randomized_and_halving_searches(data):
    X, Y = data
    rnd = RandomizedSearchCV(
        RBRL(max_iter=200, solver="spectral"),
        {"alpha": loguniform(1e-2, 1e1)},
        n_iter=3,
        cv=3,
        random_state=0,
        scoring=get_scorer("ranking_loss"),
    ).fit(X, Y)
    assert 1e-2 <= rnd.best_params_["alpha"] <= 1e1 and len(rnd.cv_results_["params"]) == 3
    halving = HalvingGridSearchCV(
        RankSVM(n_updates=2000), {"alpha": [1e-4, 1e-3, 1e-2, 1e-1]}, cv=3, factor=2, min_resources=60, random_state=0
    ).fit(X, Y)
    assert halving.n_iterations_ >= 2 and halving.best_params_["alpha"] in (1e-4, 1e-3, 1e-2, 1e-1)


def test_joblib_dask_backend_runs_the_search_on_the_cluster(data, client2):
    import joblib

    X, Y = data
    grid = {"alpha": [0.1, 1.0, 10.0]}

    def search():
        return GridSearchCV(
            RBRL(max_iter=200, solver="spectral"), grid, cv=3, n_jobs=2, scoring=get_scorer("average_precision")
        ).fit(X, Y)

    local = search()
    with joblib.parallel_backend("dask"):
        remote = search()
    np.testing.assert_allclose(remote.cv_results_["mean_test_score"], local.cv_results_["mean_test_score"], rtol=1e-10)
    assert remote.best_params_ == local.best_params_


def test_one_dimensional_targets(data):
    X, Y = data
    y = np.where(Y[:, 0] == 1, "yes", "no")
    model = RBRL(max_iter=200).fit(X, y)
    assert model.target_type_ == "binary" and list(model.classes_) == ["no", "yes"]
    s = model.decision_function(X)
    assert s.shape == (150,)
    np.testing.assert_array_equal(model.predict(X), np.where(s > 0, "yes", "no"))
    classes = Y[:, :3].argmax(axis=1)
    multi = RankSVM(n_updates=3000).fit(X, classes)
    assert multi.target_type_ == "multiclass" and multi.decision_function(X).shape == (150, 3)
    assert multi.score(X, classes) > 0.5  # far above a third


def test_fit_takes_no_execution_arguments_and_the_config_restores(data):
    X, Y = data
    with pytest.raises(TypeError):
        RBRL().fit(X, Y, client=None)
    before = dmlr.get_config()
    with dmlr.config_context(backend="local", n_blocks=3):
        assert dmlr.get_config()["n_blocks"] == 3
        three = RBRL(max_iter=50, tol=0, solver="paper").fit(X, Y)
    assert dmlr.get_config() == before
    one = RBRL(max_iter=50, tol=0, solver="paper").fit(X, Y)
    np.testing.assert_allclose(three.coef_, one.coef_, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="backend"):
        dmlr.set_config(backend="gpu")
    with pytest.raises(TypeError, match="unknown dmlr setting"):
        with dmlr.config_context(lambda1=1.0):
            pass


def test_evaluate_a_pipeline_with_its_final_estimators_label_rule(data):
    X, Y = data
    pipe = make_pipeline(StandardScaler(), OMF(n_components=4, n_epochs=5, eta0=0.05, label_rule="top_k", top_k=2)).fit(
        X, Y
    )
    got = dmlr.evaluate(pipe, (X, Y), metrics=["f1_micro", "ranking_loss"])
    S = pipe.decision_function(X)
    want = multilabel_metrics(Y, S, pipe.predict(X), metrics=["f1_micro", "ranking_loss"])
    assert got == pytest.approx(want, rel=1e-12)
    assert (pipe.predict(X).sum(axis=1) == 2).all()  # OMF's top-k rule, not a threshold at 0
