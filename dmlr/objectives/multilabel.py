"""Linear multi-label losses over row blocks, and the problem the stochastic solvers see.

    F(W) = 1/n sum_i l(x_i W; y_i) + lam/2 ||W||_F^2

with l one of :data:`dmlr.kernels.multilabel_losses.LOSSES` (Hiranandani &
Pareek, eqs. 16, 19, 20-22, and the ranking losses of Park & Choi and Wu et al.),
W (d, K) including the bias row when the blocks carry a constant column
(regularized like the rest, as in :mod:`dmlr.objectives.ranksvm`).

:class:`LinearMultiLabelProblem` is the one interface between the solvers of
:mod:`dmlr.solvers.vr` (plain numpy, no Dask) and the data: full gradients
map-reduced over the blocks of a :class:`dmlr.distributed.chunks.ChunkSet`
(in this process or on Dask workers), and the stochastic inner loops run
block by block where each block lives, with the iterate travelling between
them (a d x K matrix). Per-row solver memory (the SAG/SAGA tables) is kept on
the block it belongs to.
"""

from __future__ import annotations

import uuid

import numpy as np

from dmlr.data.blocks import Block
from dmlr.kernels.gram import row_sq_norms
from dmlr.kernels.multilabel_losses import GEBRU_EPS, block_loss_grad, loss_code, row_gradients, vr_inner_loop

#: Upper bounds on the curvature of each loss in its scores, per unit ||x||^2, used for
#: the default step size 1/L (L = curvature * max ||x_i||^2 + lam). Hamming: the logistic's
#: 1/4 over K labels; subset: c * 1/2 (softmax Hessian diag(q) - qq^T has norm <= 1/2) with c
#: the row's number of relevant labels; gebru: 1 (a measured bound, no proof); rank_hinge is
#: not smooth (1 by convention); rank_squared_hinge: 2 (``2 max(|P|, |N|) / (|P| |N|) <= 2``).
CURVATURE = {
    "hamming": lambda K, c: 0.25 / K,
    "subset": lambda K, c: 0.5 * max(c, 1),
    "gebru": lambda K, c: 1.0,
    "rank_hinge": lambda K, c: 1.0,
    "rank_squared_hinge": lambda K, c: 2.0,
}


def block_value_and_grad(block: Block, W, code: int, rows=None, want_grad: bool = True):
    """(sum of row losses, sum of x_i g_i^T, number of rows) over a block, or over ``rows`` of it."""
    loss, grad = block_loss_grad(block.X, block.Y, W, code, rows, want_grad=want_grad)
    n = block.n_rows if rows is None else len(rows)
    return loss, grad, n


def block_row_stats(block: Block):
    """(max ||x_i||^2, max number of relevant labels, number of labels) of a block."""
    sq = row_sq_norms(block.X)
    return (
        float(sq.max()) if sq.size else 0.0,
        int(block.Y.sum(axis=1).max()) if block.n_rows else 0,
        int(block.Y.shape[1]),
    )


def block_init_memory(block: Block, W, code: int, token: str):
    """Store the block's per-row SAG/SAGA table U_i = dl_i/ds at W; return sum_i x_i U_i^T.

    The table (n_block x K float64) stays on the block, under ``token`` (one
    fit's tables never mix with another's).
    """
    U = row_gradients(block.X, block.Y, W, code)
    block.solver_memory = {"token": token, "U": U}
    return np.asarray(block.X.T @ U)


def block_inner_loop(block: Block, rows, W, code: int, spec: dict):
    """Run :func:`~dmlr.kernels.multilabel_losses.vr_inner_loop` on local ``rows`` of the block from a copy of W.

    Returns the new W, the loss sum and whichever accumulators ``spec`` asked
    for (``"W_sum"``, ``"G_sum"``, ``"capture_at"``, the memory mean ``"A"``).
    """
    W = np.array(W, dtype=np.float64, order="C", copy=True)
    out = {}
    kw = dict(
        lam=spec["lam"],
        alpha0=spec["alpha0"],
        decay=spec.get("decay", 0.0),
        t0=spec.get("t0", 0),
        W_ref=spec.get("W_ref"),
        mu=spec.get("mu"),
        gebru_eps=GEBRU_EPS,
    )
    if spec.get("ref_mask") is not None:
        kw["ref_mask"] = spec["ref_mask"]
    for name in ("W_sum", "G_sum"):
        if spec.get(name) is not None:
            out[name] = np.array(spec[name], dtype=np.float64, copy=True)
            kw[name] = out[name]
    if spec.get("capture_at", -1) >= 0:
        out["W_capture"] = np.zeros_like(W)
        kw["capture_at"], kw["W_capture"] = spec["capture_at"], out["W_capture"]
    if spec.get("A") is not None:
        mem = getattr(block, "solver_memory", None)
        if mem is None or mem.get("token") != spec["token"]:
            raise RuntimeError(
                "the SAG/SAGA memory table of a block is gone (its worker restarted?); refit from the start"
            )
        out["A"] = np.array(spec["A"], dtype=np.float64, copy=True)
        kw.update(U=mem["U"], A=out["A"], mem_scale=spec["mem_scale"], n_total=spec["n_total"])
    out["loss"] = vr_inner_loop(block.X, block.Y, rows, W, code, **kw)
    out["W"] = W
    return out


