"""Sphinx configuration of dmlr's documentation.

Build (from the repository root; warnings are errors, internal references checked)::

    sphinx-build -W --keep-going -n -b html docs docs/_build/html
"""

import os
import sys
from pathlib import Path

import dmlr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# The gallery's examples and autodoc run in-process: keep Dask and BLAS to what a CI runner has.
os.environ.setdefault("OMP_NUM_THREADS", "1")

project = "dmlr"
author = "dmlr developers"
copyright = "dmlr developers"
release = version = dmlr.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # MathJax copied into the built site (_static/mathjax), not loaded from a CDN: the pages
    # render their formulas offline
    "sphinx-mathjax-offline",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "auto_examples/*.ipynb", "auto_examples/*.py"]
templates_path = ["_templates"]

# MyST: $...$ and $$...$$ math, definition lists, anchors for ## and ### headings.
myst_enable_extensions = ["dollarmath", "amsmath", "deflist", "colon_fence"]
myst_heading_anchors = 3

# index.md's toctree ends with a glob "*" that lists every other page under docs/ (pages other
# engineers add); when there is none, the empty match is not an error.
suppress_warnings = ["toc.empty_glob"]

# API reference: one page per public object, signatures without type hints (the numpydoc
# "Parameters" section carries types, shapes and dtypes).
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# Nitpicky mode (-n) checks every cross-reference. References into other projects cannot be
# resolved without intersphinx, which needs the network (CI has none): those are ignored by
# package, so every reference into dmlr is still checked.
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|scipy|sklearn|dask|distributed|zarr|sparse|numba|joblib|matplotlib|threadpoolctl)(\..*)?"),
    (r"py:.*", r"(int|float|str|bool|dict|list|tuple|set|callable|object|bytes|None|Path|pathlib\..*)"),
    (r"py:.*", r"(os|typing|collections|contextlib|concurrent|asyncio|enum|dataclasses)\..*"),
]

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    # Execute every example at every build (no reuse of an earlier build's output in docs/auto_examples).
    "run_stale_examples": True,
    "show_memory": False,
    "write_computation_times": False,
    "matplotlib_animations": False,
}

html_theme = "alabaster"
html_title = f"dmlr {release}"
html_static_path = []
html_theme_options = {"description": "Multi-label ranking and classification on Dask", "fixed_sidebar": True}


def _skip_sklearn_plumbing(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated metadata-routing methods (``set_*_request``)."""
    if name.endswith("_request") or name == "get_metadata_routing":
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip_sklearn_plumbing)
