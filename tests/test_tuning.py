"""Automatic hyper-parameters (dmlr.tuning, dmlr.fit's search): choice, widening, resume."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin

import dmlr
from dmlr import paths, tuning
from dmlr.data.store import write_dataset
from dmlr.distributed.client import cluster_workers
from dmlr.model_selection import grid_search_cv
from dmlr.models import RBRL
from dmlr.tuning import Axis, search
from tests.test_model_selection import StartRecordingRBRL

# Tight tolerance: warm-started path fits and cold fits reach the same optimum far below
# the metrics' resolution.
SOLVER = dict(solver="spectral", tol=1e-10, max_iter=5000)


class KnownBest(ClassifierMixin, BaseEstimator):
    """Scores = the true labels (first columns of X) + |log10(alpha / best)| x noise (next columns).

    Every validation metric is best at ``alpha == best`` exactly, and worse the
    further alpha is from it (in log scale): a problem whose answer is known.
    """

    def __init__(self, alpha=1.0, best=1.0, warm_start=False, tie=None):
        self.alpha = alpha
        self.best = best
        self.warm_start = warm_start
        self.tie = tie

    def fit(self, X, Y):
        self.n_labels_ = Y.shape[1]
        self.n_iter_ = 1
        # ``tie``: at that alpha, the fold that validates on row 0 (X's last column: row ids)
        # scores as well as the best value.
        self.tied_ = self.tie is not None and self.alpha == self.tie and not np.any(X[:, -1] == 0)
        return self

    def decision_function(self, X):
        n_labels = self.n_labels_
        weight = 0.0 if self.tied_ else abs(math.log10(self.alpha) - math.log10(self.best))
        return X[:, :n_labels] + weight * X[:, n_labels : 2 * n_labels]

    def labels_from_scores(self, S):
        return (S > 0).astype(np.int8)


GRID = tuple(np.round(np.arange(2.0, -2.01, -0.5), 6))  # 10**2 ... 10**-2, half decades


@pytest.fixture
def known_best_space(monkeypatch):
    monkeypatch.setattr(KnownBest, "_search_space", (Axis("alpha", GRID),), raising=False)


def _known_data(n=200, n_labels=4, seed=0):
    rng = np.random.default_rng(seed)
    Y = (rng.random((n, n_labels)) < 0.4).astype(np.int8)
    Y[0], Y[1] = 1, 0  # no label column constant
    X = np.hstack([2.0 * Y - 1.0, 5.0 * rng.normal(size=(n, n_labels))])
    return X, Y


def _synthetic(n=150, d=10, n_labels=4, seed=0):
    """Rows with a linear signal: Y = [X W + noise > 0.3]."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    W = rng.normal(size=(d, n_labels))
    Y = (X @ W + 1.5 * rng.normal(size=(n, n_labels)) > 0.3).astype(np.int8)
    return X, Y


@pytest.mark.parametrize("tie, patience, n_fitted", [(None, 1, 5), (1.0, 1, 5), (None, 2, 5), (1.0, 2, 6)])
def test_search_picks_the_known_interior_best(known_best_space, tie, patience, n_fitted):
    X, Y = _known_data()
    X = np.hstack([X, np.arange(len(X))[:, None]])  # row ids, which the scores ignore
    result = search(KnownBest(best=10**0.5, tie=tie), X, Y, n_jobs=1, patience=patience)
    assert result.best_params["alpha"] == pytest.approx(10**0.5, rel=1e-12)
    assert result.n_widened == 0
    # The path runs from 10**2 down. Past the best (the 4th value) the 5th, 10**0, scores
    # worse on every fold, and the rest of the path is abandoned at once; where it ties the
    # best on one fold, the path goes on until ``patience`` values have not beaten the best.
    assert result.n_abandoned == 5 * (len(GRID) - n_fitted)
    assert [r["value"] for r in result.results] == pytest.approx([10.0**e for e in GRID[:n_fitted]])


@pytest.mark.parametrize("best_exp, added", [(3.5, [2.5, 3.0, 3.5, 4.0]), (-3.0, [-2.5, -3.0, -3.5, -4.0])])
def test_grid_widens_when_the_best_is_on_its_edge(known_best_space, best_exp, added):
    X, Y = _known_data()
    result = search(KnownBest(best=10**best_exp), X, Y, n_jobs=1, patience=None)
    assert result.best_params["alpha"] == pytest.approx(10**best_exp, rel=1e-12)
    assert result.n_widened == 2
    values = sorted(r["value"] for r in result.results)
    assert values == pytest.approx(sorted(10.0**e for e in (*GRID, *added)))


def test_upward_widening_is_not_abandoned_at_its_far_end(known_best_space):
    # The values added above the grid's edge are fitted from the largest down: the first,
    # 10**3, is worse on every fold than the edge 10**2, but the next, 10**2.5, is the best.
    X, Y = _known_data()
    result = search(KnownBest(best=10**2.4), X, Y, n_jobs=1)
    assert result.n_widened == 1
    assert result.best_params["alpha"] == pytest.approx(10**2.5, rel=1e-12)


def test_widening_stops_at_max_widen(known_best_space):
    X, Y = _known_data()
    result = search(KnownBest(best=10**5), X, Y, n_jobs=1, max_widen=1)
    assert result.n_widened == 1
    assert result.best_params["alpha"] == pytest.approx(10**3, rel=1e-12)  # the widened grid's edge


