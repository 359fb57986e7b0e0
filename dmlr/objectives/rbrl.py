"""Linear RBRL objective (Wu et al. 2020, eq. 8) on one row block.

F(W) = f(W) + g(W) with the smooth part (eq. 17)::

    f(W) = 1/2 ||(|E - Y o XW|_+)^2||_1 + lambda1/2 ||W||_F^2 + lambda2 f_r(W)

and the nonsmooth part g(W) = lambda3 ||W||_* handled by the prox
(:func:`dmlr.solvers.prox.prox_nuclear_norm`). The data terms are sums over
rows, so each row block returns its share and the shares are summed; the
lambda1 term is added once by the caller (:func:`add_ridge`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from dmlr._blas import add_scaled
from dmlr.data.blocks import Block
from dmlr.kernels.blocks import product_tile_rows
from dmlr.kernels.gram import row_sq_norms
from dmlr.kernels.ranking import (
    RANK_MARGIN,
    SCORE_TILE_ROWS,
    advance_point_pair,
    dense_extrapolated_losses,
    extrapolated_ridge_share,
    rank_lipschitz_row_stats,
    rbrl_score_losses,
    sparse_extrapolated_pass,
    sparse_tile_pass,
)


def block_value_and_grad(block: Block, points: np.ndarray, grad_point: int, lambda2: float):
    """Data part of f at several points, and its gradient at one of them.

    One fused pass over the block in row tiles: per tile ``S = X_t @ [W_0 | W_1 | ...]``,
    one kernel call for the losses and score-gradient (BR residual and pairwise
    coefficients together), and ``X_t.T @ C_t`` accumulated (eqs. 18-19). A CSR
    block's tiles are scored in short runs of rows (:func:`sparse_fused_pass`),
    with the same numbers.

    Parameters
    ----------
    block : Block
        X (m, d) dense or CSR float64, Y (m, l) int8.
    points : float64 (k, d, l)
        Parameter matrices at which to evaluate the loss.
    grad_point : int
        Index into ``points`` of the gradient point, or -1 for none.
    lambda2 : float
        Weight of the pairwise ranking term.

    Returns
    -------
    values : float64 (k,)
        BR term + lambda2 * f_r at each point (block share, no lambda1 term).
    grad : float64 (d, l) or None
        Block share of the data gradient at ``points[grad_point]``.
    """
    k, d, l = points.shape
    if sp.issparse(block.X):
        return sparse_fused_pass(block.X, block.Y, points, grad_point, lambda2)
    W = np.ascontiguousarray(points.transpose(1, 0, 2).reshape(d, k * l))
    return fused_pass(block.X, block.Y, W, k, l, grad_point, lambda2)


def sparse_fused_pass(X, Y: np.ndarray, points: np.ndarray, grad_point: int, lambda2: float):
    """:func:`fused_pass` of a CSR block, to the bit, with nothing of a tile's size formed.

    The pass sums over the same tiles as :func:`fused_pass` (values and
    gradient added tile by tile), but each tile is scored in runs of
    :data:`~dmlr.kernels.ranking.SCORE_TILE_ROWS` rows by
    :func:`~dmlr.kernels.ranking.sparse_tile_pass`, which repeats the
    additions of the tile's products and losses in their order. What the
    call holds beyond the block is the points, the gradient and one tile's
    share of it ((d, l) each), where the whole-tile pass also holds the
    tile's scores and coefficients (tile x k*l and tile x l floats, about
    :data:`~dmlr.kernels.blocks.TILE_BYTES` each),
    the product ``X_t.T @ C_t`` before it is added, a copy of the tile's
    rows and, for several points, a copy of them side by side.

    Parameters
    ----------
    X : scipy.sparse CSR float64 (m, d)
    Y : int8 (m, l)
    points : float64 (k, d, l)
    grad_point : int
    lambda2 : float

    Returns
    -------
    values : float64 (k,)
    grad : float64 (d, l) or None
    """
    points = np.ascontiguousarray(points, dtype=np.float64)
    k, d, l = points.shape
    m = Y.shape[0]
    values = np.zeros(k)
    grad = np.zeros((d, l)) if grad_point >= 0 else None
    share = None
    run = min(SCORE_TILE_ROWS, max(m, 1))
    S = np.empty((run, k * l))
    C = np.empty((run if grad_point >= 0 else 0, l))
    no_grad = np.empty((0, l))
    step = product_tile_rows(X, k * l, k * l)
    for a in range(0, m, step):
        b = min(a + step, m)
        br, rank = np.zeros(k), np.zeros(k)
        if grad is None:
            G = no_grad
        elif a == 0:  # grad is zero: the first tile's share lands in it as in a fresh product
            G = grad
        else:
            if share is None:
                share = np.zeros((d, l))
            else:
                share.fill(0.0)
            G = share
        sparse_tile_pass(
            X.indptr, X.indices, X.data, Y, points, a, b, grad_point, float(lambda2), RANK_MARGIN, S, C, br, rank, G
        )
        values += br + lambda2 * rank
        if G is share:
            grad += share
    return values, grad


def fused_pass(
    X,
    Y: np.ndarray,
    W: np.ndarray,
    k: int,
    l: int,
    grad_point: int,
    lambda2: float,
    ridge_rows: np.ndarray | None = None,
    lambda1: float = 0.0,
):
    """The tiled pass shared by the linear and kernel objectives.

    ``X`` (m, p) dense or CSR, ``W`` (p, k*l) the stacked points. With
    ``ridge_rows`` (k, m, l) the kernel model's ridge share is added: value
    lambda1/2 sum(A_B o S_B) and gradient X^T (lambda1 A_B) (see
    :mod:`dmlr.objectives.kernel_rbrl`).
    """
    m = Y.shape[0]
    values = np.zeros(k)
    grad = np.zeros((X.shape[1], l)) if grad_point >= 0 else None
    step = product_tile_rows(X, k * l, k * l)
    for a in range(0, m, step):
        b = min(a + step, m)
        Xt = X[a:b]
        S = np.ascontiguousarray(Xt @ W)
        C = np.zeros((b - a, l)) if grad_point >= 0 else np.zeros((0, l))
        br, rank = rbrl_score_losses(S, Y[a:b], k, grad_point, float(lambda2), RANK_MARGIN, C)
        values += br + lambda2 * rank
        if ridge_rows is not None:
            R = ridge_rows[:, a:b, :]
            values += 0.5 * lambda1 * np.einsum("kil,ikl->k", R, S.reshape(b - a, k, l))
            if grad_point >= 0:
                C += lambda1 * R[grad_point]
        if grad_point >= 0:
            grad += Xt.T @ C
    return values, grad


class HeldPoint(NamedTuple):
    """What a block keeps from one speculative call for the next (see :func:`block_extrapolated_value_and_grad`).

    Attributes
    ----------
    point : float64 (d, l) or (d, 2l)
        The call's W (a dense block), or the pair [W | G] (a sparse block).
    scores : list of float64 (rows, l) tiles, or None
        S(W) = X W tile by tile (a dense block whose scores take no more room than its X).
    scratch : tuple of float64 (rows, l), or None
        A dense block's work buffers (see :func:`extrapolated_pass`).
    """

    point: np.ndarray
    scores: list | None = None
    scratch: tuple | None = None


class ExtrapolatedStep(NamedTuple):
    """A block's share of the speculative call: f's data part at [W, G], its gradient at G, what it keeps."""

    values: np.ndarray
    grad: np.ndarray
    held: HeldPoint | None


def block_wants_pair(block: Block) -> bool:
    """Whether a block that holds nothing is to be sent the pair [W | G] (sparse X) rather than W_prev."""
    return sp.issparse(block.X)


def block_extrapolated_value_and_grad(
    block: Block, W: np.ndarray, momentum: float, held, sent, W_is_scratch: bool, lambda2: float
) -> ExtrapolatedStep:
    """Data part of f at W and at G = W + momentum (W - W_prev), and its gradient at G.

    The APG's speculative call (:meth:`dmlr.solvers.apg.Oracle.extrapolated`)
    with the extrapolation done on the block, so that

    * the client sends W only: the block keeps what it needs of the last W
      (``held``, :class:`HeldPoint`), which halves what each iteration ships;
    * a dense block never forms G: the scores at G come from those at W and
      W_prev by linearity, S(G) = S(W) + momentum (S(W) - S(W_prev)); and
      when its scores take no more room than its X it also keeps
      S(W) = X W, so an iteration multiplies X by one matrix instead of two;
    * a sparse block (where S would be several times the block) keeps
      [W | G] instead of W, moves it to the new W in place, and computes
      both points' scores in one fused pass
      (:func:`dmlr.kernels.ranking.sparse_extrapolated_pass`) that forms
      nothing of size (m, l), so the call's memory beyond the block is
      [W | G], the W it was sent and the gradient, which is that W's
      buffer when ``W_is_scratch``.

    The arithmetic does not depend on what the block holds: a block without
    the held scores computes S(W_prev) = X W_prev tile by tile exactly as the
    held ones were computed, so a resumed or rebuilt run gives the same
    numbers as an uninterrupted one. Which call's point is held, under what
    name, is :class:`dmlr.distributed.extrapolation.ExtrapolationCache`'s
    business; this function sees only the arrays.

    Parameters
    ----------
    block : Block
    W : float64 (d, l)
        The new proximal point (kept by a dense block; not modified unless
        ``W_is_scratch``).
    momentum : float
    held : HeldPoint or None
        What this block kept from the call of W_prev.
    sent : float64 (d, l) or (d, 2l), or None
        With nothing held: W_prev, or (a sparse block) the pair [W | G], G
        formed as apg forms it (:func:`block_wants_pair` says which a block
        asks for). A sparse block keeps a sent pair only when
        ``W_is_scratch`` (else it is the caller's array, read for this call).
    W_is_scratch : bool
        The array arguments are this call's own copies (as on a Dask worker
        in another process, which deserializes them per call): a sparse
        block may overwrite W with the gradient it returns and keep the
        pair it was sent. Never with arrays shared with the caller.
    lambda2 : float

    Returns
    -------
    ExtrapolatedStep
        values float64 (2,), grad float64 (d, l), and what to keep for the
        next call (None: nothing).
    """
    return extrapolated_pass(block.X, block.Y, W, momentum, held, sent, lambda2, W_is_scratch=W_is_scratch)


def extrapolated_pass(
    X,
    Y: np.ndarray,
    W: np.ndarray,
    momentum: float,
    held: HeldPoint | None,
    sent,
    lambda2: float,
    ridge_rows: slice | None = None,
    lambda1: float = 0.0,
    W_is_scratch: bool = False,
) -> ExtrapolatedStep:
    """:func:`block_extrapolated_value_and_grad` on explicit arrays, shared with the kernel model.

    ``X`` (m, p) dense or CSR. With ``ridge_rows`` (dense X only) the
    kernel model's ridge share is added at both points, as in
    :func:`fused_pass`: value lambda1/2 sum(P_B o S_B(P)) and gradient
    X^T (lambda1 G_B), P_B the rows ``ridge_rows`` of the point (see
    :mod:`dmlr.objectives.kernel_rbrl`).
    """
    if held is None and sent is None:
        raise ValueError("the block holds no previous point and none was sent")
    if hasattr(X, "indptr"):
        if ridge_rows is not None:
            raise ValueError("the ridge rows of the kernel model need a dense X (its kernel rows)")
        return _sparse_extrapolated_pass(X, Y, W, momentum, held, sent, lambda2, W_is_scratch)
    l = Y.shape[1]
    if held is not None:
        W_prev, S_prev, scratch = held.point, held.scores, held.scratch
    elif sent.shape != W.shape:
        raise ValueError(f"a dense block needs W_prev {W.shape}, it was sent {sent.shape}")
    else:
        W_prev, S_prev, scratch = sent, None, None
    m = Y.shape[0]
    grad = np.zeros((X.shape[1], l))
    keep_scores = m * l <= X.size
    S_keep = [] if keep_scores else None  # S(W) tile by tile, kept as computed (no copy)
    values = np.zeros(2)
    step = product_tile_rows(X, l, 2 * l)
    # Every score tile is written into a (step, l) buffer that is no longer needed, and
    # the block keeps its work buffers between calls (``HeldPoint.scratch``): the next call's
    # first S(W) tile, the C tile and, when the scores are not kept, the S(W_prev) tile.
    # So steady-state calls allocate nothing of that size.
    # Why: Dask's workers give freed heap back to the system at once (their nanny sets
    # MALLOC_TRIM_THRESHOLD_ = 64 KiB), so a fresh S(W) and C per call would fault in their
    # pages on every call.
    rows = min(step, m)
    n_buffers = 2 if keep_scores else 3
    if scratch is None or len(scratch) != n_buffers:
        scratch = tuple(np.empty((rows, l)) for _ in range(n_buffers))
    spare, C_buf, *prev_buf = scratch
    for t, a in enumerate(range(0, m, step)):
        b = min(a + step, m)
        Xt = X[a:b]
        S_W = np.matmul(Xt, W, out=spare[: b - a])
        if S_prev is not None:
            S_p = S_prev[t]
        else:  # kept scores: a fresh tile, which becomes the next tile's spare, then a kept tile
            buf = np.empty((rows, l)) if keep_scores else prev_buf[0]
            S_p = np.matmul(Xt, W_prev, out=buf[: b - a])
        C = C_buf[: b - a]
        br, rank = dense_extrapolated_losses(S_W, S_p, momentum, Y[a:b], float(lambda2), RANK_MARGIN, C)
        values += br + lambda2 * rank
        if ridge_rows is not None:
            values += (
                0.5
                * lambda1
                * extrapolated_ridge_share(
                    W[ridge_rows][a:b], W_prev[ridge_rows][a:b], S_W, S_p, float(momentum), float(lambda1), C
                )
            )
        if keep_scores:
            S_keep.append(S_W)
            spare = S_p.base  # S_p is dead now: the next tile's S(W) goes there
        grad += Xt.T @ C
    return ExtrapolatedStep(values, grad, HeldPoint(W, S_keep, (spare, C_buf, *prev_buf)))


def _sparse_extrapolated_pass(X, Y, W, momentum, held, sent, lambda2, W_is_scratch) -> ExtrapolatedStep:
    """:func:`extrapolated_pass` on a CSR block: the block holds [W | G] (d, 2l), not W.

    See :func:`dmlr.kernels.ranking.sparse_extrapolated_pass` for why W and
    G sit side by side. The held pair is moved to the new W in place
    (:func:`dmlr.kernels.ranking.advance_point_pair`), so a steady-state
    call allocates nothing of size d x l beyond the gradient, and not even
    that when W is scratch: W has been copied into the pair, and its buffer
    is zeroed and returned as the gradient.

    A sent pair (d, 2l) [W | G], G formed as apg forms it, is kept when it
    is the call's own copy (``W_is_scratch``); the caller's array (blocks
    in the caller's process) is read for this call only, and the caller
    sends the pair on every call, one pair for all such blocks: blocks that
    each held their own pair would have two threads contend for twice the
    cache, which makes the pass slower than reading one shared pair. Sent
    a (d, l) W_prev instead, the block forms the pair and keeps it, which
    costs a d x 2l matrix beside the two it was sent.
    """
    d, l = W.shape
    keep = True
    if held is not None:
        WG = held.point
        advance_point_pair(WG, W, float(momentum))
    elif sent.shape == (d, 2 * l):
        keep = W_is_scratch
        if _reusable(sent, W_is_scratch):
            WG = sent
        else:
            WG = np.array(sent, dtype=np.float64) if keep else np.ascontiguousarray(sent, dtype=np.float64)
    else:
        WG = np.empty((d, 2 * l))
        WG[:, :l] = sent
        advance_point_pair(WG, W, float(momentum))
    if _reusable(W, W_is_scratch):
        grad = W
        grad.fill(0.0)
    else:
        grad = np.zeros((d, l))
    br, rank = sparse_extrapolated_pass(X.indptr, X.indices, X.data, Y, WG, float(lambda2), RANK_MARGIN, grad)
    return ExtrapolatedStep(br + lambda2 * rank, grad, HeldPoint(WG) if keep else None)


def _reusable(a: np.ndarray, scratch: bool) -> bool:
    """Whether a call may keep or overwrite its argument ``a`` as a float64 work array."""
    return scratch and a.dtype == np.float64 and a.flags.writeable and a.flags.c_contiguous


def block_lipschitz_stats(block: Block):
    """Per-block sums for the paper's Lipschitz bound (eqs. 22-23).

    Returns
    -------
    x_fro2 : float
        ||X_block||_F^2.
    A, B : float64 (l,)
        Block shares of A_j and B_j of Proposition 1.
    """
    return lipschitz_stats_from_rows(block.Y, row_sq_norms(block.X))


def lipschitz_stats_from_rows(Y: np.ndarray, row_sq: np.ndarray):
    """(sum of row_sq, A, B) of eqs. 22 / 33 from the rows' squared norms (of X, or of K)."""
    l = Y.shape[1]
    A = np.zeros(l)
    B = np.zeros(l)
    rank_lipschitz_row_stats(Y, row_sq, A, B)
    return float(row_sq.sum()), A, B


def paper_lipschitz(
    x_fro2: float, A: np.ndarray, B: np.ndarray, lambda1: float, lambda2: float, ridge_scale2: float = 1.0
) -> float:
    """The paper's Lipschitz constant of grad f (eq. 23, with L_fr from eq. 22).

    L_f = sqrt(3 ||X||_F^4 + 3 lambda1^2 s + 3 (lambda2 L_fr)^2),
    L_fr = sqrt(max_j A_j B_j). (With lambda2 = 0 the reference skips L_fr.)
    ``s`` is 1 for the linear model; the kernel model (eq. 33) passes
    ``x_fro2 = s = ||K||_F^2`` and A, B computed from the rows of K.
    """
    l_rank = float(np.sqrt(np.max(A * B))) if lambda2 != 0 and A.size else 0.0
    return float(np.sqrt(3.0 * x_fro2**2 + 3.0 * lambda1**2 * ridge_scale2 + 3.0 * (lambda2 * l_rank) ** 2))


def curvature_weights(Y: np.ndarray, lambda2: float) -> np.ndarray:
    """Per-row bound c_i on the Hessian of the loss in the scores s_i.

    The squared hinge BR term contributes at most I; the pairwise term of a
    row with ``|P|`` relevant and ``|N|`` irrelevant labels at most
    ``Lap(K_{|P|,|N|}) / (|P| |N|)``, whose largest eigenvalue is ``l / (|P| |N|)``.
    So ``c_i = 1 + lambda2 l / (|P_i| |N_i|)`` (1 for rows without pairs), and
    grad f is Lipschitz with constant lambda_max(X^T diag(c) X) + lambda1:
    typically far below eq. 23, which uses ||X||_F^2 >= ||X||_2^2.

    Returns
    -------
    float64 (m,)
    """
    l = Y.shape[1]
    n_pos = Y.sum(axis=1, dtype=np.int64)
    pairs = n_pos * (l - n_pos)
    return 1.0 + lambda2 * np.where(pairs > 0, l / np.maximum(pairs, 1), 0.0)


def block_curvature_matvec(block: Block, v: np.ndarray, lambda2: float) -> np.ndarray:
    """Block share of X^T diag(c) X v (see :func:`curvature_weights`); v: float64 (d,)."""
    c = curvature_weights(block.Y, lambda2)
    return np.asarray(block.X.T @ (c * np.asarray(block.X @ v).ravel())).ravel()


def spectral_lipschitz(matvec, dim: int, shift: float = 0.0) -> float:
    """Largest eigenvalue of a symmetric PSD operator (plus ``shift``), by Lanczos.

    ``scipy.sparse.linalg.eigsh`` (ARPACK) with a fixed start vector, so the
    estimate is deterministic; each matvec is one map-reduce. The estimate
    converges from below, so callers keep a backtracking check behind it.
    """
    from scipy.sparse.linalg import LinearOperator, eigsh

    if dim <= 2:  # ARPACK needs k < dim: form the tiny matrix instead
        M = np.column_stack([matvec(e) for e in np.eye(dim)])
        return float(np.linalg.eigvalsh(0.5 * (M + M.T)).max()) + shift
    op = LinearOperator((dim, dim), matvec=lambda v: matvec(np.asarray(v, dtype=np.float64).ravel()), dtype=np.float64)
    top = eigsh(op, k=1, which="LA", tol=1e-6, v0=np.ones(dim), return_eigenvectors=False, ncv=min(dim, 20))
    return float(top[0]) + shift


def add_ridge(values: np.ndarray, grad, points, grad_point: int, lambda1: float, rows: slice = slice(None)):
    """Add the lambda1/2 ||W[rows]||_F^2 term (eq. 17) to summed block values and gradient.

    ``points`` is the (k, d, l) stack or a sequence of k (d, l) arrays.
    ``rows`` are the penalized rows: all of them in the paper; all but the
    last (the bias) for an unpenalized intercept.
    """
    values = values + 0.5 * lambda1 * np.array([np.vdot(P[rows], P[rows]) for P in points])
    if grad is not None:
        grad = np.array(grad, dtype=np.float64)  # the reduced gradient may be shared with a cache
        add_scaled(grad[rows], lambda1, points[grad_point][rows])
    return values, grad
