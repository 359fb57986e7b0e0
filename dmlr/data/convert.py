"""Convert multi-label data sets from common file formats to dmlr stores.

:func:`dmlr.convert` reads MULAN/MEKA ARFF, MATLAB ``.mat``, scipy.sparse
``.npz`` pairs, LIBSVM multi-label and Extreme Classification text files,
delimited text (CSV, TSV: :mod:`dmlr.data.delimited`) and
streams them into a :class:`~dmlr.data.store.StoreWriter`. Text formats are
parsed line by line in row blocks (gzip-transparent); nothing is written at
the destination unless the whole conversion succeeds.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from numbers import Real
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dmlr.data.arff import BLOCK_ROWS, ArffReader, find_identifiers, open_text
from dmlr.data.delimited import CSV_SUFFIXES, DelimitedReader
from dmlr.data.libsvm import SvmLightReader, SvmStats, parse_xc_header, read_xc_header
from dmlr.data.matlab import array_blocks, npz_label_path, read_mat, read_npz
from dmlr.data.store import StoreWriter
from dmlr.errors import DmlrInputError

#: Formats accepted by :func:`dmlr.convert`.
FORMATS = ("arff", "meka", "mat", "npz", "libsvm", "xc", "csv")
_TEXT_FORMATS = ("arff", "meka", "libsvm", "xc", "csv")
_SVM_SUFFIXES = (".svm", ".libsvm", ".svmlight", ".txt")
#: zero_based="auto" warns when fewer than one row in this many holds a feature index 0.
ZERO_RARE = 100
#: Upper bound on the bytes of one dense int8 label block.
_LABEL_BLOCK_BYTES = 2**24


@dataclass
class _Part:
    """One input file (or one split inside a file) of a conversion."""

    name: str | None
    files: tuple
    blocks: Callable  # blocks(block_rows=...) -> iterator of (X, Y)
    dropped_lines: list = field(default_factory=list)


@dataclass
class _Source:
    """Everything :func:`_write` needs about the inputs of a conversion."""

    fmt: str
    n_features: int
    n_labels: int
    sparse: bool
    parts: list
    feature_names: list | None = None
    label_names: list | None = None
    detail: str = ""

    def description(self) -> str:
        """Free-text provenance stored as the store's ``source``."""
        split = len(self.parts) > 1
        files = "; ".join(
            ", ".join(Path(f).name for f in p.files) + (f" (split {p.name})" if split else "") for p in self.parts
        )
        text = f"{self.fmt}{f' ({self.detail})' if self.detail else ''}: {files}"
        for p in self.parts:
            for no in p.dropped_lines:
                text += f"; dropped truncated last line {no} of {Path(p.files[0]).name}"
        return text


# ---------------------------------------------------------------------------
# Inputs and format detection
# ---------------------------------------------------------------------------


def _is_pathlike(x) -> bool:
    return isinstance(x, (str, os.PathLike))


def _is_npz_pair(item, *, allow_list=False) -> bool:
    """A 2-tuple of .npz paths naming features and labels, not two feature files."""
    kinds = (tuple, list) if allow_list else tuple
    if not (isinstance(item, kinds) and len(item) == 2 and all(map(_is_pathlike, item))):
        return False
    a, b = (Path(x).name for x in item)
    return a.endswith(".npz") and b.endswith(".npz") and (b.endswith("_Y.npz") or not a.endswith("_X.npz"))


