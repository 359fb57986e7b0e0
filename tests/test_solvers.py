"""Solvers on numpy arrays, no cluster: prox and APG against closed forms."""

import importlib

import numpy as np
import pytest
from problems import least_squares_nuclear

from dmlr.solvers import apg, lbfgs, prox_nuclear_norm
from dmlr.solvers.apg import Oracle
from dmlr.solvers.prox import nuclear_norm

lbfgs_module = importlib.import_module("dmlr.solvers.lbfgs")  # the package's name is the function


def test_prox_nuclear_norm_is_the_svt_argmin():
    rng = np.random.default_rng(0)
    W = rng.normal(size=(9, 4))
    Z, pen = prox_nuclear_norm(W, 0.5, 2.0)  # threshold 1.0
    s = np.linalg.svd(W, compute_uv=False)
    np.testing.assert_allclose(np.linalg.svd(Z, compute_uv=False), np.maximum(s - 1.0, 0), atol=1e-12)
    assert pen == pytest.approx(0.5 * nuclear_norm(Z))
    # optimality: Z beats random perturbations of itself on the prox objective
    obj = lambda V: 0.5 * ((V - W) ** 2).sum() + 2.0 * 0.5 * nuclear_norm(V)  # noqa: E731
    for _ in range(20):
        assert obj(Z) <= obj(Z + 1e-3 * rng.normal(size=Z.shape)) + 1e-12


@pytest.mark.parametrize("shape", [(60, 9), (9, 60), (12, 12)])
@pytest.mark.parametrize(
    "decades,relative_tau,route", [(10, 0.3, "gram"), (10, 1e-3, "gram"), (10, 1e-9, "svd"), (3, 1e-9, "gram")]
)
def test_prox_nuclear_norm_routes_match_the_svd_definition(shape, decades, relative_tau, route, monkeypatch):
    # singular values over 10 decades (or 3): the Gram route must stay exact where it is taken
    rng = np.random.default_rng(3)
    k = min(shape)
    U, _ = np.linalg.qr(rng.normal(size=(shape[0], k)))
    V, _ = np.linalg.qr(rng.normal(size=(shape[1], k)))
    s = np.logspace(0, -decades, k) * 7.0
    W = (U * s) @ V.T
    tau = relative_tau * s[0]
    Uw, sw, Vtw = np.linalg.svd(W, full_matrices=False)
    Z_ref = (Uw * np.maximum(sw - tau, 0)) @ Vtw
    svd_calls = []
    svd = np.linalg.svd
    monkeypatch.setattr(np.linalg, "svd", lambda *a, **kw: (svd_calls.append(1), svd(*a, **kw))[1])
    Z, pen = prox_nuclear_norm(W, 2.0, tau / 2.0)
    assert ("svd" if svd_calls else "gram") == route
    np.testing.assert_allclose(Z, Z_ref, rtol=0, atol=1e-12 * np.abs(Z_ref).max())
    assert pen == pytest.approx(2.0 * np.maximum(sw - tau, 0).sum(), rel=1e-12)


@pytest.mark.parametrize("shape", [(40, 12), (12, 40)])
def test_prox_factors_form_the_prox_point_exactly(shape):
    # the low-rank route's factors give Z bit for bit, also after a pickle round trip (how a
    # worker receives them); with most directions kept there are no factors
    import pickle

    rng = np.random.default_rng(5)
    W = rng.normal(size=shape)
    s = np.linalg.svd(W, compute_uv=False)
    tau = 0.5 * (s[1] + s[2])  # keeps two directions
    Z, pen = prox_nuclear_norm(W, tau, 1.0)
    Z2, pen2, low = prox_nuclear_norm(W, tau, 1.0, factors=True)
    assert low.left.shape == (shape[0], 2) and low.right.shape == (2, shape[1]) and low.shape == shape
    assert np.array_equal(Z2, Z) and pen2 == pen
    assert np.array_equal(low.expand(), Z)
    assert np.array_equal(pickle.loads(pickle.dumps(low, protocol=5)).expand(), Z)
    Z_svd = (lambda U, s_, Vt: (U * np.maximum(s_ - tau, 0)) @ Vt)(*np.linalg.svd(W, full_matrices=False))
    np.testing.assert_allclose(Z, Z_svd, atol=1e-12 * np.abs(Z_svd).max())
    assert prox_nuclear_norm(W, 0.5 * s[-1], 1.0, factors=True)[2] is None
    assert prox_nuclear_norm(W, 0.0, 1.0, factors=True) == (W, 0.0, None)


