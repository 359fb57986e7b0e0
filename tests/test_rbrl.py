"""Linear RBRL: gradient checks and parity with the published implementation."""

import sys

import numpy as np
import pytest
import scipy.sparse as sp

from dmlr.data.blocks import make_block
from dmlr.distributed.chunks import make_chunkset
from dmlr.models import RBRL
from dmlr.models.base import NotFittedError
from dmlr.objectives import rbrl as objective
from tests.conftest import RBRL_REF, require


def smooth_value_and_grad(X, Y, W, lambda1, lambda2, fit_intercept=True):
    block = make_block(X, Y, fit_intercept)
    values, grad = objective.block_value_and_grad(block, W[None], 0, lambda2)
    return objective.add_ridge(values, grad, W[None], 0, lambda1)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 5))
    Y = (rng.random((60, 4)) < 0.4).astype(np.int8)
    W = rng.normal(size=(6, 4)) * 0.3
    values, grad = smooth_value_and_grad(X, Y, W, 0.7, 0.3)
    eps = 1e-6
    num = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        E = np.zeros_like(W)
        E[idx] = eps
        num[idx] = (
            smooth_value_and_grad(X, Y, W + E, 0.7, 0.3)[0][0] - smooth_value_and_grad(X, Y, W - E, 0.7, 0.3)[0][0]
        ) / (2 * eps)
    np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-6)


def test_sparse_and_dense_give_the_same_model():
    rng = np.random.default_rng(1)
    Xd = rng.random((200, 30)) * (rng.random((200, 30)) < 0.1)
    Y = (rng.random((200, 6)) < 0.3).astype(np.int8)
    # the paper's fixed step: the kernels' rounding differences (1e-16) stay at that level
    dense = RBRL(max_iter=60, tol=0, scaling="maxabs", solver="paper").fit(Xd, Y)
    sparse = RBRL(max_iter=60, tol=0, scaling="maxabs", solver="paper").fit(sp.csr_matrix(Xd), Y)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sparse.decision_function(sp.csr_matrix(Xd)), dense.decision_function(Xd), atol=1e-10)
    # the default rule (L-BFGS) builds its model of the curvature from gradient differences,
    # so those differences move the iterates by more, but not the converged model
    dense = RBRL(tol=1e-12, scaling="maxabs").fit(Xd, Y)
    sparse = RBRL(tol=1e-12, scaling="maxabs").fit(sp.csr_matrix(Xd), Y)
    assert dense.converged_ and sparse.converged_
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("n_points, grad_point", [(1, 0), (2, 1), (3, -1)])
def test_sparse_pass_in_runs_of_rows_gives_the_whole_tile_pass_to_the_bit(monkeypatch, n_points, grad_point):
    """A CSR block's pass (scores and coefficients in runs of rows, tile by tile) gives the
    numbers of :func:`objective.fused_pass`'s whole-tile products, to the bit: tiles of 64
    rows split into runs of 7 (the last runs short), rows with no stored value, rows with
    many relevant labels (the sorted pairwise path), an unsorted, duplicated entry."""
    import dmlr.kernels.blocks as blocks

    monkeypatch.setattr(blocks, "TILE_BYTES", 1)  # the smallest tiles: 64 rows
    monkeypatch.setattr(objective, "SCORE_TILE_ROWS", 7)
    rng = np.random.default_rng(5)
    m, d, l = 300, 40, 50
    X = sp.random(m, d, density=0.15, format="csr", random_state=5)
    X.data[:] = rng.normal(size=X.nnz)
    X = X.tolil()
    X[10] = 0.0
    X = sp.csr_matrix(X)
    # row 0 starts with column 3 twice, ahead of its sorted entries
    indptr = X.indptr + 2 * (np.arange(m + 1) > 0)
    X = sp.csr_matrix((np.r_[0.5, -0.25, X.data], np.r_[3, 3, X.indices], indptr), shape=(m, d))
    assert X.indptr[1] - X.indptr[0] > 2 and not X.has_canonical_format
    Y = (rng.random((m, l)) < 0.2).astype(np.int8)
    Y[:20, :40] = 1
    points = rng.normal(size=(n_points, d, l)) * 0.3
    W = np.ascontiguousarray(points.transpose(1, 0, 2).reshape(d, n_points * l))
    for lambda2 in (0.0, 0.7):
        expected = objective.fused_pass(X, Y, W, n_points, l, grad_point, lambda2)
        got = objective.block_value_and_grad(make_block(X, Y, False), points, grad_point, lambda2)
        np.testing.assert_array_equal(got[0], expected[0])
        if grad_point < 0:
            assert got[1] is None and expected[1] is None
        else:
            np.testing.assert_array_equal(got[1], expected[1])


