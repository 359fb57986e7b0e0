"""Streaming readers for LIBSVM multi-label and Extreme Classification text files.

LIBSVM multi-label rows (as written by scikit-learn's
``dump_svmlight_file(..., multilabel=True)``)::

    l1,l2,... idx:val idx:val ...     # optional comment

Labels are 0-based integers separated by commas (no spaces); a row without
labels starts directly with its features (or is empty after the comment).
Feature indices are 1-based unless ``zero_based`` says otherwise; ``"auto"``
(scikit-learn's rule) reads the files as 0-based if an index 0 occurs in any
of them, else as 1-based. Deciding needs a first pass over every file, which
the converter makes anyway to learn the sizes (:meth:`SvmLightReader.scan`).
A file holding index 0 read with ``zero_based=False`` is refused, naming the
line, never shifted.

The Extreme Classification (XC) repository format is the same with a header
line ``n d l`` (rows, features, labels) and 0-based feature indices; the
file must hold exactly ``n`` rows.

Blank lines and ``#`` comments are skipped. Errors name the file and the
1-based line. Lines are grouped and parsed by the helpers shared with
:mod:`dmlr.data.arff`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dmlr.data.arff import BLOCK_ROWS, first_duplicate, iter_lines, parse_in_blocks, parse_numbers, str_array
from dmlr.errors import DmlrInputError


def parse_xc_header(text: str):
    """``(n, d, l)`` if ``text`` is three non-negative integers, else None."""
    toks = text.split()
    if len(toks) == 3 and all(t.isdigit() for t in toks):
        return tuple(int(t) for t in toks)
    return None


def read_xc_header(path):
    """Return ``(line_no, (n, d, l))`` of an XC file's header, or None.

    The header is the first non-blank line if it holds exactly three
    non-negative integers.

    Parameters
    ----------
    path : str or Path
    """
    lines = iter_lines(path)
    try:
        for no, text, _ in lines:
            if text.strip():
                header = parse_xc_header(text)
                return None if header is None else (no, header)
    finally:
        lines.close()
    return None


@dataclass
class SvmBlock:
    """One parsed block of rows, before indices are checked against sizes.

    Attributes
    ----------
    nos : list of int
        Line number of each row.
    label_rows, labels : ndarray of int64
        Row (within the block) and label index of every label entry.
    feat_ptr : ndarray of int64 (r + 1,)
        CSR row pointer into ``idx`` / ``val``.
    idx : ndarray of int64
        Feature indices as written.
    val : ndarray of float64
        Feature values.
    """

    nos: list
    label_rows: np.ndarray
    labels: np.ndarray
    feat_ptr: np.ndarray
    idx: np.ndarray
    val: np.ndarray

    @property
    def n_rows(self) -> int:
        return len(self.nos)

    def feature_rows(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_rows), np.diff(self.feat_ptr))


def _split_row(text: str, no: int, path, lab_tok: list, idx_tok: list, val_tok: list) -> tuple:
    """Append one row's tokens to the lists; return (n_labels, n_features)."""
    toks = text.split()
    n_lab = 0
    if toks and ":" not in toks[0]:
        labels = toks.pop(0).split(",")
        if "" in labels:
            raise DmlrInputError(f"empty label in {','.join(labels)!r}", path=path, line=no)
        lab_tok += labels
        n_lab = len(labels)
    for tok in toks:
        i, sep, v = tok.partition(":")
        if not sep or not i or not v or ":" in v:
            raise DmlrInputError(f"malformed feature {tok!r}; expected index:value", path=path, line=no)
        idx_tok.append(i)
        val_tok.append(v)
    return n_lab, len(toks)


