"""Online Matrix Factorization (Otálora-Montenegro, Pérez-Rubiano & González): per-chunk math.

Notation (rows are instances, as everywhere in dmlr; the paper's matrices are
the transposes): X (m, k) features, Y (m, l) 0/1 labels, P (k, s), Q (l, s)
the two factor matrices, H (m, s) the latent codes, one row h_i per instance.
The paper's X = PH, Y = QH read X ~ H P^T, Y ~ H Q^T here. Eq. 1 is

    F(P, Q, H) = (1 - alpha) ||X - H P^T||_F^2 + alpha ||Y - H Q^T||_F^2
                 + lam (||P||_F^2 + ||Q||_F^2 + ||H||_F^2)

The data terms and ||H||^2 are sums over rows, so a chunk contributes its
share (:func:`chunk_loss`) and the ridge on P, Q is added once
(:func:`objective`). Everything here is pure numpy/scipy on one in-memory
chunk (dense float64 or scipy CSR X); no Dask, no state.

No Numba: every function is a handful of BLAS-3 calls on
(b, k) x (k, s) products, which numpy already runs at BLAS speed.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp

__all__ = [
    "chunk_loss",
    "data_gradients",
    "embed",
    "latent_codes",
    "learning_rate",
    "objective",
    "objective_gradients",
    "prediction_matrix",
    "sgd_step",
]


def _dense(A) -> np.ndarray:
    return A.toarray() if sp.issparse(A) else np.asarray(A, dtype=np.float64)


def _sq_norm(A) -> float:
    """||A||_F^2 for a dense or scipy-sparse matrix."""
    if sp.issparse(A):
        return float(A.multiply(A).sum())
    return float(np.vdot(A, A))


def _lt_x(X, H) -> np.ndarray:
    """X^T H, shape (k, s), for dense or CSR X (m, k) and dense H (m, s)."""
    return np.asarray(X.T @ H)


def latent_codes(X, Y, P, Q, alpha: float, lam: float) -> np.ndarray:
    """Closed-form minimiser of eq. 1 over H for fixed P, Q (the h-line of Algorithm 1).

    Row by row, h_i = argmin (1-alpha)||x_i - P h||^2 + alpha ||y_i - Q h||^2 + lam ||h||^2, i.e.

        ((1-alpha) P^T P + alpha Q^T Q + lam I) h_i = (1-alpha) P^T x_i + alpha Q^T y_i.

    The paper's Algorithm 1 writes (lam I + P^T P + Q^T Q)^{-1}(P^T x + Q^T y),
    which is this formula for alpha = 1/2 (with lam doubled); the weighted
    form is the exact minimiser of eq. 1 for every alpha.

    Parameters
    ----------
    X : float64 ndarray or scipy CSR, shape (m, k)
    Y : array (m, l) of 0/1 (any numeric dtype)
    P : float64 (k, s)
    Q : float64 (l, s)
    alpha : float in [0, 1]
    lam : float > 0 (makes the system positive definite)

    Returns
    -------
    H : float64 ndarray (m, s)
    """
    s = P.shape[1]
    A = (1.0 - alpha) * (P.T @ P) + alpha * (Q.T @ Q)
    A[np.diag_indices(s)] += lam
    Yf = np.asarray(Y, dtype=np.float64)
    rhs = (1.0 - alpha) * np.asarray(X @ P) + alpha * (Yf @ Q)  # (m, s): rows are the right-hand sides
    return scipy.linalg.cho_solve(scipy.linalg.cho_factor(A, lower=True), rhs.T).T


def embed(X, P, xi: float) -> np.ndarray:
    """Latent codes of new instances, eq. 2 / Algorithm 2: h = (xi I + P^T P)^{-1} P^T x.

    Parameters
    ----------
    X : float64 ndarray or scipy CSR (m, k)
    P : float64 (k, s)
    xi : float >= 0 (0 needs P^T P non-singular)

    Returns
    -------
    H : float64 (m, s)
    """
    A = P.T @ P
    A[np.diag_indices(A.shape[0])] += xi
    return scipy.linalg.solve(A, np.asarray(X @ P).T, assume_a="pos").T


def prediction_matrix(P, Q, xi: float) -> np.ndarray:
    """W = P (xi I + P^T P)^{-1} Q^T, shape (k, l): Algorithm 2's scores are y = Q h = W^T x.

    Prediction is linear in x, so the scores of a chunk are one product X @ W
    (also for sparse X), whatever the number of rows.

    Returns
    -------
    W : float64 (k, l)
    """
    A = P.T @ P
    A[np.diag_indices(A.shape[0])] += xi
    return P @ scipy.linalg.solve(A, Q.T, assume_a="pos")


def chunk_loss(X, Y, P, Q, H, alpha: float, lam: float) -> float:
    """A chunk's share of eq. 1: (1-alpha)||X - H P^T||^2 + alpha ||Y - H Q^T||^2 + lam ||H||^2.

    Additive over row chunks; eq. 1 is the sum over the chunks plus
    lam (||P||^2 + ||Q||^2) (:func:`objective`). For sparse X the feature
    residual is expanded, ||X||^2 - 2 <X^T H, P> + <P^T P, H^T H>, so that
    the (m, k) residual is never densified.

    Parameters
    ----------
    X : float64 ndarray or scipy CSR (m, k)
    Y : array (m, l) of 0/1
    P : float64 (k, s); Q : float64 (l, s); H : float64 (m, s)
    alpha, lam : float

    Returns
    -------
    float
    """
    if sp.issparse(X):
        rx = _sq_norm(X) - 2.0 * float(np.vdot(_lt_x(X, H), P)) + float(np.vdot(P.T @ P, H.T @ H))
    else:
        R = np.asarray(X, dtype=np.float64) - H @ P.T
        rx = float(np.vdot(R, R))
    Ry = np.asarray(Y, dtype=np.float64) - H @ Q.T
    return (1.0 - alpha) * rx + alpha * float(np.vdot(Ry, Ry)) + lam * float(np.vdot(H, H))


def objective(X, Y, P, Q, H, alpha: float, lam: float) -> float:
    """Eq. 1 on the rows of (X, Y) with codes H (float): :func:`chunk_loss` + lam (||P||^2 + ||Q||^2)."""
    return chunk_loss(X, Y, P, Q, H, alpha, lam) + lam * (float(np.vdot(P, P)) + float(np.vdot(Q, Q)))


def data_gradients(X, Y, P, Q, H, alpha: float):
    """Gradients of the data terms of eq. 1 w.r.t. P and Q (H fixed), summed over the chunk's rows.

        d/dP (1-alpha)||X - H P^T||^2 = -2 (1-alpha) (X^T H - P H^T H)
        d/dQ alpha ||Y - H Q^T||^2   = -2 alpha     (Y^T H - Q H^T H)

    (the paper's g_P, g_Q of eq. 3 without the ridge, times 2: the paper
    drops the factor 2, which only rescales the learning rate).

    Returns
    -------
    gP : float64 (k, s)
    gQ : float64 (l, s)
    """
    G = H.T @ H
    gP = -2.0 * (1.0 - alpha) * (_lt_x(X, H) - P @ G)
    gQ = -2.0 * alpha * (np.asarray(Y, dtype=np.float64).T @ H - Q @ G)
    return gP, gQ


def objective_gradients(X, Y, P, Q, H, alpha: float, lam: float):
    """Gradients of eq. 1 w.r.t. P and Q at fixed H: data gradients + 2 lam P, 2 lam Q.

    Returns
    -------
    gP : float64 (k, s)
    gQ : float64 (l, s)
    """
    gP, gQ = data_gradients(X, Y, P, Q, H, alpha)
    return gP + 2.0 * lam * P, gQ + 2.0 * lam * Q


def learning_rate(t: int, eta0: float, decay: float) -> float:
    """gamma_t = eta0 / (1 + eta0 * decay * t), t = minibatch updates done so far.

    The usual SGD schedule for a strongly convex term (Bottou), which is what
    Algorithm 1's update gamma <- gamma / (1 + i gamma lambda_j) is after;
    taken literally that recursion gives 1/gamma_t = 1/gamma_0 + lambda_j t(t+1)/2,
    a 1/t^2 decay whose steps have a finite sum (SGD would stall before converging).
    """
    return float(eta0) / (1.0 + float(eta0) * float(decay) * float(t))


def sgd_step(X, Y, P, Q, alpha: float, lam: float, lr: float, n_rows: int):
    """One Algorithm 1 update on a minibatch: closed-form H, then one SGD step on P and Q.

    The step direction is an unbiased estimate of grad eq. 1 / n: the mean
    over the b minibatch rows of the data gradient plus 2 (lam / n) P (each
    row carries 1/n of the ridge on P, Q), at the codes H of the minibatch
    computed from the current P, Q. (Algorithm 1 as printed uses the
    previous sample's h; the current one is what makes the step a gradient
    of eq. 3 at the current sample.) The paper's eq. 3 puts the whole lam on
    P, Q for every sample, which, summed over an epoch, is eq. 1 with
    n lam on P, Q; the two differ by a rescaling of (P, Q, H) and of xi
    (see :class:`dmlr.models.omf.OMF`).

    Parameters
    ----------
    X : float64 ndarray or CSR (b, k); Y : (b, l) 0/1
    P : float64 (k, s); Q : float64 (l, s)  -- not modified
    alpha, lam : float
    lr : float
        The step size gamma_t.
    n_rows : int
        n, the rows of an epoch (the weight 1/n of the ridge per row).

    Returns
    -------
    P_new : float64 (k, s)
    Q_new : float64 (l, s)
    loss : float
        :func:`chunk_loss` of the minibatch at the old P, Q (its share of eq. 1).
    """
    H = latent_codes(X, Y, P, Q, alpha, lam)
    loss = chunk_loss(X, Y, P, Q, H, alpha, lam)
    b = H.shape[0]
    gP, gQ = data_gradients(X, Y, P, Q, H, alpha)
    ridge = 2.0 * lam / float(n_rows)
    P_new = P - lr * (gP / b + ridge * P)
    Q_new = Q - lr * (gQ / b + ridge * Q)
    return P_new, Q_new, loss
