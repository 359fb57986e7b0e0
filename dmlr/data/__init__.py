"""Data: the Zarr store, converters from the common multi-label formats, synthetic sets."""

from dmlr.data.store import Dataset, StoreWriter, open_dataset, write_dataset

__all__ = ["Dataset", "StoreWriter", "open_dataset", "write_dataset"]
