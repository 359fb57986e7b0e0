"""Converters: every input format on small hand-written files, error cases, and the staged real sets."""

import gzip
import os
import warnings

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
import zarr

import dmlr.data.convert as convert_module
from dmlr.data.arff import find_xml
from dmlr.data.convert import convert, detect_format
from dmlr.data.store import open_dataset
from dmlr.datasets import anchors_dir, data_dir
from dmlr.errors import DmlrInputError


def load(path):
    """(X as dense ndarray, Y, attrs, splits) of a store, reading the Zarr layout directly."""
    g = zarr.open_group(str(path), mode="r")
    meta = g.attrs["dmlr"]
    n, d = meta["n_samples"], meta["n_features"]
    if meta["x_encoding"] == "csr":
        x = g["X"]
        X = sp.csr_matrix((x["data"][:], x["indices"][:], x["indptr"][:]), shape=(n, d)).toarray()
    else:
        X = g["X"][:]
    splits = {k: g["splits"][k][:] for k in meta["splits"]}
    return X, g["Y"][:], meta, splits


def write(path, text, *, gz=False):
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def xml_for(path, names):
    labels = "".join(f'<label name="{n}"></label>\n' for n in names)
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<labels xmlns="http://mulan.sourceforge.net/labels">\n{labels}</labels>\n'
    )
    return path


DENSE_HEADER = """% a comment
@relation toy

@attribute f1 numeric
@attribute 'f two' REAL
@attribute f3 {1,2,3}
@attribute lab1 {0,1}
@attribute "lab 2" {0, 1}

@data
"""
DENSE_ROWS = ["1.5,-2,1,0,1", "0,3e2,3,1,1", "% comment line", "", "-0.25, 7 ,3,0,0"]
DENSE_X = np.array([[1.5, -2, 1, 0, 0], [0, 300, 0, 0, 1], [-0.25, 7, 0, 0, 1]])  # f3 one-hot
DENSE_Y = np.array([[0, 1], [1, 1], [0, 0]])


@pytest.fixture
def toy_dense(tmp_path):
    xml_for(tmp_path / "toy.xml", ["lab1", "lab 2"])
    return write(tmp_path / "toy-train.arff", DENSE_HEADER + "\n".join(DENSE_ROWS) + "\n")


SPARSE_HEADER = """@relation sp
@attribute w0 {0,1}
@attribute w1 numeric
@attribute w2 numeric
@attribute w3 numeric
@attribute a {0,1}
@attribute b {0,1}
@attribute c {0,1}
@data
"""


@pytest.fixture
def toy_sparse(tmp_path):
    xml_for(tmp_path / "sp.xml", ["a", "b", "c"])
    rows = ["{0 1,2 0.5,4 1}", "{}", "{1 -3,3 2,5 1,6 1}"]
    return write(tmp_path / "sp-train-sparse.arff.gz", SPARSE_HEADER + "\n".join(rows) + "\n", gz=True)


def assert_error(excinfo, path, line=None, row=None):
    err = excinfo.value
    assert err.path == str(path)
    assert err.line == line and err.row == row
    assert str(path) in str(err)


# ---------------------------------------------------------------------------
# ARFF
# ---------------------------------------------------------------------------


def test_dense_arff_with_sibling_xml(tmp_path, toy_dense):
    out = convert(toy_dense, tmp_path / "out.zarr")
    X, Y, meta, splits = load(out)
    np.testing.assert_array_equal(X, DENSE_X)
    np.testing.assert_array_equal(Y, DENSE_Y)
    assert meta["x_encoding"] == "dense" and splits == {}
    assert meta["feature_names"] == ["f1", "f two", "f3=1", "f3=2", "f3=3"]
    assert meta["label_names"] == ["lab1", "lab 2"]
    assert "toy-train.arff" in meta["source"] and "toy.xml" in meta["source"]


def test_sparse_gzipped_arff_stays_sparse(tmp_path, toy_sparse):
    out = convert(toy_sparse, tmp_path / "out.zarr")
    X, Y, meta, _ = load(out)
    assert meta["x_encoding"] == "csr"
    np.testing.assert_array_equal(X, [[1, 0, 0.5, 0], [0, 0, 0, 0], [0, -3, 0, 2]])
    np.testing.assert_array_equal(Y, [[1, 0, 0], [0, 0, 0], [0, 1, 1]])


def test_quoted_nominal_values_and_escapes(tmp_path):
    text = (
        "@relation q\n@attribute 'it\\'s' {'red','dark blue',\"x,y\"}\n@attribute n numeric\n"
        "@attribute y {0,1}\n@data\n'dark blue',1.5,1\n\"x,y\",2,0\nred,3,'1'\n{0 'x,y',2 1}\n"
    )
    path = write(tmp_path / "q.arff", text)
    X, Y, meta, _ = load(convert(path, tmp_path / "o", n_labels=1, dtype="float32"))
    np.testing.assert_array_equal(X, [[0, 1, 0, 1.5], [0, 0, 1, 2], [1, 0, 0, 3], [0, 0, 1, 0]])
    np.testing.assert_array_equal(Y.ravel(), [1, 0, 1, 1])
    assert meta["feature_names"] == ["it's=red", "it's=dark blue", "it's=x,y", "n"]
    assert meta["x_dtype"] == "float32"


def test_corrupt_gzip_stream_names_file(tmp_path, toy_dense):
    data = gzip.compress((DENSE_HEADER + "1,2,1,0,1\n" * 2000).encode())
    path = tmp_path / "toy-cut.arff.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DmlrInputError, match="gzip") as excinfo:
        convert(path, tmp_path / "o")
    assert excinfo.value.path == str(path)
    assert not (tmp_path / "o").exists()


