"""Grid search with K-fold CV: splits, warm-started paths, cluster vs in-process, errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from dmlr.distributed.client import cluster_workers
from dmlr.metrics import multilabel_metrics
from dmlr.model_selection import PAPER_GRID, PAPER_METRICS, grid_search_cv, kfold_indices, param_grid
from dmlr.models import RBRL

GRID = {"alpha": [0.01, 1.0], "alpha_rank": [0.01, 1.0], "alpha_nuclear": [0.01, 1.0]}
# Tight tolerance: path (warm) and cold fits then reach the same optimum to far
# below the metrics' resolution, so their scores must agree.
SOLVER = dict(solver="spectral", tol=1e-10, max_iter=5000)


def _synthetic(n=150, d=10, l=4, seed=0):
    """Rows with a linear signal: Y = [X W + noise > 0.3]."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    W = rng.normal(size=(d, l))
    Y = (X @ W + 0.5 * rng.normal(size=(n, l)) > 0.3).astype(np.int8)
    assert Y.any(axis=0).all() and (~Y.astype(bool)).any(axis=0).all()
    return X, Y


@pytest.fixture(scope="module")
def data():
    return _synthetic()


@pytest.fixture(scope="module")
def local_result(data):
    X, Y = data
    return grid_search_cv(RBRL(**SOLVER), X, Y, GRID, cv=3, client="local", scoring="paper_mean")


def _scores(result):
    return [
        (
            r["params"],
            r["mean_score"],
            r["std_score"],
            r["fold_scores"],
            [r[f"mean_{m}"] for m in PAPER_METRICS],
            r["mean_n_iter"],
        )
        for r in result.results
    ]


# -- splits and grids ------------------------------------------------------------


@pytest.mark.parametrize("n, k", [(10, 2), (11, 3), (150, 5), (7, 7)])
def test_kfold_partitions_rows(n, k):
    splits = kfold_indices(n, k, seed=3)
    assert len(splits) == k
    vals = np.concatenate([va for _, va in splits])
    assert np.array_equal(np.sort(vals), np.arange(n))  # disjoint and covering
    sizes = sorted(len(va) for _, va in splits)
    assert sizes[-1] - sizes[0] <= 1
    for tr, va in splits:
        assert np.array_equal(np.sort(np.concatenate([tr, va])), np.arange(n))
        assert not np.intersect1d(tr, va).size
        assert np.all(np.diff(tr) > 0) and np.all(np.diff(va) > 0)


def test_kfold_deterministic_by_seed():
    a, b, c = kfold_indices(50, 5, seed=1), kfold_indices(50, 5, seed=1), kfold_indices(50, 5, seed=2)
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(a, b))
    assert not all(np.array_equal(x[1], y[1]) for x, y in zip(a, c))
    # shuffled: the first fold is not simply the first rows
    assert not np.array_equal(a[0][1], np.arange(10))


@pytest.mark.parametrize("n, k", [(10, 1), (10, 0), (3, 4)])
def test_kfold_rejects_bad_fold_counts(n, k):
    with pytest.raises(ValueError, match="fold"):
        kfold_indices(n, k)


def test_param_grid_and_paper_grid():
    points = param_grid({"alpha": [1, 2]}, alpha_nuclear=[3, 4, 5])
    assert points == [{"alpha": a, "alpha_nuclear": b} for a in (1, 2) for b in (3, 4, 5)]
    assert param_grid(alpha_rank=[0.5]) == [{"alpha_rank": 0.5}]
    assert set(PAPER_GRID) == {"alpha", "alpha_rank", "alpha_nuclear"}
    for values in PAPER_GRID.values():
        assert np.allclose(values, [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 1e1, 1e2])
    assert len(param_grid(PAPER_GRID)) == 343


# -- the search -------------------------------------------------------------------


