"""Readers for array containers: MATLAB v5 ``.mat`` files and scipy.sparse ``.npz`` pairs.

Both hold whole matrices, so they are loaded into memory (``scipy.io.loadmat``
cannot stream) and handed to the store writer in row blocks by
:func:`array_blocks`.

MATLAB layouts
--------------
Variables are matched by name, case-insensitively: features ``data``,
``X`` or ``features``; labels ``target``, ``targets``, ``Y`` or ``labels``;
each optionally prefixed or suffixed by a split name (``train_data``,
``X_test``, ...). One (features, labels) pair per split; other variables
are ignored. Features are instances x features. The label matrix may be
stored either way round: its orientation is the one whose instance count
matches the features (a square matrix is refused as ambiguous). Labels
must be in {0, 1} or in {-1, +1}; values > 0 become 1, the rest 0. Sparse
matrices stay sparse.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io
import scipy.sparse as sp

from dmlr.errors import DmlrInputError

_X_WORDS = {"x", "data", "features"}
_Y_WORDS = {"y", "target", "targets", "labels"}
_SPLITS = ("train", "training", "val", "valid", "validation", "dev", "test")


def _classify(name: str):
    """Return ``(role, split)`` of a variable name, role in {"X", "Y"}, or None.

    ``data`` -> ("X", None); ``train_target`` and ``Y_train`` -> ("Y", "train").
    """
    tokens = name.lower().split("_")
    if len(tokens) == 1:
        word, split = tokens[0], None
    elif len(tokens) == 2 and tokens[0] in _SPLITS:
        split, word = tokens
    elif len(tokens) == 2 and tokens[1] in _SPLITS:
        word, split = tokens
    else:
        return None
    role = "X" if word in _X_WORDS else "Y" if word in _Y_WORDS else None
    if role is None:
        return None
    return role, {"training": "train", "valid": "val", "validation": "val"}.get(split, split)


def _split_order(split):
    return (_SPLITS.index(split) if split in _SPLITS else len(_SPLITS), split or "")


def orient_labels(Y, n: int, *, path, name: str):
    """Return the label matrix as instances x labels.

    Parameters
    ----------
    Y : ndarray or scipy.sparse matrix (2-D)
    n : int
        Number of instances (rows of the feature matrix).
    path : str or Path
        For messages.
    name : str
        The variable or file the labels came from.

    Raises
    ------
    DmlrInputError
        If neither side has ``n`` entries, or both do (square: ambiguous).
    """
    if Y.ndim != 2:
        raise DmlrInputError(f"labels {name!r} have shape {Y.shape}; expected a 2-D matrix", path=path)
    rows_match, cols_match = Y.shape[0] == n, Y.shape[1] == n
    if rows_match and cols_match:
        raise DmlrInputError(
            f"labels {name!r} are {n} x {n}, so it is ambiguous whether they are stored "
            f"instances x labels or labels x instances; store them non-square or "
            f"transpose to instances x labels and write a .npz pair",
            path=path,
        )
    if rows_match:
        return Y
    if cols_match:
        return Y.T
    raise DmlrInputError(
        f"labels {name!r} have shape {Y.shape}, which does not match the {n} instances of the features", path=path
    )


def binarize_labels(Y, *, path, name: str) -> np.ndarray:
    """Map a {0,1} or {-1,+1} label matrix (instances x labels) to int8 0/1.

    Raises
    ------
    DmlrInputError
        Naming the first row (0-based) holding another value, or a mix of
        0 and -1.
    """
    Y = Y.toarray() if sp.issparse(Y) else np.asarray(Y)
    if Y.dtype.kind not in "biuf":
        raise DmlrInputError(f"labels {name!r} have non-numeric dtype {Y.dtype}", path=path)
    neg = Y == -1
    allowed = (Y == 1) | (neg if neg.any() else (Y == 0))
    if not allowed.all():
        r, c = np.argwhere(~allowed)[0]
        raise DmlrInputError(
            f"labels {name!r}: label {int(c)} has value {Y[r, c]:g}; labels must be all "
            f"in {{0, 1}} or all in {{-1, +1}}",
            path=path,
            row=int(r),
        )
    return (Y > 0).astype(np.int8)


def _first_nonfinite_row(X):
    """Row (0-based) of the first NaN/inf of a dense or CSR matrix, or None."""
    values = X.data if sp.issparse(X) else X
    if values.dtype.kind != "f":
        return None
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    if sp.issparse(X):
        return int(np.searchsorted(X.indptr, int(np.argmax(bad)), side="right") - 1)
    return int(np.argwhere(bad)[0, 0])


def check_features(X, *, path, name: str):
    """Return X as CSR or a dense 2-D array, refusing non-numeric data and NaN/inf.

    Raises
    ------
    DmlrInputError
        Naming the first row (0-based) holding NaN or inf.
    """
    X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
    if X.ndim != 2 or X.dtype.kind not in "biuf":
        raise DmlrInputError(f"features {name!r} must be a numeric 2-D matrix, got {X.dtype} {X.shape}", path=path)
    row = _first_nonfinite_row(X)
    if row is not None:
        raise DmlrInputError(f"features {name!r}: value is NaN or infinite", path=path, row=row)
    return X


def _load_mat(path: Path) -> dict:
    try:
        return scipy.io.loadmat(str(path))
    except NotImplementedError:
        raise DmlrInputError("MATLAB v7.3 (HDF5) files are not supported; save with -v7", path=path) from None
    except Exception as err:  # scipy raises ValueError, TypeError, ... for a corrupt file
        raise DmlrInputError(f"cannot read MATLAB file ({type(err).__name__}: {err})", path=path) from None


def _pair_variables(names, path) -> list:
    """Group variable names into ``[(split, x_name, y_name), ...]``."""
    found = {}
    for name in names:
        kind = _classify(name)
        if kind is None:
            continue
        role, split = kind
        slot = found.setdefault(split, {})
        if role in slot:
            raise DmlrInputError(
                f"both {slot[role]!r} and {name!r} look like the {role} of split {split or '(whole set)'}", path=path
            )
        slot[role] = name
    if not found:
        raise DmlrInputError(
            f"no feature/label variables (data/target, X/Y, train_data, X_train, ...) among {sorted(names)}", path=path
        )
    if None in found and len(found) > 1:
        raise DmlrInputError(f"both whole-set and per-split variables present: {sorted(names)}", path=path)
    pairs = []
    for split in sorted(found, key=_split_order):
        slot = found[split]
        if set(slot) != {"X", "Y"}:
            missing = "labels" if "Y" not in slot else "features"
            raise DmlrInputError(f"variable {next(iter(slot.values()))!r} has no matching {missing}", path=path)
        pairs.append((split, slot["X"], slot["Y"]))
    return pairs


def read_mat(path) -> list:
    """Read the (features, labels) pairs of a MATLAB v5 file.

    Parameters
    ----------
    path : str or Path
        A ``.mat`` file holding feature and label matrices, one pair per split.

    Returns
    -------
    list of (split, X, Y)
        ``split`` is None for a file without splits, else e.g. ``"train"``;
        X dense or CSR, Y int8 0/1 instances x labels. Ordered train, val,
        test.
    """
    path = Path(path)
    contents = _load_mat(path)
    names = [k for k in contents if not k.startswith("__")]
    parts = []
    for split, xn, yn in _pair_variables(names, path):
        X = check_features(contents[xn], path=path, name=xn)
        Y = orient_labels(contents[yn], X.shape[0], path=path, name=yn)
        parts.append((split, X, binarize_labels(Y, path=path, name=yn)))
    if len({p[1].shape[1] for p in parts}) > 1:
        raise DmlrInputError(f"the splits have different feature counts: {[p[1].shape for p in parts]}", path=path)
    return parts


def npz_label_path(x_path) -> Path:
    """The ``<name>_Y.npz`` sibling of a ``<name>_X.npz`` file."""
    x_path = Path(x_path)
    if not x_path.name.endswith("_X.npz"):
        raise DmlrInputError(
            "a .npz feature file must be named <name>_X.npz (its labels <name>_Y.npz), or pass "
            "the pair (X_path, Y_path)",
            path=x_path,
        )
    return x_path.with_name(x_path.name[: -len("_X.npz")] + "_Y.npz")


def _load_npz(path: Path):
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return sp.load_npz(path)
    except Exception as err:  # not a scipy.sparse archive
        raise DmlrInputError(f"not a scipy.sparse .npz file ({type(err).__name__}: {err})", path=path) from None


def read_npz(x_path, y_path) -> tuple:
    """Read a scipy.sparse ``.npz`` feature file and its label file.

    Returns
    -------
    X : scipy.sparse.csr_matrix
    Y : ndarray int8 (n, l)
    """
    x_path, y_path = Path(x_path), Path(y_path)
    X = check_features(_load_npz(x_path), path=x_path, name=x_path.name)
    Y = _load_npz(y_path)
    if Y.shape[0] != X.shape[0] and Y.shape[1] != X.shape[0]:
        raise DmlrInputError(f"X has {X.shape[0]} rows ({x_path.name}) but Y has shape {Y.shape}", path=y_path)
    Y = orient_labels(Y, X.shape[0], path=y_path, name=y_path.name)
    return X, binarize_labels(Y, path=y_path, name=y_path.name)


def array_blocks(X, Y, block_rows: int):
    """Yield ``(X[r0:r1], Y[r0:r1])`` row blocks of in-memory arrays."""
    for r0 in range(0, X.shape[0], block_rows):
        yield X[r0 : r0 + block_rows], Y[r0 : r0 + block_rows]