def test_apg_reaches_closed_form_optimum():
    # min 1/2 ||W - M||^2 + lam ||W||_*  has the solution SVT(M, lam)
    rng = np.random.default_rng(1)
    M = rng.normal(size=(8, 5)) * 3
    lam = 1.5

    def oracle(points, grad_point):
        values = 0.5 * ((points - M) ** 2).sum(axis=(1, 2))
        grad = points[grad_point] - M if grad_point >= 0 else None
        return values, grad

    res = apg(
        oracle, lambda V, s: prox_nuclear_norm(V, lam, s), np.zeros_like(M), lipschitz=4.0, max_iter=5000, tol=1e-14
    )
    expected, _ = prox_nuclear_norm(M, lam)
    np.testing.assert_allclose(res.x, expected, atol=1e-6)
    assert res.converged
    assert len(res.objective_history) == res.n_iter


def test_apg_stops_at_max_iter_and_callback():
    seen = []

    def oracle(points, grad_point):
        return (points**2).sum(axis=(1, 2)), (2 * points[grad_point] if grad_point >= 0 else None)

    res = apg(
        oracle,
        lambda V, s: (V, 0.0),
        np.ones((2, 2)),
        lipschitz=1e6,
        max_iter=7,
        tol=0.0,
        callback=lambda t, obj, sec: seen.append(t),
    )
    assert res.n_iter == 7 and not res.converged and seen == list(range(1, 8))
    with pytest.raises(ValueError):
        apg(oracle, lambda V, s: (V, 0.0), np.ones((2, 2)), lipschitz=0.0)


def test_gradient_tol_keeps_a_warm_start_from_stopping_short():
    # min 1/2 ||A W - B||^2 + lam ||W||_* with a loose step (L 100x the true constant, like the
    # paper's bound) and a large irreducible residual, started near but not at the optimum: the
    # objective barely moves per step, so the relative-change test alone stops at once
    rng = np.random.default_rng(3)
    A = rng.normal(size=(40, 6)) * np.linspace(0.2, 2.0, 6)
    noise = rng.normal(size=(40, 4))
    B = A @ rng.normal(size=(6, 4)) + 30 * (noise - A @ np.linalg.lstsq(A, noise, rcond=None)[0])
    oracle, prox = least_squares_nuclear(A, B, 0.5)
    L = 100 * np.linalg.norm(A, 2) ** 2
    best = apg(oracle, prox, np.zeros((6, 4)), lipschitz=L / 100, max_iter=100000, tol=1e-15).x
    x0 = best + 0.05 * rng.normal(size=best.shape)
    short = apg(oracle, prox, x0, lipschitz=L, max_iter=100000, tol=1e-4)
    kept = apg(oracle, prox, x0, lipschitz=L, max_iter=100000, tol=1e-4, gradient_tol=1e-4)
    assert short.n_iter <= 2 and short.converged
    assert kept.converged and kept.n_iter > 10 * short.n_iter
    assert np.linalg.norm(kept.x - best) < 0.05 * np.linalg.norm(short.x - best)
    # one extra oracle call, at the origin (the reference of the test), for a warm start only
    assert kept.n_oracle_calls == kept.n_iter + 2
    cold = apg(oracle, prox, np.zeros((6, 4)), lipschitz=L, max_iter=100000, tol=1e-4, gradient_tol=1e-4)
    assert cold.n_oracle_calls == cold.n_iter + 1
    with pytest.raises(ValueError, match="gradient_tol"):
        apg(oracle, prox, x0, lipschitz=L, gradient_tol=-1.0)


class _RowBlocks:
    """A stream of numpy row blocks (what the streamed solvers iterate), with no Dask anywhere."""

    def __init__(self, X, Y, rows):
        from dmlr.data.blocks import Block

        self.blocks = [Block(X=X[a : a + rows], Y=Y[a : a + rows]) for a in range(0, X.shape[0], rows)]
        self.n_rows, self.n_features, self.n_labels = X.shape[0], X.shape[1], Y.shape[1]

    def __iter__(self):
        return iter(self.blocks)