def test_result_shape_and_best_is_argmax(local_result):
    r = local_result
    assert len(r.results) == 8 and r.n_fits == 24 and r.n_splits == 3 and r.backend == "local"
    assert [rec["params"] for rec in r.results] == param_grid(GRID)
    means = np.array([rec["mean_score"] for rec in r.results])
    assert np.all(np.isfinite(means))
    assert r.best_index == int(np.argmax(means))
    assert r.best_score == means.max()
    assert r.best_params == r.results[r.best_index]["params"]
    for rec in r.results:
        assert rec["mean_score"] == pytest.approx(np.mean(rec["fold_scores"]), abs=1e-15)
        # paper_mean is the mean of the six oriented paper metrics
        oriented = [
            1 - rec["mean_hamming_loss"],
            rec["mean_subset_accuracy"],
            rec["mean_f1_example"],
            1 - rec["mean_ranking_loss"],
            1 - rec["mean_coverage"],
            rec["mean_average_precision"],
        ]
        assert rec["mean_score"] == pytest.approx(np.mean(oriented), abs=1e-12)
    assert r.seconds > 0
    assert "paper_mean" in r.table(3) and len(r.top(3)) == 3


def test_cluster_equals_in_process(data, local_result, client2):
    from distributed import get_task_stream

    X, Y = data
    with get_task_stream(client2) as ts:
        remote = grid_search_cv(RBRL(**SOLVER), X, Y, GRID, cv=3, client=client2, scoring="paper_mean")
    assert remote.backend == "dask"
    ran = [t for t in ts.data if "fit_step" in str(t.get("key", ""))]
    assert len(ran) == 8 * 3  # a task per fit: 4 (lambda1, lambda2) settings x 2 lambda3 values x 3 folds
    assert _scores(remote) == _scores(local_result)  # exact: fixed aggregation order, same BLAS threading
    assert remote.best_params == local_result.best_params and remote.best_score == local_result.best_score
    # client=None picks up the current client (client2 is current in this test)
    current = grid_search_cv(RBRL(**SOLVER), X, Y, {"alpha_nuclear": [0.01, 1.0]}, cv=3, scoring="paper_mean")
    assert current.backend == "dask"


def test_grid_fits_dask_data_too_large_for_a_process_over_the_chunks(data, client2, monkeypatch):
    # The grid search places its fits as dmlr.fit's search does (dmlr.paths.stage_data): dask
    # data that do not fit one process are never computed into it; each fit is the model's
    # own distributed fit over the chunks, with the scores of the in-memory fits.
    import dask.array as da

    import dmlr.paths

    X, Y = data
    grid = {"alpha": [1.0], "alpha_nuclear": [1.0, 0.01]}
    here = grid_search_cv(RBRL(**SOLVER), X, Y, grid, cv=3, client="local", refit=False)
    materialized = []
    monkeypatch.setattr(dmlr.paths, "_load", lambda *args: materialized.append(1))
    monkeypatch.setattr("dmlr.distributed.placement.fits_in_memory", lambda *args: False)
    Xd, Yd = da.from_array(X, chunks=(40, -1)), da.from_array(Y, chunks=(40, -1))
    with dmlr.config_context(client=client2, n_blocks=3):
        chunked = grid_search_cv(RBRL(**SOLVER), Xd, Yd, grid, cv=3, refit=False)
    assert (here.backend, chunked.backend, materialized) == ("local", "chunks", [])
    assert chunked.best_params == here.best_params and chunked.n_fits == here.n_fits == 6
    np.testing.assert_allclose(
        [r["fold_scores"] for r in chunked.results], [r["fold_scores"] for r in here.results], atol=1e-9
    )


