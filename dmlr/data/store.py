"""The dmlr Zarr v3 data-set layout: a streaming writer and a lazy reader.

Layout (format version 1)
-------------------------
A dmlr data set is a Zarr v3 group::

    <root>/                 attrs["dmlr"] = {format_version, kind: "dataset",
                                             n_samples, n_features, n_labels,
                                             x_encoding: "dense" | "csr",
                                             chunk_rows, label_names,
                                             feature_names, source, splits}
    <root>/X                dense: float32/float64 array (n_samples, n_features),
                            chunks (chunk_rows, n_features)  -- rows only
    <root>/X/               csr:   group, attrs {"encoding-type": "csr_matrix",
                                   "encoding-version": "0.1.0", "shape": [n, d]}
        data    float (nnz,)       values, row-major
        indices int32 (nnz,)       column of each value
        indptr  int64 (n + 1,)     row i is data[indptr[i]:indptr[i+1]]
    <root>/Y                int8 0/1 array (n_samples, n_labels),
                            chunks (chunk_rows, n_labels)
    <root>/splits/<name>    int64 sorted row indices of a named split

The CSR group follows anndata's de-facto convention (the Zarr spec has no
sparse type), so one row block ``[r0, r1)`` reads ``indptr[r0:r1+1]`` and
then one contiguous slice of ``data`` and ``indices``.

Dask arrays opened from a store are chunked by rows only, each dask chunk a
whole multiple of the stored ``chunk_rows`` and spanning every column, and
``X`` and ``Y`` share the same row chunks (unaligned Zarr/Dask chunks corrupt
data silently, dask#12583).

Writers stream: :class:`StoreWriter` appends row blocks and never holds the
data set in memory. A store is written under a temporary sibling name and
renamed into place only when complete, so a failed conversion leaves nothing
behind and ``overwrite=True`` never loses the old store before the new one
is whole.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr

from dmlr.data.arrays import gcxs_from_csr, gcxs_meta
from dmlr.errors import DmlrInputError, NotADmlrStoreError

FORMAT_VERSION = 1
DEFAULT_CHUNK_BYTES = 8 * 2**20
#: 1-D chunk length of the CSR ``data``/``indices`` arrays.
CSR_VALUE_CHUNK = 2**20


def default_chunk_rows(n_features: int, *, sparse: bool = False, density: float = 0.05) -> int:
    """Stored rows per chunk so that one chunk of X holds about 8 MiB.

    Parameters
    ----------
    n_features : int
        Columns of X.
    sparse : bool
        Whether X is stored as CSR (then the estimate uses ``density``).
    density : float
        Expected fraction of non-zeros for sparse X.

    Returns
    -------
    int
        A power of two between 256 and 65536.
    """
    per_row = 8 * max(n_features, 1) * (density * 1.5 if sparse else 1.0)
    rows = int(DEFAULT_CHUNK_BYTES / max(per_row, 1.0))
    rows = 1 << max(8, min(16, rows.bit_length() - 1))
    return rows


def _check_labels(Y: np.ndarray, *, path, row0: int) -> np.ndarray:
    """Return Y as int8 0/1, or raise naming the first bad row."""
    Y = np.asarray(Y)
    if Y.dtype.kind == "f" and not np.all(np.isfinite(Y)):
        bad = int(np.argwhere(~np.isfinite(Y))[0, 0])
        raise DmlrInputError("label value is NaN or infinite", path=path, row=row0 + bad)
    ok = (Y == 0) | (Y == 1)
    if not np.all(ok):
        r, c = np.argwhere(~ok)[0]
        raise DmlrInputError(
            f"label {int(c)} has value {Y[r, c].item()!r}; labels must be 0 or 1",
            path=path,
            row=row0 + int(r),
        )
    return Y.astype(np.int8, copy=False)


def _check_finite_rows(X, *, path, row0: int) -> None:
    """Raise naming the first row of X holding NaN or inf."""
    if sp.issparse(X):
        bad = ~np.isfinite(X.data)
        if bad.any():
            pos = int(np.argmax(bad))
            r = int(np.searchsorted(X.indptr, pos, side="right") - 1)
            raise DmlrInputError("feature value is NaN or infinite", path=path, row=row0 + r)
    else:
        finite = np.isfinite(X)
        if not finite.all():
            r = int(np.argwhere(~finite)[0, 0])
            raise DmlrInputError("feature value is NaN or infinite", path=path, row=row0 + r)


class StoreWriter:
    """Stream row blocks of (X, Y) into a new dmlr Zarr store.

    Use as a context manager; the store appears at ``path`` only when the
    ``with`` block ends without an exception.

    Parameters
    ----------
    path : str or Path
        Destination directory of the Zarr store.
    n_features, n_labels : int
        Columns of X and of Y.
    sparse : bool
        Store X as CSR (bag-of-words sets) instead of dense.
    dtype : str
        Float dtype of X: ``"float64"`` (lossless, the default) or ``"float32"``.
    chunk_rows : int, optional
        Stored rows per chunk (default: :func:`default_chunk_rows`).
    label_names, feature_names : list of str, optional
    source : str, optional
        Free text: where the data came from.
    overwrite : bool
        Replace an existing store at ``path``.
    input_path : str, optional
        The file being converted, used in error messages.
    """

    def __init__(
        self,
        path,
        n_features: int,
        n_labels: int,
        *,
        sparse: bool = False,
        dtype: str = "float64",
        chunk_rows: int | None = None,
        label_names=None,
        feature_names=None,
        source: str | None = None,
        overwrite: bool = False,
        input_path=None,
    ):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path} exists; pass overwrite=True to replace it")
        if n_features < 1 or n_labels < 1:
            raise DmlrInputError(
                f"a data set needs at least one feature and one label (got {n_features} features, {n_labels} labels)",
                path=input_path,
            )
        self.n_features = int(n_features)
        self.n_labels = int(n_labels)
        self.sparse = bool(sparse)
        self.dtype = np.dtype(dtype)
        if self.dtype.kind != "f":
            raise ValueError(f"X dtype must be a float type, got {self.dtype}")
        self.chunk_rows = int(chunk_rows or default_chunk_rows(n_features, sparse=sparse))
        self.label_names = list(label_names) if label_names is not None else [f"label_{j}" for j in range(n_labels)]
        self.feature_names = list(feature_names) if feature_names is not None else None
        if len(self.label_names) != self.n_labels:
            raise DmlrInputError(f"{len(self.label_names)} label names for {n_labels} labels", path=input_path)
        if self.feature_names is not None and len(self.feature_names) != self.n_features:
            raise DmlrInputError(f"{len(self.feature_names)} feature names for {n_features} features", path=input_path)
        self.source = source
        self.overwrite = overwrite
        self.input_path = input_path if input_path is not None else path
        self.n_samples = 0
        self.splits: dict[str, np.ndarray] = {}
        self._tmp = self.path.with_name(f".{self.path.name}.partial-{uuid.uuid4().hex[:8]}")
        self._pending_X: list = []
        self._pending_Y: list = []
        self._pending_rows = 0
        self._nnz = 0
        self._group = None

    # -- context manager ----------------------------------------------------
    def __enter__(self):
        self._tmp.parent.mkdir(parents=True, exist_ok=True)
        g = zarr.open_group(str(self._tmp), mode="w")
        r, d, l = self.chunk_rows, self.n_features, self.n_labels
        if self.sparse:
            xg = g.create_group("X")
            xg.create_array("data", shape=(0,), chunks=(CSR_VALUE_CHUNK,), dtype=self.dtype)
            xg.create_array("indices", shape=(0,), chunks=(CSR_VALUE_CHUNK,), dtype="int32")
            ip = xg.create_array("indptr", shape=(1,), chunks=(max(r, 1024),), dtype="int64")
            ip[:] = np.zeros(1, dtype=np.int64)
        else:
            g.create_array("X", shape=(0, d), chunks=(r, d), dtype=self.dtype)
        g.create_array("Y", shape=(0, l), chunks=(r, l), dtype="int8")
        self._group = g
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            return False
        try:
            self._finish()
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        return False

    # -- writing ------------------------------------------------------------
    def append(self, X, Y) -> None:
        """Append a block of rows.

        Parameters
        ----------
        X : ndarray (r, n_features) or scipy.sparse matrix
            Features; converted to the store's dtype and layout.
        Y : array-like (r, n_labels)
            Labels in {0, 1}.
        """
        if self._group is None:
            raise RuntimeError("StoreWriter.append called outside its with-block")
        Y = np.asarray(Y)
        if Y.ndim != 2 or Y.shape[1] != self.n_labels:
            raise DmlrInputError(
                f"label block has shape {Y.shape}, expected (*, {self.n_labels})",
                path=self.input_path,
                row=self.n_samples + self._pending_rows,
            )
        if X.shape != (Y.shape[0], self.n_features):
            raise DmlrInputError(
                f"feature block has shape {X.shape}, expected ({Y.shape[0]}, {self.n_features})",
                path=self.input_path,
                row=self.n_samples + self._pending_rows,
            )
        row0 = self.n_samples + self._pending_rows
        Y = _check_labels(Y, path=self.input_path, row0=row0)
        if self.sparse:
            X = sp.csr_matrix(X, dtype=self.dtype)
            X.sum_duplicates()
            X.sort_indices()
        else:
            X = X.toarray() if sp.issparse(X) else np.asarray(X)
            X = X.astype(self.dtype, copy=False)
        _check_finite_rows(X, path=self.input_path, row0=row0)
        self._pending_X.append(X)
        self._pending_Y.append(Y)
        self._pending_rows += Y.shape[0]
        if self._pending_rows >= self.chunk_rows:
            self._flush(final=False)

    def add_split(self, name: str, rows) -> None:
        """Record a named split (row indices into the whole store)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if not name or "/" in name:
            raise ValueError(f"invalid split name {name!r}")
        self.splits[name] = rows

    def _flush(self, *, final: bool) -> None:
        if not self._pending_rows:
            return
        if self.sparse:
            Xall = sp.vstack(self._pending_X, format="csr")
        else:
            Xall = np.concatenate(self._pending_X, axis=0)
        Yall = np.concatenate(self._pending_Y, axis=0)
        n_take = self._pending_rows if final else (self._pending_rows // self.chunk_rows) * self.chunk_rows
        self._write(Xall[:n_take], Yall[:n_take])
        self._pending_X = [Xall[n_take:]] if n_take < self._pending_rows else []
        self._pending_Y = [Yall[n_take:]] if n_take < self._pending_rows else []
        self._pending_rows -= n_take

    def _write(self, X, Y) -> None:
        g = self._group
        # Whole chunks are appended at chunk boundaries, so no stored chunk is
        # ever rewritten (zarr-python#3514: concurrent partial writes are unsafe).
        if self.sparse:
            xg = g["X"]
            if X.nnz:
                xg["data"].append(X.data.astype(self.dtype, copy=False))
                xg["indices"].append(X.indices.astype(np.int32, copy=False))
            xg["indptr"].append(X.indptr[1:].astype(np.int64) + self._nnz)
            self._nnz += int(X.nnz)
        else:
            g["X"].append(X, axis=0)
        g["Y"].append(Y, axis=0)
        self.n_samples += Y.shape[0]

    def _finish(self) -> None:
        self._flush(final=True)
        if self.n_samples == 0:
            raise DmlrInputError("no data rows", path=self.input_path)
        g = self._group
        for name, rows in self.splits.items():
            if rows.size and (rows[0] < 0 or rows[-1] >= self.n_samples):
                raise DmlrInputError(
                    f"split {name!r} refers to rows outside 0..{self.n_samples - 1}", path=self.input_path
                )
            sg = g.require_group("splits")
            arr = sg.create_array(name, shape=rows.shape, chunks=(max(rows.size, 1),), dtype="int64")
            if rows.size:
                arr[:] = rows
        if self.sparse:
            g["X"].attrs.update(
                {"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": [self.n_samples, self.n_features]}
            )
        meta = {
            "format_version": FORMAT_VERSION,
            "kind": "dataset",
            "n_samples": self.n_samples,
            "n_features": self.n_features,
            "n_labels": self.n_labels,
            "x_encoding": "csr" if self.sparse else "dense",
            "x_dtype": self.dtype.name,
            "chunk_rows": self.chunk_rows,
            "label_names": self.label_names,
            "feature_names": self.feature_names,
            "source": self.source,
            "splits": sorted(self.splits),
        }
        g.attrs.update({"dmlr": meta})
        _replace_dir(self._tmp, self.path)


def _replace_dir(src: Path, dst: Path) -> None:
    """Move the finished directory ``src`` to ``dst``, replacing any old one.

    The old store is first renamed aside, so at every moment either the old
    or the new store is complete at ``dst`` or beside it.
    """
    backup = None
    if dst.exists():
        backup = dst.with_name(f".{dst.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(dst, backup)
    os.replace(src, dst)
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


def write_dataset(
    path,
    X,
    Y,
    *,
    splits=None,
    chunk_rows=None,
    dtype=None,
    sparse=None,
    label_names=None,
    feature_names=None,
    source=None,
    overwrite=False,
    input_path=None,
) -> Path:
    """Write in-memory arrays to a dmlr store, one chunk at a time.

    Parameters
    ----------
    path : str or Path
        Destination store.
    X : ndarray (n, d) or scipy.sparse matrix
    Y : array-like (n, l) in {0, 1}
    splits : dict of str -> array of int, optional
        Named row-index splits.
    sparse : bool, optional
        Store X as CSR; default: whether X is a scipy.sparse matrix.
    Other parameters are those of :class:`StoreWriter`.

    Returns
    -------
    Path
        ``path``.
    """
    if sparse is None:
        sparse = sp.issparse(X)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    if dtype is None:
        dtype = "float32" if getattr(X, "dtype", None) == np.float32 else "float64"
    n = X.shape[0]
    if np.shape(Y)[0] != n:
        raise DmlrInputError(f"X has {n} rows but Y has {np.shape(Y)[0]}", path=input_path or path)
    with StoreWriter(
        path,
        X.shape[1],
        np.shape(Y)[1],
        sparse=sparse,
        dtype=dtype,
        chunk_rows=chunk_rows,
        label_names=label_names,
        feature_names=feature_names,
        source=source,
        overwrite=overwrite,
        input_path=input_path,
    ) as w:
        step = w.chunk_rows
        for r0 in range(0, n, step):
            w.append(X[r0 : r0 + step], np.asarray(Y[r0 : r0 + step]))
        for name, rows in (splits or {}).items():
            w.add_split(name, rows)
    return Path(path)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def _read_csr_rows(path: str, r0: int, r1: int, n_features: int):
    """Read rows [r0, r1) of a stored CSR X as a scipy CSR matrix."""
    xg = zarr.open_group(path, mode="r")["X"]
    ip = np.asarray(xg["indptr"][r0 : r1 + 1])
    a, b = int(ip[0]), int(ip[-1])
    data = np.asarray(xg["data"][a:b])
    indices = np.asarray(xg["indices"][a:b])
    return sp.csr_matrix((data, indices, ip - a), shape=(r1 - r0, n_features))


def _read_csr_block_gcxs(path: str, r0: int, r1: int, n_features: int, rows=None):
    """Rows [r0, r1) of a stored CSR X (or the subset ``rows`` of them) as a GCXS block.

    Row selection happens here, in scipy: indexing GCXS chunks through dask
    would make pydata ``sparse`` JIT-compile its indexing code in every
    process, seconds each.
    """
    m = _read_csr_rows(path, r0, r1, n_features)
    if rows is not None:
        m = m[np.asarray(rows) - r0]
    return gcxs_from_csr(m)


def _csr_dask_array(path: str, bounds, n_features: int, dtype, rows=None) -> da.Array:
    """A dask array of GCXS row blocks, one per ``(r0, r1)`` in ``bounds``.

    With ``rows`` (sorted indices), each block holds only the selected rows of
    its range, and ranges without any are left out.
    """
    meta = gcxs_meta(dtype)
    blocks = []
    for r0, r1 in bounds:
        sel = None
        if rows is not None:
            sel = rows[np.searchsorted(rows, r0) : np.searchsorted(rows, r1)]
            if sel.size == 0:
                continue
        m = (r1 - r0) if sel is None else int(sel.size)
        blk = dask.delayed(_read_csr_block_gcxs, pure=True)(path, r0, r1, n_features, sel)
        blocks.append(da.from_delayed(blk, shape=(m, n_features), dtype=dtype, meta=meta))
    return da.concatenate(blocks, axis=0)


@dataclass
class Dataset:
    """A lazily opened dmlr data set.

    Attributes
    ----------
    path : str
        The Zarr store.
    X : dask.array.Array (n_samples, n_features)
        Dense float chunks, or ``sparse.GCXS`` (CSR) chunks for a sparse store.
    Y : dask.array.Array (n_samples, n_labels) int8
        0/1 labels, chunked by the same rows as X.
    splits : dict of str -> ndarray of int64
        Named row-index splits (sorted).
    label_names, feature_names : list of str or None
    attrs : dict
        The store's ``dmlr`` attributes.
    """

    path: str
    X: da.Array
    Y: da.Array
    splits: dict = field(default_factory=dict)
    label_names: list | None = None
    feature_names: list | None = None
    attrs: dict = field(default_factory=dict)

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    @property
    def n_labels(self) -> int:
        return int(self.Y.shape[1])

    @property
    def is_sparse(self) -> bool:
        return self.attrs.get("x_encoding") == "csr"

    def split_rows(self, split: str | None) -> np.ndarray | None:
        """Row indices of a named split (None for ``split=None`` or ``"all"``)."""
        if split is None or split == "all":
            return None
        if split not in self.splits:
            known = ", ".join(sorted(self.splits)) or "none"
            raise KeyError(
                f"{self.path}: unknown split {split!r} (known splits: {known}; "
                f"use split='all' or split=None, --split all on the command line, for every row)"
            )
        return self.splits[split]

    def arrays(self, split: str | None = None):
        """Return ``(X, Y)`` dask arrays restricted to a split.

        Row order is kept; each output chunk holds the selected rows of one
        stored chunk, so chunks stay aligned between X and Y.
        """
        rows = self.split_rows(split)
        if rows is None:
            return self.X, self.Y
        if self.is_sparse:
            edges = np.cumsum((0,) + self.X.chunks[0])
            X = _csr_dask_array(self.path, list(zip(edges[:-1], edges[1:])), self.n_features, self.X.dtype, rows)
            return X, self.Y[rows].rechunk((X.chunks[0], -1))
        return self.X[rows], self.Y[rows]

    def __repr__(self) -> str:
        kind = "csr" if self.is_sparse else "dense"
        sp_ = ", ".join(f"{k}={len(v)}" for k, v in self.splits.items()) or "none"
        return (
            f"Dataset({self.path!r}, n_samples={self.n_samples}, n_features={self.n_features}, "
            f"n_labels={self.n_labels}, X={kind}, chunks={self.X.chunks[0][0]} rows, splits: {sp_})"
        )


def read_attrs(path) -> dict:
    """Return a store's ``dmlr`` attributes, or raise :class:`~dmlr.NotADmlrStoreError`."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such data set")
    try:
        g = zarr.open_group(str(p), mode="r")
    except Exception as e:  # zarr raises several types for a non-group path
        hint = ""
        if p.is_file():  # a data file: the converters make a store of it
            hint = f"; convert it first: dmlr.convert({str(p)!r}, 'data.zarr') or dmlr convert {p} data.zarr"
            from dmlr.data.delimited import CSV_SUFFIXES

            if p.name.lower().removesuffix(".gz").endswith(CSV_SUFFIXES):
                hint += " --n-labels L (the last L columns are the labels)"
        why = f"({type(e).__name__}: {e})"
        raise NotADmlrStoreError(f"not a dmlr data set (a Zarr store){hint} {why}", path=p) from None
    meta = dict(g.attrs).get("dmlr")
    if not isinstance(meta, dict) or meta.get("kind") != "dataset":
        raise NotADmlrStoreError("Zarr group is not a dmlr data set (no 'dmlr' attributes of kind 'dataset')", path=p)
    if meta.get("format_version") != FORMAT_VERSION:
        raise NotADmlrStoreError(
            f"dmlr store format version {meta.get('format_version')} is not supported "
            f"(this dmlr reads version {FORMAT_VERSION})",
            path=p,
        )
    return meta


def open_dataset(path, *, chunk_rows: int | None = None) -> Dataset:
    """Open a dmlr Zarr store lazily.

    Parameters
    ----------
    path : str or Path
        The store written by :func:`dmlr.convert` or
        :func:`dmlr.datasets.make_multilabel`.
    chunk_rows : int, optional
        Rows per dask chunk; must be a whole multiple of the stored chunk
        rows (default: the stored chunk rows).

    Returns
    -------
    Dataset
    """
    meta = read_attrs(path)
    spath = str(Path(path))
    g = zarr.open_group(spath, mode="r")
    n, d, l = meta["n_samples"], meta["n_features"], meta["n_labels"]
    stored = int(meta["chunk_rows"])
    rows = stored if chunk_rows is None else int(chunk_rows)
    if rows <= 0 or rows % stored:
        raise ValueError(
            f"{spath}: chunk_rows={chunk_rows} must be a positive multiple of the stored chunk rows ({stored})"
        )
    if g["Y"].shape != (n, l):
        raise NotADmlrStoreError(f"Y has shape {g['Y'].shape}, attributes say ({n}, {l})", path=spath)
    Y = da.from_zarr(g["Y"], chunks=(rows, l))
    if meta["x_encoding"] == "csr":
        ipn = g["X"]["indptr"].shape[0]
        if ipn != n + 1:
            raise NotADmlrStoreError(f"X and Y row counts differ (X has {ipn - 1}, Y has {n})", path=spath)
        bounds = [(r0, min(n, r0 + rows)) for r0 in range(0, n, rows)]
        X = _csr_dask_array(spath, bounds, d, np.dtype(meta.get("x_dtype", "float64")))
    else:
        if g["X"].shape[0] != n:
            raise NotADmlrStoreError(f"X and Y row counts differ (X has {g['X'].shape[0]}, Y has {n})", path=spath)
        X = da.from_zarr(g["X"], chunks=(rows, d))
    splits = {}
    if "splits" in g:
        for name in meta.get("splits", []):
            splits[name] = np.asarray(g["splits"][name][:], dtype=np.int64)
    return Dataset(
        path=spath,
        X=X,
        Y=Y,
        splits=splits,
        label_names=meta.get("label_names"),
        feature_names=meta.get("feature_names"),
        attrs=meta,
    )
