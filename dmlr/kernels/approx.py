"""Approximate kernel features, for training sets whose n x n kernel does not fit.

The exact kernel RBRL (eq. 12 of Wu et al. 2020) needs the whole n x n Gram
matrix K (one row block per worker, but n x n floats in all). Here an
explicit map ``z: R^d -> R^D`` with ``z(a) . z(b) ~= k(a, b)`` turns the
kernel problem into a linear one of dimension D, which the LINEAR RBRL path
(eq. 8) solves chunk by chunk like any other feature matrix.

* :func:`nystroem_features` (Williams & Seeger 2001): D landmark rows sampled
  uniformly without replacement from the training set,
  ``z(x) = k(x, landmarks) K_mm^{-1/2}`` with ``K_mm = k(landmarks, landmarks)``.
  With D = n it reproduces K exactly (``Z Z^T = K``, up to the eigenvalue
  floor). Any kernel.
* :func:`fourier_features` (Rahimi & Recht 2007): random Fourier features of
  the RBF kernel, ``z(x) = sqrt(2/D) cos(x Omega + b)`` with
  ``Omega ~ N(0, 2 gamma)`` (d x D) and ``b ~ U(0, 2 pi)``; ``E[z(a) . z(b)]
  = exp(-gamma ||a - b||^2)``, error O(1/sqrt(D)). Does not look at the data.

Both return a :class:`KernelFeatureMap`, whose :meth:`~KernelFeatureMap.transform`
accepts numpy, scipy.sparse or dask arrays (dask in, dask out, row chunks
kept). The map is a few arrays (the landmarks and the D x D projection, or
Omega and b), saved with the model by :class:`dmlr.models.RBRL`.

Note that RBRL on the features is not the same optimization problem as the
exact kernel model even when ``Z Z^T = K``: the linear model regularizes W
(``||W||_F^2``), the kernel model A with ``tr(A^T K A)``, and its nuclear
norm and intercept act on different matrices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dmlr.data.arrays import as_matrix, is_dask
from dmlr.kernels.gram import KernelSpec, kernel_matrix, row_sq_norms

#: ``method`` values of :class:`KernelFeatureMap` (the estimator's ``kernel_approximation``).
APPROXIMATIONS = ("nystroem", "fourier")
#: Absolute floor on the eigenvalues of K_mm before the inverse square root
#: (scikit-learn's Nystroem uses the same 1e-12 on its singular values) ...
EIGEN_FLOOR = 1e-12
#: ... raised to ``EIGEN_REL_FLOOR * D * max eigenvalue`` when that is larger,
#: the rounding level of eigh on K_mm, so kernels with large values (linear,
#: poly on unscaled data) do not amplify rounding noise by 1/sqrt(1e-12).
EIGEN_REL_FLOOR = np.finfo(np.float64).eps


@dataclass(frozen=True, eq=False)
class KernelFeatureMap:
    """An explicit approximate kernel feature map ``z: R^d -> R^D``.

    Attributes
    ----------
    method : {"nystroem", "fourier"}
    spec : KernelSpec
        The approximated kernel (gamma resolved).
    landmarks : float64 (D, d) or None
        Nystroem: the sampled training rows (dense).
    projection : float64 (D, D) or (d, D)
        Nystroem: ``K_mm^{-1/2}`` (symmetric). Fourier: Omega.
    offset : float64 (D,) or None
        Fourier: the phases b.
    """

    method: str
    spec: KernelSpec
    landmarks: np.ndarray | None
    projection: np.ndarray
    offset: np.ndarray | None = None

    def __post_init__(self):
        if self.method not in APPROXIMATIONS:
            raise ValueError(f"method must be one of {APPROXIMATIONS}, got {self.method!r}")
        if self.method == "nystroem" and self.landmarks is None:
            raise ValueError("a Nystroem map needs its landmarks")
        if self.method == "fourier" and self.offset is None:
            raise ValueError("a Fourier map needs its offsets")

    @property
    def n_components(self) -> int:
        """D, the number of output features."""
        return int(self.projection.shape[1])

    @property
    def n_features_in(self) -> int:
        """d, the number of input features."""
        return int(self.landmarks.shape[1] if self.method == "nystroem" else self.projection.shape[0])

    def transform(self, X):
        """Features of the rows of X.

        Parameters
        ----------
        X : ndarray, scipy.sparse matrix or dask array (m, d)

        Returns
        -------
        float64 ndarray (m, D), or a dask array (m, D) with the row chunks of
        X (its columns are first rechunked to one chunk) for dask input.
        """
        if X.shape[-1] != self.n_features_in:
            raise ValueError(f"X has {X.shape[-1]} features, the feature map expects {self.n_features_in}")
        if is_dask(X):
            if len(X.chunks[1]) > 1:
                X = X.rechunk({1: -1})
            return X.map_blocks(
                self._transform_block,
                dtype=np.float64,
                chunks=(X.chunks[0], (self.n_components,)),
                meta=np.empty((0, 0), dtype=np.float64),
            )
        return self._transform_block(X)

    def _transform_block(self, X) -> np.ndarray:
        X = as_matrix(X)
        if self.method == "nystroem":
            K = kernel_matrix(X, self.landmarks, self.spec)
            return K @ self.projection
        Z = X @ self.projection
        Z = Z.toarray() if sp.issparse(Z) else np.asarray(Z)
        Z += self.offset
        np.cos(Z, out=Z)
        Z *= np.sqrt(2.0 / self.n_components)
        return Z


def _take_rows(chunk, local_idx):
    return as_matrix(chunk)[local_idx]


def gather_rows(X, idx) -> np.ndarray | sp.csr_matrix:
    """Rows ``idx`` (sorted, unique) of X as float64 dense or CSR, in that order.

    For a dask array only the chunks holding those rows are read, and only
    the selected rows travel back (chunk by chunk, without dask's fancy
    indexing, which is slow on pydata-sparse chunks).
    """
    idx = np.asarray(idx, dtype=np.int64)
    if not is_dask(X):
        return as_matrix(X[idx] if not sp.issparse(X) else sp.csr_matrix(X)[idx])
    import dask

    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    edges = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    parts = []
    for i, chunk in enumerate(X.to_delayed().ravel()):
        lo, hi = np.searchsorted(idx, [edges[i], edges[i + 1]])
        if hi > lo:
            parts.append(dask.delayed(_take_rows)(chunk, idx[lo:hi] - edges[i]))
    rows = dask.compute(*parts)
    if sp.issparse(rows[0]):
        return sp.vstack(rows, format="csr")
    return np.concatenate(rows, axis=0)


def _check_components(n_components) -> int:
    if not (isinstance(n_components, (int, np.integer)) and not isinstance(n_components, bool) and n_components >= 1):
        raise ValueError(f"n_components must be a positive integer, got {n_components!r}")
    return int(n_components)


def inverse_sqrt_psd(K: np.ndarray) -> np.ndarray:
    """``K^{-1/2}`` of a symmetric PSD matrix by eigh, eigenvalues clipped at the floor."""
    K = 0.5 * (K + K.T)
    w, V = np.linalg.eigh(K)
    floor = max(EIGEN_FLOOR, EIGEN_REL_FLOOR * K.shape[0] * float(max(w[-1], 0.0)))
    w = np.maximum(w, floor)
    return (V / np.sqrt(w)) @ V.T


def nystroem_features(X, spec: KernelSpec, n_components: int, seed=0, reuse=None) -> KernelFeatureMap:
    """Fit a Nystroem map on the rows of X.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix or dask array (n, d)
        Training rows; for a dask array only the landmark rows are read into
        this process.
    spec : KernelSpec
    n_components : int
        D, the number of landmarks, at most n.
    seed : int or None
        Seed of :func:`numpy.random.default_rng`. Landmark indices are drawn
        from ``range(n)``, so they do not depend on X's chunking.
    reuse : KernelFeatureMap, optional
        A map returned before: when its kernel and landmark rows are these,
        it is returned as is, without forming and inverting K_mm again (the
        costly part, O(D^3)), as along a regularization path on one fold.

    Returns
    -------
    KernelFeatureMap
        ``method="nystroem"``; landmarks dense float64 in increasing row order.
    """
    D = _check_components(n_components)
    n = int(X.shape[0])
    if D > n:
        raise ValueError(
            f"n_components={D} exceeds the number of training rows ({n}); Nystroem samples that many distinct rows"
        )
    idx = np.sort(np.random.default_rng(seed).choice(n, size=D, replace=False))
    landmarks = gather_rows(X, idx)
    landmarks = landmarks.toarray() if sp.issparse(landmarks) else np.ascontiguousarray(landmarks)
    if reuse is not None and reuse.spec == spec and np.array_equal(reuse.landmarks, landmarks):
        return reuse
    K_mm = kernel_matrix(landmarks, landmarks, spec, B_sq_norms=row_sq_norms(landmarks))
    return KernelFeatureMap(method="nystroem", spec=spec, landmarks=landmarks, projection=inverse_sqrt_psd(K_mm))


def fourier_features(n_features: int, spec: KernelSpec, n_components: int, seed=0) -> KernelFeatureMap:
    """Random Fourier features of the RBF kernel ``exp(-gamma ||a - b||^2)``.

    Parameters
    ----------
    n_features : int
        d, the input dimension.
    spec : KernelSpec
        Must be RBF.
    n_components : int
        D, the number of random features.
    seed : int or None
        Seed of :func:`numpy.random.default_rng` (Omega drawn first, then b).

    Returns
    -------
    KernelFeatureMap
        ``method="fourier"``, projection Omega (d, D) ~ N(0, 2 gamma), offset
        b (D,) ~ U(0, 2 pi).
    """
    if spec.name != "rbf":
        raise ValueError(
            f"random Fourier features approximate the RBF kernel only, not {spec.name!r}; "
            "use the Nystroem approximation"
        )
    D = _check_components(n_components)
    d = int(n_features)
    if d < 1:
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
    rng = np.random.default_rng(seed)
    omega = rng.normal(0.0, np.sqrt(2.0 * spec.gamma), size=(d, D))
    offset = rng.uniform(0.0, 2.0 * np.pi, size=D)
    return KernelFeatureMap(method="fourier", spec=spec, landmarks=None, projection=omega, offset=offset)
