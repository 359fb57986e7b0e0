"""What the benchmarks share: the command line, data loading, timing, tables and the ``--docs`` output.

Each script in ``benchmarks/`` answers one question and prints a table; it takes these parts
instead of keeping its own copies. ``python -m benchmarks LIST`` lists the scripts.

The documentation includes the ``--docs`` files as they are (``literalinclude``), so its
tables are the scripts' output, never copied by hand: a script opts in with a ``--docs`` flag
(:func:`parser`) and wraps its printing in :func:`tee`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager, redirect_stdout
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DOCS_DIR = ROOT / "docs" / "benchmarks"

# -- the command line ------------------------------------------------------------------------


def names(text: str) -> list[str]:
    """The comma-separated names in ``text`` (``--sets a,b``), blanks dropped."""
    return [s.strip() for s in text.split(",") if s.strip()]


def parser(doc: str, *, sets=None, workdir=False, docs: str | None = None, full_doc: bool = False):
    """An argument parser described by ``doc``'s first line (all of it with ``full_doc``).

    ``sets``: the default of ``--sets`` (a sequence; the parsed value is a list of names);
    ``workdir``: the default of ``--workdir`` (``False``: no such option; ``None``: a new
    temporary folder, see :func:`work_folder`); ``docs``: adds ``--docs``, which writes
    ``docs/benchmarks/<docs>.txt``.
    """
    if full_doc:
        p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    else:
        p = argparse.ArgumentParser(description=doc.split("\n")[0])
    if sets is not None:
        p.add_argument("--sets", type=names, default=",".join(sets))
    if workdir is not False:
        p.add_argument("--workdir", default=workdir)
    if docs:
        p.add_argument("--docs", action="store_true", help=f"also write docs/benchmarks/{docs}.txt")
    return p


def work_folder(path=None, prefix: str = "dmlr-bench-") -> Path:
    """``path``, created where absent; a new temporary folder where ``path`` is None."""
    path = Path(path) if path else Path(tempfile.mkdtemp(prefix=prefix))
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- data --------------------------------------------------------------------------------------


def arrays(store, split: str | None = None, *, float64: bool = True, y_dtype=np.int8):
    """(X, Y) of a store's split (None: all rows) in memory, by :func:`dmlr.paths.materialize`.

    X is NumPy or SciPy CSR, float64 (:func:`dmlr.data.arrays.as_matrix`) unless ``float64`` is
    False; Y is a C-contiguous array of ``y_dtype``.
    """
    import dmlr
    from dmlr.data.arrays import as_matrix
    from dmlr.paths import materialize

    X, Y = materialize(*dmlr.open_dataset(store).arrays(split))
    return (as_matrix(X) if float64 else X), np.ascontiguousarray(Y, dtype=y_dtype)


def peer_arrays(store, split: str | None = None):
    """(X, Y) of a store's split for a scikit-learn peer: X as stored (NumPy or CSR), Y int64 (scikit-learn's
    ``OneVsRestClassifier`` and int8 labels do not mix)."""
    return arrays(store, split, float64=False, y_dtype=np.int64)


def peer_scaler(scaling: str):
    """scikit-learn's transformer for dmlr's ``scaling_`` (``TfidfTransformer``'s defaults are dmlr's ``"tfidf"``)."""
    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.preprocessing import MaxAbsScaler, StandardScaler

    return {"standard": StandardScaler, "maxabs": MaxAbsScaler, "tfidf": TfidfTransformer}[scaling]()


def staged(name: str, workdir, split: str | None = None, **options):
    """:func:`arrays` of staged set ``name`` (:func:`dmlr.datasets.staged_store` into ``workdir``)."""
    from dmlr.datasets import staged_store

    return arrays(staged_store(name, workdir), split, **options)


def stores(sets, workdir, open_store=None, *, width: int = 22, emit=print):
    """(name, store) of each set in ``sets`` whose files are present, by ``open_store(name, workdir)``
    (:func:`dmlr.datasets.staged_store` by default); for an absent one, ``emit`` gets the line
    ``<name> skipped: <why>`` (the name padded to ``width``) and the set is passed over."""
    if open_store is None:
        from dmlr.datasets import staged_store as open_store
    for name in sets:
        try:
            store = open_store(name, workdir)
        except FileNotFoundError as e:
            emit(f"{name:<{width}} skipped: {e}")
            continue
        yield name, store


def reference_emotions():
    """(X_train, Y_train, X_test, Y_test) of the RBRL reference's emotions split (anchors), Y int8 0/1."""
    import scipy.io as sio

    from dmlr.datasets import anchors_dir

    m = sio.loadmat(anchors_dir() / "rbrl_reference" / "emotions.mat")
    return m["X_train"], (m["Y_train"] > 0).astype(np.int8), m["X_test"], (m["Y_test"] > 0).astype(np.int8)


def random_split(n: int, seed: int = 0, train: float = 0.6, *, rounded: bool = True):
    """(train rows, test rows), sorted, of a seeded permutation of ``n`` rows; the training part has
    ``round(train * n)`` rows (``int(train * n)`` where ``rounded`` is False)."""
    perm = np.random.default_rng(seed).permutation(n)
    cut = int(round(train * n)) if rounded else int(train * n)
    return np.sort(perm[:cut]), np.sort(perm[cut:])