def test_labels_located_by_xml_name_anywhere(tmp_path):
    path = write(
        tmp_path / "mid.arff",
        "@relation m\n@attribute x1 numeric\n@attribute L {0,1}\n@attribute x2 numeric\n@data\n1,1,2\n3,0,4\n",
    )
    out = convert(path, tmp_path / "o", xml=xml_for(tmp_path / "labels.xml", ["L"]))
    X, Y, meta, _ = load(out)
    np.testing.assert_array_equal(X, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(Y, [[1], [0]])
    assert meta["feature_names"] == ["x1", "x2"]


def test_n_labels_without_xml_takes_last_attributes(tmp_path):
    path = write(
        tmp_path / "noxml.arff",
        "@relation r\n@attribute a numeric\n@attribute b numeric\n@attribute c numeric\n@data\n1,0,1\n2,1,0\n",
    )
    X, Y, _, _ = load(convert(path, tmp_path / "o", n_labels=2))
    np.testing.assert_array_equal(X, [[1], [2]])
    np.testing.assert_array_equal(Y, [[0, 1], [1, 0]])
    with pytest.raises(DmlrInputError, match="cannot tell which attributes are labels"):
        convert(path, tmp_path / "o2")


@pytest.mark.parametrize("c, first", [(2, True), (-2, False)])
def test_meka_relation_gives_label_positions(tmp_path, c, first):
    attrs = "".join(f"@attribute {n} {{0,1}}\n" for n in ("p", "q")) + "@attribute z numeric\n"
    if not first:
        attrs = "@attribute z numeric\n" + "".join(f"@attribute {n} {{0,1}}\n" for n in ("p", "q"))
    rows = "1,0,5\n0,1,6\n" if first else "5,1,0\n6,0,1\n"
    path = write(tmp_path / "meka.arff", f"@relation 'Foo: -C {c} -split'\n{attrs}@data\n{rows}")
    assert detect_format(path) == "arff"
    X, Y, meta, _ = load(convert(path, tmp_path / "o"))
    np.testing.assert_array_equal(X, [[5], [6]])
    np.testing.assert_array_equal(Y, [[1, 0], [0, 1]])
    assert meta["label_names"] == ["p", "q"] and "MEKA" in meta["source"]
    load(convert(path, tmp_path / "o2", fmt="meka"))


def test_xml_takes_precedence_over_stale_meka_relation(tmp_path):
    # like MULAN's medical.arff: relation 'MEDC: -C 45 ...' yet labels are the last attributes per XML
    xml_for(tmp_path / "med.xml", ["y"])
    path = write(
        tmp_path / "med.arff", "@relation 'MEDC: -C 1'\n@attribute a numeric\n@attribute y {0,1}\n@data\n3,1\n"
    )
    X, Y, _, _ = load(convert(path, tmp_path / "o"))
    np.testing.assert_array_equal(X, [[3]])
    np.testing.assert_array_equal(Y, [[1]])


def test_train_and_test_files_become_splits(tmp_path, toy_dense, monkeypatch):
    monkeypatch.setattr(convert_module, "BLOCK_ROWS", 2)  # several blocks per file
    test = write(tmp_path / "toy-test.arff", DENSE_HEADER + "9,9,1,1,0\n")
    X, Y, meta, splits = load(convert([toy_dense, test], tmp_path / "o", chunk_rows=2))
    assert X.shape == (4, 5) and meta["splits"] == ["test", "train"]
    np.testing.assert_array_equal(splits["train"], [0, 1, 2])
    np.testing.assert_array_equal(splits["test"], [3])
    np.testing.assert_array_equal(Y[3], [1, 0])
    other = write(tmp_path / "toy-extra.arff", DENSE_HEADER + "9,9,1,1,0\n")
    _, _, _, splits = load(convert([toy_dense, other], tmp_path / "o2"))
    assert sorted(splits) == ["part0", "part1"]


def test_parts_with_different_attributes_are_refused(tmp_path, toy_dense):
    other = write(tmp_path / "toy-test.arff", DENSE_HEADER.replace("f1 numeric", "g1 numeric") + "1,1,1,1,1\n")
    with pytest.raises(DmlrInputError, match="differs"):
        convert([toy_dense, other], tmp_path / "o")


@pytest.mark.parametrize(
    "name, xml",
    [
        ("emotions-train.arff.gz", "emotions.xml"),
        ("Corel5k-train-sparse.arff.gz", "Corel5k.xml"),
        ("mediamill-train.arff-sort-Discretized.arff.gz", "mediamill.xml"),
        ("tmc2007-500-test.arff", "tmc2007-500.xml"),
    ],
)
def test_find_xml_strips_suffixes(tmp_path, name, xml):
    (tmp_path / xml).write_text("<labels/>")
    assert find_xml(tmp_path / name) == tmp_path / xml


# ---------------------------------------------------------------------------
# ARFF errors
# ---------------------------------------------------------------------------


def _toy_with(tmp_path, rows, name="bad.arff"):
    xml_for(tmp_path / "bad.xml", ["lab1", "lab 2"])
    return write(tmp_path / name, DENSE_HEADER + rows)


@pytest.mark.parametrize(
    "rows, line, message",
    [
        ("1,2,1,0,1\n1,2,1,0\n", 12, "4 values, expected 5"),  # malformed: a value short
        ("1,2,1,0,1\n1,2,1,0,1,7\n", 12, "6 values"),
        ("1,2,1,0,1\n1,abc,1,0,1\n", 12, "'abc' is not a number"),
        ("1,?,1,0,1\n", 11, "missing value"),
        ("nan,2,1,0,1\n", 11, "NaN or infinite"),
        ("1,-inf,1,0,1\n", 11, "NaN or infinite"),
        ("1,2,4,0,1\n", 11, "not one of the declared nominal values"),
        ("1,2,1,0,2\n", 11, "not one of the declared nominal values"),  # non-binary label
        ("1,2,1,0,'1\n", 11, "unterminated"),
    ],
)
def test_bad_arff_rows_name_file_and_line(tmp_path, rows, line, message):
    path = _toy_with(tmp_path, rows)
    with pytest.raises(DmlrInputError, match=message) as excinfo:
        convert(path, tmp_path / "o.zarr")
    assert_error(excinfo, path, line=line)
    assert sorted(os.listdir(tmp_path)) == ["bad.arff", "bad.xml"]


def test_numeric_label_must_be_binary(tmp_path):
    path = write(tmp_path / "num.arff", "@relation r\n@attribute a numeric\n@attribute y numeric\n@data\n1,1\n2,0.5\n")
    with pytest.raises(DmlrInputError, match="labels must be 0 or 1") as excinfo:
        convert(path, tmp_path / "o", n_labels=1)
    assert_error(excinfo, path, line=6)


@pytest.mark.parametrize(
    "rows, line, message",
    [
        ("{0 1,9 1}\n", 10, "outside 0..6"),
        ("{0 1,0 1}\n", 10, "given twice"),
        ("{0 1,2\n", 10, "not closed"),
        ("{0 1,2}\n", 10, "malformed sparse entry"),
        ("{x 1}\n", 10, "not an integer"),
        ("{4 7}\n", 10, "not one of the declared"),
    ],
)
def test_bad_sparse_rows(tmp_path, rows, line, message):
    path = write(tmp_path / "sp.arff", SPARSE_HEADER + rows)
    with pytest.raises(DmlrInputError, match=message) as excinfo:
        convert(path, tmp_path / "o", n_labels=3)
    assert_error(excinfo, path, line=line)


def test_bad_headers(tmp_path):
    cases = {
        "str.arff": ("@relation r\n@attribute s string\n@attribute y {0,1}\n@data\n", "type string", 2),
        "nodata.arff": ("@relation r\n@attribute a numeric\n", "no @data", 2),
        "lab.arff": ("@relation r\n@attribute a numeric\n@attribute y {a,b}\n@data\n", "labels must be 0/1", 3),
    }
    for name, (text, message, line) in cases.items():
        path = write(tmp_path / name, text)
        with pytest.raises(DmlrInputError, match=message) as excinfo:
            convert(path, tmp_path / "o", n_labels=1)
        assert_error(excinfo, path, line=line)


def test_xml_label_missing_from_arff_or_wrong_label_count(tmp_path, toy_dense):
    with pytest.raises(DmlrInputError, match="not attributes of the ARFF"):
        convert(toy_dense, tmp_path / "o", xml=xml_for(tmp_path / "x.xml", ["lab1", "nope"]))
    with pytest.raises(DmlrInputError, match="n_labels=3 but toy.xml lists 2"):
        convert(toy_dense, tmp_path / "o", n_labels=3)


def test_truncated_last_line_raises_unless_dropped(tmp_path):
    path = _toy_with(tmp_path, "1,2,1,0,1\n3,4,2,1", name="bad-test.arff.gz")
    path.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(DmlrInputError, match="truncated") as excinfo:
        convert(path, tmp_path / "o")
    assert_error(excinfo, path, line=12)
    # the error says how to drop the line, in Python and on the command line
    assert "drop_truncated_last_line=True" in str(excinfo.value)
    assert "--drop-truncated-last-line" in str(excinfo.value)
    from dmlr.cli import main

    assert main(["convert", str(path), str(tmp_path / "cli.zarr")]) == 2
    with pytest.warns(UserWarning, match="dropped truncated last line"):
        assert main(["convert", str(path), str(tmp_path / "cli.zarr"), "--drop-truncated-last-line"]) == 0
    assert load(tmp_path / "cli.zarr")[0].shape == (1, 5)
    with pytest.warns(UserWarning, match="dropped truncated last line"):
        out = convert(path, tmp_path / "o", drop_truncated_last_line=True)
    X, _, meta, _ = load(out)
    assert X.shape == (1, 5) and "dropped truncated last line 12" in meta["source"]
    # a complete last line without a newline is kept
    whole = _toy_with(tmp_path, "1,2,1,0,1\n3,4,2,1,1", name="bad-whole.arff")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load(convert(whole, tmp_path / "w", drop_truncated_last_line=True))[0].shape == (2, 5)


# ---------------------------------------------------------------------------
# Files as users have them: nominal features, identifiers, BOM, CRLF, header lines
# ---------------------------------------------------------------------------

NOMINAL = """@relation nom
@attribute yn {YES,NO}
@attribute ny {no,yes}
@attribute tf {False,True}
@attribute ab {a,b}
@attribute one_zero {1,0}
@attribute zero_one {0,1}
@attribute color {red,green,blue}
@attribute x numeric
@attribute y {0,1}
@data
YES,no,False,a,1,0,red,0.5,1
NO,yes,True,b,0,1,blue,-1,0
YES,yes,True,a,0,0,blue,2,1
NO,no,False,b,1,1,green,0,0
"""


def test_nominal_features_are_one_hot_as_weka_nominal_to_binary(tmp_path):
    path = write(tmp_path / "nom.arff", NOMINAL)
    X, Y, meta, _ = load(convert(path, tmp_path / "o", n_labels=1))
    assert meta["feature_names"] == [
        "yn=YES",
        "ny=yes",
        "tf=True",
        "ab=b",
        "one_zero",
        "zero_one",
        "color=red",
        "color=green",
        "color=blue",
        "x",
    ]
    np.testing.assert_array_equal(
        X,
        [
            # yes/no and true/false pairs: 1 means yes/true in either order; {a,b}: 1 for the second value;
            # {1,0} and {0,1}: the value itself; three values: one column each
            [1, 0, 0, 0, 1, 0, 1, 0, 0, 0.5],
            [0, 1, 1, 1, 0, 1, 0, 0, 1, -1],
            [1, 1, 1, 0, 0, 0, 0, 0, 1, 2],
            [0, 0, 0, 1, 1, 1, 0, 1, 0, 0],
        ],
    )
    np.testing.assert_array_equal(Y.ravel(), [1, 0, 1, 0])  # labels stay 0/1 labels


def test_sparse_row_omitting_a_nominal_holds_its_first_value(tmp_path):
    # ARFF sparse rows: an omitted attribute has value index 0, for a nominal its first declared value
    text = (
        "@relation s\n@attribute c {red,green,blue}\n@attribute yn {YES,NO}\n@attribute n numeric\n"
        "@attribute y {0,1}\n@data\n{0 blue,1 NO,2 2}\n{2 3,3 1}\n{0 green}\n{0 blue,1 NO}\n"
    )
    path = write(tmp_path / "s.arff", text)
    X, Y, meta, _ = load(convert(path, tmp_path / "o", n_labels=1))
    assert meta["x_encoding"] == "csr"
    np.testing.assert_array_equal(X, [[0, 0, 1, 0, 2], [1, 0, 0, 1, 3], [0, 1, 0, 1, 0], [0, 0, 1, 0, 0]])
    np.testing.assert_array_equal(Y.ravel(), [0, 1, 0, 0])


def _ids_file(tmp_path, name, ids, start=0):
    values = ",".join(f"r{i}" for i in range(8))
    rows = "".join(f"r{i},{i % 3},{i},{i % 2}\n" for i in ids)
    return write(
        tmp_path / name,
        f"@relation ids\n@attribute id {{{values}}}\n@attribute c {{0,1,2}}\n"
        f"@attribute n numeric\n@attribute y {{0,1}}\n@data\n{rows}",
    )


def test_identifier_attribute_is_left_out_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setattr(convert_module, "BLOCK_ROWS", 2)  # the pass spans blocks and files
    tr, te = _ids_file(tmp_path, "ids-train.arff", [0, 1, 2, 3]), _ids_file(tmp_path, "ids-test.arff", [4, 5])
    with pytest.warns(UserWarning, match=r"'id' \(line 2\) take a different value in every row"):
        X, _, meta, _ = load(convert([tr, te], tmp_path / "o", n_labels=1))
    assert meta["feature_names"] == ["c=0", "c=1", "c=2", "n"]  # c repeats a value: kept
    np.testing.assert_array_equal(X[:, 3], np.arange(6))
    assert "left out identifier attribute(s) 'id'" in meta["source"]
    with pytest.warns(UserWarning, match="kept one-hot as asked"):
        X, _, meta, _ = load(convert([tr, te], tmp_path / "k", n_labels=1, keep_identifiers=True))
    assert meta["feature_names"][:8] == [f"id=r{i}" for i in range(8)]
    np.testing.assert_array_equal(X[:, :8], np.eye(8)[:6])
    from dmlr.cli import main

    with pytest.warns(UserWarning, match="kept one-hot"):
        assert main(["convert", str(tr), str(te), str(tmp_path / "c"), "--n-labels", "1", "--keep-identifiers"]) == 0
    assert load(tmp_path / "c")[2]["feature_names"] == meta["feature_names"]
    only_id = write(
        tmp_path / "only-id.arff", "@relation r\n@attribute id {a,b,c}\n@attribute y {0,1}\n@data\na,1\nb,0\nc,1\n"
    )
    with pytest.warns(UserWarning, match="'id'"), pytest.raises(DmlrInputError, match="no features left") as excinfo:
        convert(only_id, tmp_path / "i", n_labels=1)
    assert_error(excinfo, only_id, line=4)


def test_repeated_identifier_value_or_two_rows_are_not_identifiers(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the last row repeats r0 (across files): not an identifier
        tr, te = _ids_file(tmp_path, "a-train.arff", [0, 1, 2]), _ids_file(tmp_path, "a-test.arff", [0])
        assert load(convert([tr, te], tmp_path / "o", n_labels=1))[2]["feature_names"][0] == "id=r0"
        # two rows identify nothing
        two = _ids_file(tmp_path, "two.arff", [0, 1])
        assert load(convert(two, tmp_path / "t", n_labels=1))[2]["feature_names"][0] == "id=r0"
    with pytest.raises(ValueError, match="keep_identifiers= applies to ARFF"):
        convert(write(tmp_path / "d.svm", "0 1:1\n"), tmp_path / "s", keep_identifiers=True)


PLAIN_ARFF = (
    "@relation r\n@attribute 'n é' numeric\n@attribute c {é,b,c}\n@attribute y {0,1}\n@data\n1,é,1\n2,b,0\n3,b,1\n"
)


@pytest.mark.parametrize(
    "encode",
    [
        lambda t: ("\ufeff" + t).encode("utf-8"),  # UTF-8 with a byte-order mark
        lambda t: t.replace("\n", "\r\n").encode("utf-8"),  # CRLF line ends
        lambda t: ("\ufeff" + t.replace("\n", "\r\n")).encode("utf-8"),  # both (Windows Notepad)
        lambda t: gzip.compress(("\ufeff" + t).encode("utf-8")),  # gzipped, with a BOM
        lambda t: t.replace("\n", "\r").encode("utf-8"),  # old Mac CR line ends
        lambda t: t.replace("\n", "\r\n").encode("utf-16"),  # UTF-16 with its BOM
    ],
    ids=["bom", "crlf", "bom-crlf", "gz-bom", "cr", "utf16"],
)
def test_bom_and_line_ends_of_common_tools(tmp_path, encode):
    want = load(convert(write(tmp_path / "plain.arff", PLAIN_ARFF), tmp_path / "plain", n_labels=1))
    path = tmp_path / "tool.arff"
    path.write_bytes(encode(PLAIN_ARFF))
    got = load(convert(path, tmp_path / "tool", n_labels=1))
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2]["feature_names"] == want[2]["feature_names"] == ["n é", "c=é", "c=b", "c=c"]
    for name, text in (("s.svm", "0,2 1:0.5 3:2\n1 2:1\n"), ("x.txt", "2 4 3\n0,2 0:0.5 3:2\n1 2:1\n")):
        want = load(convert(write(tmp_path / f"plain-{name}", text), tmp_path / f"p-{name}"))
        path = tmp_path / name
        path.write_bytes(encode(text))
        got = load(convert(path, tmp_path / f"t-{name}"))
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got[2]["source"].split(":")[0] == want[2]["source"].split(":")[0]


def test_libsvm_index_base_is_decided_over_all_files_and_recorded(tmp_path):
    tr = write(tmp_path / "z_train.svm", "0 1:1 3:1\n1 2:1\n")
    te = write(tmp_path / "z_test.svm", "1 0:2\n")  # the only index 0 is in the test file
    X, _, meta, _ = load(convert([tr, te], tmp_path / "o"))
    np.testing.assert_array_equal(X, [[0, 1, 0, 1], [0, 0, 1, 0], [2, 0, 0, 0]])  # nothing shifted
    assert "0-based feature indices, auto: index 0 on line 1 of z_test.svm" in meta["source"]
    with pytest.raises(DmlrInputError, match="zero_based=True or 'auto'") as excinfo:
        convert([tr, te], tmp_path / "o2", zero_based=False)
    assert_error(excinfo, te, line=1)
    X, _, meta, _ = load(convert(tr, tmp_path / "o3"))
    np.testing.assert_array_equal(X, [[1, 0, 1], [0, 1, 0]])
    assert "1-based feature indices, auto: no index 0 in the files" in meta["source"]
    assert "0-based feature indices, as given" in load(convert(tr, tmp_path / "o4", zero_based=True))[2]["source"]


@pytest.mark.parametrize(
    "text, options, message, line",
    [
        ("@relation r\n@attribute a numeric\n\n@attribute y {0,1}\n", {"n_labels": 1}, "no @data", 4),
        (
            "@relation r\n@attribute a numeric\n@attribute a {0,1}\n@data\n1,1\n",
            {"n_labels": 1},
            r"'a' is declared twice \(first on line 2\)",
            3,
        ),
        (
            "% c\n@relation r\n@attribute a numeric\n@attribute y {0,1}\n@data\n1,1\n",
            {},
            "cannot tell which attributes are labels",
            2,
        ),
        (
            "@relation 'r: -C 3'\n@attribute a numeric\n@attribute y {0,1}\n@data\n1,1\n",
            {},
            "MEKA relation says -C 3",
            1,
        ),
        (
            "@relation r\n@attribute a numeric\n@attribute y {0,1}\n@data\n1,1\n",
            {"n_labels": 2},
            "n_labels=2 with 2 attributes",
            4,
        ),
        ("@relation r\n@attribute a numeric\n@attribute y {0,1}\n@data\n1,1\n", {"fmt": "meka"}, "needs '-C <L>'", 1),
        ("@relation r\n@attribute a {x,y\n@attribute y {0,1}\n@data\n", {"n_labels": 1}, "not closed", 2),
        ("@relation r\n@attribute a date\n@attribute y {0,1}\n@data\n", {"n_labels": 1}, "type date", 2),
        ("@relation r\nattribute a numeric\n@data\n", {"n_labels": 1}, "expected @relation", 2),
        ("@relation r\n@data\n1\n", {"n_labels": 1}, "no @attribute", 2),
    ],
)
def test_every_header_error_names_its_line(tmp_path, text, options, message, line):
    path = write(tmp_path / "h.arff", text)
    with pytest.raises(DmlrInputError, match=message) as excinfo:
        convert(path, tmp_path / "o", **options)
    assert_error(excinfo, path, line=line)


# ---------------------------------------------------------------------------
# Atomicity and overwrite
# ---------------------------------------------------------------------------


def test_failed_conversion_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(convert_module, "BLOCK_ROWS", 2)  # the error comes after blocks were written
    rows = "".join(f"{i},1,1,0,1\n" for i in range(9)) + "1,2,1,0\n"
    path = _toy_with(tmp_path, rows)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(DmlrInputError) as excinfo:
        convert(path, tmp_path / "out.zarr", chunk_rows=2)
    assert excinfo.value.line == 20
    assert sorted(os.listdir(tmp_path)) == before


def test_overwrite_semantics(tmp_path, toy_dense):
    dst = tmp_path / "out.zarr"
    convert(toy_dense, dst)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        convert(toy_dense, dst)
    bad = _toy_with(tmp_path, "1,2,1,0\n")
    with pytest.raises(DmlrInputError):
        convert(bad, dst, overwrite=True)
    np.testing.assert_array_equal(load(dst)[0], DENSE_X)  # the old store survives a failed overwrite
    single = _toy_with(tmp_path, "5,5,1,1,1\n", name="bad-single.arff")
    convert(single, dst, overwrite=True)
    np.testing.assert_array_equal(load(dst)[0], [[5, 5, 1, 0, 0]])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# ---------------------------------------------------------------------------
# LIBSVM and XC
# ---------------------------------------------------------------------------


def test_libsvm_one_based_with_unlabelled_row(tmp_path):
    path = write(tmp_path / "d.svm", "0,2 1:0.5 3:2\n 2:1\n# comment\n\n1 1:1 # trailing\n")
    X, Y, meta, _ = load(convert(path, tmp_path / "o"))
    assert meta["x_encoding"] == "csr" and "1-based" in meta["source"]
    np.testing.assert_array_equal(X, [[0.5, 0, 2], [0, 1, 0], [1, 0, 0]])
    np.testing.assert_array_equal(Y, [[1, 0, 1], [0, 0, 0], [0, 1, 0]])


def test_libsvm_zero_based_auto_and_sizes(tmp_path):
    path = write(tmp_path / "d.libsvm.gz", "1 0:1 2:3\n0 1:2\n", gz=True)
    X, Y, _, _ = load(convert(path, tmp_path / "o"))
    np.testing.assert_array_equal(X, [[1, 0, 3], [0, 2, 0]])
    X, Y, _, _ = load(convert(path, tmp_path / "o2", n_features=5, n_labels=4))
    assert X.shape == (2, 5) and Y.shape == (2, 4)
    with pytest.raises(DmlrInputError, match="index 0 in a file read as 1-based.*zero_based=True") as excinfo:
        convert(path, tmp_path / "o3", zero_based=False)
    assert_error(excinfo, path, line=1)
    assert not (tmp_path / "o3").exists()


def test_libsvm_train_test_share_sizes(tmp_path):
    tr = write(tmp_path / "a_train.svm", "0 1:1\n1 2:1\n")
    te = write(tmp_path / "a_test.svm", "3 5:1\n")
    X, Y, _, splits = load(convert([tr, te], tmp_path / "o"))
    assert X.shape == (3, 5) and Y.shape == (3, 4)
    np.testing.assert_array_equal(splits["test"], [2])


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("0 1:x\n", 1, "feature value 'x'"),
        ("0 1:1 1:2\n", 1, "given twice"),
        ("0 1:nan\n", 1, "NaN or infinite"),
        ("0 3\n", 1, "malformed feature"),
        ("0,,1 1:1\n", 1, "empty label"),
        ("a 1:1\n", 1, "label 'a'"),
        ("0 1:1\n2 1:1\n", 2, "label 2 is outside 0..1"),  # wrong label count (n_labels=2)
    ],
)
def test_bad_libsvm_lines(tmp_path, text, line, message):
    path = write(tmp_path / "bad.svm", text)
    with pytest.raises(DmlrInputError, match=message) as excinfo:
        convert(path, tmp_path / "o", n_labels=2)
    assert_error(excinfo, path, line=line)
    assert sorted(os.listdir(tmp_path)) == ["bad.svm"]


