"""Command line: ``dmlr convert | info | fit | evaluate | report | demo``."""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
import warnings
from pathlib import Path

from dmlr.errors import DmlrInputError


def _print_metrics(metrics: dict) -> None:
    width = max(len(k) for k in metrics)
    for key, value in metrics.items():
        print(f"  {key:<{width}}  {value:.4f}")


def cmd_convert(args) -> int:
    from dmlr.data.convert import convert

    src = args.src if len(args.src) > 1 else args.src[0]
    dst = convert(
        src,
        args.dst,
        fmt=args.fmt,
        xml=args.xml,
        n_labels=args.n_labels,
        overwrite=args.overwrite,
        keep_identifiers=args.keep_identifiers,
        labels=args.labels.split(",") if args.labels else args.label_prefix,
        test_size=args.test_size,
        seed=args.seed,
        **({"drop_truncated_last_line": True} if args.drop_truncated_last_line else {}),
    )
    return cmd_info(argparse.Namespace(data=str(dst), json=False))


def cmd_info(args) -> int:
    from dmlr.data.store import open_dataset

    ds = open_dataset(args.data)
    Y = ds.Y.sum(axis=1).compute()
    info = {
        "path": ds.path,
        "n_samples": ds.n_samples,
        "n_features": ds.n_features,
        "n_labels": ds.n_labels,
        "cardinality": float(Y.mean()),
        "x_encoding": ds.attrs["x_encoding"],
        "chunk_rows": ds.attrs["chunk_rows"],
        "splits": {k: int(len(v)) for k, v in ds.splits.items()},
        "source": ds.attrs.get("source"),
    }
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        for k, v in info.items():
            print(f"{k:12s} {v:.4g}" if isinstance(v, float) else f"{k:12s} {v}")  # JSON keeps every digit
    return 0


