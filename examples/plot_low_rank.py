"""
The nuclear norm makes RBRL low rank
====================================

RBRL's nuclear-norm weight ``alpha_nuclear`` (lambda3 of eq. 8, Wu et al. 2020) shrinks
the singular values of the weight matrix W. This example fits RBRL along a path of
``alpha_nuclear`` values, warm-starting each fit from the previous one, and plots the
singular values of W and the held-out ranking loss: the rank falls as the weight grows, and
the ranking loss is lowest in between.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_multilabel_classification
from sklearn.model_selection import train_test_split

import dmlr
from dmlr.metrics import multilabel_metrics
from dmlr.models import RBRL

X, Y = make_multilabel_classification(n_samples=500, n_features=30, n_classes=12, n_labels=3, random_state=1)
X_train, X_test, Y_train, Y_test = train_test_split(X, Y, test_size=0.3, random_state=0)

path = [300.0, 100.0, 30.0, 10.0, 3.0, 1.0, 0.1]
# solver="spectral" also stops on the gradient mapping, so warm-started fits do not stop short.
model = RBRL(alpha=1.0, alpha_rank=0.01, warm_start=True, solver="spectral")
singular_values, ranking_loss = [], []
with dmlr.config_context(backend="local"):
    for value in path:  # from the most regularized to the least: each fit starts near its solution
        model.set_params(alpha_nuclear=value).fit(X_train, Y_train)
        singular_values.append(np.linalg.svd(model.coef_[:-1], compute_uv=False))  # without the bias row
        scores = model.decision_function(X_test)
        ranking_loss.append(multilabel_metrics(Y_test, scores, model.predict(X_test))["ranking_loss"])

for value, s, rl in zip(path, singular_values, ranking_loss):
    print(f"alpha_nuclear={value:<5g} rank(W)={int((s > 1e-6 * s[0]).sum()):2d}  ranking loss={rl:.4f}")

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.2))
for value, s in zip(path, singular_values):
    ax1.semilogy(np.arange(1, len(s) + 1), np.maximum(s, 1e-12), marker="o", ms=3, label=f"{value:g}")
ax1.set(xlabel="index", ylabel="singular value of W", title="spectrum of W")
ax1.legend(title="alpha_nuclear", fontsize=7)
ax2.semilogx(path, ranking_loss, marker="o")
ax2.set(xlabel="alpha_nuclear", ylabel="ranking loss (test)", title="held-out ranking loss")
fig.tight_layout()
