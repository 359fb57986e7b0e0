"""Accelerated proximal gradient (FISTA) with a fixed step, as RBRL's Algorithm 1.

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

and stop when |obj(t) - obj(t-1)| / |obj(t-1)| <= tol (t >= 2), returning
W_t, the point of the last objective value (the reference's stopping rule).

Latency: f(W_t) is needed only for the stopping test, and G_{t+1} does not
depend on it, so f(W_t) and grad f(G_{t+1}) are requested together in one
oracle call: one round trip per iteration, plus one at the end.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class APGResult:
    """Outcome of :func:`apg`.

    Attributes
    ----------
    x : ndarray
        The last proximal point W_t.
    objective_history : list of float
        obj(1), ..., obj(t).
    n_iter : int
        Number of iterations (= len(objective_history)).
    converged : bool
        Whether the relative-change test stopped the run.
    seconds : list of float
        Wall time since the start at each objective value.
    """

    x: np.ndarray
    objective_history: list = field(default_factory=list)
    n_iter: int = 0
    converged: bool = False
    seconds: list = field(default_factory=list)


def relative_change(new: float, old: float) -> float:
    """|new - old| / |old| (inf when old is 0 and new differs)."""
    if old == 0.0:
        return 0.0 if new == 0.0 else math.inf
    return abs(new - old) / abs(old)


def apg(oracle, prox, x0: np.ndarray, *, lipschitz: float, max_iter: int = 2000, tol: float = 1e-6,
        callback=None) -> APGResult:
    """Minimize f + g by FISTA with the constant step 1/lipschitz.

    Parameters
    ----------
    oracle : callable
        ``oracle(points (k, d, l), grad_point) -> (values (k,), grad (d, l) or None)``.
    prox : callable
        ``prox(v, scaling) -> (x, g(x))``.
    x0 : ndarray (d, l)
        Starting point (the paper: zeros).
    lipschitz : float
        Lipschitz constant of grad f; the step is its inverse.
    max_iter : int
        Maximum number of iterations (objective values).
    tol : float
        Relative objective change that stops the run.
    callback : callable, optional
        ``callback(t, objective, seconds)`` after each objective value; a
        truthy return stops the run.

    Returns
    -------
    APGResult
    """
    if not (lipschitz > 0 and math.isfinite(lipschitz)):
        raise ValueError(f"lipschitz constant must be positive and finite, got {lipschitz}")
    step = 1.0 / lipschitz
    start = time.perf_counter()
    result = APGResult(x=x0)
    W_prev = W = x0
    g_W = 0.0
    G = x0
    b = 1.0
    for t in range(1, max_iter + 2):
        want_grad = t <= max_iter
        if t == 1:
            _, grad = oracle(G[None], 0)
        else:
            points = np.stack([W, G]) if want_grad else W[None]
            values, grad = oracle(points, 1 if want_grad else -1)
            obj = float(values[0]) + g_W
            result.objective_history.append(obj)
            elapsed = time.perf_counter() - start
            result.seconds.append(elapsed)
            result.x = W
            result.n_iter = t - 1
            stop = callback(t - 1, obj, elapsed) if callback is not None else False
            hist = result.objective_history
            if len(hist) >= 2 and relative_change(hist[-1], hist[-2]) <= tol:
                result.converged = True
                return result
            if stop or not want_grad:
                return result
        W_prev = W
        W, g_W = prox(G - step * grad, step)
        b_next = (1.0 + math.sqrt(1.0 + 4.0 * b * b)) / 2.0
        G = W + ((b - 1.0) / b_next) * (W - W_prev)
        b = b_next
    return result
