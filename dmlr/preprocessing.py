"""Feature scaling inside the model: statistics reduced over the row chunks, applied chunk by chunk.

Every estimator takes ``scaling``:

- ``"standard"``: centre each column by its mean and divide by its standard
  deviation (dense features only: centring would fill a sparse matrix);
- ``"maxabs"``: divide each column by its largest absolute value (keeps
  zeros, so sparse features stay sparse);
- ``"tfidf"``: weight each column by its inverse document frequency
  ``ln((1 + n) / (1 + df)) + 1`` (df: the rows where it is nonzero; scikit-learn's
  ``TfidfTransformer`` with ``smooth_idf=True``), then divide each row by its
  Euclidean norm (keeps zeros). For bag-of-words features, where it ranked as well
  as ``"maxabs"`` or better (docs/auto_fit.md's table);
- ``"auto"``: ``"standard"`` for dense features, ``"maxabs"`` for sparse ones;
- None: features as given.

A column that is constant (standard deviation or largest absolute value 0)
is left unscaled (scale 1), as scikit-learn's scalers do; a row of zeros stays
zero under ``"tfidf"``.

The statistics of a dask array are dask reductions over its row chunks
(``mean``/``std``/``max`` are tree reductions; nothing is gathered); the
scaled array is the same graph with one more ``map_blocks`` step, so each
chunk is scaled where it is read. In-memory input is scaled with numpy and
scipy. The fitted ``feature_offset_`` (zeros without centring) and
``feature_scale_`` are rounded to float32 precision (see ``_round``) and
saved in the model file.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmlr.data.arrays import gcxs_from_csr, gcxs_meta, is_dask, is_sparse, to_scipy

#: ``scaling=`` values.
SCALINGS = ("auto", "standard", "maxabs", "tfidf")


def resolve_scaling(scaling, X) -> str | None:
    """The scaling applied to X: ``scaling`` with "auto" resolved by X's storage."""
    if scaling == "auto":
        return "maxabs" if is_sparse(X) else "standard"
    if scaling == "standard" and is_sparse(X):
        raise ValueError(
            "scaling='standard' centres the columns, which would make sparse X dense; "
            "use scaling='maxabs' (or 'auto') for sparse features"
        )
    return scaling


