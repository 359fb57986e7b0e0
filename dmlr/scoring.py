"""dmlr's metrics as scikit-learn scorers.

A scorer built here can be passed wherever scikit-learn takes ``scoring``
(``cross_validate``, ``GridSearchCV``, ...), alone or in a dict. It
computes one metric of :mod:`dmlr.metrics` with the same definitions and
map-reduce (Dask predictions are reduced chunk by chunk), from the
estimator's own outputs:

- the six metrics of 0/1 predictions (:data:`PREDICTION_METRICS`) score
  ``estimator.predict(X)``, so the model's own rule from scores to labels
  is the one judged;
- the ranking metrics, the other twelve of
  :data:`dmlr.metrics.METRIC_NAMES` and the propensity-scored ones, score
  ``estimator.decision_function(X)``, the (n, l) real scores.

The losses (:data:`dmlr.metrics.LOSS_METRICS`) are built with
``greater_is_better=False``, so, as for scikit-learn's own losses, the
scorer returns the negated loss and a larger value is better.

A 1-D ``y`` (and a 1-D response, as a binary classifier's
``decision_function`` gives) is taken as one label, a column of shape
(n, 1).
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import make_scorer as _sklearn_make_scorer

from dmlr.metrics import LOSS_METRICS, METRIC_NAMES, PS_METRIC_NAMES, multilabel_metrics

__all__ = ["PREDICTION_METRICS", "get_scorer", "make_scorer"]

#: Metrics of the 0/1 predictions, scored on ``predict``; all others use ``decision_function``.
PREDICTION_METRICS = ("hamming_loss", "subset_accuracy", "accuracy", "f1_example", "f1_micro", "f1_macro")


def make_scorer(name: str, *, propensities=None):
    """A scikit-learn scorer computing one dmlr metric.

    Parameters
    ----------
    name : str
        A name from :data:`dmlr.metrics.METRIC_NAMES` or
        :data:`dmlr.metrics.PS_METRIC_NAMES`.
    propensities : array-like of shape (l,), optional
        Label propensities in (0, 1] from the training labels
        (:func:`dmlr.metrics.label_propensities`); required by the
        propensity-scored metrics. Under cross-validation they stay fixed
        across folds, as the Extreme Classification Repository computes
        them once from its whole training set.

    Returns
    -------
    sklearn.metrics._scorer._Scorer
        Called as ``scorer(estimator, X, y)``; uses ``estimator.predict``
        for :data:`PREDICTION_METRICS` and ``estimator.decision_function``
        otherwise. For a loss the value is the negated loss.

    Raises
    ------
    ValueError
        On an unknown name, or a propensity-scored metric without
        ``propensities``.
    """
    if name not in METRIC_NAMES + PS_METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; choose from {list(METRIC_NAMES + PS_METRIC_NAMES)}")
    kwargs = {}
    if propensities is not None:
        kwargs["propensities"] = np.asarray(propensities, dtype=np.float64)
    elif name in PS_METRIC_NAMES:
        raise ValueError(
            f"{name!r} needs the label propensities of the training set; use "
            f"make_scorer({name!r}, propensities=dmlr.metrics.label_propensities(Y_train))"
        )
    response_method = "predict" if name in PREDICTION_METRICS else "decision_function"
    return _sklearn_make_scorer(
        _score, response_method=response_method, greater_is_better=name not in LOSS_METRICS, metric=name, **kwargs
    )


def get_scorer(name: str):
    """The scorer of a metric that needs no extra input: ``make_scorer(name)``.

    Parameters
    ----------
    name : str
        A name from :data:`dmlr.metrics.METRIC_NAMES` (the
        propensity-scored metrics need :func:`make_scorer` with
        ``propensities``).

    Returns
    -------
    sklearn.metrics._scorer._Scorer
    """
    return make_scorer(name)


def _score(y_true, y_pred, *, metric: str, propensities=None) -> float:
    """``multilabel_metrics`` of one metric from the true labels and one response.

    The metric reads only one of the score matrix S and the predictions P;
    the other argument is filled with a valid array that it does not read
    (P with the scores' labels, S with the 0/1 predictions).
    """
    y_true, y_pred = (a[:, None] if np.ndim(a) == 1 else a for a in (y_true, y_pred))
    if metric in PREDICTION_METRICS:
        S, P = y_pred, y_pred
    else:
        S, P = y_pred, y_true
    return multilabel_metrics(y_true, S, P, metrics=[metric], propensities=propensities)[metric]
