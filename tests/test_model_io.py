"""Model files: data only (no pickle), validated on load, written atomically."""

import io
import json
import zipfile

import numpy as np
import pytest

import dmlr
from dmlr.errors import DmlrInputError
from dmlr.models import RBRL


@pytest.fixture
def fitted():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    Y = (rng.random((40, 2)) < 0.5).astype(np.int8)
    return RBRL(max_iter=20).fit(X, Y), X


def test_round_trip_keeps_params_and_predictions(fitted, tmp_path):
    model, X = fitted
    path = model.save(tmp_path / "m.npz")
    again = dmlr.load(path)
    assert again.get_params() == model.get_params()
    assert again.objective_history_ == model.objective_history_ and again.n_iter_ == model.n_iter_
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == [
            "__dmlr__.npy",
            "coef_.npy",
            "feature_offset_.npy",
            "feature_scale_.npy",
            "threshold_.npy",
        ]


def _rewrite(path, **entries):
    """Replace entries of a saved model's zip with raw .npy payloads."""
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    files.update(entries)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def _npy(arr, allow_pickle=False):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


class _Boom:
    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('x')",))


def test_tampered_files_raise_and_never_run_code(fitted, tmp_path, monkeypatch):
    model, _ = fitted
    monkeypatch.chdir(tmp_path)
    path = model.save(tmp_path / "m.npz")
    _rewrite(path, **{"coef_.npy": _npy(np.array([_Boom()], dtype=object), allow_pickle=True)})
    with pytest.raises(DmlrInputError):
        dmlr.load(path)
    assert not (tmp_path / "PWNED").exists()

    path = model.save(tmp_path / "m2.npz")
    meta = json.loads(np.load(path)["__dmlr__"].tobytes())
    meta["model"] = "os.system"
    _rewrite(path, **{"__dmlr__.npy": _npy(np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))})
    with pytest.raises(DmlrInputError, match="unknown model type"):
        dmlr.load(path)

    path = model.save(tmp_path / "m3.npz")
    _rewrite(path, **{"coef_.npy": _npy(np.zeros((2, 2)))})
    with pytest.raises(DmlrInputError, match="shape"):
        dmlr.load(path)

    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    with pytest.raises(DmlrInputError):
        dmlr.load(tmp_path / "junk.npz")


def test_interrupted_save_keeps_the_old_file(fitted, tmp_path, monkeypatch):
    model, _ = fitted
    path = model.save(tmp_path / "m.npz")
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", fail)
    with pytest.raises(KeyboardInterrupt):
        model.save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]


def _with_meta(path, **changes):
    meta = json.loads(np.load(path)["__dmlr__"].tobytes())
    meta.update(changes)
    _rewrite(path, **{"__dmlr__.npy": _npy(np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))})
    return meta


def test_files_before_the_renames_are_refused_naming_their_format_version(fitted, tmp_path):
    model, _ = fitted
    path = model.save(tmp_path / "v1.npz")
    # what format version 1 wrote: the old parameter names, no target encoding
    meta = json.loads(np.load(path)["__dmlr__"].tobytes())
    old = {"lambda1": 1.0, "lambda2": 0.01, "lambda3": 0.1, "kernel": None, "step": "paper", "backend": "auto"}
    attrs = {k: v for k, v in meta["attributes"].items() if k not in ("classes_", "target_type_", "label_dtype_")}
    _with_meta(path, format_version=1, params=old, attributes=attrs)
    with pytest.raises(DmlrInputError, match="format version 1 .*CHANGELOG.md.*reads format version 4"):
        dmlr.load(path)
    path = model.save(tmp_path / "v5.npz")
    _with_meta(path, format_version=5)
    with pytest.raises(DmlrInputError, match="unsupported model format version 5"):
        dmlr.load(path)


def test_a_version_3_file_reads_its_step_rule_as_solver(fitted, tmp_path):
    model, X = fitted
    path = model.save(tmp_path / "v3.npz")
    meta = json.loads(np.load(path)["__dmlr__"].tobytes())
    params = dict(meta["params"])
    params["step_rule"] = params.pop("solver")
    _with_meta(path, format_version=3, params=dict(params, step_rule="spectral"))
    loaded = dmlr.load(path)
    assert loaded.get_params()["solver"] == "spectral" and "step_rule" not in loaded.get_params()
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))


@pytest.mark.parametrize(
    ("y", "kind"), [(["no", "yes", "no", "maybe"] * 10, "multiclass"), ([3, 7, 7, 3] * 10, "binary")]
)
def test_class_labels_survive_the_file(tmp_path, y, kind):
    X = np.random.default_rng(1).normal(size=(40, 3))
    model = RBRL(max_iter=30).fit(X, y)
    again = dmlr.load(model.save(tmp_path / "c.npz"))
    assert again.target_type_ == kind and again.classes_.dtype == model.classes_.dtype
    np.testing.assert_array_equal(again.classes_, model.classes_)
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    path = model.save(tmp_path / "bad.npz")
    _with_meta(
        path, attributes={**json.loads(np.load(path)["__dmlr__"].tobytes())["attributes"], "label_dtype_": "object"}
    )
    with pytest.raises(DmlrInputError, match="target encoding"):
        dmlr.load(path)