def parse_svm_block(texts, nos, path) -> SvmBlock:
    """Parse LIBSVM/XC rows into a :class:`SvmBlock`.

    Checks syntax, integer indices, finite values and repeated feature
    indices; index ranges are checked later by :meth:`SvmLightReader.blocks`.
    """
    lab_tok, idx_tok, val_tok, lab_cnt, feat_cnt = [], [], [], [], []
    for text, no in zip(texts, nos):
        n_lab, n_feat = _split_row(text, no, path, lab_tok, idx_tok, val_tok)
        lab_cnt.append(n_lab)
        feat_cnt.append(n_feat)
    label_rows = np.repeat(np.arange(len(texts)), lab_cnt)
    feat_ptr = np.concatenate([[0], np.cumsum(feat_cnt, dtype=np.int64)])
    feat_rows = np.repeat(np.arange(len(texts)), feat_cnt)

    def failer(what, rows):
        def fail(k, tok):
            raise DmlrInputError(f"{what} {tok!r} is not a valid number", path=path, line=nos[rows[k]])

        return fail

    labels = parse_numbers(str_array(lab_tok), np.int64, failer("label", label_rows))
    idx = parse_numbers(str_array(idx_tok), np.int64, failer("feature index", feat_rows))
    val = parse_numbers(str_array(val_tok), np.float64, failer("feature value", feat_rows))
    for what, arr, rows in (("label", labels, label_rows), ("feature index", idx, feat_rows)):
        if (arr < 0).any():
            k = int(np.argmax(arr < 0))
            raise DmlrInputError(f"negative {what} {arr[k]}", path=path, line=nos[rows[k]])
    if not np.isfinite(val).all():
        k = int(np.argmax(~np.isfinite(val)))
        raise DmlrInputError(f"feature value {val_tok[k]!r} is NaN or infinite", path=path, line=nos[feat_rows[k]])
    k = first_duplicate(feat_rows, idx, int(idx.max(initial=0)) + 1)
    if k is not None:
        raise DmlrInputError(f"feature index {idx[k]} given twice in one row", path=path, line=nos[feat_rows[k]])
    return SvmBlock(list(nos), label_rows, labels, feat_ptr, idx, val)


#: Lines with a feature index 0 that :class:`SvmStats` keeps, for messages.
ZERO_LINES_KEPT = 5


@dataclass
class SvmStats:
    """What a first pass over a LIBSVM file learns.

    Attributes
    ----------
    n_rows : int
    max_label : int
        -1 if no row has a label.
    min_index, max_index : int
        Smallest and largest feature index as written (-1 if none).
    zero_rows : int
        Rows holding a feature index 0.
    zero_lines : list of (path, line)
        The first :data:`ZERO_LINES_KEPT` of them.
    """

    n_rows: int = 0
    max_label: int = -1
    min_index: int = -1
    max_index: int = -1
    zero_rows: int = 0
    zero_lines: list = field(default_factory=list)

    def update(self, block: SvmBlock, path=None) -> None:
        self.n_rows += block.n_rows
        self.max_label = max(self.max_label, int(block.labels.max(initial=-1)))
        if block.idx.size:
            lo, hi = int(block.idx.min()), int(block.idx.max())
            self.min_index = lo if self.min_index < 0 else min(self.min_index, lo)
            self.max_index = max(self.max_index, hi)
            if lo == 0:
                rows = np.unique(block.feature_rows()[block.idx == 0])
                self.zero_rows += int(rows.size)
                room = ZERO_LINES_KEPT - len(self.zero_lines)
                self.zero_lines += [(path, block.nos[r]) for r in rows[:room]]

    @property
    def zero_at(self) -> tuple | None:
        """(path, line) where a feature index 0 first occurs, or None."""
        return self.zero_lines[0] if self.zero_lines else None

    def merge(self, other: SvmStats) -> SvmStats:
        out = SvmStats(self.n_rows, self.max_label, self.min_index, self.max_index)
        out.zero_rows = self.zero_rows + other.zero_rows
        out.zero_lines = (self.zero_lines + other.zero_lines)[:ZERO_LINES_KEPT]
        out.n_rows += other.n_rows
        out.max_label = max(out.max_label, other.max_label)
        if other.min_index >= 0:
            out.min_index = other.min_index if out.min_index < 0 else min(out.min_index, other.min_index)
        out.max_index = max(out.max_index, other.max_index)
        return out


