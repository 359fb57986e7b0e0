"""SGD and its variance-reduced variants (Hiranandani & Pareek, Algorithms 1-8); no Dask.

Every method is a small epoch rule over one problem object with four
operations (:class:`dmlr.objectives.multilabel.LinearMultiLabelProblem`):

* ``data_value_and_grad(W, rows=None)``: the mean loss and mean data gradient
  (the full-gradient snapshot, map-reduced where the data are);
* ``run_inner(W, order, spec)``: one step per row of ``order``,

      W <- W - alpha (x_i c^T + [mu] + [A] + lam W),

  with c the row's score gradient, minus its value at a reference point
  ``W_ref`` (SVRG family) or at the stored table (SAG/SAGA) -- see
  :func:`dmlr.kernels.multilabel_losses.vr_inner_loop`;
* ``init_memory(W)``: SAG/SAGA tables (Algorithms 3-4, lines 2-4);
* ``value(W)``: F(W), for the history.

so the ten optimizers differ only in what they pass, like optax's update
rules over one gradient oracle:

================= ====================================================================
``sgd``           Algorithm 1: c = g.
``svrg1/2/3``     Algorithm 2, m = n inner steps per snapshot; output option (1) last
                  iterate, (2) average of the inner iterates, (3) one drawn uniformly.
``saga``          Algorithm 3: c = g - u_i, plus A = 1/n sum u.
``sag``           Algorithm 4: c = (g - u_i)/n, plus A.
``s2gd``          Algorithm 5: SVRG with output j drawn with probability ~ (1 - nu alpha)^(m-j).
``vrlite``        Algorithm 6: one SGD pass builds w_bar, g_bar; then SVRG steps with
                  reference w_bar and mu = g_bar, both re-estimated along the pass
                  (no full-gradient snapshot).
``batching_svrg`` Algorithm 7: snapshot gradient on a random batch B (``|B| = batch_size``).
``mixed_svrg``    Algorithm 8: as 7, but rows outside B take a plain SGD step.
================= ====================================================================

``lbfgs`` (not the paper's, :func:`minimize_lbfgs`) minimizes the same F over
the map-reduced full gradient. The row order, the step rules and the
certified stopping rule of the stochastic solvers are :func:`minimize`'s.
"""

from __future__ import annotations

import numpy as np

from dmlr.solvers.result import SolverResult

SOLVERS = ("sgd", "svrg1", "svrg2", "svrg3", "saga", "sag", "s2gd", "vrlite", "batching_svrg", "mixed_svrg")
#: Full-gradient solvers :func:`minimize` also runs (their iterations are not epochs of steps).
BATCH_SOLVERS = ("lbfgs",)
STEP_RULES = ("1/k", "constant", "decay")


def gap_bound(value: float, grad: np.ndarray, lam: float) -> float:
    """Bound (*) of :func:`minimize` on F(W) - F* from F(W) = ``value`` and its gradient ``grad`` (inf when lam = 0)."""
    return float(np.vdot(grad, grad)) / (2.0 * lam) if lam > 0 else float("inf")


