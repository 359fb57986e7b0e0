"""The client of tests/test_images.py: run inside a container of the notebook image.

``python image_client.py DATA_DIR`` connects to the scheduler named by
``DASK_SCHEDULER_ADDRESS`` (as in the Helm chart's Jupyter pod), converts a
small generated set into ``DATA_DIR`` (the shared volume), and then:

1. fits RBRL on the cluster from that store and in this process, and reports
   both models, ``get_versions(check=True)``, the uid, environment and Numba
   cache of every process;
2. fits again, and at the ``KILL_AT``-th map-reduce call asks the test (on
   stdout: ``@@KILL <worker name>``) to SIGKILL the container of a worker that
   alone holds a row block, waits for the answer on stdin, and lets the fit
   go on; it reports the model, the workers left, and how often each row
   block was computed.

The last line on stdout is ``@@REPORT <json>``. Errors of a phase are reported
in it (the test fails on them) rather than ending the script.
"""

import json
import os
import sys
import tempfile
import time
import traceback
from collections import Counter

import numpy as np
import scipy.io
from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.utils import key_split

import dmlr
from dmlr.distributed import root
from dmlr.distributed.chunks import ClusterChunks
from dmlr.distributed.client import WORKER_ENVIRON, cluster_workers

# The one fit call of the test; tol=0 runs exactly max_iter iterations, so the fault
# fit can be compared iterate by iterate.
PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=60, tol=0.0)
KILL_AT = 10
#: Task-name prefix of the row blocks read from the store (``concat_blocks``).
BLOCK_TASK = "concat_blocks"
DATA_DIR = None  # argv[1], set by main (shipped by value with the functions that read it)


def fit(path, backend, client=None):
    with dmlr.config_context(backend=backend):
        return dmlr.fit(path, "rbrl", client=client, **PARAMS)


def say(tag, payload=""):
    print(f"@@{tag} {payload}", flush=True)


def make_source(folder, seed=5):
    """A small multi-label set as a MATLAB file with train/test splits (dense X, 0/1 Y)."""
    rng = np.random.default_rng(seed)
    n, d, n_labels = 3000, 40, 8
    X = rng.standard_normal((n, d))
    W = rng.standard_normal((d, n_labels))
    scores = X @ W + rng.standard_normal((n, n_labels))
    Y = (scores > np.quantile(scores, 0.75, axis=0)).astype(np.int8)
    path = os.path.join(folder, "small.mat")
    scipy.io.savemat(path, {"X_train": X[:2400], "Y_train": Y[:2400], "X_test": X[2400:], "Y_test": Y[2400:]})
    return path


