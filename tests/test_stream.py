"""ChunkStream and run_streaming: rows in order, chunk by chunk, the same wherever they run."""

import numpy as np
import pytest
import scipy.sparse as sp

from dmlr.data.store import open_dataset
from dmlr.data.synthetic import make_multilabel
from dmlr.distributed.stream import ChunkStream, run_streaming


def _concat(blocks):
    Xs = [b.X for b in blocks]
    X = sp.vstack(Xs).toarray() if sp.issparse(Xs[0]) else np.vstack(Xs)
    return X, np.vstack([b.Y for b in blocks])


def _summary(stream):
    """What a solver sees: block sizes and a row-order-sensitive checksum, per pass."""
    sizes, check, row0 = [], 0.0, 0
    for b in stream:
        X = b.X.toarray() if sp.issparse(b.X) else b.X
        w = np.arange(row0, row0 + b.n_rows)  # weights by global row: a reordering changes the sum
        sizes.append(b.n_rows)
        row0 += b.n_rows
        check += float(w @ X.sum(axis=1)) + float(w @ b.Y.sum(axis=1))
    return sizes, check


@pytest.mark.parametrize("sparse", [False, True])
def test_stream_yields_the_store_rows_in_order(tmp_path, sparse):
    path = make_multilabel(
        tmp_path / "s.zarr", n_samples=500, n_features=12, n_labels=4, sparse=sparse, density=0.3, chunk_rows=64, seed=1
    )
    ds = open_dataset(path)
    X, Y = ds.arrays("train")
    blocks = ChunkStream(X, Y, fit_intercept=True).blocks()
    assert [b.n_rows for b in blocks] == list(X.chunks[0])
    Xs, Ys = _concat(blocks)
    Xd = X.compute()
    Xd = Xd.todense() if hasattr(Xd, "todense") else Xd
    np.testing.assert_array_equal(Xs[:, :-1], np.asarray(Xd, dtype=np.float64))
    np.testing.assert_array_equal(Xs[:, -1], 1.0)
    np.testing.assert_array_equal(Ys, Y.compute())
    assert Ys.dtype == np.int8


def test_prefetch_changes_nothing_and_numpy_input_is_cut_into_chunk_rows():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(103, 5)), (rng.random((103, 3)) < 0.4).astype(np.int8)
    a = ChunkStream(X, Y, chunk_rows=25).blocks()
    b = ChunkStream(X, Y, chunk_rows=25, prefetch=False).blocks()
    assert [blk.n_rows for blk in a] == [25, 25, 25, 25, 3]
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u.X, v.X)
        np.testing.assert_array_equal(u.Y, v.Y)
    np.testing.assert_array_equal(_concat(a)[0], X)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="rows"):
        ChunkStream(np.zeros((3, 2)), np.zeros((4, 1)))
    with pytest.raises(ValueError, match="chunk_rows"):
        ChunkStream(np.zeros((3, 2)), np.zeros((3, 1)), chunk_rows=0)
    with pytest.raises(ValueError, match="where"):
        run_streaming(_summary, ChunkStream(np.zeros((3, 2)), np.zeros((3, 1))), where="cloud")


def _where_and_summary(stream):
    import os

    return os.getpid(), _summary(stream)


def test_run_streaming_on_a_worker_reads_the_chunks_there(tmp_path, client2):
    import os

    path = make_multilabel(tmp_path / "s.zarr", n_samples=400, n_features=7, n_labels=3, chunk_rows=50, seed=2)
    X, Y = open_dataset(path).arrays("train")
    stream = ChunkStream(X, Y)
    pid_local, local = run_streaming(_where_and_summary, stream, where="local")
    pid_remote, remote = run_streaming(_where_and_summary, stream, client=client2)
    assert pid_local == os.getpid() and pid_remote != os.getpid()
    assert local == remote
    # in-memory input stays in this process even with a current client
    pid, _ = run_streaming(_where_and_summary, ChunkStream(np.ones((4, 2)), np.ones((4, 1))))
    assert pid == os.getpid()
