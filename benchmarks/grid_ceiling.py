"""How well could each grid do on a repeat's test part? (a diagnostic for paper_tables.py's gaps)

For one repeat of :mod:`paper_tables` (same seeded 60/40 split, same
standardization, same final-fit settings), fits every point of the paper's
7^3 grid on the training part and scores it on the test part, then prints,
per metric, the best test score within each of paper_tables.py's grids
(``coarse``, ``coarse1``, ``coarse100``, ``paper``) next to the paper's
mean +- std.

This best-on-test score is an optimistic bound, not an estimate: no
selection rule can do better on that split with that grid. So

* a grid whose ceiling is below the paper's mean minus one std cannot reach
  the paper on that split, whatever the selection rule: the gap is not the
  selection's;
* a coarse grid below and the paper grid above says the coarse grid costs
  the gap (the paper grid then needs its cross-validation to find it);
* every grid below says the model or the data (split, preprocessing) differ.

The fits run as :func:`dmlr.model_selection.grid_search_cv` with one explicit
split (train rows, test rows) of the concatenated parts, so they run in
parallel on the local cluster with warm-started alpha_nuclear paths, by default
with the final fits' settings (tol 1e-6, at most 5000 iterations;
``--max-iter 1000 --tol 1e-5``, the cross-validation's, costs a fraction on
the sets where the weakest regularization runs to the iteration cap). The records
are cached as JSON in ``--workdir``
(``ceiling-<set>-paper[-i<max iter>-tol<tol>]-r<repeat>.json``).

Usage: python benchmarks/grid_ceiling.py --sets yeast,enron [--repeat 0] [--max-iter 5000] [--tol 1e-6]
       [--workdir DIR]
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from _common import parser, timed, work_folder
from paper_tables import (
    GRIDS,
    METRICS,
    PAPER_STYLE_YAHOO,
    PAPER_TABLE3,
    WORKDIR,
    load_all,
    make_rbrl,
    paper_style_yahoo,
    split_repeat,
)

from dmlr.model_selection import PAPER_GRID, grid_search_cv


def in_grid(params: dict, grid: dict) -> bool:
    """Whether every parameter value of ``params`` is one of ``grid``'s values."""
    return all(any(math.isclose(v, g, rel_tol=1e-12) for g in grid[k]) for k, v in params.items())


def test_records(name: str, repeat: int, work: Path, client, max_iter: int = 5000, tol: float = 1e-6) -> list:
    """One record per paper-grid point, ``mean_<metric>`` = its test-part score (cached)."""
    settings = "" if (max_iter, tol) == (5000, 1e-6) else f"-i{max_iter}-tol{tol:g}"
    cache = work / f"ceiling-{name}-paper{settings}-r{repeat}.json"
    if cache.exists():
        return json.loads(cache.read_text())
    X, Y = load_all(name, work)
    if name in PAPER_STYLE_YAHOO:
        X, Y = paper_style_yahoo(X, Y)
    Xtr, Xte, Ytr, Yte, kernel = split_repeat(name, X, Y, repeat)
    both_X = sp.vstack([Xtr, Xte]).tocsr() if sp.issparse(Xtr) else np.vstack([Xtr, Xte])
    both_Y = np.vstack([np.asarray(Ytr), np.asarray(Yte)])
    n_tr = Xtr.shape[0]
    split = [(np.arange(n_tr), np.arange(n_tr, both_X.shape[0]))]
    est = make_rbrl(kernel, solver="spectral", max_iter=max_iter, tol=tol)
    search, seconds = timed(
        grid_search_cv, est, both_X, both_Y, PAPER_GRID, cv=split, client=client, refit=False, scoring="paper_mean"
    )
    print(f"{name} repeat {repeat}: {len(search.results)} fits in {seconds:.0f} s", flush=True)
    records = [{"params": r["params"], **{k: r[f"mean_{k}"] for _, k, _ in METRICS}} for r in search.results]
    cache.write_text(json.dumps(records))
    return records


def main(argv=None):
    ap = parser(__doc__, full_doc=True, sets=("yeast", "enron"), workdir=WORKDIR)
    ap.add_argument("--repeat", type=int, default=0)
    ap.add_argument("--max-iter", type=int, default=5000)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    work = work_folder(args.workdir)
    from distributed import Client

    from dmlr.distributed import local_cluster

    with local_cluster(args.workers, 1) as cluster, Client(cluster) as client:
        for name in args.sets:
            try:
                records = test_records(name, args.repeat, work, client, args.max_iter, args.tol)
            except FileNotFoundError as e:
                print(f"skip {name}: {e}")
                continue
            paper = PAPER_TABLE3.get(name)
            print(
                f"\n{name}, repeat {args.repeat}: best test score within each grid (optimistic bound; fits to "
                f"tol {args.tol:g}, at most {args.max_iter} iterations)"
            )
            print("| metric | paper | " + " | ".join(GRIDS) + " | best point (alpha, alpha_rank, alpha_nuclear) |")
            print("|---|---|" + "---|" * len(GRIDS) + "---|")
            for short, key, sign in METRICS:
                cells = []
                for grid in GRIDS.values():
                    inside = [r for r in records if in_grid(r["params"], grid)]
                    cells.append(max(sign * r[key] for r in inside) * sign)
                best = max(records, key=lambda r: sign * r[key])["params"]
                ptxt = "-"
                if paper:
                    mean, std = paper[[m for _, m, _ in METRICS].index(key)]
                    ptxt = f"{mean:.3f} +- {std:.3f}"
                point = ", ".join(f"{best[k]:g}" for k in ("alpha", "alpha_rank", "alpha_nuclear"))
                print(f"| {short} | {ptxt} | " + " | ".join(f"{c:.3f}" for c in cells) + f" | {point} |", flush=True)


if __name__ == "__main__":
    main()