def test_cluster_run_survives_losing_every_copy_of_its_data(data, local_result, monkeypatch):
    # One worker (its nanny restarts it): killing it loses every copy of the scattered
    # arrays, and the fits still to run are cancelled. The search scatters again and
    # resubmits them; the finished fits are kept, and the result is the in-process one.
    import logging
    import os
    import signal

    from distributed import Client, LocalCluster

    import dmlr.model_selection as ms

    X, Y = data
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.CRITICAL
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        (first_pid,) = client.run(os.getpid).values()
        done = []

        def kill_after_two(self, *_):
            done.append(1)
            if len(done) == 2:
                os.kill(first_pid, signal.SIGKILL)

        monkeypatch.setattr(ms.SearchProgress, "fit_done", kill_after_two)
        # one worker thread: rounds of 2 settings' 3 folds (LANES_PER_SLOT / 3, rounded up)
        with pytest.warns(RuntimeWarning, match="resubmitting 4 of 6 units"):
            remote = grid_search_cv(
                RBRL(**SOLVER), X, Y, GRID, cv=3, client=client, verbose=1, refit=False, scoring="paper_mean"
            )
        assert first_pid not in client.run(os.getpid).values()  # the worker was replaced
    assert len(done) == 24  # each fit reported once: 4 settings x 2 path values x 3 folds
    assert _scores(remote) == _scores(local_result)
    assert remote.best_params == local_result.best_params


def test_warm_path_matches_cold_fits(data, local_result):
    X, Y = data
    splits = kfold_indices(X.shape[0], 3, seed=0)
    for rec in local_result.results:
        folds = []
        for tr, va in splits:
            est = RBRL(**SOLVER, **rec["params"]).fit(X[tr], Y[tr])
            assert est.converged_
            S = est.decision_function(X[va])
            folds.append(multilabel_metrics(Y[va], S, est.predict(X[va]), metrics=PAPER_METRICS))
        for m in PAPER_METRICS:
            assert rec[f"mean_{m}"] == pytest.approx(np.mean([f[m] for f in folds]), abs=1e-6), (rec["params"], m)


class _SpyRBRL(RBRL):
    """Records, per fit, alpha_nuclear and whether it started from a previous solution."""

    log: list = []

    def fit(self, X, Y, **kwargs):
        type(self).log.append((self.alpha_nuclear, self.warm_start, getattr(self, "coef_", None) is not None))
        return super().fit(X, Y, **kwargs)


@pytest.mark.filterwarnings("ignore:.*warm-started fits stopped:RuntimeWarning")  # loose tol on purpose: speed
def test_grid_runs_its_settings_in_groups_that_bound_the_models_held(data, monkeypatch):
    # One slot, 2 folds: groups of LANES_PER_SLOT / 2 = 2 settings. A group's whole path runs
    # before the next group's first fit, so at most 4 lanes' models are held at once, not 8.
    import dmlr.model_selection as ms

    monkeypatch.setattr(ms, "LANES_PER_SLOT", 4)
    X, Y = data
    log = []

    class Spy(RBRL):
        def fit(self, X, Y, **kwargs):
            log.append((self.alpha, self.alpha_nuclear))
            return super().fit(X, Y, **kwargs)

    grid = {"alpha": [0.1, 1.0, 10.0, 100.0], "alpha_nuclear": [1.0, 0.1]}
    r = grid_search_cv(Spy(tol=1e-4), X, Y, grid, cv=2, client="local", n_jobs=1, refit=False)
    group_of = {0.1: 0, 1.0: 0, 10.0: 1, 100.0: 1}
    assert [group_of[a] for a, _ in log] == [0] * 8 + [1] * 8
    assert [b for _, b in log[:8]] == [1.0] * 4 + [0.1] * 4  # lock-step within a group
    assert r.n_fits == 16 and [rec["params"] for rec in r.results] == param_grid(grid)


