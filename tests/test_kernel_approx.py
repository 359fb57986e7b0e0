"""Approximate kernel features (Nystroem, random Fourier) and RBRL on them."""

import pickle
import threading

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.pipeline import make_pipeline

from dmlr.kernel_approximation import KernelFeatures
from dmlr.kernels.approx import KernelFeatureMap, fourier_features, nystroem_features
from dmlr.kernels.gram import KernelSpec, kernel_matrix
from dmlr.models import RBRL, KernelRBRL


def _data(n=60, d=5, l=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    W = rng.normal(size=(d, l))
    Y = (np.tanh(X @ W) + 0.3 * rng.normal(size=(n, l)) > 0.2).astype(np.int8)
    Y[Y.sum(axis=1) == 0, 0] = 1
    return X, Y


@pytest.mark.parametrize("kernel", ["rbf", "poly"])
def test_nystroem_with_all_rows_reproduces_the_kernel(kernel):
    X, _ = _data(n=70)
    spec = KernelSpec.resolve(kernel, None, 2, 1.0, X.shape[1])
    fmap = nystroem_features(X, spec, n_components=70, seed=3)
    Z = fmap.transform(X)
    assert isinstance(fmap, KernelFeatureMap) and fmap.method == "nystroem"
    assert Z.shape == (70, 70) and Z.dtype == np.float64
    K = kernel_matrix(X, X, spec)
    np.testing.assert_allclose(Z @ Z.T, K, rtol=0, atol=1e-8 * max(1.0, np.abs(K).max()))
    # fewer landmarks: exact on the landmark rows themselves (K_mm^{-1/2} K_mm K_mm^{-1/2} = I)
    small = nystroem_features(X, spec, n_components=10, seed=3)
    Zl = small.transform(small.landmarks)
    np.testing.assert_allclose(Zl @ Zl.T, kernel_matrix(small.landmarks, small.landmarks, spec), atol=1e-8)
    # and the landmarks are rows of X, drawn without replacement
    rows = {tuple(r) for r in X}
    assert all(tuple(r) in rows for r in small.landmarks) and len({tuple(r) for r in small.landmarks}) == 10


def test_nystroem_matches_scikit_learn_kernel_approximation():
    """Independent check: scikit-learn's Nystroem with the same landmarks gives the same Z Z^T."""
    from sklearn.kernel_approximation import Nystroem

    X, _ = _data(n=120, d=7)
    Xnew = np.random.default_rng(9).normal(size=(30, 7))
    spec = KernelSpec.resolve("rbf", 0.2, 3, 1.0, 7)
    ours = nystroem_features(X, spec, n_components=25, seed=1)
    # scikit-learn's basis = every row it is fitted on; fit it on our landmarks
    ref = Nystroem(kernel="rbf", gamma=0.2, n_components=25, random_state=0).fit(ours.landmarks)
    for A in (X, Xnew):
        Z, Zs = ours.transform(A), ref.transform(A)
        np.testing.assert_allclose(Z @ Z.T, Zs @ Zs.T, atol=1e-8)
    # and with every row as landmark both reproduce the kernel
    full = Nystroem(kernel="rbf", gamma=0.2, n_components=120, random_state=0).fit(X).transform(X)
    Z = nystroem_features(X, spec, 120, seed=0).transform(X)
    np.testing.assert_allclose(Z @ Z.T, full @ full.T, atol=1e-8)


def test_landmarks_do_not_depend_on_dask_chunking():
    X, _ = _data(n=200, d=6)
    spec = KernelSpec.resolve("rbf", None, 3, 1.0, 6)
    ref = nystroem_features(X, spec, 40, seed=5)
    feats = []
    for rows in (7, 50):
        Xd = da.from_array(X, chunks=(rows, 3))  # two column chunks as well
        fmap = nystroem_features(Xd, spec, 40, seed=5)
        np.testing.assert_array_equal(fmap.landmarks, ref.landmarks)
        np.testing.assert_array_equal(fmap.projection, ref.projection)
        Zd = fmap.transform(Xd)
        assert isinstance(Zd, da.Array) and Zd.chunks[0] == Xd.chunks[0] and Zd.chunks[1] == (40,)
        feats.append(Zd.compute())
    np.testing.assert_allclose(feats[0], feats[1], rtol=0, atol=1e-13)
    np.testing.assert_allclose(feats[0], ref.transform(X), rtol=0, atol=1e-13)
    # a different seed draws different landmarks
    assert not np.array_equal(nystroem_features(X, spec, 40, seed=6).landmarks, ref.landmarks)


def test_nystroem_reads_only_the_chunks_holding_landmarks():
    X, _ = _data(n=400, d=4)
    touched, lock = [], threading.Lock()

    def record(block, block_info=None):
        with lock:
            touched.append(block_info[0]["chunk-location"][0])
        return block

    Xd = da.from_array(X, chunks=(10, -1)).map_blocks(record, dtype=X.dtype)
    spec = KernelSpec.resolve("rbf", None, 3, 1.0, 4)
    with dask.config.set(scheduler="threads"):
        fmap = nystroem_features(Xd, spec, 5, seed=2)
    idx = np.sort(np.random.default_rng(2).choice(400, size=5, replace=False))
    np.testing.assert_array_equal(fmap.landmarks, X[idx])
    assert sorted(set(touched)) == sorted(set((idx // 10).tolist()))


def test_fourier_features_approximate_the_rbf_kernel():
    X, _ = _data(n=100, d=5)
    spec = KernelSpec.resolve("rbf", None, 3, 1.0, 5)
    K = kernel_matrix(X, X, spec)
    errs = []
    for D in (16, 256, 4096):
        fmap = fourier_features(5, spec, D, seed=0)
        assert fmap.method == "fourier" and fmap.projection.shape == (5, D) and fmap.offset.shape == (D,)
        Z = fmap.transform(X)
        errs.append(np.abs(Z @ Z.T - K).mean())
        # Monte Carlo error ~ 1/sqrt(D): measured 0.6-0.93 / sqrt(D) over seeds 0-4
        assert errs[-1] < 1.5 / np.sqrt(D), (D, errs)
    assert errs[0] > errs[1] > errs[2]
    # sparse and dask input give the same features
    Z = fourier_features(5, spec, 64, seed=1).transform(X)
    np.testing.assert_allclose(fourier_features(5, spec, 64, seed=1).transform(sp.csr_matrix(X)), Z, atol=1e-13)
    Zd = fourier_features(5, spec, 64, seed=1).transform(da.from_array(X, chunks=(30, -1)))
    np.testing.assert_allclose(Zd.compute(), Z, atol=1e-13)


def test_errors():
    X, Y = _data()
    poly = KernelSpec.resolve("poly", None, 2, 1.0, 5)
    with pytest.raises(ValueError, match="RBF"):
        fourier_features(5, poly, 32, seed=0)
    with pytest.raises(ValueError, match="RBF"):
        KernelFeatures("poly", method="fourier").fit(X)
    with pytest.raises(ValueError, match="method"):
        KernelFeatures("rbf", method="svd").fit(X)
    with pytest.raises(ValueError, match="n_components"):
        KernelFeatures("rbf", n_components=0).fit(X)
    with pytest.raises(ValueError, match="exceeds"):
        KernelFeatures("rbf", n_components=61).fit(X)
    with pytest.raises(ValueError, match="random_state"):
        KernelFeatures("rbf", random_state=-1).fit(X)
    fmap = nystroem_features(X, KernelSpec.resolve("rbf", None, 3, 1.0, 5), 10, seed=0)
    with pytest.raises(ValueError, match="features"):
        fmap.transform(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="features"):
        KernelFeatures("rbf", n_components=10).fit(X).transform(np.zeros((2, 4)))


@pytest.mark.parametrize("method", ["nystroem", "fourier"])
def test_approximate_rbrl_pipeline_pickle_and_dask_input(method):
    X, Y = _data(n=90, d=5, l=3, seed=4)
    Xtest = np.random.default_rng(5).normal(size=(25, 5))
    D = 90 if method == "nystroem" else 128

    def pipeline():
        return make_pipeline(
            KernelFeatures("rbf", n_components=D, method=method, random_state=7),
            RBRL(max_iter=150, tol=0, solver="spectral", scaling=None),
        )

    model = pipeline().fit(X, Y)
    features, rbrl = model[0], model[-1]
    assert rbrl.coef_.shape == (D + 1, 3) and features.n_features_in_ == 5 and rbrl.n_features_in_ == D
    assert features.gamma_ == pytest.approx(1 / 5)
    S = model.decision_function(Xtest)
    assert S.shape == (25, 3)
    # the scores are the linear model on the features
    np.testing.assert_allclose(S, np.hstack([features.transform(Xtest), np.ones((25, 1))]) @ rbrl.coef_, atol=1e-12)
    # estimators pickle (scikit-learn and Dask move them that way)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.decision_function(Xtest), S)
    np.testing.assert_array_equal(again.predict(Xtest), model.predict(Xtest))

    # dask input (features computed lazily, chunk by chunk) gives the same model and scores
    Xd = da.from_array(X, chunks=(17, -1))
    lazy = pipeline().fit(Xd, Y)
    np.testing.assert_allclose(lazy[-1].coef_, rbrl.coef_, rtol=1e-9, atol=1e-11)
    Sd = lazy.decision_function(da.from_array(Xtest, chunks=(10, -1)))
    assert isinstance(Sd, da.Array)
    np.testing.assert_allclose(Sd.compute(), S, rtol=1e-9, atol=1e-11)


def test_nystroem_rbrl_ranks_like_the_exact_kernel_model():
    """Not the same problem (W vs A regularized), but the same kernel: scores agree in ranking."""
    X, Y = _data(n=80, d=5, l=3, seed=2)
    Xtest = np.random.default_rng(3).normal(size=(40, 5))
    exact = KernelRBRL("rbf", max_iter=300, solver="spectral", scaling=None).fit(X, Y)
    approx = make_pipeline(
        KernelFeatures("rbf", n_components=80), RBRL(max_iter=300, solver="spectral", scaling=None)
    ).fit(X, Y)
    Se, Sa = exact.decision_function(Xtest), approx.decision_function(Xtest)
    for j in range(3):
        assert np.corrcoef(Se[:, j], Sa[:, j])[0, 1] > 0.9