def test_sparse_pass_forms_no_tile_sized_scores():
    """The CSR pass holds the gradient and one tile's share of it, not the tile's scores and
    coefficients: its allocations stay under one tile's scores (4 MiB here, with the
    coefficients 8 MiB in the whole-tile pass)."""
    import tracemalloc

    from dmlr.kernels.blocks import TILE_BYTES

    rng = np.random.default_rng(6)
    m, d, l = 30_000, 200, 50
    X = sp.random(m, d, density=0.02, format="csr", random_state=6)
    Y = (rng.random((m, l)) < 0.1).astype(np.int8)
    block = make_block(X, Y, False)
    points = rng.normal(size=(1, d, l))
    objective.block_value_and_grad(block, points, 0, 0.5)  # compiled
    tracemalloc.start()
    try:
        objective.block_value_and_grad(block, points, 0, 0.5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < TILE_BYTES / 2, peak


def test_estimator_contract_and_input_errors():
    est = RBRL(alpha=2.0)
    assert est.get_params()["alpha"] == 2.0
    assert est.set_params(alpha_nuclear=0.5) is est and est.alpha_nuclear == 0.5
    with pytest.raises(ValueError, match="(?i)invalid parameter 'lambda1'"):
        est.set_params(lambda1=1)
    with pytest.raises(NotFittedError):
        est.predict(np.zeros((2, 3)))
    X = np.random.default_rng(0).normal(size=(20, 3))
    Y = np.zeros((20, 2), dtype=np.int8)
    Y[::2, 0] = 1
    assert est.fit(X, Y) is est
    assert est.coef_.shape == (4, 2) and est.n_iter_ == len(est.objective_history_)
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        RBRL().fit(X, np.where(Y > 0, 1, -1))
    with pytest.raises(ValueError, match="rows"):
        RBRL().fit(X, Y[:5])
    with pytest.raises(ValueError, match="alpha"):
        RBRL(alpha=-1).fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        est.decision_function(np.zeros((2, 5)))


def test_brl_and_br_variants_drop_their_terms():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(80, 4))
    Y = (rng.random((80, 3)) < 0.4).astype(np.int8)
    br = RBRL(alpha_rank=0.0, alpha_nuclear=0.0, max_iter=100, tol=0.0, solver="paper").fit(X, Y)
    # BR with the squared hinge decouples over labels, and the paper step does not depend on l:
    # each label refitted alone follows the same iterates
    # (pairs of labels: a single 0/1 column is a binary target, fitted as two class columns)
    for pair in ([0, 1], [1, 2], [2, 0]):
        two = RBRL(alpha_rank=0.0, alpha_nuclear=0.0, max_iter=100, tol=0.0, solver="paper").fit(X, Y[:, pair])
        np.testing.assert_allclose(two.coef_, br.coef_[:, pair], rtol=1e-10, atol=1e-12)


# --- parity with the reference implementation (../shared/anchors/rbrl_reference) ---------------


def _reference_summary():
    out = {}
    for line in require(RBRL_REF / "linear_summary.txt").read_text().splitlines():
        key, _, value = line.partition(" = ")
        out[key.strip()] = value.strip()
    return out