def test_search_agrees_with_exhaustive_cross_validation():
    # The warm-started, abandoning search chooses what an exhaustive cold grid search of
    # the same values, on the same folds and metric, chooses; the choice is interior.
    X, Y = _synthetic()
    result = search(RBRL(**SOLVER), X, Y, n_jobs=1, max_widen=0, scoring="average_precision", tol=None, solver=None)
    n_train = min(len(tr) for tr, _ in dmlr.model_selection.kfold_indices(len(X), 5, 0))
    values = [n_train * 10.0**e for e in RBRL._search_space[0].exponents]
    exhaustive = grid_search_cv(
        RBRL(**SOLVER), X, Y, {"alpha": values}, cv=5, seed=0, scoring="average_precision", client="local"
    )
    assert result.best_params["alpha"] == pytest.approx(exhaustive.best_params["alpha"], rel=1e-12)
    assert min(values) < result.best_params["alpha"] < max(values)
    by_value = {r["params"]["alpha"]: r["mean_score"] for r in exhaustive.results}
    for r in result.results:
        assert r["mean_score"] == pytest.approx(by_value[r["value"]], abs=1e-9)


def test_cross_validation_fits_stop_at_the_search_tol_unless_their_own_is_looser():
    X, Y = _synthetic()
    own = search(RBRL(**SOLVER), X, Y, n_jobs=1, max_widen=0, patience=None, tol=None)
    loose = search(RBRL(**SOLVER), X, Y, n_jobs=1, max_widen=0, patience=None, tol=1e-4)
    assert [r["value"] for r in loose.results] == [r["value"] for r in own.results]
    for fast, slow in zip(loose.results, own.results):
        assert fast["mean_n_iter"] < slow["mean_n_iter"]
    # an estimator's own tol looser than the search's is kept
    kept = search(RBRL(**{**SOLVER, "tol": 1e-3}), X, Y, n_jobs=1, max_widen=0, patience=None, tol=1e-4)
    as_is = search(RBRL(**{**SOLVER, "tol": 1e-3}), X, Y, n_jobs=1, max_widen=0, patience=None, tol=None)
    assert kept.results == as_is.results


class RecordsSolver(KnownBest):
    """KnownBest with solver settings; every fit records the ones it ran with."""

    fits: list = []

    def __init__(self, alpha=1.0, best=1.0, warm_start=False, tol=1e-6, solver="adaptive"):
        super().__init__(alpha=alpha, best=best, warm_start=warm_start)
        self.tol = tol
        self.solver = solver

    def fit(self, X, Y):
        RecordsSolver.fits.append((self.tol, self.solver))
        return super().fit(X, Y)


def test_cross_validation_fits_use_the_search_solver_and_the_refit_the_models(monkeypatch):
    monkeypatch.setattr(RecordsSolver, "_search_space", (Axis("alpha", GRID),), raising=False)
    monkeypatch.setattr(RecordsSolver, "fits", [])
    X, Y = _known_data()
    model = dmlr.fit((X, Y), RecordsSolver(best=10**0.5), search=True)
    assert model.best_params_["alpha"] == pytest.approx(10**0.5, rel=1e-12)
    *cv_fits, refit = RecordsSolver.fits
    assert len(cv_fits) == model.search_.n_fits > 0
    assert set(cv_fits) == {(tuning.SEARCH_TOL, tuning.SEARCH_SOLVER)}
    assert refit == (1e-6, "adaptive")
    monkeypatch.setattr(RecordsSolver, "fits", [])
    search(RecordsSolver(best=10**0.5), X, Y, n_jobs=1, tol=None, solver=None)
    assert set(RecordsSolver.fits) == {(1e-6, "adaptive")}


def test_unknown_parameter_and_scoring_are_errors():
    X, Y = _synthetic(n=40)
    with pytest.raises(ValueError, match="cannot search"):
        search(RBRL(), X, Y, params=["gamma"])
    with pytest.raises(ValueError, match="unknown scoring"):
        search(RBRL(), X, Y, scoring="accuracy_of_nothing")


# -- dmlr.fit ------------------------------------------------------------------------


def test_fit_searches_by_default_and_explicit_values_skip_it():
    X, Y = _synthetic()
    auto = dmlr.fit((X, Y), "rbrl", **SOLVER)
    assert set(auto.best_params_) == {"alpha"}
    assert auto.alpha == auto.best_params_["alpha"]
    assert auto.cv_results_["mean_test_score"] and auto.search_seconds_ > 0
    assert len(auto.cv_results_["split4_test_score"]) == len(auto.cv_results_["value"])
    # the model is the refit on all rows with the chosen value
    plain = RBRL(**SOLVER, alpha=auto.alpha).fit(X, Y)
    np.testing.assert_array_equal(auto.coef_, plain.coef_)

    explicit = dmlr.fit((X, Y), "rbrl", alpha=2.0, **SOLVER)
    assert not hasattr(explicit, "best_params_") and explicit.alpha == 2.0
    instance = dmlr.fit((X, Y), RBRL(alpha=2.0, **SOLVER))
    assert not hasattr(instance, "best_params_") and instance.alpha == 2.0
    asked = dmlr.fit((X, Y), RBRL(alpha=2.0, **SOLVER), search=True)
    assert asked.alpha == auto.alpha


