"""Stochastic solvers for the Rank-SVM primal (Park & Choi 2013); no Dask.

Problem (eqs. 5-6): min_M  lambda/2 ||M||_F^2 + 1/n sum_i R_i(M), R_i the
pairwise hinge of instance i. The online solvers see one instance at a time
through a per-instance oracle

    oracle(s, y, alpha) -> (loss, coef)

on the scores ``s = M^T x`` (K,) and 0/1 labels ``y`` (K,), where ``coef`` is
dR_i/ds (so dR_i/dM = x coef^T); ``alpha`` is the smoothing parameter (0: the
hinge and a subgradient). :class:`RankSVMOracle` is the Numba kernel of
:mod:`dmlr.kernels.ranksvm`; :class:`MMPOracle` gives MMP's update instead.

A row ``x`` is either a dense float64 vector (d,) or a pair
``(indices, values)`` (one CSR row). Every solver keeps an
:class:`OnlineState` -- the iterate, ANSGD's second sequence Psi, the number
t of updates so far and the running average M_hat = 1/t sum_{j=1..t} M_j --
so a run can be continued from it exactly (``partial_fit``).

The steps are :func:`ansgd_step` (Algorithm 1, ANSGD), :func:`sgd_step`
(eq. 7) and :func:`mmp_step` (MMP); all three keep the average M_hat
(Section 5), and the output is M_hat when ``average`` else M_t.
:func:`run_online` runs them in one compiled loop, the step functions being
the plain reference. Initialization (Section 5): M_0 entries N(0, 0.01)
(standard deviation 0.1) from the seed; the instance order is the seeded
stream of :func:`instance_order`.

The batch baseline minimizes the smoothed full objective F_alpha with
scipy's L-BFGS-B (the paper: Nesterov smoothing + L-BFGS;
:func:`dmlr.solvers.lbfgs.scipy_lbfgs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from dmlr.data.blocks import regroup_rows
from dmlr.kernels.ranksvm import RANKSVM_MARGIN, mmp_row, ranksvm_row
from dmlr.solvers.result import SolverResult

#: Omega of eq. 7's step size (Section 5).
SGD_OMEGA = 1e3
#: Standard deviation of the initial entries (variance 0.01, Section 5).
INIT_STD = 0.1
SAMPLING = ("uniform", "permutation", "stream")


class RankSVMOracle:
    """Per-instance (smoothed) pairwise hinge and dR/ds; scratch kept between calls."""

    def __init__(self, n_labels: int, margin: float = RANKSVM_MARGIN):
        self.margin = float(margin)
        self._coef = np.empty(n_labels)
        self._scratch = [np.empty(n_labels + 1) for _ in range(6)]

    def __call__(self, s, y, alpha):
        loss = ranksvm_row(s, y, float(alpha), self.margin, self._coef, *self._scratch)
        return loss, self._coef


class MMPOracle:
    """Per-instance MMP isErr loss and uniform-update coefficients (``alpha`` ignored)."""

    def __init__(self, n_labels: int):
        self._coef = np.empty(n_labels)

    def __call__(self, s, y, alpha=0.0):
        return mmp_row(s, y, self._coef), self._coef


@dataclass
class OnlineState:
    """Everything an online solver needs to continue.

    Attributes
    ----------
    M : float64 (d, K)
        The current iterate M_t.
    M_avg : float64 (d, K)
        1/t sum_{j=1..t} M_j (M_0 while t = 0).
    t : int
        Number of updates so far.
    Psi : float64 (d, K) or None
        ANSGD's second sequence (None for SGD and MMP).
    lazy_carry : tuple or None
        The lazy representation the compiled loop ended with and the arrays it
        wrote (``_run_fused``), so that the next call continues it bit for
        bit; ignored unless M, M_avg, Psi and t are still those arrays. Not
        pickled (three more d x K arrays on the wire): a state sent to another
        process continues from M, Psi and M_avg, the same iterates up to
        rounding.
    """

    M: np.ndarray
    M_avg: np.ndarray
    t: int = 0
    Psi: np.ndarray | None = None
    lazy_carry: tuple | None = field(default=None, repr=False, compare=False)

    def __getstate__(self):
        return dict(self.__dict__, lazy_carry=None)

    def output(self, average: bool = True) -> np.ndarray:
        return self.M_avg if average else self.M


def init_weights(shape, random_state) -> np.ndarray:
    """M_0 with i.i.d. N(0, 0.01) entries from the first child of SeedSequence(random_state)."""
    rng = np.random.default_rng(np.random.SeedSequence(random_state).spawn(2)[0])
    return rng.normal(0.0, INIT_STD, size=shape)


def init_state(shape, random_state, solver: str) -> OnlineState:
    """The state before the first update: M_0 (and Psi_0 = M_0 for ANSGD)."""
    M0 = init_weights(shape, random_state)
    return OnlineState(M=M0, M_avg=M0.copy(), t=0, Psi=M0.copy() if solver == "ansgd" else None)


def instance_order(n_rows: int, n_updates: int, random_state, sampling: str = "uniform") -> np.ndarray:
    """The seeded stream of row indices (second child of SeedSequence(random_state)).

    ``"uniform"``: i.i.d. uniform draws (with replacement; the paper: "a
    randomly picked data point ... at each iteration"); ``"permutation"``:
    consecutive random permutations of the rows (each row once per epoch).
    """
    if sampling not in ("uniform", "permutation"):
        raise ValueError(f"sampling must be 'uniform' or 'permutation' (random access), got {sampling!r}")
    rng = np.random.default_rng(np.random.SeedSequence(random_state).spawn(2)[1])
    if sampling == "uniform":
        return rng.integers(0, n_rows, size=n_updates)
    n_epochs = -(-n_updates // n_rows)
    return np.concatenate([rng.permutation(n_rows) for _ in range(max(n_epochs, 1))])[:n_updates]


# -- one row ------------------------------------------------------------------------
def _scores(M, x):
    if isinstance(x, tuple):
        idx, val = x
        return val @ M[idx]
    return x @ M


def _add_outer(G, x, c, scale=1.0):
    """G += scale * x c^T (in place)."""
    if isinstance(x, tuple):
        idx, val = x
        G[idx] += scale * np.outer(val, c)
    else:
        G += scale * np.outer(x, c)


def _grad(shape, x, c):
    G = np.zeros(shape)
    _add_outer(G, x, c)
    return G


def _average(state: OnlineState) -> None:
    state.M_avg += (state.M - state.M_avg) / state.t


def ansgd_step(state: OnlineState, x, y, lam: float, oracle, L: float = 1.0) -> float:
    """One update of Algorithm 1 (ANSGD) on instance (x, y); returns R_t^{alpha_t}(Upsilon_t).

    Algorithm 1 (ANSGD, Ouyang & Gray 2012), with t = 1, 2, ... the index of
    the update (1-based: Algorithm 1 writes t = 0, 1, ... with alpha_t =
    2/(t+1), which would give alpha_0 = 2 and a negative weight 1 - alpha_0 in
    Upsilon; starting at t = 1 gives alpha_1 = 1, the usual first step of
    accelerated methods, Upsilon_1 = Psi_0)::

        alpha_t = 2/(t+1)
        theta_t = lambda (alpha_t + 1/(2 alpha_t) - 1) + L     (paper: L = 1)
        eta_t   = alpha_t / (lambda + theta_t)
        Ups_t   = ((1-alpha_t)(lambda+theta_t) M_t + alpha_t theta_t Psi_t) / (lambda (1-alpha_t) + theta_t)
        M_t+1   = Ups_t - eta_t (grad R_t^{alpha_t}(Ups_t) + lambda Ups_t)
        Psi_t+1 = (theta_t Psi_t - grad R_t^{alpha_t}(Ups_t)) / (lambda + theta_t)

    with the smoothed gradient of eqs. 12-17 at smoothing parameter alpha_t
    (the same decreasing alpha_t; the paper does not give a separate one).
    Reading of the paper's ``1/2\\alpha_t``: 1/(2 alpha_t), which makes theta_t
    grow like lambda t / 4 (the strongly convex schedule of accelerated
    stochastic approximation); the constant ``+ 1`` is the paper's and stands
    for the smoothed loss's Lipschitz scale ||A_t||^2 = K ||x||^2 / N_t^2
    (eq. 13), which is <= 1 for rows of norm <= 1 when N_t >= sqrt(K), hence
    the ``L`` argument (default 1). Psi_0 = M_0. Note that M_{t+1} =
    (1 - alpha_t) M_t + alpha_t Psi_{t+1} (algebraically the same update).
    """
    t = state.t + 1
    a = 2.0 / (t + 1.0)
    theta = lam * (a + 1.0 / (2.0 * a) - 1.0) + L
    eta = a / (lam + theta)
    M, Psi = state.M, state.Psi
    ups = ((1.0 - a) * (lam + theta) * M + a * theta * Psi) / (lam * (1.0 - a) + theta)
    loss, c = oracle(_scores(ups, x), y, a)
    G = _grad(M.shape, x, c)
    state.M = ups - eta * (G + lam * ups)
    state.Psi = (theta * Psi - G) / (lam + theta)
    state.t = t
    _average(state)
    return loss


def sgd_step(state: OnlineState, x, y, lam: float, oracle, omega: float = SGD_OMEGA) -> float:
    """One subgradient step of eq. 7 on instance (x, y); returns R_t(M_t).

    M_t+1 = M_t - eta_t (lambda M_t + dR_t(M_t)),
    eta_t = 1 / (lambda (t + Omega)), Omega = 1e3 (Section 5).
    """
    t = state.t + 1
    eta = 1.0 / (lam * (t + omega))
    M = state.M
    loss, c = oracle(_scores(M, x), y, 0.0)
    M_new = (1.0 - eta * lam) * M
    _add_outer(M_new, x, c, -eta)
    state.M = M_new
    state.t = t
    _average(state)
    return loss


def mmp_step(state: OnlineState, x, y, lam: float = 0.0, oracle=None) -> float:
    """One MMP update (isErr loss, uniform update) on instance (x, y); returns isErr.

    ``lam`` is ignored (MMP has no regularizer); ``oracle`` defaults to
    :class:`MMPOracle`.

    MMP (Crammer & Singer 2003) with the isErr loss and the
    uniform update: M_t+1 = M_t - x coef^T with coef of
    :func:`dmlr.kernels.ranksvm.mmp_row` (no regularizer, unit step).
    """
    if oracle is None:
        oracle = MMPOracle(state.M.shape[1])
    t = state.t + 1
    loss, c = oracle(_scores(state.M, x), y, 0.0)
    if loss != 0.0:  # a new array: arrays handed out earlier (iterate_) are never changed in place
        M_new = state.M.copy()
        _add_outer(M_new, x, c, -1.0)
        state.M = M_new
    state.t = t
    _average(state)
    return loss


STEPS = {"ansgd": ansgd_step, "sgd": sgd_step, "mmp": mmp_step}


def _row_getter(X):
    """i -> x (dense row, or (indices, values) of a CSR row)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        indptr, indices, data = X.indptr, X.indices, X.data

        def row(i):
            a, b = indptr[i], indptr[i + 1]
            return (indices[a:b], data[a:b])

        return row
    X = np.ascontiguousarray(X, dtype=np.float64)
    return lambda i: X[i]


def run_online(
    solver: str,
    state: OnlineState,
    X,
    Y,
    order,
    *,
    lam: float,
    oracle=None,
    average: bool = True,
    objective=None,
    record_every: int = 0,
    lazy: bool = True,
    **step_kwargs,
) -> SolverResult:
    """Stream the rows ``order`` of (X, Y) through ``solver``'s step, updating ``state`` in place.

    Parameters
    ----------
    solver : {"ansgd", "sgd", "mmp"}
    state : OnlineState
        From :func:`init_state` or a previous run (continued exactly).
    X : float64 (n, d) dense or CSR
        Rows with the bias column already appended (if any).
    Y : int8 (n, K)
    order : int array
        Row indices, one per update.
    lam : float
    oracle : callable, optional
        Per-instance oracle; default :class:`RankSVMOracle` (:class:`MMPOracle` for MMP).
    average : bool
        Which output the ``objective`` hook sees: M_hat (True) or M_t.
    objective : callable, optional
        ``objective(M) -> float``, called on the output every ``record_every``
        updates (counted by the global t, so continued runs keep the grid).
    record_every : int
        0: never.
    lazy : bool
        With the default oracle, the updates run in the compiled loop of
        :func:`dmlr.kernels.ranksvm.online_updates` in O(nnz(x) K + K log K)
        each: the regularizer's shrink, ANSGD's combination of M and Psi and
        the average are kept as scalars next to arrays that change only in
        the rows of x's nonzeros. False:
        the plain O(d K) updates (ANSGD, SGD: the compiled loop; MMP:
        :func:`mmp_step`), the same iterates up to rounding; kept for
        comparison.
    **step_kwargs
        ``L`` for ANSGD, ``omega`` for SGD.

    Returns
    -------
    dmlr.solvers.result.SolverResult
        ``state``: the state after the updates (updated in place; ``x`` is its ``M``, ``n_iter``
        its update count); ``history_iterations``: the update count of each recorded value.
    """
    if solver not in STEPS:
        raise ValueError(f"solver must be one of {sorted(STEPS)}, got {solver!r}")
    step = STEPS[solver]
    K = state.M.shape[1]
    default_oracle = MMPOracle if solver == "mmp" else RankSVMOracle
    if (oracle is None or type(oracle) is default_oracle) and (lazy or solver != "mmp"):
        return _run_fused(
            solver,
            state,
            X,
            Y,
            order,
            lam=lam,
            oracle=oracle,
            average=average,
            objective=objective,
            record_every=record_every,
            lazy=lazy,
            **step_kwargs,
        )
    if oracle is None:
        oracle = MMPOracle(K) if solver == "mmp" else RankSVMOracle(K)
    Y = np.ascontiguousarray(Y, dtype=np.int8)
    row = _row_getter(X)
    result = SolverResult(state=state)
    for i in np.asarray(order, dtype=np.int64):
        step(state, row(i), Y[i], lam, oracle, **step_kwargs)
        if objective is not None and record_every and state.t % record_every == 0:
            result.objective_history.append(float(objective(state.output(average))))
            result.history_iterations.append(int(state.t))
    result.x, result.n_iter = state.M, int(state.t)
    return result


def run_online_stream(
    solver: str,
    state: OnlineState,
    blocks,
    n_updates: int,
    *,
    lam: float,
    group_rows: int,
    random_state,
    oracle=None,
    average: bool = True,
    group_objective=None,
    record_every: int = 0,
    **step_kwargs,
) -> SolverResult:
    """``n_updates`` updates over passes of a re-iterable stream of row blocks (``sampling="stream"``).

    Rows are visited in storage order by fixed global groups of ``group_rows``
    rows, each group's rows in a seeded random order (a fresh one per pass):
    the random instance order of the paper, restricted so that only one group
    of rows is needed at a time. The groups, and so the result, do not
    depend on the chunking of the stream. Passes repeat until ``n_updates``
    updates are done; each pass re-reads the stream.

    ``group_objective(X, Y) -> objective(M)``, if given, makes the history's
    objective on the rows of the current group (the whole set is never in
    memory), recorded every ``record_every`` updates.

    Returns
    -------
    dmlr.solvers.result.SolverResult
        ``state``: the state after the updates (updated in place; ``x`` is its ``M``, ``n_iter``
        its update count); ``history_iterations``: the update count of each recorded value.
    """
    result = SolverResult(state=state)
    done, epoch = 0, 0
    while done < n_updates:
        seen = 0
        for g, grp in enumerate(regroup_rows(blocks, group_rows)):
            Xg, Yg = grp.X, grp.Y
            rng = np.random.default_rng(np.random.SeedSequence(random_state, spawn_key=(3, epoch, g)))
            order = rng.permutation(Yg.shape[0])[: n_updates - done]
            hook = group_objective(Xg, Yg) if group_objective is not None and record_every else None
            part = run_online(
                solver,
                state,
                Xg,
                Yg,
                order,
                lam=lam,
                oracle=oracle,
                average=average,
                objective=hook,
                record_every=record_every,
                **step_kwargs,
            )
            result.objective_history += part.objective_history
            result.history_iterations += part.history_iterations
            done += order.size
            seen += Yg.shape[0]
            if done >= n_updates:
                break
        if seen == 0:
            raise ValueError("the stream has no rows")
        epoch += 1
    result.x, result.n_iter = state.M, int(state.t)
    return result


def _run_fused(solver, state, X, Y, order, *, lam, oracle, average, objective, record_every, lazy=True, **step_kwargs):
    """:func:`run_online` with the default oracles, by the compiled loop
    :func:`dmlr.kernels.ranksvm.online_updates` (the same updates), in segments between
    the recording points."""
    from dmlr.kernels.ranksvm import online_updates

    margin = getattr(oracle, "margin", RANKSVM_MARGIN)
    carry = None
    held = state.lazy_carry
    if (
        lazy
        and held is not None
        and held[1] == state.t
        and held[2] is state.M
        and held[3] is state.M_avg
        and held[4] is state.Psi
    ):
        carry = held[0]
    state.lazy_carry = None
    # fresh arrays, updated in place from here on: arrays handed out earlier (iterate_, coef_)
    # never change under their holders
    state.M = np.array(state.M, dtype=np.float64, order="C", copy=True)
    state.M_avg = np.array(state.M_avg, dtype=np.float64, order="C", copy=True)
    if state.Psi is not None:
        state.Psi = np.array(state.Psi, dtype=np.float64, order="C", copy=True)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    else:
        X = np.ascontiguousarray(X, dtype=np.float64)
    Y = np.ascontiguousarray(Y, dtype=np.int8)
    order = np.asarray(order, dtype=np.int64)
    result = SolverResult(state=state)
    kw = {"L": step_kwargs.get("L", 1.0)} if solver == "ansgd" else {"omega": step_kwargs.get("omega", SGD_OMEGA)}
    kw["lazy"] = lazy
    pos = 0
    while pos < order.size:
        stop = order.size
        if objective is not None and record_every:
            stop = min(stop, pos + record_every - state.t % record_every)
        carry = online_updates(
            solver,
            X,
            Y,
            order[pos:stop],
            state.M,
            state.Psi,
            state.M_avg,
            state.t,
            lam=lam,
            margin=margin,
            carry=carry,
            **kw,
        )
        state.t += stop - pos
        pos = stop
        if objective is not None and record_every and state.t % record_every == 0:
            result.objective_history.append(float(objective(state.output(average))))
            result.history_iterations.append(int(state.t))
    if carry is not None:
        state.lazy_carry = (carry, state.t, state.M, state.M_avg, state.Psi)
    result.x, result.n_iter = state.M, int(state.t)
    return result
