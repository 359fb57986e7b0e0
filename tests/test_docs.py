"""The documentation builds with Sphinx, warnings as errors and every internal reference checked.

Runs ``sphinx-build -W --keep-going -n -b html docs <tmp>`` (the command in README.md and
CONTRIBUTING.md): numpydoc renders every public docstring, MyST the Markdown pages, and
sphinx-gallery executes the examples in ``examples/``. No network: nothing is linkchecked.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Pages a reader must find (relative to the HTML root).
PAGES = [
    "index.html",
    "install.html",
    "quickstart.html",
    "dask.html",
    "kubernetes.html",
    "data_format.html",
    "models/index.html",
    "models/rbrl.html",
    "models/kernel_rbrl.html",
    "models/ranksvm.html",
    "models/mmp.html",
    "models/linear.html",
    "models/oml.html",
    "models/knn.html",
    "models/omf.html",
    "metrics.html",
    "model_selection.html",
    "checkpoints.html",
    "performance.html",
    "api.html",
    "internals.html",
    "glossary.html",
    "generated/dmlr.models.RBRL.html",
    "generated/dmlr.metrics.multilabel_metrics.html",
    "auto_examples/index.html",
]


@pytest.mark.slow
def test_docs_build_without_warnings(tmp_path):
    if importlib.util.find_spec("sphinx") is None:
        pytest.skip("sphinx is not installed (pip install -e '.[test]' or '.[docs]' installs it)")
    out = tmp_path / "html"
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html", "docs", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"sphinx-build failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    assert "WARNING" not in result.stderr, result.stderr
    missing = [page for page in PAGES if not (out / page).is_file()]
    assert not missing, f"pages not built: {missing}"
    # Every Markdown page under docs/ is built (a page outside every toctree is a warning above).
    for md in (ROOT / "docs").glob("*.md"):
        assert (out / f"{md.stem}.html").is_file(), md
    # Every gallery example ran and drew its figure.
    for example in (ROOT / "examples").glob("plot_*.py"):
        figures = list((out / "_images").glob(f"sphx_glr_{example.stem}_*.png"))
        assert figures, f"{example.name} drew no figure"
    # No page loads anything from the network (links may point anywhere); formulas use the
    # MathJax copy in the site.
    fetched = re.compile(r"""<(?:script|img|iframe|source)\b[^>]*\bsrc=["']((?:https?:)?//[^"']*)""", re.I)
    styled = re.compile(r"""<link\b[^>]*\bhref=["']((?:https?:)?//[^"']*)""", re.I)
    for page in out.rglob("*.html"):
        text = page.read_text(errors="replace")
        remote = fetched.findall(text) + styled.findall(text) + re.findall(r"@import\s+url\(['\"]?(?:https?:)?//", text)
        assert not remote, f"{page.relative_to(out)} loads {remote[:3]}"
    math_page = (out / "models" / "rbrl.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in math_page and (out / "_static" / "mathjax" / "tex-chtml.js").is_file()


def _parameter_table(page: Path) -> dict:
    """``{name: default text}`` from a model page's "Parameters" table: rows whose first
    cell lists backticked names and whose second cell lists as many comma-separated defaults."""
    import re

    rows = {}
    for line in page.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`(\w+)`", cells[0])
        defaults = [d.strip() for d in cells[1].split(",")]
        if names and len(names) == len(defaults):
            rows.update(zip(names, defaults))
    return rows


def test_model_page_defaults_are_the_code_defaults():
    import ast

    from dmlr.models import RBRL

    table = _parameter_table(ROOT / "docs" / "models" / "rbrl.md")
    params = RBRL().get_params()
    assert {"alpha", "solver", "tol", "max_iter"} <= set(table)
    for name, text in table.items():
        value = ast.literal_eval(text.strip("`"))
        assert value == params[name], f"docs/models/rbrl.md gives {name}={text}, the code {params[name]!r}"
