"""The in-memory form of one row chunk that the kernels and objectives work on.

A :class:`Block` holds the rows of one chunk with X either dense float64
(C-contiguous) or scipy CSR float64, never densified, the bias column already
appended when the model uses one, and Y as int8 0/1. The distributed layer
builds blocks where they will be used (:func:`make_block`,
:func:`concat_blocks`) and the streamed solvers regroup them
(:func:`regroup_rows`); this module imports no other layer of dmlr.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from dmlr.data.arrays import as_matrix


@dataclass
class Block:
    """One row chunk of a training set, ready for the kernels.

    Attributes
    ----------
    X : float64 ndarray (m, d) or scipy.sparse.csr_matrix (m, d)
    Y : int8 ndarray (m, l)
    state : dict
        What a solver keeps on the block between calls, where the block
        lives (e.g. the last APG point and its scores,
        :class:`dmlr.distributed.extrapolation.ExtrapolationCache`).
        Empty on a new or rebuilt block: nothing may depend on it but speed.
    """

    X: object
    Y: np.ndarray
    state: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def n_rows(self) -> int:
        return int(self.Y.shape[0])


def append_bias(X):
    """Append a constant-1 column (the paper's bias by an extra feature)."""
    ones = np.ones((X.shape[0], 1))
    if sp.issparse(X):
        return sp.hstack([X, sp.csr_matrix(ones)], format="csr")
    return np.hstack([X, ones])


def make_block(X, Y, fit_intercept: bool) -> Block:
    """Build a :class:`Block` from any chunk type, appending the bias column if asked."""
    X = as_matrix(X)
    if fit_intercept:
        X = append_bias(X)
    return Block(X=X, Y=np.ascontiguousarray(np.asarray(Y), dtype=np.int8))


def concat_blocks(parts_X, parts_Y, fit_intercept: bool) -> Block:
    """Concatenate adjacent chunks into one block (order kept)."""
    Xs = [as_matrix(x) for x in parts_X]
    X = sp.vstack(Xs, format="csr") if sp.issparse(Xs[0]) else np.concatenate(Xs, axis=0)
    return make_block(X, np.concatenate([np.asarray(y) for y in parts_Y], axis=0), fit_intercept)


def _stack(parts_X, parts_Y) -> Block:
    if len(parts_X) == 1:
        return Block(X=parts_X[0], Y=parts_Y[0])
    return concat_blocks(parts_X, parts_Y, fit_intercept=False)


def regroup_rows(blocks, size: int):
    """The rows of an iterable of blocks as consecutive blocks of ``size`` rows (the last one shorter).

    Pieces of adjacent blocks are concatenated, so the groups are fixed global
    row ranges: they do not depend on how the rows were chunked (the seeded
    row orders of the streamed solvers are drawn per group).
    """
    xs, ys, have = [], [], 0
    for blk in blocks:
        a = 0
        while a < blk.n_rows:
            take = min(size - have, blk.n_rows - a)
            xs.append(blk.X[a : a + take])
            ys.append(blk.Y[a : a + take])
            have += take
            a += take
            if have == size:
                yield _stack(xs, ys)
                xs, ys, have = [], [], 0
    if have:
        yield _stack(xs, ys)
