"""Delimited text input (CSV, TSV): dmlr.convert, the command line, dmlr.fit's hint."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

import dmlr
from dmlr.cli import main
from dmlr.data.convert import convert, detect_format
from dmlr.errors import DmlrInputError


def _table(n=40, d=3, l=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).round(4)
    Y = (rng.random((n, l)) < 0.4).astype(np.int8)
    return X, Y


def _write(path, X, Y, *, sep=",", header=True):
    lines = []
    if header:
        names = [f"f{j}" for j in range(X.shape[1])] + [f'"tag {j}"' for j in range(Y.shape[1])]
        lines.append(sep.join(names))
    lines += [sep.join([*(f"{v:g}" for v in x), *(str(int(v)) for v in y)]) for x, y in zip(X, Y)]
    text = "\n".join(lines) + "\n"
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("name", "sep", "header"), [("d.csv", ",", True), ("d.tsv.gz", "\t", False), ("d.csv", ";", True)]
)
def test_csv_features_then_labels_round_trip(tmp_path, name, sep, header):
    X, Y = _table()
    src = _write(tmp_path / name, X, Y, sep=sep, header=header)
    assert detect_format(src) == "csv"
    ds = dmlr.open_dataset(convert(src, tmp_path / "s.zarr", n_labels=2))
    Xs, Ys = (a.compute() for a in ds.arrays(None))
    np.testing.assert_allclose(Xs, X)
    np.testing.assert_array_equal(Ys, Y)
    if header:
        assert list(ds.label_names) == ["tag 0", "tag 1"] and list(ds.feature_names) == ["f0", "f1", "f2"]


def test_train_and_test_csv_files_become_splits(tmp_path):
    X, Y = _table()
    files = [_write(tmp_path / "set-train.csv", X[:30], Y[:30]), _write(tmp_path / "set-test.csv", X[30:], Y[30:])]
    ds = dmlr.open_dataset(convert(files, tmp_path / "s.zarr", n_labels=2))
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 30, "test": 10}


def test_csv_errors_name_the_line_and_column(tmp_path):
    X, Y = _table(n=5)
    src = _write(tmp_path / "d.csv", X, Y)
    with pytest.raises(DmlrInputError, match="n_labels"):
        convert(src, tmp_path / "a.zarr")
    lines = src.read_text().splitlines()
    lines[3] = lines[3].replace(lines[3].split(",")[1], "abc", 1)
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(DmlrInputError, match=r"line 4.*not a number: 'abc' in column 2"):
        convert(src, tmp_path / "b.zarr", n_labels=2)
    lines[3] = ",".join(lines[3].split(",")[:-1] + ["2"])
    lines[3] = lines[3].replace("abc", "1.5")
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(DmlrInputError, match=r"line 4.*label column 5 holds 2; labels must be 0 or 1"):
        convert(src, tmp_path / "c.zarr", n_labels=2)
    src.write_text("\n".join(lines[:2] + [lines[2] + ",0"]) + "\n")
    with pytest.raises(DmlrInputError, match=r"line 3.*6 columns, the first line has 5"):
        convert(src, tmp_path / "d.zarr", n_labels=2)
    src.write_text("\n".join(lines[:2] + [",".join([""] + lines[2].split(",")[1:])]) + "\n")
    with pytest.raises(DmlrInputError, match=r"line 3.*missing value in column 1"):
        convert(src, tmp_path / "e.zarr", n_labels=2)


def test_cli_converts_a_csv_and_fit_on_the_csv_points_to_it(tmp_path):
    X, Y = _table(n=60)
    src = _write(tmp_path / "d.csv", X, Y)
    assert main(["convert", str(src), str(tmp_path / "s.zarr"), "--n-labels", "2"]) == 0
    assert dmlr.open_dataset(tmp_path / "s.zarr").n_labels == 2
    with pytest.raises(DmlrInputError, match="dmlr convert .* --n-labels L"):
        dmlr.fit(src)


def test_an_empty_csv_and_a_header_only_csv_are_refused(tmp_path):
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(DmlrInputError, match="empty file"):
        convert(tmp_path / "e.csv", tmp_path / "e.zarr", n_labels=1)
    (tmp_path / "h.csv").write_text("a,b,y\n")
    with pytest.raises(DmlrInputError, match="no data rows"):
        convert(tmp_path / "h.csv", tmp_path / "h.zarr", n_labels=1)
    assert not (tmp_path / "h.zarr").exists()


def test_label_columns_by_name_or_prefix_anywhere_in_the_row(tmp_path):
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(20, 3)).round(3), (rng.random((20, 2)) < 0.5).astype(int)
    rows = ["tag_x,f0,f1,tag_y,f2"] + [f"{y[0]},{x[0]},{x[1]},{y[1]},{x[2]}" for x, y in zip(X, Y)]
    src = tmp_path / "d.csv"
    src.write_text("\n".join(rows) + "\n")
    for i, labels in enumerate(("tag_", ["tag_y", "tag_x"])):
        ds = dmlr.open_dataset(convert(src, tmp_path / f"s{i}.zarr", labels=labels))
        np.testing.assert_allclose(ds.arrays(None)[0].compute(), X)
        np.testing.assert_array_equal(ds.arrays(None)[1].compute(), Y)
        assert list(ds.label_names) == ["tag_x", "tag_y"] and list(ds.feature_names) == ["f0", "f1", "f2"]
    assert main(["convert", str(src), str(tmp_path / "c.zarr"), "--labels", "tag_x,tag_y"]) == 0
    assert (
        main(
            [
                "convert",
                str(src),
                str(
                    tmp_path / "p.zarr",
                ),
                "--label-prefix",
                "tag_",
            ]
        )
        == 0
    )
    with pytest.raises(DmlrInputError, match="no column named 'tag_z'"):
        convert(src, tmp_path / "z.zarr", labels=["tag_z"])
    with pytest.raises(DmlrInputError, match="no column name starts with 'y_'"):
        convert(src, tmp_path / "y.zarr", labels="y_")
    with pytest.raises(DmlrInputError, match="n_labels=.*or, with a header line, labels="):
        convert(src, tmp_path / "n.zarr")
