"""The notebook-facing functions: ``dmlr.fit``, ``dmlr.evaluate``, ``dmlr.load``."""

from __future__ import annotations

import warnings
from pathlib import Path

from sklearn.base import BaseEstimator
from sklearn.pipeline import Pipeline

from dmlr.config import check_config, config_context
from dmlr.data.arrays import is_dask, is_sparse
from dmlr.data.store import Dataset, open_dataset
from dmlr.models import RBRL, KernelRBRL
from dmlr.models.base import MODEL_NAMES, BaseModel, load_model

#: ``model=`` names accepted by :func:`dmlr.fit` -> estimator class: every model registered
#: with :func:`dmlr.models.base.register_model` (a live view of
#: :data:`dmlr.models.base.MODEL_NAMES`).
MODELS = MODEL_NAMES


#: ``model="auto"`` (the default of :func:`dmlr.fit`): dense training sets of at most this
#: many rows get the RBF kernel model (exact, or on a Nystroem approximation beyond
#: :data:`AUTO_EXACT_KERNEL_MAX_ROWS` rows); larger or sparse ones the linear RBRL. On small
#: dense sets the RBF model ranks better than the linear one; beyond this size its O(n D l)
#: iterations make its search many times a linear model's (``benchmarks/auto_vs_peers.py``).
AUTO_KERNEL_MAX_ROWS = 10_000
#: ... and at least this fraction of nonzero entries: text-like features stored dense are
#: sparse sets for this rule, where the linear model ranks as well (``benchmarks/auto_vs_peers.py``).
AUTO_KERNEL_MIN_DENSITY = 0.5
#: Up to this many training rows the default kernel model is the exact kernel (an n x n
#: kernel matrix per fit); beyond, its Nystroem form with :data:`AUTO_KERNEL_COMPONENTS`
#: landmarks.
AUTO_EXACT_KERNEL_MAX_ROWS = 1024
#: Landmarks of the default kernel model's Nystroem form. Each iteration costs O(n D l) and
#: each fold's map O(D^3), so the search's time falls with D faster than linearly; more
#: landmarks gained little ranking loss at several times the search's time (docs/auto_fit.md).
AUTO_KERNEL_COMPONENTS = 256
#: ``alpha_rank`` of the default linear model (RBRL's own default, 0.01, is the paper's
#: demo value): with ``alpha`` searched and tf-idf scaling, the test ranking loss fell from
#: 0.01 to 3 to 10 on most sets (docs/auto_fit.md's table, ``benchmarks/auto_vs_peers.py``).
AUTO_LINEAR_ALPHA_RANK = 10.0


def auto_model(X, seed: int | None = 0) -> BaseModel:
    """The model ``model="auto"`` fits on training features X (see :data:`AUTO_KERNEL_MAX_ROWS`).

    Returns an unfitted RBF ``KernelRBRL()`` for dense X with at most
    ``AUTO_EXACT_KERNEL_MAX_ROWS`` rows, ``KernelRBRL(n_components=AUTO_KERNEL_COMPONENTS)``
    (Nystroem landmarks drawn with ``seed``) for dense X with at most
    ``AUTO_KERNEL_MAX_ROWS`` rows, else the linear ``RBRL(alpha_rank=AUTO_LINEAR_ALPHA_RANK)``,
    with ``scaling="tfidf"`` for sparse X (bag-of-words features). "Dense" means stored
    dense with at least :data:`AUTO_KERNEL_MIN_DENSITY` of its entries nonzero (one pass
    over the chunks of a dask X); "sparse", stored sparse or not dense.
    """
    n = int(X.shape[0])
    if is_sparse(X) or not _mostly_nonzero(X):
        return RBRL(alpha_rank=AUTO_LINEAR_ALPHA_RANK, scaling="tfidf")
    if n > AUTO_KERNEL_MAX_ROWS:
        return RBRL(alpha_rank=AUTO_LINEAR_ALPHA_RANK)
    if n <= AUTO_EXACT_KERNEL_MAX_ROWS:
        return KernelRBRL()
    return KernelRBRL(n_components=AUTO_KERNEL_COMPONENTS, random_state=seed)