@pytest.mark.filterwarnings("ignore:.*warm-started fits stopped:RuntimeWarning")  # loose tol on purpose: speed
def test_path_runs_largest_first_with_warm_starts(data):
    X, Y = data
    _SpyRBRL.log = []
    grid_search_cv(
        _SpyRBRL(tol=1e-4),
        X,
        Y,
        {"alpha_nuclear": [0.1, 10.0, 1.0]},
        cv=2,
        client="local",
        n_jobs=1,  # one fit after the other: the log in the order fits are run
        refit=False,
        scoring="paper_mean",
    )
    # the path 10 -> 1 -> 0.1 on both folds in lock-step; only the first fit starts from zero
    assert _SpyRBRL.log == [(10.0, True, False)] * 2 + [(1.0, True, True)] * 2 + [(0.1, True, True)] * 2
    _SpyRBRL.log = []
    grid_search_cv(
        _SpyRBRL(tol=1e-4),
        X,
        Y,
        {"alpha_nuclear": [0.1, 10.0]},
        cv=2,
        client="local",
        refit=False,
        path_param=None,
        scoring="paper_mean",
    )
    assert all(not started_warm for _, _, started_warm in _SpyRBRL.log) and len(_SpyRBRL.log) == 4


def test_warm_start_counts_and_early_stop_warning(data, local_result):
    # tight tol: 4 (lambda1, lambda2) settings x 3 folds, one warm-started fit each, none stopped at once
    assert local_result.n_warm_fits == 12 and local_result.n_warm_first_test_stops == 0
    X, Y = data
    # loose tol, relative-objective-change test alone: it passes right after a warm start from
    # the neighbour's optimum (a path's second value: the third and later start from the
    # secant's prediction, predict_path_start)
    grid = {"alpha_nuclear": [1.0, 0.1]}
    with pytest.warns(RuntimeWarning, match="warm-started fits stopped at the solver's first stopping test"):
        r = grid_search_cv(
            RBRL(tol=1e-3, solver="spectral", gradient_tol=None),
            X,
            Y,
            grid,
            cv=3,
            client="local",
            refit=False,
            scoring="paper_mean",
        )
    assert r.n_warm_fits == 3 and 0 < r.n_warm_first_test_stops <= 3
    assert r.n_warm_first_test_stops == sum(it <= 2 for rec in r.results[1:] for it in rec["fold_n_iter"])
    # the gradient-mapping test (the default of the non-paper step rules) keeps them going
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        g = grid_search_cv(
            RBRL(tol=1e-3, solver="spectral"), X, Y, grid, cv=3, client="local", refit=False, scoring="paper_mean"
        )
    assert g.n_warm_first_test_stops == 0


def test_default_rule_warm_starts_do_not_stop_short(data):
    # the default step rule along a path with a loose tol: every warm-started fit ends at least
    # as close to the optimum as the paper step's cold fit with the same tol (the accuracy the
    # default rules stop at), as a cold fit of the default rule does; and the grid search sees
    # no fit stopped at its first test
    X, Y = data
    warm = RBRL(tol=1e-3, warm_start=True)
    for alpha_nuclear in (10.0, 1.0, 0.1, 0.01):
        warm.set_params(alpha_nuclear=alpha_nuclear).fit(X, Y)
        cold = RBRL(tol=1e-3, alpha_nuclear=alpha_nuclear).fit(X, Y)
        paper = RBRL(tol=1e-3, alpha_nuclear=alpha_nuclear, solver="paper").fit(X, Y)
        best = RBRL(tol=1e-12, alpha_nuclear=alpha_nuclear, max_iter=5000).fit(X, Y).objective_history_[-1]
        assert warm.converged_ and warm.n_iter_ > 2 and paper.converged_
        for fit in (warm, cold):
            assert best <= fit.objective_history_[-1] <= paper.objective_history_[-1], alpha_nuclear
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        g = grid_search_cv(
            RBRL(tol=1e-3), X, Y, {"alpha_nuclear": [10.0, 1.0, 0.1, 0.01]}, cv=3, refit=False, scoring="paper_mean"
        )
    assert g.n_warm_fits == 9 and g.n_warm_first_test_stops == 0


