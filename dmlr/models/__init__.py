"""Estimators (scikit-learn contract) that tie objectives, solvers and the distributed layer."""

from dmlr.models.base import MODEL_REGISTRY, BaseModel, load_model
from dmlr.models.rbrl import RBRL

__all__ = ["MODEL_REGISTRY", "BaseModel", "RBRL", "load_model"]
