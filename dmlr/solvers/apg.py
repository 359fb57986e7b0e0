"""Accelerated proximal gradient (FISTA), as RBRL's Algorithm 1, with faster step rules.

The solver sees two things only:

* ``oracle(points, grad_point) -> (values, grad)``: the smooth part f at a
  stack of points ``(k, d, l)`` and its gradient at ``points[grad_point]``
  (``grad_point=-1``: no gradient). Where the data live (numpy in this
  process, or row chunks on Dask workers) is the oracle's business.
* ``prox(v, scaling) -> (x, g(x))``: the proximal step of the nonsmooth part g
  and g's value at the result.

Iteration (eqs. 25-27), with W_0 = G_1 = x0 and b_1 = 1:

    W_t     = prox_{g/L}(G_t - grad f(G_t) / L)
    b_{t+1} = (1 + sqrt(1 + 4 b_t^2)) / 2
    G_{t+1} = W_t + (b_t - 1)/b_{t+1} (W_t - W_{t-1})
    obj(t)  = f(W_t) + g(W_t)          -- at the proximal point, as the reference

and stop when ``|obj(t) - obj(t-1)| / |obj(t-1)| <= tol`` (t >= 2), returning
W_t, the point of the last objective value (the reference's stopping rule).

Latency: f(W_t) is needed only for the stopping test, and G_{t+1} does not
depend on it, so f(W_t) and grad f(G_{t+1}) are requested together in one
oracle call (the speculative call, :meth:`Oracle.extrapolated`): one round
trip per iteration, plus one at the end.

Beyond the paper, :func:`apg` offers backtracking, momentum restart, an
adaptive L and two more stopping tests, all optional (its Notes). A run
can be checkpointed and resumed bit for bit (:class:`APGState`;
:mod:`dmlr.solvers.checkpoint` stores it).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from dmlr.solvers.result import SolverResult


class Oracle:
    """The smooth part f of the problem, as :func:`apg` asks for it.

    Subclasses define ``__call__``; :meth:`extrapolated` may be overridden
    by an oracle that computes the same numbers another way.

    :func:`apg`'s speculative call is made through :meth:`extrapolated`
    ``(W_t, W_{t-1}, m, G_{t+1}) -> (values, grad)``: f at [W_t, G_{t+1}] and
    grad f(G_{t+1}), G_{t+1} = W_t + m (W_t - W_{t-1}) formed by that very
    expression. By default it is one ``__call__`` on the stacked points; an oracle whose data
    live elsewhere may override it to keep W_{t-1} (and its products) where the
    data are (:class:`dmlr.distributed.extrapolation.ExtrapolationCache`). A
    plain function is an oracle with the default.
    """

    def __call__(self, points: np.ndarray, grad_point: int):
        """f at ``points`` (k, d, l) as float64 (k,), and grad f (d, l) at ``points[grad_point]`` (None for -1)."""
        raise NotImplementedError

    def submit(self, points: np.ndarray, grad_point: int):
        """``self(points, grad_point)``, started: returns a callable that gives its result.

        A solver calls it where it has work of its own that needs only the
        point (L-BFGS's nuclear-norm term): an oracle whose data live
        elsewhere returns once the call is on its way, and that work runs
        while the blocks compute. By default the call is made here and now.
        """
        result = self(points, grad_point)
        return lambda: result

    def extrapolated(self, W: np.ndarray, W_prev: np.ndarray, momentum: float, G: np.ndarray):
        """f at [W, G] and grad f(G), where G = W + momentum (W - W_prev) (apg's G_{t+1}).

        W, W_prev, G : float64 (d, l). Returns (values (2,), grad (d, l)).
        """
        return self(np.stack([W, G]), 1)


class FunctionOracle(Oracle):
    """A plain ``fn(points, grad_point)`` as an :class:`Oracle`."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, points, grad_point):
        return self.fn(points, grad_point)


#: :func:`apg`'s result: the solvers' one result type.
APGResult = SolverResult


@dataclass
class APGState:
    """Everything :func:`apg` needs to continue after iteration ``n_iter``.

    The next iteration computes W_{t+1} = prox(G - grad / L) and the momentum
    from W (= W_t) and W_{t+1}; W_{t-1} is not needed, because G = G_{t+1}
    (which was built from it) is kept as computed.

    Checkpoints and resuming (the solver knows no storage; see
    :mod:`dmlr.solvers.checkpoint` for the Zarr side): after iteration t the run is
    fully described by this state -- W_t, the next extrapolation point
    G_{t+1} with f(G_{t+1}) and grad f(G_{t+1}) (already computed by the
    speculative oracle call), b_{t+1}, L, the history, the counters and the
    ``gradient_tol`` reference. ``checkpoint=(every, fn)`` hands that state to
    ``fn`` after every ``every``-th iteration that the run goes on from, and
    ``apg(..., state=s)`` continues from it: the resumed run computes exactly
    the numbers the uninterrupted run computes (no oracle call is repeated, so
    nothing depends on how the oracle sums), hence the same iterates bit for bit
    when the oracle is deterministic.

    Attributes
    ----------
    n_iter : int
        t, the number of objective values so far (= len(objective_history)).
    W : ndarray (d, l)
        W_t, the last proximal point (the result if the run stopped here).
    G : ndarray (d, l)
        G_{t+1}, the next extrapolation point.
    grad : ndarray (d, l)
        grad f(G_{t+1}).
    f_G : float
        f(G_{t+1}) (the backtracking test needs it).
    b : float
        b_{t+1}, the momentum sequence.
    lipschitz : float
        L (changes under backtracking only).
    objective_history, seconds : list of float
        obj(1..t) and the wall time since the start at each (on resume the
        clock continues from ``seconds[-1]``).
    n_backtracks, n_restarts, n_oracle_calls : int
    reference_mapping : float or None
        ||L (G_1 - W_1)||, or its value at the origin for a warm start: the
        reference of the ``gradient_tol`` test.
    """

    n_iter: int
    W: np.ndarray
    G: np.ndarray
    grad: np.ndarray
    f_G: float
    b: float
    lipschitz: float
    objective_history: list
    seconds: list
    n_backtracks: int = 0
    n_restarts: int = 0
    n_oracle_calls: int = 0
    reference_mapping: float | None = None


def relative_change(new: float, old: float) -> float:
    """``|new - old| / |old|`` (inf when old is 0 and new differs)."""
    if old == 0.0:
        return 0.0 if new == 0.0 else math.inf
    return abs(new - old) / abs(old)


def sufficient_decrease(f_new: float, f_at: float, grad: np.ndarray, step: np.ndarray, lipschitz: float) -> bool:
    """Beck & Teboulle's test f(x+) <= f(y) + <grad f(y), x+ - y> + L/2 ||x+ - y||^2.

    A relative slack of 1e-12 absorbs the rounding of sums over many rows.
    """
    return _sufficient_decrease(f_new, f_at, float(np.vdot(grad, step)), float(np.vdot(step, step)), lipschitz)


def _sufficient_decrease(f_new: float, f_at: float, grad_step: float, step_step: float, lipschitz: float) -> bool:
    """:func:`sufficient_decrease` from <grad f(y), x+ - y> and ||x+ - y||^2."""
    bound = f_at + grad_step + 0.5 * lipschitz * step_step
    return f_new <= bound + 1e-12 * max(abs(bound), abs(f_new))


#: ``adaptive=True``: L takes the values 2^(j / ADAPTIVE_LEVELS), j an integer ...
ADAPTIVE_LEVELS = 8
#: ... falls by at most one level an accepted step, and not below this multiple of the
#: curvature the step met (:func:`local_curvature`).
ADAPTIVE_MARGIN = 1.5
#: ``tol_lipschitz``: the relative change is averaged over this many iterations.
STOP_WINDOW = 10


def _level_floor(x: float) -> float:
    """The largest 2^(j / ADAPTIVE_LEVELS) <= x (0 for x <= 0)."""
    if not x > 0:
        return 0.0
    return 2.0 ** (math.floor(ADAPTIVE_LEVELS * math.log2(x)) / ADAPTIVE_LEVELS)


def _level_ceil(x: float) -> float:
    """The smallest 2^(j / ADAPTIVE_LEVELS) >= x."""
    return 2.0 ** (math.ceil(ADAPTIVE_LEVELS * math.log2(x)) / ADAPTIVE_LEVELS)


def _level_step(L: float, k: int) -> float:
    """The level k levels above (below, k < 0) the level L."""
    return 2.0 ** ((round(ADAPTIVE_LEVELS * math.log2(L)) + k) / ADAPTIVE_LEVELS)


def local_curvature(f_new: float, f_at: float, grad: np.ndarray, step: np.ndarray) -> float:
    """2 (f(x+) - f(y) - <grad f(y), x+ - y>) / ||x+ - y||^2, the smallest L the step's test accepts.

    The curvature of f along the step x+ - y, measured from values the
    speculative oracle call already returned (0 for a zero step).
    """
    return _local_curvature(f_new, f_at, float(np.vdot(grad, step)), float(np.vdot(step, step)))


def _local_curvature(f_new: float, f_at: float, grad_step: float, step_step: float) -> float:
    """:func:`local_curvature` from <grad f(y), x+ - y> and ||x+ - y||^2."""
    if step_step == 0.0:
        return 0.0
    return 2.0 * (f_new - f_at - grad_step) / step_step


def apg(
    oracle,
    prox,
    x0: np.ndarray,
    *,
    lipschitz: float,
    max_iter: int = 2000,
    tol: float = 1e-6,
    callback=None,
    backtracking: bool = False,
    restart: bool = False,
    eta: float = 2.0,
    gradient_tol: float | None = None,
    checkpoint=None,
    state: APGState | None = None,
    adaptive: bool = False,
    tol_lipschitz: float | None = None,
) -> SolverResult:
    """Minimize f + g by FISTA.

    Parameters
    ----------
    oracle : Oracle or callable
        ``oracle(points (k, d, l), grad_point) -> (values (k,), grad (d, l) or None)``;
        the speculative call goes through ``oracle.extrapolated`` (:class:`Oracle`).
    prox : callable
        ``prox(v, scaling) -> (x, g(x))``.
    x0 : ndarray (d, l)
        Starting point (the paper: zeros).
    lipschitz : float
        Lipschitz constant of grad f, whose inverse is the step (the
        starting value under backtracking).
    max_iter : int
        Maximum number of iterations (objective values).
    tol : float
        Relative objective change that stops the run.
    callback : callable, optional
        ``callback(t, objective, seconds)`` after each objective value; a
        truthy return stops the run.
    backtracking : bool
        Check sufficient decrease and raise L by ``eta`` when it fails.
    restart : bool
        Adaptive (gradient-mapping) momentum restart.
    eta : float
        Backtracking factor (> 1).
    gradient_tol : float, optional
        Also require ||L (G_t - W_t)||_F <= gradient_tol * (its value at the
        origin) before the relative-change test may stop the run.
    checkpoint : (int, callable), optional
        ``(every, fn)``: ``fn(state)`` with the :class:`APGState` after every
        iteration t with ``t % every == 0`` that the run goes on from (not
        after the last one). ``fn`` must not modify the arrays.
    state : APGState, optional
        Continue from this state (``x0`` then only gives the shape and
        ``lipschitz`` is ignored: L is the state's). The other arguments
        must be those of the interrupted run for the same iterates, except
        ``max_iter``, which must exceed ``state.n_iter``.
    adaptive : bool
        Let L fall to the local curvature (needs ``backtracking``; see Notes).
    tol_lipschitz : float, optional
        Stop on a mean relative change over the last ``STOP_WINDOW``
        iterations of ``tol * (tol_lipschitz / L) ** 0.25`` instead of one
        step's change of ``tol``: the stop near the accuracy of a run with
        step ``1 / tol_lipschitz`` (see Notes).

    Returns
    -------
    dmlr.solvers.result.SolverResult

    Notes
    -----
    Beyond the paper (all optional; with none of them the iterates are exactly
    Algorithm 1's):

    * ``backtracking=True``: the sufficient-decrease test of FISTA with
      backtracking (Beck & Teboulle 2009, Sec. 4),
      f(W_t) <= f(G_t) + <grad f(G_t), W_t - G_t> + L/2 ||W_t - G_t||^2,
      with L multiplied by ``eta`` until it holds. Everything it needs comes
      with the speculative oracle call (f(G_t) is the value at the stacked
      gradient point), so an accepted step costs nothing extra and a rejected
      one costs one round trip.
    * ``restart=True``: the gradient-mapping adaptive restart of O'Donoghue &
      Candes (2015): when <G_t - W_t, W_t - W_{t-1}> > 0 the momentum is reset
      (b = 1). The test uses points known before the oracle call, so it is free.
    * ``adaptive=True`` (with ``backtracking``): L also falls. The bound behind
      a fixed L is a worst case over all directions and all points; the
      curvature f actually has along a step (:func:`local_curvature`, from
      values the speculative call returned, so free) is often several times
      smaller, and FISTA's iterations to a given accuracy scale with sqrt(L).
      After each accepted step the next L is the larger of one level below L
      and ``ADAPTIVE_MARGIN`` x that curvature (but not above L); a failed
      test raises L by ``eta``, or at once to ``ADAPTIVE_MARGIN`` x the
      curvature the failed step met (the adaptive backtracking of Scheinberg,
      Goldfarb & Bai 2014, with the momentum sequence kept as Algorithm 1's
      because G_{t+1} is formed before the next L is known). The margin and
      the bounded fall keep rejected steps (one extra round trip each) rare.
      L only takes the levels 2^(j / ``ADAPTIVE_LEVELS``) (the start rounded
      up to one): the curvature is computed from sums over row blocks, which
      differ in their last bits with the blocks' layout (one block, several,
      Dask workers), and a continuous L would carry those differences into
      every step; a level changes only where the curvature sits at a level's
      edge, as a backtracking test's outcome only where f sits at its bound.
    * ``tol_lipschitz``: a relative-change test calibrated to another step.
      Near the optimum FISTA's objective falls per iteration by about
      (F - F*) sqrt(mu / L) (linear phase) or 2 (F - F*)^{3/2} / (sqrt(L) R)
      (sublinear phase): at the same accuracy a run with step 1/L changes
      more per iteration than a run with the longer step 1/L', by up to
      sqrt(L' / L). With ``tol_lipschitz=L'`` the test is therefore
      ``change <= tol * (L' / L)^(1/4)``, ``change`` the relative change over
      the last ``STOP_WINDOW`` iterations divided by their number (so no run
      stops before iteration ``STOP_WINDOW + 1``), so that a run stops near
      the accuracy at which the run with step 1/L' (the paper's) stops with
      ``tol``. The fourth root rather than the square root, and the window
      rather than one step: an adaptive L varies from one iteration to the
      next, so the run's progress per iteration is that of a larger L than
      the current one; a single step's change can be small where the
      non-monotone objective turns; and a warm start's first steps change
      the objective little before the momentum builds up. All three err
      towards stopping later, never at a worse solution.
    * ``gradient_tol``: the relative-change test alone can stop a run far from the
      optimum when the objective moves slowly at first: started from the solution
      of a neighbouring regularization value (a warm start along a path), the
      objective changes little in the first iterations, and a warm fit of a
      grid can stop within them, short of the optimum. With
      ``gradient_tol`` the run also needs the composite
      gradient mapping g_t = L (G_t - W_t) (zero exactly at a minimizer of f + g)
      to have shrunk to ``gradient_tol`` times its norm at the origin (the cold
      start), which a start near but not at the new optimum cannot satisfy by
      standing still. The reference is the origin, not the run's own first step:
      a warm start's own first mapping is already small, so measured against it
      a warm fit would need more iterations than a cold one. A warm start costs
      one extra oracle call, at the origin.
    """
    if not (lipschitz > 0 and math.isfinite(lipschitz)):
        raise ValueError(f"lipschitz constant must be positive and finite, got {lipschitz}")
    if not eta > 1.0:
        raise ValueError(f"eta must be > 1, got {eta}")
    if adaptive and not backtracking:
        raise ValueError("adaptive=True lowers L and needs backtracking=True to raise it again")
    if tol_lipschitz is not None and not (tol_lipschitz > 0 and math.isfinite(tol_lipschitz)):
        raise ValueError(f"tol_lipschitz must be positive and finite, got {tol_lipschitz}")
    if gradient_tol is not None and not gradient_tol >= 0:
        raise ValueError(f"gradient_tol must be >= 0, got {gradient_tol}")
    if checkpoint is not None:
        every, save_state = checkpoint
        if not (isinstance(every, (int, np.integer)) and every >= 1 and callable(save_state)):
            raise ValueError(f"checkpoint must be (every >= 1, callable), got {checkpoint!r}")
    if not isinstance(oracle, Oracle):
        oracle = FunctionOracle(oracle)
    if state is not None:
        W, G, b, L, grad, f_G, reference_mapping, result = _restore(state, x0, max_iter)
        start = time.perf_counter() - (state.seconds[-1] if state.seconds else 0.0)
    else:
        reference_mapping = None
        if gradient_tol is not None and np.any(x0):
            zero = np.zeros_like(x0)
            _, grad0 = oracle(zero[None], 0)
            reference_mapping = float(lipschitz) * float(np.linalg.norm(prox(-grad0 / lipschitz, 1.0 / lipschitz)[0]))
        L = _level_ceil(float(lipschitz)) if adaptive else float(lipschitz)
        start = time.perf_counter()
        result = SolverResult(x=x0, lipschitz=L)
        W = x0
        G = x0
        b = 1.0
        values, grad = oracle(G[None], 0)
        f_G = float(values[0])
        result.n_oracle_calls = 1 + (reference_mapping is not None)
    hist = result.objective_history
    while True:
        step = 1.0 / L
        W_new, g_new = prox(G - step * grad, step)
        # each d x l difference and product once (the solver's own work per iteration):
        # D = W_new - G (so G - W_new = -D, exactly), E = W_new - W
        D, E = W_new - G, W_new - W
        dd = float(np.vdot(D, D))
        do_restart = restart and hist and -float(np.vdot(D, E)) > 0.0
        b_next = 1.0 if do_restart else (1.0 + math.sqrt(1.0 + 4.0 * b * b)) / 2.0
        momentum = 0.0 if do_restart else (b - 1.0) / b_next
        G_next = W_new + momentum * E
        want_grad = len(hist) + 1 < max_iter
        if want_grad:
            values, grad_next = oracle.extrapolated(W_new, W, momentum, G_next)
        else:
            values, grad_next = oracle(W_new[None], -1)
        result.n_oracle_calls += 1
        f_W = float(values[0])
        gd = float(np.vdot(grad, D)) if backtracking else 0.0
        if backtracking and not _sufficient_decrease(f_W, f_G, gd, dd, L):
            if adaptive:  # up by eta, or straight to the curvature the step met
                curvature = ADAPTIVE_MARGIN * _local_curvature(f_W, f_G, gd, dd)
                L = _level_step(L, math.ceil(ADAPTIVE_LEVELS * math.log2(eta)))
                L = max(L, _level_ceil(curvature)) if curvature > L else L
            else:
                L *= eta
            result.n_backtracks += 1
            result.lipschitz = L
            continue
        if adaptive:  # never above L: only a failed test raises L (rounding noise near the optimum)
            curvature = ADAPTIVE_MARGIN * _local_curvature(f_W, f_G, gd, dd)
            L_next = max(_level_step(L, -1), min(L, _level_floor(curvature)))
        result.n_restarts += int(bool(do_restart))
        mapping = L * math.sqrt(dd)
        reference_mapping = mapping if reference_mapping is None else reference_mapping
        obj = f_W + g_new
        hist.append(obj)
        elapsed = time.perf_counter() - start
        result.seconds.append(elapsed)
        result.x = W_new
        result.n_iter = len(hist)
        stop = callback(len(hist), obj, elapsed) if callback is not None else False
        small_mapping = gradient_tol is None or mapping <= gradient_tol * reference_mapping
        if tol_lipschitz is None:
            changed = len(hist) >= 2 and relative_change(hist[-1], hist[-2]) <= tol
        else:
            changed = (
                len(hist) > STOP_WINDOW
                and relative_change(hist[-1], hist[-1 - STOP_WINDOW]) / STOP_WINDOW <= tol * (tol_lipschitz / L) ** 0.25
            )
        if changed and small_mapping:
            result.converged = True
            return result
        if stop or not want_grad:
            return result
        W, G, b = W_new, G_next, b_next
        grad, f_G = grad_next, float(values[1])
        if adaptive:
            L = result.lipschitz = L_next
        if checkpoint is not None and len(hist) % every == 0:
            save_state(
                APGState(
                    n_iter=len(hist),
                    W=W,
                    G=G,
                    grad=grad,
                    f_G=f_G,
                    b=b,
                    lipschitz=L,
                    objective_history=list(hist),
                    seconds=list(result.seconds),
                    n_backtracks=result.n_backtracks,
                    n_restarts=result.n_restarts,
                    n_oracle_calls=result.n_oracle_calls,
                    reference_mapping=reference_mapping,
                )
            )


def check_saved_state(kind: str, state, names, shape, max_iter: int) -> int:
    """Check what every solver's saved state holds: histories as long as its ``n_iter``, the
    arrays ``names`` of the problem's ``shape``, and iterations left before ``max_iter``.
    Returns ``n_iter``."""
    t = int(state.n_iter)
    if t < 1 or len(state.objective_history) != t or len(state.seconds) != t:
        raise ValueError(
            f"inconsistent {kind} state: n_iter={t} with {len(state.objective_history)} objective "
            f"values and {len(state.seconds)} times"
        )
    for name in names:
        a = getattr(state, name)
        if a is None or np.shape(a) != tuple(shape):
            raise ValueError(f"{kind} state {name} has shape {np.shape(a)}, the problem's is {tuple(shape)}")
    if t >= max_iter:
        raise ValueError(f"the saved state is at iteration {t}; max_iter={max_iter} leaves nothing to do")
    return t


def _restore(state: APGState, x0: np.ndarray, max_iter: int):
    """Check a saved state against this run; the loop variables and the result so far."""
    t = check_saved_state("APG", state, ("W", "G", "grad"), np.shape(x0), max_iter)
    if not (state.lipschitz > 0 and math.isfinite(state.lipschitz)):
        raise ValueError(f"APG state lipschitz constant must be positive and finite, got {state.lipschitz}")
    L = float(state.lipschitz)
    result = SolverResult(
        x=state.W,
        objective_history=[float(v) for v in state.objective_history],
        n_iter=t,
        seconds=[float(v) for v in state.seconds],
        lipschitz=L,
        n_backtracks=int(state.n_backtracks),
        n_restarts=int(state.n_restarts),
        n_oracle_calls=int(state.n_oracle_calls),
    )
    ref = None if state.reference_mapping is None else float(state.reference_mapping)
    return state.W, state.G, float(state.b), L, state.grad, float(state.f_G), ref, result
