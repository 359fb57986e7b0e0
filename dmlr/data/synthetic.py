"""Synthetic multi-label sets with low-rank label correlations, written to Zarr.

Generative model (per row i, latent dimension r)::

    z_i ~ N(0, I_r)
    dense X:   x_i = z_i A + noise * e_i,            A (r, d), e_i ~ N(0, I_d)
    sparse X:  the ``nnz_i ~ 1 + Poisson(density * d - 1)`` columns with the largest
               z_i A + gumbel noise are 1 (a bag of words whose words depend on z_i)
    labels:    y_ij = [z_i B_j + label_noise * u_ij > t_j],  B (r, l), u_ij ~ N(0, 1)

All labels depend on the same r latent factors, so the label matrix has
low-rank correlations and the labels are learnable from X (through z). The
thresholds t_j give label frequencies that decay like a power law (as in the
real sets) and sum to the requested cardinality in expectation.

Rows are generated in fixed blocks of ``GENERATION_BLOCK`` rows, each from
its own child of ``numpy.random.SeedSequence(seed)``, so the data depend on
the seed only, not on the storage chunk size, and the writer streams: memory
stays at one block whatever the number of rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.special import ndtri

from dmlr.data.store import StoreWriter

GENERATION_BLOCK = 4096

#: Shapes of the real scale sets (the full Mediamill and Bookmarks are not staged).
PRESETS = {
    "mediamill": dict(n_samples=43907, n_features=120, n_labels=101, cardinality=4.376, sparse=False),
    "bookmarks": dict(n_samples=87856, n_features=2150, n_labels=208, cardinality=2.028, sparse=True, density=0.01),
}


def _label_frequencies(n_labels: int, cardinality: float, decay: float = 1.0) -> np.ndarray:
    """Power-law label frequencies summing to ``cardinality``, each in (0, 0.95]."""
    if not 0 < cardinality < 0.95 * n_labels:
        raise ValueError(f"cardinality must be in (0, {0.95 * n_labels:g}) for {n_labels} labels, got {cardinality}")
    w = 1.0 / np.arange(1, n_labels + 1) ** decay
    p = cardinality * w / w.sum()
    for _ in range(100):  # cap at 0.95 and redistribute the excess
        over = p > 0.95
        if not over.any():
            break
        excess = (p[over] - 0.95).sum()
        p[over] = 0.95
        p[~over] += excess * p[~over] / p[~over].sum()
    return p


def make_multilabel(
    dst,
    *,
    preset: str | None = None,
    n_samples: int = 10000,
    n_features: int = 100,
    n_labels: int = 20,
    cardinality: float = 2.0,
    sparse: bool = False,
    density: float = 0.01,
    rank: int = 10,
    noise: float = 1.0,
    label_noise: float = 0.5,
    test_fraction: float = 0.3,
    dtype: str = "float32",
    chunk_rows: int | None = None,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Generate a synthetic multi-label set into a dmlr Zarr store.

    Parameters
    ----------
    dst : str or Path
        Destination store.
    preset : {"mediamill", "bookmarks"}, optional
        Use the shape, cardinality and sparsity of that real set (overrides
        n_samples, n_features, n_labels, cardinality, sparse, density).
    n_samples, n_features, n_labels : int
    cardinality : float
        Expected number of relevant labels per row.
    sparse : bool
        Binary bag-of-words X stored as CSR.
    density : float
        Expected fraction of non-zero features per row (sparse only).
    rank : int
        Latent dimension shared by features and labels.
    noise, label_noise : float
        Standard deviations of the feature and label noise.
    test_fraction : float
        Fraction of rows in the ``"test"`` split (the rest is ``"train"``),
        drawn at random with the seed.
    dtype : str
        Float dtype of X.
    chunk_rows : int, optional
        Stored rows per chunk.
    seed : int
        The data depend on this seed only.
    overwrite : bool

    Returns
    -------
    Path
        ``dst``.
    """
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; known: {sorted(PRESETS)}")
        cfg = PRESETS[preset]
        n_samples, n_features, n_labels = cfg["n_samples"], cfg["n_features"], cfg["n_labels"]
        cardinality, sparse = cfg["cardinality"], cfg["sparse"]
        density = cfg.get("density", density)
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
    root = np.random.SeedSequence(seed)
    model_seq, split_seq, blocks_seq = root.spawn(3)
    rng = np.random.default_rng(model_seq)
    A = rng.normal(size=(rank, n_features)) / np.sqrt(rank)
    B = rng.normal(size=(rank, n_labels)) / np.sqrt(rank)
    label_sd = np.sqrt((B**2).sum(axis=0) + label_noise**2)
    freq = rng.permutation(_label_frequencies(n_labels, cardinality))
    thresholds = label_sd * ndtri(1.0 - freq)
    n_blocks = -(-n_samples // GENERATION_BLOCK)
    block_seqs = blocks_seq.spawn(n_blocks)
    source = (
        f"dmlr.datasets.make_multilabel(preset={preset!r}, n_samples={n_samples}, n_features={n_features}, "
        f"n_labels={n_labels}, cardinality={cardinality}, sparse={sparse}, density={density}, rank={rank}, "
        f"noise={noise}, label_noise={label_noise}, seed={seed})"
    )
    with StoreWriter(
        dst,
        n_features,
        n_labels,
        sparse=sparse,
        dtype=dtype,
        chunk_rows=chunk_rows,
        label_names=[f"label_{j}" for j in range(n_labels)],
        source=source,
        overwrite=overwrite,
    ) as w:
        for b in range(n_blocks):
            m = min(GENERATION_BLOCK, n_samples - b * GENERATION_BLOCK)
            brng = np.random.default_rng(block_seqs[b])
            Z = brng.normal(size=(m, rank))
            Y = (Z @ B + label_noise * brng.normal(size=(m, n_labels)) > thresholds).astype(np.int8)
            if sparse:
                X = _bag_of_words(Z @ A, density, brng)
            else:
                X = (Z @ A + noise * brng.normal(size=(m, n_features))).astype(dtype)
            w.append(X, Y)
        test = np.random.default_rng(split_seq).random(n_samples) < test_fraction
        w.add_split("train", np.flatnonzero(~test))
        if test.any():
            w.add_split("test", np.flatnonzero(test))
    return Path(dst)


def _bag_of_words(logits: np.ndarray, density: float, rng) -> sp.csr_matrix:
    """Binary rows whose ~density*d words are the top (logit + Gumbel) columns."""
    m, d = logits.shape
    nnz = np.minimum(1 + rng.poisson(max(density * d - 1.0, 0.0), size=m), d)
    keys = logits + rng.gumbel(size=(m, d))
    k = int(nnz.max())
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k] if k < d else np.tile(np.arange(d), (m, 1))
    order = np.take_along_axis(top, np.argsort(-np.take_along_axis(keys, top, axis=1), axis=1), axis=1)
    mask = np.arange(k)[None, :] < nnz[:, None]
    rows = np.repeat(np.arange(m), nnz)
    cols = order[mask]
    X = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(m, d))
    X.sort_indices()
    return X