def test_xc_format(tmp_path):
    path = write(tmp_path / "xc_train.txt", "3 4 3\n0,2 0:1 3:0.5\n 1:2\n1 2:1\n")
    assert detect_format(path) == "xc"
    X, Y, meta, _ = load(convert(path, tmp_path / "o"))
    np.testing.assert_array_equal(X, [[1, 0, 0, 0.5], [0, 2, 0, 0], [0, 0, 1, 0]])
    np.testing.assert_array_equal(Y, [[1, 0, 1], [0, 0, 0], [0, 1, 0]])
    assert meta["source"].startswith("xc")


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("3 4 3\n0 0:1\n1 1:1\n", 3, "announces 3 rows but the file holds 2"),
        ("1 4 3\n0 0:1\n1 1:1\n", 3, "more rows than the 1"),
        ("2 4 3\n0 4:1\n1 1:1\n", 2, "feature index \\(0-based\\) 4 is outside 0..3"),
        ("2 4 3\n0 1:1\n3 1:1\n", 3, "label 3 is outside 0..2"),
    ],
)
def test_bad_xc_files(tmp_path, text, line, message):
    path = write(tmp_path / "bad.txt", text)
    with pytest.raises(DmlrInputError, match=message) as excinfo:
        convert(path, tmp_path / "o")
    assert_error(excinfo, path, line=line)
    assert sorted(os.listdir(tmp_path)) == ["bad.txt"]


