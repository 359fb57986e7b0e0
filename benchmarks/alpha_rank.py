"""The default linear model's ``alpha_rank``: ``dmlr.fit`` at several values, side by side.

``dmlr.fit`` picks the linear RBRL with ``alpha_rank=dmlr.api.AUTO_LINEAR_ALPHA_RANK`` for
sparse features and large dense sets, and searches ``alpha`` alone (a search of
``alpha_rank`` too would be a full 5-fold search: the staged search needs parameters scaled
per row). For each set (``benchmarks/auto_vs_peers.py``'s stores: official train/test
splits, a seeded 60/40 split where the files give none) and each ``--values`` entry,
``dmlr.fit(store, alpha_rank=value)`` (``alpha`` searched as by default) and
``dmlr.evaluate`` on the test split: ranking loss, average precision, P@1, P@3, P@5 (a row
with no relevant label counts as precision 0), micro- and macro-F1 of the model's labels,
the chosen ``alpha`` and the seconds of the fit, search included. The footer counts, for
each value, the sets where it beats the first value on ranking loss and on average
precision. Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/alpha_rank.py [--sets a,b] [--values 10,20,30] [--docs]

``--docs`` also writes the table to ``docs/benchmarks/alpha_rank.txt``.
"""

from __future__ import annotations

import sys
import warnings

from _common import Table, names, parser, prepared_store, stores, tee, timed, work_folder
from auto_vs_peers import METRICS
from auto_vs_peers import SETS as PEER_SETS

import dmlr

#: auto_vs_peers's sets where the default model is the linear RBRL (not its dense kernel sets).
SETS = tuple(s for s in PEER_SETS if s not in ("emotions_mat", "emotions", "yeast", "scene"))
VALUES = (10, 20, 30)


def main(argv=None) -> int:
    p = parser(__doc__, sets=SETS, workdir="/tmp/dmlr-auto-vs-peers", docs="alpha_rank")
    p.add_argument("--values", type=names, default=",".join(map(str, VALUES)))
    a = p.parse_args(argv)
    with tee("alpha_rank", a.docs):
        return _run(a)


def _run(a) -> int:
    values = [float(v) for v in a.values]
    table = Table(
        "set:<22; alpha_rank:>10g; rankloss:>8.4f; avgprec:>8.4f; P@1:>7.4f; P@3:>7.4f; P@5:>7.4f; "
        "micro-F1:>8.4f; macro-F1:>8.4f; alpha:>7.3g; seconds:>7.1f"
    )
    table.print_header()
    wins = {v: [0, 0] for v in values[1:]}
    n_sets = 0
    for name, store in stores(a.sets, work_folder(a.workdir), prepared_store):
        first = None
        for value in values:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model, seconds = timed(dmlr.fit, store, alpha_rank=value, verbose=0)
            v = dmlr.evaluate(model, store, metrics=list(METRICS))
            table.row(name, value, *(v[m] for m in METRICS), model.best_params_["alpha"], seconds)
            if first is None:
                first = v
            else:
                wins[value][0] += v["ranking_loss"] < first["ranking_loss"]
                wins[value][1] += v["average_precision"] > first["average_precision"]
        n_sets += 1
    print("")
    for value, (rl, ap) in wins.items():
        print(
            f"alpha_rank={value:g} against {values[0]:g}: lower ranking loss on {rl} of {n_sets} sets, "
            f"higher average precision on {ap} of {n_sets}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
