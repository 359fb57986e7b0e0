"""Online Matrix Factorization (seed 004): eq. 1, its gradients, the closed-form codes,
Algorithm 1 streaming from Zarr (in-process and on a cluster), Algorithm 2 and persistence."""

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp

import dmlr
from dmlr.data.store import open_dataset
from dmlr.data.synthetic import make_multilabel
from dmlr.errors import DmlrInputError
from dmlr.models.base import load_model
from dmlr.models.omf import OMF, apply_rule, cross_validate_omf
from dmlr.objectives import omf as obj


def _problem(m=7, k=5, l=4, s=3, sparse=False, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, k))
    if sparse:
        X[rng.random((m, k)) < 0.6] = 0.0
        X = sp.csr_matrix(X)
    Y = (rng.random((m, l)) < 0.4).astype(np.int8)
    return X, Y, rng.normal(size=(k, s)), rng.normal(size=(l, s)), rng.normal(size=(m, s))


def _low_rank(n=600, k=20, l=8, r=3, seed=0):
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, r))
    X = Z @ rng.normal(size=(r, k)) + 0.1 * rng.normal(size=(n, k))
    Y = (Z @ rng.normal(size=(r, l)) > 0.8).astype(np.int8)
    return X, Y


# -- the per-chunk math ------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_gradients_of_eq1_match_central_differences(sparse):
    X, Y, P, Q, H = _problem(sparse=sparse)
    alpha, lam = 0.3, 0.7
    gP, gQ = obj.objective_gradients(X, Y, P, Q, H, alpha, lam)
    eps = 1e-6
    for name, A, G in (("P", P, gP), ("Q", Q, gQ)):
        num = np.zeros_like(A)
        for idx in np.ndindex(A.shape):
            Ap, Am = A.copy(), A.copy()
            Ap[idx] += eps
            Am[idx] -= eps
            args_p = (Ap, Q) if name == "P" else (P, Ap)
            args_m = (Am, Q) if name == "P" else (P, Am)
            num[idx] = (obj.objective(X, Y, *args_p, H, alpha, lam) - obj.objective(X, Y, *args_m, H, alpha, lam)) / (
                2 * eps
            )
        np.testing.assert_allclose(G, num, rtol=1e-6, atol=1e-6, err_msg=name)


def test_sparse_objective_equals_dense():
    X, Y, P, Q, H = _problem(sparse=True)
    assert obj.objective(X, Y, P, Q, H, 0.4, 0.1) == pytest.approx(
        obj.objective(X.toarray(), Y, P, Q, H, 0.4, 0.1), rel=1e-12
    )


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.9])
def test_closed_form_codes_minimise_the_h_subproblem(alpha):
    X, Y, P, Q, _ = _problem(m=4)
    lam = 0.3
    H = obj.latent_codes(X, Y, P, Q, alpha, lam)
    for i in range(X.shape[0]):

        def f(h, i=i):
            return obj.chunk_loss(X[i : i + 1], Y[i : i + 1], P, Q, h[None, :], alpha, lam)

        res = scipy.optimize.minimize(f, np.zeros(P.shape[1]), method="BFGS", options={"gtol": 1e-10})
        np.testing.assert_allclose(H[i], res.x, atol=1e-5)
        assert f(H[i]) <= res.fun + 1e-9


def test_prediction_is_algorithm_2():
    X, _, P, Q, _ = _problem()
    xi = 0.5
    h = np.linalg.solve(xi * np.eye(P.shape[1]) + P.T @ P, P.T @ X.T).T
    np.testing.assert_allclose(obj.embed(X, P, xi), h, rtol=1e-10)
    np.testing.assert_allclose(X @ obj.prediction_matrix(P, Q, xi), h @ Q.T, rtol=1e-10)


