"""Write what a benchmark prints also to ``docs/benchmarks/<name>.txt``, under a header naming the machine.

The documentation's performance page includes these files as they are (``literalinclude``),
so its tables are the scripts' output, never copied by hand. A script opts in with a
``--docs`` flag and wraps its printing in :func:`tee`.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import numpy as np

DOCS_DIR = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def machine() -> str:
    """One line: CPU model, logical CPUs, OS, Python and numpy versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )


def _script() -> str:
    """The running script's path relative to the repository root (as its docstring's command gives it)."""
    path = Path(sys.argv[0]).resolve()
    try:
        return path.relative_to(DOCS_DIR.parents[1]).as_posix()
    except ValueError:
        return path.as_posix()


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


class _Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, text):
        for s in self.streams:
            s.write(text)
        return len(text)

    def flush(self):
        for s in self.streams:
            s.flush()


@contextmanager
def tee(name: str, enabled: bool = True):
    """Print as usual and, if ``enabled``, also write everything printed to ``docs/benchmarks/<name>.txt``.

    The file starts with the command, the date, the commit, the machine and the load average
    when the run started.
    """
    if not enabled:
        yield None
        return
    DOCS_DIR.mkdir(parents=True, exist_ok=True)
    path = DOCS_DIR / f"{name}.txt"
    with open(path, "w") as f:
        header = (
            f"# python {' '.join([_script(), *sys.argv[1:]])}\n"
            f"# run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC at commit {_commit()}\n"
            f"# machine: {machine()}\n"
            f"# load average at the start: {os.getloadavg()[0]:.2f}\n"
        )
        sys.stdout.write(header)
        f.write(header)
        with redirect_stdout(_Tee(sys.stdout, f)):
            yield path
    print(f"written to {os.path.relpath(path)}")