# ---------------------------------------------------------------------------
# MATLAB and npz
# ---------------------------------------------------------------------------


def test_mat_labels_x_instances_pm1(tmp_path):
    X = np.arange(12.0).reshape(4, 3)
    T = np.array([[1, -1, -1, 1], [-1, -1, 1, 1]], dtype=np.int16)  # labels x instances
    scipy.io.savemat(tmp_path / "a.mat", {"data": X, "target": T})
    Xs, Y, meta, splits = load(convert(tmp_path / "a.mat", tmp_path / "o"))
    np.testing.assert_array_equal(Xs, X)
    np.testing.assert_array_equal(Y, (T.T > 0))
    assert meta["x_encoding"] == "dense" and splits == {}


def test_mat_train_test_variables_and_sparse_features(tmp_path):
    Xtr = sp.random(5, 4, density=0.4, format="csc", random_state=0)
    Ytr = np.eye(5, 2, dtype=np.uint8)  # instances x labels, 0/1
    Yte = np.array([[1, -1, -1], [-1, 1, -1]])  # labels x instances, -1/+1
    scipy.io.savemat(
        tmp_path / "r.mat",
        {"test_data": Xtr[:3], "test_target": Yte, "train_data": Xtr, "train_target": Ytr, "name": "toy"},
    )
    X, Y, meta, splits = load(convert(tmp_path / "r.mat", tmp_path / "o"))
    assert meta["x_encoding"] == "csr" and X.shape == (8, 4)
    np.testing.assert_array_equal(splits["train"], np.arange(5))
    np.testing.assert_array_equal(splits["test"], [5, 6, 7])
    np.testing.assert_allclose(X[:5], Xtr.toarray())
    np.testing.assert_array_equal(Y, np.vstack([Ytr, Yte.T > 0]))


