"""What the propensity-scored metrics add to one multilabel_metrics call.

On synthetic NumPy data (seeded), times ``multilabel_metrics`` with the 17
metrics other than ``auc_macro`` and with those plus the six
propensity-scored ones, alternating the two calls, and prints the median
times and their ratio per label density (one row each).

Usage: python benchmarks/ps_metrics_cost.py [--rows 20000] [--labels 500] [--repeats 5] [--docs]

``--docs`` also writes the table to ``docs/benchmarks/ps_metrics_cost.txt`` (the docs include it).
"""

import numpy as np
from _common import Table, in_turns, parser, tee

from dmlr.metrics import METRIC_NAMES, PS_METRIC_NAMES, label_propensities, multilabel_metrics, predict_from_scores


def main(argv=None):
    p = parser(__doc__, docs="ps_metrics_cost")
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--labels", type=int, default=500)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    with tee("ps_metrics_cost", args.docs):
        table(args)


def table(args):
    base = [name for name in METRIC_NAMES if name != "auc_macro"]
    out = Table("density; 17 metrics (s):.3f; + 6 PS metrics (s):.3f; ratio:.2f", markdown=True)
    out.print_header()
    for density in (0.02, 0.2):
        rng = np.random.default_rng(0)
        Y = (rng.random((args.rows, args.labels)) < density).astype(np.int8)
        S = rng.standard_normal(Y.shape) + Y
        P = predict_from_scores(S)
        propensities = label_propensities(Y)
        times = in_turns(
            {
                "base": lambda: multilabel_metrics(Y, S, P, metrics=base),
                "ps": lambda: multilabel_metrics(
                    Y, S, P, metrics=base + list(PS_METRIC_NAMES), propensities=propensities
                ),
            },
            args.repeats,
        )
        a, b = np.median(times["base"]), np.median(times["ps"])
        out.row(density, a, b, b / a)


if __name__ == "__main__":
    main()
