"""Columns of X for ARFF feature attributes: numeric as written, nominal one-hot.

Nominal feature attributes are encoded as Weka's ``NominalToBinary`` filter
does, so a store converted by dmlr holds the matrix the field's tools train
on:

* an attribute with three or more declared values becomes one 0/1 column per
  value, named ``name=value``;
* a two-valued attribute becomes one 0/1 column, 1 for the second declared
  value, except for an obvious pair (``yes/no``, ``true/false``, ``y/n``,
  ``t/f``, ``0/1``, in either order and any case), where 1 means
  yes / true / 1 whichever is declared first. The column keeps the
  attribute's name for a ``0/1`` pair (its values already are the numbers)
  and is named ``name=value`` after the value encoded as 1 otherwise;
* a one-valued attribute becomes one constant 0 column.

A value omitted from a sparse ARFF row is the attribute's first declared
value (value index 0), so a one-hot attribute contributes a 1 in its first
column for each row that omits it.

An attribute that takes a different value in every row identifies rows
instead of describing them (an instance id); :func:`identifier_attributes`
finds those so that the converter can leave them out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Kinds of attribute in a :class:`FeatureLayout`.
NUMERIC, BINARY, ONE_HOT, SKIPPED = 0, 1, 2, -1

#: (true, false) spellings of an obvious pair, compared in lower case.
_PAIRS = {("yes", "no"), ("true", "false"), ("y", "n"), ("t", "f"), ("1", "0")}


def binary_positive(values) -> int:
    """Index (0 or 1) of the value of a two-valued attribute encoded as 1.

    Parameters
    ----------
    values : sequence of str
        The two declared values, in declaration order.

    Returns
    -------
    int
        The index of yes / true / 1 for an obvious pair, else 1 (the second
        declared value, as Weka's NominalToBinary).
    """
    a, b = (v.strip().lower() for v in values)
    return 0 if (a, b) in _PAIRS else 1


@dataclass
class FeatureLayout:
    """Where each attribute of an ARFF header goes in X.

    Attributes
    ----------
    kind : ndarray of int8 (n_attributes,)
        :data:`NUMERIC`, :data:`BINARY`, :data:`ONE_HOT`, or :data:`SKIPPED`
        (a label, or a feature left out).
    start : ndarray of int64 (n_attributes,)
        First column of X of each attribute (0 for skipped ones).
    positive : ndarray of int64 (n_attributes,)
        For a binary attribute, the value index encoded as 1; else -1.
    names : list of str
        One name per column of X.
    """

    kind: np.ndarray
    start: np.ndarray
    positive: np.ndarray
    names: list

    @property
    def n_columns(self) -> int:
        return len(self.names)

    def columns(self, attrs: np.ndarray, numbers: np.ndarray) -> tuple:
        """Columns and values of X for entries of feature attributes.

        Parameters
        ----------
        attrs : ndarray of int64 (m,)
            Attribute of each entry; must not be skipped.
        numbers : ndarray of float64 (m,)
            The number of a numeric entry, the value index of a nominal one.

        Returns
        -------
        cols : ndarray of int64 (m,)
        values : ndarray of float64 (m,)
        """
        kind = self.kind[attrs]
        cols = self.start[attrs].copy()
        values = numbers.copy()
        codes = numbers.astype(np.int64)
        binary = kind == BINARY
        values[binary] = codes[binary] == self.positive[attrs[binary]]
        hot = kind == ONE_HOT
        cols[hot] += codes[hot]
        values[hot] = 1.0
        return cols, values

    def omitted_defaults(self) -> tuple:
        """Attributes whose omission from a sparse row puts a 1 in X.

        Returns
        -------
        attrs : ndarray of int64
            Attributes whose first declared value is encoded by a 1.
        cols : ndarray of int64
            The column holding that 1.
        """
        first_is_one = (self.kind == ONE_HOT) | ((self.kind == BINARY) & (self.positive == 0))
        attrs = np.flatnonzero(first_is_one)
        return attrs, self.start[attrs]


def feature_layout(attributes, is_feature, skip=()) -> FeatureLayout:
    """The :class:`FeatureLayout` of a header's feature attributes.

    Parameters
    ----------
    attributes : list of dmlr.data.arff.ArffAttribute
    is_feature : ndarray of bool (n_attributes,)
        False for label attributes.
    skip : collection of int
        Feature attributes to leave out of X.

    Returns
    -------
    FeatureLayout
    """
    n = len(attributes)
    kind = np.full(n, SKIPPED, dtype=np.int8)
    start = np.zeros(n, dtype=np.int64)
    positive = np.full(n, -1, dtype=np.int64)
    names = []
    for j, a in enumerate(attributes):
        if not is_feature[j] or j in skip:
            continue
        start[j] = len(names)
        if not a.is_nominal:
            kind[j] = NUMERIC
            names.append(a.name)
        elif len(a.values) <= 2:
            kind[j] = BINARY
            positive[j] = binary_positive(a.values) if len(a.values) == 2 else 1
            zero_one = {v.strip() for v in a.values} == {"0", "1"}
            names.append(a.name if zero_one or len(a.values) < 2 else f"{a.name}={a.values[positive[j]]}")
        else:
            kind[j] = ONE_HOT
            names.extend(f"{a.name}={v}" for v in a.values)
    return FeatureLayout(kind, start, positive, names)


def identifier_attributes(counts: dict, n_rows: int) -> list:
    """Attributes that take a different value in every one of more than two rows.

    Parameters
    ----------
    counts : dict of int -> ndarray of int64
        For each attribute, how many rows hold each declared value.
    n_rows : int
        Rows seen (every row holds exactly one value of each attribute).

    Returns
    -------
    list of int
        The attributes, ascending. Two rows or fewer identify nothing.
    """
    if n_rows <= 2:
        return []
    return sorted(j for j, c in counts.items() if c.max(initial=0) <= 1)
