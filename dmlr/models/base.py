"""Estimator base: scikit-learn's parameter contract and pickle-free model files.

Model file format (``.npz``, format version 1): a zip of ``.npy`` arrays written
by :func:`numpy.savez` and read with ``allow_pickle=False``, so loading never
executes code. Entry ``__dmlr__`` holds UTF-8 JSON::

    {"format": "dmlr-model", "format_version": 1, "model": "RBRL",
     "params": {...constructor parameters, JSON scalars...},
     "attributes": {...fitted scalars and lists...},
     "arrays": [names of the fitted array attributes]}

Every other entry is one fitted numeric array. Saving writes a temporary file
beside the target and renames it into place, so an interrupted save leaves
the old file intact.
"""

from __future__ import annotations

import inspect
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from dmlr.errors import DmlrInputError
from dmlr.kernels.blocks import is_dask

MODEL_FORMAT = "dmlr-model"
MODEL_FORMAT_VERSION = 1
_META_KEY = "__dmlr__"

#: model class name -> class, filled by :func:`register_model`.
MODEL_REGISTRY: dict[str, type] = {}


def register_model(cls):
    """Class decorator: make a model loadable by :func:`load_model`."""
    MODEL_REGISTRY[cls.__name__] = cls
    return cls


class NotFittedError(RuntimeError):
    """A fitted attribute was needed before ``fit``."""


def check_random_state(value) -> None:
    """``random_state`` must be None or an integer >= 0 (a seed); raises ``ValueError``."""
    if value is not None and not (isinstance(value, (int, np.integer)) and not isinstance(value, bool)
                                  and value >= 0):
        raise ValueError(f"random_state must be None or an integer >= 0, got {value!r}")


def check_training_arrays(X, Y) -> None:
    """Training inputs: 2-D X and Y with the same rows, labels 0 or 1.

    Labels in a dask array are not read here (that would compute them); the
    kernels see them as int8 blocks.
    """
    if X.ndim != 2 or np.ndim(Y) != 2:
        raise DmlrInputError(f"X and Y must be 2-D, got shapes {X.shape} and {np.shape(Y)}")
    if X.shape[0] != np.shape(Y)[0]:
        raise DmlrInputError(f"X has {X.shape[0]} rows but Y has {np.shape(Y)[0]}")
    if is_dask(Y):
        return
    Y = np.asarray(Y)
    bad = ~np.isin(Y, (0, 1))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise DmlrInputError(f"labels must be 0 or 1; found {Y[i, j].item()!r} at label {int(j)}", row=int(i))


