"""Approximate kernel features as a scikit-learn transformer, for a Pipeline before a linear model.

``make_pipeline(KernelFeatures("rbf", n_components=1024), RBRL())`` is the
approximate kernel RBRL: the map (:mod:`dmlr.kernels.approx`) turns the
kernel problem into a linear one of dimension ``n_components``, which the
linear model solves chunk by chunk.

dmlr keeps its own transformer rather than scikit-learn's ``Nystroem`` /
``RBFSampler`` because those validate (hence compute into memory) a dask
input in ``transform``; this one maps each row chunk where it lives (dask in,
dask out) and reads only the landmark rows at ``fit``. The Nystroem map
equals scikit-learn's on the same landmarks (tests/test_kernel_approx.py).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from dmlr.kernels.approx import APPROXIMATIONS, KernelFeatureMap, fourier_features, nystroem_features
from dmlr.kernels.gram import KERNELS, KernelSpec
from dmlr.models.base import SCALING, SEED, store_params
from dmlr.preprocessing import fit_scaling_of, scaled_by
from dmlr.validation import check_X


class KernelFeatures(TransformerMixin, BaseEstimator):
    """Nystroem or random Fourier features of a kernel, float64 (n, n_components).

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly"}
    n_components : int
        D, the number of features (Nystroem: landmark rows sampled from the
        training set, at most its number of rows).
    method : {"nystroem", "fourier"}
        "nystroem" (Williams & Seeger 2001; any kernel) or "fourier" (random
        Fourier features, Rahimi & Recht 2007; RBF only).
    gamma : float, optional
        Kernel coefficient (RBF, poly); default 1 / n_features.
    degree, coef0 : int, float
        Polynomial kernel (gamma x.y + coef0) ** degree.
    random_state : int or None
        Seed of the landmark sample / random features.
    scaling : {"auto", "standard", "maxabs", "tfidf"} or None
        Feature scaling fitted on the rows ``fit`` sees and applied before
        the map (:mod:`dmlr.preprocessing`, as the estimators' own
        ``scaling``): an RBF kernel compares distances, which unscaled
        columns of different ranges would dominate.

    Attributes
    ----------
    landmarks_, projection_ : float64 (D, d), (D, D)
        "nystroem": landmark rows and K_mm^{-1/2}.
    projection_, offset_ : float64 (d, D), (D,)
        "fourier": Omega and b.
    gamma_ : float
    n_features_in_ : int
    scaling_ : str or None
        The scaling applied ("auto" resolved by the storage of X).
    feature_offset_, feature_scale_ : float64 (d,)
        Its statistics (when ``scaling_`` is not None).
    """

    _parameter_constraints = {
        "kernel": [StrOptions(set(KERNELS))],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "method": [StrOptions(set(APPROXIMATIONS))],
        "gamma": [Interval(Real, 0, None, closed="neither"), None],
        "degree": [Interval(Integral, 1, None, closed="left")],
        "coef0": [Real],
        "random_state": SEED,
        "scaling": SCALING,
    }

    def __init__(
        self,
        kernel="rbf",
        n_components=256,
        *,
        method="nystroem",
        gamma=None,
        degree=3,
        coef0=1.0,
        random_state=0,
        scaling="auto",
    ):
        store_params(self, locals())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def fit(self, X, y=None):
        """Sample the landmarks (Nystroem) or draw the random features (Fourier). Returns self."""
        self._validate_params()
        X = check_X(self, X, reset=True)
        X = fit_scaling_of(self, X)
        spec = KernelSpec.resolve(self.kernel, self.gamma, self.degree, self.coef0, X.shape[1])
        if self.method == "nystroem":
            fmap = nystroem_features(X, spec, int(self.n_components), self.random_state)
            self.landmarks_ = fmap.landmarks
        else:
            fmap = fourier_features(X.shape[1], spec, int(self.n_components), self.random_state)
            self.offset_ = fmap.offset
        self.projection_ = fmap.projection
        self.gamma_ = spec.gamma
        return self

    def transform(self, X):
        """Features of the rows of X: float64 (m, D), or a dask array with X's row chunks."""
        check_is_fitted(self, "projection_")
        X = check_X(self, X, reset=False)
        return self._map().transform(scaled_by(self, X))

    def _map(self) -> KernelFeatureMap:
        spec = KernelSpec.resolve(self.kernel, self.gamma_, self.degree, self.coef0, self.n_features_in_)
        if self.method == "nystroem":
            return KernelFeatureMap("nystroem", spec, self.landmarks_, self.projection_)
        return KernelFeatureMap("fourier", spec, None, self.projection_, self.offset_)

    def get_feature_names_out(self, input_features=None):
        """``kernelfeatures0`` ... ``kernelfeatures{D-1}``."""
        check_is_fitted(self, "projection_")
        return np.asarray([f"kernelfeatures{i}" for i in range(self.projection_.shape[1])], dtype=object)
