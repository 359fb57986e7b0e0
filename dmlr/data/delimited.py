"""Delimited text (CSV, TSV): numeric feature columns and 0/1 label columns.

The form most users hold a multi-label set in: one row per line, separated
by commas (or semicolons, or tabs: the first line decides), with an
optional header line naming the columns. The label columns are the last
``n_labels`` ones, or, given a header, those named in a list or whose names
start with a prefix (``labels=``); every other column is a feature, in the
file's order. The file is read line by line in blocks
(gzip-transparent, :func:`dmlr.data.arff.iter_lines`); a bad value is
reported with its line and column. Every feature must have a value: a
missing one is an error (dmlr's models take no missing values).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from dmlr.data.arff import BLOCK_ROWS, iter_lines, parse_in_blocks, parse_numbers, str_array
from dmlr.errors import DmlrInputError

#: File name endings of delimited text (before any ``.gz``).
CSV_SUFFIXES = (".csv", ".tsv")
#: Separators recognised on the first line, in order of preference.
DELIMITERS = ("\t", ";", ",")


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


class DelimitedReader:
    """One delimited text file: its columns, header and row blocks.

    Parameters
    ----------
    path : str or Path
    n_labels : int, optional
        The last ``n_labels`` columns are the labels (0/1).
    labels : str or sequence of str, optional
        With a header line instead: the label columns' names (a sequence),
        or the prefix of their names (a string).
    """

    def __init__(self, path, n_labels: int | None = None, labels=None):
        self.path = Path(path)
        self.dropped_lines: list = []
        first = next(((no, text) for no, text, _ in iter_lines(self.path) if text.strip()), None)
        if first is None:
            raise DmlrInputError("empty file: no header or data line", path=self.path)
        no, text = first
        self.delimiter = next((d for d in DELIMITERS if d in text), ",")
        tokens = next(csv.reader([text], delimiter=self.delimiter))
        self.header_line = no if not all(_is_number(t) for t in tokens if t.strip()) else None
        self.n_columns = len(tokens)
        names = [t.strip() for t in tokens] if self.header_line is not None else None
        self.label_idx = self._label_columns(names, n_labels, labels, no)
        self.feature_idx = np.setdiff1d(np.arange(self.n_columns), self.label_idx)
        self.n_labels, self.n_features = len(self.label_idx), len(self.feature_idx)
        self.feature_names = [names[j] for j in self.feature_idx] if names else None
        self.label_names = [names[j] for j in self.label_idx] if names else None

    def _label_columns(self, names, n_labels, labels, no) -> np.ndarray:
        """Indices of the label columns (see the class), at least one and not all."""
        if (n_labels is None) == (labels is None):
            raise DmlrInputError(
                "say which columns are labels: n_labels= (the last ones; dmlr convert --n-labels) or, with a "
                "header line, labels= (their names, or a prefix of them; dmlr convert --labels)",
                path=self.path,
                line=no,
            )
        if n_labels is not None:
            if not isinstance(n_labels, int) or isinstance(n_labels, bool) or not 1 <= n_labels < self.n_columns:
                raise DmlrInputError(
                    f"n_labels must be an integer from 1 to {self.n_columns - 1} (the file has {self.n_columns} "
                    f"columns: features first, then the labels), got {n_labels!r}",
                    path=self.path,
                    line=no,
                )
            return np.arange(self.n_columns - n_labels, self.n_columns)
        if names is None:
            raise DmlrInputError(
                "labels= names columns, but the first line is data, not a header: pass n_labels=", path=self.path
            )
        if isinstance(labels, str):
            found = [j for j, name in enumerate(names) if name.startswith(labels)]
            what = f"no column name starts with {labels!r}"
        else:
            missing = [name for name in labels if name not in names]
            if missing:
                raise DmlrInputError(f"no column named {missing[0]!r} in the header", path=self.path, line=no)
            found = sorted(names.index(name) for name in labels)
            what = "labels= is empty"
        if not found or len(found) == self.n_columns:
            raise DmlrInputError(
                what if not found else "every column would be a label: no features left", path=self.path, line=no
            )
        return np.asarray(found)

    def _records(self):
        for no, text, terminated in iter_lines(self.path):
            if no == self.header_line or not text.strip():
                continue
            yield no, text, terminated

    def _parse(self, texts, nos):
        """One block of lines as (X float64 (m, d), Y int8 (m, l))."""
        rows = [t.split(self.delimiter) for t in texts]
        for row, no in zip(rows, nos):
            if len(row) != self.n_columns:
                raise DmlrInputError(
                    f"{len(row)} columns, the first line has {self.n_columns}", path=self.path, line=no
                )
        tokens = str_array([tok.strip().strip("\"'") for row in rows for tok in row])

        def fail(k, token):
            i, j = divmod(k, self.n_columns)
            what = "missing value" if not token else f"not a number: {token!r}"
            raise DmlrInputError(f"{what} in column {j + 1}", path=self.path, line=nos[i])

        values = parse_numbers(tokens, np.float64, fail).reshape(len(rows), self.n_columns)
        X, Y = values[:, self.feature_idx], values[:, self.label_idx]
        bad = np.argwhere((Y != 0) & (Y != 1))
        if bad.size:
            i, j = bad[0]
            raise DmlrInputError(
                f"label column {self.label_idx[j] + 1} holds {Y[i, j]:g}; labels must be 0 or 1",
                path=self.path,
                line=nos[i],
            )
        if not np.isfinite(X).all():
            i, j = np.argwhere(~np.isfinite(X))[0]
            raise DmlrInputError(f"feature column {self.feature_idx[j] + 1} is {X[i, j]}", path=self.path, line=nos[i])
        return X, Y.astype(np.int8)

    def blocks(self, *, block_rows: int = BLOCK_ROWS, drop_truncated_last_line: bool = False):
        """Yield (X, Y) blocks of at most ``block_rows`` rows."""
        yield from parse_in_blocks(
            self._records(),
            self._parse,
            path=self.path,
            block_rows=block_rows,
            drop_truncated_last_line=drop_truncated_last_line,
            dropped=self.dropped_lines,
        )

    def check_compatible(self, other: DelimitedReader) -> None:
        """Raise unless ``other`` has the same columns (a split of the same set)."""
        if (other.n_columns, other.feature_names, other.label_names, other.label_idx.tolist()) != (
            self.n_columns,
            self.feature_names,
            self.label_names,
            self.label_idx.tolist(),
        ):
            raise DmlrInputError(
                f"its columns differ from those of {self.path.name} ({other.n_columns} against {self.n_columns}, "
                "or other names)",
                path=other.path,
            )
