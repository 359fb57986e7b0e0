"""The oracle a solver calls for an objective summed over a chunk set's row blocks.

The adapter between the distributed layer and the solvers: a solver asks
for values and a gradient at stacked points (:class:`dmlr.solvers.apg.Oracle`),
this oracle maps the objective's block functions over the chunks and sums
them (:meth:`dmlr.distributed.chunks.ChunkSet.map_reduce`), and answers APG's speculative calls
through an :class:`~dmlr.distributed.extrapolation.ExtrapolationCache`.
"""

from __future__ import annotations

from dmlr.distributed.extrapolation import ExtrapolationCache
from dmlr.solvers.apg import Oracle


class ChunkOracle(Oracle):
    """f of RBRL over a chunk set, as :func:`dmlr.solvers.apg.apg` asks for it.

    Parameters
    ----------
    chunks : ChunkSet
    block_fns : (value_and_grad, extrapolated_value_and_grad, wants_pair)
        The objective's block functions (:mod:`dmlr.objectives.rbrl` or
        :mod:`dmlr.objectives.kernel_rbrl`): the stacked call, summed over
        the blocks, and the speculative call, through an
        :class:`~dmlr.distributed.extrapolation.ExtrapolationCache`.
    args : tuple
        The objective's parameters, after each block function's own arguments.
    finish : callable, optional
        ``finish(values, grad, points, grad_point) -> (values, grad)``, applied
        to the blocks' sums: the terms that are not sums over rows, such as
        the linear model's ridge (eq. 17, :func:`dmlr.objectives.rbrl.add_ridge`);
        the kernel model's ridge is in its block shares.

    Attributes
    ----------
    n_factored : int
        Speculative calls that shipped the new point as low-rank factors.

    Notes
    -----
    When the prox's result W_t was formed as a product of thin factors (a
    low-rank W, :class:`~dmlr.solvers.prox.LowRank`) and they take at most
    :attr:`max_factor_fraction` of W's floats, the speculative call sends the
    factors to blocks on Dask workers, which form W by the same product: the
    same numbers for a fraction of the bytes (blocks in this process are
    handed W itself, which costs nothing to send). The solver is not
    involved: the prox tells the oracle which of its results are factored
    (:meth:`note_factors`), and the oracle recognizes the very array when
    the solver passes it back.
    """

    #: Factors are shipped when they hold at most this fraction of W's floats (0: never).
    max_factor_fraction = 0.5

    def __init__(self, chunks, block_fns, args: tuple, finish=None):
        value_and_grad, extrapolated, wants_pair = block_fns
        self.chunks, self.value_and_grad, self.args, self.finish = chunks, value_and_grad, tuple(args), finish
        self.cache = ExtrapolationCache(chunks, extrapolated, wants_pair, self.args)
        self._factored = (None, None)
        self.n_factored = 0

    def note_factors(self, W, low_rank) -> None:
        """Record that ``W`` is ``low_rank.expand()`` (None: W has no factors), for the next speculative call."""
        self._factored = (W, low_rank)

    def __call__(self, points, grad_point):
        return self.submit(points, grad_point)()

    def submit(self, points, grad_point):
        wait = self.chunks.map_reduce_async(self.value_and_grad, points, grad_point, *self.args)

        def result():
            values, grad = wait()
            if self.finish is None:
                return values, grad
            return self.finish(values, grad, points, grad_point)

        return result

    def extrapolated(self, W, W_prev, momentum, G):
        noted, low_rank = self._factored
        ship = (
            noted is W
            and low_rank is not None
            and self.chunks.backend == "dask"
            and low_rank.size <= self.max_factor_fraction * W.size
        )
        self.n_factored += ship
        values, grad = self.cache(W, W_prev, momentum, G, low_rank if ship else None)
        if self.finish is None:
            return values, grad
        return self.finish(values, grad, (W, G), 1)