def test_refit_has_best_params(data, local_result):
    X, Y = data
    best = local_result.best_estimator
    assert best is not None
    assert {k: best.get_params()[k] for k in GRID} == local_result.best_params
    assert best.n_features_in_ == X.shape[1] and best.converged_
    cold = RBRL(**SOLVER, **local_result.best_params).fit(X, Y)
    np.testing.assert_allclose(best.coef_, cold.coef_, rtol=0, atol=1e-12)
    assert (
        grid_search_cv(
            RBRL(tol=1e-4), X, Y, {"alpha_nuclear": [1.0]}, cv=2, client="local", refit=False, scoring="paper_mean"
        ).best_estimator
        is None
    )


def test_loss_scoring_is_minimized_and_dask_input(data):
    import dask.array as da

    X, Y = data
    grid = {"alpha": [0.01, 100.0], "alpha_nuclear": [0.01, 10.0]}
    r = grid_search_cv(RBRL(tol=1e-6), X, Y, grid, cv=3, scoring="ranking_loss", client="local", refit=False)
    means = [rec["mean_score"] for rec in r.results]
    assert not r.greater_is_better and r.best_index == int(np.argmin(means)) and r.best_score == min(means)
    assert means == [rec["mean_ranking_loss"] for rec in r.results]
    rd = grid_search_cv(
        RBRL(tol=1e-6),
        da.from_array(X, chunks=(40, 10)),
        da.from_array(Y, chunks=(40, 4)),
        grid,
        cv=3,
        scoring="ranking_loss",
        client="local",
        refit=False,
    )
    assert _scores(rd) == _scores(r)


@pytest.mark.parametrize(
    "grid, kwargs, message",
    [
        ({"lambda9": [1.0]}, {}, "unknown parameter.*lambda9"),
        ({"alpha": []}, {}, "'alpha' are empty"),
        ({"alpha": 1.0}, {}, "must be a list"),
        ({}, {}, "grid is empty"),
        ({"alpha": [1.0]}, {"scoring": "accuracy_at_7"}, "unknown scoring 'accuracy_at_7'"),
        ({"alpha": [1.0]}, {"cv": 1}, "at least 2 folds"),
        ({"alpha": [1.0]}, {"cv": 151}, "more than the 150 training rows"),
        ({"alpha": [1.0]}, {"client": "somewhere"}, "client must be"),
        ({"alpha": [1.0]}, {"path_param": "lamda3"}, "path_param 'lamda3'"),
        ({"alpha": [1.0, 1.0]}, {}, "'alpha' repeat"),
    ],
)
def test_errors(data, grid, kwargs, message):
    X, Y = data
    with pytest.raises(ValueError, match=message):
        grid_search_cv(RBRL(max_iter=5), X, Y, grid, **{"client": "local", **kwargs})


def test_cv_units_fit_one_block_whatever_the_data_size(monkeypatch):
    # the unit is the parallel grain: blocks on threads inside it would oversubscribe the
    # cores the other units run on, so each unit's fits ask for one block
    import os

    import scipy.sparse as sp

    from dmlr.distributed import chunks as chunks_module
    from dmlr.models import rbrl as rbrl_module

    asked = []

    def recording(*args, **kwargs):
        asked.append(kwargs.get("n_blocks"))
        return chunks_module.make_chunkset(*args, **kwargs)

    monkeypatch.setattr(rbrl_module, "make_chunkset", recording)
    X, Y = _synthetic(n=3000, d=40)
    Xs = sp.csr_matrix(X)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert chunks_module.local_block_count(Xs) == 2  # what the units would get unasked
    grid_search_cv(
        RBRL(max_iter=5), Xs, Y, {"alpha_nuclear": [1.0, 0.1]}, cv=2, refit=False, client="local", scoring="paper_mean"
    )
    assert asked and set(asked) == {1}


