"""The APG's speculative call with the extrapolation done on the blocks (W_prev and S(W) kept there)."""

import numpy as np
import pytest
import scipy.sparse as sp
from worker_probes import factored_points, record_factored_points, run_on_workers, set_max_factor_fraction

import dmlr
from dmlr.data.blocks import make_block
from dmlr.distributed.chunks import make_chunkset
from dmlr.models import RBRL, KernelRBRL
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


def call(block, W, m, held=None, sent=None, scratch=False, lam2=0.7):
    """The objective's speculative block call."""
    return objective.block_extrapolated_value_and_grad(block, W, m, held, sent, scratch, lam2)


@pytest.mark.parametrize("sparse", [False, True])
def test_block_call_equals_the_stacked_points_with_and_without_held_state(sparse):
    block, Ws = block_and_points(sparse, 1, 4)
    lam2 = 0.7

    def check(out, W, W_prev, m):
        assert_matches_stacked(out, block, W, W_prev, m, lam2)

    # first call: nothing held, W_prev sent
    first = call(block, Ws[1], 0.4, sent=Ws[0])
    check(first, Ws[1], Ws[0], 0.4)
    # dense blocks keep S(W) (l <= d + 1 here), sparse ones do not
    assert (first.held.scores is None) == sparse
    # next call: W_prev held by the block, not sent
    check(call(block, Ws[2], 0.7, held=first.held), Ws[2], Ws[1], 0.7)
    # nothing held and nothing sent: an error, not a guess
    with pytest.raises(ValueError, match="holds no previous point"):
        call(block, Ws[3], 0.7)
    if sparse:  # sent the pair [W | G]
        pair = np.concatenate([Ws[3], Ws[3] + 0.7 * (Ws[3] - Ws[2])], axis=1)
        check(call(block, Ws[3], 0.7, sent=pair), Ws[3], Ws[2], 0.7)
    else:  # a dense block cannot use the pair
        with pytest.raises(ValueError, match="needs W_prev"):
            call(block, Ws[3], 0.7, sent=np.concatenate([Ws[3], Ws[3]], axis=1))
    # zero momentum (a restart): G = W
    check(call(block, Ws[3], 0.0, sent=Ws[2]), Ws[3], Ws[2], 0.0)


@pytest.mark.parametrize("sparse", [False, True])
def test_block_side_keys_name_what_the_block_holds_and_ask_for_what_it_lacks(sparse):
    from dmlr.distributed.extrapolation import PROCESS_TOKEN, STATE_KEY, BlockReply, Resend, answer_block

    block, Ws = block_and_points(sparse, 1, 4)
    fns = (objective.block_extrapolated_value_and_grad, objective.block_wants_pair)

    def answer(W, m, prev_key, key, sent, sender="another process"):
        if sender != PROCESS_TOKEN:  # another process's arguments are the call's own copies
            W, sent = W.copy(), None if sent is None else sent.copy()
        kind = Resend.POINT_PAIR if sent is not None and sent.shape[1] != W.shape[1] else Resend.PREVIOUS_POINT
        return answer_block(block, *fns, W, m, prev_key, key, sent if sent is None else {kind: sent}, sender, 0.7)

    # nothing held: the block says what it needs (a sparse block: the pair [W | G])
    need = Resend.POINT_PAIR if sparse else Resend.PREVIOUS_POINT
    assert answer(Ws[1], 0.4, None, "k1", None) == BlockReply(None, None, (need,), (False,), (need,))
    # sent W_prev, a sparse block forms its pair itself
    reply = answer(Ws[1], 0.4, None, "k1", Ws[0])
    assert reply.resend == (None,) and reply.holds == (True,) and block.state[STATE_KEY][0] == "k1"
    assert_matches_stacked(reply, block, Ws[1], Ws[0], 0.4, 0.7)
    # named by its key, the held point is used
    reply = answer(Ws[2], 0.7, "k1", "k2", None)
    assert_matches_stacked(reply, block, Ws[2], Ws[1], 0.7, 0.7)
    # a key the block does not hold (another call's, or a lost block's): it asks again
    assert answer(Ws[3], 0.7, "k1", "k3", None).resend == (need,)
    assert block.state[STATE_KEY][0] == "k2"
    # the caller's own arrays (same process): a sparse block reads a sent pair and keeps nothing
    if sparse:
        pair = np.concatenate([Ws[3], Ws[3] + 0.7 * (Ws[3] - Ws[2])], axis=1)
        reply = answer(Ws[3], 0.7, None, "k3", pair, sender=PROCESS_TOKEN)
        assert_matches_stacked(reply, block, Ws[3], Ws[2], 0.7, 0.7)
        assert reply.holds == (False,) and STATE_KEY not in block.state


