"""The APG's speculative call with the extrapolation done on the blocks (W_prev and S(W) kept there)."""

import numpy as np
import pytest
import scipy.sparse as sp

import dmlr
from dmlr.distributed.chunks import make_chunkset
from dmlr.kernels.blocks import make_block
from dmlr.models import RBRL, KernelRBRL
from dmlr.models.rbrl import _extrapolated_oracle
from dmlr.objectives import rbrl as objective


def problem(sparse, seed=0, n=700, d=30, l=12):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    if sparse:
        X[rng.random((n, d)) < 0.8] = 0.0
        X = sp.csr_matrix(X)
    Y = (rng.random((n, l)) < 0.25).astype(np.int8)
    return X, Y


def stacked(block, W, W_prev, m, lam2):
    """The plain oracle's answer at [W, G], G = W + m (W - W_prev)."""
    return objective.block_value_and_grad(block, np.stack([W, W + m * (W - W_prev)]), 1, lam2)


def block_and_points(sparse, seed, k):
    """A block of :func:`problem` (with an intercept) and k random points for it."""
    X, Y = problem(sparse)
    rng = np.random.default_rng(seed)
    return make_block(X, Y, fit_intercept=True), [
        rng.standard_normal((X.shape[1] + 1, Y.shape[1])) * 0.3 for _ in range(k)
    ]


def assert_matches_stacked(out, block, W, W_prev, m, lam2):
    values, grad = stacked(block, W, W_prev, m, lam2)
    np.testing.assert_allclose(out[0], values, rtol=1e-12)
    np.testing.assert_allclose(out[1], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())


@pytest.mark.parametrize("sparse", [False, True])
def test_block_call_equals_the_stacked_points_with_and_without_held_state(sparse):
    block, Ws = block_and_points(sparse, 1, 4)
    lam2 = 0.7

    def check(out, W, W_prev, m):
        assert_matches_stacked(out, block, W, W_prev, m, lam2)

    # first call: nothing held, W_prev sent
    check(objective.block_extrapolated_value_and_grad(block, Ws[1], Ws[0], 0.4, None, "k1", lam2), Ws[1], Ws[0], 0.4)
    # dense blocks keep S(W) (l <= d + 1 here), sparse ones do not
    assert (block.state["extrapolation"][2] is None) == sparse
    # next call: W_prev found on the block under its key, not sent
    check(objective.block_extrapolated_value_and_grad(block, Ws[2], None, 0.7, "k1", "k2", lam2), Ws[2], Ws[1], 0.7)
    # a key the block does not hold and no W_prev: it asks for W_prev (a sparse block: for [W | G]) instead of guessing
    assert objective.block_extrapolated_value_and_grad(block, Ws[3], None, 0.7, "k1", "k3", lam2) == (
        objective.SEND_POINT_PAIR if sparse else None
    )
    if sparse:  # sent that pair
        pair = np.concatenate([Ws[3], Ws[3] + 0.7 * (Ws[3] - Ws[2])], axis=1)
        check(objective.block_extrapolated_value_and_grad(block, Ws[3], pair, 0.7, None, "k3", lam2), Ws[3], Ws[2], 0.7)
    # zero momentum (a restart): G = W
    check(objective.block_extrapolated_value_and_grad(block, Ws[3], Ws[2], 0.0, None, "k3", lam2), Ws[3], Ws[2], 0.0)


@pytest.mark.parametrize("keep_scores", [True, False])
def test_held_calls_over_many_tiles_are_exact_and_reuse_their_buffers(keep_scores, monkeypatch):
    # 64-row tiles: 11 tiles, the last one short; with l > d + 1 the block does not keep S(W)
    monkeypatch.setattr(objective, "product_tile_rows", lambda X, n_outputs, n_score_cols: 64)
    X, Y = problem(False, d=30 if keep_scores else 8)
    block = make_block(X, Y, fit_intercept=True)
    rng = np.random.default_rng(3)
    Ws = [rng.standard_normal((X.shape[1] + 1, Y.shape[1])) * 0.3 for _ in range(6)]

    def buffers():
        tiles = block.state["extrapolation"][2] or []
        return {id(t.base) for t in tiles} | {id(b) for b in block.state["score_scratch"]}

    out = objective.block_extrapolated_value_and_grad(block, Ws[1], Ws[0], 0.4, None, 1, 0.7)
    assert (block.state["extrapolation"][2] is not None) == keep_scores
    first = buffers()
    for k in range(2, 6):
        expected = stacked(block, Ws[k - 1], Ws[k - 2], 0.4, 0.7)
        np.testing.assert_allclose(out[0], expected[0], rtol=1e-12)
        np.testing.assert_allclose(out[1], expected[1], rtol=1e-10, atol=1e-10 * np.abs(expected[1]).max())
        out = objective.block_extrapolated_value_and_grad(block, Ws[k], None, 0.4, k - 1, k, 0.7)
        assert buffers() == first  # steady-state calls write into the buffers the block holds