@pytest.mark.filterwarnings("ignore:.*warm-started fits stopped:RuntimeWarning")  # loose tol on purpose: speed
def test_no_client_runs_in_process_without_starting_a_cluster(data):
    from distributed import default_client

    try:
        default_client()
        pytest.skip("a default Dask client exists in this session")
    except ValueError:
        pass
    X, Y = data
    r = grid_search_cv(RBRL(tol=1e-4), X, Y, {"alpha_nuclear": [1.0, 0.1]}, cv=2, refit=False, scoring="paper_mean")
    assert r.backend == "local"
    with pytest.raises(ValueError):
        default_client()


def test_best_params_for_a_metric_is_that_metrics_best_record(local_result):
    r = local_result
    for metric in ("subset_accuracy", "average_precision", "hamming_loss", "coverage"):
        values = np.array([rec[f"mean_{metric}"] for rec in r.results])
        best = np.argmin(values) if metric in ("hamming_loss", "coverage") else np.argmax(values)
        assert r.best_params_for(metric) == r.results[int(best)]["params"], metric
    # the records of the default scoring differ per metric here, or the check above tests nothing
    assert (
        len(
            {
                tuple(r.best_params_for(m).items())
                for m in ("subset_accuracy", "coverage", "hamming_loss", "average_precision")
            }
        )
        > 1
    )
    with pytest.raises(ValueError, match="did not record 'one_error'"):
        r.best_params_for("one_error")
    with pytest.raises(ValueError, match="did not record 'n_iter'"):
        r.best_params_for("n_iter")


# ----------------------------------------------------------------------------
# One engine: every search places its units the same way and returns one type
# ----------------------------------------------------------------------------


def _worker_address(X, Y, splits, index):
    from distributed import get_worker

    return index, get_worker().address, float(np.asarray(X).sum())


def test_units_spread_over_the_workers_beside_a_copy_of_the_data(client2):
    # the data are a future one worker computed: without a copy on each worker and the
    # units placed in turn, the scheduler runs them where the data are, one worker idle
    from dmlr.paths import UnitRunner

    X = client2.submit(np.ones, (50, 3), pure=False)
    with UnitRunner((X, np.zeros((50, 1)), []), client2) as runner:
        out = runner.map(_worker_address, [(i,) for i in range(6)])
    assert [o[0] for o in out] == list(range(6)) and all(o[2] == 150.0 for o in out)
    workers = sorted(cluster_workers(client2))
    assert [o[1] for o in out] == [workers[i % 2] for i in range(6)]


def test_grid_search_defaults_to_the_common_scoring_and_reports_progress(data, capsys):
    from dmlr.model_selection import DEFAULT_SCORING

    X, Y = data
    grid = {"alpha_nuclear": [1.0, 0.1]}
    quiet = grid_search_cv(RBRL(tol=1e-4), X, Y, grid, cv=2, refit=False)
    assert quiet.scoring == DEFAULT_SCORING and not quiet.greater_is_better
    assert capsys.readouterr().out == ""
    loud = grid_search_cv(RBRL(tol=1e-4), X, Y, grid, cv=2, refit=False, verbose=2)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("search: fit")]
    # 2 values x 2 folds
    assert [line.split(";")[0] for line in lines] == [f"search: fit {k} of 4" for k in (1, 2, 3, 4)]
    assert _scores(loud) == _scores(quiet)


