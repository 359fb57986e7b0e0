"""The repository passes ``ruff check`` with the rules configured in pyproject.toml."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_is_clean():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed in this environment (pip install -e '.[test]' installs it)")
    # --no-cache: no .ruff_cache written into the checkout; the paths are the configured ones
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            "--output-format",
            "concise",
            "dmlr",
            "tests",
            "benchmarks",
            "examples",
            "docs",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_ruff_format_is_clean():
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed in this environment (pip install -e '.[test]' installs it)")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            "--no-cache",
            "dmlr",
            "tests",
            "benchmarks",
            "examples",
            "docs",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"ruff format would reformat:\n{result.stdout}{result.stderr}"
