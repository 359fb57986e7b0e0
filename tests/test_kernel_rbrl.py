"""Kernel RBRL (eq. 12) and the step rules: block decomposition, parity with the reference."""

import numpy as np
import pytest

import dmlr
from dmlr.distributed.chunks import make_chunkset
from dmlr.kernels.gram import KernelSpec, kernel_matrix
from dmlr.models import RBRL, KernelRBRL
from dmlr.models.rbrl import DEFAULT_SOLVER
from dmlr.objectives import kernel_rbrl
from dmlr.objectives import rbrl as objective
from tests.conftest import RBRL_REF, require


def _problem(seed=0, n=40, p=5, l=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    Y = (rng.random((n, l)) < 0.4).astype(np.int8)
    return X, Y


def dense_kernel_objective(K, Y, A, lambda1, lambda2):
    """eq. 12's smooth part written out with the full K and explicit pair loops (the reference's form)."""
    S = K @ A
    sign = np.where(Y > 0, 1.0, -1.0)
    hinge = np.maximum(0.0, 1.0 - sign * S)
    f = 0.5 * (hinge**2).sum() + 0.5 * lambda1 * np.trace(A.T @ K @ A)
    for i in range(Y.shape[0]):
        P, N = np.flatnonzero(Y[i]), np.flatnonzero(Y[i] == 0)
        if len(P) and len(N):
            f += lambda2 * 0.5 * sum(max(0.0, 2.0 - (S[i, p] - S[i, q])) ** 2 for p in P for q in N) / (len(P) * len(N))
    return f


def test_rbf_kernel_matches_explicit_distances():
    X, _ = _problem()
    spec = KernelSpec.resolve("rbf", None, 3, 1.0, X.shape[1])
    assert spec.gamma == pytest.approx(1 / 5)
    explicit = np.exp(-0.2 * ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1))
    np.testing.assert_allclose(kernel_matrix(X, X, spec), explicit, rtol=1e-12, atol=1e-14)
    poly = KernelSpec.resolve("poly", 0.5, 2, 1.0, 5)
    np.testing.assert_allclose(kernel_matrix(X[:3], X, poly), (0.5 * X[:3] @ X.T + 1.0) ** 2)
    with pytest.raises(ValueError, match="kernel must be"):
        KernelSpec.resolve("sigmoid", None, 3, 1.0, 5)


@pytest.mark.parametrize("keep", [True, False])
def test_kernel_blocks_sum_to_the_dense_objective_and_its_gradient(keep):
    X, Y = _problem()
    spec = KernelSpec.resolve("rbf", 0.3, 3, 1.0, X.shape[1])
    K = kernel_matrix(X, X, spec)
    rng = np.random.default_rng(1)
    points = rng.normal(size=(2, X.shape[0], Y.shape[1])) * 0.2
    base = make_chunkset(X, Y, fit_intercept=False, backend="local", n_blocks=3)
    chunks = base.transform(kernel_rbrl.make_kernel_block, X, spec, keep)
    values, grad = chunks.map_reduce(kernel_rbrl.block_value_and_grad, points, 1, 0.7, 0.3)
    for k in range(2):
        assert values[k] == pytest.approx(dense_kernel_objective(K, Y, points[k], 0.7, 0.3), rel=1e-12)
    eps = 1e-6
    A = points[1]
    for idx in [(0, 0), (7, 2), (39, 3), (20, 1)]:
        E = np.zeros_like(A)
        E[idx] = eps
        num = (dense_kernel_objective(K, Y, A + E, 0.7, 0.3) - dense_kernel_objective(K, Y, A - E, 0.7, 0.3)) / (
            2 * eps
        )
        assert grad[idx] == pytest.approx(num, rel=1e-5, abs=1e-6)


def test_spectral_bound_is_a_lipschitz_constant_of_the_gradient():
    # ||grad f(W) - grad f(V)|| <= L ||W - V|| for L from the Hessian bound (linear and kernel)
    X, Y = _problem(2, n=60)
    rng = np.random.default_rng(3)
    lam1, lam2 = 0.1, 1.0
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="local", n_blocks=2)
    d = X.shape[1] + 1
    L = objective.spectral_lipschitz(
        lambda v: chunks.map_reduce(objective.block_curvature_matvec, v, lam2), d, shift=lam1
    )
    x_fro2, A, B = chunks.map_reduce(objective.block_lipschitz_stats)
    assert L < objective.paper_lipschitz(x_fro2, A, B, lam1, lam2)

    def grad(W):
        _, g = chunks.map_reduce(objective.block_value_and_grad, W[None], 0, lam2)
        return g + lam1 * W

    ratios = []
    for _ in range(200):
        W = rng.normal(size=(d, Y.shape[1]))
        V = W + rng.normal(size=W.shape) * 10 ** rng.uniform(-3, 0)
        ratios.append(np.linalg.norm(grad(W) - grad(V)) / np.linalg.norm(W - V))
    assert max(ratios) <= L * (1 + 1e-9)
    assert max(ratios) > 0.3 * L  # and it is not loose by orders of magnitude