def _inputs(src) -> list:
    """Normalise ``src`` to a list of Paths and (X, Y) .npz Path pairs."""
    if _is_pathlike(src) or _is_npz_pair(src, allow_list=True):
        src = [tuple(src) if isinstance(src, list) else src]
    if not isinstance(src, (list, tuple)) or not src:
        raise TypeError(f"src must be a path, an (X, Y) .npz pair or a non-empty list of those, got {src!r}")
    items = []
    for item in src:
        if _is_npz_pair(item):
            items.append((Path(item[0]), Path(item[1])))
        elif _is_pathlike(item):
            items.append(Path(item))
        else:
            raise TypeError(f"not a path or (X, Y) .npz pair: {item!r}")
    for path in (p for item in items for p in (item if isinstance(item, tuple) else (item,))):
        if path.is_dir():
            raise DmlrInputError("is a directory; pass the data file, or a list of files", path=path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    return items


def _sniff(path: Path) -> str:
    """Guess the format of a file with an unknown extension from its content."""
    with open(path, "rb") as fh:
        magic = fh.read(8)
    if magic.startswith(b"MATLAB"):
        return "mat"
    if magic.startswith(b"PK"):
        return "npz"
    with open_text(path) as fh:
        head = fh.read(1 << 16)
    first = next((ln.strip() for ln in head.splitlines() if ln.strip()), "")
    if first.startswith("%") or first.lower().startswith(("@relation", "@attribute")):
        return "arff"
    if parse_xc_header(first) is not None:
        return "xc"
    if ":" in first:
        return "libsvm"
    raise DmlrInputError(
        f"cannot detect the file format; pass fmt= (dmlr convert --fmt), one of {', '.join(FORMATS)}", path=path
    )


def detect_format(path) -> str:
    """The format of one input file, from its extension and, if needed, its content.

    Parameters
    ----------
    path : str or Path
        An input file (gzip-compressed or not); its first lines are read where the
        extension does not decide.

    Returns
    -------
    str
        One of :data:`FORMATS` (``"arff"`` for MEKA files too: the relation
        name decides later).
    """
    path = Path(path)
    name = path.name.lower()
    base = name[:-3] if name.endswith(".gz") else name
    if base.endswith(".arff"):
        return "arff"
    if base.endswith(CSV_SUFFIXES):
        return "csv"
    if name.endswith(".mat"):
        return "mat"
    if name.endswith(".npz"):
        return "npz"
    if base.endswith(_SVM_SUFFIXES):
        return "xc" if read_xc_header(path) is not None else "libsvm"
    return _sniff(path)


def _resolve_format(items, fmt) -> str:
    if fmt is not None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
        return fmt
    found = {"npz" if isinstance(it, tuple) else detect_format(it) for it in items}
    if len(found) > 1:
        raise DmlrInputError(f"the input files have different formats ({', '.join(sorted(found))})")
    return found.pop()


def _check_options(fmt, *, xml, zero_based, n_features, drop_truncated_last_line, keep_identifiers, labels) -> None:
    if labels is not None and fmt != "csv":
        raise ValueError(f"labels= applies to CSV input, not {fmt}")
    if xml is not None and fmt not in ("arff", "meka"):
        raise ValueError(f"xml= applies to ARFF input, not {fmt}")
    if keep_identifiers and fmt not in ("arff", "meka"):
        raise ValueError(f"keep_identifiers= applies to ARFF input, not {fmt}")
    if zero_based not in ("auto", True, False):
        raise ValueError(f"zero_based must be 'auto', True or False, got {zero_based!r}")
    if (zero_based != "auto" or n_features is not None) and fmt not in ("libsvm", "xc"):
        raise ValueError(f"zero_based= and n_features= apply to LIBSVM/XC input, not {fmt}")
    if fmt == "xc" and zero_based is False:
        raise ValueError("XC files are 0-based; zero_based=False does not apply")
    if drop_truncated_last_line and fmt not in _TEXT_FORMATS:
        raise ValueError(f"drop_truncated_last_line applies to text formats, not {fmt}")


def _open_csv(paths, *, n_labels, labels, drop_truncated_last_line, **_) -> _Source:
    readers = [DelimitedReader(p, n_labels, labels) for p in paths]
    for other in readers[1:]:
        readers[0].check_compatible(other)
    parts = [
        _Part(
            _split_name_of_file(r.path),
            (r.path,),
            partial(r.blocks, drop_truncated_last_line=drop_truncated_last_line),
            r.dropped_lines,
        )
        for r in readers
    ]
    first = readers[0]
    detail = f"{first.n_features} feature columns, label columns {(first.label_idx + 1).tolist()}"
    names = (first.feature_names, first.label_names)
    return _Source("csv", first.n_features, first.n_labels, False, parts, *names, detail)


def _split_name_of_file(path: Path) -> str | None:
    """``"train"``/``"test"`` when exactly one of them is a word of the file name."""
    words = set(re.split(r"[^a-z]+", Path(path).name.lower()))
    hits = [w for w in ("train", "test") if w in words]
    return hits[0] if len(hits) == 1 else None


def _name_parts(parts: list) -> None:
    """Give every part a unique split name (``part<i>`` unless all are recognised)."""
    names = [p.name for p in parts]
    if None in names or len(set(names)) != len(names):
        names = [f"part{i}" for i in range(len(parts))]
    for p, name in zip(parts, names):
        p.name = name


# ---------------------------------------------------------------------------
# Opening each format
# ---------------------------------------------------------------------------


def _leave_out_identifiers(readers, *, keep, drop_truncated_last_line) -> str:
    """Warn about identifier attributes and, unless ``keep``, leave them out; return a note."""
    ids = find_identifiers(readers, block_rows=BLOCK_ROWS, drop_truncated_last_line=drop_truncated_last_line)
    if not ids:
        return ""
    attrs = readers[0].header.attributes
    named = ", ".join(f"{attrs[j].name!r} (line {attrs[j].line})" for j in ids)
    if keep:
        warnings.warn(
            f"{readers[0].path.name}: nominal attribute(s) {named} take a different value in "
            f"every row; kept one-hot as asked (keep_identifiers=True)",
            stacklevel=4,
        )
        return f"kept identifier attribute(s) {named}"
    warnings.warn(
        f"{readers[0].path.name}: nominal attribute(s) {named} take a different value in every "
        f"row (an identifier, not a feature); left out of X. Pass keep_identifiers=True to keep "
        f"them one-hot",
        stacklevel=4,
    )
    for r in readers:
        r.leave_out(ids)
    return f"left out identifier attribute(s) {named}"


def _open_arff(paths, *, meka, xml, n_labels, drop_truncated_last_line, keep_identifiers, **_) -> _Source:
    readers = [ArffReader(p, meka=meka, xml=xml, n_labels=n_labels) for p in paths]
    first = readers[0]
    for other in readers[1:]:
        first.check_compatible(other)
    note = _leave_out_identifiers(readers, keep=keep_identifiers, drop_truncated_last_line=drop_truncated_last_line)
    if first.n_features == 0:
        raise DmlrInputError(
            "no features left once identifier attributes are left out; pass keep_identifiers=True",
            path=first.path,
            line=first.header.data_line,
        )
    sparse = any(r.sparse for r in readers)
    parts = []
    for r in readers:
        r.store_sparse = sparse
        blocks = partial(r.blocks, drop_truncated_last_line=drop_truncated_last_line)
        parts.append(_Part(_split_name_of_file(r.path), (r.path,), blocks, r.dropped_lines))
    detail = first.label_source + (f"; {note}" if note else "")
    return _Source(
        "meka" if meka else "arff",
        first.n_features,
        first.n_labels,
        sparse,
        parts,
        first.feature_names,
        first.label_names,
        detail,
    )


def _svm_sizes(readers, *, n_features, n_labels, zero_based, drop_truncated_last_line):
    """(n_features, n_labels, offset, how) of LIBSVM files, from one streaming pass each.

    ``how`` says why the indices are read with that base, for the store's
    ``source``.
    """
    stats = SvmStats()
    for r in readers:
        stats = stats.merge(r.scan(drop_truncated_last_line=drop_truncated_last_line))
    if stats.zero_at is not None:
        path, line = stats.zero_at
        if zero_based is False:
            raise DmlrInputError(
                "feature index 0 in a file read as 1-based (zero_based=False); the file is "
                "0-based: pass zero_based=True or 'auto'",
                path=path,
                line=line,
            )
        how = "as given" if zero_based is True else f"auto: index 0 on line {line} of {Path(path).name}"
        if zero_based == "auto" and stats.zero_rows * ZERO_RARE < stats.n_rows:
            lines = ", ".join(f"{Path(f).name}:{no}" for f, no in stats.zero_lines)
            warnings.warn(
                f"feature index 0 occurs on {stats.zero_rows} of {stats.n_rows} rows only (lines {lines}"
                f"{', ...' if stats.zero_rows > len(stats.zero_lines) else ''}): the files are read as 0-based "
                "(scikit-learn's rule), which shifts every column by one if they are 1-based with stray zeros. "
                "zero_based=False reads them 1-based (and names each line with an index 0); zero_based=True "
                "keeps 0-based without this warning",
                stacklevel=4,
            )
    else:
        how = "as given" if zero_based != "auto" else "auto: no index 0 in the files"
    offset = 0 if zero_based is True or stats.zero_at is not None else 1
    seen_features = max(stats.max_index + 1 - offset, 0)
    if n_features is not None and n_features < seen_features:
        raise DmlrInputError(
            f"n_features={n_features} but the files use feature index {stats.max_index} ({offset}-based)",
            path=readers[0].path,
        )
    return (n_features or seen_features), (n_labels or stats.max_label + 1), offset, how


def _xc_sizes(readers, *, n_features, n_labels, **_):
    """(n_features, n_labels, 0) from the XC headers, which must agree."""
    sizes = {r.header[1:] for r in readers}
    if len(sizes) > 1:
        raise DmlrInputError(f"the XC headers disagree on (features, labels): {sorted(sizes)}")
    d, l = sizes.pop()
    for given, have, what in ((n_features, d, "n_features"), (n_labels, l, "n_labels")):
        if given is not None and given != have:
            raise DmlrInputError(f"{what}={given} but the XC header says {have}", path=readers[0].path)
    return d, l, 0, ""


def _open_svm(paths, *, xc, n_features, n_labels, zero_based, drop_truncated_last_line, **_) -> _Source:
    readers = [SvmLightReader(p, xc=xc) for p in paths]
    sizes = _xc_sizes if xc else _svm_sizes
    d, l, offset, how = sizes(
        readers,
        n_features=n_features,
        n_labels=n_labels,
        zero_based=zero_based,
        drop_truncated_last_line=drop_truncated_last_line,
    )
    parts = []
    for r in readers:
        blocks = partial(
            r.blocks, n_features=d, n_labels=l, offset=offset, drop_truncated_last_line=drop_truncated_last_line
        )
        parts.append(_Part(_split_name_of_file(r.path), (r.path,), blocks, r.dropped_lines))
    detail = "" if xc else f"{'0' if offset == 0 else '1'}-based feature indices, {how}"
    return _Source("xc" if xc else "libsvm", d, l, True, parts, detail=detail)


def _array_source(fmt, parts_arrays) -> _Source:
    """A source over in-memory ``[(name, files, X, Y), ...]``."""
    shapes = {(X.shape[1], Y.shape[1]) for _, _, X, Y in parts_arrays}
    if len(shapes) > 1:
        raise DmlrInputError(f"the inputs differ in (features, labels): {sorted(shapes)}", path=parts_arrays[0][1][0])
    d, l = shapes.pop()
    sparse = any(sp.issparse(X) for _, _, X, _ in parts_arrays)
    parts = [_Part(name, files, partial(array_blocks, X, Y)) for name, files, X, Y in parts_arrays]
    return _Source(fmt, d, l, sparse, parts)


def _open_mat(paths, **_) -> _Source:
    arrays = []
    for path in paths:
        contents = read_mat(path)
        for split, X, Y in contents:
            name = split if split is not None else _split_name_of_file(path)
            arrays.append((name, (path,), X, Y))
    return _array_source("mat", arrays)


def _open_npz(items, **_) -> _Source:
    arrays = []
    for item in items:
        x_path, y_path = item if isinstance(item, tuple) else (item, npz_label_path(item))
        X, Y = read_npz(x_path, y_path)
        arrays.append((_split_name_of_file(x_path), (x_path, y_path), X, Y))
    return _array_source("npz", arrays)


_OPENERS = {
    "arff": partial(_open_arff, meka=False),
    "meka": partial(_open_arff, meka=True),
    "libsvm": partial(_open_svm, xc=False),
    "xc": partial(_open_svm, xc=True),
    "mat": _open_mat,
    "npz": _open_npz,
    "csv": _open_csv,
}


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def _write(source: _Source, dst: Path, *, overwrite, chunk_rows, dtype, test_size=None, seed=0) -> None:
    """Stream every part of ``source`` into a new store at ``dst`` (with ``test_size``: a seeded
    "train"/"test" split of its rows, :func:`test_rows`)."""
    block_rows = max(1, min(BLOCK_ROWS, _LABEL_BLOCK_BYTES // max(source.n_labels, 1)))
    files = [f for p in source.parts for f in p.files]
    input_path = files[0] if len(files) == 1 else ", ".join(str(f) for f in files)
    if len(source.parts) > 1:
        _name_parts(source.parts)
    with StoreWriter(
        dst,
        source.n_features,
        source.n_labels,
        sparse=source.sparse,
        dtype=dtype,
        chunk_rows=chunk_rows,
        label_names=source.label_names,
        feature_names=source.feature_names,
        source=source.description(),
        overwrite=overwrite,
        input_path=input_path,
    ) as writer:
        total = 0
        for part in source.parts:
            start = total
            for X, Y in part.blocks(block_rows=block_rows):
                writer.append(X, Y)
                total += Y.shape[0]
            if len(source.parts) > 1:
                writer.add_split(part.name, np.arange(start, total))
        if test_size is not None:
            test = test_rows(total, test_size, seed)
            writer.add_split("train", np.setdiff1d(np.arange(total), test))
            writer.add_split("test", test)
        writer.source = source.description()  # now including any dropped lines


def test_rows(n: int, test_size: float, seed) -> np.ndarray:
    """The sorted rows of a seeded test split of ``n`` rows: ``ceil(test_size * n)`` of them (as
    scikit-learn's ``train_test_split`` counts), drawn by ``numpy.random.default_rng(seed)``.
    Both parts must keep a row."""
    n_test = math.ceil(test_size * n)
    if not 0 < n_test < n:
        raise ValueError(f"test_size={test_size} leaves no training or no test row of {n} rows")
    return np.sort(np.random.default_rng(seed).permutation(n)[:n_test])


def convert(
    src,
    dst,
    *,
    fmt=None,
    xml=None,
    n_labels=None,
    n_features=None,
    zero_based="auto",
    drop_truncated_last_line=False,
    keep_identifiers=False,
    labels=None,
    overwrite=False,
    chunk_rows=None,
    dtype="float64",
    test_size=None,
    seed=0,
) -> Path:
    """Convert a multi-label data set to a dmlr Zarr store.

    Parameters
    ----------
    src : path, (X_path, Y_path) pair, or list of those
        The input. A list is concatenated in order and each file becomes a
        split, named ``"train"``/``"test"`` when exactly one of those words
        is in every file name (and the names are unique), else ``part0``,
        ``part1``, ... A ``.mat`` file with ``train_*``/``test_*`` variables
        is split the same way. A ``.npz`` input is the features file
        ``<name>_X.npz`` (labels read from ``<name>_Y.npz``) or an explicit
        ``(X_path, Y_path)`` tuple; a two-element ``src`` list of ``.npz``
        files is also read as such a pair when the second is named
        ``*_Y.npz`` or the first is not named ``*_X.npz``.
    dst : str or Path
        Destination store (a directory).
    fmt : {"arff", "meka", "mat", "npz", "libsvm", "xc", "csv"}, optional
        Input format. By default detected: ``.arff``/``.arff.gz`` is ARFF
        (MEKA when there is no MULAN XML and the relation holds ``-C L``),
        ``.mat`` MATLAB, ``.npz`` scipy.sparse, ``.svm``/``.libsvm``/``.txt``
        XC when the first line is three integers, else LIBSVM,
        ``.csv``/``.tsv`` (and ``.gz``) delimited text; other extensions are
        sniffed from the content.
    xml : str or Path, optional
        ARFF: the MULAN label file. Default: the sibling ``<name>.xml``
        found by :func:`dmlr.data.arff.find_xml` (``emotions-train.arff.gz``
        -> ``emotions.xml``). Nominal feature attributes are encoded
        one-hot as Weka's NominalToBinary does (:mod:`dmlr.data.nominal`);
        the store's feature names name the columns (``color=red``).
    n_labels : int, optional
        ARFF without XML: the last ``n_labels`` attributes are the labels.
        CSV (this or ``labels``): the last ``n_labels`` columns are the
        labels, 0/1; the others are numeric features (:mod:`dmlr.data.delimited`).
        LIBSVM: the number of labels (default: largest label + 1). Other
        formats: checked against the file.
    n_features : int, optional
        LIBSVM: the number of features (default: largest index seen).
    zero_based : {"auto", True, False}
        LIBSVM feature indices; ``"auto"`` means 0-based if an index 0
        occurs in any of the files, else 1-based (scikit-learn's rule).
        An index 0 with ``False`` is an error naming its line. The store's
        ``source`` records the base and why it was chosen; a 1-based file
        read with ``True`` keeps an empty column 0.
    drop_truncated_last_line : bool
        Text formats: if the last line has no newline and does not parse
        (an interrupted download or copy), drop it with a warning and note
        it in the store's ``source`` instead of failing.
    keep_identifiers : bool
        ARFF: a nominal feature attribute with a different value in every
        row (of more than two) is an identifier; it is left out of X with
        a warning naming it unless this is True, when it is kept one-hot
        (still with a warning). Either way the store's ``source`` says so.
    labels : str or sequence of str, optional
        CSV with a header line: the label columns, by their names (a
        sequence) or the prefix of their names (a string); every other
        column is a feature.
    overwrite : bool
        Replace an existing store at ``dst`` (only once the new one is
        complete).
    chunk_rows : int, optional
        Stored rows per chunk (default: about 8 MiB of X per chunk).
    dtype : {"float64", "float32"}
        Stored feature dtype.
    test_size : float in (0, 1), optional
        An input that gives no splits (one file, or one (X, Y) pair): split
        its rows at random into ``"train"`` and ``"test"``, the test split
        ``ceil(test_size * n)`` rows, as scikit-learn's ``train_test_split``
        (what :func:`dmlr.fit` trains on and :func:`dmlr.evaluate` scores by
        default). An input that gives splits is an error.
    seed : int or None
        Seed of that split (``numpy.random.default_rng``).

    Returns
    -------
    pathlib.Path
        ``dst``.

    Raises
    ------
    DmlrInputError
        Malformed or inconsistent input; the message names the file and the
        1-based line (text formats) or 0-based row (array formats).
    FileExistsError
        ``dst`` exists and ``overwrite`` is False.
    """
    items = _inputs(src)
    fmt = _resolve_format(items, fmt)
    _check_options(
        fmt,
        xml=xml,
        zero_based=zero_based,
        n_features=n_features,
        drop_truncated_last_line=drop_truncated_last_line,
        keep_identifiers=keep_identifiers,
        labels=labels,
    )
    if fmt != "npz" and any(isinstance(it, tuple) for it in items):
        raise ValueError(f"(X, Y) path pairs are only for npz input, not {fmt}")
    if test_size is not None and (
        isinstance(test_size, bool) or not isinstance(test_size, Real) or not 0.0 < test_size < 1.0
    ):
        raise ValueError(f"test_size must be a fraction of the rows in (0, 1), got {test_size!r}")
    dst = Path(dst)
    if dst.exists() and not overwrite:
        raise FileExistsError(f"{dst} exists; pass overwrite=True to replace it")
    source = _OPENERS[fmt](
        items,
        xml=xml,
        n_labels=n_labels,
        n_features=n_features,
        zero_based=zero_based,
        drop_truncated_last_line=drop_truncated_last_line,
        keep_identifiers=keep_identifiers,
        labels=labels,
    )
    if n_labels is not None and source.n_labels != n_labels:
        raise DmlrInputError(
            f"n_labels={n_labels} but the input has {source.n_labels} labels", path=source.parts[0].files[0]
        )
    if test_size is not None and len(source.parts) > 1:
        _name_parts(source.parts)
        names = ", ".join(p.name for p in source.parts)
        raise ValueError(f"test_size: the input gives its own splits ({names}); leave test_size out")
    _write(source, dst, overwrite=overwrite, chunk_rows=chunk_rows, dtype=dtype, test_size=test_size, seed=seed)
    return dst