@pytest.mark.realdata
def test_gradient_at_zero_matches_reference(reference_emotions):
    Xtr, Ytr, _, _ = reference_emotions
    _, grad = smooth_value_and_grad(Xtr, Ytr, np.zeros((73, 6)), 1.0, 0.01)
    ref = np.loadtxt(require(RBRL_REF / "linear_grad_W0.txt"))
    np.testing.assert_allclose(grad, ref, rtol=1e-12, atol=1e-9)
    block = make_block(Xtr, Ytr, True)
    x_fro2, A, B = objective.block_lipschitz_stats(block)
    assert x_fro2 == pytest.approx(25732.943488369758, rel=1e-12)
    assert np.sqrt(np.max(A * B)) == pytest.approx(12827.322962219101, rel=1e-12)
    assert objective.paper_lipschitz(x_fro2, A, B, 1.0, 0.01) == pytest.approx(44571.31932971255, rel=1e-12)


@pytest.mark.realdata
def test_linear_rbrl_reproduces_reference_on_emotions(reference_emotions):
    import dmlr

    Xtr, Ytr, Xte, Yte = reference_emotions
    model = RBRL(
        alpha=1,
        alpha_rank=0.01,
        alpha_nuclear=0.1,
        max_iter=1999,
        tol=1e-6,
        scaling=None,
        solver="paper",
        penalize_intercept=True,
        threshold=0.0,  # the reference's label rule
    ).fit(Xtr, Ytr)
    ref_obj = np.loadtxt(require(RBRL_REF / "linear_obj.txt"))
    assert model.n_iter_ == 702 == len(ref_obj)
    np.testing.assert_allclose(model.objective_history_, ref_obj, rtol=1e-6)
    ref_scores = np.loadtxt(RBRL_REF / "linear_pre_F_test.txt")
    np.testing.assert_allclose(model.decision_function(Xte), ref_scores, rtol=1e-6, atol=1e-6)
    ref_labels = np.loadtxt(RBRL_REF / "linear_pre_Label_test.txt") > 0
    np.testing.assert_array_equal(model.predict(Xte), ref_labels.astype(np.int8))
    summary = _reference_summary()
    metrics = dmlr.evaluate(model, (Xte, Yte))
    names = {
        "HammingLoss": "hamming_loss",
        "SubsetAccuracy": "subset_accuracy",
        "AccuracyExample": "accuracy",
        "F1_Micro_Label": "f1_micro",
        "F1_Macro_Label": "f1_macro",
        "F1_Example": "f1_example",
        "Ranking_Loss": "ranking_loss",
        "Coverage": "coverage",
        "Average_Precision": "average_precision",
        "One_Error": "one_error",
        "AUC_Macro_Label": "auc_macro",
    }
    for ref_key, key in names.items():
        assert metrics[key] == pytest.approx(float(summary[ref_key]), rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("penalize_intercept", [False, True])
def test_intercept_is_left_out_of_the_penalties_unless_asked(penalize_intercept):
    # At the optimum the data term's gradient balances the penalties (KKT). With an
    # unpenalized intercept nothing balances it on the bias row, which then has a zero
    # data gradient; with the paper's penalized bias it is -alpha * bias.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 6))
    Y = (rng.random((80, 5)) < 0.3).astype(np.int8)
    alpha = 40.0
    model = RBRL(
        alpha=alpha,
        alpha_rank=0.3,
        alpha_nuclear=0.0,
        tol=0,
        max_iter=5000,
        gradient_tol=1e-12,
        scaling=None,
        penalize_intercept=penalize_intercept,
    ).fit(X, Y)
    W = model.coef_
    _, data_grad = smooth_value_and_grad(X, Y, W, 0.0, 0.3)
    np.testing.assert_allclose(data_grad[:-1], -alpha * W[:-1], atol=1e-6)
    bias_balance = -alpha * W[-1] if penalize_intercept else np.zeros_like(W[-1])
    np.testing.assert_allclose(data_grad[-1], bias_balance, atol=1e-6)
    assert np.abs(W[-1]).max() > 0.1  # the check is not vacuous: the biases are far from 0


def test_nuclear_norm_leaves_the_unpenalized_bias_row_out():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(60, 4))
    Y = (rng.random((60, 6)) < 0.3).astype(np.int8)
    # a nuclear-norm weight that zeroes the feature rows: only the biases stay
    model = RBRL(alpha=1.0, alpha_nuclear=1e6, tol=0, max_iter=300, scaling=None).fit(X, Y)
    np.testing.assert_array_equal(model.coef_[:-1], 0.0)
    _, data_grad = smooth_value_and_grad(X, Y, model.coef_, 0.0, 0.01)
    np.testing.assert_allclose(data_grad[-1], 0.0, atol=1e-6)
    paper = RBRL(alpha=1.0, alpha_nuclear=1e6, tol=0, max_iter=300, scaling=None, penalize_intercept=True).fit(X, Y)
    np.testing.assert_array_equal(paper.coef_, 0.0)


