"""OML (Gong et al. 2020) and the Euclidean KNN baseline: the derived update, fit/predict, persistence."""

from __future__ import annotations

import numpy as np
import pytest

import dmlr
from dmlr.errors import DmlrInputError
from dmlr.models.base import load_model
from dmlr.models.oml import (
    KNN,
    LAMBDA_MAX,
    LAMBDA_MIN,
    OML,
    cubic_coefficients,
    cubic_max_point,
    margin,
    oml_update,
    rank2_eigen,
)


def violated_rounds(n_cases, seed=0, q=9, d=4):
    """Random rounds (V_t, a, b, Delta) with l_t > 0 (eq. 4), over several scales."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n_cases:
        V = rng.standard_normal((q, d)) * rng.choice([0.05, 0.5, 2.0])
        y, yt = rng.integers(0, 2, q).astype(float), rng.integers(0, 2, q).astype(float)
        px = yt + rng.standard_normal(q) * rng.choice([0.1, 1.0, 3.0])
        a, b, delta = px - y, px - yt, float(np.abs(y - yt).sum())
        if delta > 0 and delta - margin(V, a, b) > 0:
            out.append((V, a, b, delta))
    return out


def test_update_satisfies_constraint_of_eq2():
    """After an update with lambda_t in (m, M), ||V^T a||^2 - ||V^T b||^2 = Delta exactly (D6)."""
    n_inside = 0
    for V, a, b, delta in violated_rounds(300):
        V_new, lam, clipped = oml_update(V, a, b, delta)
        A = np.outer(a, a) - np.outer(b, b)
        V_dense = np.linalg.solve(np.eye(len(a)) - 2 * lam * A, V)  # Algorithm 1 line 9
        np.testing.assert_allclose(V_new, V_dense, rtol=1e-8, atol=1e-10 * np.abs(V_dense).max())
        if LAMBDA_MIN < lam < LAMBDA_MAX:
            assert not clipped
            n_inside += 1
            assert abs(margin(V_new, a, b) - delta) <= 1e-11 * delta
    assert n_inside > 200


def test_exact_lambda_maximises_the_dual():
    """lambda* maximises D(lam) = L(V(lam), lam) on a brute-force grid below the pole."""
    for V, a, b, delta in violated_rounds(5, seed=1):
        _, lam, _ = oml_update(V, a, b, delta)
        A = np.outer(a, a) - np.outer(b, b)
        pole = 1 / (2 * np.linalg.eigvalsh(A)[-1])

        def dual(x):
            Vx = np.linalg.solve(np.eye(len(a)) - 2 * x * A, V)
            return 0.5 * np.sum((Vx - V) ** 2) + x * (delta - margin(Vx, a, b))

        grid = np.linspace(0, pole, 20001)[:-1]
        vals = np.array([dual(x) for x in grid])
        best = grid[np.argmax(vals)]
        assert abs(best - lam) <= 2 * (grid[1] - grid[0])
        assert dual(lam) >= vals.max() - 1e-12 * abs(vals.max())


def test_cubic_coefficients_match_the_lagrangian_with_eq6():
    """f(lam) = L((I + 2 lam A) V_t, lam) (eqs. 5-6) equals a lam^3 + b lam^2 + c lam (D9)."""
    for V, a, b, delta in violated_rounds(10, seed=2):
        mu, _, Z = rank2_eigen(a, b, V)
        ca, cb, cc = cubic_coefficients(mu, np.einsum("ij,ij->j", Z, Z), delta)
        A = np.outer(a, a) - np.outer(b, b)
        assert cc == pytest.approx(delta - margin(V, a, b))  # c = l_t
        for lam in (1e-3, 0.1, 1.7):
            Vb = (np.eye(len(a)) + 2 * lam * A) @ V
            f = 0.5 * np.sum((Vb - V) ** 2) + lam * (delta - margin(Vb, a, b))
            assert ca * lam**3 + cb * lam**2 + cc * lam == pytest.approx(f, rel=1e-9, abs=1e-9)


def brute_max_point(a, b, c, hi=1e3):
    """First local maximum of f on a fine log grid of (0, hi], or None if f keeps increasing."""
    x = np.geomspace(1e-9, hi, 400001)
    f = a * x**3 + b * x**2 + c * x
    peaks = np.flatnonzero((f[1:-1] > f[:-2]) & (f[1:-1] >= f[2:])) + 1
    return x[peaks[0]] if peaks.size else None


@pytest.mark.parametrize(
    "coeffs",
    [
        (-2.0, -1.0, 3.0),
        (-0.5, 4.0, 1.0),
        (1.0, -3.0, 1.5),
        (1.0, -1.0, 5.0),
        (0.0, -2.0, 1.0),
        (0.0, 0.5, 1.0),
        (3.0, 0.2, 0.1),
    ],
)
def test_cubic_root_choice_against_brute_force(coeffs):
    beta = cubic_max_point(*coeffs)
    ref = brute_max_point(*coeffs)
    if ref is None:
        assert beta is None
    else:
        assert beta == pytest.approx(ref, rel=1e-4)


def test_cubic_root_choice_random_against_brute_force():
    rng = np.random.default_rng(4)
    for _ in range(40):
        a, b = rng.standard_normal(2) * rng.choice([0.1, 1, 10], 2)
        c = abs(rng.standard_normal()) + 0.01
        beta, ref = cubic_max_point(a, b, c), brute_max_point(a, b, c, hi=1e4)
        if ref is None or ref > 9e3:
            assert beta is None or beta > 9e3
        else:
            assert beta == pytest.approx(ref, rel=1e-4)


def toy(seed=0, n=300, p=15, q=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = (X @ rng.standard_normal((p, q)) + rng.standard_normal((n, q)) > 1).astype(np.int8)
    return X, Y


def test_oml_fit_predict_and_determinism():
    X, Y = toy()
    m = OML(scaling=None, k=10, aggregation="vote", random_state=3).fit(X[:200], Y[:200])
    assert m.n_updates_ == 160 and len(m.objective_history_) >= 1 and m.n_active_ > 0
    S = m.decision_function(X[200:])
    assert S.shape == (100, 6) and ((S >= 0) & (S <= 1)).all()
    assert np.allclose(S * 10, np.round(S * 10))  # k = 10 votes
    np.testing.assert_array_equal(m.predict(X[200:]), (S > 0.5).astype(np.int8))
    m2 = OML(scaling=None, random_state=3).fit(X[:200], Y[:200])
    np.testing.assert_array_equal(m.V_, m2.V_)
    assert not np.array_equal(m.V_, OML(scaling=None, random_state=4).fit(X[:200], Y[:200]).V_)
    # the stream's chunking does not change Algorithm 1 (a row's neighbour may be in its own chunk)
    with dmlr.config_context(chunk_rows=7):
        small_chunks = OML(scaling=None, random_state=3).fit(X[:200], Y[:200])
    np.testing.assert_allclose(small_chunks.V_, m.V_, rtol=1e-9, atol=1e-12)  # (X P by BLAS: rounding only)
    # prediction is the k-NN of the embedded memory, x P V (section C's distance)
    Z, Zq = X[:200] @ m.P_ @ m.V_, X[200:] @ m.P_ @ m.V_
    D = ((Zq[:, None] - Z[None]) ** 2).sum(-1)
    nn = np.argsort(D, axis=1, kind="stable")[:, :10]
    np.testing.assert_allclose(S, Y[:200][nn].mean(axis=1))


def test_partial_fit_and_save_load_round_trip(tmp_path):
    X, Y = toy(1)
    a = OML(scaling=None, random_state=0, record_every=7).fit(X[:150], Y[:150])
    a.save(tmp_path / "a.npz")
    b = load_model(tmp_path / "a.npz")
    np.testing.assert_array_equal(a.decision_function(X[250:]), b.decision_function(X[250:]))
    a.partial_fit(X[150:250], Y[150:250])
    b.partial_fit(X[150:250], Y[150:250])
    np.testing.assert_array_equal(a.V_, b.V_)
    assert a.n_updates_ == 120 + 100 and a.n_memory_ == 250
    assert a.objective_iterations_ == b.objective_iterations_ and a.objective_history_ == b.objective_history_
    # two partial_fit calls continue exactly like one
    c = load_model(tmp_path / "a.npz").partial_fit(X[150:200], Y[150:200]).partial_fit(X[200:250], Y[200:250])
    np.testing.assert_array_equal(a.V_, c.V_)
    assert a.cumulative_loss_ == pytest.approx(c.cumulative_loss_)
    # a fresh partial_fit is fit
    np.testing.assert_array_equal(
        OML(scaling=None, random_state=0).partial_fit(X[:150], Y[:150]).V_,
        OML(scaling=None, random_state=0).fit(X[:150], Y[:150]).V_,
    )


def test_mlknn_rule_and_knn_baseline(tmp_path):
    from sklearn.neighbors import NearestNeighbors

    X, Y = toy(2)
    knn = KNN(scaling=None, k=5).fit(X[:200], Y[:200])
    nn = NearestNeighbors(n_neighbors=5, algorithm="brute").fit(X[:200]).kneighbors(X[200:])[1]
    np.testing.assert_allclose(knn.decision_function(X[200:]), Y[:200][nn].mean(axis=1))
    m = OML(scaling=None, k=10, aggregation="mlknn", random_state=0).fit(X[:200], Y[:200])
    S = m.decision_function(X[200:])
    assert ((S > 0) & (S < 1)).all() and m.mlknn_cond_pos_.shape == (11, 6)
    m.save(tmp_path / "m.npz")
    np.testing.assert_array_equal(load_model(tmp_path / "m.npz").decision_function(X[200:]), S)


def test_distributed_prediction_equals_local(client2):
    X, Y = toy(3)
    with dmlr.config_context(backend="local"):
        local = OML(scaling=None, random_state=0).fit(X[:200], Y[:200])
    with dmlr.config_context(backend="dask", n_blocks=3, client=client2):
        dist = OML(scaling=None, random_state=0).fit(X[:200], Y[:200])
    np.testing.assert_allclose(dist.P_, local.P_, rtol=1e-10, atol=1e-12)
    local.P_ = dist.P_  # same P: the rest must be identical
    local.V_ = dist.V_
    with dmlr.config_context(backend="dask", n_blocks=3, client=client2):
        dist_neighbours = dist.kneighbors(X[200:])[1]
    np.testing.assert_array_equal(local.kneighbors(X[200:])[1], dist_neighbours)


def test_bad_input_and_parameters():
    X, Y = toy()
    with pytest.raises(DmlrInputError, match="0 or 1"):
        OML(scaling=None).fit(X, Y * 2)
    with pytest.raises(DmlrInputError, match="rows"):
        OML(scaling=None).fit(X, Y[:-1])
    Xn = X.copy()
    Xn[7, 2] = np.nan
    with pytest.raises(DmlrInputError, match="row 7"):
        OML(scaling=None).fit(Xn, Y)
    m = OML(scaling=None).fit(X, Y)
    with pytest.raises(ValueError, match="features, but OML is expecting"):
        m.predict(X[:, :3])
    with pytest.raises(ValueError, match="features, but OML is expecting"):
        m.partial_fit(X[:, :3], Y)
    for bad in (
        {"k": 0},
        {"aggregation": "max"},
        {"lambda_min": 1.0, "lambda_max": 0.5},
        {"init_fraction": 0},
        {"lambda_rule": "quartic"},
        {"random_state": -1},
    ):
        with pytest.raises(ValueError):
            OML(scaling=None, **bad).fit(X, Y)
    with pytest.raises(ValueError):
        KNN(scaling=None, aggregation="nope").fit(X, Y)


def test_singular_gram_uses_ridge():
    X, Y = toy(n=40, p=60)  # more features than rows
    m = OML(scaling=None, random_state=0).fit(X, Y)
    assert m.ridge_used_ > 0 and np.isfinite(m.P_).all()
    assert OML(scaling=None, random_state=0).fit(*toy()).ridge_used_ == 0


def test_emotions_oml_runs(shared_datasets, tmp_path):
    import dmlr
    from dmlr.datasets import staged_store

    try:
        ds = dmlr.open_dataset(staged_store("emotions", tmp_path))
    except FileNotFoundError as e:
        pytest.skip(str(e))
    Xtr, Ytr = (a.compute() for a in ds.arrays("train"))
    Xte, Yte = (a.compute() for a in ds.arrays("test"))
    m = OML(scaling=None, random_state=0).fit(Xtr, Ytr)
    P = m.predict(Xte)
    hamming = float(np.mean(P != np.asarray(Yte)))
    assert hamming < 0.35  # label frequencies give ~0.31


def test_mlknn_tables_match_a_direct_implementation():
    """ML-kNN (Zhang & Zhou 2007) posteriors from sklearn's leave-one-out neighbours."""
    from sklearn.neighbors import NearestNeighbors

    X, Y = toy(5, n=260)
    k, s, L = 5, 1.0, Y.shape[1]
    Xtr, Ytr, Xte = X[:200], Y[:200], X[200:]
    nn = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(Xtr).kneighbors(Xtr)[1][:, 1:]
    C = Ytr[nn].sum(axis=1)
    prior = (s + Ytr.sum(0)) / (2 * s + len(Ytr))
    pos, neg = np.zeros((k + 1, L)), np.zeros((k + 1, L))
    for i in range(len(Ytr)):
        for j in range(L):
            (pos if Ytr[i, j] else neg)[C[i, j], j] += 1
    pos = (s + pos) / (s * (k + 1) + pos.sum(0))
    neg = (s + neg) / (s * (k + 1) + neg.sum(0))
    c = Ytr[NearestNeighbors(n_neighbors=k, algorithm="brute").fit(Xtr).kneighbors(Xte)[1]].sum(axis=1)
    j = np.arange(L)
    want = prior * pos[c, j] / (prior * pos[c, j] + (1 - prior) * neg[c, j])
    knn = KNN(scaling=None, k=k, aggregation="mlknn").fit(Xtr, Ytr)
    np.testing.assert_allclose(knn.decision_function(Xte), want, rtol=1e-12)


@pytest.mark.parametrize("rows", ["all", "memory"])
def test_projection_is_least_squares_on_the_chosen_rows(rows):
    X, Y = toy(4)
    m = OML(scaling=None, random_state=2, projection_rows=rows).fit(X[:200], Y[:200])
    # the same seeded draw as fit: the initial memory is the first choice of the generator
    init = np.sort(np.random.default_rng(2).choice(200, 40, replace=False))
    Xp, Yp = (X[:200], Y[:200]) if rows == "all" else (X[init], Y[init])
    P, *_ = np.linalg.lstsq(Xp, Yp.astype(float), rcond=None)  # an independent solver
    assert m.ridge_used_ == 0
    np.testing.assert_allclose(m.P_, P, rtol=1e-8, atol=1e-10)
    assert OML(scaling=None).projection_rows == "all"


def test_defaults_are_the_cross_validated_pair():
    """docs/models/oml.md: the (k, aggregation) pair CV picks most often; KNN keeps the paper's."""
    assert (OML().k, OML().aggregation) == (5, "mlknn")
    assert (KNN().k, KNN().aggregation) == (10, "vote")
