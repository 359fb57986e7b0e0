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
  repeats the call with that sent (W_{t-1}, or the pair [W_t | G_{t+1}] for
  a sparse block): the blocks' replies are summed on the workers
  (:meth:`~dmlr.distributed.chunks.ChunkSet.map_reduce`, :func:`merge_replies`),
  so a call is all the blocks or none, and blocks losing their state is rare
  (the first call, a rebuilt block);
* a block whose arguments are its caller's own arrays (a block in this
  process: :class:`~dmlr.distributed.chunks.LocalChunks`, or a worker in
  this process) may keep references but must not write into them; a block
  call learns which by comparing the sender's :data:`~dmlr.distributed.chunks.PROCESS_TOKEN` with its
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

from dmlr.distributed.chunks import PROCESS_TOKEN, add_results
from dmlr.solvers.prox import LowRank

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
    """The answer of a run of neighbouring blocks to a speculative call (:func:`answer_block`).

    One block's answer, or two neighbouring runs' merged
    (:func:`merge_replies`) where the blocks' results are summed.

    Attributes
    ----------
    values : float64 (2,) or None
        The run's share of f at W and at G; None when a block of the run
        asked to be resent something.
    grad : float64 (d, l) or None
        The run's share of grad f(G); None as ``values``.
    resend : tuple of (Resend or None)
        Per block of the run: what it needs sent to answer (it holds
        nothing under the previous key), or None (answered).
    holds : tuple of bool
        Per block: whether it keeps this call's point, so that a later
        call may name it by key. False for a block that must be sent its
        point every call.
    wants : tuple of Resend
        Per block: what it needs sent when it holds nothing.
    """

    values: np.ndarray | None
    grad: np.ndarray | None
    resend: tuple
    holds: tuple
    wants: tuple


def merge_replies(a: BlockReply, b: BlockReply) -> BlockReply:
    """The reply of run ``a`` followed by run ``b``: their shares summed, their blocks' flags in order."""
    resend = a.resend + b.resend
    if any(r is not None for r in resend):
        values = grad = None  # the call is repeated; nothing to sum
    else:
        values, grad = add_results((a.values, a.grad), (b.values, b.grad))
    return BlockReply(values, grad, resend, a.holds + b.holds, a.wants + b.wants)


def answer_block(block, step_fn, wants_pair_fn, W, momentum, prev_key, key, sent, sender, *args) -> BlockReply:
    """The block's side of :class:`ExtrapolationCache` (runs where the block is).

    ``step_fn(block, W, momentum, held, sent, W_is_scratch, *args)`` is the
    objective's speculative call (returning an
    :class:`~dmlr.objectives.rbrl.ExtrapolatedStep`) and
    ``wants_pair_fn(block)`` says whether a block holding nothing needs
    [W | G] rather than W_prev. ``prev_key`` names the previous call's point
    (None: nothing held is used), ``key`` this call's, ``sent`` maps what
    was sent (a :class:`Resend`) to its array (None: nothing sent) and
    ``sender`` is the caller's :data:`~dmlr.distributed.chunks.PROCESS_TOKEN`. A block that holds
    the previous point uses it whatever was sent. ``W`` may come as its
    factors (:class:`~dmlr.solvers.prox.LowRank`), and is then formed here
    by the product the caller formed it by.
    """
    wants = Resend.POINT_PAIR if wants_pair_fn(block) else Resend.PREVIOUS_POINT
    entry = block.state.get(STATE_KEY)
    held = entry[1] if entry is not None and prev_key is not None and entry[0] == prev_key else None
    # a sparse block can also form its pair from a sent W_prev
    given = None if sent is None else sent.get(wants, sent.get(Resend.PREVIOUS_POINT))
    if held is None and given is None:
        return BlockReply(None, None, (wants,), (False,), (wants,))
    if isinstance(W, LowRank):
        W = W.expand()
    # a failed call leaves nothing that a later key could name; and a point not used is let go
    # before the step makes the new one (a dense block's scores are as large as its X)
    del entry
    block.state.pop(STATE_KEY, None)
    step = step_fn(block, W, momentum, held, None if held is not None else given, sender != PROCESS_TOKEN, *args)
    if step.held is not None:
        block.state[STATE_KEY] = (key, step.held)
    return BlockReply(step.values, step.grad, (None,), (step.held is not None,), (wants,))


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
        self._up_front: frozenset = frozenset()  # what blocks that keep nothing are sent each call
        self.n_resent = 0

    def __call__(self, W: np.ndarray, W_prev: np.ndarray, momentum: float, G: np.ndarray, low_rank=None):
        """Summed block shares of f at [W, G] and of grad f(G), G = W + momentum (W - W_prev).

        W, W_prev, G : float64 (d, l), never written. ``low_rank``, a
        :class:`~dmlr.solvers.prox.LowRank` whose ``expand()`` is W, is sent
        in place of W. Returns (values float64 (2,), grad float64 (d, l)).

        One summed call over the blocks answers it, unless a block held
        nothing under the previous key; the call is then repeated with what
        the blocks need sent to every block, which gives the same sums.
        """
        key = (self._run, next(self._calls))
        sent = _Sent(W, W_prev, G)
        point = W if low_rank is None else low_rank
        prev_key = self._last_key if self._last_W is W_prev else None
        reply = self._reduce(point, momentum, prev_key, key, sent.of(self._up_front))
        asked = [r for r in reply.resend if r is not None]
        if asked:
            self.n_resent += len(asked)
            reply = self._reduce(point, momentum, None, key, sent.of(set(reply.wants)))
            still = [r.name for r in reply.resend if r is not None]
            if still:
                raise RuntimeError(f"blocks were sent what they asked for and still ask for {still}")
        self._up_front = frozenset(w for w, h in zip(reply.wants, reply.holds) if not h)
        self._last_W, self._last_key = W, key
        return reply.values, reply.grad

    def _reduce(self, W, momentum, prev_key, key, sent) -> BlockReply:
        return self.chunks.map_reduce(
            answer_block,
            *self._fns,
            W,
            momentum,
            prev_key,
            key,
            sent,
            PROCESS_TOKEN,
            *self._args,
            combine=merge_replies,
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

    def of(self, kinds) -> dict | None:
        """``{kind: array}`` for each of ``kinds`` (None when there is none)."""
        return {k: self.get(k) for k in kinds} or None
