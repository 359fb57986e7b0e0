"""The Zarr layout: round trips, laziness, chunk alignment, errors, atomic writes."""

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import dmlr
from dmlr.data.store import StoreWriter, write_dataset
from dmlr.datasets import make_multilabel
from dmlr.errors import DmlrInputError, NotADmlrStoreError


def _data(n=300, d=7, l=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), (rng.random((n, l)) < 0.3).astype(np.int8)


def test_dense_round_trip_with_splits(tmp_path):
    X, Y = _data()
    write_dataset(
        tmp_path / "d.zarr",
        X,
        Y,
        chunk_rows=64,
        splits={"train": np.arange(200), "test": np.arange(200, 300)},
        label_names=list("abcd"),
    )
    ds = dmlr.open_dataset(tmp_path / "d.zarr", chunk_rows=128)
    assert (ds.n_samples, ds.n_features, ds.n_labels) == (300, 7, 4)
    assert ds.X.chunks[0] == ds.Y.chunks[0] == (128, 128, 44) and len(ds.X.chunks[1]) == 1
    np.testing.assert_array_equal(ds.X.compute(), X)
    np.testing.assert_array_equal(ds.Y.compute(), Y)
    Xt, Yt = ds.arrays("test")
    np.testing.assert_array_equal(Xt.compute(), X[200:])
    assert ds.label_names == list("abcd")
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="r")
    assert g["X"].chunks == (64, 7) and g["Y"].dtype == np.int8
    with pytest.raises(KeyError, match="unknown split 'valid'"):
        ds.arrays("valid")
    with pytest.raises(ValueError, match="multiple"):
        dmlr.open_dataset(tmp_path / "d.zarr", chunk_rows=100)


def test_sparse_round_trip_reads_contiguous_row_blocks(tmp_path):
    _, Y = _data()
    X = sp.random(300, 50, density=0.05, format="csr", random_state=1)
    write_dataset(tmp_path / "s.zarr", X, Y, chunk_rows=64)
    ds = dmlr.open_dataset(tmp_path / "s.zarr")
    assert ds.is_sparse and type(ds.X._meta).__name__ == "GCXS"
    np.testing.assert_array_equal(ds.X.compute().todense(), X.toarray())
    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    assert g["X"].attrs["encoding-type"] == "csr_matrix" and g["X"]["indptr"].shape == (301,)


def test_opening_and_fitting_a_sparse_store_compiles_none_of_pydata_sparse(tmp_path):
    """pydata sparse JIT-compiles its GCXS indexing and elementwise code on first use (seconds
    per process): opening a sparse store and fitting on it (max-abs scaling, rows cut into
    blocks off the chunk boundaries) must do neither, on the client or in its threads."""
    import subprocess
    import sys

    _, Y = _data()
    X = sp.random(300, 50, density=0.05, format="csr", random_state=1)
    write_dataset(tmp_path / "s.zarr", X, Y, chunk_rows=64)  # 5 chunks: blocks cut through them
    code = """
import sys
import numba, sparse, dmlr
ds = dmlr.open_dataset(sys.argv[1])
dmlr.fit(ds, "rbrl", alpha=1.0, max_iter=5)
compiled = sorted(
    {
        n
        for m, mod in list(sys.modules.items())
        if m.startswith("sparse") and mod is not None
        for n, f in vars(mod).items()
        if isinstance(f, numba.core.dispatcher.Dispatcher) and f.signatures
    }
    - {"_validate_gcxs_arrays"}  # GCXS's constructor checks its arrays (once per process)
)
print("compiled:", compiled)
"""
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s.zarr")], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert "compiled: []" in out.stdout, out.stdout