def prepared_store(name: str, workdir: Path) -> Path:
    """A dmlr store of ``name`` with "train" and "test" splits: the staged set's official split, a
    seeded 60/40 split (:func:`random_split`, seed 0) where its files give none; ``emotions_mat``
    is the RBRL reference's split and features (:func:`reference_emotions`)."""
    import dmlr
    from dmlr.data.store import write_dataset
    from dmlr.datasets import staged_store

    dst = Path(workdir) / f"{name}_split.zarr"
    if dst.exists():
        return dst
    if name == "emotions_mat":
        X_tr, Y_tr, X_te, Y_te = reference_emotions()
        n_tr = X_tr.shape[0]
        X, Y = np.vstack([X_tr, X_te]), np.vstack([Y_tr, Y_te])
        return write_dataset(dst, X, Y, splits={"train": np.arange(n_tr), "test": np.arange(n_tr, X.shape[0])})
    store = staged_store(name, workdir)
    if {"train", "test"} <= set(dmlr.open_dataset(store).splits):
        return store
    X, Y = arrays(store, float64=False)
    train, test = random_split(X.shape[0], rounded=False)
    return write_dataset(dst, X, Y, splits={"train": train, "test": test})


# -- timing ------------------------------------------------------------------------------------


def timed(fn, *args, **kwargs):
    """(``fn(*args, **kwargs)``, its seconds)."""
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t


def seconds_of(fn, repeats: int = 1) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn()``; ``min`` of them is the best of n, ``np.median`` the median."""
    return [timed(fn)[1] for _ in range(repeats)]


def best_of(fn, repeats: int = 2):
    """(the least seconds of ``repeats`` calls of ``fn()``, the last call's result)."""
    times = []
    for _ in range(repeats):
        out, seconds = timed(fn)
        times.append(seconds)
    return min(times), out


def in_turns(fns: dict, repeats: int) -> dict:
    """{label: seconds of each call} of ``repeats`` calls of each function of ``fns`` ({label: fn}), called
    in turns (one of each, then again), so that all share the machine's load alike: their ratios are
    measured side by side."""
    times = {label: [] for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            times[label].append(timed(fn)[1])
    return times


# -- tables ------------------------------------------------------------------------------------


def _print(line: str) -> None:
    print(line, flush=True)


#: A column's format spec: extra spaces before the column, then Python's [align][sign][width][rest].
_SPEC = re.compile(r"( *)([<>^=]?)([-+ ]?)(\d*)(.*)")


class Table:
    """Rows under titled columns, each printed as it comes: aligned or as a Markdown table.

    ``columns`` is one string, ``"title:spec; title:spec; ..."``. Aligned (the default), cells
    are joined by one space, and ``spec`` is a format spec whose alignment and width also pad
    the title (``"set:<22; alpha:>9.3g"``); spaces at its start widen the gap before the
    column. With ``markdown=True`` the cells are ``| a | b |`` under a ``|---|`` line and
    ``spec`` formats the cell (``"set; loss:.4f"``). A string cell takes only the alignment
    and width (preformatted).
    """

    def __init__(self, columns: str, *, markdown: bool = False, emit=None):
        self.columns = []
        for column in columns.split(";"):
            title, _, spec = column.lstrip().rpartition(":") if ":" in column else (column.strip(), "", "")
            self.columns.append((title, _SPEC.fullmatch(spec).groups()))
        self.markdown = markdown
        self.emit = emit or _print

    def _join(self, cells) -> str:
        if self.markdown:
            return "| " + " | ".join(cells) + " |"
        return "".join(
            ("" if k == 0 else " " + gap) + cell for k, (cell, (_, (gap, *_))) in enumerate(zip(cells, self.columns))
        )

    def header(self) -> str:
        """The title line (and under it the ``|---|`` line of a Markdown table)."""
        titles = self._join(format(title, align + width) for title, (_, align, _, width, _) in self.columns)
        return titles + ("\n" + "|---" * len(self.columns) + "|" if self.markdown else "")

    def format(self, *cells) -> str:
        """One row: each cell formatted by its column's spec."""
        out = []
        for cell, (_, (_, align, sign, width, rest)) in zip(cells, self.columns):
            out.append(format(cell, align + width if isinstance(cell, str) else align + sign + width + rest))
        return self._join(out)

    def print_header(self) -> None:
        self.emit(self.header())

    def row(self, *cells) -> None:
        """Emit one row (printed and flushed by default: a long run shows its rows as they come)."""
        self.emit(self.format(*cells))

    def skip(self, name: str, why) -> None:
        """A row for a set that is passed over: ``<name> skipped: <why>``."""
        if self.markdown:
            self.emit(f"| {name} | skipped: {why} |")
        else:
            _, (_, align, _, width, _) = self.columns[0]
            self.emit(f"{format(name, align + width)} skipped: {why}")


# -- the --docs output -------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """One line: CPU model, logical CPUs, OS, Python and numpy versions."""
    return (
        f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    )


def _script() -> str:
    """The running script's path relative to the repository root (as its docstring's command gives it)."""
    path = Path(sys.argv[0]).resolve()
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _commit() -> str:
    """HEAD's short hash, and whether dmlr's or the benchmarks' files differ from it (a run of
    code that no commit holds says so)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, cwd=ROOT
        )
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "dmlr", "benchmarks"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=ROOT,
        )
    except OSError:
        return "unknown"
    commit = out.stdout.strip() or "unknown"
    return commit + (" with uncommitted changes" if changed.stdout.strip() else "")


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
