"""Solvers that know nothing about Dask: they see a smooth oracle and a prox."""

from dmlr.solvers.apg import APGResult, APGState, apg
from dmlr.solvers.lbfgs import lbfgs
from dmlr.solvers.prox import prox_nuclear_norm
from dmlr.solvers.result import SolverResult

__all__ = ["APGResult", "APGState", "SolverResult", "apg", "lbfgs", "prox_nuclear_norm"]