class SvmLightReader:
    """Stream (X, Y) row blocks out of a LIBSVM multi-label or XC file.

    Parameters
    ----------
    path : str or Path
        Text file, optionally gzipped.
    xc : bool
        The file starts with an XC ``n d l`` header.

    Attributes
    ----------
    header : tuple of int or None
        ``(n, d, l)`` of an XC file.
    dropped_lines : list of int
        Lines dropped by ``drop_truncated_last_line``.
    """

    def __init__(self, path, *, xc=False):
        self.path = Path(path)
        self.xc = xc
        self.header = None
        self._header_line = 0
        self.dropped_lines = []
        if xc:
            found = read_xc_header(self.path)
            if found is None:
                raise DmlrInputError(
                    "XC file must start with a header line 'n d l' of three integers", path=self.path, line=1
                )
            self._header_line, self.header = found

    def _records(self):
        for no, text, terminated in iter_lines(self.path):
            if no <= self._header_line:
                continue
            if "#" in text:
                text = text.split("#", 1)[0]
            if text.strip():
                yield no, text, terminated

    def _parsed(self, block_rows, drop_truncated_last_line):
        return parse_in_blocks(
            self._records(),
            lambda t, n: parse_svm_block(t, n, self.path),
            path=self.path,
            block_rows=block_rows,
            drop_truncated_last_line=drop_truncated_last_line,
            dropped=self.dropped_lines,
        )

    def scan(self, *, block_rows=BLOCK_ROWS, drop_truncated_last_line=False) -> SvmStats:
        """Read the whole file once (streaming) and return its :class:`SvmStats`."""
        stats = SvmStats()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a dropped line is reported once, by blocks()
            for block in self._parsed(block_rows, drop_truncated_last_line):
                stats.update(block, self.path)
        self.dropped_lines.clear()
        return stats

    def blocks(self, *, n_features, n_labels, offset=0, block_rows=BLOCK_ROWS, drop_truncated_last_line=False):
        """Yield ``(X, Y)`` blocks.

        Parameters
        ----------
        n_features, n_labels : int
            Sizes; larger indices are errors naming the line.
        offset : int
            Subtracted from the written feature indices (1 for 1-based files).
        block_rows : int
        drop_truncated_last_line : bool
            Drop (with a warning) a last line without newline that does not parse.

        Yields
        ------
        X : scipy.sparse.csr_matrix (r, n_features)
        Y : ndarray (r, n_labels) int8
        """
        seen = 0
        last_line = self._header_line
        for block in self._parsed(block_rows, drop_truncated_last_line):
            self._check_row_count(seen + block.n_rows, block, seen)
            seen += block.n_rows
            last_line = block.nos[-1]
            yield self._to_arrays(block, n_features, n_labels, offset)
        if self.header is not None and seen != self.header[0]:
            raise DmlrInputError(
                f"the XC header announces {self.header[0]} rows but the file holds {seen} (truncated?)",
                path=self.path,
                line=last_line,
            )

    def _check_row_count(self, total, block, seen):
        if self.header is not None and total > self.header[0]:
            raise DmlrInputError(
                f"more rows than the {self.header[0]} announced by the XC header",
                path=self.path,
                line=block.nos[self.header[0] - seen],
            )

    def _check_range(self, arr, size, rows, block, what, shift=0):
        """Raise naming the line of the first ``arr`` value outside ``0..size-1``."""
        bad = (arr < 0) | (arr >= size)
        if bad.any():
            k = int(np.argmax(bad))
            raise DmlrInputError(
                f"{what} {arr[k] + shift} is outside {shift}..{size - 1 + shift}",
                path=self.path,
                line=block.nos[rows[k]],
            )

    def _to_arrays(self, block: SvmBlock, n_features, n_labels, offset):
        idx = block.idx - offset
        self._check_range(idx, n_features, block.feature_rows(), block, f"feature index ({offset}-based)", shift=offset)
        self._check_range(block.labels, n_labels, block.label_rows, block, "label")
        X = sp.csr_matrix((block.val, idx, block.feat_ptr), shape=(block.n_rows, n_features))
        X.eliminate_zeros()
        Y = np.zeros((block.n_rows, n_labels), dtype=np.int8)
        Y[block.label_rows, block.labels] = 1
        return X, Y
