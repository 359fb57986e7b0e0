"""Streaming reader for MULAN and MEKA ARFF files.

An ARFF file is a header (``@relation``, ``@attribute`` lines) followed by
``@data`` rows, either dense (``v1,v2,...``, one value per attribute) or
sparse (``{index value, ...}``, omitted attributes are 0). The multi-label
flavours differ only in how the label attributes are named:

* MULAN: a companion XML file lists the label attribute names (in practice
  the last L attributes). :func:`find_xml` finds ``emotions.xml`` for
  ``emotions-train.arff.gz`` and ``Corel5k.xml`` for
  ``Corel5k-train-sparse.arff.gz``.
* MEKA: the relation name holds ``-C L``: the labels are the first L
  attributes (L > 0) or the last ``|L|`` (L < 0).

Numeric feature attributes are stored as written; nominal feature
attributes are encoded one-hot as Weka's NominalToBinary does (a two-valued
attribute as one 0/1 column), see :mod:`dmlr.data.nominal`. Label attributes
must be numeric or nominal over ``{0,1}``; their value (not index) is the
label. :func:`find_identifiers` finds nominal attributes with a different
value in every row, which the converter leaves out.

Files are read as UTF-8 with or without a byte-order mark (UTF-16 when it
starts with a UTF-16 byte-order mark), with any line ends (LF, CRLF, CR).

Rows are parsed in blocks of :data:`BLOCK_ROWS`; a bad row raises
:class:`~dmlr.errors.DmlrInputError` naming the file and 1-based line.

The first section holds line-oriented helpers (gzip-transparent reading,
block grouping, number parsing with error location) that
:mod:`dmlr.data.libsvm` shares.
"""

from __future__ import annotations

import gzip
import re
import warnings
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dmlr.data.nominal import SKIPPED, feature_layout, identifier_attributes
from dmlr.errors import DmlrInputError

#: Rows parsed at a time and handed to the store writer as one block.
BLOCK_ROWS = 4096
#: Tokens longer than this are held in object arrays instead of fixed-width
#: unicode arrays (whose size is the longest token times the token count).
_MAX_FIXED_WIDTH = 64


# ---------------------------------------------------------------------------
# Line-oriented helpers shared with dmlr.data.libsvm
# ---------------------------------------------------------------------------


def open_text(path):
    """Open a text file for reading; gzip-compressed files are decompressed.

    Compression is recognised by the gzip magic bytes, not by the name. The
    text is UTF-8, its byte-order mark (written by some Windows tools)
    dropped; a file starting with a UTF-16 byte-order mark is read as
    UTF-16. Bytes that are not valid UTF-8 are kept as surrogate escapes.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    io.TextIOBase
        A text stream with universal newlines (``\\n``, ``\\r\\n`` and
        ``\\r`` all end a line).
    """
    path = Path(path)
    with open(path, "rb") as fh:
        magic = fh.read(2)
    opener = gzip.open if magic == b"\x1f\x8b" else open
    try:
        with opener(path, "rb") as fh:
            head = fh.read(2)
    except (EOFError, gzip.BadGzipFile, zlib.error):
        head = b""  # reported with its line by iter_lines
    encoding = "utf-16" if head in (b"\xff\xfe", b"\xfe\xff") else "utf-8-sig"
    return opener(path, "rt", encoding=encoding, errors="surrogateescape")


def iter_lines(path):
    """Yield every line of a (possibly gzipped) text file.

    Parameters
    ----------
    path : str or Path

    Yields
    ------
    line_no : int
        1-based line number.
    text : str
        The line without its newline.
    terminated : bool
        Whether the line ended with a newline (only the last line may not).
    """
    no = 0
    try:
        with open_text(path) as fh:
            for no, raw in enumerate(fh, 1):
                if raw.endswith("\n"):
                    yield no, raw[:-1], True
                else:
                    yield no, raw, False
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise DmlrInputError(f"corrupt or truncated gzip stream ({err})", path=path, line=no + 1) from None


