"""glibc's malloc thresholds on dmlr's workers: a search unit and a chunked fit at each setting.

Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` (64 KiB) in its workers' environment, which
turns off glibc's dynamic mmap threshold; dmlr's local clusters set
``MALLOC_MMAP_THRESHOLD_`` and raise the trim threshold
(:data:`dmlr.distributed.client.WORKER_ENVIRON`). For each pair of thresholds (mmap, trim;
"dask": the nanny's trim threshold), on local clusters of single-thread workers started
with it:

* unit: one cross-validation unit of the Bookmarks shape's search (a fold of 15,351 training
  rows, ``dmlr.paths.fit_step``) on a 1-worker cluster, and in this process for reference;
* fit: the linear RBRL on all training rows over the chunks of 2 workers
  (mediamill_discretized and the Bookmarks shape), fitted twice: ms per iteration (the
  lower of the two fits), each worker's peak resident memory (VmHWM) above its resident
  memory before the fits, and the resident memory it keeps after them (both the largest
  over the workers).

Each pair runs in a process of its own (see :func:`one_row`).

Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/worker_malloc.py [--workdir DIR] [--docs]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from _common import parser, tee, timed, work_folder
from distributed import Client
from sklearn.base import clone

import dmlr
import dmlr.distributed.client as dclient
from dmlr import tuning
from dmlr.api import auto_model
from dmlr.datasets import staged_store, synthetic_store
from dmlr.model_selection import kfold_indices
from dmlr.paths import fit_step, materialize

#: (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or None for the nanny's own).
SETTINGS = ((2**20, None), (2**22, None), (2**25, None), (2**25, 2**23), (2**25, 2**26))


def _status(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) // 1024
    return -1


def _rss():
    return _status("VmRSS")


def _hwm():
    return _status("VmHWM")


def unit_args(store: Path):
    """A search unit of the Bookmarks shape: (X, Y, splits) of 15,351 rows and the unit's tail."""
    X, Y = materialize(*dmlr.open_dataset(store).arrays("train"))
    rows = np.sort(np.random.default_rng(0).permutation(X.shape[0])[:15351])
    est = auto_model(X).set_params(warm_start=True, tol=tuning.SEARCH_TOL, verbose=0)
    return (X[rows], Y[rows], kfold_indices(len(rows), 2, 0)), (est, 0, {"alpha": 2.45}, ("ranking_loss",), True)


def time_unit(client, data, tail) -> float:
    est, *rest = tail
    if client is None:
        return timed(fit_step, *data, clone(est), *rest)[1]
    shared = client.scatter(list(data), broadcast=True)
    client.submit(fit_step, *shared, clone(est), *rest, pure=False).result()  # loads the kernels
    return timed(lambda: client.submit(fit_step, *shared, clone(est), *rest, pure=False).result())[1]


def time_fit(client, store: Path, alpha: float, repeats: int = 2):
    """(ms per iteration, the lower of ``repeats`` fits; peak MiB above the start; MiB kept)."""
    X, Y = dmlr.open_dataset(store).arrays("train")
    est = auto_model(X).set_params(alpha=alpha)
    before = client.run(_rss)
    per_iter = []
    for _ in range(repeats):
        t = time.perf_counter()
        with dmlr.config_context(backend="dask", client=client):
            est.fit(X, Y)
        per_iter.append(1000 * (time.perf_counter() - t) / est.n_iter_)
    peak, after = client.run(_hwm), client.run(_rss)
    return min(per_iter), max(peak[w] - before[w] for w in peak), max(after[w] - before[w] for w in after)


def one_row(mmap: int, trim: int | None, workdir: Path) -> str:
    """The table's row of one pair of thresholds. Run in a process of its own: the nannies of a
    second local cluster in a process start their workers with the first one's malloc
    environment."""
    bookmarks = synthetic_store("bookmarks", workdir, seed=0)
    mediamill = staged_store("mediamill_discretized", workdir)
    data, tail = unit_args(bookmarks)
    dclient.WORKER_ENVIRON["MALLOC_MMAP_THRESHOLD_"] = str(mmap)
    if trim is None:
        dclient.WORKER_ENVIRON.pop("MALLOC_TRIM_THRESHOLD_", None)
    else:
        dclient.WORKER_ENVIRON["MALLOC_TRIM_THRESHOLD_"] = str(trim)
    with dclient.local_cluster(1, 1) as cluster, Client(cluster) as client:
        unit = time_unit(client, data, tail)
    with dclient.local_cluster(2, 1) as cluster, Client(cluster) as client:
        mm = time_fit(client, mediamill, 2.67)
        bm = time_fit(client, bookmarks, 2.45)
    return (
        f"{mmap:>9} {trim or 'dask':>9} {unit:>7.2f} {mm[0]:>9.1f} {mm[1]:>6d} {mm[2]:>6d} "
        f"{bm[0]:>9.1f} {bm[1]:>6d} {bm[2]:>6d}"
    )


def main(argv=None) -> int:
    p = parser(__doc__, workdir=None, docs="worker_malloc")
    p.add_argument("--one", type=int, nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    workdir = work_folder(args.workdir, prefix="worker_malloc-")
    if args.one is not None:
        mmap, trim = args.one
        print(one_row(mmap, trim or None, workdir), flush=True)
        return 0
    bookmarks = synthetic_store("bookmarks", workdir, seed=0)
    staged_store("mediamill_discretized", workdir)
    data, tail = unit_args(bookmarks)
    with tee("worker_malloc", args.docs):
        print(f"unit in this process: {time_unit(None, data, tail):.2f} s")
        print("thresholds in bytes (trim 'dask': the nanny's 65536); peak and kept in MiB")
        print(f"{'':>9} {'':>9} {'':>7} {'mediamill, 2 workers':^23} {'Bookmarks shape, 2 workers':^23}")
        print(
            f"{'mmap':>9} {'trim':>9} {'unit s':>7} {'ms/it':>9} {'peak':>6} {'kept':>6} "
            f"{'ms/it':>9} {'peak':>6} {'kept':>6}"
        )
        for mmap, trim in SETTINGS:
            cmd = [sys.executable, __file__, "--one", str(mmap), str(trim or 0), "--workdir", str(workdir)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            print(out.stdout.rstrip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