def _mostly_nonzero(X) -> bool:
    """At least :data:`AUTO_KERNEL_MIN_DENSITY` of dense X's entries are nonzero (one pass over a dask X)."""
    nonzero = (X != 0).sum()
    if is_dask(X):
        nonzero = nonzero.compute()
    return float(nonzero) >= AUTO_KERNEL_MIN_DENSITY * int(X.shape[0]) * int(X.shape[1])


def _as_dataset(data):
    if isinstance(data, Dataset):
        return data
    if isinstance(data, (str, Path)):
        return open_dataset(data)
    return None


def resolve_arrays(data, split: str | None, *, default_split: str):
    """(X, Y) for ``data``: a store path, a :class:`~dmlr.Dataset`, or an ``(X, Y)`` pair.

    A store without any split, asked for the default split, gives all its
    rows (with a warning, :func:`resolve_split`); asking for a split that a
    store lacks is an error.
    """
    ds = _as_dataset(data)
    if ds is None:
        # a tuple or list of two, not any iterable: a two-row array would unpack into rows
        if not (isinstance(data, (tuple, list)) and len(data) == 2):
            raise TypeError(f"data must be a Zarr path, a dmlr Dataset, or an (X, Y) pair, got {type(data).__name__}")
        X, Y = data
        return X, Y
    return ds.arrays(resolve_split(ds, split, default_split=default_split, stacklevel=4))


def resolve_split(ds: Dataset, split: str | None, *, default_split: str, stacklevel: int = 2) -> str | None:
    """The split of ``ds`` that :func:`resolve_arrays` reads for ``split``: None (every row,
    with a warning) for ``default_split`` when ``ds`` has no splits, else ``split``."""
    if split == default_split and not ds.splits:
        warnings.warn(f"{ds.path} has no splits; using all {ds.n_samples} rows", stacklevel=stacklevel)
        return None
    return split


def make_model(model, **params) -> BaseModel:
    """An estimator from a name in :data:`~dmlr.api.MODELS` or an estimator instance (a Pipeline too)."""
    if isinstance(model, BaseEstimator):
        return model.set_params(**params) if params else model
    try:
        cls = MODELS[str(model).lower()]
    except KeyError:
        raise ValueError(f"unknown model {model!r}; known models: {sorted(MODELS)}") from None
    # set_params, not the constructor: a misspelt name is a ValueError that lists the valid ones
    return cls().set_params(**params)