def test_fit_searches_the_parameters_it_is_given_by_name(monkeypatch):
    # search=[names] searches those axes, the ones searched only on request included, in the
    # search space's order; the model is the refit at the chosen values
    X, Y = _synthetic()
    asked = []
    searched = tuning.search

    def recorded(*args, **kwargs):
        asked.append(kwargs["params"])
        return searched(*args, **kwargs)

    monkeypatch.setattr(tuning, "search", recorded)
    both = dmlr.fit((X, Y), "rbrl", search=["alpha_nuclear", "alpha"], **SOLVER)
    assert asked == [["alpha", "alpha_nuclear"]]
    assert set(both.best_params_) == {"alpha", "alpha_nuclear"}
    assert [r["param"] for r in both.search_.results][0] == "alpha"  # alpha first, then alpha_nuclear
    assert (both.alpha, both.alpha_nuclear) == (both.best_params_["alpha"], both.best_params_["alpha_nuclear"])
    plain = RBRL(**SOLVER, alpha=both.alpha, alpha_nuclear=both.alpha_nuclear).fit(X, Y)
    np.testing.assert_array_equal(both.coef_, plain.coef_)
    # an instance's value of a named parameter is replaced, as with search=True
    nuclear = dmlr.fit((X, Y), RBRL(alpha=2.0, alpha_nuclear=5.0, **SOLVER), search=["alpha_nuclear"])
    assert set(nuclear.best_params_) == {"alpha_nuclear"} and nuclear.alpha == 2.0


@pytest.mark.parametrize(
    "search, params, message",
    [
        (["gamma"], {}, "cannot search"),
        (["alpha"], {"alpha": 1.0}, "give one or the other"),
        ([], {}, "non-empty list"),
        ("alpha", {}, "non-empty list"),
    ],
)
def test_fit_search_names_are_checked(search, params, message):
    X, Y = _synthetic(n=40)
    with pytest.raises(ValueError, match=message):
        dmlr.fit((X, Y), "rbrl", search=search, **params)


def test_fit_searches_rank_svm_alpha_by_default():
    # cross-validation picks a different alpha on every staged set (docs/models/ranksvm.md),
    # so no fixed default serves: dmlr.fit searches it unless it is given
    X, Y = _synthetic()
    auto = dmlr.fit((X, Y), "ranksvm", n_updates=2000, random_state=0)
    assert set(auto.best_params_) == {"alpha"} and auto.alpha == auto.best_params_["alpha"]
    explicit = dmlr.fit((X, Y), "ranksvm", alpha=1e-3, n_updates=2000, random_state=0)
    assert not hasattr(explicit, "best_params_") and explicit.alpha == 1e-3


def test_searched_model_saves_and_reloads(tmp_path):
    X, Y = _synthetic()
    model = dmlr.fit((X, Y), "rbrl", **SOLVER)
    loaded = dmlr.load(model.save(tmp_path / "m.npz"))
    assert loaded.alpha == model.alpha
    assert loaded.best_params_ == model.best_params_  # what the search chose travels with the model
    assert not hasattr(dmlr.load(RBRL(**SOLVER).fit(X, Y).save(tmp_path / "plain.npz")), "best_params_")
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))


def test_same_choice_in_process_in_parallel_and_on_the_cluster(client2, monkeypatch):
    import dask.array as da

    X, Y = _synthetic(n=120)
    est = RBRL(**SOLVER)
    here = search(est, X, Y, n_jobs=1, client="local")
    threads = search(est, X, Y, n_jobs=2, client="local")  # every round on 2 threads
    tasks = search(est, X, Y, client=client2)  # units as tasks on the 2 workers
    Xd, Yd = da.from_array(X, chunks=(25, -1)), da.from_array(Y, chunks=(25, -1))
    with dmlr.config_context(backend="dask", n_blocks=3, client=client2):
        chunked = search(est, Xd, Yd)  # each fit distributed over the workers' chunks
    assert (here.backend, threads.backend, tasks.backend, chunked.backend) == ("local", "local", "dask", "chunks")
    for other in (threads, tasks):
        assert other.best_params == here.best_params
        assert [r["fold_scores"] for r in other.results] == [r["fold_scores"] for r in here.results]
    assert chunked.best_params == here.best_params
    np.testing.assert_allclose(
        [r["fold_scores"] for r in chunked.results], [r["fold_scores"] for r in here.results], atol=1e-9
    )


def _nbytes(obj) -> int:
    """Bytes of the arrays in a (nested) result the client received."""
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    if hasattr(obj, "indptr"):
        return obj.data.nbytes + obj.indices.nbytes + obj.indptr.nbytes
    return int(getattr(obj, "nbytes", 0))


def test_units_run_on_threads_under_the_callers_settings(monkeypatch):
    import threading

    seen = []
    fit_step = paths.fit_step

    def spy(*args):
        seen.append((threading.get_ident(), dmlr.get_config()["kernel_memory"]))
        return fit_step(*args)

    monkeypatch.setattr(paths, "fit_step", spy)
    X, Y = _synthetic(n=80)
    with dmlr.config_context(kernel_memory="recompute"):
        threads = search(RBRL(**SOLVER), X, Y, n_jobs=2, client="local")
    assert threading.get_ident() not in {ident for ident, _ in seen}
    assert {memory for _, memory in seen} == {"recompute"}
    assert len(seen) == threads.n_fits
    seen.clear()
    here = search(RBRL(**SOLVER), X, Y, n_jobs=1, client="local")  # n_jobs=1: here, one unit at a time
    assert {ident for ident, _ in seen} == {threading.get_ident()}
    assert [r["fold_scores"] for r in threads.results] == [r["fold_scores"] for r in here.results]