def test_step_rules_reach_the_same_optimum_in_fewer_iterations():
    X, Y = _problem(4, n=120, p=8, l=5)
    runs = {}
    for step in ("paper", "backtracking", "spectral", "adaptive"):
        runs[step] = RBRL(alpha=0.1, alpha_rank=0.5, alpha_nuclear=0.2, solver=step, max_iter=20000, tol=1e-12).fit(
            X, Y
        )
    best = min(r.objective_history_[-1] for r in runs.values())
    for step, r in runs.items():
        assert r.objective_history_[-1] == pytest.approx(best, rel=1e-8), step
    for kern, model in ((None, RBRL()), ("rbf", KernelRBRL("rbf"))):
        paper = model.set_params(solver="paper").fit(X, Y)
        target = paper.objective_history_[-1] * (1 + 1e-6)
        paper_n_iter = paper.n_iter_
        for step in ("backtracking", "spectral", "adaptive"):
            fast = model.set_params(solver=step).fit(X, Y)
            first = int(np.argmax(np.array(fast.objective_history_) <= target)) + 1
            assert fast.objective_history_[-1] <= target, (kern, step)
            assert first < paper_n_iter, (kern, step, first, paper_n_iter)
        # the default: stops by its test, as good as the paper step's stop, in fewer iterations
        default = model.set_params(solver=DEFAULT_SOLVER).fit(X, Y)
        assert default.converged_ and default.n_iter_ < default.max_iter, kern
        assert default.objective_history_[-1] <= target and default.n_iter_ < paper_n_iter, kern


def test_kernel_model_save_load_and_dask_prediction(tmp_path):
    import dask.array as da

    from dmlr.models.base import load_model

    X, Y = _problem(5, n=50)
    model = KernelRBRL("rbf", max_iter=50, scaling=None).fit(X, Y)
    assert model.dual_coef_.shape == (50, 4) and model.support_.shape == (50, 5)
    path = model.save(tmp_path / "k.npz")
    again = load_model(path)
    Xn = np.random.default_rng(9).normal(size=(13, 5))
    np.testing.assert_array_equal(again.decision_function(Xn), model.decision_function(Xn))
    lazy = model.decision_function(da.from_array(Xn, chunks=(4, 5)))
    np.testing.assert_allclose(lazy.compute(), model.decision_function(Xn), rtol=1e-12)
    # the kernel prediction is k(X, support) A
    K = kernel_matrix(Xn, X, KernelSpec.resolve("rbf", None, 3, 1.0, 5))
    np.testing.assert_allclose(model.decision_function(Xn), K @ model.dual_coef_, rtol=1e-12)


def test_kernel_memory_settings_give_the_same_model():
    X, Y = _problem(6, n=45)
    model = KernelRBRL("poly", degree=2, max_iter=40, tol=0)
    with dmlr.config_context(n_blocks=3, backend="local"):
        keep = model.fit(X, Y).dual_coef_.copy()
        with dmlr.config_context(kernel_memory="recompute"):
            again = model.fit(X, Y).dual_coef_
    np.testing.assert_array_equal(keep, again)


@pytest.mark.realdata
def test_kernel_rbrl_reproduces_reference_on_emotions(reference_emotions):
    Xtr, Ytr, Xte, _ = reference_emotions
    # the reference appends the constant feature before the kernel (it does not change RBF distances)
    model = KernelRBRL(
        "rbf",
        scaling=None,
        gamma=1 / 72,
        alpha=1,
        alpha_rank=0.01,
        alpha_nuclear=0.1,
        max_iter=1999,
        solver="paper",
        threshold=0.0,  # the reference's label rule
    ).fit(Xtr, Ytr)
    ref_obj = np.loadtxt(require(RBRL_REF / "kernel_obj.txt"))
    assert model.n_iter_ == 1648 == len(ref_obj)
    np.testing.assert_allclose(model.objective_history_, ref_obj, rtol=1e-6)
    np.testing.assert_allclose(model.dual_coef_, np.loadtxt(RBRL_REF / "kernel_A.txt"), rtol=1e-6, atol=1e-8)
    ref_scores = np.loadtxt(RBRL_REF / "kernel_pre_F_test.txt")
    np.testing.assert_allclose(model.decision_function(Xte), ref_scores, rtol=1e-6, atol=1e-6)
    ref_labels = np.loadtxt(RBRL_REF / "kernel_pre_Label_test.txt") > 0
    np.testing.assert_array_equal(model.predict(Xte), ref_labels.astype(np.int8))


