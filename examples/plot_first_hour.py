"""
The first hour: from CSV files to a saved model and its report
==============================================================

What a newcomer does first, in Python and on the command line: convert CSV files (numeric
features, then 0/1 label columns) to a dmlr store, fit the default model (its
regularization chosen by cross-validation), evaluate it on the test split, save it, and
draw its report. Every command's output below is what it printed when the documentation
was built.
"""

import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_multilabel_classification

import dmlr
from dmlr.cli import main as dmlr_command
from dmlr.report import write_report

# %%
# Two CSV files, the form most data arrive in: a header, 12 feature columns, then 5 label
# columns. (Here made by scikit-learn; yours come from elsewhere.)
work = Path(tempfile.mkdtemp())
X, Y = make_multilabel_classification(n_samples=900, n_features=12, n_classes=5, n_labels=2, random_state=0)
header = ",".join([f"f{j}" for j in range(12)] + [f"tag{j}" for j in range(5)])
for name, rows in (("train", slice(0, 600)), ("test", slice(600, None))):
    table = np.hstack([X[rows], Y[rows]])
    np.savetxt(work / f"{name}.csv", table, delimiter=",", header=header, comments="", fmt="%g")
print((work / "train.csv").read_text().splitlines()[:3])

# %%
# Convert both files to one store; each file becomes a split (``train``, ``test``). On the
# command line: ``dmlr convert train.csv test.csv data.zarr --n-labels 5`` (here through
# the same entry point), which then describes the store. In Python:
# ``dmlr.convert([train, test], "data.zarr", n_labels=5)``.
store = work / "data.zarr"
status = dmlr_command(["convert", str(work / "train.csv"), str(work / "test.csv"), str(store), "--n-labels", "5"])

# %%
# Fit with the defaults: the model is chosen by the features (here the RBF kernel's
# Nystroem form of RBRL), its regularization by cross-validation on the training split.
# ``dmlr fit data.zarr --out model.npz`` does the same from the shell.
model = dmlr.fit(store)
print(model)
print("chosen:", model.best_params_)

# %%
# Evaluate on the test split (every metric of :mod:`dmlr.metrics`; P@k counts a row with
# no relevant label as 0) and save the model: a ``.npz`` of arrays and JSON, loaded
# without pickle.
metrics = dmlr.evaluate(model, store)
for name in ("ranking_loss", "average_precision", "precision_at_1", "f1_micro", "f1_macro"):
    print(f"{name:18s} {metrics[name]:.4f}")
path = model.save(work / "model.npz")
same = (dmlr.load(path).predict(X[600:]) == model.predict(X[600:])).all()
print(f"saved to {path.name}; the reloaded model predicts the same labels: {same}")

# %%
# The saved model, evaluated from the shell: ``dmlr evaluate model.npz data.zarr``.
status = dmlr_command(["evaluate", str(path), str(store)])

# %%
# The report (``dmlr report model.npz data.zarr report.png``): the objective, the score
# distributions with the learned threshold, per-label F1 and ROC AUC, under a headline of
# the main metrics.
png = write_report(model, store, work / "report.png")
fig, ax = plt.subplots(figsize=(9, 6.3))
ax.imshow(plt.imread(png))
ax.set_axis_off()
fig.tight_layout()