def epoch_order(n_rows: int, group_rows: int, rng: np.random.Generator) -> np.ndarray:
    """The rows of one epoch: groups of ``group_rows`` in random order, rows shuffled within each."""
    n_groups = -(-n_rows // group_rows)
    parts = []
    for g in rng.permutation(n_groups):
        a = int(g) * group_rows
        parts.append(a + rng.permutation(min(group_rows, n_rows - a)))
    return np.concatenate(parts).astype(np.int64)


def _alpha(step: str, step_size: float, step_decay: float, epoch: int, t: int):
    """(alpha0, decay, t0) of the kernel's alpha_r = alpha0 / (1 + decay (t0 + r))."""
    if step == "1/k":
        return step_size / epoch, 0.0, 0
    if step == "constant":
        return step_size, 0.0, 0
    return step_size, step_decay, t


def minimize(
    problem,
    W0: np.ndarray,
    solver: str,
    *,
    epochs: int = 5,
    step: str = "1/k",
    step_size=None,
    step_decay: float = 0.0,
    batch_size: int | None = None,
    s2gd_nu: float | None = None,
    random_state=0,
    record: bool = True,
    tol: float | None = None,
    callback=None,
) -> SolverResult:
    """Run ``epochs`` epochs of ``solver`` from W0, or fewer when ``tol`` is reached.

    ``solver="lbfgs"`` runs up to ``epochs`` L-BFGS iterations instead
    (:func:`minimize_lbfgs`; the step arguments are not used).

    Parameters
    ----------
    problem : LinearMultiLabelProblem (or any object with its four operations)
    W0 : float64 (d, K)
    solver : str
        One of ``SOLVERS`` or ``BATCH_SOLVERS``.
    epochs : int
        One epoch is n stochastic steps (for the SVRG family: one snapshot and m = n
        inner steps, the paper's "5 epochs" being 5 outer iterations).
    step : {"1/k", "constant", "decay"}
        ``"1/k"`` (the paper's alpha = 1/k with k the epoch --
        the outer iteration of Algorithms 1-8 -- scaled by ``step_size``),
        ``"constant"`` (``step_size``), ``"decay"`` (alpha_t = step_size / (1 +
        step_decay t), t the global step; set ``step_decay`` to tune).
    step_size : float, optional
        Default: ``problem.default_step_size()`` (1/L).
    step_decay : float
        For ``step="decay"``.
    batch_size : int, optional
        ``|B|`` of Batching/Mixed SVRG (default: ceil(n/10)).
    s2gd_nu : float, optional
        nu of S2GD (default: the ridge weight, a lower bound on the strong
        convexity; with nu = 0 S2GD's output draw is SVRG option 3's).
    random_state : int
        Seeds the row order, batches and output draws (one stream per epoch).
    record : bool
        Evaluate F(W) before the first and after every epoch (with ``tol``, the
        values its test computes are recorded).
    tol : float, optional
        Stop after the first epoch whose iterate has a certified relative
        gap (F(W) - F*) / F* <= tol (see Notes); None: run all ``epochs``.
    callback : callable, optional
        ``callback(epoch, W)`` after every epoch.

    Returns
    -------
    dmlr.solvers.result.SolverResult
        ``n_iter``: the epochs run; ``history_iterations``: the epoch of each recorded value.

    Notes
    -----
    Stopping rule (``tol``). F is ``lam``-strongly convex for the convex losses
    (every loss but Gebru's), so for any (sub)gradient G of F at W,

        F(W) - F* <= ||G||_F^2 / (2 lam)          (*)

    (minimize the strong-convexity lower bound F(W) + <G, V - W> + lam/2 ||V -
    W||^2 over V). With ``tol`` set, F(W) and G are computed after every epoch
    (one full pass, which the SVRG family's next snapshot reuses, so it costs
    them nothing), and the run stops once the bound certifies a relative gap
    (F(W) - F*) / F* <= tol, i.e. once ||G||^2 / (2 lam) <= tol (F(W) -
    ||G||^2 / (2 lam)) (F* >= 0: every loss is non-negative). The history then
    records these values. Gebru's loss is not convex in the scores, so there (*)
    is a heuristic, not a certificate; with ``lam = 0`` there is no bound and
    the run takes all ``epochs``.

    Row order (:func:`epoch_order`). The paper samples rows uniformly (with replacement). Here the rows
    of each epoch are a seeded permutation of fixed row groups of ``group_rows``
    consecutive rows, each group's rows again permuted (sampling without
    replacement, as VR-Lite's Algorithm 6 and the usual SVRG implementations).
    Groups are global row ranges, so the sequence of rows -- and the model --
    does not depend on how the rows are split into chunks or over workers; and
    a group lives on one block, so an epoch costs one call per run of groups on
    the same block, not one per row. Full-gradient snapshots are sums over
    blocks and differ between splits only by the order of floating-point sums.
    """
    if solver not in SOLVERS + BATCH_SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS + BATCH_SOLVERS}, got {solver!r}")
    if step not in STEP_RULES:
        raise ValueError(f"step must be one of {STEP_RULES}, got {step!r}")
    if not (isinstance(epochs, (int, np.integer)) and epochs >= 1):
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if tol is not None and not tol > 0:
        raise ValueError(f"tol must be > 0 or None, got {tol!r}")
    if solver == "lbfgs":
        return minimize_lbfgs(problem, W0, max_iter=epochs, tol=tol, record=record, callback=callback)
    n, lam = problem.n_rows, problem.lam
    step_size = float(problem.default_step_size() if step_size is None else step_size)
    if not step_size > 0:
        raise ValueError(f"step_size must be > 0, got {step_size!r}")
    B = int(np.ceil(n / 10)) if batch_size is None else int(batch_size)
    if not 1 <= B <= n:
        raise ValueError(f"batch_size must be in [1, n_rows={n}], got {batch_size!r}")
    nu = lam if s2gd_nu is None else float(s2gd_nu)
    seeds = np.random.SeedSequence(random_state).spawn(epochs + 1)  # seeds[k]: epoch k's stream
    W = np.array(W0, dtype=np.float64, copy=True)
    history, hist_epochs = [], []

    def record_now(k):
        if record:
            history.append(problem.value(W))
            hist_epochs.append(k)

    st = {"t": 0, "A": None, "w_bar": None, "g_bar": None, "grad_at": None}
    bound = float("nan")

    def check(k):
        """F(W) and the bound (*) at W; the data gradient is kept for the next snapshot."""
        nonlocal bound
        loss, grad = problem.data_value_and_grad(W)
        st["grad_at"] = (W, grad)
        value = float(loss + 0.5 * lam * np.vdot(W, W))
        bound = gap_bound(value, grad + lam * W, lam)
        if record:
            history.append(value)
            hist_epochs.append(k)
        return certified(value, bound, tol)

    if tol is not None:
        converged = check(0)
    else:
        record_now(0)
        converged = False
    k = 0
    while not converged and k < epochs:
        k += 1
        rng = np.random.default_rng(seeds[k])
        order = epoch_order(n, problem.group_rows, rng)
        alpha0, decay, t0 = _alpha(step, step_size, step_decay, k, st["t"])
        spec = dict(lam=lam, alpha0=alpha0, decay=decay, t0=t0)
        W = _EPOCHS[solver](problem, W, order, spec, st, rng, k, dict(B=B, nu=nu))
        st["t"] += n
        if callback is not None:
            callback(k, W)
        if tol is not None:
            converged = check(k)
            continue
        record_now(k)
    return SolverResult(
        x=W,
        objective_history=history,
        n_iter=k,
        history_iterations=hist_epochs,
        step_size=step_size,
        gap_bound=bound,
        converged=bool(converged),
    )