def fit(
    data,
    model="auto",
    *,
    split: str | None = "train",
    client=None,
    search: bool | None = None,
    cv: int = 5,
    scoring: str | None = None,
    seed: int | None = 0,
    checkpoint=None,
    checkpoint_every: int = 10,
    resume: bool = False,
    verbose: int = 1,
    **params,
) -> BaseModel:
    """Fit a model on a data set.

    Parameters
    ----------
    data : str, Path, Dataset or (X, Y)
        A dmlr Zarr store (path or opened), or arrays (numpy, scipy.sparse, dask).
    model : str or estimator
        ``"auto"`` (default: :func:`dmlr.api.auto_model` chooses by the training
        features), a name in :data:`~dmlr.api.MODELS` (``"rbrl"``,
        ``"kernel_rbrl"``, ``"ranksvm"``, ``"mmp"``, ``"linear"``, ``"oml"``,
        ``"knn"``, ``"omf"``) or an estimator instance (a scikit-learn
        Pipeline ending in one, too).
    split : str or None
        Named split of the store to train on (None or "all": every row).
    client : distributed.Client, "local" or None
        Dask client for this fit (as ``dmlr.config_context(client=...)``);
        by default the current one, the configured scheduler, or, for data
        too large for this process's memory, a local cluster (see Notes).
        "local": this process alone, whatever client is current (as
        ``dmlr.config_context(backend="local")``; the search's units on its
        threads, as :func:`dmlr.tuning.search`'s ``client="local"``).
    search : bool, None or list of str
        Choose the regularization by ``cv``-fold cross-validation on the
        training rows (:func:`dmlr.tuning.search`), then refit on all of
        them. None (default): search the default parameters of the model's
        search space (its class's ``_search_space``, :func:`dmlr.tuning.search_space`) that ``params`` does
        not give, when ``model`` is a name; explicit values are kept and are not
        searched. True: also for an estimator instance (its values of the
        searched parameters are replaced). False: no search. A list of
        parameter names: search those, in the search space's order, the ones
        searched only on request included (RBRL's ``"alpha_nuclear"``:
        ``search=["alpha", "alpha_nuclear"]``; see the docs' "What is searched").
        A name also given in ``params`` is an error.
        The fitted model carries ``best_params_`` (the chosen values),
        ``cv_results_`` (the CV table, scikit-learn's layout),
        ``search_seconds_`` and ``search_`` (:class:`dmlr.model_selection.SearchResult`).
    cv : int
        Folds of the search.
    scoring : str, optional
        Metric the search maximizes (losses are minimized), a name in
        :data:`dmlr.metrics.METRIC_NAMES`. Default:
        :data:`dmlr.model_selection.DEFAULT_SCORING`, or for a label matrix with one
        column (a tag: no labels to rank within a row)
        :data:`dmlr.model_selection.ONE_LABEL_SCORING`.
    seed : int or None
        Seed of the search's folds.
    checkpoint : str or Path, optional
        Directory of a Zarr checkpoint: the solver's full state is written
        there (atomically) every ``checkpoint_every`` iterations, and the
        final result, marked complete, when the fit ends
        (:mod:`dmlr.solvers.checkpoint`).
    checkpoint_every : int
        Iterations between checkpoints (default 10).
    resume : bool
        Continue from the state in ``checkpoint`` (e.g. after the process
        running the fit was killed): the fit ends at the model an
        uninterrupted fit gives, with ``resumed_from_iteration_`` set to the
        checkpoint's iteration. With no checkpoint there yet, the fit starts
        from scratch. A checkpoint written for another problem (other
        parameters or data) raises a ``ValueError``; without ``resume``, an
        unfinished checkpoint raises :class:`FileExistsError`. See
        :meth:`dmlr.models.RBRL.fit`. When a search runs, the directory
        holds the search's finished units (``search/``, resumed too) and
        the final fit's checkpoint (``fit/``, for models that have one).
    verbose : int
        Progress shown while the fit runs. 1 (default): a line when dmlr's
        kernels are compiled (the first fit on a machine), then, once the
        search has run :data:`dmlr.progress.PROGRESS_AFTER_SECONDS`, a line
        per searched value (stage, value, folds, best so far, time left), and
        the final fit's iterations, objective and time left once it has run
        that long, every :data:`dmlr.progress.DISPLAY_EVERY` iterations (an
        estimator's own ``verbose``, when set, keeps its own interval): a fit of a few seconds prints nothing.
        In a notebook each kind of line updates in place. 0: nothing. 2:
        every line from the start.
    **params
        Estimator parameters, e.g. ``alpha=1.0``.

    Returns
    -------
    estimator
        Fitted.

    Notes
    -----
    With no cluster configured, data that fit comfortably in this process's
    memory are fitted here, on its threads (no cluster is started, so a
    plain script needs no ``if __name__ == "__main__":`` guard); larger data
    start a local cluster (:func:`dmlr.get_client`).
    """
    from dmlr import progress, tuning

    if isinstance(verbose, bool) or not isinstance(verbose, int) or verbose < 0:
        raise ValueError(f"verbose must be an integer >= 0, got {verbose!r}")
    if not isinstance(model, (str, BaseEstimator)):  # dmlr.fit(X, Y), as an estimator's fit is called
        raise TypeError(
            f"model must be a name or an estimator, got {type(model).__name__}; "
            "arrays are passed as one pair: dmlr.fit((X, Y))"
        )
    in_process = isinstance(client, str) and client == "local"
    settings = {"backend": "local"} if in_process else {"client": client} if client is not None else {}
    check_config(**settings)  # any other client (a scheduler's address, say) fails here, saying what to do
    X, Y = resolve_arrays(data, split, default_split="train")
    if verbose:
        progress.first_use_notice()
    if isinstance(model, str) and model.lower() == "auto":
        est = auto_model(X, seed).set_params(**params)
    else:
        est = make_model(model, **params)
    if search is None:
        search = not isinstance(model, BaseEstimator)
    if not isinstance(search, bool):
        searched = _searched_names(est, search, params)
    else:
        searched = [a.name for a in tuning.search_space(est) if a.default and a.name not in params] if search else []
    if verbose > 1:  # what is about to run, before it runs
        plan = f", choosing {', '.join(searched)} by cross-validation" if searched else ""
        print(f"dmlr: fitting {est!r} on {int(X.shape[0])} training rows{plan}", flush=True)
    with config_context(**settings):
        result = None
        if searched:
            result = tuning.search(
                est,
                X,
                Y,
                params=searched,
                cv=cv,
                scoring=scoring if scoring is not None else tuning.default_scoring(Y),
                seed=seed,
                client="local" if in_process else None,
                checkpoint=Path(checkpoint) / "search" if checkpoint is not None else None,
                resume=resume,
                verbose=verbose,
            )
            est.set_params(**result.best_params)
            if checkpoint is not None:
                checkpoint = Path(checkpoint) / "fit"
                if not getattr(final_estimator(est), "_supports_checkpoint", False):
                    checkpoint, resume = None, False  # the search's units were checkpointed
        final = final_estimator(est)
        shown = verbose and "verbose" in final.get_params() and not final.get_params()["verbose"]
        if shown:  # progress of the final fit, every few iterations once it is long
            final.set_params(verbose=progress.display_every())
        try:
            with progress.display(after=0.0 if verbose > 1 else progress.PROGRESS_AFTER_SECONDS):
                _fit_final(est, X, Y, checkpoint, checkpoint_every, resume)
        finally:
            if shown:
                final.set_params(verbose=0)
    if result is not None:
        est.best_params_ = dict(result.best_params)
        est.cv_results_ = result.cv_results()
        est.search_seconds_ = result.seconds
        est.search_ = result
    return est


