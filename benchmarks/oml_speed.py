"""OML cost against Table II of Gong et al. 2020 (seed 001), and the distributed k-NN search.

1. Per online update (Algorithm 1, one row): Table II says O(np + dpq) -- the nearest neighbour
   in D (np) and the projections (dpq). Timed: ``oml_train_stream`` streaming ``--rounds`` rows
   after a memory D of n rows, for two sizes n (the np term should double with n).
2. Per prediction (one test row): O(dpq + nd) -- embed the query (x P V) and scan D in d dims.
   Timed: ``OML.decision_function`` on ``--queries`` rows with D of the same two sizes, and the
   Euclidean KNN (O(np)) for comparison, both in this process (``dmlr.config_context(backend="local")``).
3. The distributed exact k-NN search (k = 10) of ``--queries`` rows against the training rows of
   mediamill_discretized (staged; else the Mediamill-shaped synthetic set), in the 120-dim input
   space, in-process and on ``dmlr.distributed.local_cluster(n, 1)`` with 1 and 2 workers
   (memory in row chunks on the workers, never gathered; results checked identical).

Usage: python benchmarks/oml_speed.py [--rounds 2000] [--queries 2000] [--sizes 10000,20000]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from _common import arrays, best_of, parser, work_folder

import dmlr
from dmlr.datasets import staged_store, synthetic_store
from dmlr.distributed.stream import ChunkStream
from dmlr.models.oml import KNN, OML
from dmlr.solvers.oml import oml_train_stream


def load_mediamill(workdir: Path):
    try:
        path, name = staged_store("mediamill_discretized", workdir), "mediamill_discretized"
    except FileNotFoundError:
        path = synthetic_store("mediamill", workdir)
        name = "mediamill synthetic"
    return name, (*arrays(path, "train"), *arrays(path, "test"))


def main(argv=None):
    ap = parser(__doc__, full_doc=True, workdir=None)
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--sizes", default="10000,20000")
    args = ap.parse_args(argv)
    workdir = work_folder(args.workdir, prefix="dmlr-omlspeed-")
    name, (Xtr, Ytr, Xte, Yte) = load_mediamill(workdir)
    p, q = Xtr.shape[1], Ytr.shape[1]
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"data: {name}, train {Xtr.shape}, test {Xte.shape}, q={q}")
    print()
    print("Online update and prediction per row (ms), against Table II")
    print(f"{'n (|D|)':>8} {'d':>4} {'update ms':>10} {'active':>7} {'OML predict ms':>15} {'KNN predict ms':>15}")
    base = OML(k=10, aggregation="vote", random_state=0, init_fraction=0.5).fit(Xtr[:4000], Ytr[:4000])
    d = base.n_components_
    Q = Xte[: args.queries]
    for n in sizes:
        mem = (Xtr[:n], Ytr[:n])
        rows = slice(n, n + args.rounds)
        stream = ChunkStream(Xtr[rows], Ytr[rows])
        params = {"lambda_min": 1e-5, "lambda_max": 1e5, "lambda_rule": "exact"}
        t_upd, res = best_of(lambda: oml_train_stream(stream, base.P_, base.V_, mem, None, n, params))
        m = OML(k=10, aggregation="vote", random_state=0)
        m.set_params()
        for attr in (
            "P_",
            "V_",
            "n_features_in_",
            "n_labels_",
            "n_components_",
            "classes_",
            "target_type_",
            "label_dtype_",
        ):
            setattr(m, attr, getattr(base, attr))
        m.memory_X_, m.memory_Y_, m.n_memory_ = Xtr[:n], Ytr[:n], n
        with dmlr.config_context(backend="local"):
            t_pred, _ = best_of(lambda: m.decision_function(Q))
            knn = KNN().fit(Xtr[:n], Ytr[:n])
            t_knn, _ = best_of(lambda: knn.decision_function(Q))
        print(
            f"{n:>8} {d:>4} {1e3 * t_upd / args.rounds:>10.3f} {int((res['losses'] > 0).sum()):>7} "
            f"{1e3 * t_pred / len(Q):>15.4f} {1e3 * t_knn / len(Q):>15.4f}"
        )
    print(
        f"(Table II: update O(np + dpq) = {sizes[0] * p:.2g}/{sizes[-1] * p:.2g} + {d * p * q:.2g} flops; "
        f"OML predict O(dpq + nd) = {d * p * q:.2g} + {sizes[0] * d:.2g}/{sizes[-1] * d:.2g}; KNN O(np))"
    )
    print()
    from distributed import Client

    from dmlr.distributed import local_cluster
    from dmlr.distributed.chunks import make_chunkset
    from dmlr.distributed.knn import index_chunks, knn_search

    print(f"Distributed exact 10-NN search: {len(Q)} queries x {Xtr.shape[0]} memory rows x {p} dims")
    print(f"{'where':<22}{'blocks':>7}{'seconds':>9}{'ms/query':>10}  same as in-process")
    ref = None
    for workers in (0, 1, 2):
        if workers == 0:
            ctx, client = None, None
        else:
            ctx = local_cluster(workers, 1)
            client = Client(ctx, set_as_default=False)
        try:
            backend = "local" if client is None else "dask"
            chunks = make_chunkset(Xtr, Ytr, fit_intercept=False, backend=backend, client=client)
            mem = index_chunks(chunks)
            chunks.close()
            knn_search(mem, Q[:10], 10)  # warm-up (Numba, actors)
            t, out = best_of(lambda: knn_search(mem, Q, 10))
            same = (
                "reference" if ref is None else str(np.array_equal(out[1], ref[1]) and np.array_equal(out[0], ref[0]))
            )
            ref = ref or out
            where = "in-process" if client is None else f"{workers} worker(s)"
            print(f"{where:<22}{mem.n_blocks:>7}{t:>9.2f}{1e3 * t / len(Q):>10.3f}  {same}")
            mem.close()
        finally:
            if client is not None:
                client.close()
                ctx.close()


if __name__ == "__main__":
    main()