def process_facts():
    """uid, gid, environment, the Numba cache dir's state and whether the data dir is writable."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    files, owners = [], set()
    if cache and os.path.isdir(cache):
        for root, _, names in os.walk(cache):
            for name in names:
                files.append(os.path.relpath(os.path.join(root, name), cache))
                owners.add(os.stat(os.path.join(root, name)).st_uid)
    return dict(
        uid=os.getuid(),
        gid=os.getgid(),
        env=dict(os.environ),
        numba_cache=dict(
            dir=cache,
            writable=bool(cache) and os.access(cache, os.W_OK),
            index_files=sum(f.endswith(".nbi") for f in files),
            data_files=sum(f.endswith(".nbc") for f in files),
            owners=sorted(owners),
        ),
        data_writable=os.access(DATA_DIR, os.W_OK) if os.path.isdir(DATA_DIR) else None,
    )


def compare(model, reference):
    rel = float(np.linalg.norm(model.coef_ - reference.coef_) / np.linalg.norm(reference.coef_))
    a, b = np.asarray(model.objective_history_), np.asarray(reference.objective_history_)
    obj = float(np.max(np.abs(a - b) / np.abs(b))) if a.shape == b.shape else None
    return dict(
        backend=model.backend_,
        n_iter=int(model.n_iter_),
        reference_n_iter=int(reference.n_iter_),
        coef_rel_diff=rel,
        objective_max_rel_diff=obj,
    )


def phase_fit(client, store):
    model = fit(store, backend="dask", client=client)
    reference = fit(store, backend="local")
    try:
        versions = client.get_versions(
            check=True, packages=["dmlr", "numba", "zarr", "sparse", "scipy", "threadpoolctl"]
        )
        versions_error = None
    except ValueError as e:
        versions, versions_error = client.get_versions(), str(e)
    python = {
        "client": versions["client"]["host"]["python"],
        "scheduler": versions["scheduler"]["host"]["python"],
        **{a: v["host"]["python"] for a, v in versions["workers"].items()},
    }
    names = {a: w["name"] for a, w in cluster_workers(client).items()}
    report = dict(
        compare(model, reference),
        versions_error=versions_error,
        python=python,
        dmlr=versions["client"]["packages"].get("dmlr"),
        client=process_facts(),
        scheduler=client.run_on_scheduler(process_facts),
        workers={names[a]: f for a, f in client.run(process_facts).items()},
        expected_worker_environ=WORKER_ENVIRON,
    )
    return report, reference


class BlockCounter(SchedulerPlugin):
    """Scheduler plugin: row blocks computed (task results reaching memory), by key."""

    name = "dmlr-image-test-block-counter"

    def __init__(self):
        self.computed = Counter()

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "memory" and key_split(key) == BLOCK_TASK:
            self.computed[str(key)] += 1


def _counts(dask_scheduler, name=BlockCounter.name):
    return dict(dask_scheduler.plugins[name].computed)


def phase_fault(client, store, reference):
    client.register_plugin(BlockCounter())
    names = {a: w["name"] for a, w in cluster_workers(client).items()}
    killed = {}
    calls = [0]

    def trigger(self):
        calls[0] += 1
        if calls[0] == KILL_AT:
            holders = {}
            for addr, keys in self.client.has_what().items():
                for k in keys:
                    if key_split(k) == BLOCK_TASK:
                        holders.setdefault(str(k), []).append(addr)
            sole = sorted((addrs[0], k) for k, addrs in holders.items() if len(addrs) == 1)
            victim = sole[0][0]
            killed.update(
                worker=names[victim], address=victim, blocks=sorted(k for a, k in sole if a == victim), holders=holders
            )
            say("KILL", names[victim])
            killed["answer"] = sys.stdin.readline().strip()

    # every call over the blocks from here: summed on the workers (map_reduce, or started:
    # map_reduce_async), gathered (map_blocks), or a segment of the solver on block 0's worker
    # (run_on_root), one iteration long here after the first
    hooked = ("map_reduce", "map_reduce_async", "map_blocks", "run_on_root")
    originals = {name: getattr(ClusterChunks, name) for name in hooked}
    segment_seconds, root.SEGMENT_SECONDS = root.SEGMENT_SECONDS, 0.0

    def counting(name):
        def call(self, fn, *args, **kwargs):
            trigger(self)
            return originals[name](self, fn, *args, **kwargs)

        return call

    for name in originals:
        setattr(ClusterChunks, name, counting(name))
    try:
        model = fit(store, backend="dask", client=client)
    finally:
        for name, original in originals.items():
            setattr(ClusterChunks, name, original)
        root.SEGMENT_SECONDS = segment_seconds
    left = sorted(w["name"] for w in cluster_workers(client).values())
    return dict(
        compare(model, reference),
        kill_at=KILL_AT,
        block_calls=calls[0],
        killed=killed,
        workers_left=left,
        block_computations=client.run_on_scheduler(_counts),
    )


def main():
    global DATA_DIR
    data = DATA_DIR = sys.argv[1]
    seconds = {}
    report = dict(seconds=seconds)
    start = time.monotonic()
    client = dmlr.get_client(quiet=True)
    client.wait_for_workers(2, timeout=120)
    seconds["connect"] = time.monotonic() - start
    with tempfile.TemporaryDirectory() as tmp:
        store = str(dmlr.convert(make_source(tmp), os.path.join(data, "small.zarr"), chunk_rows=128))
    report["store"] = dict(path=store, rows={k: len(v) for k, v in dmlr.open_dataset(store).splits.items()})
    seconds["convert"] = time.monotonic() - start - sum(seconds.values())
    reference = None
    try:
        report["fit"], reference = phase_fit(client, store)
    except Exception:
        report["fit"] = dict(error=traceback.format_exc())
    seconds["fit"] = time.monotonic() - start - sum(seconds.values())
    if reference is not None:
        try:
            report["fault"] = phase_fault(client, store, reference)
        except Exception:
            report["fault"] = dict(error=traceback.format_exc())
    seconds["fault"] = time.monotonic() - start - sum(seconds.values())
    say("REPORT", json.dumps(report, default=str))


if __name__ == "__main__":
    main()
