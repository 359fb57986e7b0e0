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

from dmlr.data.arrays import as_matrix, is_sparse


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
    return concat_blocks([X], [Y], fit_intercept)


def concat_blocks(parts_X, parts_Y, fit_intercept: bool, *, consume: bool = False) -> Block:
    """Concatenate adjacent chunks into one block (order kept), the bias column appended if asked.

    The block's X is allocated once, at its final size, and the parts are
    converted (:func:`dmlr.data.arrays.as_matrix`) and copied into it one
    at a time: a worker building a block holds the parts, the block and one
    part's conversion, where stacking the parts and then appending the bias
    would hold the parts and two more copies of the block at once. One part
    that needs neither is kept as it is (no copy).

    Parameters
    ----------
    parts_X : list of (m_i, d) ndarray, scipy.sparse or pydata sparse
        Dense or sparse as the first part is.
    parts_Y : list of (m_i, l) array-like of 0/1
    fit_intercept : bool
    consume : bool
        Sparse parts: drop each from the list ``parts_X`` once copied, so
        that the parts' memory goes as the block's fills.

    Returns
    -------
    Block
        X float64 (sum m_i, d + fit_intercept), dense C-contiguous or CSR
        with sorted indices when the parts' are sorted; Y int8.
    """
    Y = np.asarray(parts_Y[0]) if len(parts_Y) == 1 else np.concatenate([np.asarray(y) for y in parts_Y], axis=0)
    Y = np.ascontiguousarray(Y, dtype=np.int8)
    if len(parts_X) == 1 and not fit_intercept:
        return Block(X=as_matrix(parts_X[0]), Y=Y)
    sparse = is_sparse(parts_X[0])
    X = _stack_csr(parts_X, fit_intercept, consume) if sparse else _stack_dense(parts_X, fit_intercept)
    return Block(X=X, Y=Y)


def _stack_dense(parts, bias: bool) -> np.ndarray:
    m, d = sum(int(p.shape[0]) for p in parts), int(parts[0].shape[1])
    out = np.empty((m, d + int(bias)))
    a = 0
    for p in parts:
        b = a + int(p.shape[0])
        out[a:b, :d] = as_matrix(p) if is_sparse(p) else p
        a = b
    if bias:
        out[:, d] = 1.0
    return out


def _stack_csr(parts, bias: bool, consume: bool = False) -> sp.csr_matrix:
    """CSR rows of ``parts`` in order, with a last column of ones when ``bias``.

    The bias entry is each row's last stored entry (the largest column index,
    so sorted rows stay sorted). ``consume``: drop each part from the list
    ``parts`` once copied, so that the parts' memory goes as the block's
    fills (its arrays are allocated, not written, beforehand).
    """
    m, d = sum(int(p.shape[0]) for p in parts), int(parts[0].shape[1])
    nnz = sum(int(p.nnz) for p in parts) + m * int(bias)
    idx_dtype = np.int32 if max(nnz, d + 1) < np.iinfo(np.int32).max else np.int64
    data, indices = np.empty(nnz), np.empty(nnz, dtype=idx_dtype)
    indptr = np.empty(m + 1, dtype=idx_dtype)
    indptr[0] = 0
    row, at = 0, 0
    for i in range(len(parts)):
        c = as_matrix(parts[i])
        if consume:
            parts[i] = None
        rows, lengths = c.shape[0], np.diff(c.indptr)
        shift = np.arange(rows + 1) if bias else 0
        indptr[row + 1 : row + rows + 1] = at + c.indptr[1:] + (shift[1:] if bias else 0)
        if bias:
            # entry j of row i moves i places right; the bias takes each row's last place
            dest = at + np.arange(c.nnz) + np.repeat(shift[:-1], lengths)
            data[dest], indices[dest] = c.data, c.indices
            last = at + c.indptr[1:] + shift[1:] - 1
            data[last], indices[last] = 1.0, d
        else:
            data[at : at + c.nnz], indices[at : at + c.nnz] = c.data, c.indices
        row, at = row + rows, int(indptr[row + rows])
        del c
    return sp.csr_matrix((data, indices, indptr), shape=(m, d + int(bias)), copy=False)


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