def test_omf_search_runs_on_the_engine_with_the_same_scores_anywhere(client2):
    from dmlr.model_selection import SearchResult
    from dmlr.models import OMF
    from dmlr.models.omf import cross_validate_omf

    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 6))
    Y = (X[:, :3] + 0.3 * rng.normal(size=(120, 3)) > 0).astype(np.int8)
    kwargs = dict(alpha_codes=[0.1, 1.0], top_ks=[1], thresholds=[0.5], cv=2, refit=False)
    grid = {"alpha": [1e-3, 1e-1]}
    est = OMF(n_components=2, n_epochs=2, eta0=0.05)
    here = cross_validate_omf(est, X, Y, grid, n_jobs=1, **kwargs)
    threads = cross_validate_omf(est, X, Y, grid, n_jobs=2, **kwargs)
    remote = cross_validate_omf(est, X, Y, grid, client=client2, **kwargs)
    assert isinstance(here, SearchResult) and here.scoring == "f1_micro" and remote.backend == "dask"
    assert len(here.results) == 2 * 2 * 2 and here.n_fits == 4
    assert all(r["mean_n_iter"] > 0 for r in here.results)  # the fits' minibatch updates
    for other in (threads, remote):
        assert [r["fold_scores"] for r in other.results] == [r["fold_scores"] for r in here.results]
        assert other.best_params == here.best_params
    with pytest.raises(ValueError, match="label metric"):
        cross_validate_omf(est, X, Y, grid, scoring="ranking_loss", **kwargs)


class _PathModel:
    _warm_start_arrays = ("coef_", "dual_coef_")


@pytest.mark.parametrize(
    "values, expected",
    [
        ((100.0, 10.0, 1.0), "secant"),  # equal steps in log: W + (W - W_behind)
        ((100.0, 10.0, 10**0.5), "half"),  # half the step: half the secant
        ((100.0, 10.0, 0.01), "secant"),  # a longer step: never beyond the last step's length
        ((100.0, 10.0, 100.0), "same"),  # back up the path: no prediction
        ((10.0, 10.0, 1.0), "same"),  # no step behind
    ],
)
def test_path_predictor_moves_the_start_along_the_secant(values, expected):
    from dmlr.paths import path_point, predict_path_start

    rng = np.random.default_rng(0)
    est, W, old = _PathModel(), rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    est.coef_ = W
    predict_path_start(est, {"coef_": old, "dual_coef_": rng.normal(size=(2, 2))}, values)
    want = {"secant": 2 * W - old, "half": W + 0.5 * (W - old), "same": W}[expected]
    np.testing.assert_allclose(est.coef_, want, rtol=0, atol=1e-12)
    assert not hasattr(est, "dual_coef_")  # only the arrays the model holds
    assert set(path_point(est)) == {"coef_"}
    est.dual_coef_ = np.ones((3, 3))
    predict_path_start(est, {"dual_coef_": np.zeros((2, 2))}, (100.0, 10.0, 1.0))
    np.testing.assert_array_equal(est.dual_coef_, np.ones((3, 3)))  # another shape: left as it is


class StartRecordingRBRL(RBRL):
    """RBRL recording, per fit, its parameters, the point the fit starts from (None: cold)
    and the one it ends at (also used by tests/test_tuning.py)."""

    log: list = []

    def fit(self, X, Y, **kwargs):
        start = None if getattr(self, "coef_", None) is None else self.coef_.copy()
        super().fit(X, Y, **kwargs)
        type(self).log.append((self.get_params(), start, self.coef_.copy()))
        return self


def test_grid_path_starts_from_the_secant_prediction(data):
    X, Y = data
    StartRecordingRBRL.log = []
    grid_search_cv(
        StartRecordingRBRL(tol=1e-5),
        X,
        Y,
        {"alpha_nuclear": [10.0, 1.0, 0.1, 0.001]},
        cv=2,
        client="local",
        n_jobs=1,
        refit=False,
        scoring="paper_mean",
    )
    for fits in (StartRecordingRBRL.log[0::2], StartRecordingRBRL.log[1::2]):  # the folds in lock-step
        assert [f[0]["alpha_nuclear"] for f in fits] == [10.0, 1.0, 0.1, 0.001]
        assert fits[0][1] is None
        np.testing.assert_array_equal(fits[1][1], fits[0][2])
        np.testing.assert_allclose(fits[2][1], 2 * fits[1][2] - fits[0][2], rtol=0, atol=1e-12)
        # two decades after a step of one: the secant's step at most
        np.testing.assert_allclose(fits[3][1], 2 * fits[2][2] - fits[1][2], rtol=0, atol=1e-12)
