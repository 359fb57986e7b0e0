"""How much does the document sample move a paper-style Yahoo set's scores? (a diagnostic for paper_tables.py)

paper_tables.py rebuilds yahoo_business and yahoo_education the way Zhang &
Zhou made theirs (:func:`paper_tables.paper_style_yahoo`): 5,000 documents
drawn at random, here with seed 0. The paper's documents are unknown, so a
cell that misses the paper's band by a little may be the sample, not the
model. This fits linear RBRL at fixed hyper-parameters (no selection, so
only the data change) on ``--samples`` draws of the 5,000 documents, each on
the first ``--splits`` of paper_tables.py's seeded 60/40 splits with its
final-fit settings, and prints each sample's mean test scores, then the
mean, std and range over the samples next to the paper's mean +- std.

If the samples' std is about the paper's std or larger, and the paper's
mean lies among the samples' means, a gap of that size between one sample
and the paper is not evidence against the model.

Usage: python benchmarks/sample_spread.py [--set yahoo_education] [--point 10,10,0.1] [--samples 10]
       [--splits 3] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from paper_tables import (
    METRICS,
    PAPER_STYLE_YAHOO,
    PAPER_TABLE3,
    WORKDIR,
    final_test_scores,
    load_all,
    paper_style_yahoo,
    split_repeat,
)


def sample_scores(X, Y, name, point, splits):
    """Mean test scores (METRICS order) over the first ``splits`` splits of one sample, at ``point``."""
    params = dict(zip(("alpha", "alpha_rank", "alpha_nuclear"), point))
    per_split = [final_test_scores(*split_repeat(name, X, Y, r), params) for r in range(splits)]
    return np.mean(per_split, axis=0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", default="yahoo_education", choices=sorted(PAPER_STYLE_YAHOO))
    ap.add_argument(
        "--point", default="10,10,0.1", help="alpha,alpha_rank,alpha_nuclear (the paper's lambda1,lambda2,lambda3)"
    )
    ap.add_argument("--samples", type=int, default=10, help="document samples, seeds 0..samples-1")
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--workdir", default=WORKDIR)
    args = ap.parse_args(argv)
    point = tuple(float(v) for v in args.point.split(","))
    if len(point) != 3:
        ap.error(f"--point needs three values alpha,alpha_rank,alpha_nuclear, got {args.point!r}")
    full_X, full_Y = load_all(args.set, Path(args.workdir))
    names = [short for short, _, _ in METRICS]
    print(f"{args.set}, (alpha, alpha_rank, alpha_nuclear) = {point}, {args.splits} splits per sample\n")
    print("| sample seed | " + " | ".join(names) + " | seconds |")
    print("|---" * (len(names) + 2) + "|")
    means = []
    for seed in range(args.samples):
        t = time.perf_counter()
        X, Y = paper_style_yahoo(full_X, full_Y, seed=seed)
        means.append(sample_scores(X, Y, args.set, point, args.splits))
        print(
            f"| {seed} | " + " | ".join(f"{v:.4f}" for v in means[-1]) + f" | {time.perf_counter() - t:.0f} |",
            flush=True,
        )
    means = np.array(means)
    paper = PAPER_TABLE3[args.set]
    print("\n| metric | samples: mean +- std | range | paper | seed 0 (paper_tables.py's sample) |")
    print("|---|---|---|---|---|")
    for j, short in enumerate(names):
        col = means[:, j]
        std = col.std(ddof=1) if len(col) > 1 else float("nan")
        print(
            f"| {short} | {col.mean():.4f} +- {std:.4f} | {col.min():.4f} - {col.max():.4f} "
            f"| {paper[j][0]:.3f} +- {paper[j][1]:.3f} | {col[0]:.4f} |"
        )


if __name__ == "__main__":
    main()
