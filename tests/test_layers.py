"""The layout's rules, read from the source: what each layer may import.

Solvers know nothing of Dask; the generic solvers (a smooth oracle, a prox) import no
model's kernels, objectives or estimators; the distributed layer imports no estimator.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

DMLR = Path(__file__).resolve().parents[1] / "dmlr"
#: Solvers of any model: they see an oracle (and a prox) and nothing else.
GENERIC_SOLVERS = ("apg", "lbfgs", "prox", "vr", "result", "checkpoint")
#: What a generic solver may import from dmlr besides dmlr.solvers.<generic>.
GENERIC_SOLVER_DEPENDENCIES = {"dmlr", "dmlr._blas", "dmlr.kernels.quasi_newton"}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names if node.module == "dmlr.solvers")
    return names


def test_imported_modules_sees_nested_and_aliased_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import numpy as np\n\ndef g():\n    from dmlr.kernels import ranksvm\n    import dask.array\n")
    assert imported_modules(f) == {"numpy", "dmlr.kernels", "dask.array"}


@pytest.mark.parametrize("name", GENERIC_SOLVERS)
def test_generic_solvers_import_nothing_model_specific(name):
    allowed = GENERIC_SOLVER_DEPENDENCIES | {f"dmlr.solvers.{s}" for s in GENERIC_SOLVERS}
    own = {m for m in imported_modules(DMLR / "solvers" / f"{name}.py") if m == "dmlr" or m.startswith("dmlr.")}
    assert own <= allowed, f"dmlr/solvers/{name}.py imports {sorted(own - allowed)}"


@pytest.mark.parametrize("path", sorted((DMLR / "solvers").glob("*.py")), ids=lambda p: p.name)
def test_solvers_know_nothing_of_dask(path):
    dask = {m for m in imported_modules(path) if m.split(".")[0] in ("dask", "distributed") or ".distributed" in m}
    assert not dask, f"{path.name} imports {sorted(dask)}"


@pytest.mark.parametrize("path", sorted((DMLR / "distributed").glob("*.py")), ids=lambda p: p.name)
def test_the_distributed_layer_imports_no_estimator(path):
    models = {m for m in imported_modules(path) if m.startswith("dmlr.models") or m == "dmlr.api"}
    assert not models, f"{path.name} imports {sorted(models)}"
