"""The O(l log l) pairwise kernel against the paper's O(|P||N|) double loop."""

import numpy as np
import pytest

from dmlr.kernels.ranking import RANK_MARGIN, rank_lipschitz_row_stats, rbrl_score_losses


def brute_force_rbrl(S, Y, lambda2, margin=RANK_MARGIN):
    """BR + pairwise losses and dL/dS by the reference's double loop (eqs. 5, 16, 19)."""
    m, l = Y.shape
    ys = np.where(Y > 0, 1.0, -1.0)
    r = np.maximum(0.0, 1.0 - ys * S)
    br = 0.5 * (r**2).sum()
    C = -ys * r
    rank = 0.0
    for i in range(m):
        P, N = np.flatnonzero(Y[i]), np.flatnonzero(Y[i] == 0)
        if len(P) == 0 or len(N) == 0:
            continue
        w = 1.0 / (len(P) * len(N))
        for p in P:
            for q in N:
                h = max(0.0, margin - S[i, p] + S[i, q])
                rank += 0.5 * w * h * h
                C[i, p] -= lambda2 * w * h
                C[i, q] += lambda2 * w * h
    return br, rank, C


@pytest.mark.parametrize("l,p_rel", [(1, 0.3), (2, 0.3), (6, 0.3), (31, 0.3), (90, 0.6)])
@pytest.mark.parametrize("scale", [0.3, 3.0])
def test_kernel_matches_double_loop(l, p_rel, scale):
    # (90, 0.6): rows with more than 32 relevant labels take the argsort branch
    rng = np.random.default_rng(l)
    m = 120
    S = rng.normal(size=(m, l)) * scale
    Y = (rng.random((m, l)) < p_rel).astype(np.int8)
    Y[0] = 0  # no relevant label: no pairs
    Y[1] = 1  # all relevant: no pairs
    S[2, :] = 0.5  # all scores tied
    C = np.zeros((m, l))
    br, rank = rbrl_score_losses(S, Y, 1, 0, 0.7, RANK_MARGIN, C)
    br_ref, rank_ref, C_ref = brute_force_rbrl(S, Y, 0.7)
    assert br[0] == pytest.approx(br_ref, rel=1e-12)
    assert rank[0] == pytest.approx(rank_ref, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(C, C_ref, rtol=1e-12, atol=1e-12)


def test_kernel_stacked_points_give_each_points_loss():
    rng = np.random.default_rng(1)
    Y = (rng.random((50, 7)) < 0.4).astype(np.int8)
    S0, S1 = rng.normal(size=(50, 7)), rng.normal(size=(50, 7)) * 2
    C = np.zeros((50, 7))
    br, rank = rbrl_score_losses(np.hstack([S0, S1]), Y, 2, 1, 1.0, RANK_MARGIN, C)
    for k, S in enumerate([S0, S1]):
        b, r, Ck = brute_force_rbrl(S, Y, 1.0)
        assert br[k] == pytest.approx(b, rel=1e-12)
        assert rank[k] == pytest.approx(r, rel=1e-12)
    np.testing.assert_allclose(C, brute_force_rbrl(S1, Y, 1.0)[2], atol=1e-12)


def test_lipschitz_row_stats_match_definition():
    rng = np.random.default_rng(2)
    Y = (rng.random((40, 5)) < 0.4).astype(np.int8)
    x2 = rng.random(40) * 3
    A, B = np.zeros(5), np.zeros(5)
    rank_lipschitz_row_stats(Y, x2, A, B)
    A_ref, B_ref = np.zeros(5), np.zeros(5)
    for i in range(40):
        npos = Y[i].sum()
        nneg = 5 - npos
        if npos == 0 or nneg == 0:
            continue
        for j in range(5):
            c = nneg if Y[i, j] else npos
            A_ref[j] += c
            B_ref[j] += c * x2[i] ** 2 / (npos**2 * nneg**2)
    np.testing.assert_allclose(A, A_ref)
    np.testing.assert_allclose(B, B_ref, rtol=1e-13)


def extrapolation_case(m, d, l, p_rel, seed, sparse):
    """A row block, two points W, W_prev and momentum 0.6, with rows that exercise every branch."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, d)) * (rng.random((m, d)) < (0.2 if sparse else 1.0))
    X[3] = 0.0  # an empty row: scores 0
    Y = (rng.random((m, l)) < p_rel).astype(np.int8)
    Y[0], Y[1] = 0, 1  # no pairs
    W, W_prev = rng.normal(size=(2, d, l)) * 0.5
    if sparse:
        X = sp.csr_matrix(X)
        X.indices, X.data = X.indices.copy(), X.data.copy()
        for i in range(m):  # unsorted column indices within each row
            a, b = X.indptr[i], X.indptr[i + 1]
            order = rng.permutation(b - a)
            X.indices[a:b], X.data[a:b] = X.indices[a:b][order], X.data[a:b][order]
        X.has_sorted_indices = False
    return X, Y, W, W_prev, 0.6


@pytest.mark.parametrize("l,p_rel", [(6, 0.3), (90, 0.6)])
def test_sparse_extrapolated_pass_matches_double_loop(l, p_rel):
    from dmlr.kernels.ranking import advance_point_pair, sparse_extrapolated_pass

    # 150 rows: more than two tiles, the last one partial
    X, Y, W, W_prev, mom = extrapolation_case(150, 13, l, p_rel, l, sparse=True)
    WG = np.full((13, 2 * l), np.nan)
    WG[:, :l] = W_prev
    W_sent = W.copy()
    advance_point_pair(WG, W, mom)
    np.testing.assert_array_equal(W, W_sent)  # the sent W is read only
    np.testing.assert_array_equal(WG[:, :l], W)
    np.testing.assert_array_equal(WG[:, l:], W + mom * (W - W_prev))  # bit for bit apg's G
    grad = np.ones((13, l))  # accumulated into, not overwritten
    br, rank = sparse_extrapolated_pass(X.indptr, X.indices, X.data, Y, WG, 0.7, RANK_MARGIN, grad)
    Xd = X.toarray()
    for k, P in enumerate([W, W + mom * (W - W_prev)]):
        b, r, C = brute_force_rbrl(Xd @ P, Y, 0.7)
        assert br[k] == pytest.approx(b, rel=1e-12)
        assert rank[k] == pytest.approx(r, rel=1e-12)
    np.testing.assert_allclose(grad, 1.0 + Xd.T @ C, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("l,p_rel", [(6, 0.3), (90, 0.6)])
def test_dense_extrapolated_losses_match_double_loop(l, p_rel):
    from dmlr.kernels.ranking import dense_extrapolated_losses

    X, Y, W, W_prev, mom = extrapolation_case(150, 13, l, p_rel, l, sparse=False)
    C = np.full((150, l), np.nan)  # every entry must be written
    br, rank = dense_extrapolated_losses(X @ W, X @ W_prev, mom, Y, 0.7, RANK_MARGIN, C)
    for k, P in enumerate([W, W + mom * (W - W_prev)]):
        b, r, C_ref = brute_force_rbrl(X @ P, Y, 0.7)
        assert br[k] == pytest.approx(b, rel=1e-12)
        assert rank[k] == pytest.approx(r, rel=1e-12)
    np.testing.assert_allclose(C, C_ref, rtol=1e-11, atol=1e-11)


def test_warm_up_compiles_the_specializations_the_fits_use():
    """After ``warm_up`` a fit adds no Numba specialization, so no compilation (or cache load)
    lands in a worker's first iteration. Run in a fresh process: this session's earlier tests
    have compiled specializations of their own."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp
        from numba.core.registry import CPUDispatcher
        import dmlr.kernels.ranking as ranking
        from dmlr.kernels import warm_up
        import dmlr
        from dmlr.models import RBRL, KernelRBRL
        warm_up()
        kernels = {n: f for n, f in vars(ranking).items() if isinstance(f, CPUDispatcher)}
        before = {n: set(f.signatures) for n, f in kernels.items()}
        rng = np.random.default_rng(0)
        X = rng.normal(size=(80, 5))
        Y = (rng.random((80, 4)) < 0.4).astype(np.int8)
        with dmlr.config_context(backend="local"):
            for model, Xf in ((RBRL(max_iter=5), X), (RBRL(max_iter=5), sp.csr_matrix(np.where(X > 0.5, X, 0.0))),
                              (KernelRBRL("rbf", max_iter=5), X)):
                model.fit(Xf, Y)
        new = {n: [str(s) for s in set(f.signatures) - before[n]] for n, f in kernels.items()}
        print({n: s for n, s in new.items() if s})
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "{}", out.stdout


def test_a_process_that_compiles_the_kernels_fits_the_model_later_processes_load(two_fresh_processes):
    """The ranking kernels reassociate sums (fastmath); compiled in a process they sum in another
    order than the same kernels loaded from Numba's cache. The first process on a machine (an
    empty cache) must still give the model every later one gives: the same objective history,
    to the bit."""
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp
        from dmlr.models import RBRL
        rng = np.random.default_rng(0)
        X = sp.random(3000, 300, density=0.05, format="csr", random_state=1)
        Y = (rng.random((3000, 40)) < 0.08).astype(np.int8)
        m = RBRL(alpha=3.0, max_iter=40, tol=0, scaling=None).fit(X, Y)
        print([float(v).hex() for v in m.objective_history_])
    """)
    first, later = two_fresh_processes(code)
    assert first == later