def test_sgd_step_is_a_gradient_step_on_eq1():
    X, Y, P, Q, _ = _problem()
    alpha, lam, lr = 0.3, 0.2, 0.01
    H = obj.latent_codes(X, Y, P, Q, alpha, lam)
    b = X.shape[0]
    gP, gQ = obj.objective_gradients(X, Y, P, Q, H, alpha, lam)
    P1, Q1, loss = obj.sgd_step(X, Y, P, Q, alpha, lam, lr, n_rows=b)  # one minibatch = the whole set
    np.testing.assert_allclose(P1, P - lr * gP / b, rtol=1e-12)
    np.testing.assert_allclose(Q1, Q - lr * gQ / b, rtol=1e-12)
    assert loss == pytest.approx(obj.chunk_loss(X, Y, P, Q, H, alpha, lam))
    assert obj.learning_rate(0, 0.5, 2.0) == 0.5 and obj.learning_rate(4, 0.5, 2.0) == pytest.approx(0.5 / 5)


# -- Algorithm 1 ----------------------------------------------------------------------


def test_objective_decreases_over_epochs_on_a_low_rank_set():
    X, Y = _low_rank()
    # one minibatch per epoch (gradient descent in P, Q, exact minimisation in H): eq. 1 must
    # go down at every epoch for a small enough step
    gd = OMF(
        n_components=3,
        label_weight=0.5,
        alpha=1e-3,
        eta0=0.01,
        decay=0.0,
        n_epochs=30,
        batch_size=600,
        shuffle_window=0,
        random_state=1,
    ).fit(X, Y)
    h = np.asarray(gd.objective_history_)
    assert np.all(np.diff(h) < 0), h
    # minibatch SGD (the paper's setting): a large drop, then at most SGD noise (1%) upwards
    m = OMF(
        n_components=3, label_weight=0.5, alpha=1e-3, eta0=0.02, decay=1.0, n_epochs=8, batch_size=16, random_state=1
    ).fit(X, Y)
    h = np.asarray(m.objective_history_)
    assert len(h) == 8 and m.n_epochs_ == 8 and m.n_updates_ == 8 * -(-600 // 16)
    assert h[1] < 0.3 * h[0] and np.all(np.diff(h) < 0.01 * h[1:]) and h[-1] < h[1], h
    # and the factorization predicts the labels
    from dmlr.metrics import multilabel_metrics, predict_from_scores

    S = m.decision_function(X)
    assert multilabel_metrics(Y, S, predict_from_scores(S), metrics=["auc_macro"])["auc_macro"] > 0.9


def test_same_seed_same_model_other_seed_other_model():
    X, Y = _low_rank(n=200)
    kw = {"n_components": 3, "n_epochs": 2, "eta0": 0.02, "shuffle_window": 64}
    a, b = OMF(random_state=3, **kw).fit(X, Y), OMF(random_state=3, **kw).fit(X, Y)
    np.testing.assert_array_equal(a.P_, b.P_)
    c = OMF(random_state=4, **kw).fit(X, Y)
    assert not np.allclose(a.P_, c.P_)


@pytest.mark.parametrize("sparse", [False, True])
def test_fit_on_zarr_equals_fit_on_numpy_whatever_the_chunking(tmp_path, sparse):
    path = make_multilabel(
        tmp_path / "s.zarr", n_samples=700, n_features=15, n_labels=6, sparse=sparse, density=0.3, chunk_rows=64, seed=1
    )
    X, Y = open_dataset(path).arrays("train")
    kw = {
        "n_components": 4,
        "n_epochs": 2,
        "batch_size": 16,
        "shuffle_window": 96,
        "eta0": 0.05,
        "random_state": 2,
        "fit_intercept": True,
    }
    lazy = OMF(**kw).fit(X, Y)
    Xn, Yn = X.compute(), Y.compute()
    Xn = sp.csr_matrix(Xn.to_scipy_sparse()) if hasattr(Xn, "to_scipy_sparse") else np.asarray(Xn)
    for chunk_rows in (50, 1000):
        with dmlr.config_context(chunk_rows=chunk_rows):
            eager = OMF(**kw).fit(Xn, Yn)
        np.testing.assert_array_equal(lazy.P_, eager.P_)
        np.testing.assert_array_equal(lazy.Q_, eager.Q_)
        assert lazy.objective_history_ == eager.objective_history_
    # dask in, dask out
    S = lazy.decision_function(X)
    assert hasattr(S, "dask")
    np.testing.assert_allclose(S.compute(), lazy.decision_function(Xn), rtol=1e-12)
    np.testing.assert_array_equal(lazy.predict(X).compute(), lazy.predict(Xn))


def _fit_pid(stream):
    import os

    return os.getpid()


def test_fit_on_the_cluster_equals_in_process(tmp_path, client2):
    import os

    from dmlr.distributed.stream import ChunkStream, run_streaming

    path = make_multilabel(tmp_path / "s.zarr", n_samples=500, n_features=10, n_labels=5, chunk_rows=64, seed=3)
    X, Y = open_dataset(path).arrays("train")
    assert run_streaming(_fit_pid, ChunkStream(X, Y)) != os.getpid()  # auto: a worker runs the loop
    kw = {"n_components": 4, "n_epochs": 2, "batch_size": 8, "shuffle_window": 64, "eta0": 0.05, "random_state": 5}
    remote = OMF(**kw).fit(X, Y)
    with dmlr.config_context(backend="local"):
        local = OMF(**kw).fit(X, Y)
    np.testing.assert_array_equal(remote.P_, local.P_)
    np.testing.assert_array_equal(remote.Q_, local.Q_)
    assert remote.objective_history_ == local.objective_history_


def test_partial_fit_continues_exactly():
    X, Y = _low_rank(n=300)
    kw = {"n_components": 3, "batch_size": 16, "shuffle_window": 64, "eta0": 0.02, "random_state": 7}
    full = OMF(n_epochs=3, **kw).fit(X, Y)
    part = OMF(n_epochs=2, **kw).fit(X, Y).partial_fit(X, Y)
    np.testing.assert_array_equal(full.P_, part.P_)
    np.testing.assert_array_equal(full.Q_, part.Q_)
    assert full.objective_history_ == part.objective_history_
    assert (part.n_epochs_, part.n_updates_) == (3, full.n_updates_)
    fresh = OMF(n_epochs=1, **kw).partial_fit(X, Y)  # unfitted: starts like fit
    np.testing.assert_array_equal(fresh.P_, OMF(n_epochs=1, **kw).fit(X, Y).P_)


def test_save_load_round_trip_then_continue(tmp_path):
    X, Y = _low_rank(n=200)
    m = OMF(n_components=3, n_epochs=2, eta0=0.02, label_rule="threshold", threshold=0.3, alpha_code=0.2).fit(X, Y)
    loaded = load_model(m.save(tmp_path / "omf.npz"))
    assert isinstance(loaded, OMF) and loaded.get_params() == m.get_params()
    np.testing.assert_array_equal(loaded.P_, m.P_)
    assert loaded.objective_history_ == m.objective_history_ and loaded.n_updates_ == m.n_updates_
    np.testing.assert_array_equal(loaded.decision_function(X), m.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), m.predict(X))
    np.testing.assert_array_equal(loaded.partial_fit(X, Y).P_, m.partial_fit(X, Y).P_)


