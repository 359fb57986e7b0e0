"""One model registry: a new model is one class and one registration line."""

import numpy as np
import pytest

import dmlr
from dmlr.cli import main
from dmlr.datasets import make_multilabel
from dmlr.models import ESTIMATORS, RBRL
from dmlr.models.base import MODEL_NAMES, MODEL_REGISTRY, Axis, load_model, register_model
from dmlr.tuning import search_space


@pytest.fixture
def toy():
    """A registered model (removed again afterwards): RBRL with a search space of its own."""

    @register_model(name="toy")
    class ToyRanker(RBRL):
        _search_space = (Axis("alpha", (0.0, -1.0, -2.0), per_row=True),)

    yield ToyRanker
    MODEL_NAMES.pop("toy")
    MODEL_REGISTRY.pop("ToyRanker")


def test_registered_names_are_what_fit_knows():
    assert set(dmlr.api.MODELS) == {"rbrl", "kernel_rbrl", "ranksvm", "mmp", "linear", "oml", "knn", "omf"}
    assert set(ESTIMATORS) == set(MODEL_NAMES.values()) == set(MODEL_REGISTRY.values())
    with pytest.raises(ValueError, match="known models: .*'kernel_rbrl'"):
        dmlr.api.make_model("nope")


def test_a_subclass_inherits_its_parents_search_space():
    class Tuned(RBRL):
        pass

    assert search_space(Tuned()) == search_space(RBRL()) and search_space(Tuned())[0].name == "alpha"


def test_a_registered_toy_model_is_fitted_searched_saved_and_on_the_command_line(toy, tmp_path, capsys):
    store = tmp_path / "syn.zarr"
    make_multilabel(store, n_samples=300, n_features=6, n_labels=4, seed=2)
    model = dmlr.fit(store, model="toy", cv=2, verbose=0, max_iter=200)
    assert type(model) is toy and list(model.best_params_) == ["alpha"]
    n_train = int(model.search_.n_rows[0] / 2)  # the folds' training rows (2 folds)
    grid = sorted({r["value"] for r in model.search_.results}, reverse=True)
    assert grid[0] == pytest.approx(n_train * 10.0**0, rel=0.01)  # the toy's own grid starts at 1 per row
    path = model.save(tmp_path / "toy.npz")
    assert type(load_model(path)) is toy
    np.testing.assert_array_equal(load_model(path).coef_, model.coef_)
    out = tmp_path / "cli.npz"
    assert main(["fit", str(store), "--out", str(out), "--model", "toy", "--max-iter", "200", "--quiet"]) == 0
    assert "chose alpha=" in capsys.readouterr().out and type(load_model(out)) is toy


def test_checkpoint_support_is_declared_on_the_class(tmp_path):
    X = np.random.default_rng(0).normal(size=(40, 3))
    Y = (X[:, :2] > 0).astype(np.int8)
    with pytest.raises(ValueError, match="does not support checkpoints"):
        dmlr.fit((X, Y), model="linear", search=False, checkpoint=tmp_path / "ck", verbose=0)
    assert RBRL._supports_checkpoint and not dmlr.models.LinearMultiLabel._supports_checkpoint
