"""The model report (dmlr.report, ``dmlr report``): the PNG and the per-label numbers behind it."""

import struct
import sys

import dask.array as da
import numpy as np
import pytest

import dmlr
from dmlr.cli import main
from dmlr.datasets import make_multilabel
from dmlr.metrics import multilabel_metrics, predict_from_scores
from dmlr.report import MatplotlibMissingError, headline, label_metrics, report_statistics, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR" and data.rstrip().endswith(b"IEND\xaeB`\x82")
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "syn.zarr"
    make_multilabel(path, n_samples=900, n_features=15, n_labels=9, cardinality=1.8, seed=3)
    model = dmlr.fit(path, "rbrl", split="train", max_iter=150)
    return path, model


def _sklearn_per_label(Y, S, P):
    from sklearn.metrics import f1_score, roc_auc_score

    Y, P = Y.astype(np.int64), P.astype(np.int64)
    f1 = np.array([f1_score(Y[:, j], P[:, j], zero_division=0) for j in range(Y.shape[1])])
    auc = np.array(
        [roc_auc_score(Y[:, j], S[:, j]) if 0 < Y[:, j].sum() < len(Y) else np.nan for j in range(Y.shape[1])]
    )
    return f1, auc


def test_write_report_png(fitted, tmp_path):
    pytest.importorskip("matplotlib")
    store, model = fitted
    png = write_report(model, store, tmp_path / "out" / "report.png", split="test")
    assert png == tmp_path / "out" / "report.png" and png.exists()
    assert _png_size(png) == (1300, 1200)  # 13 x 12 inches at 100 dpi: searched, the search's curve below
    saved = write_report(dmlr.load(model.save(tmp_path / "m.npz")), store, tmp_path / "saved.png")
    assert _png_size(saved) == (1300, 900)  # a model file keeps no search: the four panels
    assert 30_000 < png.stat().st_size < 3_000_000
    print(f"report PNG: {png}")


def test_per_label_numbers_agree_with_scikit_learn(fitted):
    pytest.importorskip("sklearn")
    store, model = fitted
    stats = label_metrics(model, store, "test")
    X, Y = (a.compute() for a in dmlr.open_dataset(store).arrays("test"))
    S = model.decision_function(X)
    P = model.predict(X)  # the model's own label rule, as the report's
    f1, auc = _sklearn_per_label(Y, S, P)
    np.testing.assert_allclose(stats["f1"], f1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats["auc"], auc, rtol=1e-12, atol=1e-12)
    # the macro averages are the ones dmlr.evaluate reports
    metrics = dmlr.evaluate(model, store, split="test")
    assert stats["f1_macro"] == pytest.approx(metrics["f1_macro"], abs=1e-12)
    assert stats["auc_macro"] == pytest.approx(metrics["auc_macro"], abs=1e-12)
    # the headline's numbers are dmlr.evaluate's, each one
    for name in ("ranking_loss", "average_precision", "precision_at_1", "f1_micro", "auc_macro"):
        assert stats["metrics"][name] == pytest.approx(metrics[name], rel=1e-12), name
    line = headline(stats["metrics"])
    assert f"ranking loss {metrics['ranking_loss']:.4f}" in line and "no relevant label counts 0" in line
    # labels sorted by frequency, histograms over every (instance, label) pair
    assert np.array_equal(stats["n_positive"], Y.sum(axis=0))
    assert np.all(np.diff(stats["n_positive"][stats["order"]]) <= 0)
    assert stats["relevant"].sum() == Y.sum() and stats["irrelevant"].sum() == Y.size - Y.sum()
    assert stats["edges"][0] == S.min() and stats["edges"][-1] == pytest.approx(S.max())
    assert stats["label_names"] is None or len(stats["label_names"]) == Y.shape[1]


def test_ties_single_class_labels_and_dask_chunks():
    pytest.importorskip("sklearn")
    rng = np.random.default_rng(0)
    Y = (rng.random((300, 6)) < 0.3).astype(np.int8)
    Y[:, 4] = 0  # no relevant row: F1 0, no AUC
    Y[:, 5] = 1  # no irrelevant row: no AUC
    S = rng.integers(-3, 4, size=Y.shape).astype(np.float64) + Y  # many ties
    P = predict_from_scores(S)
    f1, auc = _sklearn_per_label(Y, S, P)
    local = report_statistics(Y, S, P, bins=7)
    chunked = report_statistics(
        da.from_array(Y, chunks=(70, -1)), da.from_array(S, chunks=(70, -1)), da.from_array(P, chunks=(70, -1)), bins=7
    )
    for stats in (local, chunked):
        np.testing.assert_allclose(stats["f1"], f1, atol=1e-12)
        np.testing.assert_allclose(stats["auc"], auc, atol=1e-12)
        assert np.isnan(stats["auc"][[4, 5]]).all()
        reference = multilabel_metrics(Y, S, P, metrics=["f1_macro", "auc_macro"])
        assert stats["f1_macro"] == pytest.approx(reference["f1_macro"])
        assert stats["auc_macro"] == pytest.approx(reference["auc_macro"])
    for key in ("relevant", "irrelevant", "n_positive", "order"):
        assert np.array_equal(local[key], chunked[key])


def test_cli_report(fitted, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    store, model = fitted
    saved = model.save(tmp_path / "m.npz")
    out = tmp_path / "r.png"
    assert main(["report", str(saved), str(store), "--split", "all", "--out", str(out)]) == 0
    assert f"report written to {out}" in capsys.readouterr().out
    assert _png_size(out) == (1300, 900)


def test_missing_matplotlib_names_the_plot_extra(fitted, tmp_path, monkeypatch, capsys):
    store, model = fitted
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(MatplotlibMissingError, match=r"dmlr\[plot\]"):
        write_report(model, store, tmp_path / "r.png")
    assert isinstance(MatplotlibMissingError("x"), ImportError)
    saved = model.save(tmp_path / "m.npz")
    assert main(["report", str(saved), str(store), "--out", str(tmp_path / "r.png")]) == 2
    assert "'plot' extra" in capsys.readouterr().err and not (tmp_path / "r.png").exists()


def test_labels_past_the_tick_limit_are_named_every_few():
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    from dmlr.report import MAX_TICK_LABELS, plot_label_metrics

    rng = np.random.default_rng(0)
    n_labels = 2 * MAX_TICK_LABELS + 5
    Y = (rng.random((200, n_labels)) < 0.2).astype(np.int8)
    stats = report_statistics(Y, rng.normal(size=Y.shape) + Y)
    stats["label_names"] = [f"tag{j}" for j in range(n_labels)]
    axes = Figure().subplots(1, 2)
    plot_label_metrics(stats, axes)
    names = [t.get_text() for t in axes[0].get_xticklabels()]
    assert 0 < len(names) <= MAX_TICK_LABELS
    first = stats["order"][0]
    assert names[0] == f"tag{first} ({stats['n_positive'][first]})"
    assert "one named every 3" in axes[0].get_xlabel()


def test_a_store_without_splits_is_reported_on_every_row(fitted, tmp_path):
    """The report of a store without splits says "all rows" (the rows it read), not the
    'test' split it was asked for by default."""
    from dmlr.data.store import write_dataset

    store, model = fitted
    X, Y = (a.compute() for a in dmlr.open_dataset(store).arrays("test"))
    bare = write_dataset(tmp_path / "bare.zarr", X, Y)
    with pytest.warns(UserWarning, match="has no splits"):
        stats = label_metrics(model, bare)
    assert stats["split"] is None and stats["n_rows"] == len(X)
    assert label_metrics(model, store)["split"] == "test"
