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

One epoch is n stochastic steps (for the SVRG family: one snapshot and m = n
inner steps, the paper's "5 epochs" being 5 outer iterations).

Row order. The paper samples rows uniformly (with replacement). Here the rows
of each epoch are a seeded permutation of fixed row groups of ``group_rows``
consecutive rows, each group's rows again permuted (sampling without
replacement, as VR-Lite's Algorithm 6 and the usual SVRG implementations).
Groups are global row ranges, so the sequence of rows -- and the model --
does not depend on how the rows are split into chunks or over workers; and
a group lives on one block, so an epoch costs one call per run of groups on
the same block, not one per row. Full-gradient snapshots are sums over
blocks and differ between splits only by the order of floating-point sums.

Step rules (``step``): ``"1/k"`` (the paper's alpha = 1/k with k the epoch --
the outer iteration of Algorithms 1-8 -- scaled by ``step_size``),
``"constant"`` (``step_size``), ``"decay"`` (alpha_t = step_size / (1 +
step_decay t), t the global step; set ``step_decay`` to tune).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

SOLVERS = ("sgd", "svrg1", "svrg2", "svrg3", "saga", "sag", "s2gd", "vrlite", "batching_svrg", "mixed_svrg")
STEP_RULES = ("1/k", "constant", "decay")


@dataclass
class VRResult:
    """Outcome of :func:`minimize`."""

    W: np.ndarray
    objective_history: list
    epochs: int
    step_size: float
    seconds: float
    eval_seconds: float
    history_epochs: list = field(default_factory=list)


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
    callback=None,
) -> VRResult:
    """Run ``epochs`` epochs of ``solver`` from W0.

    Parameters
    ----------
    problem : LinearMultiLabelProblem (or any object with its four operations)
    W0 : float64 (d, K)
    solver : str
        One of ``SOLVERS``.
    epochs : int
    step : {"1/k", "constant", "decay"}
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
        Evaluate F(W) before the first and after every epoch (not timed in ``seconds``).
    callback : callable, optional
        ``callback(epoch, W)`` after every epoch.

    Returns
    -------
    VRResult
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if step not in STEP_RULES:
        raise ValueError(f"step must be one of {STEP_RULES}, got {step!r}")
    if not (isinstance(epochs, (int, np.integer)) and epochs >= 1):
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
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
    history, hist_epochs, eval_s = [], [], 0.0

    def record_now(k):
        nonlocal eval_s
        if record:
            t0 = time.perf_counter()
            history.append(problem.value(W))
            hist_epochs.append(k)
            eval_s += time.perf_counter() - t0

    record_now(0)
    start = time.perf_counter()
    st = {"t": 0, "A": None, "w_bar": None, "g_bar": None}
    for k in range(1, epochs + 1):
        rng = np.random.default_rng(seeds[k])
        order = epoch_order(n, problem.group_rows, rng)
        alpha0, decay, t0 = _alpha(step, step_size, step_decay, k, st["t"])
        spec = dict(lam=lam, alpha0=alpha0, decay=decay, t0=t0)
        W = _EPOCHS[solver](problem, W, order, spec, st, rng, k, dict(B=B, nu=nu))
        st["t"] += n
        if callback is not None:
            callback(k, W)
        pause = time.perf_counter()
        record_now(k)
        start += time.perf_counter() - pause
    return VRResult(
        W=W,
        objective_history=history,
        epochs=epochs,
        step_size=step_size,
        seconds=time.perf_counter() - start,
        eval_seconds=eval_s,
        history_epochs=hist_epochs,
    )


# -- one epoch of each method --------------------------------------------------------
def _epoch_sgd(problem, W, order, spec, st, rng, k, opts):
    return problem.run_inner(W, order, spec)["W"]


def _snapshot_epoch(problem, W, order, spec, st, rng, output, rows=None, mixed=False, nu=0.0):
    """One outer iteration of Algorithms 2, 5, 7, 8: snapshot at W, n inner steps, the output."""
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