@pytest.mark.parametrize(
    "variables, message, row",
    [
        ({"data": np.ones((3, 2)), "target": np.eye(3)}, "ambiguous", None),
        ({"data": np.ones((3, 2)), "target": np.array([[0, 1, 2]])}, "has value 2", 2),
        ({"data": np.ones((3, 2)), "target": np.array([[0, -1, 1]])}, "all in", 0),
        ({"data": np.array([[1, 2], [np.nan, 0], [1, 1]]), "target": np.ones((1, 3))}, "NaN", 1),
        ({"data": np.ones((3, 2)), "target": np.ones((1, 4))}, "does not match the 3 instances", None),
        ({"features_x": np.ones((3, 2))}, "no feature/label variables", None),
    ],
)
def test_bad_mat_files(tmp_path, variables, message, row):
    scipy.io.savemat(tmp_path / "bad.mat", variables)
    with pytest.raises(DmlrInputError, match=message) as excinfo:
        convert(tmp_path / "bad.mat", tmp_path / "o")
    assert_error(excinfo, tmp_path / "bad.mat", row=row)


def test_npz_pairs(tmp_path):
    X = sp.random(6, 5, density=0.3, format="csr", random_state=1)
    Y = sp.csr_matrix(np.eye(6, 2, dtype=np.int8))
    sp.save_npz(tmp_path / "s_X.npz", X)
    sp.save_npz(tmp_path / "s_Y.npz", Y)
    for src in (tmp_path / "s_X.npz", (tmp_path / "s_X.npz", tmp_path / "s_Y.npz")):
        Xs, Ys, meta, _ = load(convert(src, tmp_path / "o", overwrite=True))
        assert meta["x_encoding"] == "csr"
        np.testing.assert_allclose(Xs, X.toarray())
        np.testing.assert_array_equal(Ys, Y.toarray())