def _objective(model, X, Y):
    """RBRL's objective (eq. 8) at the model's coefficients, unpenalized bias row, in numpy."""
    W = model.coef_
    value, _ = smooth_value_and_grad(X, Y, W, 0.0, model.alpha_rank)
    feat = W[:-1]
    return value + model.alpha / 2 * (feat**2).sum() + model.alpha_nuclear * np.linalg.svd(feat, compute_uv=False).sum()


@pytest.mark.parametrize("alpha_nuclear", [0.5, 30.0])  # full rank at the optimum; rank-deficient
def test_lbfgs_step_rule_reaches_the_proximal_optimum(alpha_nuclear):
    from dmlr.models import KernelRBRL

    rng = np.random.default_rng(5)
    X = rng.normal(size=(90, 7))
    Y = (X @ rng.normal(size=(7, 5)) + rng.normal(size=(90, 5)) > 0.5).astype(np.int8)
    params = dict(alpha=2.0, alpha_rank=0.3, alpha_nuclear=alpha_nuclear, scaling=None, max_iter=20000)
    tight = RBRL(solver="spectral", tol=1e-14, gradient_tol=1e-12, **params).fit(X, Y)
    quasi = RBRL(solver="lbfgs", tol=1e-12, **params).fit(X, Y)
    rank = np.linalg.matrix_rank(tight.coef_[:-1], tol=1e-6)
    assert rank == 5 if alpha_nuclear < 1 else 0 < rank < 5
    assert quasi.converged_
    assert _objective(quasi, X, Y) == pytest.approx(_objective(tight, X, Y), rel=1e-9)
    np.testing.assert_allclose(quasi.coef_, tight.coef_, atol=1e-4)
    # the kernel model's variable (dual coefficients) too
    k_tight = KernelRBRL(solver="spectral", tol=1e-14, gradient_tol=1e-12, **params).fit(X, Y)
    k_quasi = KernelRBRL(solver="lbfgs", tol=1e-12, **params).fit(X, Y)
    assert k_quasi.objective_history_[-1] <= k_tight.objective_history_[-1] * (1 + 1e-9)
    np.testing.assert_allclose(k_quasi.decision_function(X), k_tight.decision_function(X), atol=1e-3)


def test_a_warm_start_at_a_rank_deficient_point_starts_with_apg(monkeypatch):
    # along a path, a rank-deficient optimum (where L-BFGS fails and hands the fit to APG) is
    # followed by another: the next warm-started fit skips L-BFGS, and reaches the same optimum
    rng = np.random.default_rng(5)
    X = rng.normal(size=(90, 7))
    Y = (X @ rng.normal(size=(7, 5)) + rng.normal(size=(90, 5)) > 0.5).astype(np.int8)
    params = dict(alpha=2.0, alpha_rank=0.3, scaling=None, tol=1e-10, max_iter=20000)
    path = RBRL(alpha_nuclear=30.0, warm_start=True, **params).fit(X, Y)
    assert np.isfinite(path.lipschitz_)  # APG finished it
    assert 0 < np.linalg.matrix_rank(path.coef_[:-1], tol=1e-6) < 5
    # calling L-BFGS would fail (the module, which dmlr.solvers' function of the same name hides)
    monkeypatch.setattr(sys.modules["dmlr.solvers.lbfgs"], "lbfgs", None)
    path.set_params(alpha_nuclear=25.0).fit(X, Y)
    cold = RBRL(alpha_nuclear=25.0, solver="adaptive", **params).fit(X, Y)
    assert path.converged_
    assert path.objective_history_[-1] == pytest.approx(cold.objective_history_[-1], rel=1e-8)
    monkeypatch.undo()
    # at a full-rank point L-BFGS runs, and alone
    path.set_params(alpha_nuclear=0.5).fit(X, Y)
    again = path.set_params(alpha_nuclear=0.4).fit(X, Y)
    assert again.converged_ and np.isnan(again.lipschitz_)