def certified(value: float, bound: float, tol: float) -> bool:
    """The stopping rule: F* >= value - bound >= 0 and bound <= tol (value - bound)."""
    return bound <= tol * (value - bound)


def minimize_lbfgs(
    problem, W0: np.ndarray, *, max_iter: int, tol=None, record: bool = True, callback=None
) -> SolverResult:
    """Minimize F by L-BFGS-B over the map-reduced full gradient, stopping by the certified gap.

    Not the paper's: scipy's L-BFGS-B (:func:`dmlr.solvers.lbfgs.scipy_lbfgs`), one pass over the
    blocks per evaluation, the blocks in parallel. It adapts to the actual
    curvature where a stochastic step 1/L must assume the worst row, so it
    reaches the certified optimum where the stochastic solvers may not; hence
    it is :class:`~dmlr.models.LinearMultiLabel`'s default.

    Parameters
    ----------
    problem : LinearMultiLabelProblem
    W0 : float64 (d, K)
    max_iter : int
        L-BFGS iterations at most (each one full pass, more when the line
        search refuses the unit step).
    tol : float, optional
        :func:`minimize`'s stopping rule (certified relative gap); None: stop
        by scipy's own tests (projected gradient below 1e-10) or ``max_iter``.
    record : bool
        F(W0) and F after every iteration in the history (computed by the
        solver anyway: no extra pass).
    callback : callable, optional
        ``callback(iteration, W)`` after every iteration.

    Returns
    -------
    dmlr.solvers.result.SolverResult
        ``n_iter`` holds the iterations run.
    """
    from dmlr.solvers.lbfgs import scipy_lbfgs

    lam = problem.lam
    state = {"k": 0, "bound": float("nan"), "value": float("nan")}

    def stop(W, value, grad):
        state["k"] += 1
        state["bound"], state["value"] = gap_bound(value, grad, lam), float(value)
        if callback is not None:
            callback(state["k"], W)
        return tol is not None and certified(value, state["bound"], tol)

    f0, g0 = problem.value_and_grad(np.asarray(W0, dtype=np.float64))
    state["bound"], state["value"] = gap_bound(f0, g0, lam), float(f0)
    if tol is not None and certified(f0, state["bound"], tol):
        res_W, history, converged = np.array(W0, dtype=np.float64, copy=True), [], True
    else:
        res = scipy_lbfgs(
            problem.value_and_grad, np.asarray(W0, dtype=np.float64), max_iter=max_iter, tol=1e-10, stop=stop
        )
        res_W, history = res.x, res.objective_history
        converged = res.converged if tol is None else certified(state["value"], state["bound"], tol)
    history = [float(f0)] + [float(v) for v in history] if record else []
    return SolverResult(
        x=res_W,
        objective_history=history,
        n_iter=state["k"],
        history_iterations=list(range(len(history))),
        gap_bound=state["bound"],
        converged=bool(converged),
    )