def _searched_names(est, names, params: dict) -> list[str]:
    """The parameters ``search=names`` asks for, in the order of ``est``'s search space."""
    from dmlr import tuning

    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"search must be True, False, None or a non-empty list of parameter names, got {names!r}")
    given = sorted(set(names) & set(params))
    if given:
        raise ValueError(f"{given} given a value and asked to be searched: give one or the other")
    return tuning.searchable(est, names)


def _fit_final(est, X, Y, checkpoint, checkpoint_every: int, resume: bool) -> None:
    """The fit on all the training rows, with the checkpoint when asked for."""
    if checkpoint is None and not resume:
        est.fit(X, Y)
        return
    # a Pipeline checkpoints its final estimator (its transformers are refitted, deterministically)
    final = final_estimator(est)
    prefix = est.steps[-1][0] + "__" if final is not est else ""
    if not getattr(final, "_supports_checkpoint", False):
        raise ValueError(f"{type(final).__name__} does not support checkpoints (checkpoint=, resume=)")
    kwargs = {"checkpoint": checkpoint, "checkpoint_every": checkpoint_every, "resume": resume}
    est.fit(X, Y, **{prefix + k: v for k, v in kwargs.items()})


def evaluate(model, data, *, split: str | None = "test", metrics=None) -> dict:
    """Evaluate a fitted model: every metric of :mod:`dmlr.metrics`, chunk by chunk.

    Labels are the model's own rule (``model.labels_from_scores``) applied to
    its scores.

    Parameters
    ----------
    model : fitted estimator or Pipeline
    data : str, Path, Dataset or (X, Y)
    split : str or None
        Named split to evaluate on (None or "all": every row).
    metrics : list of str, optional
        Subset of :data:`dmlr.metrics.METRIC_NAMES`.

    Returns
    -------
    dict
        Metric name -> float.
    """
    from dmlr.metrics import multilabel_metrics

    X, Y = resolve_arrays(data, split, default_split="test")
    S = model.decision_function(X)
    return multilabel_metrics(Y, S, final_estimator(model).labels_from_scores(S), metrics=metrics)


def final_estimator(model):
    """The estimator that scores: ``model`` itself, or a Pipeline's final step (whose
    ``labels_from_scores`` is the model's label rule)."""
    return model.steps[-1][1] if isinstance(model, Pipeline) else model


def load(path) -> BaseModel:
    """Load a model written by ``model.save(path)`` (no pickle)."""
    return load_model(path)