def test_chunked_search_never_gathers_the_data(client2, monkeypatch):
    # Every result the client receives from the cluster (Client._gather: computes, futures'
    # results) is recorded: on the chunked path none holds the rows of a fold. The in-process
    # path, which computes X into memory first, is caught by the same spy.
    import dask.array as da
    from distributed import Client

    received = []
    gather = Client._gather

    async def spy(self, futures, *args, **kwargs):
        out = await gather(self, futures, *args, **kwargs)
        received.append(_nbytes(out))
        return out

    monkeypatch.setattr(Client, "_gather", spy)
    monkeypatch.setattr(RBRL, "_search_space", (Axis("alpha", (-1.0, -2.0), per_row=True),))
    X, Y = _synthetic(n=600, d=40)
    Xd, Yd = da.from_array(X, chunks=(100, -1)), da.from_array(Y, chunks=(100, -1))
    one_fold = (X.nbytes + Y.nbytes) // 3
    with dmlr.config_context(backend="dask", client=client2):
        result = search(RBRL(max_iter=20), Xd, Yd, cv=3, max_widen=0)
    assert result.backend == "chunks" and result.n_fits == 6
    assert received and max(received) < one_fold / 10, max(received)
    received.clear()
    with dmlr.config_context(client=client2):
        held = search(RBRL(max_iter=20), Xd, Yd, cv=3, max_widen=0, client=client2)
    # units in memory on the workers: a worker computes the rows from the chunks, and the
    # client receives scores and fold models only
    assert held.backend == "dask" and held.best_params == result.best_params
    assert received and max(received) < one_fold / 10, max(received)


def _spy_sparse_concatenation(install: bool):
    """On a worker: count dask's concatenations of pydata sparse blocks (``install``), or
    restore them and return the count."""
    import sparse
    from dask.array.dispatch import concatenate_lookup

    if install:
        real = concatenate_lookup.dispatch(sparse.GCXS)

        def spy(*args, **kwargs):
            spy.calls += 1
            return real(*args, **kwargs)

        spy.calls, spy.real = 0, real
        concatenate_lookup.register((sparse.COO, sparse.GCXS), spy)
        return 0
    spy = concatenate_lookup.dispatch(sparse.GCXS)
    concatenate_lookup.register((sparse.COO, sparse.GCXS), spy.real)
    return spy.calls


def test_units_data_from_sparse_chunks_are_stacked_without_pydata_concatenation(client2, tmp_path):
    # a fresh worker's first pydata sparse concatenation compiles Numba code for seconds: the
    # rows the units hold are stacked by scipy from the chunks, the same matrix
    import scipy.sparse as sp

    X, Y = _synthetic(n=300, d=30)
    X[X < 0.5] = 0.0
    store = write_dataset(tmp_path / "s.zarr", sp.csr_matrix(X), Y, chunk_rows=64)
    Xd, Yd = dmlr.open_dataset(store).arrays(None)
    assert len(Xd.chunks[0]) > 1 and type(Xd._meta).__module__.startswith("sparse")
    client2.run(_spy_sparse_concatenation, True)
    try:
        x, y = paths._load(Xd, Yd, client2)
        X_held, Y_held = x.result(), y.result()
    finally:
        calls = client2.run(_spy_sparse_concatenation, False)
    assert sum(calls.values()) == 0, calls
    assert sp.isspmatrix_csr(X_held) and np.array_equal(X_held.toarray(), X)
    np.testing.assert_array_equal(Y_held, Y)


