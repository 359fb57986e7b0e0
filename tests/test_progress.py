"""Progress reporting of long fits (dmlr.progress), in RBRL and on the command line."""

import io
import math
import re

import numpy as np
import pytest

from dmlr.cli import main
from dmlr.datasets import make_multilabel
from dmlr.models import RBRL
from dmlr.progress import ProgressReporter, format_seconds, in_notebook

LINE = re.compile(r"iter\s+(\d+)\s+objective (\S+)\s+rel\.change\s+(\S+)\s+elapsed (\S+) s\s+(.*)$")


def _data(n=200, d=8, l=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = (X @ rng.normal(size=(d, l)) + rng.normal(size=(n, l)) > 0.3).astype(np.int8)
    return X, Y


def _parse(out):
    return [LINE.search(line) for line in out.splitlines() if "iter" in line]


def test_rbrl_verbose_prints_iteration_objective_and_relative_change(capsys):
    X, Y = _data()
    # the paper step's single-step test, which the reporter's "left" estimate models
    model = RBRL(verbose=5, max_iter=500, tol=1e-6, solver="paper").fit(X, Y)
    matches = _parse(capsys.readouterr().out)
    assert matches and all(m is not None for m in matches)
    its = [int(m.group(1)) for m in matches]
    # the first iteration, every 5th, and the last (converged) one
    assert its == sorted(set([1] + list(range(5, model.n_iter_ + 1, 5)) + [model.n_iter_]))
    hist = model.objective_history_
    for m in matches:
        t = int(m.group(1))
        assert float(m.group(2)) == pytest.approx(hist[t - 1], rel=1e-6)
        if t >= 2:
            expected = abs(hist[t - 1] - hist[t - 2]) / abs(hist[t - 2])
            assert float(m.group(3)) == pytest.approx(expected, rel=1e-2)
        assert float(m.group(4)) >= 0
    assert model.converged_ and "(converged)" in matches[-1].group(5)
    assert all(m.group(5).startswith("left ") for m in matches[:-1])


def test_max_iter_stop_is_reported():
    stream = io.StringIO()
    rep = ProgressReporter(10, max_iter=25, tol=1e-12, file=stream)
    for t in range(1, 26):
        rep(t, 100.0 + 1.0 / t, 0.01 * t)
    text = stream.getvalue()
    assert [int(m.group(1)) for m in _parse(text)] == [1, 10, 20, 25]
    assert "(max_iter reached)" in text.splitlines()[-1]


def test_a_line_below_tol_is_held_until_the_run_goes_on_or_finishes():
    stream = io.StringIO()
    rep = ProgressReporter(2, max_iter=100, tol=1e-3, file=stream)
    objectives = [10.0, 5.0, 4.9999, 4.0, 3.99999, 3.999989]  # rel. change <= tol at t = 3, 5, 6
    for t, f in enumerate(objectives, start=1):
        rep(t, f, 0.1 * t)
    lines = stream.getvalue().splitlines()
    # t=4 was due (shown); t=2 due and above tol (shown); nothing claims convergence mid-run
    assert [int(m.group(1)) for m in _parse(stream.getvalue())] == [1, 2, 4]
    assert all("converged" not in line for line in lines)
    rep(7, 3.0, 0.7)  # the run went on after t=6 ... (6 was due: now shown, marked below tol)
    rep(8, 2.9999999, 0.8)  # ... and t=8 is held: it may be the last
    assert [int(m.group(1)) for m in _parse(stream.getvalue())] == [1, 2, 4, 6]
    assert "rel.change <= tol, going on" in stream.getvalue().splitlines()[-1]
    rep.finish(converged=True)
    last = stream.getvalue().splitlines()[-1]
    assert LINE.search(last).group(1) == "8" and "(converged)" in last
    rep.finish(converged=True)  # idempotent
    assert len(stream.getvalue().splitlines()) == 5


def test_rbrl_with_an_extra_stopping_test_reports_convergence_once(capsys):
    X, Y = _data()
    model = RBRL(verbose=3, max_iter=500, tol=1e-5, solver="spectral").fit(X, Y)
    out = capsys.readouterr().out
    its = [int(m.group(1)) for m in _parse(out)]
    assert its == sorted(set(its)) and its[-1] == model.n_iter_
    status = "(converged)" if model.converged_ else "(max_iter reached)"
    assert [line for line in out.splitlines() if "(" in line] == [out.splitlines()[-1]]
    assert status in out.splitlines()[-1]


def test_quiet_prints_nothing(capsys):
    X, Y = _data()
    RBRL(verbose=0, max_iter=50).fit(X, Y)
    rep = ProgressReporter(0, max_iter=10, tol=1e-6)
    for t in range(1, 11):
        assert rep(t, 10.0 / t, 0.1 * t) is False
    assert capsys.readouterr().out == "" and rep.lines == 0


def test_estimate_is_finite_after_a_few_iterations(capsys):
    # objective 1 + 0.5**t: the relative change falls geometrically, by about half per iteration
    tol, per_iter = 1e-8, 0.25
    rep = ProgressReporter(1, max_iter=None, tol=tol)
    F = lambda t: 1.0 + 0.5**t
    actual_stop = next(t for t in range(2, 200) if abs(F(t) - F(t - 1)) / F(t - 1) <= tol)
    for t in range(1, 18):
        rep(t, F(t), per_iter * t)
    assert rep.last_estimate is not None and math.isfinite(rep.last_estimate)
    assert not rep.last_estimate_capped
    # trend-based, so close to the true remaining time (a rough guide: within 30 % here)
    assert rep.last_estimate == pytest.approx((actual_stop - 17) * per_iter, rel=0.3)
    out = capsys.readouterr().out.splitlines()[-1]
    assert re.search(r"left ~\d+\.\d+ s", out)


def test_a_fast_first_fall_does_not_shorten_the_estimate():
    # the relative change falls 10x per iteration for 10 iterations, then by 10% per iteration
    tol, per_iter = 1e-12, 0.1
    logs = [math.log(0.1) * min(t, 10) + math.log(0.9) * max(t - 10, 0) for t in range(1, 400)]
    F = [1.0]
    for lc in logs:
        F.append(F[-1] * (1.0 - math.exp(lc)))
    actual_stop = next(t for t, lc in enumerate(logs, 1) if math.exp(lc) <= tol)
    rep = ProgressReporter(0, tol=tol)
    for t in range(1, 31):
        rep(t, F[t - 1], per_iter * t)
    # the old fit over every iteration since the first said about a quarter of this
    assert rep.last_estimate == pytest.approx((actual_stop - 30) * per_iter, rel=0.5)


def test_estimate_falls_back_to_the_max_iter_cap():
    rep = ProgressReporter(1, max_iter=100, tol=1e-6, file=io.StringIO())
    for t in range(1, 11):  # relative change not decreasing: no trend, only the cap
        rep(t, 1000.0 * (0.99**t), 0.5 * t)
    assert rep.last_estimate == pytest.approx(90 * 0.5) and rep.last_estimate_capped


def test_estimate_from_a_real_fit_is_finite(monkeypatch):
    import dmlr.models.rbrl as rbrl_module

    made = []

    def spy(*args, **kwargs):
        made.append(ProgressReporter(*args, **kwargs, file=io.StringIO()))
        return made[-1]

    monkeypatch.setattr(rbrl_module, "ProgressReporter", spy)
    X, Y = _data()
    RBRL(verbose=1, max_iter=8, tol=1e-12).fit(X, Y)
    rep = made[0]
    assert rep.lines == 8 and math.isfinite(rep.last_estimate) and rep.last_estimate >= 0


def test_outside_a_kernel_lines_are_printed():
    assert not in_notebook()
    assert format_seconds(3.14159) == "3.14 s" and format_seconds(125) == "2 min 05 s"
    assert format_seconds(7300) == "2 h 02 min" and format_seconds(math.inf) == "?"
    with pytest.raises(ValueError):
        ProgressReporter(-1)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress") / "syn.zarr"
    make_multilabel(path, n_samples=400, n_features=8, n_labels=4, seed=2)
    return path


def test_cli_fit_shows_progress_by_default_and_quiet_hides_it(store, tmp_path, capsys):
    out = tmp_path / "m.npz"
    assert main(["fit", str(store), "--out", str(out), "--no-search", "--max-iter", "40", "--tol", "0"]) == 0
    text = capsys.readouterr().out
    assert [int(m.group(1)) for m in _parse(text) if m] == [1, 10, 20, 30, 40]
    assert "model saved to" in text
    assert main(["fit", str(store), "--out", str(out), "--no-search", "--max-iter", "40", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "iter" not in text.replace("iterations", "") and "model saved to" in text
    assert (
        main(["fit", str(store), "--out", str(out), "--no-search", "--max-iter", "12", "--tol", "0", "--verbose", "4"])
        == 0
    )
    assert [int(m.group(1)) for m in _parse(capsys.readouterr().out) if m] == [1, 4, 8, 12]
    with pytest.raises(SystemExit):
        main(["fit", str(store), "--out", str(out), "--quiet", "--verbose", "3"])


def test_estimate_follows_the_trend_not_the_last_noisy_change():
    # L-BFGS's relative change falls geometrically but jumps up and down from one iteration
    # to the next: the estimate reads the fitted trend at the current iteration, so it
    # keeps counting down instead of swinging with the latest change
    rng = np.random.default_rng(0)
    tol, per_iter = 1e-6, 0.1
    logs = [math.log(1e-1) - 0.05 * t + rng.normal(0.0, 1.0) for t in range(1, 400)]
    F = [1.0]
    for lc in logs:
        F.append(F[-1] * (1.0 - math.exp(lc)))
    rep = ProgressReporter(0, tol=tol)
    ratios = []
    for t in range(1, 121):
        rep(t, F[t - 1], per_iter * t)
        if t >= 60 and math.isfinite(rep.last_estimate):
            true_left = max((math.log(1e-1) - 0.05 * t) - math.log(tol), 0.0) / 0.05 * per_iter
            ratios.append(rep.last_estimate / true_left)
    assert len(ratios) >= 55
    assert 0.6 < min(ratios) and max(ratios) < 1.6