def parse_in_blocks(records, parse, *, path, block_rows=BLOCK_ROWS, drop_truncated_last_line=False, dropped=None):
    """Group data lines into blocks and parse each block.

    Parameters
    ----------
    records : iterable of (int, str, bool)
        Data lines as yielded by :func:`iter_lines`, comments removed.
    parse : callable
        ``parse(texts, line_nos)`` returning one parsed block.
    path : str or Path
        The file, for messages.
    block_rows : int
        Lines per block.
    drop_truncated_last_line : bool
        If the last line of the file has no newline and does not parse,
        drop it with a warning instead of raising.
    dropped : list, optional
        Receives the numbers of dropped lines.

    Yields
    ------
    object
        What ``parse`` returns, block by block.
    """
    texts, nos = [], []
    cut = []  # the number of a last line with no line end

    def parse_block(texts, nos):
        try:
            return parse(texts, nos)
        except DmlrInputError as err:
            if cut and err.line == cut[0]:
                raise DmlrInputError(
                    f"{err.message} (the file's last line has no line end: a cut file? "
                    f"drop_truncated_last_line=True, or dmlr convert --drop-truncated-last-line, drops it)",
                    path=err.path,
                    line=err.line,
                ) from err
            raise

    for no, text, terminated in records:
        if not terminated:
            cut.append(no)
        if not terminated and drop_truncated_last_line:
            if texts:
                yield parse_block(texts, nos)
            try:
                last = parse([text], [no])
            except DmlrInputError as err:
                warnings.warn(f"dropped truncated last line: {err}", stacklevel=2)
                if dropped is not None:
                    dropped.append(no)
                return
            yield last
            return
        texts.append(text)
        nos.append(no)
        if len(texts) >= block_rows:
            yield parse_block(texts, nos)
            texts, nos = [], []
    if texts:
        yield parse_block(texts, nos)


def str_array(tokens) -> np.ndarray:
    """Return tokens as a numpy string array, fixed-width when they are short."""
    if tokens and max(map(len, tokens)) > _MAX_FIXED_WIDTH:
        arr = np.empty(len(tokens), dtype=object)
        arr[:] = tokens
        return arr
    return np.array(tokens, dtype=str)


def parse_numbers(tokens, dtype, fail) -> np.ndarray:
    """Convert a string array to numbers, reporting the first bad token.

    Parameters
    ----------
    tokens : ndarray of str
    dtype : numpy dtype
        ``np.float64`` or ``np.int64``.
    fail : callable
        ``fail(k, token)`` raises the error for the ``k``-th token.

    Returns
    -------
    ndarray of dtype
    """
    if len(tokens) == 0:
        return np.empty(0, dtype=dtype)
    try:
        return tokens.astype(dtype)
    except (ValueError, OverflowError, TypeError):
        convert = float if np.dtype(dtype).kind == "f" else int
        for k, tok in enumerate(tokens):
            try:
                convert(tok)
            except (ValueError, OverflowError, TypeError):
                fail(k, str(tok))
        raise  # pragma: no cover - numpy and Python disagree on a token


def first_duplicate(rows: np.ndarray, cols: np.ndarray, n_cols: int) -> int | None:
    """Index of an entry repeating an earlier (row, col) pair, or None."""
    if rows.size < 2:
        return None
    keys = rows.astype(np.int64) * n_cols + cols
    order = np.argsort(keys, kind="stable")
    dup = np.flatnonzero(np.diff(keys[order]) == 0)
    return None if dup.size == 0 else int(order[dup[0] + 1])


# ---------------------------------------------------------------------------
# Quoting
# ---------------------------------------------------------------------------

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
_QUOTES = "'\""


def unquote(token: str) -> str:
    """Strip matching ARFF quotes and resolve backslash escapes inside them.

    Unquoted tokens are returned unchanged (so a raw ``TAG_m\\'usica``
    keeps its backslash, as MULAN's XML files spell it).
    """
    if len(token) >= 2 and token[0] in _QUOTES and token[-1] == token[0]:
        body, out, i = token[1:-1], [], 0
        while i < len(body):
            c = body[i]
            if c == "\\" and i + 1 < len(body):
                out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
                i += 2
                continue
            out.append(c)
            i += 1
        return "".join(out)
    return token


