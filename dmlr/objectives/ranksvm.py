"""Rank-SVM primal objective (Park & Choi 2013, eqs. 5-6 and 9-17) on one row block.

    F_alpha(M) = lambda/2 ||M||_F^2 + 1/n sum_i R_i^alpha(M)

with R_i^alpha the pairwise hinge of instance i (eq. 5) for ``alpha = 0`` or its
Nesterov smoothing (eq. 9, smoothing width alpha * N_i per pair, see
:mod:`dmlr.kernels.ranksvm`) for ``alpha > 0``. The bias is the last row of M,
paired with the constant column the block already carries (``fit_intercept``);
it is regularized like the rest of M, as the paper's augmented m_k.

The data term is a sum over rows, so each block returns its (unnormalized)
share and a caller -- this process or a distributed layer -- sums the shares,
divides by the total number of rows n and adds the ridge once
(:func:`finish`). Rows without pairs add 0 but count in n.
"""

from __future__ import annotations

import numpy as np

from dmlr.data.blocks import Block
from dmlr.kernels.blocks import product_tile_rows
from dmlr.kernels.ranksvm import RANKSVM_MARGIN, ranksvm_scores_loss


def block_value_and_grad(
    block: Block, M: np.ndarray, alpha: float = 0.0, want_grad: bool = True, margin: float = RANKSVM_MARGIN
):
    """Sum of R_i^alpha over the block's rows and its gradient X^T C.

    Parameters
    ----------
    block : Block
        X (m, d) dense or CSR float64 (bias column included), Y (m, K) int8.
    M : float64 (d, K)
    alpha : float
        0: the hinge (eq. 5) and a subgradient; > 0: the smoothed loss (eq. 9).
    want_grad : bool

    Returns
    -------
    value : float
        sum_i R_i^alpha(M) over the block (not divided by n, no ridge).
    grad : float64 (d, K) or None
        sum_i x_i c_i^T = X^T C (not divided by n, no ridge).
    """
    X, Y = block.X, block.Y
    m, K = Y.shape
    M = np.ascontiguousarray(M, dtype=np.float64)
    value = 0.0
    grad = np.zeros(M.shape) if want_grad else None
    step = product_tile_rows(X, K, K)
    for a in range(0, m, step):
        b = min(a + step, m)
        Xt = X[a:b]
        S = np.ascontiguousarray(Xt @ M)
        C = np.zeros((b - a, K))
        value += float(ranksvm_scores_loss(S, Y[a:b], float(alpha), float(margin), C))
        if want_grad:
            grad += np.asarray(Xt.T @ C)
    return value, grad


def finish(value: float, grad, M: np.ndarray, n_rows: int, lam: float):
    """From summed block shares to F and its gradient: mean over n rows plus the ridge."""
    f = value / n_rows + 0.5 * lam * float(np.vdot(M, M))
    if grad is None:
        return f, None
    return f, grad / n_rows + lam * M


def value_and_grad(blocks, M: np.ndarray, lam: float, alpha: float = 0.0, want_grad: bool = True):
    """F_alpha(M) and its (sub)gradient over a list of blocks in this process."""
    blocks = [blocks] if isinstance(blocks, Block) else list(blocks)
    total, grad, n = 0.0, (np.zeros(M.shape) if want_grad else None), 0
    for blk in blocks:
        v, g = block_value_and_grad(blk, M, alpha, want_grad)
        total += v
        n += blk.n_rows
        if want_grad:
            grad += g
    return finish(total, grad, M, n, lam)


def objective(blocks, M: np.ndarray, lam: float, alpha: float = 0.0) -> float:
    """F_alpha(M) (eq. 5/6 for alpha = 0)."""
    return value_and_grad(blocks, M, lam, alpha, want_grad=False)[0]


def smoothing_gap_bound(Y: np.ndarray, alpha: float) -> float:
    """Upper bound on F_0 - F_alpha (>= 0): the mean over rows of alpha N_i / 2 (eq. 10)."""
    Y = np.asarray(Y)
    pos = (Y != 0).sum(axis=1).astype(np.float64)
    return float(alpha * np.mean(pos * (Y.shape[1] - pos)) / 2.0)