def test_br_variant_equals_liblinear_squared_hinge_svm():
    # lambda2 = lambda3 = 0: per-label L2-regularized squared-hinge SVMs. liblinear's primal
    # 1/2 ||w||^2 + C sum sqhinge with C = 1/(2 lambda1) (its intercept is a regularized
    # constant feature, as RBRL's bias with penalize_intercept): an independent solver for
    # the same optimum.
    from sklearn.svm import LinearSVC

    X, Y = _problem(7, n=150, p=6, l=3)
    lam1 = 0.5
    ours = RBRL(
        alpha=lam1,
        alpha_rank=0.0,
        alpha_nuclear=0.0,
        solver="spectral",
        tol=1e-13,
        max_iter=20000,
        scaling=None,
        penalize_intercept=True,
    ).fit(X, Y)
    for j in range(Y.shape[1]):
        svm = LinearSVC(
            C=1 / (2 * lam1), loss="squared_hinge", dual=False, tol=1e-12, max_iter=100000, intercept_scaling=1.0
        ).fit(X, Y[:, j].astype(np.int64))
        np.testing.assert_allclose(ours.coef_[:-1, j], svm.coef_.ravel(), rtol=1e-5, atol=1e-6)
        assert ours.coef_[-1, j] == pytest.approx(svm.intercept_[0], rel=1e-5, abs=1e-6)


def test_nystroem_model_is_the_linear_model_on_the_kernel_features(tmp_path):
    import dask.array as da
    from sklearn.pipeline import make_pipeline

    from dmlr.kernel_approximation import KernelFeatures

    X, Y = _problem(7, n=90, p=6, l=5)
    # to convergence: run past it (tol=0), L-BFGS wanders at rounding level, and the several
    # chunks' summation order below then moves the coefficients by about 1e-7 relative
    params = {"alpha": 3.0, "max_iter": 200, "tol": 1e-12}
    model = KernelRBRL("rbf", n_components=30, random_state=2, **params).fit(X, Y)
    assert model.converged_ and model.landmarks_.shape == (30, 6) and model.coef_.shape == (31, 5)
    assert not hasattr(model, "dual_coef_") and model.backend_ == "local"
    # both at their defaults: one approximate-kernel problem whichever route reaches it
    pipe = make_pipeline(KernelFeatures("rbf", n_components=30, random_state=2), RBRL(**params)).fit(X, Y)
    np.testing.assert_allclose(model.coef_, pipe[-1].coef_, rtol=1e-12, atol=1e-14)
    Xn = np.random.default_rng(8).normal(size=(11, 6))
    np.testing.assert_allclose(model.decision_function(Xn), pipe.decision_function(Xn), rtol=1e-12, atol=1e-12)
    # the file holds the landmarks, not the training rows, and reloads to the same scores
    again = dmlr.load(model.save(tmp_path / "nys.npz"))
    np.testing.assert_array_equal(again.decision_function(Xn), model.decision_function(Xn))
    # dask input, several chunks: the same model (up to summation order)
    lazy = KernelRBRL("rbf", n_components=30, random_state=2, **params).fit(
        da.from_array(X, chunks=(25, 6)), da.from_array(Y, chunks=(25, 5))
    )
    np.testing.assert_allclose(lazy.coef_, model.coef_, rtol=1e-8, atol=1e-10)
    # more landmarks than rows: every row is one
    assert KernelRBRL(n_components=500, max_iter=5).fit(X, Y).landmarks_.shape == (90, 6)


def test_nystroem_map_is_reused_along_a_warm_started_path_on_the_same_rows():
    X, Y = _problem(8, n=70, p=5, l=3)
    model = KernelRBRL(n_components=20, random_state=1, warm_start=True, max_iter=30).fit(X, Y)
    projection = model.projection_
    model.set_params(alpha=0.1).fit(X, Y)
    assert model.projection_ is projection  # the same landmarks: K_mm^{-1/2} not formed again
    cold = KernelRBRL(n_components=20, random_state=1, alpha=0.1, max_iter=30).fit(X, Y)
    np.testing.assert_array_equal(cold.projection_, projection)
    model.fit(X[:60], Y[:60])  # other rows, other landmarks: a new map
    assert model.projection_ is not projection and not np.array_equal(model.landmarks_, cold.landmarks_)
