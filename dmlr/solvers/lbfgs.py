"""Limited-memory quasi-Newton (L-BFGS) on RBRL's objective where its nuclear norm is smooth.

RBRL minimizes F(W) = f(W) + lambda3 ||W_r||_* (Wu et al. 2020, eq. 8), f smooth
(eq. 17) and W_r the rows under the penalty. The nuclear norm is differentiable
at every W_r of full rank (no zero singular value), with gradient
``U V^T`` for the thin SVD ``W_r = U S V^T`` (Watson 1992); at the values of
lambda3 that keep every direction of W (the optimum has full rank), F is
smooth near its minimizer and a quasi-Newton method, which builds a curvature
model from the gradients it has seen, needs several times fewer oracle calls
than the accelerated proximal gradient (:func:`dmlr.solvers.apg.apg`), whose
step is one constant for every direction. f is only once differentiable (its
squared hinges are piecewise quadratic); L-BFGS converges on such functions
as on smooth ones in practice (scikit-learn's squared-hinge linear models use
it too).

Where the optimum has lower rank the gradient jumps and the line search
fails, or a singular value collapses toward zero: :func:`lbfgs` then stops
without claiming convergence, and the caller continues with
:func:`~dmlr.solvers.apg.apg` from its last point (``RBRL(step_rule="lbfgs")``
does), whose proximal step handles the nonsmooth term exactly.

The iterations are the two-loop recursion
(:func:`dmlr.kernels.quasi_newton.two_loop`) with a backtracking (Armijo) line
search (Nocedal & Wright, Algorithms 7.4-7.5), written here rather than taken
from scipy's L-BFGS-B: that one's bound-constrained machinery (Cauchy point,
subspace minimization) took 45% of a fit of the RBF kernel model on emotions
with no bound to enforce, where the two-loop recursion costs 4 m n flops. The
stopping test is the one :func:`~dmlr.solvers.apg.apg` uses, so that both stop at the same
accuracy. It knows nothing of Dask: the oracle does the sums over row blocks.
"""

from __future__ import annotations

import math
import time

import numpy as np

from dmlr.kernels.quasi_newton import two_loop
from dmlr.solvers.apg import APGResult, Oracle, _FunctionOracle, relative_change

#: A singular value below this fraction of the largest counts as zero: the nuclear norm
#: is treated as nonsmooth there (its gradient omits that direction, and a minimizer
#: found with such a direction is handed to the proximal method).
SMOOTH_MIN_RELATIVE = 1e-6
#: A minimizer whose smallest singular value is below this fraction of the largest is not
#: claimed as converged: the nuclear norm's kink is near, and the proximal method finishes.
CONVERGED_MIN_RELATIVE = 1e-3

#: Correction pairs kept, at most (scipy's ``maxcor``). The RBF kernel models' Hessians are
#: ill-conditioned and a long memory pays: to the paper step's optimum, 100 pairs took
#: 0.095 of its iterations on emotions (the reference's split), 0.086 on scene, 0.15 on
#: yeast, against 0.23, 0.22, 0.25 with 30 pairs (``benchmarks/step_rules.py --rules lbfgs``).
MEMORY = 100
#: ... and at most this many bytes of pairs (2 vectors of W's size each): the two-loop
#: recursion costs 4 m n flops a call, which for a large W (enron's 1,002 x 53 took longer
#: with 100 pairs than with 30) outgrows the oracle call, and the pairs live on the client.
MEMORY_BYTES = 32 * 2**20