def fit_scaling(X, method: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-column (offset, scale), float64 (d,) each, of a validated X for ``method``.

    Parameters
    ----------
    X : float ndarray, scipy CSR matrix, or dask array (dense or sparse chunks) (n, d)
    method : {"standard", "maxabs", "tfidf"}
        For "tfidf" the scale is ``1 / idf`` (the columns are multiplied by idf).
    """
    d = X.shape[1]
    if method == "tfidf":
        if is_dask(X):  # exact integer counts per chunk, summed: the same whatever the chunking
            X = X.rechunk({1: -1}) if len(X.chunks[1]) > 1 else X
            counts = X.map_blocks(_column_nonzeros, chunks=((1,) * X.numblocks[0], (d,)), dtype=np.int64)
            df = counts.sum(axis=0).compute()
        else:
            df = _column_nonzeros(X)
        df = np.asarray(df, dtype=np.float64).reshape(d)
        n = float(X.shape[0])
        return np.zeros(d), _round(1.0 / (np.log((1.0 + n) / (1.0 + df)) + 1.0))
    if method == "standard":
        if is_dask(X):
            import dask

            # float64 sums, as for validated in-memory input; asked of the reductions rather
            # than by casting the chunks first, which would hold a float64 copy of each
            mean, std = dask.compute(X.mean(axis=0, dtype=np.float64), X.std(axis=0, dtype=np.float64))
        else:
            mean, std = X.mean(axis=0), X.std(axis=0)
        offset, scale = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    else:
        if is_dask(X):  # per chunk in scipy / numpy: pydata sparse's elementwise path JIT-compiles
            X = X.rechunk({1: -1}) if len(X.chunks[1]) > 1 else X
            tops = X.map_blocks(
                _column_max_abs, chunks=((1,) * X.numblocks[0], (d,)), dtype=np.float64, meta=np.empty((0, 0))
            )
            top = tops.max(axis=0).compute()
        else:
            top = _column_max_abs(X)
        offset, scale = np.zeros(d), np.asarray(top, dtype=np.float64).reshape(d)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    return _round(offset.reshape(d)), _round(scale)


def _column_nonzeros(X) -> np.ndarray:
    """Nonzero entries per column of one chunk (dense, scipy or pydata sparse), int64 (1, d)."""
    X = to_scipy(X)
    if sp.issparse(X):
        X = sp.csr_matrix(X)  # shares the caller's arrays: read them, never prune them in place
        counts = np.bincount(X.indices[X.data != 0], minlength=X.shape[1])
    else:
        counts = np.count_nonzero(X, axis=0)
    return np.asarray(counts, dtype=np.int64).reshape(1, -1)


def _column_max_abs(X) -> np.ndarray:
    """Largest absolute value per column of one chunk (dense, scipy or pydata sparse), float64 (1, d)."""
    X = to_scipy(X)
    if X.shape[0] == 0:
        return np.zeros((1, X.shape[1]))
    top = abs(sp.csr_matrix(X)).max(axis=0).toarray() if sp.issparse(X) else np.abs(X).max(axis=0)
    return np.asarray(top, dtype=np.float64).reshape(1, -1)


def _round(v: np.ndarray) -> np.ndarray:
    """Statistics rounded to float32 precision (a 24-bit mantissa), kept as float64.

    Sums over row chunks differ in their last bits with the chunking (and
    between dask and numpy); the online solvers amplify such differences.
    Rounded, the statistics are the same whatever the chunking unless a value
    falls within those last bits of a float32 rounding boundary (about 2^-28
    of the values), and scaling needs no more precision than this.
    """
    return np.asarray(v, dtype=np.float32).astype(np.float64)


def _scale_block(X, offset, inv_scale, center: bool, rows: bool = False):
    """One chunk scaled: centred (``center``), columns times ``inv_scale``, rows to unit norm (``rows``)."""
    if hasattr(X, "to_scipy_sparse"):  # pydata sparse chunk (a sparse store): stay GCXS
        return gcxs_from_csr(_scale_block(to_scipy(X), offset, inv_scale, center, rows))
    if sp.issparse(X):
        m = sp.csr_matrix(sp.csr_matrix(X, dtype=np.float64) @ sp.diags(inv_scale))
        if rows:
            norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
            m = sp.csr_matrix(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ m)
        return m
    X = np.array(X, dtype=np.float64)  # the chunk's one float64 copy, scaled in place
    if center:
        X -= offset
    X *= inv_scale
    if rows:
        norms = np.sqrt(np.einsum("ij,ij->i", X, X))
        X /= np.where(norms > 0, norms, 1.0)[:, None]
    return X


def fit_scaling_of(est, X):
    """Fit ``est.scaling`` on X, as every estimator (and ``KernelFeatures``) does in ``fit``.

    Sets ``est.scaling_`` ("auto" resolved by X's storage) and, unless it is
    None, ``est.feature_offset_`` and ``est.feature_scale_``; returns X scaled
    (:func:`scaled_by`).
    """
    est.scaling_ = resolve_scaling(est.scaling, X)
    if est.scaling_ is not None:
        est.feature_offset_, est.feature_scale_ = fit_scaling(X, est.scaling_)
    return scaled_by(est, X)


def scaled_by(est, X):
    """X scaled by the scaling :func:`fit_scaling_of` fitted on ``est`` (X itself when none)."""
    if getattr(est, "scaling_", None) is None:
        return X
    return apply_scaling(X, est.feature_offset_, est.feature_scale_, est.scaling_)


def apply_scaling(X, offset: np.ndarray, scale: np.ndarray, method: str):
    """X scaled by a fitted (offset, scale): same type as X (dask in, dask out, row chunks kept)."""
    inv = 1.0 / scale
    center, rows = method == "standard", method == "tfidf"
    if is_dask(X):
        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
        meta = gcxs_meta(np.float64) if is_sparse(X._meta) and not sp.issparse(X._meta) else X._meta.astype(np.float64)
        return X.map_blocks(_scale_block, offset, inv, center, rows, dtype=np.float64, meta=meta)
    return _scale_block(X, offset, inv, center, rows)