def test_dense_tiles_keep_each_product_small_and_fall_back_for_sparse_and_wide_rows():
    from dmlr.kernels.blocks import MIN_SMALL_TILE_ROWS, SMALL_PRODUCT_MNK, product_tile_rows, tile_rows

    X = np.zeros((5000, 1160))  # a yeast-sized kernel block, 14 labels
    rows = product_tile_rows(X, 14, 28)
    assert MIN_SMALL_TILE_ROWS <= rows
    assert rows * 1160 * 14 <= SMALL_PRODUCT_MNK < (rows + 1) * 1160 * 14
    assert product_tile_rows(sp.csr_matrix(X), 14, 28) == tile_rows(28)
    # rows too wide for a small product with MIN_SMALL_TILE_ROWS rows: the byte rule
    assert product_tile_rows(np.zeros((10, 10_000)), 101, 202) == tile_rows(202)


def test_small_product_tiles_give_the_whole_block_answer():
    # 401 columns with the bias, 50 labels: the held call runs in 49-row tiles (62 of them,
    # the last one short), the stacked reference (100 score columns) in one tile
    from dmlr.kernels.blocks import product_tile_rows

    X, Y = problem(False, n=3000, d=400, l=50)
    block = make_block(X, Y, fit_intercept=True)
    assert product_tile_rows(block.X, 50, 100) == 49
    rng = np.random.default_rng(5)
    Ws = [rng.standard_normal((401, 50)) * 0.05 for _ in range(3)]
    objective.block_extrapolated_value_and_grad(block, Ws[1], Ws[0], 0.3, None, 1, 0.5)
    out = objective.block_extrapolated_value_and_grad(block, Ws[2], None, 0.6, 1, 2, 0.5)
    assert_matches_stacked(out, block, Ws[2], Ws[1], 0.6, 0.5)


@pytest.mark.parametrize("sparse", [False, True])
def test_a_scratch_w_becomes_the_sparse_blocks_gradient(sparse):
    block, Ws = block_and_points(sparse, 5, 3)
    calls = [(Ws[1], Ws[0], 0.4, None, "k1"), (Ws[2], None, 0.7, "k1", "k2")]
    for (W, W_prev, m, prev_key, key), W_prev_value in zip(calls, Ws):
        scratch = W.copy()
        values, grad = objective.block_extrapolated_value_and_grad(
            block, scratch, W_prev, m, prev_key, key, 0.7, W_is_scratch=True
        )
        assert_matches_stacked((values, grad), block, W, W_prev_value, m, 0.7)
        # a sparse block has copied W into its held [W | G] and returns the gradient in W's buffer;
        # a dense block keeps W itself, so it must leave it alone
        assert (grad is scratch) == sparse
        if not sparse:
            np.testing.assert_array_equal(scratch, W)


