"""The one validation path of every dmlr estimator's inputs and targets.

In-memory inputs (numpy, scipy.sparse, pydata sparse, array-likes) go through
scikit-learn's :func:`~sklearn.utils.validation.validate_data`: float64, 2-D,
finite, at least one row, CSR when sparse, ``n_features_in_`` and
``feature_names_in_`` set at fit and checked at predict. Dask arrays are
checked by shape and dtype only: reading their values would compute them
(every kernel checks the chunks it reads).

Targets. A 2-D 0/1 matrix (n, n_labels) is the multi-label problem itself.
A 1-D target (binary or multi-class, any label type) is the single-label
problem a label ranker solves as a multi-label one with exactly one relevant
label per row: each class is one label column (one-hot), and ``predict``
returns the class with the highest score. A binary target uses two columns,
not one, because the pairwise ranking losses (RBRL, Rank-SVM, MMP) need at
least two labels to rank. A column (n, 1) of 0/1 is a label matrix with one
label (one tag; ``predict`` returns (n, 1)); a column of other class labels
is a 1-D target (as in scikit-learn).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from dmlr.data.arrays import is_dask, to_scipy
from dmlr.errors import DmlrInputError

#: ``target_type_`` values.
TARGET_TYPES = ("multilabel", "binary", "multiclass")


def _check_dask_X(est, X, reset: bool):
    if X.ndim != 2:
        raise ValueError(f"Expected a 2-D array, got a {X.ndim}-D dask array of shape {X.shape}")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"X must be numeric, got dtype {X.dtype}")
    if reset:
        est.n_features_in_ = int(X.shape[1])
        if hasattr(est, "feature_names_in_"):
            del est.feature_names_in_
    elif X.shape[1] != est.n_features_in_:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input."
        )
    return X


def check_X(est, X, *, reset: bool):
    """Validated features: dask arrays as they are, others float64 dense or CSR.

    ``reset=True`` (fit) sets ``n_features_in_`` (and ``feature_names_in_``
    for data frames); ``reset=False`` (predict) checks them.
    """
    if is_dask(X):
        return _check_dask_X(est, X, reset)
    X = to_scipy(X)
    try:
        return validate_data(est, X, reset=reset, accept_sparse="csr", dtype=np.float64, ensure_min_samples=1)
    except ValueError as e:
        row = _first_non_finite_row(X) if "NaN" in str(e) or "infinity" in str(e) else None
        if row is None:
            raise
        raise DmlrInputError("X holds a non-finite value (NaN or inf)", row=row) from e


def _first_non_finite_row(X) -> int | None:
    """The first row of X with a NaN or an infinity (None if X is not numeric)."""
    try:
        if sp.issparse(X):
            coo = sp.coo_matrix(X)
            bad = coo.row[~np.isfinite(coo.data.astype(np.float64))]
            return int(bad.min()) if bad.size else None
        bad = ~np.isfinite(np.asarray(X, dtype=np.float64)).reshape(len(X), -1).all(axis=1)
        return int(np.argmax(bad)) if bad.any() else None
    except (TypeError, ValueError):
        return None


def check_fit_data(est, X, y, *, classes=None):
    """Validated (X, Y) for ``fit``, and the target encoding set on ``est``.

    Parameters
    ----------
    est : estimator
        Gets ``n_features_in_``, ``classes_``, ``target_type_`` (one of
        :data:`TARGET_TYPES`) and ``label_dtype_`` (the dtype of ``predict``'s
        labels for a multi-label target).
    X : array-like, sparse or dask array (n, d)
    y : array-like (n,) or (n, n_labels), or dask array (n, n_labels)
    classes : array-like, optional
        Every class a 1-D target can hold (``partial_fit``'s first call,
        when later calls may see classes this one lacks).

    Returns
    -------
    X : float64 ndarray, CSR matrix or dask array
    Y : int8 ndarray or dask array (n, n_labels) of 0/1
    """
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y is None.")
    X = check_X(est, X, reset=True)
    Y, classes_, target_type, dtype = encode_target(y, classes=classes)
    if np.shape(Y)[0] != X.shape[0]:
        raise DmlrInputError(f"X has {X.shape[0]} rows but y has {np.shape(Y)[0]}")
    est.classes_, est.target_type_, est.label_dtype_ = classes_, target_type, dtype
    return X, Y


def check_partial_fit_data(est, X, y):
    """(X, Y) for a ``partial_fit`` call after the first (which is :func:`check_fit_data`):
    ``n_features_in_`` is kept and ``y`` is encoded with the fitted classes."""
    X = check_X(est, X, reset=False)
    if est.target_type_ == "multilabel":
        Y = encode_target(y)[0]
        if np.shape(Y)[1] != len(est.classes_):
            raise DmlrInputError(f"y has {np.shape(Y)[1]} labels; the model has {len(est.classes_)}")
    else:
        Y = encode_target(y, classes=est.classes_)[0]
    if np.shape(Y)[0] != X.shape[0]:
        raise DmlrInputError(f"X has {X.shape[0]} rows but y has {np.shape(Y)[0]}")
    return X, Y


def encode_target(y, classes=None):
    """A target as the 0/1 label matrix the solvers use (see the module docstring).

    Returns
    -------
    Y : int8 ndarray or dask array (n, n_labels)
    classes : ndarray
        The class of each label column (``arange(n_labels)`` for a multi-label target).
    target_type : str
    label_dtype : str
        dtype name of a multi-label target (``predict`` returns it).
    """
    if is_dask(y) and y.ndim == 2 and (y.shape[1] > 1 or y.dtype.kind == "b"):
        if y.dtype.kind not in "biu":
            raise DmlrInputError(f"labels must be 0/1 integers or booleans, got dtype {y.dtype}")
        # values are checked by the kernels that read the chunks (reading them here computes them)
        return y, np.arange(y.shape[1]), "multilabel", str(y.dtype)
    if is_dask(y):
        y = y.compute()
    if sp.issparse(y):
        y = y.toarray()
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1 and not (y.dtype.kind in "biuf" and np.isin(y, (0, 1)).all()):
        y = y[:, 0]  # a column of class labels: a 1-D target, as in scikit-learn
    if y.ndim == 2:
        if y.dtype.kind not in "biuf":
            raise DmlrInputError(f"labels must be 0 or 1, got dtype {y.dtype}")
        bad = ~np.isin(y, (0, 1))
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise DmlrInputError(f"labels must be 0 or 1; found {y[i, j].item()!r} at label {int(j)}", row=int(i))
        return (
            y.astype(np.int8),
            np.arange(y.shape[1]),
            "multilabel",
            str(y.dtype) if y.dtype.kind in "biu" else "int64",
        )
    if y.ndim != 1:
        raise DmlrInputError(f"y must be 1-D or 2-D, got shape {y.shape}")
    kind = type_of_target(y, input_name="y")
    if kind not in ("binary", "multiclass"):
        raise ValueError(
            f"Unknown label type: {kind!r}; dmlr classifiers take class labels (1-D) or a 0/1 label matrix (2-D)"
        )
    if classes is None:
        classes = np.unique(y)
        if len(classes) < 2:
            raise ValueError(f"y has one class ({classes[0]!r}); a classifier needs at least 2 classes")
    else:
        classes = np.asarray(classes)
        unknown = ~np.isin(y, classes)
        if unknown.any():
            raise ValueError(f"y holds the class {y[unknown][0]!r}, which is not in classes {classes.tolist()}")
    Y = (y[:, None] == classes[None, :]).astype(np.int8)
    return Y, classes, "binary" if len(classes) == 2 else "multiclass", str(classes.dtype)


def check_predict_X(est, X):
    """Validated features for a fitted estimator's predict-type method."""
    check_is_fitted(est, "target_type_")
    return check_X(est, X, reset=False)
