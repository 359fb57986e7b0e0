"""Exceptions raised by dmlr for bad input.

Every error about a file names the file and, where it applies, the line
(text formats) or the row (array formats), so that a user can find the
offending record without re-running anything.
"""

from __future__ import annotations


class DmlrInputError(ValueError):
    """Input data that dmlr refuses: malformed, inconsistent or non-finite.

    Parameters
    ----------
    message : str
        What is wrong.
    path : str, optional
        The file or store the problem was found in.
    line : int, optional
        1-based line number in a text file.
    row : int, optional
        0-based data row (instance) index.
    """

    def __init__(self, message: str, *, path=None, line=None, row=None):
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        self.row = row
        where = []
        if self.path is not None:
            where.append(self.path)
        if line is not None:
            where.append(f"line {line}")
        if row is not None:
            where.append(f"row {row}")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


class NotADmlrStoreError(DmlrInputError):
    """A path that exists but is not a dmlr data set (or model) store."""