@pytest.mark.parametrize("sparse_x", [False, True])
def test_chunk_rows_selects_within_each_chunk(tmp_path, sparse_x):
    """chunk_rows(A, idx) == A[idx], each output chunk cut from one input chunk (whole chunks as
    they are), for dense and GCXS chunks and for ranges, masks and the empty selection."""
    from dmlr.data.arrays import chunk_rows

    X, Y = _data()
    if sparse_x:
        X = sp.random(300, 50, density=0.05, format="csr", random_state=1)
    write_dataset(tmp_path / "s.zarr", X, Y, chunk_rows=64)
    ds = dmlr.open_dataset(tmp_path / "s.zarr")
    dense = X.toarray() if sparse_x else X
    rng = np.random.default_rng(0)
    cases = {
        "range across chunks": np.arange(50, 200),
        "one whole chunk and a piece": np.arange(64, 140),
        "mask": np.sort(rng.choice(300, size=120, replace=False)),
        "all": np.arange(300),
    }
    for name, idx in cases.items():
        part = chunk_rows(ds.X, idx)
        got = part.compute()
        got = got.todense() if sparse_x else got
        np.testing.assert_array_equal(got, dense[idx], err_msg=name)
        np.testing.assert_array_equal(chunk_rows(ds.Y, idx).compute(), Y[idx], err_msg=name)
        per_chunk = np.bincount(idx // 64, minlength=5)
        assert part.chunks[0] == tuple(int(c) for c in per_chunk if c), name
    assert chunk_rows(ds.X, np.array([], dtype=np.int64)).shape == (0, X.shape[1])


def test_writer_streams_and_fails_cleanly(tmp_path):
    X, Y = _data()
    Xbad = X.copy()
    Xbad[123, 4] = np.inf
    with pytest.raises(DmlrInputError, match="row 123: feature value is NaN or infinite"):
        write_dataset(tmp_path / "bad.zarr", Xbad, Y, chunk_rows=64)
    Ybad = Y.astype(int)
    Ybad[77, 1] = 2
    with pytest.raises(DmlrInputError, match="row 77: label 1 has value 2"):
        write_dataset(tmp_path / "bad.zarr", X, Ybad, chunk_rows=64)
    with pytest.raises(DmlrInputError, match="300 rows but Y has 299"):
        write_dataset(tmp_path / "bad.zarr", X, Y[:-1])
    assert list(tmp_path.iterdir()) == []  # nothing half-written left behind


def test_overwrite_keeps_old_store_until_new_one_is_complete(tmp_path):
    X, Y = _data()
    write_dataset(tmp_path / "d.zarr", X, Y)
    with pytest.raises(FileExistsError):
        write_dataset(tmp_path / "d.zarr", X, Y)
    Xbad = X.copy()
    Xbad[-1, 0] = np.nan
    with pytest.raises(DmlrInputError):
        write_dataset(tmp_path / "d.zarr", Xbad, Y, overwrite=True)
    np.testing.assert_array_equal(dmlr.open_dataset(tmp_path / "d.zarr").X.compute(), X)
    write_dataset(tmp_path / "d.zarr", X[:10], Y[:10], overwrite=True)
    assert dmlr.open_dataset(tmp_path / "d.zarr").n_samples == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.zarr"]


def test_not_a_dmlr_store_and_inconsistent_rows(tmp_path):
    zarr.open_group(str(tmp_path / "other.zarr"), mode="w").attrs["x"] = 1
    with pytest.raises(NotADmlrStoreError, match="not a dmlr data set"):
        dmlr.open_dataset(tmp_path / "other.zarr")
    with pytest.raises(FileNotFoundError):
        dmlr.open_dataset(tmp_path / "missing.zarr")
    X, Y = _data()
    write_dataset(tmp_path / "d.zarr", X, Y, chunk_rows=64)
    g = zarr.open_group(str(tmp_path / "d.zarr"), mode="r+")
    g["X"].resize((250, 7))
    with pytest.raises(NotADmlrStoreError, match="row counts differ"):
        dmlr.open_dataset(tmp_path / "d.zarr")


def test_writer_rejects_bad_blocks(tmp_path):
    with StoreWriter(tmp_path / "w.zarr", 3, 2, chunk_rows=4) as w:
        with pytest.raises(DmlrInputError, match="expected"):
            w.append(np.zeros((2, 4)), np.zeros((2, 2)))
        w.append(np.zeros((5, 3)), np.ones((5, 2)))
    assert dmlr.open_dataset(tmp_path / "w.zarr").n_samples == 5


def test_synthetic_presets_and_seed_reproducibility(tmp_path):
    a = make_multilabel(
        tmp_path / "a.zarr", n_samples=5000, n_features=20, n_labels=9, cardinality=2.5, chunk_rows=256, seed=7
    )
    b = make_multilabel(
        tmp_path / "b.zarr", n_samples=5000, n_features=20, n_labels=9, cardinality=2.5, chunk_rows=1024, seed=7
    )
    da_, db_ = dmlr.open_dataset(a), dmlr.open_dataset(b)
    np.testing.assert_array_equal(da_.X.compute(), db_.X.compute())
    np.testing.assert_array_equal(da_.Y.compute(), db_.Y.compute())
    np.testing.assert_array_equal(da_.splits["test"], db_.splits["test"])
    assert abs(da_.Y.sum(axis=1).mean().compute() - 2.5) < 0.15
    c = make_multilabel(tmp_path / "c.zarr", n_samples=300, n_features=20, n_labels=9, seed=8)
    assert not np.array_equal(dmlr.open_dataset(c).Y.compute(), da_.Y[:300].compute())
    s = make_multilabel(
        tmp_path / "s.zarr", n_samples=500, n_features=300, n_labels=9, sparse=True, density=0.02, seed=1
    )
    ds = dmlr.open_dataset(s)
    nnz = ds.X.compute().nnz
    assert ds.is_sparse and 0.01 < nnz / (500 * 300) < 0.03


@pytest.mark.slow
def test_presets_have_the_real_sets_shapes(tmp_path):
    m = dmlr.open_dataset(make_multilabel(tmp_path / "m.zarr", preset="mediamill"))
    assert (m.n_samples, m.n_features, m.n_labels) == (43907, 120, 101) and not m.is_sparse
    assert abs(float(m.Y.sum(axis=1).mean().compute()) - 4.376) < 0.05
    b = dmlr.open_dataset(make_multilabel(tmp_path / "b.zarr", preset="bookmarks"))
    assert (b.n_samples, b.n_features, b.n_labels) == (87856, 2150, 208) and b.is_sparse
    assert abs(float(b.Y.sum(axis=1).mean().compute()) - 2.028) < 0.05


def test_synthetic_store_generates_the_seed0_preset_once(tmp_path, small_presets):
    from dmlr.datasets import synthetic_store

    first = synthetic_store("bookmarks", tmp_path)
    Y = dmlr.open_dataset(first).Y.compute()
    again = synthetic_store("bookmarks", tmp_path)
    assert first == again == tmp_path / "bookmarks_synthetic_seed0.zarr"
    assert small_presets == [("bookmarks", 0)]  # the second call reuses the store
    np.testing.assert_array_equal(dmlr.open_dataset(again).Y.compute(), Y)
    assert dmlr.open_dataset(first).is_sparse


def test_a_data_file_given_for_a_store_or_a_model_says_what_to_do(tmp_path):
    import dmlr

    csv = tmp_path / "data.csv"
    csv.write_text("a,b,label\n1,2,0\n")
    with pytest.raises(NotADmlrStoreError, match="convert it first") as excinfo:
        dmlr.fit(csv)
    assert "dmlr convert" in str(excinfo.value)
    pickled = tmp_path / "model.npy"
    np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DmlrInputError, match="not a dmlr model file") as excinfo:
        dmlr.load(pickled)
    assert "allow_pickle" not in str(excinfo.value) and "never loads" in str(excinfo.value)