def memory_pairs(size: int, memory: int = MEMORY) -> int:
    """Pairs kept for a variable of ``size`` floats: ``memory``, capped by :data:`MEMORY_BYTES` (at least 5)."""
    return int(max(5, min(memory, MEMORY_BYTES // (16 * max(size, 1)))))


def nuclear_value_and_grad(W: np.ndarray) -> tuple[float, np.ndarray, float]:
    """||W||_*, its gradient ``U V^T`` (zero along directions with a zero singular value) and
    the smallest singular value relative to the largest.

    From the eigendecomposition of the small Gram matrix (``W^T W``, l x l, or
    ``W W^T`` when W is wide), as :func:`dmlr.solvers.prox.prox_nuclear_norm`:
    ``U V^T = W V diag(1/s) V^T``.

    Parameters
    ----------
    W : float64 (d, l)

    Returns
    -------
    norm : float
    grad : float64 (d, l)
    smallest : float
        min(s) / max(s) over the min(d, l) singular values (0 for W = 0).
    """
    wide = W.shape[0] < W.shape[1]
    lam, V = np.linalg.eigh(W @ W.T if wide else W.T @ W)
    s = np.sqrt(np.maximum(lam, 0.0))
    top = s[-1]
    if top == 0.0:
        return 0.0, np.zeros_like(W), 0.0
    kept = s > SMOOTH_MIN_RELATIVE * top
    M = (V[:, kept] / s[kept]) @ V[:, kept].T
    return float(s.sum()), (M @ W if wide else W @ M), float(s[0] / top)


def lbfgs(
    oracle,
    x0: np.ndarray,
    *,
    nuclear: float,
    rows: slice = slice(None),
    tol: float = 1e-6,
    gradient_tol: float | None = None,
    max_iter: int = 1000,
    memory: int | None = None,
    callback=None,
) -> APGResult:
    """Minimize ``f + nuclear * ||W[rows]||_*`` by L-BFGS (see the module).

    Parameters
    ----------
    oracle : Oracle or callable
        f as :func:`~dmlr.solvers.apg.apg` asks for it: ``oracle(points, 0)``
        with ``points`` (1, d, l) returns (values (1,), grad (d, l)).
    x0 : float64 (d, l)
        Start (zeros: cold).
    nuclear : float
        lambda3.
    rows : slice
        Rows of W under the nuclear norm (RBRL leaves its bias row out).
    tol : float
        Stop when the objective's relative change over an iteration is at most
        ``tol`` (as :func:`~dmlr.solvers.apg.apg`'s test), and the gradient test holds.
    gradient_tol : float, optional
        Also require ``||grad F|| <= gradient_tol * ||grad f(0)||``: the
        relative change alone can stop a warm start early, as in :func:`~dmlr.solvers.apg.apg`.
    max_iter : int
        Oracle calls at most (each one round trip over the row blocks).
    memory : int, optional
        Correction pairs kept (default: :func:`memory_pairs` of W's size).
    callback : callable, optional
        ``callback(t, objective, seconds)`` after each oracle call; a true
        return value stops the run.

    Returns
    -------
    APGResult
        ``x`` the best point seen, ``objective_history`` F at each oracle call
        (not monotone: line-search trials count), ``n_iter`` and
        ``n_oracle_calls`` the oracle calls, ``converged`` whether the test
        stopped the run at a point where the nuclear norm is smooth (False:
        max_iter, a failed line search, or a rank-deficient point; the caller
        finishes with the proximal method).
    """
    if not isinstance(oracle, Oracle):
        oracle = _FunctionOracle(oracle)
    shape = x0.shape
    memory = memory_pairs(x0.size) if memory is None else int(memory)
    result = APGResult(x=np.array(x0, dtype=np.float64))
    start = time.perf_counter()
    reference = None  # ||grad f(0)||; a cold start's first call gives it (grad F(0) = grad f(0))
    if gradient_tol is not None and np.any(x0):
        _, g0 = oracle(np.zeros((1, *shape)), 0)
        reference = float(np.linalg.norm(g0))
        result.n_oracle_calls += 1
    best = [math.inf, 0.0]  # objective, smallest relative singular value at the best point

    def value_and_grad(w):
        W = w.reshape(shape)
        values, g = oracle(W[None], 0)
        norm, G, smallest = nuclear_value_and_grad(W[rows])
        grad = np.array(g, dtype=np.float64)
        grad[rows] += nuclear * G
        obj = float(values[0]) + nuclear * norm
        result.n_oracle_calls += 1
        result.objective_history.append(obj)
        result.seconds.append(time.perf_counter() - start)
        result.n_iter = len(result.objective_history)
        if obj < best[0]:
            best[:] = [obj, smallest]
            result.x = W.copy()
        if callback is not None and callback(result.n_iter, obj, result.seconds[-1]):
            raise StopIteration
        return obj, grad.ravel()

    try:
        _iterate(value_and_grad, result.x.ravel(), result, tol, gradient_tol, reference, max_iter, memory)
    except StopIteration:  # the callback asked to stop
        pass
    if best[1] <= CONVERGED_MIN_RELATIVE:  # a direction near zero: not a smooth optimum
        result.converged = False
    return result


#: Armijo's sufficient-decrease constant and the backtracking factor of the line search.
ARMIJO = 1e-4
BACKTRACK = 0.5
#: Backtracking steps before the line search gives up (a kink of the nuclear norm, or
#: rounding at the optimum).
MAX_BACKTRACKS = 30


def _iterate(value_and_grad, x, result, tol, gradient_tol, reference, max_iter, memory) -> None:
    """The L-BFGS iterations from x; sets ``result.converged`` when the stopping test holds
    (``reference``: the gradient test's scale, None: the gradient at x, the origin)."""
    f, g = value_and_grad(x)
    if reference is None:
        reference = float(np.linalg.norm(g))
    S, Yb, rho = np.empty((memory, x.size)), np.empty((memory, x.size)), np.empty(memory)
    newest, count = -1, 0  # the pairs: circular buffers, newest at row `newest`
    step = 1.0 / max(float(np.linalg.norm(g)), 1e-300)  # first step: unit length along -g
    while result.n_iter < max_iter:
        d = -two_loop(g, S, Yb, rho, newest, count)
        slope = float(g @ d)
        if slope >= 0.0:  # not a descent direction (rounding): restart from the gradient
            count = 0
            d, slope = -g, -float(g @ g)
        t = step
        for _ in range(MAX_BACKTRACKS):
            x_new = x + t * d
            f_new, g_new = value_and_grad(x_new)
            if f_new <= f + ARMIJO * t * slope or result.n_iter >= max_iter:
                break
            t *= BACKTRACK
        else:
            return  # no decrease along a descent direction: a kink, handed to the caller
        if f_new > f + ARMIJO * t * slope:
            return  # max_iter inside the line search
        s_k, y_k = x_new - x, g_new - g
        sy = float(s_k @ y_k)
        if sy > 1e-12 * float(np.linalg.norm(s_k)) * float(np.linalg.norm(y_k)):  # curvature: keep the pair
            newest = (newest + 1) % memory
            S[newest], Yb[newest], rho[newest] = s_k, y_k, 1.0 / sy
            count = min(count + 1, memory)
        changed = relative_change(f_new, f) <= tol
        x, f, g, step = x_new, f_new, g_new, 1.0
        if changed and (gradient_tol is None or float(np.linalg.norm(g)) <= gradient_tol * reference):
            result.converged = True
            return
