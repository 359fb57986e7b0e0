"""Progress of long fits, for terminals and notebooks.

:class:`ProgressReporter` is a solver callback (:func:`dmlr.solvers.apg.apg`
calls ``callback(t, objective, seconds)`` after every iteration); call its
:meth:`~ProgressReporter.finish` when the solver returns. It shows the
first iteration, every ``every``-th one and the last one::

    iter    40  objective 1.234568e+03  rel.change 3.10e-05  elapsed 0.84 s  left ~1.20 s
    iter    57  objective 1.234001e+03  rel.change 8.70e-07  elapsed 1.19 s  (converged)

* ``rel.change`` is the solver's stopping quantity ``|F_t - F_{t-1}| / |F_{t-1}|``
  (:func:`dmlr.solvers.apg.relative_change`);
* ``elapsed`` is the solver's clock (from the start of the iterations, not
  counting the loading of the data or the Lipschitz pass);
* ``left`` is a rough estimate of the time until the run stops, see
  :meth:`ProgressReporter.estimate_seconds_left`; an iteration whose
  relative change is already at most ``tol`` is held back until the next
  report, and shown then with ``rel.change <= tol, going on`` instead: the run
  did not stop there, another of the solver's stopping tests (e.g.
  ``gradient_tol``) not yet holding.

In a terminal (or any stream) each report is one printed line. In a Jupyter
kernel (IPython already imported and running a kernel) the reports replace
one another in a single output line (``IPython.display`` with a
``display_id``). ``every=0`` shows nothing. There is no dependency beyond
the standard library and NumPy: IPython is used only when it is already
loaded.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
from collections import deque

import numpy as np

from dmlr.solvers.apg import relative_change

__all__ = [
    "DISPLAY_EVERY",
    "PROGRESS_AFTER_SECONDS",
    "ProgressReporter",
    "SearchProgress",
    "display",
    "display_every",
    "first_use_notice",
    "format_seconds",
    "in_notebook",
]

#: Iterations over which the rate of decrease of log(relative change) and the time per
#: iteration are measured for the estimate of the time left.
ESTIMATE_WINDOW = 50
#: Fewest iterations with a positive relative change, in the window's recent half of the run, before
#: the trend is used (before that, only the ``max_iter`` cap).
MIN_TREND_POINTS = 8


def format_seconds(seconds: float) -> str:
    """``0.25 s``, ``12.30 s``, ``4 min 05 s``, ``2 h 03 min``; ``?`` when not finite."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 60:
        return f"{seconds:.2f} s"
    if seconds < 3600:
        m, s = divmod(round(seconds), 60)
        return f"{m} min {s:02d} s"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min"