# -- one epoch of each method --------------------------------------------------------
def _epoch_sgd(problem, W, order, spec, st, rng, k, opts):
    return problem.run_inner(W, order, spec)["W"]


def _snapshot_epoch(problem, W, order, spec, st, rng, output, rows=None, mixed=False, nu=0.0):
    """One outer iteration of Algorithms 2, 5, 7, 8: snapshot at W, n inner steps, the output."""
    held = st.get("grad_at")
    if rows is None and held is not None and held[0] is W:  # the stopping rule's gradient at W
        mu = held[1]
    else:
        _, mu = problem.data_value_and_grad(W, rows=rows)
    spec = dict(spec, W_ref=W, mu=mu)
    m = order.size
    if mixed:
        in_batch = np.zeros(problem.n_rows, dtype=bool)
        in_batch[rows] = True
        spec["ref_mask"] = in_batch[order]
    if output == "average":
        spec["W_sum"] = np.zeros_like(W)
    elif output in ("uniform", "s2gd"):
        if output == "uniform":
            j = int(rng.integers(m))
        else:  # Algorithm 5 line 9: P(j) ~ (1 - nu alpha)^(m - j), j = 1..m
            q = max(1.0 - nu * spec["alpha0"], 1e-300)
            logp = (m - np.arange(1, m + 1)) * np.log(q)
            p = np.exp(logp - logp.max())
            j = int(rng.choice(m, p=p / p.sum()))
        spec["capture_at"] = j
    out = problem.run_inner(W, order, spec)
    if output == "last":
        return out["W"]
    if output == "average":
        return out["W_sum"] / m
    return out["W_capture"]


def _epoch_svrg(output):
    def epoch(problem, W, order, spec, st, rng, k, opts):
        return _snapshot_epoch(problem, W, order, spec, st, rng, output)

    return epoch


def _epoch_s2gd(problem, W, order, spec, st, rng, k, opts):
    return _snapshot_epoch(problem, W, order, spec, st, rng, "s2gd", nu=opts["nu"])


def _epoch_batching(mixed):
    def epoch(problem, W, order, spec, st, rng, k, opts):
        batch = np.sort(rng.choice(problem.n_rows, size=opts["B"], replace=False))
        return _snapshot_epoch(problem, W, order, spec, st, rng, "uniform", rows=batch, mixed=mixed)

    return epoch


def _epoch_memory(scale_by_n):
    def epoch(problem, W, order, spec, st, rng, k, opts):
        if st["A"] is None:  # Algorithms 3-4, lines 2-4: the table at w_1
            st["A"] = problem.init_memory(W)
        n = problem.n_rows
        out = problem.run_inner(W, order, dict(spec, A=st["A"], mem_scale=(1.0 / n) if scale_by_n else 1.0, n_total=n))
        st["A"] = out["A"]
        return out["W"]

    return epoch


def _epoch_vrlite(problem, W, order, spec, st, rng, k, opts):
    n = problem.n_rows
    if st["w_bar"] is None:
        # Algorithm 6, lines 2-10: an SGD pass that averages the iterates and gradients
        out = problem.run_inner(W, order, dict(spec, W_sum=np.zeros_like(W), G_sum=np.zeros_like(W)))
    else:
        # lines 12-19: SVRG steps around w_bar with mu = g_bar, re-estimating both
        out = problem.run_inner(
            W, order, dict(spec, W_ref=st["w_bar"], mu=st["g_bar"], W_sum=np.zeros_like(W), G_sum=np.zeros_like(W))
        )
    st["w_bar"], st["g_bar"] = out["W_sum"] / n, out["G_sum"] / n
    return out["W"]


_EPOCHS = {
    "sgd": _epoch_sgd,
    "svrg1": _epoch_svrg("last"),
    "svrg2": _epoch_svrg("average"),
    "svrg3": _epoch_svrg("uniform"),
    "saga": _epoch_memory(False),
    "sag": _epoch_memory(True),
    "s2gd": _epoch_s2gd,
    "vrlite": _epoch_vrlite,
    "batching_svrg": _epoch_batching(False),
    "mixed_svrg": _epoch_batching(True),
}