def _multilabel(n=240, p=6, q=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    Y = (X @ rng.standard_normal((p, q)) + 0.5 * rng.standard_normal((n, q)) > 0.3).astype(np.int8)
    return X, Y


def test_oml_loop_runs_on_plain_blocks_whatever_their_size():
    from dmlr.distributed.stream import ChunkStream
    from dmlr.solvers.oml import oml_train_stream

    X, Y = _multilabel()
    rng = np.random.default_rng(1)
    P = np.linalg.lstsq(X, Y.astype(float), rcond=None)[0]
    V1 = rng.standard_normal((Y.shape[1], 3)) / np.sqrt(3)
    init = np.zeros(X.shape[0], dtype=bool)
    init[rng.permutation(X.shape[0])[:48]] = True
    params = dict(lambda_min=1e-5, lambda_max=1e5, lambda_rule="exact")
    runs = [oml_train_stream(_RowBlocks(X, Y, rows), P, V1, None, init, 0, params) for rows in (7, 64, 240)]
    runs.append(oml_train_stream(ChunkStream(X, Y, chunk_rows=50), P, V1, None, init, 0, params))
    for r in runs[1:]:  # the same rounds in the same order: the same V, whatever the blocks
        np.testing.assert_allclose(r["V"], runs[0]["V"], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(r["losses"], runs[0]["losses"])
    assert len(runs[0]["losses"]) == X.shape[0] - init.sum()
    assert (runs[0]["losses"] > 0).sum() >= 10  # V was updated, so the comparison says something
    assert not np.allclose(runs[0]["V"], V1)


def test_omf_loop_runs_on_plain_blocks_and_gives_the_models_factors():
    from dmlr.models import OMF
    from dmlr.solvers.omf import omf_train_stream

    X, Y = _multilabel(n=300, p=8, q=6, seed=2)
    cfg = dict(
        alpha=0.5, lam=1e-3, dim=3, eta0=0.1, decay=1e-3, batch_size=16, shuffle_window=64, seed=5, init_scale=0.1
    )
    runs = [omf_train_stream(_RowBlocks(X, Y, rows), None, {**cfg, "epochs": 3}) for rows in (9, 100, 300)]
    for r in runs[1:]:  # windows of the global row order: the same minibatches whatever the blocks
        np.testing.assert_array_equal(r.state.P, runs[0].state.P)
        np.testing.assert_array_equal(r.state.Q, runs[0].state.Q)
    assert runs[0].n_iter == 3 * (4 * 4 + 3)  # per epoch: 4 windows of 64 rows (4 minibatches each), 44 rows (3)
    # two epochs, then one more from the state, is three epochs
    two = omf_train_stream(_RowBlocks(X, Y, 50), None, {**cfg, "epochs": 2})
    three = omf_train_stream(_RowBlocks(X, Y, 50), two, {**cfg, "epochs": 1})
    np.testing.assert_array_equal(three.state.P, runs[0].state.P)
    # the estimator runs this loop
    model = OMF(
        3,
        label_weight=0.5,
        alpha=1e-3,
        eta0=0.1,
        n_epochs=3,
        batch_size=16,
        shuffle_window=64,
        random_state=5,
        scaling=None,
    ).fit(X, Y)
    np.testing.assert_allclose(model.P_, runs[0].state.P, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(model.Q_, runs[0].state.Q, rtol=1e-12, atol=1e-14)


def _loose_problem(seed=3):
    """min 1/2 ||A W - B||^2 + 0.5 ||W||_*, its Lipschitz constant, and a paper-like bound 100x that."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(40, 6)) * np.linspace(0.2, 2.0, 6)
    B = A @ rng.normal(size=(6, 4)) + rng.normal(size=(40, 4))
    oracle, prox = least_squares_nuclear(A, B, 0.5)
    L = np.linalg.norm(A, 2) ** 2
    return oracle, prox, L, 100 * L


def test_adaptive_step_reaches_the_loose_steps_stop_sooner_and_stops_there():
    oracle, prox, L, loose = _loose_problem()
    x0 = np.zeros((6, 4))
    best = apg(oracle, prox, x0, lipschitz=L, max_iter=100000, tol=1e-15).objective_history[-1]
    paper = apg(oracle, prox, x0, lipschitz=loose, max_iter=100000, tol=1e-6)
    fast = apg(
        oracle, prox, x0, lipschitz=loose / 1024, max_iter=100000, tol=1e-6,
        backtracking=True, restart=True, adaptive=True, tol_lipschitz=loose,
    )  # fmt: skip
    assert paper.converged and fast.converged
    # at least as good as the loose step's stop (but not run on to the optimum), in fewer iterations
    assert best <= fast.objective_history[-1] <= paper.objective_history[-1]
    assert fast.objective_history[-1] - best < 0.1 * (paper.objective_history[-1] - best)
    assert fast.n_iter < paper.n_iter / 4 and fast.n_oracle_calls < paper.n_oracle_calls / 4
    # L fell below the start and below the bound, and rose again where a step needed it
    assert fast.n_backtracks > 0 and loose / 1024 < fast.lipschitz < loose
    with pytest.raises(ValueError, match="backtracking"):
        apg(oracle, prox, x0, lipschitz=L, adaptive=True)
    with pytest.raises(ValueError, match="tol_lipschitz"):
        apg(oracle, prox, x0, lipschitz=L, tol_lipschitz=0.0)


def test_adaptive_stop_waits_for_a_window_after_a_warm_start():
    # started near the optimum with a slowly moving objective: the windowed test cannot stop
    # before STOP_WINDOW + 1 iterations, and the run ends closer to the optimum than it started
    from dmlr.solvers.apg import STOP_WINDOW

    oracle, prox, L, loose = _loose_problem(4)
    x0 = np.zeros((6, 4))
    best = apg(oracle, prox, x0, lipschitz=L, max_iter=100000, tol=1e-15)
    start = best.x + 0.05 * np.random.default_rng(0).normal(size=best.x.shape)
    kw = dict(lipschitz=loose / 1024, max_iter=100000, tol=1e-3, backtracking=True, restart=True, adaptive=True)
    warm = apg(oracle, prox, start, tol_lipschitz=loose, **kw)
    assert warm.converged and warm.n_iter > STOP_WINDOW
    f0 = float(oracle(start[None], -1)[0][0]) + prox(start, 0.0)[1]
    gap0, gap = f0 - best.objective_history[-1], warm.objective_history[-1] - best.objective_history[-1]
    assert gap < 0.01 * gap0


# -- L-BFGS on the smooth form of the nuclear norm (dmlr.solvers.lbfgs) --------------


@pytest.mark.parametrize("shape", [(9, 4), (4, 9)])
def test_nuclear_gradient_is_u_vt_of_the_svd(shape):
    from dmlr.solvers.lbfgs import nuclear_value_and_grad

    W = np.random.default_rng(0).normal(size=shape)
    U, s, Vt = np.linalg.svd(W, full_matrices=False)
    norm, grad, smallest = nuclear_value_and_grad(W)
    assert norm == pytest.approx(s.sum(), rel=1e-12)
    np.testing.assert_allclose(grad, U @ Vt, atol=1e-10)
    assert smallest == pytest.approx(s[-1] / s[0], rel=1e-10)
    assert nuclear_value_and_grad(np.zeros(shape))[0] == 0.0


@pytest.mark.parametrize("shape", [(12, 10), (10, 12)])
def test_kink_fraction_counts_the_directions_near_zero(shape):
    from dmlr.solvers.lbfgs import CONVERGED_MIN_RELATIVE, kink_fraction

    rng = np.random.default_rng(1)
    U, _, Vt = np.linalg.svd(rng.normal(size=shape), full_matrices=False)
    for values, fraction in [
        (np.linspace(1.0, 0.1, 10), 0.0),
        (np.r_[np.ones(9), 0.0], 0.1),
        (np.r_[np.ones(7), 0.5 * CONVERGED_MIN_RELATIVE, 0.0, 0.0], 0.3),  # below the bound counts
        (np.r_[np.ones(9), 2.0 * CONVERGED_MIN_RELATIVE], 0.0),  # above it does not
    ]:
        assert kink_fraction((U * values) @ Vt) == pytest.approx(fraction)
    assert kink_fraction(np.zeros(shape)) == 1.0


@pytest.mark.parametrize("at_kink, runs_lbfgs", [(1, True), (5, False)])
def test_a_warm_start_skips_lbfgs_only_where_many_directions_sit_at_the_kink(monkeypatch, at_kink, runs_lbfgs):
    """lbfgs_then_apg from a point with 1 of 10 singular values at zero runs L-BFGS first (then
    hands the kink to APG where needed); with 5 of 10 it starts with APG. Both reach the optimum."""
    from dmlr.solvers.lbfgs import lbfgs_then_apg

    rng = np.random.default_rng(3)
    lam = 2.0
    A, oracle, prox, reference = _nuclear_regression(rng, lam)
    U, _, Vt = np.linalg.svd(rng.normal(size=(12, 10)), full_matrices=False)
    x0 = (U * np.r_[np.ones(10 - at_kink), np.zeros(at_kink)]) @ Vt
    calls = []

    def recording(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    real = lbfgs_module.lbfgs
    monkeypatch.setattr(lbfgs_module, "lbfgs", recording)
    res = lbfgs_then_apg(
        oracle,
        prox,
        x0,
        nuclear=lam,
        rows=slice(None),
        paper_lipschitz=lambda: float(np.linalg.norm(A, 2) ** 2),
        tol=1e-14,
        gradient_tol=1e-10,
        max_iter=20000,
    )
    assert bool(calls) == runs_lbfgs
    assert res.objective_history[-1] == pytest.approx(reference.objective_history[-1], rel=1e-9)


def test_a_cold_start_hands_a_low_rank_optimum_to_apg_once_the_objective_stops_moving():
    """From zero towards an optimum of rank 9 of 10, L-BFGS's smoothed nuclear-norm gradient
    keeps a unit component along the direction at the kink, so its gradient test cannot hold:
    once the objective's relative change is within ``tol`` there, L-BFGS returns unconverged
    (within 120 oracle calls; run on until a line search fails, it takes 201) and APG finishes
    at the optimum."""
    lam = 50.0
    A, oracle, prox, reference = _nuclear_regression(np.random.default_rng(3), lam)
    s = np.linalg.svd(reference.x, compute_uv=False)
    assert int((s > 1e-9 * s[0]).sum()) == 9
    settings = dict(nuclear=lam, tol=1e-8, gradient_tol=1e-6, max_iter=5000)
    part = lbfgs_module.lbfgs(oracle, np.zeros((12, 10)), **settings)
    assert not part.converged and part.n_iter <= 120
    res = lbfgs_module.lbfgs_then_apg(
        oracle,
        prox,
        np.zeros((12, 10)),
        rows=slice(None),
        paper_lipschitz=lambda: float(np.linalg.norm(A, 2) ** 2),
        **settings,
    )
    assert res.converged and res.n_iter < part.n_iter + 50
    assert res.objective_history[-1] == pytest.approx(reference.objective_history[-1], rel=1e-9)


def _nuclear_regression(rng, lam):
    """(A, oracle, prox, tight APG result) of min 1/2 ||A W - B||^2 + lam ||W||_*, W 12 x 10,
    B = A W0 + noise."""
    A = rng.normal(size=(60, 12))
    B = A @ rng.normal(size=(12, 10)) + 0.1 * rng.normal(size=(60, 10))
    oracle, prox = least_squares_nuclear(A, B, lam)
    return A, oracle, prox, _tight_apg(oracle, prox, (12, 10))


def _tight_apg(oracle, prox, shape):
    kw = dict(lipschitz=1.0, max_iter=20000, tol=1e-15, gradient_tol=1e-12, backtracking=True, restart=True)
    return apg(oracle, prox, np.zeros(shape), **kw)


def _regression(seed):
    """A, B = A W + noise with a full-rank W of unit scale: min 1/2 ||A W - B||^2 + lam ||W||_*."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(40, 8))
    return A, A @ rng.normal(size=(8, 5)) + 0.1 * rng.normal(size=(40, 5))


def test_lbfgs_reaches_the_proximal_optimum_where_it_has_full_rank():
    A, B = _regression(2)
    oracle, prox = least_squares_nuclear(A, B, 0.5)
    reference = _tight_apg(oracle, prox, (8, 5))
    assert np.linalg.svd(reference.x, compute_uv=False).min() > 0.1  # full rank: the smooth case
    res = lbfgs(oracle, np.zeros((8, 5)), nuclear=0.5, tol=1e-13, max_iter=500)
    assert res.converged and res.n_iter == len(res.objective_history) < 200
    assert min(res.objective_history) == pytest.approx(reference.objective_history[-1], rel=1e-10)
    np.testing.assert_allclose(res.x, reference.x, atol=1e-5)


def test_lbfgs_computes_the_nuclear_term_while_the_oracle_call_is_out(monkeypatch):
    """L-BFGS starts each oracle call (``Oracle.submit``), computes the nuclear-norm term, then
    waits for the call: an oracle whose data live elsewhere computes meanwhile. Same iterates as
    the plain function oracle."""
    A, B = _regression(2)
    fn, _ = least_squares_nuclear(A, B, 0.5)
    events = []

    class Started(Oracle):
        def __call__(self, points, grad_point):
            return fn(points, grad_point)

        def submit(self, points, grad_point):
            events.append("sent")
            out = fn(points, grad_point)

            def wait():
                events.append("waited")
                return out

            return wait

    nuclear = lbfgs_module.nuclear_value_and_grad

    def recording(W):
        events.append("nuclear")
        return nuclear(W)

    monkeypatch.setattr(lbfgs_module, "nuclear_value_and_grad", recording)
    res = lbfgs(Started(), np.zeros((8, 5)), nuclear=0.5, tol=0.0, max_iter=20)
    assert events == ["sent", "nuclear", "waited"] * res.n_oracle_calls and res.n_oracle_calls >= 20
    plain = lbfgs(fn, np.zeros((8, 5)), nuclear=0.5, tol=0.0, max_iter=20)
    np.testing.assert_array_equal(res.objective_history, plain.objective_history)
    np.testing.assert_array_equal(res.x, plain.x)


def test_lbfgs_does_not_claim_a_rank_deficient_optimum():
    # a large nuclear weight zeroes directions of W: the gradient U V^T jumps there
    A, B = _regression(2)
    oracle, prox = least_squares_nuclear(A, B, 150.0)
    reference = _tight_apg(oracle, prox, (8, 5))
    assert 0 < np.linalg.matrix_rank(reference.x, tol=1e-6) < 5
    res = lbfgs(oracle, np.zeros((8, 5)), nuclear=150.0, tol=1e-13, max_iter=500)
    assert not res.converged


def test_lbfgs_without_a_nuclear_term_claims_a_rank_deficient_optimum(monkeypatch):
    # nuclear=0: a smooth problem whose minimizer has a zero column (so a zero singular value)
    # converges by L-BFGS's own test; there is no kink to hand to the proximal method, and the
    # nuclear term is never computed
    A, B = _regression(2)
    B[:, 1] = 0.0
    oracle, _ = least_squares_nuclear(A, B, 0.0)

    def refused(W):
        raise AssertionError("the nuclear term was computed with nuclear=0")

    monkeypatch.setattr(lbfgs_module, "nuclear_value_and_grad", refused)
    res = lbfgs(oracle, np.zeros((8, 5)), nuclear=0.0, tol=1e-13, gradient_tol=1e-8, max_iter=500)
    assert res.converged
    assert np.linalg.svd(res.x, compute_uv=False)[-1] < 1e-6 * np.linalg.norm(res.x)
    np.testing.assert_allclose(res.x, np.linalg.lstsq(A, B, rcond=None)[0], atol=1e-6)


def test_lbfgs_leaves_rows_out_of_the_nuclear_norm_and_stops_at_max_iter_and_callback():
    A, B = _regression(4)
    oracle, _ = least_squares_nuclear(A, B, 0.0)
    rows = slice(0, 7)  # the last row (a bias) unpenalized

    def prox(V, s):
        Z, penalty = prox_nuclear_norm(V[rows], 0.5, s)
        return np.vstack([Z, V[7:]]), penalty

    reference = _tight_apg(oracle, prox, (8, 5))
    res = lbfgs(oracle, np.zeros((8, 5)), nuclear=0.5, rows=rows, tol=1e-13, max_iter=500)
    assert min(res.objective_history) == pytest.approx(reference.objective_history[-1], rel=1e-10)
    assert lbfgs(oracle, np.zeros((8, 5)), nuclear=0.5, rows=rows, max_iter=7).n_iter == 7
    seen = []
    stopped = lbfgs(oracle, np.zeros((8, 5)), nuclear=0.5, rows=rows, callback=lambda t, f, s: seen.append(t) or t == 3)
    assert stopped.n_iter == 3 and seen == [1, 2, 3] and not stopped.converged


def _two_loop(g, pairs):
    """H g by the two-loop recursion (Nocedal & Wright, Algorithm 7.4), pairs oldest first."""
    q, alphas = g.copy(), []
    for s, y in reversed(pairs):
        a = (s @ q) / (s @ y)
        alphas.append(a)
        q -= a * y
    s, y = pairs[-1]
    q *= (s @ y) / (y @ y)
    for (s, y), a in zip(pairs, reversed(alphas), strict=True):
        q += (a - (y @ q) / (s @ y)) * s
    return q


@pytest.mark.parametrize("memory", [3, 8])  # the buffer wraps around; it does not
def test_lbfgs_compact_direction_is_the_two_loop_recursions(memory):
    from importlib import import_module

    Pairs = import_module("dmlr.solvers.lbfgs").Pairs
    rng = np.random.default_rng(2)
    n = 40
    A = rng.normal(size=(n, n))
    H = A @ A.T + n * np.eye(n)  # curvature pairs of a convex quadratic: y = H s, s . y > 0
    pairs, buffers = [], Pairs.empty(memory, n)
    for k in range(6):
        s = rng.normal(size=n)
        pairs.append((s, H @ s))
        zero = np.zeros(n)
        assert buffers.push(s, zero, H @ s, zero)  # the pair (s - 0, H s - 0)
        g = rng.normal(size=n)
        expected = -_two_loop(g, pairs[-memory:])
        np.testing.assert_allclose(buffers.direction(g), expected, rtol=1e-10, atol=1e-12 * np.abs(expected).max())
    assert buffers.count == min(6, memory)
    buffers.reset()
    np.testing.assert_array_equal(buffers.direction(g), -g)


@pytest.mark.parametrize("memory", [3, 8])
def test_lbfgs_direction_from_the_pushed_products_is_the_two_loop_recursions(memory):
    """Along a run (each push's g the latest direction's), the next direction takes its
    products with the new gradient from the push; it must stay the two-loop recursion's,
    through a full buffer and a rejected pair."""
    from importlib import import_module

    Pairs = import_module("dmlr.solvers.lbfgs").Pairs
    rng = np.random.default_rng(5)
    n = 40
    A = rng.normal(size=(n, n))
    H, b = A @ A.T + n * np.eye(n), rng.normal(size=n)
    x = rng.normal(size=n)
    g, pairs, buffers = H @ x - b, [], Pairs.empty(memory, n)
    for k in range(10):
        d = buffers.direction(g)
        expected = -_two_loop(g, pairs[-memory:]) if pairs else -g
        np.testing.assert_allclose(d, expected, rtol=1e-9, atol=1e-11 * np.abs(expected).max())
        x_new = x + 0.5 * d
        g_new = H @ x_new - b
        if k == 6:  # a pair without curvature: refused, and the next direction computes its products
            assert not buffers.push(x, x_new, g_new, g)
        else:
            assert buffers.push(x_new, x, g_new, g)
            pairs.append((x_new - x, g_new - g))
        x, g = x_new, g_new
    assert buffers.count == memory


def test_lbfgs_pairs_without_curvature_are_not_kept():
    from importlib import import_module

    Pairs = import_module("dmlr.solvers.lbfgs").Pairs
    rng = np.random.default_rng(3)
    n, zero = 30, np.zeros(30)
    buffers = Pairs.empty(2, n)
    for _ in range(2):  # full: the next pair kept would overwrite the oldest
        s = rng.normal(size=n)
        assert buffers.push(s, zero, 2.0 * s, zero)
    g = rng.normal(size=n)
    before, S, Y = buffers.direction(g), buffers.S.copy(), buffers.Y.copy()
    s = rng.normal(size=n)
    assert not buffers.push(s, zero, -s, zero)  # s . y < 0
    assert not buffers.push(zero, zero, s, zero)  # s = 0
    np.testing.assert_array_equal(buffers.S, S)
    np.testing.assert_array_equal(buffers.Y, Y)
    np.testing.assert_array_equal(buffers.direction(g), before)


def test_add_scaled_adds_in_place_as_numpy_does():
    from dmlr._blas import add_scaled

    rng = np.random.default_rng(4)
    base, x = rng.normal(size=(7, 6)), rng.normal(size=(7, 6))
    cases = [
        (slice(None), slice(None)),  # C-contiguous: BLAS's axpy
        (slice(0, 6), slice(None)),  # leading rows: still contiguous
        (slice(None), slice(0, 6, 2)),  # strided: numpy
    ]
    for rows, cols in cases:
        y = base.copy()
        expected = base.copy()
        expected[rows, cols] += 0.3 * x[rows, cols]
        view = y[rows, cols]
        add_scaled(view, 0.3, x[rows, cols])
        # BLAS may fuse the multiply and the add: the same sum up to one rounding of each term
        np.testing.assert_allclose(y, expected, rtol=0, atol=1e-15 * (np.abs(base) + np.abs(x)).max())
        assert not np.array_equal(y, base)
    y = base.copy()
    add_scaled(y, 2.0, x.astype(np.float32))  # another dtype: numpy's sum
    np.testing.assert_array_equal(y, base + 2.0 * x.astype(np.float32))
    empty = np.zeros((0, 3))
    add_scaled(empty, 1.0, np.zeros((0, 3)))
    with pytest.raises(ValueError, match="shape"):
        add_scaled(base.copy(), 1.0, x[:3])


def test_add_combination_adds_rows_in_place_as_numpy_does():
    from dmlr._blas import add_combination

    rng = np.random.default_rng(5)
    A, x, base = rng.normal(size=(4, 9)), rng.normal(size=4), rng.normal(size=9)
    expected = base - 0.7 * (x @ A)
    atol = 1e-14 * (np.abs(base).max() + np.abs(A).max() * np.abs(x).sum())
    # C-contiguous: BLAS's gemv; a Fortran A and a strided y: numpy's expression
    for rows, y in ((A, base.copy()), (np.asfortranarray(A), base.copy()), (A, np.repeat(base, 2)[::2])):
        add_combination(y, -0.7, rows, x)  # written into y: no result to use
        np.testing.assert_allclose(y, expected, rtol=0, atol=atol)
    with pytest.raises(ValueError, match="shape"):
        add_combination(base.copy(), 1.0, A, x[:3])


def _intercept_regression(seed):
    """1/2 ||[F, 1] W - B||^2 with sparse, non-negative, uncentred features F (400 x 30) and an
    intercept row: the intercept's column is far longer than the features'."""
    rng = np.random.default_rng(seed)
    n, d, l = 400, 30, 6
    F = rng.random((n, d)) * (rng.random((n, d)) < 0.1)
    A = np.c_[F, np.ones(n)]
    B = A @ rng.normal(size=(d + 1, l)) + 0.1 * rng.normal(size=(n, l))
    return F, A, B


def test_intercept_variables_are_a_change_of_variables():
    """W = T V and back; the gradient in V is T^T of the gradient in W: on least squares,
    [F - 1 mean^T, scale 1]^T R, the residual's product with the centred, scaled design."""
    from dmlr.solvers.lbfgs import InterceptVariables

    F, A, B = _intercept_regression(0)
    n = len(F)
    variables = InterceptVariables.from_moments(F.sum(axis=0), (F * F).sum(axis=0), n)
    centred = F - F.mean(axis=0)
    assert variables.scale == pytest.approx(np.sqrt((centred * centred).sum(axis=0).mean() / n), rel=1e-12)
    V = np.random.default_rng(1).normal(size=(31, 6))
    W = variables.to_model(V)
    np.testing.assert_allclose(W[:-1], V[:-1], rtol=0, atol=0)  # the penalized rows are W's
    np.testing.assert_allclose(variables.to_solver(W), V, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(A @ W, np.c_[centred, np.full(n, variables.scale)] @ V, rtol=1e-12, atol=1e-12)
    R = A @ W - B
    np.testing.assert_allclose(
        variables.gradient(A.T @ R), np.c_[centred, np.full(n, variables.scale)].T @ R, rtol=1e-10, atol=1e-10
    )
    assert InterceptVariables.from_moments(np.full(3, 4.0), np.full(3, 8.0), 2) is None  # no feature varies


def test_lbfgs_in_intercept_variables_ends_at_the_same_minimizer_in_fewer_iterations():
    """With the features centred and the intercept scaled (``variables``), L-BFGS reaches the
    minimizer it reaches in W's own variables, in under half the iterations, and returns it in
    W's variables."""
    from dmlr.solvers.lbfgs import InterceptVariables, lbfgs_then_apg

    for seed in range(3):
        F, A, B = _intercept_regression(seed)
        oracle, _ = least_squares_nuclear(A, B, 0.5)

        def prox(V, s):
            Z, penalty = prox_nuclear_norm(V[:-1], 0.5, s)
            return np.vstack([Z, V[-1:]]), penalty

        variables = InterceptVariables.from_moments(F.sum(axis=0), (F * F).sum(axis=0), len(F))
        runs = [
            lbfgs_module.lbfgs_then_apg(
                oracle,
                prox,
                np.zeros((31, 6)),
                nuclear=0.5,
                rows=slice(0, -1),
                paper_lipschitz=lambda: float(np.linalg.norm(A, 2) ** 2),
                tol=1e-12,
                gradient_tol=1e-8,
                max_iter=5000,
                variables=v,
            )
            for v in (None, variables)
        ]
        plain, centred = runs
        assert plain.converged and centred.converged
        assert centred.objective_history[-1] == pytest.approx(plain.objective_history[-1], rel=1e-11)
        np.testing.assert_allclose(centred.x, plain.x, atol=1e-6)
        assert 2 * centred.n_iter < plain.n_iter, (centred.n_iter, plain.n_iter)
    with pytest.raises(ValueError, match="last row unpenalized"):
        lbfgs_then_apg(
            oracle,
            prox,
            np.zeros((31, 6)),
            nuclear=0.5,
            rows=slice(None),
            paper_lipschitz=lambda: 1.0,
            tol=1e-6,
            variables=variables,
        )