class ProgressReporter:
    """Solver callback that reports fit progress every ``every`` iterations.

    Parameters
    ----------
    every : int
        Report every ``every`` iterations (and the first and last ones);
        0 reports nothing.
    max_iter : int, optional
        The solver's iteration cap (bounds the estimate of the time left).
    tol : float, optional
        The solver's relative-change tolerance (the target of the estimate;
        it also lets the reporter recognise the last iteration).
    file : file-like, optional
        Where lines go (default: ``sys.stdout`` at the time of each report).
    notebook : bool, optional
        Force (True) or prevent (False) the single updating notebook line;
        default: on when running inside a Jupyter (IPython) kernel.
    prefix : str
        Text before every report.

    Use::

        reporter = ProgressReporter(10, max_iter=max_iter, tol=tol)
        result = apg(..., max_iter=max_iter, tol=tol, callback=reporter)
        reporter.finish(result.converged)

    The callback cannot tell whether an iteration whose relative change is
    at most ``tol`` ends the run (other stopping tests may remain), so such
    an iteration's line is held back until the next iteration arrives
    (then it is shown as usual, if it was due) or :meth:`finish` replaces
    it with the final line.

    Notes
    -----
    **How the time left is estimated** (:meth:`estimate_seconds_left`): it is
    (estimated iterations left) x (mean seconds per iteration over the last
    ``ESTIMATE_WINDOW`` iterations). The iterations left are the smaller of

    * ``max_iter - t`` (a hard cap: the run cannot go further), and
    * a linear extrapolation of ``log(relative change)`` against the
      iteration number, fitted by least squares over the last
      ``ESTIMATE_WINDOW`` iterations that lie in the recent half of the run
      (at least ``MIN_TREND_POINTS`` of them), from the fitted line's value
      at the current iteration to the iteration where it reaches
      ``log(tol)``; used only when that fit is decreasing. The first half
      of the run is left out because solvers' relative change falls fastest
      in their first iterations: a fit over them extrapolates that pace and
      announces the end far too early. The line, not the last change, is
      the start: a quasi-Newton run's change jumps up and down around its
      trend, and the estimate would swing with it.

    It assumes that the recent geometric (linear-rate) convergence
    continues, and it targets the relative-change test only (not other
    stopping tests the solver may have). Accelerated gradient's relative change is not monotone and
    its rate can change, so the figure is a rough guide, not a bound; when
    the relative change is not (yet) decreasing, or ``tol`` is 0, only the
    ``max_iter`` cap is left, and the report shows it as ``left <=``.
    Without ``max_iter`` and without a decreasing trend there is no
    estimate (``?``).

    Attributes
    ----------
    last_estimate : float or None
        Seconds left at the latest iteration (``math.inf`` when unknown;
        None before the first iteration).
    last_estimate_capped : bool
        Whether that estimate is the ``max_iter`` cap rather than the trend.
    lines : int
        Number of reports shown.
    """

    def __init__(
        self,
        every: int = 1,
        *,
        max_iter: int | None = None,
        tol: float | None = None,
        file=None,
        notebook: bool | None = None,
        prefix: str = "  ",
        after_seconds: float | None = None,
    ):
        if not (isinstance(every, (int, np.integer)) and not isinstance(every, bool) and every >= 0):
            raise ValueError(f"every must be an integer >= 0, got {every!r}")
        self.every = int(every)
        self.max_iter = None if max_iter is None else int(max_iter)
        self.tol = None if tol is None else float(tol)
        self.file = file
        self.notebook = notebook
        self.prefix = prefix
        self.after_seconds = _quiet_for() if after_seconds is None else float(after_seconds)
        self.last_estimate: float | None = None
        self.last_estimate_capped = False
        self.lines = 0
        self._previous: float | None = None
        self._window: deque = deque(maxlen=ESTIMATE_WINDOW + 1)  # (t, seconds, log relative change)
        self._out = _Output()
        self._latest = None  # (t, objective, change, seconds) of the latest iteration
        self._held = None  # a due line held back (relative change <= tol: maybe the last iteration)
        self._shown_final = False

    # -- the callback ---------------------------------------------------------------
    def __call__(self, t: int, objective: float, seconds: float) -> bool:
        """Record iteration ``t``; report it when due. Never asks the solver to stop."""
        objective = float(objective)
        change = math.nan if self._previous is None else relative_change(objective, self._previous)
        self._previous = objective
        log_change = math.log(change) if change > 0 and math.isfinite(change) else math.nan
        self._window.append((int(t), float(seconds), log_change))
        self.last_estimate, self.last_estimate_capped = self.estimate_seconds_left(t, change)
        self._latest = (int(t), objective, change, float(seconds))
        if not self.every:
            return False
        if self._held is not None:  # the run went on: the held line was not the last one
            self._show(self._held)
            self._held = None
        if self.max_iter is not None and t >= self.max_iter and not self._below_tol(t, change):
            # the solver stops here whatever else (below tol, it may also have converged: finish says)
            self._show(self.format(t, objective, change, seconds, status="max_iter reached"))
            self._shown_final = True
        elif t == 1 or t % self.every == 0:
            line = self.format(t, objective, change, seconds)
            if self._below_tol(t, change):
                self._held = line
            else:
                self._show(line)
        return False

    def finish(self, converged: bool | None = None) -> None:
        """Show the final line: the last iteration, ``(converged)``, ``(max_iter reached)`` or ``(stopped)``.

        Parameters
        ----------
        converged : bool, optional
            The solver's verdict; default: whether the last relative change
            was at most ``tol``.
        """
        self._held = None
        if not self.every or self._latest is None or self._shown_final:
            return
        t, objective, change, seconds = self._latest
        if converged is None:
            converged = self._below_tol(t, change)
        if converged:
            status = "converged"
        else:
            status = "max_iter reached" if self.max_iter is not None and t >= self.max_iter else "stopped"
        self._show(self.format(t, objective, change, seconds, status=status))
        self._shown_final = True

    def _below_tol(self, t: int, change: float) -> bool:
        return self.tol is not None and t >= 2 and change <= self.tol

    def estimate_seconds_left(self, t: int, change: float) -> tuple[float, bool]:
        """``(seconds, capped)``: the estimate described in the class notes.

        ``capped`` is True when the ``max_iter`` cap, not the trend, gave it.
        """
        if self._below_tol(t, change):
            return 0.0, False
        cap = math.inf if self.max_iter is None else max(self.max_iter - int(t), 0)
        window = list(self._window)
        if len(window) >= 2 and window[-1][0] > window[0][0]:
            per_iter = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
        else:
            per_iter = window[-1][1] / max(window[-1][0], 1) if window else math.nan
        trend = math.inf
        points = [(it, lc) for it, _, lc in window if math.isfinite(lc)]
        # the recent half of the run (the whole window once the run is twice its length): the first
        # iterations' fast fall misleads, and the more points the steadier the slope
        points = [p for p in points if p[0] > t / 2]
        if (
            self.tol is not None
            and self.tol > 0
            and len(points) >= MIN_TREND_POINTS
            and math.isfinite(change)
            and change > 0
        ):
            its = np.array([p[0] for p in points], dtype=np.float64)
            logs = np.array([p[1] for p in points])
            slope, level = np.polyfit(its - its.mean(), logs, 1) if np.ptp(its) > 0 else (0.0, 0.0)
            if slope < 0:
                # from the fitted line at this iteration, not from this iteration's change: a
                # quasi-Newton run's change jumps up and down around its trend
                now = level + slope * (float(t) - its.mean())
                trend = max(0.0, math.ceil((math.log(self.tol) - now) / slope))
        iterations = min(trend, cap)
        if not math.isfinite(iterations) or not math.isfinite(per_iter):
            return math.inf, False
        return iterations * per_iter, iterations == cap and cap < trend

    def format(self, t: int, objective: float, change: float, seconds: float, *, status: str | None = None) -> str:
        """One report line; ``status`` (e.g. "converged") replaces the estimate of the time left."""
        change_text = "-" if not math.isfinite(change) else f"{change:.2e}"
        if status is not None:
            tail = f"({status})"
        elif self._below_tol(t, change):
            tail = "rel.change <= tol, going on"  # shown only once the run went on (held till then)
        else:
            est = self.last_estimate if self.last_estimate is not None else math.inf
            mark = "" if not math.isfinite(est) else "<=" if self.last_estimate_capped else "~"
            tail = f"left {mark}{format_seconds(est)}"
        return (
            f"{self.prefix}iter {t:5d}  objective {objective:.6e}  rel.change {change_text:>8}  "
            f"elapsed {format_seconds(seconds)}  {tail}"
        )

    # -- output -----------------------------------------------------------------------
    def _show(self, text: str) -> None:
        if self._latest is not None and self._latest[3] < self.after_seconds and not self.lines:
            return  # a short fit prints nothing
        self.lines += 1
        self._out.show(text, self.file, self.notebook)