def test_progress_clock_runs_on_through_the_handover_to_apg(capsys):
    # alpha_nuclear 30: a rank-deficient optimum, where L-BFGS hands the fit to APG
    rng = np.random.default_rng(5)
    X = rng.normal(size=(90, 7))
    Y = (X @ rng.normal(size=(7, 5)) + rng.normal(size=(90, 5)) > 0.5).astype(np.int8)
    model = RBRL(alpha=2.0, alpha_rank=0.3, alpha_nuclear=30.0, scaling=None, solver="lbfgs", tol=1e-12, verbose=1).fit(
        X, Y
    )
    lines = [x for x in capsys.readouterr().out.splitlines() if "elapsed" in x]
    seconds = [float(x.split("elapsed")[1].split()[0]) for x in lines]
    assert len(seconds) >= model.n_iter_  # every iteration shown (verbose=1)
    assert all(b >= a for a, b in zip(seconds, seconds[1:])), seconds
    assert np.all(np.diff(model.objective_seconds_) >= 0)


@pytest.mark.parametrize("solver", ["lbfgs", "adaptive"])
def test_columns_empty_in_the_training_rows_are_left_out_exactly(monkeypatch, solver):
    """A column with no value in the training rows gets a zero row of W, and the solver leaves it
    out (``_active_columns``): the same model as with every column, up to summation order, on
    scipy, dense and dask input alike, and from a warm start."""
    import dask.array as da

    from dmlr.data.arrays import gcxs_from_csr
    from dmlr.models import rbrl as rbrl_module

    rng = np.random.default_rng(0)
    X = sp.random(300, 60, density=0.08, format="csr", random_state=1)
    X = sp.csr_matrix(X.multiply(np.arange(60) % 3 != 0))  # every third column empty
    X.eliminate_zeros()
    Y = (X[:, 1:9].toarray() + 0.05 * rng.normal(size=(300, 8)) > 0.02).astype(np.int8)
    params = dict(alpha=0.5, alpha_nuclear=0.2, solver=solver, tol=1e-9, max_iter=3000, scaling="maxabs")
    blocks = make_chunkset(X, Y, fit_intercept=True, backend="local")
    assert np.array_equal(rbrl_module._active_columns(blocks), np.flatnonzero(np.r_[np.arange(60) % 3, 1]))
    left_out = RBRL(**params).fit(X, Y)
    monkeypatch.setattr(rbrl_module, "_active_columns", lambda chunks: None)
    every = RBRL(**params).fit(X, Y)
    monkeypatch.undo()
    assert left_out.coef_.shape == every.coef_.shape == (61, 8)
    assert not left_out.coef_[:60][::3].any()  # the empty columns' rows, exactly zero
    np.testing.assert_allclose(left_out.coef_, every.coef_, rtol=1e-5, atol=1e-7)
    assert left_out.objective_history_[-1] == pytest.approx(every.objective_history_[-1], rel=1e-9)
    dense = RBRL(**params).fit(X.toarray(), Y)
    np.testing.assert_allclose(dense.coef_, left_out.coef_, rtol=1e-5, atol=1e-7)
    chunks = [gcxs_from_csr(X[i : i + 100]) for i in range(0, 300, 100)]
    lazy = da.concatenate([da.from_array(c, chunks=c.shape, asarray=False) for c in chunks])
    on_dask = RBRL(**params).fit(lazy, da.from_array(Y, chunks=(100, -1)))
    np.testing.assert_allclose(on_dask.coef_, left_out.coef_, rtol=1e-5, atol=1e-7)
    warm = RBRL(**params, warm_start=True).fit(X, Y)
    warm.set_params(alpha=0.4).fit(X, Y)
    cold = RBRL(**{**params, "alpha": 0.4}).fit(X, Y)
    assert warm.objective_history_[-1] == pytest.approx(cold.objective_history_[-1], rel=1e-8)
    assert not warm.coef_[:60][::3].any()


