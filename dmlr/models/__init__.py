"""Estimators (scikit-learn classifiers) that tie objectives, solvers and the distributed layer."""

from dmlr.models.base import MODEL_REGISTRY, BaseModel, load_model
from dmlr.models.linear import LinearMultiLabel
from dmlr.models.omf import OMF
from dmlr.models.oml import KNN, OML
from dmlr.models.ranksvm import MMP, RankSVM
from dmlr.models.rbrl import RBRL, KernelRBRL

#: Every estimator class dmlr registers (:func:`~dmlr.models.base.register_model`), for tests
#: and documentation.
ESTIMATORS = tuple(MODEL_REGISTRY.values())

__all__ = [
    "ESTIMATORS",
    "KNN",
    "KernelRBRL",
    "LinearMultiLabel",
    "MMP",
    "OMF",
    "OML",
    "MODEL_REGISTRY",
    "BaseModel",
    "RBRL",
    "RankSVM",
    "load_model",
]
