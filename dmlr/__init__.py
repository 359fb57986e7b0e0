"""dmlr: distributed batch training of multi-label ranking and classification models on Dask.

Public API::

    dmlr.convert(src, dst, ...)          # ARFF / MEKA / .mat / .npz / libsvm / XC -> Zarr
    ds = dmlr.open_dataset(path)         # lazy dask arrays ds.X, ds.Y, ds.splits
    model = dmlr.fit(data, model="auto", split="train", client=None, **params)
    with dmlr.config_context(backend="dask", n_blocks=4): ...   # execution settings
    model = dmlr.fit(data, ..., checkpoint="fit.ckpt", checkpoint_every=10, resume=True)  # Zarr checkpoints
    dmlr.evaluate(model, data, split="test")
    model.save(path); dmlr.load(path)
    dmlr.get_client()
"""

from dmlr import datasets, metrics, models, scoring
from dmlr.api import evaluate, fit, load
from dmlr.config import config_context, get_config, set_config
from dmlr.data.convert import convert
from dmlr.data.store import Dataset, open_dataset
from dmlr.distributed.client import get_client
from dmlr.errors import DmlrInputError, NotADmlrStoreError

__version__ = "0.1.0"

__all__ = [
    "Dataset",
    "DmlrInputError",
    "NotADmlrStoreError",
    "config_context",
    "convert",
    "datasets",
    "evaluate",
    "fit",
    "get_client",
    "get_config",
    "load",
    "metrics",
    "models",
    "open_dataset",
    "scoring",
    "set_config",
]
