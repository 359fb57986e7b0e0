"""benchmarks/ as a suite: ``python -m benchmarks LIST`` / ``NAME``, every script a ``main``, the shared table.

No data sets are read and nothing is timed: the scripts are listed, imported and asked for ``--help``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_"))


def _python(*args, timeout=120):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_list_names_every_benchmark_with_its_docstring():
    out = _python("-m", "benchmarks", "LIST")
    assert out.returncode == 0, out.stderr
    rows = dict(line.split(None, 1) for line in out.stdout.splitlines())
    assert sorted(rows) == SCRIPTS
    assert len(SCRIPTS) > 20
    assert rows["thresholds"] == "Rank-SVM's and MMP's labels at a score of 0 against their learned thresholds."


def test_every_benchmark_imports_and_has_a_main():
    code = (
        "import importlib, benchmarks\n"
        f"for name in {SCRIPTS!r}:\n"
        "    assert callable(getattr(importlib.import_module(name), 'main', None)), name\n"
        "print('ok')\n"
    )
    out = _python("-c", code, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_benchmark_runs_by_name_and_as_a_script_with_its_arguments():
    for args in (("-m", "benchmarks", "thresholds", "--help"), ("benchmarks/thresholds.py", "--help")):
        out = _python(*args)
        assert out.returncode == 0, out.stderr
        assert "--sets" in out.stdout and "Rank-SVM's and MMP's labels" in out.stdout
    out = _python("-m", "benchmarks", "no_such_benchmark")
    assert out.returncode == 2 and "LIST" in out.stderr


def test_table_formats_aligned_and_markdown_rows():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _common import Table
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    lines = []
    table = Table("set:<8; alpha:>7.3g; loss:>8.4f; note: <4", emit=lines.append)
    table.print_header()
    table.row("emotions", 0.98662, 0.152934, "ok")
    table.row("scene", 31.2, 0.1, "best")
    table.skip("yeast", "absent")
    assert "\n".join(lines) == (
        "set        alpha     loss  note\n"
        "emotions   0.987   0.1529  ok  \n"
        "scene       31.2   0.1000  best\n"
        "yeast    skipped: absent"
    )
    md = Table("set; s:.2f", markdown=True, emit=lines.append)
    lines.clear()
    md.print_header()
    md.row("emotions", 1.234)
    md.skip("yeast", "absent")
    assert lines == ["| set | s |\n|---|---|", "| emotions | 1.23 |", "| yeast | skipped: absent |"]
