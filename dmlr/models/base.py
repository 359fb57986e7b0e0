"""Estimator base: scikit-learn's contract, the target encoding, pickle-free model files.

Every dmlr estimator is a scikit-learn classifier (``ClassifierMixin``,
``MultiOutputMixin``, ``BaseEstimator``) that declares multi-label and
sparse-input tags, validates its inputs through :mod:`dmlr.validation` and
its parameters through scikit-learn's ``_parameter_constraints``. Its
scores come from one place, :meth:`~dmlr.models.BaseModel.decision_function`; its labels
from one rule, :meth:`~dmlr.models.BaseModel.labels_from_scores`, which ``predict``,
:func:`dmlr.evaluate`, grid search, the report and the command line all use.

Model file format (``.npz``, format version 3): a zip of ``.npy`` arrays written
by :func:`numpy.savez` and read with ``allow_pickle=False``, so loading never
executes code. Entry ``__dmlr__`` holds UTF-8 JSON::

    {"format": "dmlr-model", "format_version": 3, "model": "RBRL",
     "params": {...constructor parameters, JSON scalars...},
     "attributes": {...fitted scalars and lists, classes_ among them, and
                    best_params_ where dmlr.fit searched...},
     "arrays": [names of the fitted array attributes]}

Every other entry is one fitted numeric array. Saving writes a temporary file
beside the target and renames it into place, so an interrupted save leaves
the old file intact. Version 1 files (parameters named before the renames
listed in CHANGELOG.md) are refused with a message that names the version;
version 2 files (one threshold for every label) load with their rule as
``threshold_`` (``_upgrade_from_version_2``).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, MultiOutputMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import Interval, StrOptions

from dmlr.data.arrays import is_dask
from dmlr.errors import DmlrInputError
from dmlr.preprocessing import SCALINGS, fit_scaling_of, scaled_by
from dmlr.validation import check_fit_data, check_partial_fit_data, check_predict_X

MODEL_FORMAT = "dmlr-model"
MODEL_FORMAT_VERSION = 4
_META_KEY = "__dmlr__"
#: Fitted attributes of every model: the target encoding (:mod:`dmlr.validation`).
TARGET_ATTRIBUTES = ("classes_", "target_type_", "label_dtype_")
#: ... and the feature scaling applied (:mod:`dmlr.preprocessing`).
COMMON_ATTRIBUTES = TARGET_ATTRIBUTES + ("scaling_",)
#: Attributes a model file may hold: the values :func:`dmlr.fit`'s search chose.
OPTIONAL_ATTRIBUTES = ("best_params_",)
#: Fitted arrays of the feature scaling, saved when ``scaling`` is not None.
SCALING_ARRAYS = ("feature_offset_", "feature_scale_")
#: ``_parameter_constraints`` entry of ``scaling``.
SCALING = [StrOptions(set(SCALINGS)), None]
#: ``_parameter_constraints`` entry of ``threshold``: one number for every label, or "auto"
#: (learned per label on the training rows, :func:`dmlr.metrics.label_thresholds`).
THRESHOLD = [Real, StrOptions({"auto"})]
#: The fitted array of a model with a ``threshold`` parameter: one threshold per label.
THRESHOLD_ARRAYS = ("threshold_",)
#: ``_parameter_constraints`` entry of a seed: dmlr seeds numpy's SeedSequence, so an integer.
SEED = [Interval(Integral, 0, None, closed="left"), None]

#: model class name -> class (what a model file names), filled by :func:`register_model`.
MODEL_REGISTRY: dict[str, type] = {}
#: ``model=`` name of :func:`dmlr.fit` and ``dmlr fit --model`` -> class, filled by
#: :func:`register_model`.
MODEL_NAMES: dict[str, type] = {}

__all__ = [
    "Axis",
    "BaseModel",
    "LinearModel",
    "MODEL_NAMES",
    "MODEL_REGISTRY",
    "NotFittedError",
    "SEED",
    "half_decades",
    "load_model",
    "register_model",
]


def store_params(estimator, params: dict) -> None:
    """Keep each of ``__init__``'s arguments as the attribute of its name, unchanged.

    scikit-learn's estimator contract: ``__init__`` stores its parameters as given (no
    validation, no derived values) and ``get_params`` reads them back by the signature's
    names. Every dmlr estimator's ``__init__`` is ``store_params(self, locals())``, so its
    signature is the one list of its parameters.
    """
    for name in type(estimator)._get_param_names():
        setattr(estimator, name, params[name])


def register_model(cls=None, *, name: str | None = None):
    """Class decorator: the one place a model is registered.

    Registered, a model is loadable from its files (:func:`dmlr.models.load_model`),
    known to :func:`dmlr.fit` and ``dmlr fit --model`` by ``name``, and what
    the class declares is read from it: ``_search_space`` (what the search
    tunes, :func:`dmlr.tuning.search`), ``_supports_checkpoint``,
    ``_learns_threshold``.

    Parameters
    ----------
    cls : type
        The estimator class (``@register_model``), or None
        (``@register_model(name=...)``).
    name : str, optional
        Its ``model=`` name (default: the class name in lower case).
    """

    def register(cls):
        MODEL_REGISTRY[cls.__name__] = cls
        MODEL_NAMES[name or cls.__name__.lower()] = cls
        return cls

    return register if cls is None else register(cls)


@dataclass(frozen=True)
class Axis:
    """One searched parameter: a log-spaced grid of ``scale * 10**e`` for ``e`` in ``exponents``.

    Attributes
    ----------
    name : str
        The estimator parameter.
    exponents : tuple of float
        The starting grid's base-10 exponents (any order; fitted largest first).
    per_row : bool
        ``scale`` is the number of training rows (a loss summed over rows,
        as RBRL's eq. 8), else 1 (a loss averaged over rows, as SGD's).
    step : float
        Exponent step of the values added when the grid widens.
    default : bool
        Searched by :func:`dmlr.fit` when the caller does not give it; the
        other axes only when asked for (``search(params=...)``).
    staged_top : float or None
        The top exponent of a staged search's first stage, below the grid's
        own (None: the grid's). A staged search's folds have thousands of
        training rows (at least :data:`dmlr.tuning.HALVING_FIRST_ROWS` over
        :data:`dmlr.tuning.HALVING_FOLDS`), and where the optimal weight varies
        little with the rows (a loss summed over rows: the value a stage
        chooses is carried to the next as it is), its per-row optimum there
        lies far below the top that a few hundred rows need. A best value on
        this top edge still widens the grid upwards.
    """

    name: str
    exponents: tuple
    per_row: bool = False
    step: float = 0.5
    default: bool = True
    staged_top: float | None = None

    def values(self, exponents, n_rows: int) -> list[float]:
        scale = float(n_rows) if self.per_row else 1.0
        return [scale * 10.0**e for e in sorted(exponents, reverse=True)]

    def path(self, staged: bool) -> list[float]:
        """The exponents of the first stage's path, largest first: the grid's, from
        ``staged_top`` down in a staged search."""
        top = self.staged_top if staged and self.staged_top is not None else math.inf
        return sorted({e for e in self.exponents if e <= top}, reverse=True)


def half_decades(hi: float, lo: float) -> tuple:
    """Exponents from ``hi`` down to ``lo`` in steps of one half (a grid :class:`Axis` takes)."""
    return tuple(np.round(np.arange(hi, lo - 1e-9, -0.5), 6))


class BaseModel(ClassifierMixin, MultiOutputMixin, BaseEstimator):
    """What every dmlr estimator shares: tags, scores, labels, ``score``, model files.

    Subclasses store their constructor arguments unchanged, declare
    ``_parameter_constraints``, list fitted array attributes in
    ``_fitted_arrays`` and fitted scalars/lists in ``_fitted_attributes``,
    call :func:`dmlr.validation.check_fit_data` in ``fit`` and provide the
    scores of an in-memory row block (``_scores_block``) or of a whole
    validated input (``_label_scores``).
    """

    _fitted_arrays: tuple = ()
    _fitted_attributes: tuple = ()
    #: Whether the model has a ``threshold`` parameter and learns ``threshold_`` (:meth:`_learn_threshold`).
    _learns_threshold: bool = False
    #: The parameters :func:`dmlr.tuning.search` can tune, in search order (:class:`Axis`;
    #: empty: none). Subclasses inherit their parent's.
    _search_space: tuple = ()
    #: Fitted arrays a ``warm_start`` fit starts from (empty: none, or no ``warm_start``):
    #: what a search path's predictor moves before the next value's fit
    #: (:func:`dmlr.paths.predict_path_start`).
    _warm_start_arrays: tuple = ()
    #: Whether ``fit`` takes ``checkpoint=``, ``checkpoint_every=`` and ``resume=``.
    _supports_checkpoint: bool = False
    #: scikit-learn checks this model cannot pass, with the reason (``check_estimator``'s
    #: ``expected_failed_checks``; tests/test_sklearn.py).
    _expected_failed_checks: dict = {}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
        tags.target_tags.single_output = True
        tags.input_tags.sparse = True
        return tags

    def _fitted_array_names(self) -> tuple:
        """Names of the model's fitted arrays for these parameters."""
        return tuple(self._fitted_arrays)

    def _saved_array_names(self) -> tuple:
        """Every fitted array saved in the model file: the model's, its label thresholds and the
        feature scaling's."""
        return (
            self._fitted_array_names()
            + (THRESHOLD_ARRAYS if self._learns_threshold else ())
            + (SCALING_ARRAYS if self.scaling is not None else ())
        )

    def __sklearn_is_fitted__(self) -> bool:
        # threshold_ is learned from the fitted model's own scores, at the end of fit
        arrays = (n for n in self._saved_array_names() if n not in THRESHOLD_ARRAYS)
        return hasattr(self, "target_type_") and all(hasattr(self, n) for n in arrays)

    # -- data -------------------------------------------------------------------
    def _fit_data(self, X, y, *, classes=None):
        """Validated (X, Y) for ``fit`` (:func:`dmlr.validation.check_fit_data`), X scaled by
        ``scaling`` fitted on it (:mod:`dmlr.preprocessing`)."""
        X, Y = check_fit_data(self, X, y, classes=classes)
        return fit_scaling_of(self, X), Y

    def _partial_fit_data(self, X, y, *, classes=None):
        """(X, Y) of a ``partial_fit`` call: the first fits the scaling, later ones apply it."""
        if not hasattr(self, "target_type_"):
            return self._fit_data(X, y, classes=classes)
        X, Y = check_partial_fit_data(self, X, y)
        return scaled_by(self, X), Y

    def _predict_data(self, X):
        """Validated and scaled features for a fitted model's predict-type method."""
        return scaled_by(self, check_predict_X(self, X))

    # -- scores and labels ------------------------------------------------------
    def decision_function(self, X):
        """Label scores: (n, n_labels) for a multi-label target, (n, n_classes) for a
        multi-class one, (n,) for a binary one (the second class's score minus the first's).

        Dask in, dask out: row chunks are kept and each is scored where it lives.
        """
        return self._output_scores(self._label_scores(self._predict_data(X)))

    def predict(self, X):
        """Labels: the model's :meth:`labels_from_scores` of its (n, n_labels) scores for a
        multi-label target (dtype of the fitted target); the highest-scoring class for a 1-D one."""
        S = self._label_scores(self._predict_data(X))
        if self.target_type_ == "multilabel":
            P = self.labels_from_scores(S)
            return P.astype(self.label_dtype_)
        classes = np.asarray(self.classes_)
        if is_dask(S):
            return S.map_blocks(_classes_of_max, classes, drop_axis=1, dtype=classes.dtype)
        return _classes_of_max(S, classes)

    def labels_from_scores(self, S):
        """0/1 labels from this model's (n, n_labels) scores: the model's own label rule.

        Default: score > the fitted ``threshold_`` (one per label) where the model learns it,
        else ``threshold`` (0 when the model has none), at least one label per row
        (:func:`dmlr.metrics.predict_from_scores`).
        """
        from dmlr.metrics import predict_from_scores

        threshold = getattr(self, "threshold_", None)
        return predict_from_scores(S, getattr(self, "threshold", 0.0) if threshold is None else threshold)

    def _learn_threshold(self, X, Y, blocks=None):
        """Set ``threshold_``, float64 (n_labels,): ``threshold`` for every label, or with "auto"
        :func:`dmlr.metrics.label_thresholds` of the model's scores on (X, Y), its (scaled)
        training rows: one scoring pass, map-reduced for dask. With ``blocks``, ``(chunks,
        scores, *args)``, the rows held by the chunk set the model was fitted on, scored by
        ``scores(block, *args)`` where they are (:func:`dmlr.metrics.chunk_label_thresholds`),
        X is not read again. A class vector's labels are its highest score, not thresholds:
        its ``threshold_`` is then 0. Returns self."""
        from dmlr.metrics import chunk_label_thresholds, label_thresholds

        n_labels = int(np.shape(Y)[1])
        if self.threshold != "auto":
            self.threshold_ = np.full(n_labels, float(self.threshold))
        elif self.target_type_ != "multilabel":
            self.threshold_ = np.zeros(n_labels)
        elif blocks is not None:
            self.threshold_ = chunk_label_thresholds(*blocks)
        else:
            self.threshold_ = label_thresholds(Y, self._label_scores(X))
        return self

    def score(self, X, y, sample_weight=None):
        """Accuracy (scikit-learn's classifier score; subset accuracy for a label matrix).

        Dask input is scored chunk by chunk (:mod:`dmlr.metrics`), never gathered.
        """
        if is_dask(X) and sample_weight is None and self.target_type_ == "multilabel":
            from dmlr.metrics import multilabel_metrics

            S = self._label_scores(self._predict_data(X))
            return multilabel_metrics(y, S, self.labels_from_scores(S), metrics=["subset_accuracy"])["subset_accuracy"]
        return super().score(X, y, sample_weight=sample_weight)

    def _label_scores(self, X):
        """(n, n_labels) scores of validated X, from ``_scores_block`` chunk by chunk."""
        return self._map_rows(X, self._scores_block)

    def _map_rows(self, X, fn, *args):
        """``fn(block, *args)`` -> (m, n_labels) float64 scores, on in-memory X or on each row chunk
        of dask X (dask out).

        On dask X, ``fn`` (a bound method carries the whole model) and the array arguments
        are keys of the graph of their own, sent once to each worker that scores a chunk:
        inlined in every chunk's task, each task would carry its own copy, and a worker
        holds the copies of all the tasks it has been given at once.
        """
        if not is_dask(X):
            return fn(X, *args)
        import dask

        if len(X.chunks[1]) > 1:
            X = X.rechunk({1: -1})
        args = [dask.delayed(a, pure=False) if isinstance(a, np.ndarray) else a for a in args]
        return X.map_blocks(
            _apply_to_block,
            dask.delayed(fn, pure=False),
            *args,
            dtype=np.float64,
            chunks=(X.chunks[0], (len(self.classes_),)),
            meta=np.empty((0, 0), dtype=np.float64),
        )

    def _output_scores(self, S):
        if self.target_type_ == "binary":
            return S[:, 1] - S[:, 0]
        return S

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
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")
        path = Path(path)
        attributes = {k: getattr(self, k) for k in self._fitted_attributes if hasattr(self, k)}
        attributes.update(
            classes_=np.asarray(self.classes_).tolist(),
            target_type_=self.target_type_,
            label_dtype_=self.label_dtype_,
            scaling_=self.scaling_,
        )
        if getattr(self, "best_params_", None):  # what dmlr.fit's search chose, kept with the model
            attributes["best_params_"] = dict(self.best_params_)
        meta = {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            "model": type(self).__name__,
            "params": self.get_params(),
            "attributes": attributes,
            "arrays": list(self._saved_array_names()),
        }
        blob = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
        arrays = {name: _dense(getattr(self, name)) for name in self._saved_array_names()}
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


#: The reason a model whose label rule is not ``decision_function > 0`` fails
#: ``check_classifier_multioutput`` (which requires exactly that rule).
NOT_A_ZERO_THRESHOLD = (
    "check_classifier_multioutput requires predict == (decision_function > 0); this model's label rule is {rule}"
)


def _classes_of_max(S, classes):
    return classes[np.argmax(S, axis=1)]


def _apply_to_block(block, fn, *args):
    """``fn(block, *args)``: a chunk's task of :meth:`BaseModel._map_rows`."""
    return fn(block, *args)


def linear_scores(X, W, fit_intercept: bool):
    """``[X, 1] @ W`` of one in-memory row block (the bias row last), float64 (m, n_labels)."""
    from dmlr.data.arrays import as_matrix
    from dmlr.data.blocks import append_bias

    X = as_matrix(X)
    if fit_intercept:
        X = append_bias(X)
    return np.asarray(X @ W)


def block_linear_scores(block, W):
    """:func:`linear_scores` of a training block (:class:`~dmlr.data.blocks.Block`, its bias
    column already appended where the model fits one), float64 (m, n_labels)."""
    return np.asarray(block.X @ W)


class LinearModel(BaseModel):
    """A model whose fitted arrays are weight matrices (n_features + fit_intercept, n_labels)
    and whose scores are ``[X, 1] @ coef_``."""

    def _validate_loaded(self, path) -> None:
        expected = (int(self.n_features_in_) + int(bool(self.fit_intercept)), len(self.classes_))
        for name in self._fitted_array_names():
            arr = getattr(self, name)
            if arr.dtype.kind != "f" or arr.shape != expected:
                raise DmlrInputError(
                    f"{name} must be a float array of shape {expected}, got {arr.dtype} {arr.shape}", path=path
                )

    def _scores_block(self, X):
        """``[X, 1] @ coef_`` (see :meth:`~dmlr.models.BaseModel.decision_function`)."""
        return linear_scores(X, self.coef_, bool(self.fit_intercept))


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
        # numpy's own message advises allow_pickle: never for a model file (they hold no pickle)
        why = "it holds pickled objects, which dmlr never loads" if "pickle" in str(e) else str(e)
        raise DmlrInputError(
            f"not a dmlr model file (written by model.save: a .npz of arrays and JSON): {why}", path=path
        ) from None
    if _META_KEY not in contents or contents[_META_KEY].dtype != np.uint8:
        raise DmlrInputError("not a dmlr model file (no metadata entry)", path=path)
    try:
        meta = json.loads(contents.pop(_META_KEY).tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DmlrInputError(f"model metadata is not valid JSON ({e})", path=path) from None
    if not isinstance(meta, dict) or meta.get("format") != MODEL_FORMAT:
        raise DmlrInputError("not a dmlr model file", path=path)
    version = meta.get("format_version")
    if version == 1:
        raise DmlrInputError(
            "model file format version 1 was written before dmlr renamed its model "
            "parameters (see CHANGELOG.md); this dmlr reads format version "
            f"{MODEL_FORMAT_VERSION}: refit the model and save it again",
            path=path,
        )
    if version == 2:
        _upgrade_from_version_2(meta, contents, path)
        version = 3
    if version == 3:
        _upgrade_from_version_3(meta)
    elif version != MODEL_FORMAT_VERSION:
        raise DmlrInputError(
            f"unsupported model format version {version!r} (this dmlr reads {MODEL_FORMAT_VERSION})", path=path
        )
    cls = MODEL_REGISTRY.get(meta.get("model"))
    if cls is None:
        raise DmlrInputError(f"unknown model type {meta.get('model')!r}", path=path)
    params, attrs = meta.get("params"), meta.get("attributes")
    if not isinstance(params, dict) or not isinstance(attrs, dict):
        raise DmlrInputError("malformed model metadata", path=path)
    unknown = set(params) - set(cls._get_param_names())
    if unknown:
        raise DmlrInputError(f"unknown parameters {sorted(unknown)} for {cls.__name__}", path=path)
    try:
        model = cls(**params)
        expected = set(model._saved_array_names())
    except (TypeError, ValueError) as e:
        raise DmlrInputError(f"invalid model parameters ({e})", path=path) from None
    if set(meta.get("arrays", [])) != expected or set(contents) != expected:
        raise DmlrInputError(
            f"model arrays {sorted(contents)} do not match {cls.__name__}'s {sorted(expected)}", path=path
        )
    for key, value in attrs.items():
        if key not in cls._fitted_attributes + COMMON_ATTRIBUTES + OPTIONAL_ATTRIBUTES:
            raise DmlrInputError(f"unknown fitted attribute {key!r}", path=path)
        if key == "best_params_" and not (
            isinstance(value, dict) and all(k in params and isinstance(v, (int, float)) for k, v in value.items())
        ):
            raise DmlrInputError("best_params_ must map the model's parameters to numbers", path=path)
        setattr(model, key, value)
    for name, arr in contents.items():
        if arr.dtype.kind not in "fiub":
            raise DmlrInputError(f"array {name!r} has non-numeric dtype {arr.dtype}", path=path)
        setattr(model, name, arr)
    if set(COMMON_ATTRIBUTES) - set(attrs):
        raise DmlrInputError(f"model metadata lacks {sorted(set(COMMON_ATTRIBUTES) - set(attrs))}", path=path)
    model.classes_ = _loaded_classes(attrs, path)
    _check_loaded_scaling(model, path)
    if model._learns_threshold:
        t = model.threshold_
        if t.dtype.kind != "f" or t.shape != (len(model.classes_),) or np.isnan(t).any():
            raise DmlrInputError(f"threshold_ must be {len(model.classes_)} floats, got {t.dtype} {t.shape}", path=path)
    model._validate_loaded(path)
    return model


def _upgrade_from_version_3(meta: dict) -> None:
    """Read a version 3 file as version 4, in place: RBRL's ``step_rule`` is now ``solver``."""
    params = meta.get("params")
    if isinstance(params, dict) and "step_rule" in params:
        params["solver"] = params.pop("step_rule")


def _upgrade_from_version_2(meta: dict, contents: dict, path) -> None:
    """Read a version 2 file as version 3, in place: its label rule becomes ``threshold_``.

    Version 2 had one threshold for every label: ``threshold_`` a number among the attributes
    (Rank-SVM, MMP, OMF), or none at all (RBRL and KernelRBRL, whose rule was score > 0 and
    which had no ``threshold`` parameter: they load with ``threshold=0.0``). The file's model
    predicts the labels it predicted when it was saved.
    """
    cls = MODEL_REGISTRY.get(meta.get("model"))
    params, attrs = meta.get("params"), meta.get("attributes")
    if cls is None or not cls._learns_threshold or not isinstance(params, dict) or not isinstance(attrs, dict):
        return  # load_model's own checks name what is wrong, if anything
    params.setdefault("threshold", 0.0)
    value = attrs.pop("threshold_", params["threshold"])
    classes = attrs.get("classes_")
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not isinstance(classes, list):
        raise DmlrInputError("malformed version 2 label rule (threshold_, classes_)", path=path)
    contents["threshold_"] = np.full(len(classes), float(value))
    meta["arrays"] = list(meta.get("arrays", [])) + ["threshold_"]


def _loaded_classes(attrs: dict, path) -> np.ndarray:
    """``classes_`` from a model file's JSON, checked against its target type and label dtype."""
    from dmlr.validation import TARGET_TYPES

    kind, dtype = attrs["target_type_"], attrs["label_dtype_"]
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        dtype = None
    if kind not in TARGET_TYPES or dtype is None or dtype.kind not in "biufU":
        raise DmlrInputError(f"malformed target encoding ({kind!r}, {attrs['label_dtype_']!r})", path=path)
    try:
        classes = np.asarray(attrs["classes_"], dtype=dtype if kind != "multilabel" else np.int64)
    except (TypeError, ValueError) as e:
        raise DmlrInputError(f"malformed classes_ ({e})", path=path) from None
    if classes.ndim != 1 or len(classes) < 2:
        raise DmlrInputError("classes_ must list at least 2 classes", path=path)
    return classes


def _check_loaded_scaling(model, path) -> None:
    """The feature scaling of a model file: its method matches ``scaling``, its arrays have one
    finite entry per feature (positive scales)."""
    method, d = model.scaling_, int(model.n_features_in_)
    if model.scaling is None:
        if method is not None:
            raise DmlrInputError(f"scaling_={method!r} in a model with scaling=None", path=path)
        return
    allowed = ("standard", "maxabs") if model.scaling == "auto" else (model.scaling,)
    if method not in allowed:
        raise DmlrInputError(f"scaling_={method!r} does not match scaling={model.scaling!r}", path=path)
    for name in SCALING_ARRAYS:
        arr = getattr(model, name)
        if arr.shape != (d,) or arr.dtype.kind != "f" or not np.all(np.isfinite(arr)):
            raise DmlrInputError(f"{name} must be {d} finite floats, got {arr.dtype} {arr.shape}", path=path)
    if not np.all(model.feature_scale_ > 0):
        raise DmlrInputError("feature_scale_ must be positive", path=path)