def test_chunked_folds_are_row_masks_over_the_chunks(monkeypatch):
    # The fits and scores of a chunked search see the selected rows of each input chunk,
    # chunk for chunk: no chunk gathers rows of several (a larger chunk, a copy on the workers).
    import dask.array as da

    seen = []

    class Probe(KnownBest):
        def fit(self, X, Y):
            seen.append((X.chunks[0], Y.chunks[0]))
            return super().fit(X, Y)

        def decision_function(self, X):
            seen.append((X.chunks[0],))
            return super().decision_function(X)

    monkeypatch.setattr(Probe, "_search_space", (Axis("alpha", GRID[:2]),), raising=False)
    X, Y = _known_data(n=400)
    Xd, Yd = da.from_array(X, chunks=(50, -1)), da.from_array(Y, chunks=(50, -1))
    with dmlr.config_context(backend="dask"):
        result = search(Probe(), Xd, Yd, cv=4, max_widen=0)
    assert result.backend == "chunks" and seen
    splits = dmlr.model_selection.kfold_indices(400, 4, 0)
    expected = set()
    for train, val in splits:
        for rows in (train, val):
            expected.add(tuple(int(c) for c in np.bincount(rows // 50, minlength=8) if c))
    for chunks in seen:
        for c in chunks:
            assert tuple(c) in expected


# -- checkpoints -----------------------------------------------------------------------

_KILLED_SCRIPT = """
import sys
import dmlr
dmlr.fit(sys.argv[1], "rbrl", checkpoint=sys.argv[2], solver="spectral", tol=1e-10, max_iter=5000)
"""


def test_killed_search_resumes_to_the_same_choice(tmp_path):
    X, Y = _synthetic(n=400, d=30, n_labels=6)
    store = write_dataset(tmp_path / "d.zarr", X, Y, splits={"train": np.arange(400)})
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SCRIPT, str(store), str(ckpt)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        start_new_session=True,
    )
    units = ckpt / "search" / "units"
    deadline = time.monotonic() + 300
    while not (units.exists() and any(not p.name.startswith(".partial-") for p in units.glob("*.json"))):
        assert proc.poll() is None, "the search ended before a unit was recorded"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # a killed client (and its unit processes): no cleanup runs
    assert proc.wait() == -signal.SIGKILL

    resumed = dmlr.fit(store, "rbrl", checkpoint=ckpt, resume=True, **SOLVER)
    fresh = dmlr.fit(store, "rbrl", **SOLVER)
    assert resumed.search_.n_resumed_units >= 1
    assert resumed.best_params_ == fresh.best_params_
    assert resumed.cv_results_ == fresh.cv_results_
    np.testing.assert_array_equal(resumed.coef_, fresh.coef_)


def test_checkpoint_of_another_search_is_refused(tmp_path):
    X, Y = _synthetic(n=80)
    first = search(RBRL(**SOLVER), X, Y, n_jobs=1, checkpoint=tmp_path / "c")
    with pytest.raises(FileExistsError, match="resume=True"):
        first = search(RBRL(**SOLVER), X, Y, n_jobs=1, checkpoint=tmp_path / "c")
    with pytest.raises(ValueError, match="another search"):
        search(RBRL(**SOLVER), X, Y, n_jobs=1, cv=3, checkpoint=tmp_path / "c", resume=True)
    again = search(RBRL(**SOLVER), X, Y, n_jobs=1, checkpoint=tmp_path / "c", resume=True)
    assert again.n_resumed_units == first.n_fits > 0 and again.n_fits == 0
    assert again.best_params == first.best_params and again.results == first.results


def test_auto_model_is_the_kernel_model_for_small_dense_sets_else_linear(monkeypatch):
    import dask.array as da
    import scipy.sparse as sp

    from dmlr import api
    from dmlr.models import KernelRBRL

    X, Y = _synthetic(n=120)
    exact = dmlr.fit((X, Y), **SOLVER)  # model="auto", searched
    assert type(exact) is KernelRBRL and exact.n_components is None and exact.dual_coef_.shape == (120, 4)
    assert set(exact.best_params_) == {"alpha"}
    monkeypatch.setattr(api, "AUTO_EXACT_KERNEL_MAX_ROWS", 100)
    monkeypatch.setattr(api, "AUTO_KERNEL_COMPONENTS", 50)
    nystroem = dmlr.fit((X, Y), search=False)
    assert type(nystroem) is KernelRBRL and nystroem.landmarks_.shape == (50, 10)
    linear = {"alpha_rank": api.AUTO_LINEAR_ALPHA_RANK, "scaling": "tfidf"}
    text = dmlr.fit((sp.csr_matrix(X), Y), search=False)  # bag-of-words features: tf-idf
    assert type(text) is RBRL and {k: text.get_params()[k] for k in linear} == linear and text.scaling_ == "tfidf"
    mostly_zero = np.where(np.abs(X) > 1.0, X, 0.0)  # about 32% nonzero, stored dense
    text_dense = dmlr.fit((mostly_zero, Y), search=False)
    assert type(text_dense) is RBRL and {k: text_dense.get_params()[k] for k in linear} == linear
    lazy = (da.from_array(X, chunks=(50, 10)), da.from_array(Y, chunks=(50, 4)))
    assert type(dmlr.fit(lazy, search=False)) is KernelRBRL
    monkeypatch.setattr(api, "AUTO_KERNEL_MAX_ROWS", 100)
    large = dmlr.fit((X, Y), search=False)  # dense beyond the kernel's rows: standardized
    assert type(large) is RBRL and large.alpha_rank == api.AUTO_LINEAR_ALPHA_RANK and large.scaling_ == "standard"
    with pytest.raises(ValueError, match="gamma"):
        dmlr.fit((sp.csr_matrix(X), Y), gamma=0.1)  # a kernel parameter for the linear model


# -- staged search, placement, progress ------------------------------------------------


@pytest.fixture
def small_stages(monkeypatch):
    """Stages from 100 rows up to a quarter of the rows, on test-sized data."""
    monkeypatch.setattr(tuning, "HALVING_FIRST_ROWS", 100)
    monkeypatch.setattr(tuning, "HALVING_MIN_ROWS", 300)


def test_stage_rows_grow_to_a_quarter_of_the_rows():
    assert tuning.stage_rows(1_000) == [1_000]
    assert tuning.stage_rows(12_920) == [4096]  # a quarter is fewer than the first stage's rows
    assert tuning.stage_rows(30_970) == [7742]  # within twice the first stage: one stage
    assert tuning.stage_rows(87_856) == [4096, 21_964]
    assert tuning.stage_rows(1_000_000) == [4096, 16_384, 65_536, 250_000]


def test_staged_search_walks_from_the_previous_choice(small_stages):
    X, Y = _synthetic(n=1600, d=20, n_labels=5)
    staged = search(RBRL(**SOLVER), X, Y, n_jobs=1, client="local")
    assert staged.n_rows == [100, 400]
    assert [r["n_rows"] for r in staged.results][-1] == 400
    last = [r for r in staged.results if r["n_rows"] == 400]
    assert all(len(r["fold_scores"]) == tuning.HALVING_FOLDS for r in last)
    # the choice is the best value of the last stage (fold rows x 10**e), moved to the
    # vertex of the parabola through it and its neighbours: within a quarter decade
    best = min(last, key=lambda r: r["mean_score"])
    assert abs(math.log10(staged.best_params["alpha"] / best["value"])) <= 0.25 + 1e-12
    # a later stage walks from the previous choice: few values
    assert len(last) <= 1 + 2 * tuning.HALVING_MAX_STEPS and len(last) < len(GRID)
    # ... starting from the previous stage's choice, carried as it is (to the grid's quarter decade)
    middle = [r for r in staged.results if r["n_rows"] == 100]
    carried = min(middle, key=lambda r: (r["mean_score"], -r["value"]))["value"]
    assert min(abs(math.log10(r["value"] / carried)) for r in last) <= 0.125 + 1e-9
    full = search(RBRL(**SOLVER), X, Y, n_jobs=1, client="local", halving=False)
    assert full.n_rows == [1600] and {r["n_rows"] for r in full.results} == {1600}
    assert full.n_splits == 5
    cv = staged.cv_results()
    assert cv["n_rows"] == [r["n_rows"] for r in staged.results]
    assert staged.n_splits == 2 and set(cv) >= {"split0_test_score", "split1_test_score"}


@pytest.mark.parametrize("best_exp, widened", [(0.0, ()), (1.5, (2.0, 1.5))])
def test_a_staged_search_starts_its_path_at_the_axis_staged_top(monkeypatch, small_stages, best_exp, widened):
    """The first stage's path starts at ``Axis.staged_top``, not the grid's top, and a best value
    above it is still found: the grid widens upwards from there. Without stages, the whole grid."""
    monkeypatch.setattr(KnownBest, "_search_space", (Axis("alpha", GRID, per_row=True, staged_top=1.0),), raising=False)
    X, Y = _known_data(n=1600)
    n_train = 50  # the first stage's 100 rows, in 2 folds
    result = search(KnownBest(best=n_train * 10**best_exp), X, Y, n_jobs=1, patience=None)
    assert result.n_rows[0] == 100
    first = sorted((r["value"] for r in result.results if r["n_rows"] == 100), reverse=True)
    expected = [*widened, *(e for e in GRID if e <= 1.0)]
    assert first == pytest.approx([n_train * 10**e for e in expected])
    assert result.n_widened == len(widened) // 2
    whole = search(KnownBest(best=n_train * 10**best_exp), X, Y, n_jobs=1, patience=None, halving=False)
    assert sorted((r["value"] for r in whole.results), reverse=True)[:2] == pytest.approx(
        [1280 * 10**e for e in GRID[:2]]
    )


def test_a_staged_search_starts_rbrl_weights_below_the_grid_top(small_stages):
    """RBRL's ridge and nuclear-norm paths of a staged search's first stage start at 10**-2
    and 10**-1.5 per training row of a fold (``Axis.staged_top``), below the grid's top of
    10**-1: every value above the start was added by widening the grid upwards, a decade at
    a time."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1600, 20))
    Y = X @ rng.normal(size=(20, 3)) @ rng.normal(size=(3, 8)) + 0.3 * rng.normal(size=(1600, 8)) > 0.3
    result = search(RBRL(**SOLVER), X, Y.astype(np.int8), n_jobs=1, params=["alpha", "alpha_nuclear"])
    assert result.n_rows == [100, 400]
    decades = []
    for name, top in (("alpha", -2.0), ("alpha_nuclear", -1.5)):
        start = 50 * 10**top  # the first stage's 100 rows, in 2 folds of 50 training rows
        first = [r["value"] for r in result.results if r["n_rows"] == 100 and r["param"] == name]
        assert min(first) < start  # the path ran down from its start
        decades.append(math.log10(max(first) / start))
    assert decades == pytest.approx(np.round(decades)) and sum(np.round(decades)) == result.n_widened > 0


def test_staged_search_same_choice_on_threads_workers_and_chunks(small_stages, client2):
    import dask.array as da
    from distributed import Client, LocalCluster

    X, Y = _synthetic(n=600, d=15, n_labels=4)
    est = RBRL(**SOLVER)
    here = search(est, X, Y, n_jobs=1, client="local")
    threads = search(est, X, Y, n_jobs=2, client="local")
    Xd, Yd = da.from_array(X, chunks=(150, -1)), da.from_array(Y, chunks=(150, -1))
    two = search(est, Xd, Yd, client=client2)  # units whole inside the 2 workers, data computed there
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=False) as client1:
            one = search(est, Xd, Yd, client=client1)
    with dmlr.config_context(backend="dask", n_blocks=3, client=client2):
        chunked = search(est, Xd, Yd)  # each fit over the workers' chunks
    assert (two.backend, one.backend, chunked.backend) == ("dask", "dask", "chunks")
    assert here.n_rows == [150]  # a quarter of the rows, one stage (within twice the first)
    for other in (threads, two, one):
        assert other.best_params == here.best_params
        assert [r["fold_scores"] for r in other.results] == [r["fold_scores"] for r in here.results]
    # over the chunks each fit sums its blocks in another order: the same scores up to rounding,
    # hence the same grid value, and a parabola vertex equal up to rounding
    assert chunked.best_params == pytest.approx(here.best_params, rel=1e-9)
    np.testing.assert_allclose(
        [s for r in chunked.results for s in r["fold_scores"]],
        [s for r in here.results for s in r["fold_scores"]],
        atol=1e-9,
    )


def test_progress_lines_for_a_long_search_only(monkeypatch, capsys):
    from dmlr import progress

    X, Y = _synthetic(n=120)
    monkeypatch.setattr(progress, "PROGRESS_AFTER_SECONDS", 1e9)  # every search is "short"
    search(RBRL(**SOLVER), X, Y, n_jobs=1, verbose=1)
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(progress, "PROGRESS_AFTER_SECONDS", 0.0)  # every search is "long"
    search(RBRL(**SOLVER), X, Y, n_jobs=1, verbose=0)
    assert capsys.readouterr().out == ""
    result = search(RBRL(**SOLVER), X, Y, n_jobs=1, verbose=1)
    lines = capsys.readouterr().out.splitlines()
    values = [line for line in lines if line.startswith("search alpha: value")]
    assert len(values) == sum(r["param"] == "alpha" for r in result.results)
    assert all("best" in line and "left ~" in line for line in values)
    assert lines[-1].startswith(f"search alpha: chose {result.best_params['alpha']:.4g}")


def test_progress_names_the_value_a_staged_search_chose(monkeypatch, capsys, small_stages):
    """A staged search's choice lies between the last stage's values (the parabola's vertex):
    its last line reports that value, the one the model is fitted with, not the best value fitted."""
    from dmlr import progress

    X, Y = _synthetic(n=1600, d=20, n_labels=5)
    monkeypatch.setattr(progress, "PROGRESS_AFTER_SECONDS", 0.0)
    result = search(RBRL(**SOLVER), X, Y, n_jobs=1, client="local", verbose=1)
    chose = [line for line in capsys.readouterr().out.splitlines() if line.startswith("search alpha: chose")]
    fitted = [r["value"] for r in result.results if r["n_rows"] == result.n_rows[-1]]
    assert result.best_params["alpha"] not in fitted  # between the values fitted
    assert len(chose) == len(result.n_rows)  # one per stage
    assert chose[-1].startswith(f"search alpha: chose {result.best_params['alpha']:.4g} (between the values fitted")


def test_fit_shows_progress_of_a_long_fit_and_not_of_a_short_one(monkeypatch, capsys):
    from dmlr import progress

    X, Y = _synthetic(n=120)
    monkeypatch.setattr(progress, "first_use_notice", lambda: False)
    monkeypatch.setattr(progress, "PROGRESS_AFTER_SECONDS", 1e9)  # every fit is "short"
    dmlr.fit((X, Y), "rbrl", alpha=1.0, **SOLVER)
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(progress, "PROGRESS_AFTER_SECONDS", 0.0)
    model = dmlr.fit((X, Y), "rbrl", alpha=1.0, **SOLVER)
    out = capsys.readouterr().out
    assert "iter" in out and "objective" in out and model.verbose == 0  # the estimator is left as given
    dmlr.fit((X, Y), "rbrl", verbose=0, **SOLVER)
    assert capsys.readouterr().out == ""


_UNGUARDED_SCRIPT = """
import sys
import dmlr
dmlr.set_config(backend="dask")  # a fit that needs the cluster, as large data do
model = dmlr.fit(sys.argv[1], "rbrl", alpha=1.0, max_iter=20, verbose=0)
print("fitted", model.backend_)
"""


def test_script_without_main_guard_fits_on_a_cluster(tmp_path):
    X, Y = _synthetic(n=200, d=10, n_labels=4)
    store = write_dataset(tmp_path / "d.zarr", X, Y, splits={"train": np.arange(200)})
    script = tmp_path / "fit.py"
    script.write_text(_UNGUARDED_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    out = subprocess.run(
        [sys.executable, str(script), str(store)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fitted dask" in out.stdout
    assert "not under if __name__ == '__main__'" in out.stdout


def test_guard_detection(tmp_path):
    import ast

    from dmlr.distributed.placement import _is_main_guard

    assert _is_main_guard(ast.parse('__name__ == "__main__"', mode="eval").body)
    assert _is_main_guard(ast.parse('"__main__" == __name__', mode="eval").body)
    assert not _is_main_guard(ast.parse('__name__ != "__main__"', mode="eval").body)


def test_vertex_recovers_the_optimum_between_grid_values():
    from dmlr.tuning import _vertex

    # a ranking loss that is a parabola in log10(alpha), lowest at alpha = 10**0.1
    curve = {10.0**e: (e - 0.1) ** 2 + 0.05 for e in (-0.5, 0.0, 0.5)}
    assert _vertex(curve, 1.0, 0.5, "ranking_loss") == pytest.approx(10**0.1)
    # a score to maximize, highest at 10**-0.2
    curve = {10.0**e: 1.0 - (e + 0.2) ** 2 for e in (-0.5, 0.0, 0.5)}
    assert _vertex(curve, 1.0, 0.5, "average_precision") == pytest.approx(10**-0.2)
    # never past half a step; a missing neighbour or no turn keeps the grid value
    curve = {10.0**e: (e - 3.0) ** 2 for e in (-0.5, 0.0, 0.5)}
    assert _vertex(curve, 1.0, 0.5, "ranking_loss") == pytest.approx(10**0.25)
    assert _vertex({1.0: 0.1, 10**0.5: 0.2}, 1.0, 0.5, "ranking_loss") == 1.0
    assert _vertex({10**-0.5: 0.1, 1.0: 0.2, 10**0.5: 0.1}, 1.0, 0.5, "ranking_loss") == 1.0


def test_chunked_units_run_on_disjoint_worker_groups_with_the_same_scores(client2, monkeypatch):
    # data each worker could hold alone, forced onto the chunked path: the two folds' fits run
    # at once, each over one worker's blocks, with the blocks (and sums) of a fit over both
    import dask.array as da

    import dmlr.models.rbrl as rbrl_module
    from dmlr.distributed import placement

    X, Y = _synthetic(n=240, d=8, n_labels=4)
    Xd, Yd = da.from_array(X, chunks=(60, -1)), da.from_array(Y, chunks=(60, -1))
    est = RBRL(**SOLVER)
    assert len(placement.worker_groups(client2, placement.data_nbytes(X, Y))) == 2
    seen = []
    make = rbrl_module.make_chunkset

    def spy(*args, **kwargs):
        seen.append((kwargs.get("workers"), kwargs.get("n_blocks")))
        return make(*args, **kwargs)

    monkeypatch.setattr(rbrl_module, "make_chunkset", spy)
    with dmlr.config_context(backend="dask", client=client2):
        grouped = search(est, Xd, Yd, cv=2)
    workers = sorted(cluster_workers(client2))
    assert grouped.backend == "chunks" and seen
    assert {w for w, _ in seen} == {(workers[0],), (workers[1],)} and {nb for _, nb in seen} == {2}
    seen.clear()
    monkeypatch.setattr(placement, "worker_groups", lambda client, nbytes: [tuple(workers)])
    with dmlr.config_context(backend="dask", client=client2):
        whole = search(est, Xd, Yd, cv=2)
    assert {w for w, _ in seen} == {None}  # one fit at a time over every worker
    assert whole.best_params == grouped.best_params
    assert [r["fold_scores"] for r in whole.results] == [r["fold_scores"] for r in grouped.results]


def test_fit_runs_where_its_client_argument_says(cluster2):
    """``dmlr.fit(client=...)``: a client that is not current still gets the search's units
    (the configured client comes before the current one); "local" keeps everything in this
    process although a client is current; any other string fails at once, saying what to do."""
    X, Y = _synthetic(n=200, d=8)
    kwargs = dict(model="rbrl", cv=2, verbose=0, max_iter=30)
    on_cluster = dmlr.fit((X, Y), client=cluster2, **kwargs)  # cluster2 is not current here
    assert on_cluster.search_.backend == "dask"
    with cluster2.as_current():
        here = dmlr.fit((X, Y), client="local", **kwargs)
    assert here.search_.backend == "local"
    assert here.best_params_ == on_cluster.best_params_
    np.testing.assert_allclose(here.coef_, on_cluster.coef_, rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="dmlr.get_client"):
        dmlr.fit((X, Y), client="tcp://127.0.0.1:8786", **kwargs)
    with pytest.raises(ValueError, match="distributed.Client"):
        with dmlr.config_context(client="tcp://127.0.0.1:8786"):
            pass


def test_fit_says_how_to_pass_arrays():
    """``dmlr.fit(X, Y)`` (an estimator's call) and a bare array as the data fail at once,
    saying what to pass: the arrays as one pair. A two-row array is not taken for a pair."""
    X, Y = _synthetic()
    with pytest.raises(TypeError, match=r"dmlr\.fit\(\(X, Y\)\)"):
        dmlr.fit(X, Y)
    with pytest.raises(TypeError, match="an \\(X, Y\\) pair, got ndarray"):
        dmlr.fit(X[:2])


def test_search_path_starts_each_fit_from_the_secant_prediction(monkeypatch):
    # Along a fold's path, the third value's fit starts at W2 + (W2 - W1) (equal steps in log
    # alpha), not at W2; the choice is the one made without the predictor. (The iterations it
    # saves are measured by benchmarks/time_to_model.py on the staged sets; on a problem this
    # small it saves none.)
    X, Y = _synthetic(n=300)
    kwargs = dict(cv=2, n_jobs=1, max_widen=0, patience=None, tol=1e-5)
    StartRecordingRBRL.log = []
    predicted = search(StartRecordingRBRL(alpha_rank=10.0), X, Y, **kwargs)
    log = StartRecordingRBRL.log
    predicted_starts = [start for _, start, _ in log]
    n_values = len(predicted.results)
    assert n_values >= 4
    for fold in range(2):
        fits = log[fold::2]  # lock-step: one fit per fold at each value
        assert fits[0][1] is None  # cold
        np.testing.assert_array_equal(fits[1][1], fits[0][2])  # the neighbour's optimum
        for k in range(2, n_values):
            a = [fit[0]["alpha"] for fit in fits[k - 2 : k + 1]]
            ratio = math.log(a[2] / a[1]) / math.log(a[1] / a[0])
            assert ratio == pytest.approx(1.0)
            np.testing.assert_allclose(fits[k][1], 2 * fits[k - 1][2] - fits[k - 2][2], rtol=0, atol=1e-12)
    monkeypatch.setattr(paths, "predict_path_start", lambda *args: None)
    StartRecordingRBRL.log = []
    plain = search(StartRecordingRBRL(alpha_rank=10.0), X, Y, **kwargs)
    assert plain.best_params == pytest.approx(predicted.best_params, rel=1e-12)
    assert [r["value"] for r in plain.results] == [r["value"] for r in predicted.results]
    plain_start = StartRecordingRBRL.log[4][1]
    assert plain_start is not None and not np.allclose(plain_start, predicted_starts[4])