#: Iterations between the final fit's progress lines under :func:`dmlr.fit` (see :func:`display`).
DISPLAY_EVERY = 10

_display = threading.local()


def _quiet_for() -> float:
    return getattr(_display, "after", 0.0)


def display_every() -> int:
    """Iterations between a fit's progress lines that :func:`dmlr.fit` switches on (:func:`display`)."""
    return getattr(_display, "every", DISPLAY_EVERY)


@contextlib.contextmanager
def display(*, after: float | None = None, every: int | None = None):
    """Within the block, a :class:`ProgressReporter` made without ``after_seconds`` shows
    nothing until its solver has run ``after`` seconds (a fit of a few seconds prints
    nothing), and fits whose progress :func:`dmlr.fit` switches on report every ``every``
    iterations (the command line's ``--verbose N``)."""
    old = (_quiet_for(), display_every())
    if after is not None:
        _display.after = float(after)
    if every is not None:
        _display.every = int(every)
    try:
        yield
    finally:
        _display.after, _display.every = old


def first_use_notice(file=None) -> bool:
    """Print a line when dmlr's compiled kernels are not yet cached on this machine.

    Numba compiles the kernels at their first use and caches them (beside the
    modules, or in ``NUMBA_CACHE_DIR``); later processes load them
    (:func:`dmlr.kernels.ranking_cached` asks Numba's index). Returns whether
    the line was printed.
    """
    from dmlr.kernels import ranking_cached

    if ranking_cached():
        return False
    print("dmlr: compiling dmlr's kernels, once per machine (tens of seconds)", file=file or sys.stdout, flush=True)
    return True


class _Output:
    """Where report lines go: printed lines, or one updating line in a Jupyter kernel."""

    def __init__(self):
        self._handle = None

    def show(self, text: str, file=None, notebook: bool | None = None) -> None:
        use_notebook = bool(notebook) and "IPython" in sys.modules if notebook is not None else in_notebook()
        if use_notebook:
            from IPython.display import Pretty, display

            if self._handle is None:
                self._handle = display(Pretty(text), display_id=True)
            else:
                self._handle.update(Pretty(text))
            return
        print(text, file=file if file is not None else sys.stdout, flush=True)


#: A search shows its progress once it has run this many seconds: a short search prints nothing.
PROGRESS_AFTER_SECONDS = 5.0


