"""Feature scaling inside the model: statistics over the chunks, applied at predict, saved in the file."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

import dmlr
from dmlr.errors import DmlrInputError
from dmlr.models import OMF, RBRL, RankSVM
from dmlr.preprocessing import apply_scaling, fit_scaling


def _data(n=240, d=6, l=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * np.array([1e3, 1.0, 1e-3, 5.0, 1.0, 1.0]) + np.array([50.0, -2.0, 0, 1, 0, 7])
    X[:, 5] = 7.0  # a constant column
    Y = (X[:, :l] / X[:, :l].std(axis=0) + rng.normal(size=(n, l)) > 0.3).astype(np.int8)
    return X, Y


def test_statistics_equal_numpys_on_the_full_matrix_whatever_the_chunks():
    X, _ = _data()
    offset, scale = fit_scaling(X, "standard")
    std = X.std(axis=0)
    np.testing.assert_allclose(offset, X.mean(axis=0), rtol=1e-7)
    np.testing.assert_allclose(scale[:5], std[:5], rtol=1e-7)
    assert scale[5] == 1.0  # constant column: left unscaled
    for chunks in (17, 64, 240):
        o, s = fit_scaling(da.from_array(X.astype(np.float32), chunks=(chunks, -1)), "standard")
        o64, s64 = fit_scaling(X.astype(np.float32).astype(np.float64), "standard")
        np.testing.assert_array_equal(o, o64)  # rounded: the same bits, any chunking
        np.testing.assert_array_equal(s, s64)
    Xs = np.where(np.abs(X) > 3, X, 0.0)
    o, s = fit_scaling(sp.csr_matrix(Xs), "maxabs")
    assert not o.any()
    np.testing.assert_allclose(s, np.where(np.abs(Xs).max(axis=0) > 0, np.abs(Xs).max(axis=0), 1.0), rtol=1e-7)
    scaled = apply_scaling(sp.csr_matrix(Xs), o, s, "maxabs")
    assert sp.issparse(scaled) and scaled.nnz == np.count_nonzero(Xs)


def test_model_scales_inside_fit_and_predict_and_the_file_keeps_it(tmp_path):
    X, Y = _data()
    model = RBRL(max_iter=200, solver="spectral").fit(X, Y)
    assert model.scaling_ == "standard"
    # the same as fitting on the standardized features without scaling
    Z = (X - model.feature_offset_) / model.feature_scale_
    plain = RBRL(max_iter=200, solver="spectral", scaling=None).fit(Z, Y)
    np.testing.assert_allclose(model.coef_, plain.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(model.decision_function(X), plain.decision_function(Z), rtol=1e-10, atol=1e-10)
    again = dmlr.load(model.save(tmp_path / "m.npz"))
    np.testing.assert_array_equal(again.decision_function(X), model.decision_function(X))
    assert again.scaling_ == "standard"
    # scaling helps an ill-scaled problem: the unscaled fit does far worse at the same budget
    raw = RBRL(max_iter=200, solver="spectral", scaling=None).fit(X, Y)
    rl = {
        name: dmlr.evaluate(m, (X, Y), metrics=["ranking_loss"])["ranking_loss"]
        for name, m in (("scaled", model), ("raw", raw))
    }
    assert rl["scaled"] < rl["raw"], rl


def test_sparse_features_stay_sparse_and_standard_is_refused():
    X, Y = _data()
    Xs = sp.csr_matrix(np.where(np.abs(X) > 3, X, 0.0))
    model = RankSVM(n_updates=2000).fit(Xs, Y)
    assert model.scaling_ == "maxabs" and not model.feature_offset_.any()
    with pytest.raises(ValueError, match="sparse"):
        RankSVM(scaling="standard").fit(Xs, Y)


def test_dask_input_gives_the_numpy_model():
    X, Y = _data()
    Xd = da.from_array(X, chunks=(50, -1))
    a = OMF(n_components=3, n_epochs=3, eta0=0.05).fit(X, Y)
    b = OMF(n_components=3, n_epochs=3, eta0=0.05).fit(Xd, da.from_array(Y, chunks=(50, -1)))
    np.testing.assert_array_equal(a.feature_scale_, b.feature_scale_)
    np.testing.assert_array_equal(a.P_, b.P_)
    np.testing.assert_allclose(b.decision_function(Xd).compute(), a.decision_function(X), rtol=1e-12)


def test_a_tampered_scale_is_refused(tmp_path):
    from tests.test_model_io import _npy, _rewrite

    X, Y = _data()
    path = RBRL(max_iter=20).fit(X, Y).save(tmp_path / "m.npz")
    _rewrite(path, **{"feature_scale_.npy": _npy(np.zeros(6))})
    with pytest.raises(DmlrInputError, match="positive"):
        dmlr.load(path)


def test_tfidf_scaling_is_scikit_learns_tfidf_whatever_the_chunks(tmp_path):
    from sklearn.feature_extraction.text import TfidfTransformer

    rng = np.random.default_rng(1)
    counts = rng.poisson(0.4, size=(120, 9)).astype(np.float64)
    counts[:, 8] = 0.0  # a word in no document
    counts[7] = 0.0  # an empty document
    expected = TfidfTransformer().fit_transform(sp.csr_matrix(counts)).toarray()
    for X in (counts, sp.csr_matrix(counts)):
        offset, scale = fit_scaling(X, "tfidf")
        got = apply_scaling(X, offset, scale, "tfidf")
        assert sp.issparse(got) == sp.issparse(X)
        np.testing.assert_allclose(got.toarray() if sp.issparse(got) else got, expected, rtol=1e-6, atol=1e-12)
    import sparse as pydata_sparse

    for chunks, kind in ((17, "scipy"), (120, "scipy"), (17, "pydata")):
        if kind == "scipy":
            source = sp.csr_matrix(counts)
        else:
            source = pydata_sparse.GCXS.from_numpy(counts, compressed_axes=(0,))
        lazy = da.from_array(source, chunks=(chunks, -1), asarray=False)
        o, s = fit_scaling(lazy, "tfidf")
        np.testing.assert_array_equal(s, fit_scaling(counts, "tfidf")[1])  # integer counts: the same bits
        got = apply_scaling(lazy, o, s, "tfidf").compute()
        got = got.toarray() if hasattr(got, "toarray") else got.todense()
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-12)
    stored_zero = sp.csr_matrix(counts)
    stored_zero.data[0] = 0.0  # an explicit zero: no document count, and the caller's matrix kept
    kept = (stored_zero.data.copy(), stored_zero.indices.copy(), stored_zero.indptr.copy())
    with_zero = counts.copy()
    with_zero[np.nonzero(counts)[0][0], np.nonzero(counts)[1][0]] = 0.0
    np.testing.assert_array_equal(fit_scaling(stored_zero, "tfidf")[1], fit_scaling(with_zero, "tfidf")[1])
    for before, after in zip(kept, (stored_zero.data, stored_zero.indices, stored_zero.indptr)):
        np.testing.assert_array_equal(before, after)
    Y = (counts[:, :3] > 0).astype(np.int8)
    model = RBRL(scaling="tfidf", max_iter=50).fit(sp.csr_matrix(counts), Y)
    plain = RBRL(scaling=None, max_iter=50).fit(sp.csr_matrix(expected), Y)
    np.testing.assert_allclose(model.coef_, plain.coef_, rtol=1e-5, atol=1e-8)
    again = dmlr.load(model.save(tmp_path / "m.npz"))
    assert again.scaling_ == "tfidf"
    np.testing.assert_array_equal(again.decision_function(counts), model.decision_function(counts))
