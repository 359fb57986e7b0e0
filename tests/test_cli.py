"""The command line, end to end on a small synthetic store."""

import json
import subprocess
import sys

import pytest

from dmlr.cli import main
from dmlr.datasets import make_multilabel


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "syn.zarr"
    make_multilabel(path, n_samples=600, n_features=10, n_labels=5, seed=1)
    return path


def test_info_fit_evaluate(store, tmp_path, capsys):
    assert main(["info", str(store), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["n_samples"] == 600 and info["n_labels"] == 5 and set(info["splits"]) == {"train", "test"}
    model = tmp_path / "m.npz"
    assert main(["fit", str(store), "--out", str(model), "--alpha", "0.5", "--max-iter", "50"]) == 0
    assert "model saved to" in capsys.readouterr().out and model.exists()
    assert main(["evaluate", str(model), str(store), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert 0.0 <= metrics["hamming_loss"] <= 1.0 and "ndcg_at_5" in metrics


def test_fit_without_values_searches_and_prints_the_choice(store, tmp_path, capsys):
    from dmlr.models.base import load_model

    model = tmp_path / "auto.npz"
    # the linear model: its search is the cheaper one (tests/test_tuning.py covers model="auto")
    assert main(["fit", str(store), "--out", str(model), "--model", "rbrl", "--solver", "spectral", "--quiet"]) == 0
    out = capsys.readouterr().out
    chosen = load_model(model).alpha
    assert f"chose alpha={chosen:.4g} by 5-fold cross-validation (ranking_loss)" in out
    assert "model saved to" in out
    assert main(["fit", str(store), "--out", str(model), "--model", "rbrl", "--no-search", "--quiet"]) == 0
    assert "chose" not in capsys.readouterr().out and load_model(model).alpha == 1.0
    args = ["fit", str(store), "--out", str(model), "--model", "rbrl", "--solver", "spectral", "--quiet"]
    assert main([*args, "--search", "alpha,alpha_nuclear"]) == 0
    out, fitted = capsys.readouterr().out, load_model(model)
    assert f"chose alpha={fitted.alpha:.4g}, alpha_nuclear={fitted.alpha_nuclear:.4g} by 5-fold" in out
    assert main([*args, "--search", "gamma"]) == 2
    assert "cannot search ['gamma']" in capsys.readouterr().err


def test_errors_are_reported_not_raised(store, tmp_path, capsys):
    assert main(["fit", str(store), "--out", str(tmp_path / "m.npz"), "--split", "nope"]) == 2
    assert "unknown split 'nope'" in capsys.readouterr().err
    assert main(["info", str(tmp_path / "missing.zarr")]) == 2
    assert main(["fit", str(store), "--out", str(tmp_path / "m.npz"), "--model", "xgb"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_fit_a_kernel_model_from_the_command_line(store, tmp_path, capsys):
    from dmlr.models.base import load_model

    out = tmp_path / "k.npz"
    assert (
        main(
            [
                "fit",
                str(store),
                "--out",
                str(out),
                "--kernel",
                "rbf",
                "--gamma",
                "0.05",
                "--solver",
                "spectral",
                "--max-iter",
                "30",
            ]
        )
        == 0
    )
    model = load_model(out)
    assert model.kernel == "rbf" and model.gamma_ == 0.05 and model.solver == "spectral"
    assert model.dual_coef_.shape[1] == 5
    capsys.readouterr()
    assert main(["evaluate", str(out), str(store), "--json"]) == 0
    assert 0.0 <= json.loads(capsys.readouterr().out)["hamming_loss"] <= 1.0


def test_demo_keeps_one_store_per_seed(tmp_path, small_presets, client2, capsys):
    import numpy as np

    import dmlr

    for seed in (1, 2, 1):
        assert main(["demo", "--dir", str(tmp_path), "--seed", str(seed), "--max-iter", "3", "--verbose", "0"]) == 0
    capsys.readouterr()
    assert small_presets == [("mediamill", 1), ("mediamill", 2)]  # the second --seed 1 reuses its own store
    Y1, Y2 = (dmlr.open_dataset(tmp_path / f"mediamill_synthetic_seed{s}.zarr").Y.compute() for s in (1, 2))
    assert not np.array_equal(Y1, Y2)
    assert {p.name for p in tmp_path.glob("*.npz")} == {
        "rbrl_mediamill_synthetic_seed1.npz",
        "rbrl_mediamill_synthetic_seed2.npz",
    }


def test_misspelt_param_is_one_line_and_exit_2(store, tmp_path, capsys):
    code = main(
        ["fit", str(store), "--model", "rbrl", "--param", "alpha_nucelar=0.1", "--out", str(tmp_path / "m.npz")]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "alpha_nucelar" in err and "alpha_nuclear" in err and "Traceback" not in err


def test_info_rounds_for_reading_and_a_searched_model_repr_has_plain_floats(store, capsys):
    import dmlr

    assert main(["info", str(store)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("cardinality"))
    value = line.split()[1]
    assert len(value.replace(".", "")) <= 4, line
    X, Y = dmlr.open_dataset(store).arrays("train")
    model = dmlr.fit((X.compute(), Y.compute()), "rbrl", max_iter=30, verbose=0)
    assert "np.float64" not in repr(model) and type(model.best_params_["alpha"]) is float


def test_every_option_has_help_and_no_rest_markup():
    import argparse

    from dmlr.cli import build_parser

    parser = build_parser()
    assert "``" not in parser.format_help()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subparsers.choices.items():
        assert "``" not in sub.format_help(), name
        for action in sub._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"dmlr {name} {action.option_strings or action.dest} has no help"


def test_fit_says_what_it_fits_first_and_evaluate_says_on_which_rows(store, tmp_path, capsys):
    model = tmp_path / "m.npz"
    assert main(["fit", str(store), "--out", str(model), "--max-iter", "30"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("dmlr: fitting ") and "choosing alpha by cross-validation" in lines[0]
    assert "training rows" in lines[0]
    assert main(["evaluate", str(model), str(store)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "split 'test'" in first and "rows" in first


def test_a_store_without_splits_is_fitted_evaluated_and_reported_on_every_row(tmp_path, capsys):
    """No split: fit and evaluate use every row, each saying so in one warning line (not Python's
    file:line excerpt), and evaluate prints its metrics (it used to fail after computing them,
    asking the store for its missing 'test' split)."""
    import numpy as np

    from dmlr.data.store import write_dataset

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6))
    Y = (X[:, :3] + rng.normal(size=(120, 3)) > 0).astype(np.int8)
    store = write_dataset(tmp_path / "nosplit.zarr", X, Y)
    model = tmp_path / "m.npz"
    with pytest.warns(UserWarning, match="has no splits; using all 120 rows"):
        assert main(["fit", str(store), "--out", str(model), "--alpha", "1", "--max-iter", "20", "--quiet"]) == 0
    capsys.readouterr()
    with pytest.warns(UserWarning, match="has no splits; using all 120 rows"):
        assert main(["evaluate", str(model), str(store)]) == 0
    out = capsys.readouterr().out
    assert "every row (120 rows)" in out.splitlines()[0] and "ranking_loss" in out
    # from the shell, the warning is one line
    run = subprocess.run(
        [sys.executable, "-m", "dmlr.cli", "evaluate", str(model), str(store)], capture_output=True, text=True
    )
    assert run.returncode == 0 and "every row (120 rows)" in run.stdout
    assert run.stderr.splitlines() == [f"dmlr evaluate: warning: {store} has no splits; using all 120 rows"]
    assert main(["evaluate", str(model), str(store), "--split", "valid"]) == 2  # a named split it lacks
    assert "unknown split 'valid'" in capsys.readouterr().err


def test_convert_splits_one_file_for_fit_and_evaluate(tmp_path, capsys):
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.random((80, 6)) * (rng.random((80, 6)) < 0.5))
    sp.save_npz(tmp_path / "d_X.npz", X)
    sp.save_npz(tmp_path / "d_Y.npz", sp.csr_matrix((X[:, :3].toarray() > 0.3).astype(np.int8)))
    store = tmp_path / "d.zarr"
    assert main(["convert", str(tmp_path / "d_X.npz"), str(store), "--test-size", "0.25", "--seed", "1"]) == 0
    capsys.readouterr()
    assert main(["info", str(store), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"] == {"test": 20, "train": 60}
    model = tmp_path / "m.npz"
    assert main(["fit", str(store), "--out", str(model), "--alpha", "1", "--max-iter", "20", "--quiet"]) == 0
    assert main(["evaluate", str(model), str(store)]) == 0
    out, err = capsys.readouterr()
    assert "split 'test' (20 rows)" in out and "warning" not in err