def _model_params(args) -> dict:
    params = {}
    for name in ("alpha", "alpha_rank", "alpha_nuclear", "kernel", "gamma", "solver", "max_iter", "tol"):
        value = getattr(args, name)
        if value is not None:
            params[name] = value
    for item in args.param or ():
        name, sep, text = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--param takes NAME=VALUE, got {item!r}")
        try:
            params[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            params[name] = text  # a bare word: a string value (e.g. --param solver=lbfgs)
    return params


def _model_name(args) -> str:
    """``--kernel`` with the default model or the linear RBRL means the kernel model."""
    return "kernel_rbrl" if args.kernel is not None and args.model in ("auto", "rbrl") else args.model


def _client(args):
    if getattr(args, "scheduler", None):
        from dmlr.distributed.client import get_client

        return get_client(args.scheduler, quiet=getattr(args, "quiet", False))
    return None


def cmd_fit(args) -> int:
    import dmlr
    from dmlr.progress import display

    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR")
    ckpt = {}
    if args.checkpoint:
        ckpt = {"checkpoint": args.checkpoint, "checkpoint_every": args.checkpoint_every, "resume": args.resume}
    settings = {"backend": args.backend} if args.backend else {}
    every = 0 if args.quiet else args.verbose
    with dmlr.config_context(**settings), display(every=max(every, 1)):
        model = dmlr.fit(
            args.data,
            _model_name(args),
            split=args.split,
            client=_client(args),
            search=False if args.no_search else args.search,
            verbose=2 if every else 0,  # a terminal that asked for lines gets them from the start
            **ckpt,
            **_model_params(args),
        )
    if hasattr(model, "best_params_"):
        result = model.search_
        chosen = ", ".join(f"{k}={v:.4g}" for k, v in model.best_params_.items())
        print(
            f"chose {chosen} by {result.n_splits}-fold cross-validation ({result.scoring}), "
            f"{result.n_fits} fits in {model.search_seconds_:.1f} s"
        )
        print(result.table())
    if getattr(model, "resumed_from_iteration_", 0):
        print(f"resumed from the checkpoint at iteration {model.resumed_from_iteration_} in {args.checkpoint}")
    print(
        f"fitted {type(model).__name__}: {model.n_iter_} iterations, objective "
        f"{model.objective_history_[-1]:.6g}, {model.fit_seconds_:.2f} s ({model.backend_} backend)"
    )
    path = model.save(args.out)
    print(f"model saved to {path}")
    return 0


def cmd_evaluate(args) -> int:
    import dmlr
    from dmlr.api import resolve_split

    model = dmlr.load(args.model)
    ds = dmlr.open_dataset(args.data)
    split = resolve_split(ds, args.split, default_split="test")  # every row of a store without splits
    metrics = dmlr.evaluate(model, ds, split=split)
    if args.json:
        print(json.dumps(metrics, indent=2))
    else:
        rows = ds.split_rows(split)
        n = ds.n_samples if rows is None else len(rows)
        where = "every row" if rows is None else f"split {split!r}"
        print(f"{type(model).__name__} from {args.model} on {args.data}, {where} ({n} rows):")
        _print_metrics(metrics)
    return 0


def cmd_report(args) -> int:
    import dmlr
    from dmlr.report import MatplotlibMissingError, write_report

    model = dmlr.load(args.model)
    try:
        path = write_report(model, args.data, args.out, split=args.split)
    except MatplotlibMissingError as e:
        print(f"dmlr report: error: {e}", file=sys.stderr)
        return 2
    print(f"report written to {path}")
    return 0


def cmd_demo(args) -> int:
    """Generate a Mediamill-shaped set, fit linear RBRL on a local cluster, evaluate, save."""
    import dmlr
    from dmlr.datasets import synthetic_store
    from dmlr.progress import display

    out = Path(args.dir)
    t0 = time.perf_counter()
    print(
        f"Mediamill-shaped synthetic set (43,907 x 120, 101 labels), seed {args.seed}, in {out} "
        "(generated on first use) ..."
    )
    data = synthetic_store("mediamill", out, seed=args.seed)
    ds = dmlr.open_dataset(data)
    print(ds)
    client = dmlr.get_client(args.scheduler) if args.scheduler else dmlr.get_client()
    print(
        f"fitting linear RBRL (alpha=1, alpha_rank=0.01, alpha_nuclear=0.1, max_iter={args.max_iter}) "
        f"on the {len(ds.splits['train'])} training rows ..."
    )
    with dmlr.config_context(backend="dask"), display(every=max(args.verbose, 1)):
        model = dmlr.fit(
            ds,
            "rbrl",
            split="train",
            client=client,
            alpha=1.0,
            max_iter=args.max_iter,
            verbose=2 if args.verbose else 0,
        )
    print(
        f"  {model.n_iter_} iterations ({'converged' if model.converged_ else 'stopped at max_iter'}) "
        f"in {model.fit_seconds_:.2f} s, final objective "
        f"{model.objective_history_[-1]:.6g}"
    )
    metrics = dmlr.evaluate(model, ds, split="test")
    print(f"test metrics on {len(ds.splits['test'])} rows:")
    _print_metrics(metrics)
    path = model.save(out / f"rbrl_{data.stem}.npz")
    print(f"model saved to {path} (reload with dmlr.load); total {time.perf_counter() - t0:.1f} s")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from dmlr.data.convert import FORMATS

    p = argparse.ArgumentParser(
        prog="dmlr",
        description="Distributed multi-label ranking on Dask: convert data to a Zarr store, fit, evaluate, report.",
    )
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="convert ARFF/MEKA/.mat/.npz/libsvm/XC/CSV files to a dmlr Zarr store")
    c.add_argument("src", nargs="+", help="input file(s); several files (e.g. train and test) become splits")
    c.add_argument("dst", help="output Zarr store")
    c.add_argument("--fmt", choices=list(FORMATS), help="input format (default: from the name)")
    c.add_argument("--xml", help="MULAN XML label file")
    c.add_argument(
        "--n-labels",
        type=int,
        help="CSV (required), ARFF without XML, libsvm: the number of label columns (CSV, ARFF: the last ones)",
    )
    labels = c.add_mutually_exclusive_group()
    labels.add_argument("--labels", help="CSV with a header: the label columns' names, comma-separated")
    labels.add_argument("--label-prefix", help="CSV with a header: the label columns are those whose name starts so")
    c.add_argument("--overwrite", action="store_true", help="replace an existing store at DST")
    c.add_argument(
        "--test-size",
        type=float,
        help="an input without splits: split its rows at random into 'train' and 'test', this fraction in test",
    )
    c.add_argument("--seed", type=int, default=0, help="seed of --test-size's split (default 0)")
    c.add_argument(
        "--keep-identifiers",
        action="store_true",
        help="ARFF: keep (one-hot) nominal attributes with a different value in every row",
    )
    c.add_argument(
        "--drop-truncated-last-line",
        action="store_true",
        help="text formats: drop a last line that has no line end and does not parse (a cut file), with a warning",
    )
    c.set_defaults(func=cmd_convert)

    i = sub.add_parser("info", help="describe a dmlr Zarr store")
    i.add_argument("data", help="dmlr Zarr store")
    i.add_argument("--json", action="store_true", help="print JSON (every digit) instead of a table")
    i.set_defaults(func=cmd_info)

    f = sub.add_parser(
        "fit",
        help="fit a model on a dmlr Zarr store and save it (regularization not given: chosen by cross-validation)",
    )
    f.add_argument("data", help="dmlr Zarr store")
    f.add_argument(
        "--model",
        default="auto",
        help="auto (default: the RBF kernel model for small dense sets, else linear RBRL), or a registered "
        "model's name (an unknown name lists them)",
    )
    f.add_argument("--out", required=True, help="model file to write (.npz)")
    f.add_argument("--split", default="train", help="split to train on (default: train; 'all': every row)")
    f.add_argument("--alpha", type=float, help="Frobenius (ridge) weight")
    f.add_argument("--alpha-rank", dest="alpha_rank", type=float, help="RBRL: pairwise ranking weight")
    f.add_argument("--alpha-nuclear", dest="alpha_nuclear", type=float, help="RBRL: nuclear-norm weight")
    searched = f.add_mutually_exclusive_group()
    searched.add_argument(
        "--no-search",
        dest="no_search",
        action="store_true",
        help="use the model's default regularization instead of choosing it by cross-validation",
    )
    searched.add_argument(
        "--search",
        type=lambda text: [name for name in text.split(",") if name],
        metavar="NAMES",
        help="parameters to choose by cross-validation, comma-separated (default: the model's own; "
        "e.g. alpha,alpha_nuclear)",
    )
    f.add_argument("--max-iter", dest="max_iter", type=int, help="solver iterations at most (model's default)")
    f.add_argument("--tol", type=float, help="solver stopping tolerance (model's default)")
    f.add_argument("--kernel", choices=["rbf", "linear", "poly"], help="kernel RBRL (default: linear model)")
    f.add_argument("--gamma", type=float, help="kernel coefficient (default 1/n_features)")
    f.add_argument(
        "--solver",
        dest="solver",
        help="RBRL: solver / APG step rule (default lbfgs; the model checks the name)",
    )
    f.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        help="any other model parameter (repeatable), e.g. --param n_updates=20000",
    )
    f.add_argument(
        "--backend", choices=["auto", "local", "dask"], help="where the row blocks live (dmlr.config_context's backend)"
    )
    f.add_argument("--scheduler", help="Dask scheduler address (default: DASK_SCHEDULER_ADDRESS or local)")
    f.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="write the solver state to this Zarr checkpoint every --checkpoint-every iterations "
        "(marked complete at the end)",
    )
    f.add_argument(
        "--checkpoint-every",
        dest="checkpoint_every",
        type=int,
        default=10,
        metavar="K",
        help="iterations between checkpoints (default: 10)",
    )
    f.add_argument(
        "--resume",
        action="store_true",
        help="continue from the state in --checkpoint (start from scratch if there is none); "
        "a checkpoint of other parameters or data is an error",
    )
    shown = f.add_mutually_exclusive_group()
    shown.add_argument(
        "--verbose", type=int, default=10, metavar="N", help="show progress every N iterations (default: 10; 0: none)"
    )
    shown.add_argument("--quiet", action="store_true", help="no progress lines (same as --verbose 0)")
    f.set_defaults(func=cmd_fit)

    e = sub.add_parser("evaluate", help="evaluate a saved model on a dmlr Zarr store")
    e.add_argument("model", help="model file (.npz)")
    e.add_argument("data", help="dmlr Zarr store")
    e.add_argument("--split", default="test", help="split to evaluate on (default: test; 'all': every row)")
    e.add_argument("--json", action="store_true", help="print JSON instead of a table")
    e.set_defaults(func=cmd_evaluate)

    r = sub.add_parser(
        "report",
        help="write a PNG: convergence, per-label F1 and AUC, score distributions "
        "(needs matplotlib: pip install 'dmlr[plot]')",
    )
    r.add_argument("model", help="model file (.npz)")
    r.add_argument("data", help="dmlr Zarr store")
    r.add_argument("--split", default="test", help="split to evaluate on (default: test; 'all': every row)")
    r.add_argument("--out", default="report.png", help="PNG to write (default: report.png)")
    r.set_defaults(func=cmd_report)

    d = sub.add_parser("demo", help="synthetic Mediamill-shaped set -> local cluster -> RBRL -> metrics")
    d.add_argument("--dir", default="dmlr-demo", help="folder of the store and the model (default: dmlr-demo)")
    d.add_argument("--max-iter", dest="max_iter", type=int, default=2000, help="solver iterations at most")
    d.add_argument(
        "--seed", type=int, default=0, help="seed of the synthetic set (each seed gets its own store in --dir)"
    )
    d.add_argument("--scheduler", help="Dask scheduler address (default: DASK_SCHEDULER_ADDRESS or local)")
    d.add_argument("--verbose", type=int, default=50, help="show progress every N iterations (default: 50; 0: none)")
    d.set_defaults(func=cmd_demo)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)

    shown = warnings.formatwarning  # warnings as one line, like the errors below (not a source excerpt)
    warnings.formatwarning = lambda message, *_, **__: f"dmlr {args.command}: warning: {message}\n"
    try:
        return args.func(args)
    except (DmlrInputError, FileNotFoundError, FileExistsError, KeyError, ValueError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"dmlr {args.command}: error: {msg}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = shown


if __name__ == "__main__":
    sys.exit(main())
