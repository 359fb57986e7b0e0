"""The APG's speculative call with the previous point kept on the row blocks.

Each APG iteration asks for f at W_t and at G_{t+1} = W_t + m (W_t - W_{t-1})
and for grad f(G_{t+1}) (:meth:`dmlr.solvers.apg.Oracle.extrapolated`). W_{t-1}
was sent to every block by the previous call, so a block can keep it (and its
scores) and the client need send W_t only: half of what an iteration ships.
:class:`ExtrapolationCache` is the client's side of that arrangement, and
:func:`answer_block` the block's:

* the cache names every call's W with a key of its own (unique to the cache,
  so another fit on the same blocks never matches) and remembers the W it
  sent last; the next call names that key as the previous point when apg's
  W_{t-1} is that very array (apg hands it back), and no key otherwise (a
  resumed run, whose W_{t-1} was read from a checkpoint);
* a block keeps what its objective returns to keep (:class:`~dmlr.objectives.rbrl.HeldPoint`
  of :mod:`dmlr.objectives.rbrl`) under the call's key in its ``state``;
  called with a key it does not hold (a new block, a block rebuilt after its
  worker died, or one whose previous call was interrupted), it answers a
  :class:`BlockReply` whose ``resend`` says what it needs, and the cache
  sends it that (W_{t-1}, or the pair [W_t | G_{t+1}] for a sparse block) in
  a second call to that block alone;
* a block whose arguments are its caller's own arrays (a block in this
  process: :class:`~dmlr.distributed.chunks.LocalChunks`, or a worker in
  this process) may keep references but must not write into them; a block
  call learns which by comparing the sender's :data:`PROCESS_TOKEN` with its
  own. A sparse block then keeps nothing (its pair would be the caller's),
  says so (``holds=False``), and the cache sends the one pair to every such
  block with each call.

The arithmetic does not depend on what was held or resent, so a fit gives
the same numbers whatever the blocks lost on the way.
"""

from __future__ import annotations

import enum
import itertools
import uuid
from typing import NamedTuple

import numpy as np

from dmlr.distributed.chunks import add_results, tree_reduce
from dmlr.solvers.prox import LowRank

#: Names this process: a block call sent from the process it runs in is handed the
#: caller's arrays, not copies.
PROCESS_TOKEN = uuid.uuid4().hex
#: The key of ``Block.state`` (:class:`dmlr.data.blocks.Block`) under which a block
#: keeps ``(call key, held point)``.
STATE_KEY = "dmlr.extrapolation"


class Resend(enum.Enum):
    """What a block that holds nothing under the named key needs to answer."""

    #: W_{t-1} (d, l).
    PREVIOUS_POINT = enum.auto()
    #: [W_t | G_{t+1}] (d, 2l), G formed as apg forms it.
    POINT_PAIR = enum.auto()


class BlockReply(NamedTuple):
    """One block's answer to a speculative call (:func:`answer_block`).

    Attributes
    ----------
    values : float64 (2,) or None
        The block's share of f at W and at G; None when ``resend`` is set.
    grad : float64 (d, l) or None
        The block's share of grad f(G); None when ``resend`` is set.
    resend : Resend or None
        What the block needs sent to answer (it holds nothing under the
        previous key); None when answered.
    holds : bool
        Whether the block keeps this call's point: a later call may name
        it by key. False for a block that must be sent its point every call.
    """

    values: np.ndarray | None
    grad: np.ndarray | None
    resend: Resend | None = None
    holds: bool = False


def answer_block(block, step_fn, wants_pair_fn, W, momentum, prev_key, key, sent, sender, *args) -> BlockReply:
    """The block's side of :class:`ExtrapolationCache` (runs where the block is).

    ``step_fn(block, W, momentum, held, sent, W_is_scratch, *args)`` is the
    objective's speculative call (returning an
    :class:`~dmlr.objectives.rbrl.ExtrapolatedStep`) and
    ``wants_pair_fn(block)`` says whether a block holding nothing needs
    [W | G] rather than W_prev. ``prev_key`` names the previous call's point
    (None: nothing held is used), ``key`` this call's, ``sent`` is what was
    resent (or None) and ``sender`` the caller's :data:`PROCESS_TOKEN`.
    ``W`` may come as its factors (:class:`~dmlr.solvers.prox.LowRank`), and
    is then formed here by the product the caller formed it by.
    """
    if isinstance(W, LowRank):
        W = W.expand()
    entry = block.state.get(STATE_KEY)
    held = entry[1] if entry is not None and prev_key is not None and entry[0] == prev_key else None
    if held is None and sent is None:
        return BlockReply(None, None, Resend.POINT_PAIR if wants_pair_fn(block) else Resend.PREVIOUS_POINT)
    # a failed call leaves nothing that a later key could name; and a point not used is let go
    # before the step makes the new one (a dense block's scores are as large as its X)
    del entry
    block.state.pop(STATE_KEY, None)
    step = step_fn(block, W, momentum, held, sent, sender != PROCESS_TOKEN, *args)
    if step.held is not None:
        block.state[STATE_KEY] = (key, step.held)
    return BlockReply(step.values, step.grad, None, step.held is not None)