@pytest.mark.parametrize("sparse", [False, True])
def test_held_and_recomputed_scores_give_the_same_bits(sparse):
    # what a resumed run or a rebuilt block computes (S(W_prev) = X W_prev; a sparse block: X [W | G] with
    # apg's G, sent) is what the held scores (the held pair) gave
    X, Y = problem(sparse)
    rng = np.random.default_rng(2)
    W0, W1, W2 = (rng.standard_normal((X.shape[1], Y.shape[1])) for _ in range(3))
    held = make_block(X, Y, fit_intercept=False)
    objective.block_extrapolated_value_and_grad(held, W1, W0, 0.5, None, "a", 0.3)
    a = objective.block_extrapolated_value_and_grad(held, W2, None, 0.6, "a", "b", 0.3)
    fresh = make_block(X, Y, fit_intercept=False)
    b = objective.block_extrapolated_value_and_grad(fresh, W2, W1, 0.6, None, "b", 0.3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    if sparse:
        fresh = make_block(X, Y, fit_intercept=False)
        G2 = W2 + 0.6 * (W2 - W1)  # as apg forms it
        c = objective.block_extrapolated_value_and_grad(
            fresh, W2, np.concatenate([W2, G2], axis=1), 0.6, None, "b", 0.3
        )
        assert np.array_equal(a[0], c[0]) and np.array_equal(a[1], c[1])


@pytest.fixture
def inproc_client():
    """A 2-worker cluster whose workers live in this process (``inproc://``): they are handed the caller's
    arrays, not copies."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        yield client


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("where", ["local", "cluster", "inproc"])
def test_oracle_resends_w_prev_to_a_block_that_lost_its_state(where, sparse, request):
    X, Y = problem(sparse, n=900)
    client = {"local": None, "cluster": "client2", "inproc": "inproc_client"}[where]
    client = client and request.getfixturevalue(client)
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask" if client else "local", client=client, n_blocks=3)
    # worker processes get their own copy of W (a sparse block reuses it for the gradient), blocks in this
    # process do not: were they told otherwise, a sparse block would write its gradient into the caller's W2
    assert chunks.private_arguments == (where == "cluster")
    try:
        oracle = _extrapolated_oracle(
            chunks,
            objective.block_extrapolated_value_and_grad,
            (0.2, chunks.private_arguments),
            lambda v, g, W, G: objective.add_ridge(v, g, (W, G), 1, 0.5),
        )
        rng = np.random.default_rng(3)
        W0, W1, W2 = (rng.standard_normal((X.shape[1] + 1, Y.shape[1])) for _ in range(3))
        sent = [W.copy() for W in (W0, W1, W2)]
        oracle(W1, W0, 0.3, W1 + 0.3 * (W1 - W0))
        chunks.apply_block(1, lambda b: b.state.clear())  # block 1 rebuilt: holds nothing
        points = np.stack([W2, W2 + 0.8 * (W2 - W1)])
        values, grad = oracle(W2, W1, 0.8, points[1])
        for W, copy in zip((W0, W1, W2), sent):  # the caller's points are never written
            np.testing.assert_array_equal(W, copy)
        ref_values, ref_grad = objective.add_ridge(
            *chunks.map_reduce(objective.block_value_and_grad, points, 1, 0.2), points, 1, 0.5
        )
        np.testing.assert_allclose(values, ref_values, rtol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-10 * np.abs(ref_grad).max())
        # a sparse block keeps [W | G] only as its own copy (a worker process); blocks in this process
        # read the one pair the oracle sends each call, and hold nothing
        held = [chunks.apply_block(i, lambda b: "extrapolation" in b.state) for i in range(chunks.n_blocks)]
        assert held == [not sparse or where == "cluster"] * chunks.n_blocks
    finally:
        chunks.close()


@pytest.mark.parametrize(("kernel", "sparse"), [(None, False), ("rbf", False), (None, True)])
@pytest.mark.parametrize("step", ["paper", "spectral"])
def test_fit_with_the_block_extrapolation_follows_the_stacked_oracle(step, kernel, sparse, monkeypatch):
    X, Y = problem(sparse, seed=4, n=400 if kernel else 700)
    params = dict(alpha=0.5, alpha_rank=0.3, alpha_nuclear=0.1, step_rule=step, max_iter=300, tol=1e-9)

    def model():
        return KernelRBRL(kernel, **params) if kernel else RBRL(**params)

    with dmlr.config_context(n_blocks=2, backend="local"):
        fast = model().fit(X, Y)
        monkeypatch.setattr("dmlr.models.rbrl._extrapolated_oracle", lambda *a: None)  # the stacked oracle only
        plain = model().fit(X, Y)
    assert fast.n_iter_ == plain.n_iter_
    np.testing.assert_allclose(fast.objective_history_, plain.objective_history_, rtol=1e-10)
    name = "dual_coef_" if kernel else "coef_"
    np.testing.assert_allclose(getattr(fast, name), getattr(plain, name), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("keep", [True, False])
def test_kernel_block_call_equals_the_stacked_points(keep):
    # the kernel rows' speculative call, ridge share included, held state or not, K kept or recomputed
    from dmlr.kernels.gram import KernelSpec
    from dmlr.objectives import kernel_rbrl

    X, Y = problem(False, n=300, d=8, l=7)
    spec = KernelSpec.resolve("rbf", None, 3, 1.0, X.shape[1])
    start, stop = 100, 220
    kb = kernel_rbrl.make_kernel_block(
        make_block(X[start:stop], Y[start:stop], fit_intercept=False), (start, stop), X, spec, keep
    )
    rng = np.random.default_rng(5)
    As = [rng.standard_normal((X.shape[0], Y.shape[1])) * 0.2 for _ in range(3)]
    lam1, lam2 = 0.6, 0.4

    def check(out, A, A_prev, m):
        points = np.stack([A, A + m * (A - A_prev)])
        values, grad = kernel_rbrl.block_value_and_grad(kb, points, 1, lam1, lam2)
        np.testing.assert_allclose(out[0], values, rtol=1e-12)
        np.testing.assert_allclose(out[1], grad, rtol=1e-10, atol=1e-10 * np.abs(grad).max())

    call = kernel_rbrl.block_extrapolated_value_and_grad
    check(call(kb, As[1], As[0], 0.4, None, "k1", lam1, lam2), As[1], As[0], 0.4)
    check(call(kb, As[2], None, 0.7, "k1", "k2", lam1, lam2), As[2], As[1], 0.7)
    assert call(kb, As[0], None, 0.7, "k1", "k3", lam1, lam2) is None
