"""Data-set helpers: synthetic generation and the location of the staged real sets."""

from __future__ import annotations

import os
from pathlib import Path

from dmlr.data.synthetic import PRESETS, make_multilabel

__all__ = ["PRESETS", "STAGED", "anchors_dir", "data_dir", "make_multilabel", "staged_store", "synthetic_store"]

_SHARED = Path(__file__).resolve().parents[2] / "shared"


def data_dir() -> Path:
    """Folder of the staged benchmark sets: ``$DMLR_DATA_DIR`` or ``<repo>/../shared/datasets``."""
    return Path(os.environ.get("DMLR_DATA_DIR", _SHARED / "datasets"))


def anchors_dir() -> Path:
    """Folder of the reference-implementation figures: ``$DMLR_ANCHORS_DIR`` or ``<repo>/../shared/anchors``."""
    return Path(os.environ.get("DMLR_ANCHORS_DIR", _SHARED / "anchors"))


#: Staged real sets (MANIFEST.md): name -> (folder, files, convert options). Where split files
#: exist they are converted together (the union, with "train"/"test" splits recorded).
STAGED = {
    "mediamill_discretized": (
        "mediamill_discretized",
        ["mediamill-train.arff-sort-Discretized.arff.gz", "mediamill-test-Discretized.arff.gz"],
        {"drop_truncated_last_line": True},
    ),
    "mediamill_subset2000": ("mediamill_subset2000", ["mediamill-train.arff.gz", "mediamill-test.arff.gz"], {}),
    "emotions": ("emotions", ["emotions-train.arff.gz", "emotions-test.arff.gz"], {}),
    "yeast": ("yeast", ["yeast-train.arff.gz", "yeast-test.arff.gz"], {}),
    "scene": ("scene", ["scene-train.arff.gz", "scene-test.arff.gz"], {}),
    "enron": ("enron", ["enron-train.arff.gz", "enron-test.arff.gz"], {}),
    "medical": ("medical", ["medical-train.arff.gz", "medical-test.arff.gz"], {}),
    "corel5k": ("corel5k", ["Corel5k-train-sparse.arff.gz", "Corel5k-test-sparse.arff.gz"], {}),
    "bibtex": ("bibtex", ["bibtex-train.arff.gz", "bibtex-test.arff.gz"], {}),
    "image_subset600": ("image_subset600", ["image.mat"], {}),
    "yahoo_arts": ("yahoo_arts", ["arts.mat"], {}),
    "yahoo_business": ("yahoo_business", ["yahoo_business_X.npz"], {}),
    "yahoo_education": ("yahoo_education", ["yahoo_education_X.npz"], {}),
    "yahoo_recreation": ("yahoo_recreation", ["recreation.mat"], {}),
    "tmc2007_500": ("tmc2007_500", ["tmc2007-500-train.arff.gz", "tmc2007-500-test.arff.gz"], {}),
    "rcv1subset1": ("rcv1subset1", ["rcv1sub1_X.npz"], {}),
    "rcv1subset1_top944": ("rcv1subset1", ["rcv1subset1_top944.mat"], {}),
    "delicious": ("delicious", ["delicious-train.arff.gz", "delicious-test.arff.gz"], {}),
}


def staged_files(name: str) -> list[Path]:
    """The staged input files of set ``name`` (see :data:`STAGED`); they may be absent."""
    try:
        folder, files, _ = STAGED[name]
    except KeyError:
        raise ValueError(f"unknown staged set {name!r}; known: {sorted(STAGED)}") from None
    return [data_dir() / folder / f for f in files]


def staged_store(name: str, workdir) -> Path:
    """Convert staged set ``name`` into ``workdir/<name>.zarr`` once and return the store's path.

    Raises
    ------
    FileNotFoundError
        When the staged files are absent (callers skip with that message).
    """
    from dmlr.data.convert import convert

    paths = staged_files(name)
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise FileNotFoundError(f"staged set {name!r} is absent: {', '.join(missing)} (set DMLR_DATA_DIR)")
    dst = Path(workdir) / f"{name}.zarr"
    if not dst.exists():
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # mediamill's dropped truncated line is recorded in the store
            convert(paths[0] if len(paths) == 1 else paths, dst, **STAGED[name][2])
    return dst


def synthetic_store(preset: str, workdir, seed: int = 0) -> Path:
    """Generate dmlr's synthetic set of ``preset`` into ``workdir/<preset>_synthetic_seed<seed>.zarr`` once.

    The synthetic counterpart of :func:`staged_store`, for the demo and the
    benchmarks that share one generated set per work folder. The seed is in
    the path, so a store made with one seed is never reused for another (the
    store is written under a temporary name and renamed when complete, so an
    interrupted generation leaves nothing to reuse either).

    Parameters
    ----------
    preset : {"mediamill", "bookmarks"}
        A key of :data:`dmlr.data.synthetic.PRESETS`.
    workdir : path-like
    seed : int

    Returns
    -------
    Path
        The store's path.
    """
    dst = Path(workdir) / f"{preset}_synthetic_seed{seed}.zarr"
    if not dst.exists():
        make_multilabel(dst, preset=preset, seed=seed)
    return dst