class SearchProgress:
    """Progress of every search: a line per path value (:func:`dmlr.tuning.search`) or per
    fit (:func:`dmlr.model_selection.grid_search_cv`) once the search is long.

    ::

        search alpha: stage 2/3 (16,384 rows, 2 folds), value 3 (~3 planned), ranking_loss 0.04812,
            best 0.04759 at 15.5; elapsed 21.3 s, left ~14 s

    The time left assumes the values still planned cost what the ones done
    cost per row and fold (a path's less regularized values cost more, so it
    errs short on a first stage and is close on the later ones).

    Parameters
    ----------
    verbose : int
        0: nothing; 1: lines once the search has run
        :data:`dmlr.progress.PROGRESS_AFTER_SECONDS`; 2: every line.
    space : list of Axis
        The searched parameters.
    sizes : list of int
        Rows of each stage.
    folds : int
        Folds of every stage.
    start : float
        ``time.perf_counter()`` at the search's start.
    staged : bool
        Whether the search runs in stages over rows (its lines then name the stage).
    file, notebook
        As :class:`ProgressReporter`'s.
    """

    def __init__(self, verbose: int, space, sizes, folds: int, start: float, *, staged: bool, file=None, notebook=None):
        self.verbose = int(verbose or 0)
        self.sizes = list(sizes)
        self.start = start
        self.file, self.notebook = file, notebook
        self.lines = 0
        self._out = _Output()
        self._staged = bool(staged)
        # planned work: (values, folds, rows) per stage and axis; a later stage walks ~3 values
        self._plan = {
            (s, a.name): (len(a.path(staged)) if s == 0 else 3, int(folds), m)
            for s, m in enumerate(sizes)
            for a in space
        }
        self._done = dict.fromkeys(self._plan, 0)
        self._stage, self._axis = 0, None
        self._fits_done = 0

    def _work(self, key, values) -> float:
        _, folds, rows = self._plan[key]
        return values * folds * rows * (folds - 1) / folds

    def begin(self, stage: int, axis) -> None:
        self._stage, self._axis = stage, axis

    def value(self, name: str, value: float, mean: float, best: float, scores: dict) -> None:
        key = (self._stage, name)
        self._done[key] += 1
        if not self.verbose:
            return
        elapsed = time.perf_counter() - self.start
        if self.verbose < 2 and elapsed < PROGRESS_AFTER_SECONDS:
            return
        planned, folds, rows = self._plan[key]
        done = sum(self._work(k, v) for k, v in self._done.items())
        left = sum(self._work(k, max(self._plan[k][0] - v, 0)) for k, v in self._done.items())
        estimate = elapsed * left / done if done else math.inf
        stage = f"stage {self._stage + 1}/{len(self.sizes)} ({rows:,} rows, {folds} folds), "
        stage = stage if self._staged else ""
        best_mean = float(np.mean(scores[best]))
        self._show(
            f"search {name}: {stage}value {self._done[key]} (~{max(planned, self._done[key])} planned) "
            f"{value:.4g}: {mean:.5f}, best {best_mean:.5f} at {best:.4g}; "
            f"elapsed {format_seconds(elapsed)}, left ~{format_seconds(estimate)}"
        )

    def end(self, stage: int, axis, best: float, mean: float, fitted: float | None = None) -> None:
        """The stage's choice ``best`` for ``axis``; ``mean``, the mean score of ``fitted``, the
        best value fitted, when ``best`` lies between the values fitted (a staged search's vertex),
        else of ``best``."""
        key = (stage, axis.name)
        self._plan[key] = (self._done[key],) + self._plan[key][1:]  # what was planned is done
        if self.verbose and (self.lines or self.verbose > 1):
            score = (
                f"{mean:.5f}"
                if fitted is None or fitted == best
                else f"between the values fitted, best {fitted:.4g}: {mean:.5f}"
            )
            self._show(
                f"search {axis.name}: chose {best:.4g} ({score}) on {self.sizes[stage]:,} rows; "
                f"elapsed {format_seconds(time.perf_counter() - self.start)}"
            )

    def fit_done(self, total: int) -> None:
        """One more fit of a search whose ``total`` fits are all known at its start (a grid
        search) has finished, in whatever order: the line of fits done of all, and the time
        left at the mean time of the fits done."""
        self._fits_done += 1
        done = self._fits_done
        if not self.verbose:
            return
        elapsed = time.perf_counter() - self.start
        if self.verbose < 2 and elapsed < PROGRESS_AFTER_SECONDS:
            return
        left = elapsed / done * (total - done) if done else math.inf
        self._show(f"search: fit {done} of {total}; elapsed {format_seconds(elapsed)}, left ~{format_seconds(left)}")

    def _show(self, text: str) -> None:
        self.lines += 1
        self._out.show(text, self.file, self.notebook)


def in_notebook() -> bool:
    """Whether this code runs in a Jupyter kernel (IPython loaded, with a kernel attached)."""
    if "IPython" not in sys.modules:  # not in IPython at all; do not import it
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None