def test_prediction_rules():
    S = np.array([[0.1, 0.9, 0.5, 0.5], [0.2, 0.1, 0.0, -1.0]])
    np.testing.assert_array_equal(apply_rule(S, "top_k", top_k=2), [[0, 1, 1, 0], [1, 1, 0, 0]])
    np.testing.assert_array_equal(apply_rule(S, "top_k", top_k=9), np.ones((2, 4)))
    np.testing.assert_array_equal(apply_rule(S, "threshold", threshold=0.4), [[0, 1, 1, 1], [0, 0, 0, 0]])
    X, Y = _low_rank(n=100)
    m = OMF(n_components=3, n_epochs=1, eta0=0.02, label_rule="top_k", top_k=2).fit(X, Y)
    assert (m.predict(X).sum(axis=1) == 2).all()


def test_the_default_thresholds_are_learned_per_label_on_the_training_rows():
    """threshold="auto": threshold_ is dmlr.metrics.label_thresholds of the training rows' scores,
    and predict (the "threshold" rule, rows may get no label) uses it; a number is kept as given."""
    X, Y = _low_rank(n=120)
    m = OMF(n_components=3, n_epochs=2, eta0=0.02).fit(X, Y)
    assert m.label_rule == "threshold" and m.threshold == "auto"
    S = m.decision_function(X)
    np.testing.assert_array_equal(m.threshold_, dmlr.metrics.label_thresholds(Y, S))
    np.testing.assert_array_equal(m.predict(X), (S > m.threshold_).astype(np.int8))
    fixed = OMF(n_components=3, n_epochs=2, eta0=0.02, threshold=0.3).fit(X, Y)
    np.testing.assert_array_equal(fixed.threshold_, np.full(Y.shape[1], 0.3))