class ExtrapolationCache:
    """The summed speculative call over a chunk set, W_prev kept on the blocks (see the module docstring).

    Parameters
    ----------
    chunks : ChunkSet
    step_fn : callable
        The objective's block call,
        ``step_fn(block, W, momentum, held, sent, W_is_scratch, *args) -> ExtrapolatedStep``
        (:func:`dmlr.objectives.rbrl.block_extrapolated_value_and_grad`).
    wants_pair_fn : callable
        ``wants_pair_fn(block) -> bool`` (:func:`dmlr.objectives.rbrl.block_wants_pair`).
    args : tuple
        Passed to ``step_fn`` after its own arguments.

    Attributes
    ----------
    n_resent : int
        Block calls repeated with the point sent (blocks that held nothing
        under the previous key; a block answered with the point sent up
        front is not counted).
    """

    def __init__(self, chunks, step_fn, wants_pair_fn, args: tuple = ()):
        self.chunks = chunks
        self._fns = (step_fn, wants_pair_fn)
        self._args = tuple(args)
        self._run = uuid.uuid4().hex  # keys of another cache on the same blocks never match
        self._calls = itertools.count()
        self._last_W = None
        self._last_key = None
        self._every_call: dict[int, Resend] = {}  # blocks that keep nothing: what they are sent each call
        self.n_resent = 0

    def __call__(self, W: np.ndarray, W_prev: np.ndarray, momentum: float, G: np.ndarray, low_rank=None):
        """Summed block shares of f at [W, G] and of grad f(G), G = W + momentum (W - W_prev).

        W, W_prev, G : float64 (d, l), never written. ``low_rank``, a
        :class:`~dmlr.solvers.prox.LowRank` whose ``expand()`` is W, is sent
        in place of W. Returns (values float64 (2,), grad float64 (d, l)).
        """
        key = (self._run, next(self._calls))
        sent = _Sent(W, W_prev, G)
        point = W if low_rank is None else low_rank
        chunks, kinds = self.chunks, set(self._every_call.values())
        if len(self._every_call) == chunks.n_blocks and len(kinds) == 1:
            replies = self._map(point, momentum, None, key, sent.get(kinds.pop()))
        else:
            prev_key = self._last_key if self._last_W is W_prev else None
            replies = self._map(point, momentum, prev_key, key, None)
        for i, reply in enumerate(replies):
            if reply.resend is None:
                continue
            self.n_resent += 1
            what = reply.resend
            replies[i] = reply = self._apply(i, point, momentum, key, sent.get(what))
            if reply.resend is not None:
                raise RuntimeError(f"block {i} was sent {what.name} and still asks for {reply.resend.name}")
            if not reply.holds:
                self._every_call[i] = what
        for i, reply in enumerate(replies):
            if reply.holds:
                self._every_call.pop(i, None)
        self._last_W, self._last_key = W, key
        return tree_reduce([(r.values, r.grad) for r in replies], add_results)

    def _map(self, W, momentum, prev_key, key, sent) -> list[BlockReply]:
        return self.chunks.map_blocks(
            answer_block, *self._fns, W, momentum, prev_key, key, sent, PROCESS_TOKEN, *self._args
        )

    def _apply(self, i, W, momentum, key, sent) -> BlockReply:
        return self.chunks.apply_block(
            i, answer_block, *self._fns, W, momentum, None, key, sent, PROCESS_TOKEN, *self._args
        )


class _Sent:
    """The arrays a call may send, the pair formed at most once per call."""

    def __init__(self, W, W_prev, G):
        self.W, self.W_prev, self.G = W, W_prev, G
        self.pair = None

    def get(self, what: Resend) -> np.ndarray:
        if what is Resend.PREVIOUS_POINT:
            return self.W_prev
        if self.pair is None:
            self.pair = np.concatenate([self.W, self.G], axis=1)
        return self.pair