@pytest.mark.parametrize("keep_scores", [True, False])
def test_held_calls_over_many_tiles_are_exact_and_reuse_their_buffers(keep_scores, monkeypatch):
    # 64-row tiles: 11 tiles, the last one short; with l > d + 1 the block does not keep S(W)
    monkeypatch.setattr(objective, "product_tile_rows", lambda X, n_outputs, n_score_cols: 64)
    X, Y = problem(False, d=30 if keep_scores else 8)
    block = make_block(X, Y, fit_intercept=True)
    rng = np.random.default_rng(3)
    Ws = [rng.standard_normal((X.shape[1] + 1, Y.shape[1])) * 0.3 for _ in range(6)]

    def buffers(held):
        tiles = held.scores or []
        return {id(t.base) for t in tiles} | {id(b) for b in held.scratch}

    out = call(block, Ws[1], 0.4, sent=Ws[0])
    assert (out.held.scores is not None) == keep_scores
    first = buffers(out.held)
    for k in range(2, 6):
        expected = stacked(block, Ws[k - 1], Ws[k - 2], 0.4, 0.7)
        np.testing.assert_allclose(out[0], expected[0], rtol=1e-12)
        np.testing.assert_allclose(out[1], expected[1], rtol=1e-10, atol=1e-10 * np.abs(expected[1]).max())
        out = call(block, Ws[k], 0.4, held=out.held)
        assert buffers(out.held) == first  # steady-state calls write into the buffers the block holds


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
    first = call(block, Ws[1], 0.3, sent=Ws[0], lam2=0.5)
    out = call(block, Ws[2], 0.6, held=first.held, lam2=0.5)
    assert_matches_stacked(out, block, Ws[2], Ws[1], 0.6, 0.5)


@pytest.mark.parametrize("sparse", [False, True])
def test_a_scratch_w_becomes_the_sparse_blocks_gradient(sparse):
    block, Ws = block_and_points(sparse, 5, 3)
    held = None
    for W, W_prev, m in [(Ws[1], Ws[0], 0.4), (Ws[2], Ws[1], 0.7)]:
        scratch = W.copy()
        values, grad, held = call(block, scratch, m, held=held, sent=None if held else W_prev, scratch=True)
        assert_matches_stacked((values, grad), block, W, W_prev, m, 0.7)
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
    first = call(held, W1, 0.5, sent=W0, lam2=0.3)
    a = call(held, W2, 0.6, held=first.held, lam2=0.3)
    fresh = make_block(X, Y, fit_intercept=False)
    b = call(fresh, W2, 0.6, sent=W1, lam2=0.3)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    if sparse:
        G2 = W2 + 0.6 * (W2 - W1)  # as apg forms it
        c = call(fresh, W2, 0.6, sent=np.concatenate([W2, G2], axis=1), lam2=0.3)
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


def linear_cache(chunks, lam2=0.2):
    from dmlr.distributed.extrapolation import ExtrapolationCache

    return ExtrapolationCache(chunks, objective.block_extrapolated_value_and_grad, objective.block_wants_pair, (lam2,))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("where", ["local", "cluster", "inproc"])
def test_cache_resends_w_prev_to_a_block_that_lost_its_state(where, sparse, request):
    from dmlr.distributed.extrapolation import STATE_KEY

    X, Y = problem(sparse, n=900)
    client = {"local": None, "cluster": "client2", "inproc": "inproc_client"}[where]
    client = client and request.getfixturevalue(client)
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="dask" if client else "local", client=client, n_blocks=3)
    try:
        cache = linear_cache(chunks)
        rng = np.random.default_rng(3)
        W0, W1, W2, W3 = (rng.standard_normal((X.shape[1] + 1, Y.shape[1])) for _ in range(4))
        sent = [W.copy() for W in (W0, W1, W2, W3)]
        cache(W1, W0, 0.3, W1 + 0.3 * (W1 - W0))
        assert cache.n_resent == 3  # the first call: no block holds anything
        chunks.apply_block(1, lambda b: b.state.clear())  # block 1 rebuilt: holds nothing
        for W, W_prev, m in [(W2, W1, 0.8), (W3, W2, 0.5)]:
            points = np.stack([W, W + m * (W - W_prev)])
            values, grad = cache(W, W_prev, m, points[1])
            ref_values, ref_grad = chunks.map_reduce(objective.block_value_and_grad, points, 1, 0.2)
            np.testing.assert_allclose(values, ref_values, rtol=1e-12)
            np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-10 * np.abs(ref_grad).max())
        for W, copy in zip((W0, W1, W2, W3), sent):  # the caller's points are never written
            np.testing.assert_array_equal(W, copy)
        # a sparse block keeps [W | G] only as its own copy (a worker process); blocks in this process
        # are sent one pair per call, up front, once every block has said it keeps nothing
        held = [chunks.apply_block(i, lambda b: STATE_KEY in b.state) for i in range(chunks.n_blocks)]
        keeps = not sparse or where == "cluster"
        assert held == [keeps] * chunks.n_blocks
        # the rebuilt block was resent its point once; blocks that keep nothing were sent theirs up
        # front after the first call
        assert cache.n_resent == 3 + (1 if keeps else 0)
    finally:
        chunks.close()


