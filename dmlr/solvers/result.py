"""The one result type every solver of dmlr returns.

Like scipy's ``OptimizeResult``, :class:`SolverResult` holds what every
solver has (the iterate, the objective history, the iterations, whether it
converged, the state to resume from) and, beside it, the few diagnostics
that only some solvers have, at a neutral default where a solver has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["SolverResult"]


@dataclass
class SolverResult:
    """Outcome of a solver: :func:`~dmlr.solvers.apg.apg`, :func:`~dmlr.solvers.lbfgs.lbfgs`,
    :func:`~dmlr.solvers.vr.minimize`, :func:`~dmlr.solvers.sgd.run_online` (and its stream
    and compiled forms) and :func:`~dmlr.solvers.lbfgs.scipy_lbfgs`.

    Attributes
    ----------
    x : ndarray
        The iterate returned (APG: the last proximal point; the online
        solvers: ``state.M``, see ``state``).
    objective_history : list of float
        The objective values recorded.
    n_iter : int
        Iterations (APG, L-BFGS), epochs (the variance-reduced solvers) or
        updates (the online solvers) run.
    converged : bool
        Whether the solver's stopping test ended the run.
    seconds : list of float
        Wall time since the start at each objective value, where the solver
        times them (APG, L-BFGS; empty elsewhere).
    history_iterations : list of int
        The iteration (epoch, update) of each recorded value; empty: values
        1, 2, ... of ``objective_history`` are iterations 1, 2, ...
    state : object or None
        What resuming needs, where the solver resumes from its result (the
        online solvers' :class:`~dmlr.solvers.sgd.OnlineState`).
    lipschitz, n_backtracks, n_restarts, n_oracle_calls
        APG's last L, rejected steps and momentum resets; the oracle calls
        (APG, L-BFGS).
    step_size : float
        The variance-reduced solvers' base step size.
    gap_bound : float
        The variance-reduced solvers' certified bound on F(x) - F* at the end.
    message : str
        scipy's message (:func:`~dmlr.solvers.lbfgs.scipy_lbfgs`).
    """

    x: np.ndarray = None
    objective_history: list = field(default_factory=list)
    n_iter: int = 0
    converged: bool = False
    seconds: list = field(default_factory=list)
    history_iterations: list = field(default_factory=list)
    state: object = None
    lipschitz: float = math.nan
    n_backtracks: int = 0
    n_restarts: int = 0
    n_oracle_calls: int = 0
    step_size: float = math.nan
    gap_bound: float = math.nan
    message: str = ""