def split_quoted(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside quotes; each piece stripped and unquoted.

    Raises
    ------
    ValueError
        On an unterminated quote.
    """
    pieces, start, quote, i = [], 0, None, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in _QUOTES:
            quote = c
        elif c == sep:
            pieces.append(text[start:i])
            start = i + 1
        i += 1
    if quote:
        raise ValueError(f"unterminated {quote} quote")
    pieces.append(text[start:])
    return [unquote(p.strip()) for p in pieces]


def _take_name(text: str) -> tuple[str, str]:
    """Split ``name rest`` where the name may be quoted; return (name, rest)."""
    if text and text[0] in _QUOTES:
        i = 1
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == text[0]:
                return unquote(text[: i + 1]), text[i + 1 :]
            i += 1
        raise ValueError(f"unterminated {text[0]} quote")
    parts = text.split(None, 1)
    return parts[0], (parts[1] if len(parts) > 1 else "")


# ---------------------------------------------------------------------------
# Header
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ArffAttribute:
    """One ``@attribute`` declaration.

    Attributes
    ----------
    name : str
    values : tuple of str or None
        Declared nominal values; None for a numeric attribute.
    line : int
        Line of the declaration.
    """

    name: str
    values: tuple | None
    line: int

    @property
    def is_nominal(self) -> bool:
        return self.values is not None

    def same_type(self, other: ArffAttribute) -> bool:
        return self.name == other.name and self.values == other.values


@dataclass
class ArffHeader:
    """The parsed header of an ARFF file.

    Attributes
    ----------
    path : Path
    relation : str
    attributes : list of ArffAttribute
    data_line : int
        Line of the ``@data`` keyword.
    sparse : bool
        Whether the first data row is a sparse ``{...}`` row.
    relation_line : int or None
        Line of the ``@relation`` declaration (None without one).
    """

    path: Path
    relation: str
    attributes: list
    data_line: int
    sparse: bool
    relation_line: int | None = None

    @property
    def names(self) -> list:
        return [a.name for a in self.attributes]


_NUMERIC_TYPES = {"numeric", "real", "integer"}


def _parse_attribute(rest: str, no: int, path) -> ArffAttribute:
    """Parse what follows ``@attribute`` on line ``no``."""
    try:
        name, kind = _take_name(rest.strip())
    except ValueError as err:
        raise DmlrInputError(f"malformed @attribute: {err}", path=path, line=no) from None
    kind = kind.strip()
    if kind.lower() in _NUMERIC_TYPES:
        return ArffAttribute(name, None, no)
    if kind.startswith("{"):
        if not kind.endswith("}"):
            raise DmlrInputError(f"nominal attribute {name!r}: value list not closed by '}}'", path=path, line=no)
        try:
            values = tuple(split_quoted(kind[1:-1]))
        except ValueError as err:
            raise DmlrInputError(f"nominal attribute {name!r}: {err}", path=path, line=no) from None
        return ArffAttribute(name, values, no)
    word = kind.split(None, 1)[0].lower() if kind else "(none)"
    if word in {"string", "date", "relational"}:
        raise DmlrInputError(
            f"attribute {name!r} has type {word}; only numeric and nominal attributes are supported", path=path, line=no
        )
    raise DmlrInputError(f"attribute {name!r}: unknown type {kind!r}", path=path, line=no)


def _is_data(text: str) -> bool:
    s = text.strip()
    return bool(s) and s[0] != "%"


def read_header(path) -> ArffHeader:
    """Parse the header of an ARFF file and peek at its first data row.

    Parameters
    ----------
    path : str or Path
        An ARFF file, plain or gzip-compressed (``.arff.gz``).

    Returns
    -------
    ArffHeader
        The relation, the attributes in order, and whether the first data row is sparse.

    Raises
    ------
    DmlrInputError
        On a malformed or unsupported declaration, or a missing ``@data``.
    """
    path = Path(path)
    relation, relation_line, attributes, data_line, no = "", None, [], None, 0
    declared = {}
    lines = iter_lines(path)
    try:
        for no, text, _ in lines:
            if not _is_data(text):
                continue
            parts = text.strip().split(None, 1)
            key, rest = parts[0].lower(), (parts[1] if len(parts) > 1 else "")
            if key == "@relation":
                relation, relation_line = unquote(rest.strip()), no
            elif key == "@attribute":
                attr = _parse_attribute(rest, no, path)
                if attr.name in declared:
                    raise DmlrInputError(
                        f"attribute {attr.name!r} is declared twice (first on line {declared[attr.name]})",
                        path=path,
                        line=no,
                    )
                declared[attr.name] = no
                attributes.append(attr)
            elif key == "@data":
                data_line = no
                break
            else:
                raise DmlrInputError(
                    f"expected @relation, @attribute or @data, got {text.strip()[:40]!r}", path=path, line=no
                )
        if data_line is None:
            raise DmlrInputError("no @data line: the file ends inside the header", path=path, line=no)
        if not attributes:
            raise DmlrInputError("no @attribute declarations", path=path, line=data_line)
        first = next((t for _, t, _ in lines if _is_data(t)), "")
    finally:
        lines.close()
    return ArffHeader(path, relation, attributes, data_line, first.lstrip().startswith("{"), relation_line)


# ---------------------------------------------------------------------------
# Which attributes are labels
# ---------------------------------------------------------------------------

_MEKA_C = re.compile(r"(?:^|\s|:)-C\s+(-?\d+)")


def meka_label_count(relation: str) -> int | None:
    """The ``L`` of a MEKA relation name ``'...: -C L ...'``, or None."""
    m = _MEKA_C.search(relation)
    return int(m.group(1)) if m else None


def find_xml(path) -> Path | None:
    """Find the MULAN label file next to an ARFF file.

    Tries the file's stem, then every shorter prefix ending before a ``-``,
    ``_`` or ``.``, and returns the first ``<prefix>.xml`` that exists, so
    ``emotions-train.arff.gz`` finds ``emotions.xml`` and
    ``Corel5k-train-sparse.arff.gz`` finds ``Corel5k.xml``.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Path or None
    """
    path = Path(path)
    stem = path.name
    for suffix in (".gz", ".arff"):
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    cuts = [len(stem)] + [i for i in range(len(stem) - 1, 0, -1) if stem[i] in "-_."]
    for cut in cuts:
        candidate = path.with_name(stem[:cut] + ".xml")
        if candidate.is_file():
            return candidate
    return None


def read_xml_labels(xml) -> list:
    """Label names from a MULAN XML file (nested hierarchies flattened).

    Parameters
    ----------
    xml : str or Path
        The ``<labels>`` file that names an ARFF file's label attributes.

    Returns
    -------
    list of str
        The labels' names in document order: the ARFF attributes they name are the labels.
    """
    try:
        root = ET.parse(xml).getroot()
    except (ET.ParseError, OSError) as err:
        raise DmlrInputError(f"cannot read MULAN label file: {err}", path=xml) from None
    names = [el.get("name") for el in root.iter() if el.tag.rsplit("}", 1)[-1] == "label"]
    if not names or any(n is None for n in names):
        raise DmlrInputError("MULAN label file has no <label name=...> elements (or one without a name)", path=xml)
    return names


def _columns_from_xml(header: ArffHeader, xml) -> np.ndarray:
    position = {n: i for i, n in enumerate(header.names)}  # names are unique (read_header)
    cols, missing = [], []
    for label in read_xml_labels(xml):
        # An XML name is matched as written, else with its backslash escapes resolved.
        col = position.get(label, position.get(unquote(f"'{label}'")))
        if col is None:
            missing.append(label)
        else:
            cols.append(col)
    if missing:
        raise DmlrInputError(
            f"{len(missing)} label(s) of {Path(xml).name} are not attributes of the ARFF file, e.g. {missing[:3]}",
            path=header.path,
        )
    return np.array(sorted(set(cols)), dtype=np.int64)


def _columns_from_meka(header: ArffHeader, n_labels) -> np.ndarray:
    c = meka_label_count(header.relation)
    line = header.relation_line or header.data_line
    if c is None:
        raise DmlrInputError(
            f"MEKA ARFF needs '-C <L>' in the relation name, got {header.relation!r}", path=header.path, line=line
        )
    n_attr = len(header.attributes)
    if c == 0 or abs(c) >= n_attr:
        raise DmlrInputError(
            f"MEKA relation says -C {c} but the file has {n_attr} attributes", path=header.path, line=line
        )
    if n_labels is not None and n_labels != abs(c):
        raise DmlrInputError(f"n_labels={n_labels} but the MEKA relation says -C {c}", path=header.path, line=line)
    return np.arange(c) if c > 0 else np.arange(n_attr + c, n_attr)


def label_columns(header: ArffHeader, *, meka=False, xml=None, n_labels=None) -> tuple:
    """Decide which attributes are labels.

    In order: MEKA ``-C`` if ``meka``; else the XML file ``xml`` or one found
    by :func:`find_xml`; else the last ``n_labels`` attributes; else MEKA
    ``-C`` in the relation name.

    Parameters
    ----------
    header : ArffHeader
    meka : bool
        Use the MEKA relation convention.
    xml : str or Path, optional
        MULAN label file.
    n_labels : int, optional

    Returns
    -------
    columns : ndarray of int
        Attribute indices of the labels, ascending.
    how : str
        A short description of where the labels came from.
    """
    n_attr = len(header.attributes)
    if meka:
        return _columns_from_meka(header, n_labels), "MEKA -C in relation"
    xml = Path(xml) if xml is not None else find_xml(header.path)
    if xml is not None:
        cols = _columns_from_xml(header, xml)
        if n_labels is not None and n_labels != len(cols):
            raise DmlrInputError(
                f"n_labels={n_labels} but {xml.name} lists {len(cols)} labels", path=header.path, line=header.data_line
            )
        return cols, f"MULAN labels from {xml.name}"
    if n_labels is not None:
        if not 0 < n_labels < n_attr:
            raise DmlrInputError(
                f"n_labels={n_labels} with {n_attr} attributes (the header ends on line {header.data_line})",
                path=header.path,
                line=header.data_line,
            )
        return np.arange(n_attr - n_labels, n_attr), f"last {n_labels} attributes"
    if meka_label_count(header.relation) is not None:
        return _columns_from_meka(header, None), "MEKA -C in relation"
    raise DmlrInputError(
        "cannot tell which attributes are labels: no MULAN .xml file next to it and no "
        "MEKA '-C <L>' in the relation; pass xml= or n_labels=",
        path=header.path,
        line=header.relation_line or header.data_line,
    )


# ---------------------------------------------------------------------------
# Data rows
# ---------------------------------------------------------------------------


class _Codec:
    """Turns (attribute, value string) entries into feature and label numbers."""

    def __init__(self, header: ArffHeader, label_cols: np.ndarray):
        attrs = header.attributes
        n = len(attrs)
        self.path = header.path
        self.attributes = attrs
        self.is_label = np.zeros(n, dtype=bool)
        self.is_label[label_cols] = True
        self.column = np.empty(n, dtype=np.int64)
        self.column[~self.is_label] = np.arange(n - len(label_cols))
        self.column[self.is_label] = np.arange(len(label_cols))
        self.domain = np.full(n, -1, dtype=np.int64)
        self.lookups, self.label_values = [], []
        ids = {}
        for j, a in enumerate(attrs):
            if a.is_nominal:
                if a.values not in ids:
                    ids[a.values] = len(self.lookups)
                    self.lookups.append({v: k for k, v in enumerate(a.values)})
                    self.label_values.append(self._as_numbers(a.values))
                self.domain[j] = ids[a.values]
        self.label_default = np.zeros(len(label_cols))
        for k, j in enumerate(label_cols):
            self._check_label_declaration(attrs[j])
            if attrs[j].is_nominal:
                self.label_default[k] = self.label_values[self.domain[j]][0]

    @staticmethod
    def _as_numbers(values) -> np.ndarray:
        out = np.full(len(values), np.nan)
        for k, v in enumerate(values):
            try:
                out[k] = float(v)
            except ValueError:
                pass
        return out

    def _check_label_declaration(self, attr: ArffAttribute) -> None:
        if attr.is_nominal and not set(attr.values) <= {"0", "1"}:
            raise DmlrInputError(
                f"label attribute {attr.name!r} is declared {{{','.join(attr.values)}}}; labels must be 0/1",
                path=self.path,
                line=attr.line,
            )

    def _fail(self, message: str, k: int, attrs, rows, nos):
        a = self.attributes[attrs[k]]
        raise DmlrInputError(f"attribute {a.name!r}: {message}", path=self.path, line=nos[rows[k]])

    def encode(self, attrs: np.ndarray, strings: np.ndarray, rows: np.ndarray, nos) -> np.ndarray:
        """Numbers for entries ``strings[k]`` of attribute ``attrs[k]``.

        ``rows[k]`` is the entry's row in the block and ``nos[row]`` its line.
        """

        def fail(message, k):
            self._fail(message, k, attrs, rows, nos)

        missing = strings == "?"
        if missing.any():
            fail("missing value '?' (dmlr does not impute missing values)", int(np.argmax(missing)))
        values = np.empty(len(strings), dtype=np.float64)
        dom = self.domain[attrs]
        numeric = np.flatnonzero(dom < 0)
        if numeric.size:
            values[numeric] = parse_numbers(
                strings[numeric], np.float64, lambda k, tok: fail(f"{tok!r} is not a number", numeric[k])
            )
            bad = ~np.isfinite(values[numeric])
            if bad.any():
                k = numeric[int(np.argmax(bad))]
                fail(f"value {strings[k]!r} is NaN or infinite", k)
        for d in np.unique(dom[dom >= 0]):
            sel = np.flatnonzero(dom == d)
            uniq, inv = np.unique(strings[sel], return_inverse=True)
            codes = np.array([self.lookups[d].get(str(u), -1) for u in uniq], dtype=np.int64)[inv.ravel()]
            if (codes < 0).any():
                k = sel[int(np.argmax(codes < 0))]
                fail(f"value {strings[k]!r} is not one of the declared nominal values", k)
            as_label = self.is_label[attrs[sel]]
            values[sel] = np.where(as_label, self.label_values[d][codes], codes)
        return values


class ArffReader:
    """Stream (X, Y) row blocks out of one MULAN or MEKA ARFF file.

    Parameters
    ----------
    path : str or Path
        ``.arff`` or ``.arff.gz`` file.
    meka : bool
        Take the labels from the MEKA ``-C`` relation option.
    xml : str or Path, optional
        MULAN label file (default: found by :func:`find_xml`).
    n_labels : int, optional
        Number of labels, the last attributes if there is no XML file.

    Attributes
    ----------
    header : ArffHeader
    n_features, n_labels : int
        Columns of X (after one-hot encoding) and of Y.
    feature_names, label_names : list of str
        One name per column; a one-hot column is named ``attribute=value``.
    layout : dmlr.data.nominal.FeatureLayout
        Where each feature attribute goes in X.
    sparse : bool
        The first data row is sparse.
    store_sparse : bool
        Build CSR feature blocks (default: :attr:`sparse`; set it when
        other files of the same conversion are sparse).
    label_source : str
        Where the label columns came from.
    dropped_lines : list of int
        Lines dropped by ``drop_truncated_last_line``.
    """

    def __init__(self, path, *, meka=False, xml=None, n_labels=None):
        self.path = Path(path)
        self.header = read_header(self.path)
        cols, self.label_source = label_columns(self.header, meka=meka, xml=xml, n_labels=n_labels)
        self._codec = _Codec(self.header, cols)
        names = self.header.names
        self.label_names = [names[j] for j in cols]
        self.n_labels = len(self.label_names)
        if self.n_labels == len(names):
            raise DmlrInputError(
                "every attribute is a label; no features left", path=self.path, line=self.header.data_line
            )
        self.leave_out(())
        self.sparse = self.header.sparse
        self.store_sparse = self.sparse
        self.dropped_lines = []

    def leave_out(self, attributes) -> None:
        """Encode every feature attribute except ``attributes`` (indices) into X."""
        self.layout = feature_layout(self.header.attributes, ~self._codec.is_label, set(attributes))
        self.feature_names = self.layout.names
        self.n_features = self.layout.n_columns
        default_attrs, self._default_cols = self.layout.omitted_defaults()
        self._default_slot = np.full(len(self.header.attributes), -1, dtype=np.int64)
        self._default_slot[default_attrs] = np.arange(default_attrs.size)

    def identifier_candidates(self) -> list:
        """Nominal feature attributes with more than two declared values."""
        return [
            j
            for j, a in enumerate(self.header.attributes)
            if a.is_nominal and len(a.values) > 2 and not self._codec.is_label[j]
        ]

    def value_counts(self, attributes, *, block_rows=BLOCK_ROWS, drop_truncated_last_line=False):
        """Yield, block by block, how many rows hold each value of nominal ``attributes``.

        Only the entries of ``attributes`` are encoded; a sparse row that
        omits an attribute holds its first declared value.

        Yields
        ------
        n_rows : int
            Rows in the block.
        counts : dict of int -> ndarray of int64
            For each attribute, the rows of the block holding each value.
        """
        attributes = np.asarray(sorted(attributes), dtype=np.int64)

        def parse(texts, nos):
            rows, attrs, strings = self._tokenize(texts, nos)
            sel = np.flatnonzero(np.isin(attrs, attributes))
            codes = self._codec.encode(attrs[sel], strings[sel], rows[sel], nos).astype(np.int64)
            counts = {}
            for j in attributes:
                c = np.bincount(codes[attrs[sel] == j], minlength=len(self.header.attributes[j].values))
                c[0] += len(texts) - c.sum()
                counts[int(j)] = c
            return len(texts), counts

        records = self._data_records()
        yield from parse_in_blocks(
            records, parse, path=self.path, block_rows=block_rows, drop_truncated_last_line=drop_truncated_last_line
        )

    def check_compatible(self, other: ArffReader) -> None:
        """Raise unless ``other`` declares the same attributes and labels."""
        mine, theirs = self.header.attributes, other.header.attributes
        if len(mine) != len(theirs):
            raise DmlrInputError(
                f"{len(theirs)} attributes, but {self.path.name} has {len(mine)}",
                path=other.path,
                line=other.header.data_line,
            )
        for a, b in zip(mine, theirs):
            if not a.same_type(b):
                raise DmlrInputError(
                    f"attribute {b.name!r} differs from {self.path.name}'s {a.name!r}", path=other.path, line=b.line
                )
        if self.label_names != other.label_names:
            raise DmlrInputError(
                f"label attributes differ from {self.path.name}'s", path=other.path, line=other.header.data_line
            )

    def _data_records(self):
        """The data lines (no, text, terminated) after ``@data``; a header keyword among them
        (an ``@attribute`` after ``@data``) is an error naming its line."""
        for no, text, terminated in iter_lines(self.path):
            if no <= self.header.data_line or not _is_data(text):
                continue
            keyword = text.lstrip().split(None, 1)[0].lower()
            if keyword in ("@attribute", "@relation", "@data"):
                raise DmlrInputError(
                    f"{keyword} after @data (line {self.header.data_line}): the header must come before the data",
                    path=self.path,
                    line=no,
                )
            yield no, text, terminated

    def blocks(self, *, block_rows=BLOCK_ROWS, drop_truncated_last_line=False):
        """Yield ``(X, Y)`` blocks of at most ``block_rows`` rows.

        Parameters
        ----------
        block_rows : int
        drop_truncated_last_line : bool
            Drop (with a warning) a last line that has no newline and does
            not parse, instead of raising.

        Yields
        ------
        X : ndarray (r, n_features) or scipy.sparse.csr_matrix
            CSR when ``store_sparse``.
        Y : ndarray (r, n_labels) int8
        """
        records = self._data_records()
        yield from parse_in_blocks(
            records,
            self._parse_block,
            path=self.path,
            block_rows=block_rows,
            drop_truncated_last_line=drop_truncated_last_line,
            dropped=self.dropped_lines,
        )

    # -- one block ----------------------------------------------------------
    def _parse_block(self, texts, nos):
        rows, attrs, strings = self._tokenize(texts, nos)
        values = self._codec.encode(attrs, strings, rows, nos)
        return self._assemble(len(texts), rows, attrs, values, nos)

    def _tokenize(self, texts, nos):
        """Split rows into flat (row, attribute, value string) entries."""
        n_attr = len(self.header.attributes)
        dense_rows, dense_vals = [], []
        sp_rows, sp_counts, sp_idx, sp_vals = [], [], [], []
        for r, (text, no) in enumerate(zip(texts, nos)):
            s = text.strip()
            if s.startswith("{"):
                idx, vals = self._split_sparse(s, no)
                sp_rows.append(r)
                sp_counts.append(len(idx))
                sp_idx += idx
                sp_vals += vals
            else:
                dense_rows.append(r)
                dense_vals += self._split_dense(s, no, n_attr)
        sp_rows = np.repeat(np.array(sp_rows, dtype=np.int64), sp_counts)
        sp_attrs = self._sparse_indices(sp_idx, sp_rows, nos, n_attr)
        rows = np.concatenate([np.repeat(np.array(dense_rows, dtype=np.int64), n_attr), sp_rows])
        attrs = np.concatenate([np.tile(np.arange(n_attr), len(dense_rows)), sp_attrs])
        return rows, attrs, str_array(dense_vals + sp_vals)

    def _split_dense(self, s: str, no: int, n_attr: int) -> list:
        if "'" in s or '"' in s:
            try:
                vals = split_quoted(s)
            except ValueError as err:
                raise DmlrInputError(str(err), path=self.path, line=no) from None
        else:
            if " " in s or "\t" in s:
                s = "".join(s.split())
            vals = s.split(",")
        if len(vals) != n_attr:
            raise DmlrInputError(
                f"row has {len(vals)} values, expected {n_attr} (truncated or malformed line)", path=self.path, line=no
            )
        return vals

    def _split_sparse(self, s: str, no: int) -> tuple:
        if not s.endswith("}"):
            raise DmlrInputError("sparse row not closed by '}' (truncated or malformed line)", path=self.path, line=no)
        body = s[1:-1].strip()
        if not body:
            return [], []
        quoted = "'" in body or '"' in body
        try:
            items = split_quoted(body) if quoted else body.split(",")
        except ValueError as err:
            raise DmlrInputError(str(err), path=self.path, line=no) from None
        idx, vals = [], []
        for item in items:
            pair = item.split(None, 1)
            if len(pair) != 2 or (not quoted and len(pair[1].split()) != 1):
                raise DmlrInputError(
                    f"malformed sparse entry {item.strip()!r}; expected 'index value'", path=self.path, line=no
                )
            idx.append(pair[0])
            vals.append(unquote(pair[1].strip()) if quoted else pair[1])
        return idx, vals

    def _sparse_indices(self, tokens, rows, nos, n_attr) -> np.ndarray:
        def fail(k, tok):
            raise DmlrInputError(f"sparse index {tok!r} is not an integer", path=self.path, line=nos[rows[k]])

        idx = parse_numbers(str_array(tokens), np.int64, fail)
        bad = (idx < 0) | (idx >= n_attr)
        if bad.any():
            k = int(np.argmax(bad))
            raise DmlrInputError(f"sparse index {idx[k]} outside 0..{n_attr - 1}", path=self.path, line=nos[rows[k]])
        k = first_duplicate(rows, idx, n_attr)
        if k is not None:
            raise DmlrInputError(f"sparse index {idx[k]} given twice in one row", path=self.path, line=nos[rows[k]])
        return idx

    def _assemble(self, n_rows, rows, attrs, values, nos):
        codec = self._codec
        lab = codec.is_label[attrs]
        feat = self.layout.kind[attrs] != SKIPPED
        fr = rows[feat]
        fc, fv = self.layout.columns(attrs[feat], values[feat])
        if self._default_cols.size and len(fr) < n_rows * (self.layout.kind != SKIPPED).sum():
            # Sparse rows omit attributes: an omitted nominal takes its first value.
            slot = self._default_slot[attrs[feat]]
            present = np.zeros((n_rows, self._default_cols.size), dtype=bool)
            present[fr[slot >= 0], slot[slot >= 0]] = True
            r, k = np.nonzero(~present)
            fr = np.concatenate([fr, r])
            fc = np.concatenate([fc, self._default_cols[k]])
            fv = np.concatenate([fv, np.ones(r.size)])
        if self.store_sparse:
            keep = fv != 0
            X = sp.csr_matrix((fv[keep], (fr[keep], fc[keep])), shape=(n_rows, self.n_features))
        else:
            X = np.zeros((n_rows, self.n_features))
            X[fr, fc] = fv
        Y = np.tile(codec.label_default, (n_rows, 1))
        Y[rows[lab], codec.column[attrs[lab]]] = values[lab]
        bad = (Y != 0) & (Y != 1)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise DmlrInputError(
                f"label {self.label_names[c]!r} has value {Y[r, c]:g}; labels must be 0 or 1",
                path=self.path,
                line=nos[r],
            )
        return X, Y.astype(np.int8)


def find_identifiers(readers, *, block_rows=BLOCK_ROWS, drop_truncated_last_line=False) -> list:
    """Nominal feature attributes with a different value in every row of all files.

    Such an attribute (an instance id, a file name) identifies rows instead
    of describing them: one-hot it becomes one column per row. Only nominal
    attributes with more than two declared values can qualify; if a file
    has none, nothing is read. Otherwise the files are read once more,
    encoding only those attributes, and the pass stops as soon as each of
    them has repeated a value, which for a real categorical attribute is
    within the first block of rows. Only an attribute that is an identifier
    costs a whole extra pass over the data.

    Parameters
    ----------
    readers : list of ArffReader
        The files of one conversion, with the same attributes.
    block_rows : int
    drop_truncated_last_line : bool
        As for :meth:`ArffReader.blocks`.

    Returns
    -------
    list of int
        Attribute indices, ascending.
    """
    candidates = readers[0].identifier_candidates()
    counts = {j: np.zeros(len(readers[0].header.attributes[j].values), dtype=np.int64) for j in candidates}
    n_rows = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a dropped truncated line is reported once, by blocks()
        for reader in readers:
            if not counts:
                break
            blocks = reader.value_counts(
                candidates, block_rows=block_rows, drop_truncated_last_line=drop_truncated_last_line
            )
            try:
                for n, block_counts in blocks:
                    n_rows += n
                    for j in list(counts):
                        counts[j] += block_counts[j]
                        if counts[j].max() > 1:
                            del counts[j]
                    if not counts:
                        break
            finally:
                blocks.close()
    return identifier_attributes(counts, n_rows)
