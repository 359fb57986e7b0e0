"""Kernel RBRL objective (Wu et al. 2020, eq. 12) on one row block of K.

With A (n, l) the dual coefficients and scores F = K A, the smooth part is::

    f(A) = 1/2 ||(|E - Y o KA|_+)^2||_1 + lambda1/2 tr(A^T K A) + lambda2 f_r(KA)

and g(A) = lambda3 ||A||_* (the reference thresholds the singular values of A).
Its gradient (eqs. 30-31) is K^T C + lambda1 K A, with C the score gradient
of the loss terms (the same kernel as the linear model). Both are sums over
row blocks B (rows start:stop of K, K symmetric)::

    value_B = loss(K_B A) + lambda1/2 sum(A_B o (K_B A))
    grad_B  = K_B^T (C_B + lambda1 A_B)

so each worker needs only its own rows K_B (m x n), built once from its rows
of X and the whole X (``kernel_memory="keep"``) or rebuilt each call
(``"recompute"``: m x n memory is not held between iterations).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dmlr.data.blocks import Block
from dmlr.kernels.gram import KernelSpec, kernel_matrix, row_sq_norms
from dmlr.objectives.rbrl import (
    ExtrapolatedStep,
    curvature_weights,
    extrapolated_pass,
    fused_pass,
    lipschitz_stats_from_rows,
)


@dataclass
class KernelBlock:
    """Rows start:stop of the training kernel matrix, and their labels.

    Attributes
    ----------
    Y : int8 (m, l)
    start, stop : int
        Training-row range of the block (its rows of A are ``A[start:stop]``).
    K : float64 (m, n) or None
        The kernel rows, when kept.
    X, X_all : the block's rows and all n training rows (for recomputing K)
    spec : KernelSpec
    state : dict
        What a solver keeps on the block between calls (see
        :class:`dmlr.distributed.extrapolation.ExtrapolationCache`).
    """

    Y: np.ndarray
    start: int
    stop: int
    K: np.ndarray | None
    X: object
    X_all: object
    spec: KernelSpec
    state: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_rows(self) -> int:
        return int(self.Y.shape[0])

    def gram(self) -> np.ndarray:
        """K_B, kept or recomputed."""
        if self.K is not None:
            return self.K
        return kernel_matrix(self.X, self.X_all, self.spec)


def make_kernel_block(block: Block, bounds: tuple[int, int], X_all, spec: KernelSpec, keep: bool) -> KernelBlock:
    """Turn a feature block into a kernel block (runs where the block lives).

    Parameters
    ----------
    block : Block
        Rows of X (no bias column) and Y.
    bounds : (start, stop)
        The block's training-row range.
    X_all : float64 (n, p) dense or CSR
        Every training row, in order.
    spec : KernelSpec
    keep : bool
        Keep K_B in memory (else recompute it at every call).
    """
    start, stop = bounds
    if stop - start != block.n_rows:
        raise ValueError(f"block has {block.n_rows} rows but bounds {bounds}")
    K = _kernel_rows(block.X, X_all, spec) if keep else None
    return KernelBlock(
        Y=block.Y,
        start=int(start),
        stop=int(stop),
        K=K,
        X=None if keep else block.X,
        X_all=None if keep else X_all,
        spec=spec,
    )


def _kernel_rows(X, X_all, spec: KernelSpec, tile: int = 512) -> np.ndarray:
    """k(X, X_all) filled tile by tile into one array: the products' temporaries stay
    tile x n instead of two more m x n arrays (a peak of 3x K's size)."""
    K = np.empty((X.shape[0], X_all.shape[0]))
    all_sq = row_sq_norms(X_all) if spec.name == "rbf" else None
    for a in range(0, X.shape[0], tile):
        K[a : a + tile] = kernel_matrix(X[a : a + tile], X_all, spec, all_sq)
    return K


def block_value_and_grad(kb: KernelBlock, points: np.ndarray, grad_point: int, lambda1: float, lambda2: float):
    """f's block share at several points A and its gradient share at one.

    Parameters
    ----------
    kb : KernelBlock
    points : float64 (k, n, l)
    grad_point : int
        Index of the gradient point, or -1.
    lambda1, lambda2 : float

    Returns
    -------
    values : float64 (k,)
        Block share of f (all three smooth terms).
    grad : float64 (n, l) or None
    """
    k, n, l = points.shape
    A = np.ascontiguousarray(points.transpose(1, 0, 2).reshape(n, k * l))
    return fused_pass(
        kb.gram(), kb.Y, A, k, l, grad_point, lambda2, ridge_rows=points[:, kb.start : kb.stop, :], lambda1=lambda1
    )


def block_wants_pair(kb: KernelBlock) -> bool:
    """Always False: a kernel block (dense rows of K) that holds nothing is sent A_prev."""
    return False


def block_extrapolated_value_and_grad(
    kb: KernelBlock, A: np.ndarray, momentum: float, held, sent, A_is_scratch: bool, lambda1: float, lambda2: float
) -> ExtrapolatedStep:
    """f's block share at A and at G = A + momentum (A - A_prev), and its gradient share at G.

    The linear model's speculative call
    (:func:`dmlr.objectives.rbrl.block_extrapolated_value_and_grad`) on the
    kernel rows, ridge included: the block keeps A and S(A) = K_B A between
    iterations and forms S(G) by linearity, so an iteration multiplies K_B by
    one (n, l) matrix instead of the two stacked points (the larger of the
    iteration's two products, m x n by n x 2l, is halved).

    Parameters
    ----------
    kb : KernelBlock
    A : float64 (n, l)
    momentum : float
    held : HeldPoint or None
        What this block kept from the call of A_prev.
    sent : float64 (n, l) or None
        A_prev, when nothing is held.
    A_is_scratch : bool
        Unused (a dense block never writes its arguments); the signature
        is the linear model's.
    lambda1, lambda2 : float

    Returns
    -------
    ExtrapolatedStep
    """
    return extrapolated_pass(
        kb.gram(), kb.Y, A, momentum, held, sent, lambda2, ridge_rows=slice(kb.start, kb.stop), lambda1=lambda1
    )


def block_lipschitz_stats(kb: KernelBlock):
    """Block shares of ||K||_F^2 and of A_j, B_j of eq. 33 (rows of K in place of x_i)."""
    return lipschitz_stats_from_rows(kb.Y, row_sq_norms(kb.gram()))


def block_curvature_matvec(kb: KernelBlock, v: np.ndarray, lambda1: float, lambda2: float) -> np.ndarray:
    """Block share of (K diag(c) K + lambda1 K) v, the bound on the Hessian in A (v: float64 (n,))."""
    K = kb.gram()
    c = curvature_weights(kb.Y, lambda2)
    return K.T @ (c * (K @ v) + lambda1 * v[kb.start : kb.stop])
