"""Delimited text (CSV, TSV): numeric feature columns, then 0/1 label columns.

The form most users hold a multi-label set in: one row per line, the
features first and the ``n_labels`` label columns last, separated by commas
(or semicolons, or tabs: the first line decides), with an optional header
line naming the columns. The file is read line by line in blocks
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
    n_labels : int
        The last ``n_labels`` columns are the labels (0/1).
    """

    def __init__(self, path, n_labels: int):
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
        if not isinstance(n_labels, int) or isinstance(n_labels, bool) or not 1 <= n_labels < self.n_columns:
            raise DmlrInputError(
                f"n_labels must be an integer from 1 to {self.n_columns - 1} (the file has {self.n_columns} "
                f"columns: features first, then the labels), got {n_labels!r}",
                path=self.path,
                line=no,
            )
        self.n_labels = n_labels
        self.n_features = self.n_columns - n_labels
        names = [t.strip() for t in tokens] if self.header_line is not None else None
        self.feature_names = names[: self.n_features] if names else None
        self.label_names = names[self.n_features :] if names else None

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
        X, Y = values[:, : self.n_features], values[:, self.n_features :]
        bad = np.argwhere((Y != 0) & (Y != 1))
        if bad.size:
            i, j = bad[0]
            raise DmlrInputError(
                f"label column {self.n_features + j + 1} holds {Y[i, j]:g}; labels must be 0 or 1 "
                f"(the last n_labels={self.n_labels} columns are the labels)",
                path=self.path,
                line=nos[i],
            )
        if not np.isfinite(X).all():
            i, j = np.argwhere(~np.isfinite(X))[0]
            raise DmlrInputError(f"feature column {j + 1} is {X[i, j]}", path=self.path, line=nos[i])
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
        if (other.n_columns, other.feature_names, other.label_names) != (
            self.n_columns,
            self.feature_names,
            self.label_names,
        ):
            raise DmlrInputError(
                f"its columns differ from those of {self.path.name} ({other.n_columns} against {self.n_columns}, "
                "or other names)",
                path=other.path,
            )
