"""Distributed layer: find or start a Dask client, keep row chunks in worker
memory, map kernels over them and tree-sum the results."""

from dmlr.distributed.chunks import ChunkSet, ClusterChunks, LocalChunks, make_chunkset
from dmlr.distributed.client import get_client

__all__ = ["ChunkSet", "ClusterChunks", "LocalChunks", "get_client", "make_chunkset"]
