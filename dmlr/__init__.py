"""dmlr: distributed batch training of multi-label ranking and classification models on Dask.

Public API::

    dmlr.convert(src, dst, ...)          # ARFF / MEKA / .mat / .npz / libsvm / XC -> Zarr
    ds = dmlr.open_dataset(path)         # lazy dask arrays ds.X, ds.Y, ds.splits
    model = dmlr.fit(data, model="rbrl", split="train", client=None, **params)
    model = dmlr.fit(data, ..., checkpoint="fit.ckpt", checkpoint_every=10, resume=True)  # Zarr checkpoints
    dmlr.evaluate(model, data, split="test")
    model.save(path); dmlr.load(path)
    dmlr.get_client()
"""

from dmlr import datasets, metrics, models
from dmlr.api import evaluate, fit, load
from dmlr.data.convert import convert
from dmlr.data.store import Dataset, open_dataset
from dmlr.distributed.client import get_client
from dmlr.errors import DmlrInputError, NotADmlrStoreError

__version__ = "0.1.0"

__all__ = ["Dataset", "DmlrInputError", "NotADmlrStoreError", "convert", "datasets", "evaluate", "fit",
           "get_client", "load", "metrics", "models", "open_dataset"]
