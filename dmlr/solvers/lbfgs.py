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
fails, or a singular value collapses toward zero and the objective stops
moving while the smoothed gradient keeps its unit component along that
direction: :func:`lbfgs` then stops without claiming convergence, and
:func:`lbfgs_then_apg` continues with
:func:`~dmlr.solvers.apg.apg` from its last point (``RBRL(solver="lbfgs")``
uses it), whose proximal step handles the nonsmooth term exactly.
:func:`scipy_lbfgs` wraps scipy's L-BFGS-B for smooth problems without a
prox (the Rank-SVM and linear models' batch solver).

The iterations apply the L-BFGS model in its compact form (:meth:`Pairs.direction`)
with a backtracking (Armijo) line search (Nocedal & Wright, Algorithm 7.5),
written here rather than taken from scipy's L-BFGS-B: that one's
bound-constrained machinery (Cauchy point, subspace minimization) took a large
share of a kernel model's fit with no bound to enforce, where the compact
model's product costs 4 m n flops. The
stopping test is the one :func:`~dmlr.solvers.apg.apg` uses, so that both stop at the same
accuracy. It knows nothing of Dask: the oracle does the sums over row blocks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from dmlr._blas import add_combination, add_scaled
from dmlr.kernels.quasi_newton import compact_coefficients, intercept_gradient, pair_products
from dmlr.solvers.apg import APGState, FunctionOracle, Oracle, apg, check_saved_state, relative_change
from dmlr.solvers.result import SolverResult

#: A singular value below this fraction of the largest counts as zero: the nuclear norm
#: is treated as nonsmooth there (its gradient omits that direction, and a minimizer
#: found with such a direction is handed to the proximal method).
SMOOTH_MIN_RELATIVE = 1e-6
#: A minimizer whose smallest singular value is below this fraction of the largest is not
#: claimed as converged: the nuclear norm's kink is near, and the proximal method finishes.
CONVERGED_MIN_RELATIVE = 1e-3
#: A warm start with more than this fraction of its singular values at the kink (at most
#: :data:`CONVERGED_MIN_RELATIVE` of the largest) starts with APG (:func:`lbfgs_then_apg`).
#: Where a few directions sit at the kink, L-BFGS moves the others with its curvature model
#: and leaves APG a short finish: a search path took a quarter less time on the sets of
#: thousands of rows, whose path optima had 1% to 8% of their directions there. Where many do
#: (31% on medical), L-BFGS's smoothed steps fight the kink in each of them, and its stops
#: moved the search's choice (``benchmarks/warm_start_solver.py``).
APG_FIRST_KINK_FRACTION = 0.15

#: Correction pairs kept, at most (scipy's ``maxcor``). The RBF kernel models' Hessians are
#: ill-conditioned, and a long memory of curvature pairs saves iterations there.
#: Chosen by ``benchmarks/step_rules.py --rules lbfgs``.
MEMORY = 100
#: ... and at most this many bytes of pairs (2 vectors of W's size each): the two-loop
#: recursion costs 4 m n flops a call, which for a large W outgrows the oracle call, and the
#: pairs live on the client.
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
    lam, V = np.linalg.eigh(_small_gram(W))
    s = np.sqrt(np.maximum(lam, 0.0))
    top = s[-1]
    if top == 0.0:
        return 0.0, np.zeros_like(W), 0.0
    kept = s > SMOOTH_MIN_RELATIVE * top
    M = (V[:, kept] / s[kept]) @ V[:, kept].T
    return float(s.sum()), (M @ W if wide else W @ M), float(s[0] / top)


def kink_fraction(W: np.ndarray) -> float:
    """The fraction of W's min(d, l) singular values that are at most
    :data:`CONVERGED_MIN_RELATIVE` of the largest (1 for W = 0): the directions where the
    nuclear norm's kink is near. From the Gram matrix's eigenvalues alone (no eigenvectors,
    no gradient: several times cheaper than :func:`nuclear_value_and_grad`).

    Parameters
    ----------
    W : float64 (d, l)
    """
    s = np.sqrt(np.maximum(np.linalg.eigvalsh(_small_gram(W)), 0.0))
    return 1.0 if s[-1] == 0.0 else float(np.mean(s <= CONVERGED_MIN_RELATIVE * s[-1]))


def _small_gram(W: np.ndarray) -> np.ndarray:
    """``W^T W`` (l x l), or ``W W^T`` when W is wide: the smaller Gram matrix."""
    return W @ W.T if W.shape[0] < W.shape[1] else W.T @ W


@dataclass
class LBFGSState:
    """Everything :func:`lbfgs` needs to continue after an accepted step.

    Saved by ``checkpoint=`` and taken by ``state=``: the resumed run makes
    the same oracle calls at the same points as the uninterrupted one.

    Attributes
    ----------
    n_iter : int
        Oracle calls so far (= len(objective_history)).
    x : float64 (d, l)
        The current iterate (the last accepted point).
    f : float
        F(x).
    grad : float64 (d, l)
        grad F(x) (the smooth part's gradient plus lambda3 ``U V^T``).
    S, Y : float64 (m, d * l)
        The correction pairs (steps and gradient changes) in their buffer
        slots: m <= memory pairs, the newest in slot ``newest``, the older
        ones before it cyclically.
    SY, YY : float64 (m, m)
        Their inner products by slot (:class:`Pairs`).
    newest : int
        Slot of the newest pair (-1: none).
    step : float
        The first trial step of the next line search.
    reference : float
        The gradient test's scale, ||grad f(0)||.
    best_x : float64 (d, l)
        The point of the lowest objective seen (the result if the run stopped here).
    best_objective, best_smallest : float
        Its objective and smallest relative singular value.
    objective_history, seconds : list of float
        F at each oracle call and the wall time since the start (on resume the
        clock continues from ``seconds[-1]``).
    n_oracle_calls : int
    products : float64 (2, m) or None
        ``s_i . grad`` and ``y_i . grad`` by slot, the next direction's products
        (:meth:`Pairs.products`); None (a state saved without them): computed
        again on resume.
    """

    n_iter: int
    x: np.ndarray
    f: float
    grad: np.ndarray
    S: np.ndarray
    Y: np.ndarray
    SY: np.ndarray
    YY: np.ndarray
    newest: int
    step: float
    reference: float
    best_x: np.ndarray
    best_objective: float
    best_smallest: float
    objective_history: list
    seconds: list
    n_oracle_calls: int
    products: np.ndarray | None = None


class InterceptVariables(NamedTuple):
    """L-BFGS's variables for a W whose last row is an unpenalized intercept: the features
    centred and the intercept scaled to their curvature.

    The intercept's column of ones has squared norm n, a feature's column (tf-idf, max-abs
    scaled) a small fraction of that, and the two overlap in the features' means: along the
    intercept the objective is far steeper than along any feature, and steep in a direction
    that mixes both. L-BFGS's starting model of the inverse Hessian is one number for every
    direction, so it first spends iterations learning that one direction. Under the linear
    change of variables ``W = T V`` (the feature rows equal, the intercept row
    ``b = scale * v - V_f^T mean``, v V's last row) the scores are
    ``(X - 1 mean^T) V_f + scale 1 v^T``:
    centred features, whose columns no longer share the constant direction, and an
    intercept column whose curvature is the features' mean curvature. The ridge and nuclear-norm
    terms see the feature rows, which the change leaves as they are; the objective is the
    same function, so L-BFGS ends at the same minimizer (as scikit-learn's linear models
    centre dense data to fit their intercept).

    Parameters
    ----------
    mean : float64 (d - 1,)
        The features' means over the training rows, weighted by the rows' curvature.
    scale : float
        sqrt((mean centred curvature of the varying features + ridge) / the intercept's
        curvature): the curvatures are the diagonal of the objective's Hessian bound
        ``X^T diag(c) X`` (c: the rows' curvature weights, :func:`dmlr.objectives.rbrl.curvature_weights`),
        the ridge adds to the features' only.
        Features that are constant (empty ones too) are left out of the mean, so that a
        model fitted without its unused columns gets the same variables.
    """

    mean: np.ndarray
    scale: float

    @classmethod
    def from_moments(cls, sums, squares, weight: float, ridge: float = 0.0) -> InterceptVariables | None:
        """From the feature columns' sums and sums of squares weighted by the rows' curvature
        (``sum_i c_i x_ij``, ``sum_i c_i x_ij^2``), the rows' total curvature
        ``weight = sum_i c_i`` and the features' ridge weight (None where no feature varies:
        there is nothing to centre or scale against)."""
        mean = np.asarray(sums, dtype=np.float64) / weight
        centred = np.maximum(np.asarray(squares, dtype=np.float64) - weight * mean**2, 0.0)
        varying = centred[centred > 0.0]
        scale = math.sqrt((float(varying.mean()) + ridge) / weight) if varying.size else 0.0
        return cls(mean, scale) if scale > 0.0 and math.isfinite(scale) else None

    def to_model(self, V: np.ndarray) -> np.ndarray:
        """W = T V: (..., d, l) to (..., d, l) (one point or a stack of them), a new array."""
        W = np.array(V, dtype=np.float64)
        W[..., -1, :] = self.scale * V[..., -1, :] - self.mean @ V[..., :-1, :]
        return W

    def to_solver(self, W: np.ndarray) -> np.ndarray:
        """V = T^-1 W, a new array."""
        V = np.array(W, dtype=np.float64)
        V[-1] = (W[-1] + self.mean @ W[:-1]) / self.scale
        return V

    def gradient(self, G: np.ndarray) -> np.ndarray:
        """The gradient in V of a function of W = T V, from its gradient G in W: T^T G, a new
        array (G may be shared with a cache)."""
        G = np.ascontiguousarray(G, dtype=np.float64)
        return intercept_gradient(G, np.asarray(self.mean, dtype=np.float64), float(self.scale), np.empty_like(G))

    def oracle(self, oracle: Oracle) -> Oracle:
        """``oracle`` (of f in W; an :class:`~dmlr.solvers.apg.Oracle` or a plain function) as an
        oracle of f in V."""
        return _OracleInV(oracle if isinstance(oracle, Oracle) else FunctionOracle(oracle), self)


class _OracleInV(Oracle):
    """An :class:`~dmlr.solvers.apg.Oracle` of f(T V), from one of f(W) (:class:`InterceptVariables`)."""

    def __init__(self, oracle: Oracle, variables: InterceptVariables):
        self.inner, self.variables = oracle, variables

    def __call__(self, points, grad_point):
        return self.submit(points, grad_point)()

    def submit(self, points, grad_point):
        wait = self.inner.submit(self.variables.to_model(points), grad_point)

        def result():
            values, grad = wait()
            return values, None if grad is None else self.variables.gradient(grad)

        return result


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
    checkpoint=None,
    state: LBFGSState | None = None,
) -> SolverResult:
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
    checkpoint : (int, callable), optional
        ``(every, fn)``: ``fn(state)`` with the :class:`LBFGSState` at the
        first accepted step after every ``every`` oracle calls. ``fn`` must
        not modify the arrays.
    state : LBFGSState, optional
        Continue from this state (``x0`` then only gives the shape). The
        other arguments must be those of the interrupted run for the same
        iterates, except ``max_iter``, which must exceed ``state.n_iter``.

    Returns
    -------
    dmlr.solvers.result.SolverResult
        ``x`` the best point seen, ``objective_history`` F at each oracle call
        (not monotone: line-search trials count), ``n_iter`` and
        ``n_oracle_calls`` the oracle calls, ``converged`` whether the test
        stopped the run at a point where the nuclear norm is smooth (False:
        max_iter, a failed line search, or a rank-deficient point; the caller
        finishes with the proximal method).
    """
    if not isinstance(oracle, Oracle):
        oracle = FunctionOracle(oracle)
    if checkpoint is not None:
        every, save_state = checkpoint
        if not (isinstance(every, (int, np.integer)) and every >= 1 and callable(save_state)):
            raise ValueError(f"checkpoint must be (every >= 1, callable), got {checkpoint!r}")
    shape = x0.shape
    memory = memory_pairs(x0.size) if memory is None else int(memory)
    if state is None:
        result = SolverResult(x=np.array(x0, dtype=np.float64))
        best = [math.inf, 0.0]  # objective, smallest relative singular value at the best point
        start = time.perf_counter()
    else:
        _check_state(state, shape, memory, max_iter)
        result = SolverResult(
            x=state.best_x,
            objective_history=[float(v) for v in state.objective_history],
            n_iter=int(state.n_iter),
            seconds=[float(v) for v in state.seconds],
            n_oracle_calls=int(state.n_oracle_calls),
        )
        best = [float(state.best_objective), float(state.best_smallest)]
        start = time.perf_counter() - (result.seconds[-1] if result.seconds else 0.0)

    latest = [1.0]  # the smallest relative singular value at the latest oracle call's point

    def value_and_grad(w):
        W = w.reshape(shape)
        pending = oracle.submit(W[None], 0)  # the blocks compute f while the nuclear term is computed here
        # no nuclear term, no kink: W's small singular values are no reason to hand over to APG
        norm, G, smallest = nuclear_value_and_grad(W[rows]) if nuclear > 0 else (0.0, None, 1.0)
        latest[0] = smallest
        values, g = pending()
        grad = np.array(g, dtype=np.float64)
        if G is not None:
            add_scaled(grad[rows], nuclear, G)
        obj = float(values[0]) + nuclear * norm
        result.n_oracle_calls += 1
        result.objective_history.append(obj)
        result.seconds.append(time.perf_counter() - start)
        result.n_iter = len(result.objective_history)
        if obj < best[0]:
            best[:] = [obj, smallest]
            result.x = W  # not a copy: the iterations never write into a point they evaluated
        if callback is not None and callback(result.n_iter, obj, result.seconds[-1]):
            raise StopIteration
        return obj, grad.ravel()

    def snapshot(x, f, g, pairs, step, reference):
        return LBFGSState(
            n_iter=result.n_iter,
            x=x.reshape(shape),
            f=f,
            grad=g.reshape(shape),
            S=pairs.S[: pairs.count].copy(),
            Y=pairs.Y[: pairs.count].copy(),
            SY=pairs.SY[: pairs.count, : pairs.count].copy(),
            YY=pairs.YY[: pairs.count, : pairs.count].copy(),
            newest=pairs.newest,
            step=step,
            reference=reference,
            best_x=result.x,
            best_objective=best[0],
            best_smallest=best[1],
            objective_history=list(result.objective_history),
            seconds=list(result.seconds),
            n_oracle_calls=result.n_oracle_calls,
            products=np.stack(pairs.products(g)),
        )

    try:
        if state is None:
            reference = None  # ||grad f(0)||; a cold start's first call gives it (grad F(0) = grad f(0))
            if gradient_tol is not None and np.any(x0):
                _, g0 = oracle(np.zeros((1, *shape)), 0)
                reference = float(np.linalg.norm(g0))
                result.n_oracle_calls += 1
            x = result.x.ravel()
            f, g = value_and_grad(x)
            if reference is None:
                reference = float(np.linalg.norm(g))
            pairs = Pairs.empty(memory, x.size)
            step = 1.0 / max(float(np.linalg.norm(g)), 1e-300)  # first step: unit length along -g
        else:
            x, f, g = state.x.ravel().copy(), float(state.f), state.grad.ravel().copy()
            pairs = Pairs.empty(memory, x.size)
            count = pairs.count = len(state.S)
            pairs.S[:count], pairs.Y[:count] = state.S, state.Y
            pairs.SY[:count, :count], pairs.YY[:count, :count] = state.SY, state.YY
            pairs.newest = int(state.newest)
            if state.products is not None:  # the uninterrupted run's, not computed again
                pairs.Sg[:count], pairs.Yg[:count] = state.products
                pairs.products_of = g
            step, reference = float(state.step), float(state.reference)
        save = None
        if checkpoint is not None:
            saved_at = [result.n_iter]

            def save(*args):
                if result.n_iter - saved_at[0] >= every:
                    saved_at[0] = result.n_iter
                    save_state(snapshot(*args))

        def at_kink():
            return nuclear > 0 and latest[0] <= CONVERGED_MIN_RELATIVE

        _iterate(value_and_grad, x, f, g, pairs, step, reference, result, tol, gradient_tol, max_iter, save, at_kink)
    except StopIteration:  # the callback asked to stop
        pass
    if best[1] <= CONVERGED_MIN_RELATIVE:  # a direction near zero: not a smooth optimum
        result.converged = False
    return result


def _check_state(state: LBFGSState, shape, memory: int, max_iter: int) -> None:
    """Check a saved state against this run."""
    check_saved_state("L-BFGS", state, ("x", "grad", "best_x"), shape, max_iter)
    count = len(state.S)
    size = math.prod(shape)
    if (
        count > memory
        or np.shape(state.S) != (count, size)
        or np.shape(state.Y) != (count, size)
        or np.shape(state.SY) != (count, count)
        or np.shape(state.YY) != (count, count)
        or (state.products is not None and np.shape(state.products) != (2, count))
        or not (-1 <= state.newest < count and (state.newest == count - 1 or count == memory))
    ):
        raise ValueError(
            f"L-BFGS state holds {count} pairs of shapes {np.shape(state.S)}, {np.shape(state.Y)}, "
            f"products {np.shape(state.products)}, newest in slot {state.newest}; "
            f"this run keeps at most {memory} pairs of {size} floats"
        )


#: Armijo's sufficient-decrease constant and the backtracking factor of the line search.
ARMIJO = 1e-4
BACKTRACK = 0.5
#: Backtracking steps before the line search gives up (a kink of the nuclear norm, or
#: rounding at the optimum).
MAX_BACKTRACKS = 30


class Pairs:
    """The correction pairs in circular buffers, with their inner products (the compact form).

    Slots fill from 0; after :meth:`reset` or until ``memory`` pairs are held,
    the pairs are slots ``0 .. count - 1`` (a contiguous view for BLAS).
    ``SY[i, j] = s_i . y_j`` for pair i not newer than pair j (the
    compact form needs no other) and ``YY[i, j] = y_i . y_j``, by slot.
    ``Sg`` and ``Yg`` hold ``s_i . g`` and ``y_i . g``, by slot, for the gradient
    ``products_of`` (the latest :meth:`direction`'s ``g`` or :meth:`push`'s ``g_new``;
    None: for none).
    """

    def __init__(self, S, Y, SY, YY, newest, count):
        self.S, self.Y, self.SY, self.YY, self.newest, self.count = S, Y, SY, YY, newest, count
        self.Sg, self.Yg = np.zeros(len(S)), np.zeros(len(S))
        self.products_of = None

    @classmethod
    def empty(cls, memory: int, size: int) -> Pairs:
        """No pair yet, room for ``memory`` pairs of ``size`` floats."""
        S, Y = np.empty((memory, size)), np.empty((memory, size))
        return cls(S, Y, np.zeros((memory, memory)), np.zeros((memory, memory)), -1, 0)

    def reset(self) -> None:
        """Forget every pair (H = I)."""
        self.newest, self.count, self.products_of = -1, 0, None

    def push(self, x_new: np.ndarray, x: np.ndarray, g_new: np.ndarray, g: np.ndarray) -> bool:
        """Keep the pair ``s = x_new - x``, ``y = g_new - g`` (overwriting the oldest when full)
        and its inner products with the others, if it has curvature (``s . y > 0``, relative
        to rounding); returns whether it was kept.

        The pair is written into its slot directly: for a wide model, vectors of W's size
        made and copied each iteration cost more than the products. The next direction's
        products with ``g_new`` follow from those with ``g`` (the latest direction's):
        ``s_i . g_new = s_i . g + s_i . y``, the second term being the new column of ``SY``
        (likewise for ``Y``), which saves that direction a pass over every pair.
        """
        sy, ss, yy, sg, yg = pair_products(x_new, x, g_new, g)
        if not sy > 1e-12 * math.sqrt(ss) * math.sqrt(yy):
            self.products_of = None
            return False
        memory = len(self.S)
        self.newest = (self.newest + 1) % memory
        self.count = min(self.count + 1, memory)
        k, c = self.newest, self.count
        np.subtract(x_new, x, out=self.S[k])
        y_k = np.subtract(g_new, g, out=self.Y[k])
        self.SY[:c, k] = self.S[:c] @ y_k
        self.YY[:c, k] = self.YY[k, :c] = self.Y[:c] @ y_k
        if self.products_of is g or c == 1:  # the others' products with g are known (or there are none)
            self.Sg[:c] += self.SY[:c, k]
            self.Yg[:c] += self.YY[:c, k]
            self.Sg[k], self.Yg[k] = sg, yg
            self.products_of = g_new
        else:
            self.products_of = None
        return True

    def products(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(S g, Y g)``, float64 (count,) each by slot: from :meth:`push` when ``g`` is its
        ``g_new``, else by BLAS."""
        c = self.count
        if self.products_of is not g:
            np.matmul(self.S[:c], g, out=self.Sg[:c])
            np.matmul(self.Y[:c], g, out=self.Yg[:c])
            self.products_of = g
        return self.Sg[:c], self.Yg[:c]

    def direction(self, g: np.ndarray) -> np.ndarray:
        """-H g for the L-BFGS inverse-Hessian model, H0 = (s.y / y.y) I from the newest pair.

        The compact representation (Byrd, Nocedal & Schnabel 1994, eq. 3.13)::

            H = gamma I + [S  gamma Y] [[R^-T (D + gamma Y^T Y) R^-1, -R^-T], [-R^-1, 0]] [S^T; gamma Y^T]

        with R the upper triangle of S^T Y (pairs oldest first) and D its
        diagonal: the same H as the two-loop recursion (Nocedal & Wright,
        Algorithm 7.4), from 4 passes of BLAS matrix-vector products over the
        pairs, where the recursion's 4 passes are dependent vector updates
        (several times slower for large pairs, which do not fit in cache); 2
        passes when :meth:`push` has the products with ``g`` already. BLAS reads
        each pair contiguously; a compiled pass that combined the pairs element
        by element would stream all of them at once, which many pairs make slow.
        """
        c = self.count
        if c == 0:
            return -g
        order = (self.newest - c + 1 + np.arange(c)) % len(self.S)  # slots, oldest first
        S, Y = self.S[:c], self.Y[:c]
        ps, us, gamma = compact_coefficients(*self.products(g), self.SY, self.YY, order)
        d = np.multiply(g, -gamma)  # summed in place: each temporary of W's size costs a pass over memory
        add_combination(d, -1.0, S, ps)
        add_combination(d, gamma, Y, us)
        return d


def _iterate(
    value_and_grad, x, f, g, pairs, step, reference, result, tol, gradient_tol, max_iter, save, at_kink
) -> None:
    """The L-BFGS iterations from x (F(x) = f, gradient g); sets ``result.converged`` when the
    stopping test holds. ``pairs``: :class:`Pairs`; ``save``: called with the loop's variables
    before each line search; ``at_kink()``: whether the accepted point has directions at the
    nuclear norm's kink.

    When the objective's relative change holds the test but the gradient's does not, and the
    point has directions at the kink, the run returns unconverged and the caller's proximal
    method finishes (:func:`lbfgs_then_apg`): the smoothed norm's gradient keeps a unit
    component along every such direction, so the gradient test cannot hold there, and the
    quasi-Newton steps only creep towards the zero singular values the prox sets at once (a
    cold start whose optimum is of low rank ran to ``max_iter``)."""
    while result.n_iter < max_iter:
        if save is not None:
            save(x, f, g, pairs, step, reference)
        d = pairs.direction(g)
        slope = float(g @ d)
        if slope >= 0.0:  # not a descent direction (rounding): restart from the gradient
            pairs.reset()
            d, slope = -g, -float(g @ g)
        t = step
        for _ in range(MAX_BACKTRACKS):
            # x + t d, a new array: value_and_grad keeps it as the best point
            if t == 1.0:  # the usual step, in one pass (the same bits as d * 1 + x)
                x_new = np.add(x, d)
            else:
                x_new = np.multiply(d, t)
                x_new += x
            f_new, g_new = value_and_grad(x_new)
            if f_new <= f + ARMIJO * t * slope or result.n_iter >= max_iter:
                break
            t *= BACKTRACK
        else:
            return  # no decrease along a descent direction: a kink, handed to the caller
        if f_new > f + ARMIJO * t * slope:
            return  # max_iter inside the line search
        pairs.push(x_new, x, g_new, g)
        changed = relative_change(f_new, f) <= tol
        x, f, g, step = x_new, f_new, g_new, 1.0
        if changed and (gradient_tol is None or float(np.linalg.norm(g)) <= gradient_tol * reference):
            result.converged = True
            return
        if changed and at_kink():
            return


class Handover(NamedTuple):
    """The state of a run of :func:`lbfgs_then_apg` that L-BFGS handed to APG (a rank-deficient
    optimum): what L-BFGS did, and the APG state after it."""

    before: SolverResult
    state: APGState

    @property
    def n_iter(self) -> int:
        """Iterations of the whole run so far (L-BFGS's oracle calls and APG's iterations)."""
        return self.before.n_iter + self.state.n_iter


def lbfgs_then_apg(
    oracle,
    prox,
    x0: np.ndarray,
    *,
    nuclear: float,
    rows,
    paper_lipschitz,
    tol: float,
    gradient_tol=None,
    max_iter: int = 1000,
    callback=None,
    checkpoint=None,
    state=None,
    variables: InterceptVariables | None = None,
) -> SolverResult:
    """:func:`lbfgs` on the smooth form of the objective, finished by the adaptive APG from its
    last point when the optimum is not smooth (a rank-deficient W) or the line search fails;
    the histories are joined.

    A warm start with many directions at the kink (more than :data:`APG_FIRST_KINK_FRACTION`
    of them; a path's previous optimum, which APG finished) starts with APG at once: its
    neighbour's optimum is likely one too, where L-BFGS would make little progress before it
    handed over. With a few there, L-BFGS runs first, as from any point.

    Parameters
    ----------
    oracle, prox
        As :func:`~dmlr.solvers.apg.apg`'s (``prox`` used by the APG part only).
    x0 : float64 (d, l)
    nuclear, rows
        As :func:`lbfgs`'s.
    paper_lipschitz : callable
        ``() -> float``: the paper's Lipschitz bound (eqs. 22-23), asked for only when APG runs
        (its start is that over 1024, adaptive; its relative-change test calibrated to it).
    tol, gradient_tol, max_iter
        As :func:`lbfgs`'s and :func:`~dmlr.solvers.apg.apg`'s; ``max_iter`` counts both parts.
    callback : callable, optional
        ``callback(t, objective, seconds) -> stop``, numbered and timed across both parts.
    checkpoint : (every, fn), optional
        ``fn`` gets an :class:`LBFGSState` during L-BFGS, a :class:`Handover` during APG.
    state : LBFGSState or Handover, optional
        Resume from it.
    variables : InterceptVariables, optional
        L-BFGS runs in these variables (its state too; ``rows`` must leave the last row
        out), APG in W's; the result is in W's.
    """
    stopped = []

    def report(t, obj, seconds):
        stop = callback(t, obj, seconds) if callback is not None else False
        if stop:
            stopped.append(t)
        return stop

    if isinstance(state, Handover):
        res, apg_state = state
    elif state is None and nuclear > 0 and np.any(x0) and kink_fraction(x0[rows]) > APG_FIRST_KINK_FRACTION:
        res, apg_state = SolverResult(x=x0), None
    else:
        if variables is not None and rows != slice(0, -1):
            raise ValueError(f"InterceptVariables need the last row unpenalized (rows slice(0, -1)), got {rows}")
        res = lbfgs(
            oracle if variables is None else variables.oracle(oracle),
            x0 if variables is None else variables.to_solver(x0),
            nuclear=float(nuclear),
            rows=rows,
            tol=tol,
            gradient_tol=gradient_tol,
            max_iter=max_iter,
            callback=report,
            checkpoint=checkpoint,
            state=state,
        )
        apg_state = None
        if variables is not None:
            res.x = variables.to_model(res.x)
        if res.converged or stopped or res.n_iter >= max_iter:
            return res
    every, save = checkpoint if checkpoint is not None else (None, None)
    L_paper = paper_lipschitz()
    offset = res.seconds[-1] if res.seconds else 0.0  # APG's clock starts at 0: continue L-BFGS's
    rest = apg(
        oracle,
        prox,
        res.x if apg_state is None else apg_state.W,
        lipschitz=L_paper / 1024.0,
        max_iter=max_iter - res.n_iter,
        tol=tol,
        callback=None
        if callback is None
        else (lambda t, obj, seconds: callback(res.n_iter + t, obj, offset + seconds)),
        backtracking=True,
        restart=True,
        gradient_tol=gradient_tol,
        state=apg_state,
        checkpoint=None if save is None else (every, lambda s: save(Handover(res, s))),
        adaptive=True,
        tol_lipschitz=L_paper,
    )
    return SolverResult(
        x=rest.x,
        objective_history=res.objective_history + rest.objective_history,
        n_iter=res.n_iter + rest.n_iter,
        converged=rest.converged,
        seconds=res.seconds + [offset + s for s in rest.seconds],
        lipschitz=rest.lipschitz,
        n_backtracks=rest.n_backtracks,
        n_restarts=rest.n_restarts,
        n_oracle_calls=res.n_oracle_calls + rest.n_oracle_calls,
    )


def scipy_lbfgs(fun, x0: np.ndarray, *, max_iter: int = 1000, tol: float = 1e-8, stop=None) -> SolverResult:
    """Minimize a smooth ``fun(M) -> (value, grad)`` by scipy's L-BFGS-B (no prox, no bounds).

    ``tol`` is scipy's ``gtol`` (projected gradient, max norm); the history
    holds the objective after each iteration. ``stop(M, value, grad) -> bool``,
    if given, is asked after every iteration and ends the run when it says
    True (``converged`` is then True); it sees the value and gradient already
    computed at the iterate.
    """
    from scipy.optimize import minimize
    from threadpoolctl import threadpool_info, threadpool_limits

    shape = x0.shape
    history = []
    last = {}  # the latest evaluation: the accepted iterate is the line search's last point
    stopped = []
    # L-BFGS-B's own BLAS calls are on vectors of length d*K: threads there only
    # cost synchronisation (much slower on a loaded machine), so they run single-threaded
    # and the objective evaluations get the original thread counts back.
    outer_limits = {pool["internal_api"]: pool["num_threads"] for pool in threadpool_info()}

    def f(v):
        with threadpool_limits(limits=outer_limits):
            val, g = fun(v.reshape(shape))
        last.update(v=v.copy(), val=val, g=g)
        return val, g.ravel()

    def cb(intermediate_result):
        history.append(float(intermediate_result.fun))
        if stop is not None:
            x = intermediate_result.x
            if "v" not in last or not np.array_equal(last["v"], x):
                f(x)
            if stop(x.reshape(shape), last["val"], last["g"]):
                stopped.append(True)
                raise StopIteration

    # ``ftol`` = 0: stop on the objective only when a step no longer reduces it,
    # so that ``tol`` decides. With ftol tied to tol the stop depends on the BLAS's
    # rounding: near the optimum of a problem with large curvature the objective's
    # changes fall below ftol before the projected gradient reaches ``tol``, and
    # L-BFGS-B stops short of it on some builds (tests/test_ranksvm.py's L-BFGS
    # reference asks for 1e-10).
    ftol = 0.0
    with threadpool_limits(limits=1):
        res = minimize(
            f,
            x0.ravel(),
            jac=True,
            method="L-BFGS-B",
            callback=cb,
            options={"maxiter": int(max_iter), "gtol": float(tol), "ftol": ftol},
        )
    return SolverResult(
        x=res.x.reshape(shape),
        objective_history=history,
        n_iter=int(res.nit),
        converged=bool(res.success) or bool(stopped),
        n_oracle_calls=int(res.nfev),
        message=str(res.message),
    )