def test_a_checkpointed_w_prev_is_sent_again_and_another_cache_does_not_reuse_the_held_point():
    # apg resumed from a checkpoint hands the cache a W_{t-1} it did not send: every block is asked again;
    # a second cache on the same blocks (a second fit) never names the first one's points
    X, Y = problem(False, n=600)
    chunks = make_chunkset(X, Y, fit_intercept=True, backend="local", n_blocks=2)
    rng = np.random.default_rng(4)
    W0, W1, W2 = (rng.standard_normal((X.shape[1] + 1, Y.shape[1])) for _ in range(3))
    cache = linear_cache(chunks)
    cache(W1, W0, 0.3, W1 + 0.3 * (W1 - W0))
    cache(W2, W1.copy(), 0.3, W2 + 0.3 * (W2 - W1))  # equal values, another array: not the point it sent
    assert cache.n_resent == 4
    other = linear_cache(chunks)
    values, _ = other(W2, W1, 0.6, W2 + 0.6 * (W2 - W1))
    assert other.n_resent == 2
    ref_values, _ = chunks.map_reduce(objective.block_value_and_grad, np.stack([W2, W2 + 0.6 * (W2 - W1)]), 1, 0.2)
    np.testing.assert_allclose(values, ref_values, rtol=1e-12)


@pytest.mark.parametrize(("kernel", "sparse"), [(None, False), ("rbf", False), (None, True)])
@pytest.mark.parametrize("step", ["paper", "spectral"])
def test_fit_with_the_block_extrapolation_follows_the_stacked_oracle(step, kernel, sparse, monkeypatch):
    from dmlr.distributed.oracle import ChunkOracle
    from dmlr.solvers.apg import Oracle

    X, Y = problem(sparse, seed=4, n=400 if kernel else 700)
    params = dict(alpha=0.5, alpha_rank=0.3, alpha_nuclear=0.1, solver=step, max_iter=300, tol=1e-9)

    def model():
        return KernelRBRL(kernel, **params) if kernel else RBRL(**params)

    with dmlr.config_context(n_blocks=2, backend="local"):
        fast = model().fit(X, Y)
        monkeypatch.setattr(ChunkOracle, "extrapolated", Oracle.extrapolated)  # the stacked oracle only
        plain = model().fit(X, Y)
    assert fast.n_iter_ == plain.n_iter_
    np.testing.assert_allclose(fast.objective_history_, plain.objective_history_, rtol=1e-10)
    name = "dual_coef_" if kernel else "coef_"
    np.testing.assert_allclose(getattr(fast, name), getattr(plain, name), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize(("kernel", "sparse"), [(None, False), (None, True), ("rbf", False)])
def test_low_rank_factors_shipped_to_workers_give_the_same_fit(kernel, sparse, client2):
    # on worker processes, W's factors travel in place of W when the prox formed W from them;
    # the workers form W by the same product: the same fit as shipping W whole. The solver runs
    # on a worker (dmlr.distributed.root): the workers count the points formed from factors
    X, Y = problem(sparse, seed=6, n=400 if kernel else 900, d=40, l=16)
    params = dict(
        alpha=0.5, alpha_rank=0.3, alpha_nuclear=100.0 if kernel else 300.0, max_iter=60, tol=0.0, solver="adaptive"
    )

    def model():
        return KernelRBRL(kernel, **params) if kernel else RBRL(**params)

    def n_expanded():
        return sum(len(t) for t in run_on_workers(client2, factored_points).values())

    run_on_workers(client2, record_factored_points)
    try:
        with dmlr.config_context(backend="dask", client=client2):
            shipped = model().fit(X, Y)
            n_factored = n_expanded()
            previous = run_on_workers(client2, set_max_factor_fraction, 0.0)
            try:
                whole = model().fit(X, Y)
            finally:
                run_on_workers(client2, set_max_factor_fraction, next(iter(previous.values())))
            n_whole = n_expanded()
    finally:
        run_on_workers(client2, factored_points)
    # each block forms W from factors in a call that ships them: both blocks, a quarter of the calls
    assert n_factored > 2 * shipped.n_iter_ // 4, n_factored
    assert n_whole == 0
    assert shipped.n_iter_ == whole.n_iter_ == 60
    np.testing.assert_allclose(shipped.objective_history_, whole.objective_history_, rtol=1e-12, atol=0)
    a, b = (getattr(m, "dual_coef_" if kernel else "coef_") for m in (shipped, whole))
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-10 * np.abs(b).max())


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

    kcall = kernel_rbrl.block_extrapolated_value_and_grad
    first = kcall(kb, As[1], 0.4, None, As[0], False, lam1, lam2)
    check(first, As[1], As[0], 0.4)
    check(kcall(kb, As[2], 0.7, first.held, None, False, lam1, lam2), As[2], As[1], 0.7)
    assert not kernel_rbrl.block_wants_pair(kb)
