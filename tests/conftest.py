"""Shared fixtures: locations of the staged data (skipped when absent) and Dask clusters."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dmlr.datasets import anchors_dir, data_dir

RBRL_REF = anchors_dir() / "rbrl_reference"


def require(path):
    """Skip the calling test with a clear reason when ``path`` is not there."""
    if not path.exists():
        pytest.skip(f"{path} is absent (set DMLR_DATA_DIR / DMLR_ANCHORS_DIR to the staged ../shared folders)")
    return path


@pytest.fixture(scope="session")
def reference_emotions():
    """The RBRL reference's emotions split: X_train, Y_train, X_test, Y_test (Y 0/1 int8)."""
    import scipy.io as sio

    m = sio.loadmat(require(RBRL_REF / "emotions.mat"))
    to01 = lambda Y: (Y > 0).astype(np.int8)  # noqa: E731
    return m["X_train"], to01(m["Y_train"]), m["X_test"], to01(m["Y_test"])


@pytest.fixture(scope="session")
def shared_datasets():
    return require(data_dir())


@pytest.fixture
def two_fresh_processes(tmp_path):
    """``run(code, timeout)``: ``python -c code`` in two processes, one after the other, on one
    Numba cache that starts empty (the first process on a machine, then a later one); returns
    their two standard outputs, each process having exited cleanly."""
    import os
    import subprocess

    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))

    def run(code: str, timeout: float = 600) -> list[str]:
        outs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
            assert out.returncode == 0, out.stderr
            outs.append(out.stdout)
        return outs

    return run


@pytest.fixture(scope="session")
def cluster2():
    """A real 2-worker (process) local cluster for the whole session."""
    from distributed import Client

    from dmlr.distributed import local_cluster

    with local_cluster(2, 1) as cluster, Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture
def client2(cluster2):
    """The session's 2-worker client, made current for the test."""
    with cluster2.as_current():
        yield cluster2


@pytest.fixture
def small_presets(monkeypatch):
    """``dmlr.datasets.synthetic_store`` generating its presets at a test's size.

    Returns the list of (preset, seed) that it generated, one entry per
    ``make_multilabel`` call (sparse for "bookmarks", as the real preset).
    """
    import dmlr.datasets as datasets

    calls = []
    make = datasets.make_multilabel

    def small(path, *, preset, seed):
        calls.append((preset, seed))
        return make(
            path, n_samples=300, n_features=30, n_labels=5, sparse=preset == "bookmarks", density=0.1, seed=seed
        )

    monkeypatch.setattr(datasets, "make_multilabel", small)
    return calls


def pytest_terminal_summary(terminalreporter):
    """What tests/test_images.py measured (build times, image sizes, results), when it ran."""
    containers = sys.modules.get("containers")
    if containers is not None and containers.SUMMARY:
        terminalreporter.section("deploy images (tests/test_images.py)")
        for line in containers.SUMMARY:
            terminalreporter.write_line(line)
