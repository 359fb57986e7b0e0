"""Distributed layer: find or start a Dask client, keep row chunks in worker
memory, map kernels over them and tree-sum the results."""

from dmlr.distributed.chunks import ChunkSet, ClusterChunks, LocalChunks, make_chunkset
from dmlr.distributed.client import get_client, local_cluster

__all__ = ["ChunkSet", "ClusterChunks", "LocalChunks", "get_client", "local_cluster", "make_chunkset"]
