"""Online Matrix Factorization's learning loop (Otálora-Montenegro et al.; seed 004), Algorithm 1; no Dask.

Minibatch SGD on P and Q of eq. 1 with each minibatch's codes in closed
form (:mod:`dmlr.objectives.omf`), over a stream of row blocks, in the
process that reads them (:class:`dmlr.models.omf.OMF` runs it on a worker
or here through :func:`dmlr.distributed.stream.run_streaming`). Rows are
regrouped into fixed windows of the global row order, each permuted by its
own seeded generator, so the minibatches depend on the seed and the rows
only (see :mod:`dmlr.models.omf`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from dmlr.data.blocks import regroup_rows
from dmlr.errors import DmlrInputError
from dmlr.objectives import omf as objective
from dmlr.solvers.result import SolverResult


class OMFState(NamedTuple):
    """Everything Algorithm 1 needs to continue: the factors and the counts.

    Attributes
    ----------
    P : float64 (k, s)
        Feature factor (k features, s = ``n_components``).
    Q : float64 (l, s)
        Label factor.
    t : int
        Minibatch updates so far (the learning rate's clock).
    epoch : int
        Epochs so far (each epoch's shuffle is seeded by it).
    """

    P: np.ndarray
    Q: np.ndarray
    t: int
    epoch: int


def init_factors(k: int, l: int, s: int, seed, scale: float):
    """P^(0), Q^(0) of Algorithm 1 (RANDOM-MATRIX): N(0, scale^2) entries from ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence([0 if seed is None else int(seed), 4, 0]))
    return scale * rng.standard_normal((k, s)), scale * rng.standard_normal((l, s))


def checked_blocks(stream):
    """The stream's blocks, each checked (finite X, 0/1 Y), which
    :mod:`dmlr.validation` does not do for dask input (it would compute it)."""
    row0 = 0
    for block in stream:
        X, Y = block.X, block.Y
        vals = X.data if sp.issparse(X) else X
        if not np.all(np.isfinite(vals)):
            bad = int(np.flatnonzero(~np.isfinite(X.toarray() if sp.issparse(X) else X).all(axis=1))[0])
            raise DmlrInputError("X holds a non-finite value (NaN or inf)", row=row0 + bad)
        if Y.size and (Y.min() < 0 or Y.max() > 1):
            bad = int(np.flatnonzero(((Y < 0) | (Y > 1)).any(axis=1))[0])
            raise DmlrInputError("labels must be 0 or 1", row=row0 + bad)
        row0 += block.n_rows
        yield block


def omf_train_stream(stream, state, cfg: dict) -> SolverResult:
    """Run ``cfg["epochs"]`` epochs of Algorithm 1 over ``stream`` from ``state``.

    Parameters
    ----------
    stream : iterable of blocks
        Row blocks (``X`` dense or CSR float64, ``Y`` int8, ``n_rows``), in
        the rows' order, iterated once per epoch; the stream has
        ``n_features``, ``n_labels`` and ``n_rows``
        (:class:`dmlr.distributed.stream.ChunkStream`).
    state : OMFState, SolverResult or None
        Where to continue from, or a result of this function (its ``state``);
        None: a fresh start from the seed.
    cfg : dict
        alpha, lam, dim, eta0, decay, batch_size, shuffle_window, seed,
        init_scale, epochs.

    Returns
    -------
    dmlr.solvers.result.SolverResult
        ``x``: P; ``objective_history``: eq. 1 of each epoch run here; ``n_iter``: the
        minibatch updates so far; ``state``: the new :class:`OMFState`.
    """
    from threadpoolctl import threadpool_limits

    k, l, n = stream.n_features, stream.n_labels, stream.n_rows
    if isinstance(state, SolverResult):
        state = state.state
    if state is None:
        P, Q = init_factors(k, l, int(cfg["dim"]), cfg["seed"], float(cfg["init_scale"]))
        t, epoch = 0, 0
    else:
        P, Q = np.array(state.P, dtype=np.float64), np.array(state.Q, dtype=np.float64)
        t, epoch = int(state.t), int(state.epoch)
    alpha, lam, b = float(cfg["alpha"]), float(cfg["lam"]), int(cfg["batch_size"])
    window = int(cfg["shuffle_window"]) or b
    seed = 0 if cfg["seed"] is None else int(cfg["seed"])
    history = []
    # One BLAS thread: the same summation order on any worker and in-process, hence
    # identical models wherever the loop runs.
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(int(cfg["epochs"])):
            total = 0.0
            # windows are fixed global row ranges, whatever the chunking
            for w, win in enumerate(regroup_rows(checked_blocks(stream), window)):
                Xw, Yw = win.X, win.Y
                m = Yw.shape[0]
                if cfg["shuffle_window"]:
                    # SAMPLE-WITHOUT-REPLACEMENT of Algorithm 1, within the window; RESTART-SAMPLING
                    # per epoch (a new permutation from the epoch in the seed).
                    order = np.random.default_rng(np.random.SeedSequence([seed, 4, 1, epoch, w])).permutation(m)
                    Xw, Yw = Xw[order], Yw[order]
                for a in range(0, m, b):
                    lr = objective.learning_rate(t, cfg["eta0"], cfg["decay"])
                    P, Q, loss = objective.sgd_step(Xw[a : a + b], Yw[a : a + b], P, Q, alpha, lam, lr, n)
                    total += loss
                    t += 1
            if not (np.all(np.isfinite(P)) and np.all(np.isfinite(Q))):
                raise FloatingPointError(
                    f"OMF diverged in epoch {epoch + 1} (non-finite P or Q); lower learning_rate (now {cfg['eta0']})"
                )
            # eq. 1 of the epoch: the rows' shares at the codes and factors they were
            # seen with (progressive), plus the ridge on the epoch's final P, Q.
            history.append(total + lam * (float(np.vdot(P, P)) + float(np.vdot(Q, Q))))
            epoch += 1
    return SolverResult(x=P, objective_history=history, n_iter=t, state=OMFState(P, Q, t, epoch))