def test_test_size_splits_an_input_without_splits(tmp_path, toy_dense):
    """``test_size``: a seeded train/test split of an input that gives none, ceil(test_size * n)
    test rows as scikit-learn counts; the same seed, the same rows; an input with its own splits,
    or a size that is not a fraction leaving rows on both sides, is an error before anything is
    written."""
    X = sp.random(40, 5, density=0.3, format="csr", random_state=1)
    Y = sp.csr_matrix((np.arange(80).reshape(40, 2) % 3 == 0).astype(np.int8))
    sp.save_npz(tmp_path / "s_X.npz", X)
    sp.save_npz(tmp_path / "s_Y.npz", Y)
    ds = open_dataset(convert(tmp_path / "s_X.npz", tmp_path / "a", test_size=0.25, seed=3))
    train, test = ds.splits["train"], ds.splits["test"]
    assert len(test) == 10 and len(train) == 30
    np.testing.assert_array_equal(np.union1d(train, test), np.arange(40))
    again = open_dataset(convert(tmp_path / "s_X.npz", tmp_path / "b", test_size=0.25, seed=3))
    np.testing.assert_array_equal(again.splits["test"], test)
    other = open_dataset(convert(tmp_path / "s_X.npz", tmp_path / "c", test_size=0.25, seed=4))
    assert not np.array_equal(other.splits["test"], test)
    assert len(open_dataset(convert(tmp_path / "s_X.npz", tmp_path / "d", test_size=0.21)).splits["test"]) == 9
    for bad in (0.0, 1.0, 10, True, "0.2"):
        with pytest.raises(ValueError, match="test_size must be a fraction"):
            convert(tmp_path / "s_X.npz", tmp_path / "e", test_size=bad)
    with pytest.raises(ValueError, match="leaves no training or no test row"):
        convert(tmp_path / "s_X.npz", tmp_path / "e", test_size=0.999)
    parts = [tmp_path / "p-train.npz", tmp_path / "p-test.npz"]
    for path in parts:
        sp.save_npz(path, X)
        sp.save_npz(path.with_name(path.stem + "_Y.npz"), Y)
    with pytest.raises(ValueError, match=r"gives its own splits \(train, test\)"):
        convert([(p, p.with_name(p.stem + "_Y.npz")) for p in parts], tmp_path / "e", test_size=0.2)
    assert not (tmp_path / "e").exists()


