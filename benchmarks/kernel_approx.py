"""Approximate kernel RBRL (Nystroem / random Fourier features) against the exact kernel model.

For each small set, fits the exact RBF kernel model :class:`dmlr.models.KernelRBRL`
(eq. 12; gamma = 1/d, alpha=1, alpha_rank=0.01, alpha_nuclear=0.1,
solver="spectral", default max_iter/tol) and the same settings as
``make_pipeline(KernelFeatures("rbf", n_components=D, method=...), RBRL(...))``
(:class:`dmlr.kernel_approximation.KernelFeatures`) with ``method="nystroem"``
(D = 64, 256, 1024 capped at n_train) and ``"fourier"`` (D = 256,
1024), i.e. the linear model (eq. 8) on D kernel features. Prints test
average precision, ranking loss, Hamming loss, example-based F1
(:func:`dmlr.metrics.multilabel_metrics`, labels by
:func:`dmlr.metrics.predict_from_scores`) and whole-fit seconds (the
pipeline's ``fit``: feature map and transform included) per variant.
In-process (execution setting ``backend="auto"``).

* emotions: the RBRL reference's split (../shared/anchors/rbrl_reference/emotions.mat,
  X_train/X_test, Y in -1/+1 -> > 0);
* scene, yeast: MULAN's official train/test files (../shared/datasets), via
  :func:`dmlr.convert` and :meth:`dmlr.Dataset.arrays`;
* image_subset600: ../shared/datasets/image_subset600/image.mat (600 x 294,
  target already instances x labels 0/1), seeded 60/40 split.

Then the approximate path at the Mediamill shape, where the exact kernel
would need the 43,907^2 Gram matrix (15.4 GB in float64; 7.6 GB for the
train rows alone): :func:`dmlr.datasets.make_multilabel` (preset
"mediamill", seed 0), Nystroem with n_components=1024 on the train split,
on a 2-worker (1 thread each) LocalCluster
(``dmlr.config_context(backend="dask", client=...)``), max_iter=100, tol=0:
whole fit seconds and seconds per APG iteration.

Usage: python benchmarks/kernel_approx.py [--workdir DIR] [--skip-mediamill]
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from _common import Table, arrays, parser, random_split, reference_emotions, timed, work_folder
from sklearn.pipeline import make_pipeline

import dmlr
from dmlr.datasets import data_dir, synthetic_store
from dmlr.kernel_approximation import KernelFeatures
from dmlr.metrics import multilabel_metrics, predict_from_scores
from dmlr.models import RBRL, KernelRBRL

KERNEL = dict(kernel="rbf", gamma=None)
PARAMS = dict(alpha=1.0, alpha_rank=0.01, alpha_nuclear=0.1, solver="spectral")
METRICS = ("average_precision", "ranking_loss", "hamming_loss", "f1_example")


def load_sets(work: Path):
    import scipy.io as sio

    sets = {"emotions (ref split)": reference_emotions()}
    for name in ("scene", "yeast"):
        folder = data_dir() / name
        store = dmlr.convert(
            [folder / f"{name}-train.arff.gz", folder / f"{name}-test.arff.gz"],
            work / f"{name}.zarr",
            xml=folder / f"{name}.xml",
            overwrite=True,
        )
        sets[f"{name} (MULAN split)"] = (*arrays(store, "train"), *arrays(store, "test"))
    m = sio.loadmat(data_dir() / "image_subset600" / "image.mat")
    X, Y = np.asarray(m["data"], dtype=np.float64), (np.asarray(m["target"]) > 0).astype(np.int8)
    tr, te = random_split(X.shape[0])
    sets["image_subset600 (60/40, seed 0)"] = (X[tr], Y[tr], X[te], Y[te])
    return sets


def approximate(method: str, n_components: int, **params):
    """The approximate kernel model: D kernel features, then linear RBRL (``params`` override PARAMS)."""
    return make_pipeline(
        KernelFeatures(**KERNEL, n_components=n_components, method=method), RBRL(**{**PARAMS, **params})
    )


def variants(n_train: int):
    """(label, unfitted model) of every variant for a training part of ``n_train`` rows."""
    yield "exact kernel", KernelRBRL(**KERNEL, **PARAMS)
    for D in (64, 256, 1024):
        D_eff = min(D, n_train)
        label = f"nystroem D={D_eff}" + (" (1024 capped at n)" if D_eff < D else "")
        yield label, approximate("nystroem", D_eff)
    for D in (256, 1024):
        yield f"fourier D={D}", approximate("fourier", D)


def small_rows(sets):
    rows = []
    for name, (Xtr, Ytr, Xte, Yte) in sets.items():
        for label, model in variants(Xtr.shape[0]):
            _, seconds = timed(model.fit, Xtr, Ytr)  # a pipeline's feature map included
            S = model.decision_function(Xte)
            vals = multilabel_metrics(Yte, S, predict_from_scores(S), metrics=METRICS)
            n_iter = (model[-1] if hasattr(model, "steps") else model).n_iter_
            rows.append(
                (
                    name,
                    f"{Xtr.shape[0]}/{Xte.shape[0]} x {Xtr.shape[1]}, l={Ytr.shape[1]}",
                    label,
                    n_iter,
                    f"{seconds:.2f}",
                    *(f"{vals[k]:.4f}" for k in METRICS),
                )
            )
            print("  " + " | ".join(str(c) for c in rows[-1]), flush=True)
    return rows


def mediamill_row(work: Path):
    from distributed import Client

    from dmlr.distributed import local_cluster

    ds = dmlr.open_dataset(synthetic_store("mediamill", work))
    X, Y = ds.arrays("train")
    Xte, Yte = ds.arrays("test")
    n = ds.n_samples
    with local_cluster(2, 1) as cluster, Client(cluster) as client, dmlr.config_context(backend="dask", client=client):
        model = approximate("nystroem", 1024, max_iter=100, tol=0.0)
        _, fit_seconds = timed(model.fit, X, Y)
        features, rbrl = model[0], model[-1]
        ts = rbrl.objective_seconds_
        per_iter = (ts[-1] - ts[0]) / max(len(ts) - 1, 1)
        setup = fit_seconds - ts[-1]
        t = time.perf_counter()
        S = model.decision_function(Xte)
        vals = multilabel_metrics(Yte, S, predict_from_scores(S), metrics=METRICS)
        eval_s = time.perf_counter() - t
    gram_gb = 8 * n**2 / 1e9
    gram_train_gb = 8 * X.shape[0] ** 2 / 1e9
    print(
        f"\nMediamill-shaped synthetic (make_multilabel preset='mediamill', seed 0): n={n}, train {X.shape[0]} x "
        f"{X.shape[1]}, {Y.shape[1]} labels; Nystroem n_components=1024, 2-worker LocalCluster, "
        f"backend='dask', max_iter=100, tol=0"
    )
    print(
        f"  whole fit {fit_seconds:.1f} s ({rbrl.n_iter_} iterations; {per_iter:.3f} s/iteration; "
        f"setup before the first iteration incl. landmark gather, eigh, features on the workers and "
        f"Lipschitz pass {setup:.1f} s)"
    )
    print(
        f"  test ({Xte.shape[0]} rows, scored on the cluster's data path in {eval_s:.1f} s): "
        + ", ".join(f"{k} {vals[k]:.4f}" for k in METRICS)
    )
    print(
        f"  model arrays: coef_ {rbrl.coef_.shape}, landmarks {features.landmarks_.shape}, "
        f"projection {features.projection_.shape}; features held on workers: "
        f"{X.shape[0]} x 1025 float64 = {8 * X.shape[0] * 1025 / 1e6:.0f} MB"
    )
    print(
        f"  exact kernel RBRL would need K of {n}^2 floats = {gram_gb:.1f} GB "
        f"({X.shape[0]}^2 = {gram_train_gb:.1f} GB for the train rows alone): not run"
    )


def main(argv=None):
    ap = parser(__doc__, full_doc=True, workdir=None)
    ap.add_argument("--skip-mediamill", action="store_true")
    args = ap.parse_args(argv)
    work = work_folder(args.workdir, prefix="dmlr-kapprox-")
    print(f"load average at start: {os.getloadavg()}; {os.cpu_count()} cores")
    sets = load_sets(work)
    rng = np.random.default_rng(0)  # compile the Numba kernels outside the timings
    RBRL(max_iter=3).fit(rng.normal(size=(20, 3)), (rng.random((20, 2)) < 0.5).astype(np.int8))
    print("rows as they finish:")
    rows = small_rows(sets)
    head = (
        "data set",
        "train/test x d",
        "variant",
        "iters",
        "fit s",
        "AP",
        "ranking loss",
        "Hamming loss",
        "F1 example",
    )
    table = Table("; ".join(head), markdown=True)
    print()
    table.print_header()
    for r in rows:
        table.row(*map(str, r))
    print(
        "\nAll: RBF, gamma = 1/d, alpha=1, alpha_rank=0.01, alpha_nuclear=0.1, solver='spectral', max_iter=2000, "
        "tol=1e-6, fit_intercept=True (the approximate variants' bias is a feature; the exact kernel "
        "model has none). fit s: whole fit incl. the feature map, in-process (backend 'auto')."
    )
    if not args.skip_mediamill:
        mediamill_row(work)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