class LinearMultiLabelProblem:
    """F(W) over the blocks of a chunk set, as the solvers of :mod:`dmlr.solvers.vr` see it.

    Parameters
    ----------
    chunks : ChunkSet
        Row blocks (bias column included if wanted), built with ``align_rows``
        equal to ``group_rows`` so that no row group straddles two blocks.
    loss : str
        One of :data:`~dmlr.kernels.multilabel_losses.LOSSES`.
    lam : float
        Ridge weight.
    group_rows : int
        Size of the row groups the solvers shuffle (see :mod:`dmlr.solvers.vr`).
    """

    def __init__(self, chunks, loss: str, lam: float, group_rows: int):
        self.chunks = chunks
        self.loss = loss
        self.code = loss_code(loss)
        self.lam = float(lam)
        self.group_rows = int(group_rows)
        self.n_rows = int(chunks.n_rows)
        bounds = chunks.bounds
        self._edges = np.array([a for a, _ in bounds] + [bounds[-1][1]], dtype=np.int64)
        if any(a % self.group_rows for a, _ in bounds):
            raise ValueError("chunk set blocks are not aligned to group_rows (build it with align_rows)")
        self._token = None

    # -- full passes ------------------------------------------------------------------
    def _rows_per_block(self, rows):
        if rows is None:
            return [None] * (len(self._edges) - 1)
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        cuts = np.searchsorted(rows, self._edges)
        return [rows[a:b] - e for a, b, e in zip(cuts[:-1], cuts[1:], self._edges[:-1])]

    def data_value_and_grad(self, W, rows=None, want_grad: bool = True):
        """Mean loss and mean x_i g_i^T over all rows (or ``rows``, global indices); no ridge."""
        per_block = self._rows_per_block(rows)
        if rows is None:
            loss, grad, n = self.chunks.map_reduce(block_value_and_grad, W, self.code, None, want_grad)
        else:
            results = [
                self.chunks.apply_block(b, block_value_and_grad, W, self.code, r, want_grad)
                for b, r in enumerate(per_block)
                if len(r)
            ]
            loss = sum(r[0] for r in results)
            grad = sum(r[1] for r in results) if want_grad else None
            n = sum(r[2] for r in results)
        return loss / n, (grad / n if want_grad else None)

    def value(self, W) -> float:
        """F(W)."""
        loss, _ = self.data_value_and_grad(W, want_grad=False)
        return float(loss + 0.5 * self.lam * np.vdot(W, W))

    def value_and_grad(self, W):
        """F(W) and its gradient (for L-BFGS and the tests)."""
        loss, grad = self.data_value_and_grad(W)
        return float(loss + 0.5 * self.lam * np.vdot(W, W)), grad + self.lam * W

    def default_step_size(self) -> float:
        """1/L with L = curvature(loss) * max_i ||x_i||^2 + lam (see :data:`CURVATURE`)."""
        stats = self.chunks.map_blocks(block_row_stats)
        max_sq = max(s[0] for s in stats)
        max_c = max(s[1] for s in stats)
        L = CURVATURE[self.loss](stats[0][2], max_c) * max_sq + self.lam
        return 1.0 / L if L > 0 else 1.0

    # -- solver memory -----------------------------------------------------------------
    def init_memory(self, W):
        """SAG/SAGA tables at W on every block; returns their mean A = 1/n sum_i x_i U_i^T."""
        self._token = f"vr-{uuid.uuid4().hex}"  # a name, not a modelling choice: no seed needed
        return self.chunks.map_reduce(block_init_memory, W, self.code, self._token) / self.n_rows

    # -- stochastic passes ---------------------------------------------------------------
    def run_inner(self, W, order, spec: dict) -> dict:
        """Steps over the global rows ``order`` from W, block by block in order of appearance.

        ``spec`` as :func:`block_inner_loop`'s (without the token), with
        ``"ref_mask"`` (per step) and ``"capture_at"`` (a step index into
        ``order``) in global step numbering. Returns the final W, the summed
        loss and the accumulators.
        """
        order = np.asarray(order, dtype=np.int64)
        block_of = np.searchsorted(self._edges, order, side="right") - 1
        cuts = np.flatnonzero(np.diff(block_of)) + 1
        starts = np.concatenate([[0], cuts]).astype(np.int64)
        stops = np.concatenate([cuts, [order.size]]).astype(np.int64)
        carry = {k: spec[k] for k in ("W_sum", "G_sum", "A") if spec.get(k) is not None}
        capture = int(spec.get("capture_at", -1))
        total, W_capture = 0.0, None
        for a, b in zip(starts, stops):
            blk = int(block_of[a])
            sub = dict(
                spec,
                **carry,
                t0=int(spec.get("t0", 0)) + int(a),
                token=self._token,
                capture_at=(capture - a) if a <= capture < b else -1,
            )
            if spec.get("ref_mask") is not None:
                sub["ref_mask"] = spec["ref_mask"][a:b]
            out = self.chunks.apply_block(blk, block_inner_loop, order[a:b] - self._edges[blk], W, self.code, sub)
            W = out["W"]
            total += out["loss"]
            carry = {k: out[k] for k in carry}
            if "W_capture" in out:
                W_capture = out["W_capture"]
        return dict(carry, W=W, loss=total, W_capture=W_capture)