def test_npz_row_mismatch_and_naming(tmp_path):
    sp.save_npz(tmp_path / "m_X.npz", sp.random(6, 5, density=0.3, format="csr"))
    sp.save_npz(tmp_path / "m_Y.npz", sp.csr_matrix(np.ones((5, 2))))
    with pytest.raises(DmlrInputError, match="X has 6 rows") as excinfo:
        convert(tmp_path / "m_X.npz", tmp_path / "o")
    assert_error(excinfo, tmp_path / "m_Y.npz")
    sp.save_npz(tmp_path / "features.npz", sp.random(6, 5, density=0.3, format="csr"))
    with pytest.raises(DmlrInputError, match="must be named <name>_X.npz"):
        convert(tmp_path / "features.npz", tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_unknown_and_undetectable_formats(tmp_path, toy_dense):
    with pytest.raises(ValueError, match="unknown format 'xlsx'"):
        convert(toy_dense, tmp_path / "o", fmt="xlsx")
    odd = write(tmp_path / "data.bin", "hello world\n")
    with pytest.raises(DmlrInputError, match="cannot detect the file format"):
        convert(odd, tmp_path / "o")
    with pytest.raises(DmlrInputError, match="different formats"):
        convert([toy_dense, write(tmp_path / "d.svm", "0 1:1\n")], tmp_path / "o")
    with pytest.raises(FileNotFoundError):
        convert(tmp_path / "nope.arff", tmp_path / "o")
    assert detect_format(write(tmp_path / "x.dat", "@RELATION r\n")) == "arff"


# ---------------------------------------------------------------------------
# Real staged data (numbers from shared/datasets/MANIFEST.md)
# ---------------------------------------------------------------------------


def require(path):
    """Skip the calling test with a clear reason when the staged file is absent."""
    if not path.exists():
        pytest.skip(f"{path} is absent (set DMLR_DATA_DIR / DMLR_ANCHORS_DIR to the staged ../shared folders)")
    return path


def dataset(*parts):
    return require(data_dir().joinpath(*parts))


def summary(out):
    ds = open_dataset(out)
    Y = np.asarray(ds.Y.compute())
    return ds.n_samples, ds.n_features, ds.n_labels, round(float(Y.sum(axis=1).mean()), 4), ds


@pytest.mark.realdata
def test_real_emotions_train_test_splits_match_scipy_arff(tmp_path):
    tr, te = dataset("emotions", "emotions-train.arff.gz"), dataset("emotions", "emotions-test.arff.gz")
    out = convert([tr, te], tmp_path / "emotions.zarr")
    n, d, l, card, ds = summary(out)
    assert (n, d, l, card) == (593, 72, 6, 1.8685)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 391, "test": 202}
    from scipy.io import arff as scipy_arff

    with gzip.open(tr, "rt") as fh:
        ref, _ = scipy_arff.loadarff(fh)
    ref_X = np.array([[row[j] for j in range(72)] for row in ref], dtype=np.float64)
    np.testing.assert_array_equal(np.asarray(ds.X[:391].compute()), ref_X)


