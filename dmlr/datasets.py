"""Data-set helpers: synthetic generation and the location of the staged real sets."""

from __future__ import annotations

import os
from pathlib import Path

from dmlr.data.synthetic import PRESETS, make_multilabel

__all__ = ["PRESETS", "anchors_dir", "data_dir", "make_multilabel"]

_SHARED = Path(__file__).resolve().parents[2] / "shared"


def data_dir() -> Path:
    """Folder of the staged benchmark sets: ``$DMLR_DATA_DIR`` or ``<repo>/../shared/datasets``."""
    return Path(os.environ.get("DMLR_DATA_DIR", _SHARED / "datasets"))


def anchors_dir() -> Path:
    """Folder of the reference-implementation figures: ``$DMLR_ANCHORS_DIR`` or ``<repo>/../shared/anchors``."""
    return Path(os.environ.get("DMLR_ANCHORS_DIR", _SHARED / "anchors"))