class BaseModel:
    """Parameter handling shared by dmlr estimators (scikit-learn contract).

    Subclasses store their constructor arguments unchanged as attributes of
    the same name, list fitted array attributes in ``_fitted_arrays`` and
    fitted scalars/lists in ``_fitted_attributes``.
    """

    _fitted_arrays: tuple = ()
    _fitted_attributes: tuple = ()

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self, deep: bool = True) -> dict:
        """Constructor parameters of this estimator."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set constructor parameters; returns self."""
        valid = set(self._param_names())
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"invalid parameter {key!r} for {type(self).__name__}; "
                                 f"valid parameters: {sorted(valid)}")
            setattr(self, key, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def _fitted_array_names(self) -> tuple:
        """Names of the fitted arrays for these parameters (saved in the model file)."""
        return tuple(self._fitted_arrays)

    def _check_fitted(self) -> None:
        for name in self._fitted_array_names():
            if not hasattr(self, name):
                raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    # -- prediction -------------------------------------------------------------
    def decision_function(self, X):
        """Label scores, shape (n, n_labels), from the model's ``_scores_block``.

        Dask in, dask out: row chunks are kept and each is scored where it
        lives (a model's arrays travel once, with the graph).
        """
        self._check_fitted()
        if X.shape[-1] != self.n_features_in_:
            raise DmlrInputError(f"X has {X.shape[-1]} features, the model was fitted on {self.n_features_in_}")
        if is_dask(X):
            if len(X.chunks[1]) > 1:
                X = X.rechunk({1: -1})
            return X.map_blocks(self._scores_block, dtype=np.float64, chunks=(X.chunks[0], (self.n_labels_,)),
                                meta=np.empty((0, 0), dtype=np.float64))
        return self._scores_block(X)

    def labels_from_scores(self, S):
        """0/1 labels from this model's scores (``predict`` and :func:`dmlr.evaluate` use it).

        Default: score > ``threshold`` (0 when the model has none), at least
        one label per row (:func:`dmlr.metrics.predict_from_scores`).
        """
        from dmlr.metrics import predict_from_scores

        return predict_from_scores(S, float(getattr(self, "threshold", 0.0)))

    def predict(self, X):
        """0/1 labels (n, n_labels): :meth:`labels_from_scores` of :meth:`decision_function`."""
        return self.labels_from_scores(self.decision_function(X))

    def _scores_block(self, X):  # pragma: no cover - interface
        """Scores of one in-memory row block (numpy, scipy.sparse or sparse)."""
        raise NotImplementedError

    # -- persistence ----------------------------------------------------------
    def save(self, path) -> Path:
        """Write the fitted model to ``path`` (``.npz``), atomically, without pickle.

        Returns
        -------
        Path
            The file written.
        """
        self._check_fitted()
        path = Path(path)
        meta = {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            "model": type(self).__name__,
            "params": self.get_params(),
            "attributes": {k: getattr(self, k) for k in self._fitted_attributes if hasattr(self, k)},
            "arrays": list(self._fitted_array_names()),
        }
        blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
        arrays = {name: _dense(getattr(self, name)) for name in self._fitted_array_names()}
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **{_META_KEY: blob}, **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return path


class LinearModel(BaseModel):
    """A model whose fitted arrays are weight matrices (n_features + fit_intercept, n_labels)
    and whose scores are ``[X, 1] @ coef_``."""

    def _validate_loaded(self, path) -> None:
        expected = (int(self.n_features_in_) + int(bool(self.fit_intercept)), int(self.n_labels_))
        for name in self._fitted_array_names():
            arr = getattr(self, name)
            if arr.dtype.kind != "f" or arr.shape != expected:
                raise DmlrInputError(f"{name} must be a float array of shape {expected}, got {arr.dtype} "
                                     f"{arr.shape}", path=path)

    def _scores_block(self, X):
        """``[X, 1] @ coef_`` (see :meth:`BaseModel.decision_function`)."""
        from dmlr.kernels.blocks import append_bias, as_matrix

        X = as_matrix(X)
        if self.fit_intercept:
            X = append_bias(X)
        return np.asarray(X @ self.coef_)


def _dense(a) -> np.ndarray:
    """Arrays as saved: scipy sparse matrices densified (model files hold plain arrays)."""
    return a.toarray() if hasattr(a, "toarray") else np.asarray(a)


def load_model(path):
    """Load a model saved by ``model.save``; never unpickles anything.

    Raises
    ------
    DmlrInputError
        If the file is not a dmlr model or has been tampered with.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            contents = {k: npz[k] for k in npz.files}
    except (ValueError, OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise DmlrInputError(f"not a readable dmlr model file ({e})", path=path) from None
    if _META_KEY not in contents or contents[_META_KEY].dtype != np.uint8:
        raise DmlrInputError("not a dmlr model file (no metadata entry)", path=path)
    try:
        meta = json.loads(contents.pop(_META_KEY).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DmlrInputError(f"model metadata is not valid JSON ({e})", path=path) from None
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise DmlrInputError("not a dmlr model file", path=path)
    if meta.get("format_version") != MODEL_FORMAT_VERSION:
        raise DmlrInputError(f"unsupported model format version {meta.get('format_version')!r}", path=path)
    cls = MODEL_REGISTRY.get(meta.get("model"))
    if cls is None:
        raise DmlrInputError(f"unknown model type {meta.get('model')!r}", path=path)
    params, attrs = meta.get("params"), meta.get("attributes")
    if not isinstance(params, dict) or not isinstance(attrs, dict):
        raise DmlrInputError("malformed model metadata", path=path)
    unknown = set(params) - set(cls._param_names())
    if unknown:
        raise DmlrInputError(f"unknown parameters {sorted(unknown)} for {cls.__name__}", path=path)
    try:
        model = cls(**params)
        expected = set(model._fitted_array_names())
    except (TypeError, ValueError) as e:
        raise DmlrInputError(f"invalid model parameters ({e})", path=path) from None
    if set(meta.get("arrays", [])) != expected or set(contents) != expected:
        raise DmlrInputError(f"model arrays {sorted(contents)} do not match {cls.__name__}'s "
                             f"{sorted(expected)}", path=path)
    for key, value in attrs.items():
        if key not in cls._fitted_attributes:
            raise DmlrInputError(f"unknown fitted attribute {key!r}", path=path)
        setattr(model, key, value)
    for name, arr in contents.items():
        if arr.dtype.kind not in "fiub":
            raise DmlrInputError(f"array {name!r} has non-numeric dtype {arr.dtype}", path=path)
        setattr(model, name, arr)
    model._validate_loaded(path)
    return model
