"""
Cross-validated grid search with warm-started paths
===================================================

:func:`dmlr.model_selection.grid_search_cv` evaluates a grid on K folds; the unit of work
is one fold and one regularization path along ``alpha_nuclear``, fitted with warm starts.
Without a Dask client it runs in this process. Here: a 2 x 4 grid on 3 folds of a small
synthetic set, scored by the ranking loss, and the validation loss of every grid point.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_multilabel_classification

from dmlr.model_selection import grid_search_cv
from dmlr.models import RBRL

X, Y = make_multilabel_classification(n_samples=240, n_features=10, n_classes=5, n_labels=2, random_state=2)
grid = {"alpha": [0.1, 1.0], "alpha_nuclear": [0.01, 0.1, 1.0, 10.0]}
search = grid_search_cv(
    RBRL(alpha_rank=0.01, solver="spectral", max_iter=200, tol=1e-4),
    X,
    Y,
    grid,
    cv=3,
    scoring="ranking_loss",
    client="local",
    refit=False,
)
print("best:", search.best_params, f"ranking loss {search.best_score:.4f}")

# %%
# The mean validation ranking loss of every grid point, one line per ``alpha``.
fig, ax = plt.subplots(figsize=(5, 3))
for alpha in grid["alpha"]:
    points = [(r["params"]["alpha_nuclear"], r["mean_score"]) for r in search.results if r["params"]["alpha"] == alpha]
    points.sort()
    ax.semilogx(*np.array(points).T, marker="o", label=f"alpha={alpha:g}")
ax.set(xlabel="alpha_nuclear", ylabel="validation ranking loss", title="3-fold cross-validation")
ax.legend()
fig.tight_layout()
