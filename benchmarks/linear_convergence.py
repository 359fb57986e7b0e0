"""How far LinearMultiLabel's fits end from the optimum of their own objective, old and new defaults.

For each staged set (the official MULAN training split, features scaled as the model does,
``scaling="auto"``) and loss, the optimum F* of the model's objective is computed by scipy's
L-BFGS-B run to a projected gradient of 1e-10 (:func:`dmlr.solvers.lbfgs.scipy_lbfgs` on
:meth:`~dmlr.objectives.multilabel.LinearMultiLabelProblem.value_and_grad`, no stopping rule of
the model), and each configuration's final objective F is reported as the relative gap
(F - F*) / F*, beside its epochs or iterations and its fit seconds (in this process, one run
each, side by side):

* ``old``: the former defaults, SGD with step eta0 / k (eta0 = 1/L), 5 epochs, alpha 1e-4;
* ``svrg1 20ep``: SVRG (output option 1), step 1/k, 20 epochs, alpha 1e-4 (issue 31's measure);
* ``svrg1 tol``: SVRG with a constant step 1/L and the certified stopping rule (tol 1e-4, at
  most 100 epochs) at the new default alpha;
* ``new``: the new defaults (L-BFGS, tol 1e-4, alpha 1e-2).

Every configuration is compared with the optimum at its own alpha. Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/linear_convergence.py [--sets ...] [--losses ...]
"""

from __future__ import annotations

import warnings

import numpy as np
from _common import parser, staged, timed, work_folder

import dmlr
from dmlr.distributed.chunks import make_chunkset
from dmlr.models import LinearMultiLabel
from dmlr.objectives.multilabel import LinearMultiLabelProblem
from dmlr.preprocessing import scaled_by
from dmlr.solvers.lbfgs import scipy_lbfgs

CONFIGS = {
    "old": dict(solver="sgd", learning_rate="1/k", n_epochs=5, alpha=1e-4, tol=None),
    "svrg1 20ep": dict(solver="svrg1", learning_rate="1/k", n_epochs=20, alpha=1e-4, tol=None),
    "svrg1 tol": dict(solver="svrg1"),
    "new": dict(),
}


def optimum(model: LinearMultiLabel, X, Y) -> tuple[float, int]:
    """(F*, L-BFGS iterations) of ``model``'s objective on (X, Y), scaled by its fitted scaling."""
    Xs = scaled_by(model, X)
    chunks = make_chunkset(Xs, Y, fit_intercept=model.fit_intercept, backend="local", align_rows=model.group_rows)
    try:
        pb = LinearMultiLabelProblem(chunks, model.loss, model.alpha, model.group_rows)
        res = scipy_lbfgs(pb.value_and_grad, np.zeros_like(model.coef_), max_iter=20000, tol=1e-10)
    finally:
        chunks.close()
    return res.objective_history[-1], res.n_iter


def main(argv=None):
    ap = parser(__doc__, sets=("emotions", "scene", "yeast", "enron"), workdir=None)
    ap.add_argument("--losses", default="hamming,subset,rank_squared_hinge")
    a = ap.parse_args(argv)
    workdir = work_folder(a.workdir, prefix="dmlr-linconv-")
    print(f"{'set':<9} {'loss':<19} " + "".join(f"{c + ': gap, n, s':>28}" for c in CONFIGS))
    for name in a.sets:
        X, Y = staged(name, workdir, "train")
        for loss in a.losses.split(","):
            cells = []
            for cfg in CONFIGS.values():
                m = LinearMultiLabel(loss=loss, **cfg)
                with dmlr.config_context(backend="local"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _, sec = timed(m.fit, X, Y)
                fstar, _ = optimum(m, X, Y)
                gap = (m.objective_history_[-1] - fstar) / fstar
                cells.append(f"{gap:>10.1e} {m.n_iter_:>6d} {sec:>7.2f}s  ")
            print(f"{name:<9} {loss:<19} " + "".join(f"{c:>28}" for c in cells), flush=True)


if __name__ == "__main__":
    main()
