"""Same data, same model: max |W - W_ref| for 1, 2, 4 workers and several chunk sizes.

Fits linear RBRL (alpha=1, alpha_rank=0.01, alpha_nuclear=0.1, tol=1e-6) on the RBRL
reference's emotions training split stored in Zarr with different chunk rows,
on local clusters of 1, 2 and 4 single-threaded worker processes and
in-process, and prints the largest coefficient difference from the in-process
numpy fit, and the iteration counts.

Usage: python benchmarks/determinism.py
"""

import numpy as np
from _common import Table, parser, reference_emotions, work_folder

import dmlr
from dmlr.data.store import write_dataset
from dmlr.models import RBRL

PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, max_iter=1999, tol=1e-6, scaling=None)


def main(argv=None):
    parser(__doc__).parse_args(argv)
    from distributed import Client

    from dmlr.distributed import local_cluster

    X, Y = reference_emotions()[:2]
    with dmlr.config_context(backend="local"):
        ref = RBRL(**PARAMS).fit(X, Y)
    work = work_folder(prefix="dmlr-det-")
    table = Table(
        "workers; stored chunk rows; blocks; iterations; max abs diff of W vs in-process numpy fit:.2e", markdown=True
    )
    table.print_header()
    for rows in (16, 64, 256):
        write_dataset(work / f"e{rows}.zarr", X, Y, chunk_rows=rows)
        with dmlr.config_context(backend="local", n_blocks=3):
            model = RBRL(**PARAMS).fit(*dmlr.open_dataset(work / f"e{rows}.zarr").arrays())
        table.row("in-process", rows, 3, model.n_iter_, np.abs(model.coef_ - ref.coef_).max())
    for n_workers in (1, 2, 4):
        with local_cluster(n_workers, 1) as cluster, Client(cluster) as client:
            for rows in (16, 64, 256):
                ds = dmlr.open_dataset(work / f"e{rows}.zarr")
                with dmlr.config_context(backend="dask", client=client):
                    model = RBRL(**PARAMS).fit(*ds.arrays())
                table.row(n_workers, rows, n_workers, model.n_iter_, np.abs(model.coef_ - ref.coef_).max())


if __name__ == "__main__":
    main()