def test_a_later_process_loads_pydata_sparse_s_chunk_check_from_numba_s_cache(two_fresh_processes):
    """Every GCXS chunk runs pydata sparse's Numba-compiled check of its arrays, which pydata
    sparse does not cache: dmlr turns Numba's disk cache on for it, so the first process compiles
    it (once per dtype combination) and later ones (the workers, the next session) load it."""
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, scipy.sparse as sp
        from dmlr.data.arrays import gcxs_from_csr, gcxs_meta
        gcxs_meta(np.float64)
        gcxs_from_csr(sp.random(6, 4, density=0.5, format="csr", dtype=np.float32, random_state=0))
        from sparse.numba_backend._compressed.compressed import _validate_gcxs_arrays as check
        print(sum(check.stats.cache_misses.values()), sum(check.stats.cache_hits.values()))
    """)
    first, later = (tuple(map(int, out.split())) for out in two_fresh_processes(code, timeout=300))
    assert first == (2, 0)  # (compiled, loaded): the meta's dtypes and the chunk's
    assert later == (0, 2)


def test_chunks_of_every_kind_reach_scipy_with_their_values_and_dtype():
    """``to_scipy`` turns a pydata sparse chunk into scipy and leaves numpy and scipy as they are;
    ``as_csr`` gives CSR of the same values and dtype from either sparse kind."""
    from dmlr.data.arrays import as_csr, gcxs_from_csr, is_sparse, to_scipy

    m = sp.random(6, 4, density=0.5, format="csr", dtype=np.float32, random_state=0)
    dense = m.toarray()
    g = gcxs_from_csr(m)
    assert sp.issparse(to_scipy(g)) and is_sparse(g)
    np.testing.assert_array_equal(to_scipy(g).toarray(), dense)
    assert to_scipy(m) is m and to_scipy(dense) is dense and not is_sparse(dense)
    for x in (m, g, sp.coo_matrix(m)):
        c = as_csr(x)
        assert c.format == "csr" and c.dtype == np.float32
        np.testing.assert_array_equal(c.toarray(), dense)
