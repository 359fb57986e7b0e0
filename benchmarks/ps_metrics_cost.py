"""What the propensity-scored metrics add to one multilabel_metrics call.

On synthetic NumPy data (seeded), times ``multilabel_metrics`` with the 17
metrics other than ``auc_macro`` and with those plus the six
propensity-scored ones, alternating the two calls, and prints the median
times and their ratio per label density (one row each).

Usage: python benchmarks/ps_metrics_cost.py [--rows 20000] [--labels 500] [--repeats 5] [--docs]

``--docs`` also writes the table to ``docs/benchmarks/ps_metrics_cost.txt`` (the docs include it).
"""

import argparse
import time

import numpy as np
from docs_output import tee

from dmlr.metrics import METRIC_NAMES, PS_METRIC_NAMES, label_propensities, multilabel_metrics, predict_from_scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--labels", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--docs", action="store_true", help="also write docs/benchmarks/ps_metrics_cost.txt")
    args = parser.parse_args()
    with tee("ps_metrics_cost", args.docs):
        table(args)


def table(args):
    base = [name for name in METRIC_NAMES if name != "auc_macro"]
    print("| density | 17 metrics (s) | + 6 PS metrics (s) | ratio |")
    print("|---|---|---|---|")
    for density in (0.02, 0.2):
        rng = np.random.default_rng(0)
        Y = (rng.random((args.rows, args.labels)) < density).astype(np.int8)
        S = rng.standard_normal(Y.shape) + Y
        P = predict_from_scores(S)
        propensities = label_propensities(Y)
        times = {"base": [], "ps": []}
        for _ in range(args.repeats):
            start = time.perf_counter()
            multilabel_metrics(Y, S, P, metrics=base)
            times["base"].append(time.perf_counter() - start)
            start = time.perf_counter()
            multilabel_metrics(Y, S, P, metrics=base + list(PS_METRIC_NAMES), propensities=propensities)
            times["ps"].append(time.perf_counter() - start)
        a, b = np.median(times["base"]), np.median(times["ps"])
        print(f"| {density} | {a:.3f} | {b:.3f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