@pytest.mark.realdata
def test_real_medical_sparse_arff(tmp_path):
    n, d, l, card, ds = summary(convert(dataset("medical", "medical.arff.gz"), tmp_path / "m.zarr"))
    assert (n, d, l, card) == (978, 1449, 45, 1.2454)
    assert ds.is_sparse and ds.attrs["label_names"][-1] == "Class-44-786_07"
    nnz = zarr.open_group(str(tmp_path / "m.zarr"))["X"]["data"].shape[0]
    assert round(nnz / (n * d), 4) == 0.0092


@pytest.mark.realdata
def test_real_arts_mat(tmp_path):
    n, d, l, card, ds = summary(convert(dataset("yahoo_arts", "arts.mat"), tmp_path / "a.zarr"))
    assert (n, d, l, card) == (5000, 462, 26, 1.636)


@pytest.mark.realdata
def test_real_recreation_mat_splits(tmp_path):
    n, d, l, card, ds = summary(convert(dataset("yahoo_recreation", "recreation.mat"), tmp_path / "r.zarr"))
    assert (n, d, l, round(card, 3)) == (5000, 606, 22, 1.423)
    Y = np.asarray(ds.Y.compute())
    assert round(Y[ds.splits["train"]].sum(1).mean(), 4) == 1.414
    assert round(Y[ds.splits["test"]].sum(1).mean(), 4) == 1.4293


@pytest.mark.realdata
def test_real_rcv1_npz(tmp_path):
    n, d, l, card, ds = summary(convert(dataset("rcv1subset1", "rcv1sub1_X.npz"), tmp_path / "r.zarr"))
    assert (n, d, l, card) == (6000, 47236, 101, 2.8797) and ds.is_sparse


@pytest.mark.realdata
def test_real_reference_emotions_mat(tmp_path):
    path = require(anchors_dir() / "rbrl_reference" / "emotions.mat")
    n, d, l, card, ds = summary(convert(path, tmp_path / "e.zarr"))
    assert (n, d, l) == (593, 72, 6)
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 355, "test": 238}
    m = scipy.io.loadmat(path)
    np.testing.assert_array_equal(np.asarray(ds.Y.compute())[ds.splits["test"]], m["Y_test"] > 0)
    np.testing.assert_array_equal(np.asarray(ds.X.compute())[ds.splits["train"]], m["X_train"])


def test_a_rare_index_0_in_libsvm_files_is_read_0_based_with_a_warning_naming_its_lines(tmp_path):
    rows = ["1 1:0.5 2:1"] * 300
    rows[7] = "0 0:1 2:2"  # one stray index 0 in a 1-based file
    path = write(tmp_path / "d.svm", "\n".join(rows) + "\n")
    with pytest.warns(UserWarning, match=r"index 0 occurs on 1 of 300 rows only \(lines d.svm:8\).*zero_based=False"):
        X, _, meta, _ = load(convert(path, tmp_path / "o"))
    assert X.shape[1] == 3 and "0-based" in meta["source"]  # "auto" keeps scikit-learn's rule
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as given: no warning; an index 0 on half the rows: none either
        convert(path, tmp_path / "o2", zero_based=True)
        convert(write(tmp_path / "z.svm", "1 0:1\n0 1:1\n"), tmp_path / "o3")


def test_an_attribute_after_data_names_its_line(tmp_path):
    path = write(
        tmp_path / "late.arff",
        "@relation t\n@attribute a numeric\n@attribute y {0,1}\n@data\n1,0\n@ATTRIBUTE b numeric\n2,1\n",
    )
    with pytest.raises(DmlrInputError, match=r"@attribute after @data \(line 4\)") as excinfo:
        convert(path, tmp_path / "o", n_labels=1)
    assert_error(excinfo, path, line=6)
