"""Solvers that know nothing about Dask: they see an oracle (and a prox where there is one).

The generic solvers serve any model: :mod:`~dmlr.solvers.apg` (accelerated proximal
gradient), :mod:`~dmlr.solvers.lbfgs` (L-BFGS, its hand-over to APG, and scipy's
L-BFGS-B), :mod:`~dmlr.solvers.vr` (stochastic and variance-reduced gradient),
:mod:`~dmlr.solvers.prox`, and the state they share (:mod:`~dmlr.solvers.result`,
:mod:`~dmlr.solvers.checkpoint`). Three modules are one paper's algorithm each, written
around that model's own row update: :mod:`~dmlr.solvers.sgd` (Rank-SVM's ANSGD, SGD and
MMP), :mod:`~dmlr.solvers.omf` and :mod:`~dmlr.solvers.oml`. ``tests/test_layers.py``
holds the generic ones to importing nothing model-specific.
"""

from dmlr.solvers.apg import APGResult, APGState, apg
from dmlr.solvers.lbfgs import lbfgs
from dmlr.solvers.prox import prox_nuclear_norm
from dmlr.solvers.result import SolverResult

__all__ = ["APGResult", "APGState", "SolverResult", "apg", "lbfgs", "prox_nuclear_norm"]