def test_bad_input_gives_a_clear_error():
    X, Y = _low_rank(n=50)
    Xn = X.copy()
    Xn[7, 3] = np.nan
    with pytest.raises(DmlrInputError, match="row 7.*non-finite"):
        OMF(n_epochs=1).fit(Xn, Y)
    Yb = Y.copy()
    Yb[4, 1] = 2
    with pytest.raises(DmlrInputError, match="0 or 1"):
        OMF(n_epochs=1).fit(X, Yb)
    with pytest.raises(DmlrInputError, match="rows"):
        OMF(n_epochs=1).fit(X, Y[:-1])
    with pytest.raises(ValueError, match="label_weight"):
        OMF(label_weight=1.5).fit(X, Y)
    with pytest.raises(ValueError, match="alpha"):
        OMF(alpha=0).fit(X, Y)
    with pytest.raises(ValueError, match="shuffle_window"):
        OMF(batch_size=10, shuffle_window=25).fit(X, Y)
    with pytest.raises(ValueError, match="rule"):
        OMF(label_rule="best").fit(X, Y)
    m = OMF(n_components=3, n_epochs=1, eta0=0.02).fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        m.partial_fit(X[:, :-1], Y)
    with pytest.raises(ValueError, match="features"):
        m.decision_function(X[:, :-1])


def test_cross_validation_picks_the_rule_and_refits():
    X, Y = _low_rank(n=240)
    res = cross_validate_omf(
        OMF(n_components=3, n_epochs=3, eta0=0.02),
        X,
        Y,
        {"label_weight": [0.5], "alpha": [1e-3, 1e3]},
        alpha_codes=[0.1, 1.0],
        top_ks=[1, 2],
        thresholds=[0.3, 0.5],
        cv=3,
    )
    assert len(res.results) == 2 * 2 * 4
    assert res.best_params["alpha"] == 1e-3  # alpha = 1e3 shrinks every code to 0
    best = max(r["mean_score"] for r in res.results)
    assert res.best_score == best and len(res.results[0]["fold_scores"]) == 3
    assert res.best_estimator.get_params()["alpha_code"] == res.best_params["alpha_code"]
    assert hasattr(res.best_estimator, "P_")


def test_real_scene_is_learned(tmp_path_factory):
    from dmlr.datasets import staged_store
    from dmlr.metrics import multilabel_metrics

    try:
        store = staged_store("scene", tmp_path_factory.mktemp("scene"))
    except FileNotFoundError as e:
        pytest.skip(str(e))
    ds = open_dataset(store)
    Xtr, Ytr = ds.arrays("train")
    m = OMF(
        n_components=10,
        label_weight=0.1,
        alpha=1e-3,
        eta0=0.3,
        n_epochs=10,
        alpha_code=10.0,
        label_rule="top_k",
        top_k=1,
        shuffle_window=0,
    ).fit(Xtr, Ytr)
    Xte, Yte = (a.compute() for a in ds.arrays("test"))
    f1 = multilabel_metrics(Yte, m.decision_function(Xte), m.predict(Xte), metrics=["f1_micro"])["f1_micro"]
    assert f1 > 0.55  # the paper's Table 2: 0.691 (5-fold CV, tuned rule)


def test_dmlr_fit_by_name_streams_the_store(tmp_path):
    import dmlr

    store = make_multilabel(tmp_path / "s.zarr", n_samples=300, n_features=8, n_labels=5, chunk_rows=64, seed=4)
    kw = {"n_components": 3, "label_weight": 0.3, "n_epochs": 2, "eta0": 0.05, "shuffle_window": 64}
    m = dmlr.fit(store, model="omf", **kw)
    X, Y = open_dataset(store).arrays("train")
    ref = OMF(**kw).fit(X.compute(), Y.compute())
    assert isinstance(m, OMF)
    np.testing.assert_array_equal(m.P_, ref.P_)