def test_a_fit_on_dask_input_reads_each_chunk_once():
    """The chunk set reads the input's chunks once, where its blocks are built; the unused
    columns are counted on the blocks, not by a read pass of their own."""
    import dask
    import dask.array as da

    X = np.zeros((60, 9))
    X[:, [1, 4, 8]] = np.random.default_rng(0).normal(size=(60, 3))
    Y = (X[:, [1, 4]] > 0).astype(np.int8)
    reads = []

    def chunk(i):
        reads.append(i)
        return X[20 * i : 20 * (i + 1)]

    lazy = da.concatenate([da.from_delayed(dask.delayed(chunk)(i), (20, 9), dtype=np.float64) for i in range(3)])
    model = RBRL(alpha=0.5, tol=1e-8, scaling=None).fit(lazy, da.from_array(Y, chunks=(20, -1)))
    assert sorted(reads) == [0, 1, 2]
    assert not model.coef_[[0, 2, 3, 5, 6, 7]].any()
    here = RBRL(alpha=0.5, tol=1e-8, scaling=None).fit(X, Y)
    np.testing.assert_allclose(model.coef_, here.coef_, rtol=1e-6, atol=1e-8)


def test_unused_columns_are_found_in_dask_input_chunked_along_columns():
    import dask.array as da

    X = np.zeros((40, 9))
    X[:, [1, 4, 8]] = np.random.default_rng(0).normal(size=(40, 3))
    Y = (X[:, [1, 4]] > 0).astype(np.int8)
    params = dict(alpha=0.5, tol=1e-10, max_iter=2000, scaling="maxabs")
    here = RBRL(**params).fit(X, Y)
    lazy = RBRL(**params).fit(da.from_array(X, chunks=(10, 3)), da.from_array(Y, chunks=(10, -1)))
    assert not here.coef_[[0, 2, 3, 5, 6, 7]].any()
    np.testing.assert_allclose(lazy.coef_, here.coef_, rtol=1e-6, atol=1e-8)


def test_lbfgs_fits_the_intercept_in_centred_variables(monkeypatch):
    """RBRL's L-BFGS runs in :class:`~dmlr.solvers.lbfgs.InterceptVariables` (the features'
    means from the training rows, on every backend's blocks): the same model as in W's own
    variables, in fewer iterations, on sparse tf-idf features whose intercept column is far
    longer than theirs."""
    from dmlr.models import rbrl as rbrl_module

    rng = np.random.default_rng(0)
    X = sp.random(600, 80, density=0.05, format="csr", random_state=2)
    Y = (X[:, :6].toarray() + 0.05 * rng.normal(size=(600, 6)) > 0.03).astype(np.int8)
    params = dict(alpha=0.5, alpha_nuclear=0.05, solver="lbfgs", tol=1e-10, max_iter=3000, scaling="tfidf")
    seen = []
    real = rbrl_module.RBRL._lbfgs_variables

    def recording(self, chunks):
        seen.append(real(self, chunks))
        return seen[-1]

    monkeypatch.setattr(rbrl_module.RBRL, "_lbfgs_variables", recording)
    centred = RBRL(**params).fit(X, Y)
    assert seen[-1] is not None and seen[-1].mean.shape == (80,)
    monkeypatch.setattr(rbrl_module.RBRL, "_lbfgs_variables", lambda self, chunks: None)
    plain = RBRL(**params).fit(X, Y)
    assert centred.objective_history_[-1] == pytest.approx(plain.objective_history_[-1], rel=1e-8)
    np.testing.assert_allclose(centred.coef_, plain.coef_, atol=1e-4 * np.abs(plain.coef_).max())
    assert 2 * centred.n_iter_ < plain.n_iter_, (centred.n_iter_, plain.n_iter_)
