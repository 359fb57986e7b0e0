"""The search's cross-validation fits at the model's own ``tol`` against the search's ``tol``.

For each set, the model ``model="auto"`` gives (:func:`dmlr.api.auto_model`) on the
training split is searched twice by :func:`dmlr.tuning.search`, one run after the
other in this process, in this process only (``n_jobs=1``, so no process start is
timed): with ``tol=None`` (every fit at the model's own ``tol``) and with the default
:data:`dmlr.tuning.SEARCH_TOL` (or ``--tols``). Per run the table prints the search's
seconds, the chosen value, the fits, the iterations summed over the fits, and the
largest difference in fold-mean validation score from the first run over the values
both fitted. The seconds are what one run's ratio is read from; iterations do not
depend on the machine.

Run::

    DMLR_DATA_DIR=../shared/datasets python benchmarks/search_tol.py [--sets a,b] [--tols none,1e-5]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

from auto_vs_peers import in_memory, prepared_store

from dmlr.api import auto_model
from dmlr.tuning import SEARCH_TOL, search

SETS = ("emotions_mat", "scene", "yeast", "enron", "tmc2007_500")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", default=",".join(SETS))
    p.add_argument("--tols", default=f"none,{SEARCH_TOL:g}")
    p.add_argument("--workdir", default="/tmp/dmlr-auto-vs-peers")
    a = p.parse_args(argv)
    tols = [None if t.strip().lower() == "none" else float(t) for t in a.tols.split(",")]
    print(
        f"{'set':<14} {'model':<24} {'search tol':>10} {'seconds':>8} {'ratio':>6} {'chosen':>9} {'fits':>5} "
        f"{'iterations':>10} {'max |d score|':>13}"
    )
    for name in [s.strip() for s in a.sets.split(",") if s.strip()]:
        X, Y = in_memory(prepared_store(name, Path(a.workdir)), "train")
        est = auto_model(X)
        model = f"{type(est).__name__}(tol={est.tol:g})"
        first = None
        for tol in tols:
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = search(est, X, Y, n_jobs=1, tol=tol)
            seconds = time.perf_counter() - t
            scores = {x["value"]: x["mean_score"] for x in r.results}
            iters = sum(x["mean_n_iter"] * r.n_splits for x in r.results)
            if first is None:
                first = (seconds, scores)
            common = set(scores) & set(first[1])
            diff = max(abs(scores[v] - first[1][v]) for v in common)
            print(
                f"{name:<14} {model:<24} {'own' if tol is None else f'{tol:g}':>10} {seconds:>8.2f} "
                f"{seconds / first[0]:>6.2f} {r.best_params['alpha']:>9.4g} {r.n_fits:>5d} {iters:>10.0f} "
                f"{diff:>13.2e}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
