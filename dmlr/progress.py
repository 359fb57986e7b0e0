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
  relative change is already at most ``tol`` shows ``rel.change <= tol``
  instead (the solver may have other stopping tests to pass, e.g.
  ``gradient_tol``).

In a terminal (or any stream) each report is one printed line. In a Jupyter
kernel (IPython already imported and running a kernel) the reports replace
one another in a single output line (``IPython.display`` with a
``display_id``). ``every=0`` shows nothing. There is no dependency beyond
the standard library and NumPy: IPython is used only when it is already
loaded.
"""

from __future__ import annotations

import math
import sys
from collections import deque

import numpy as np

from dmlr.solvers.apg import relative_change

__all__ = ["ProgressReporter", "format_seconds", "in_notebook"]

#: Iterations over which the rate of decrease of log(relative change) and the time per
#: iteration are measured for the estimate of the time left.
ESTIMATE_WINDOW = 50
#: Fewest iterations with a positive relative change before the trend is used.
MIN_TREND_POINTS = 3


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
      ``ESTIMATE_WINDOW`` iterations, to the iteration where it reaches
      ``log(tol)``; used only when that fit is decreasing.

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
    ):
        if not (isinstance(every, (int, np.integer)) and not isinstance(every, bool) and every >= 0):
            raise ValueError(f"every must be an integer >= 0, got {every!r}")
        self.every = int(every)
        self.max_iter = None if max_iter is None else int(max_iter)
        self.tol = None if tol is None else float(tol)
        self.file = file
        self.notebook = notebook
        self.prefix = prefix
        self.last_estimate: float | None = None
        self.last_estimate_capped = False
        self.lines = 0
        self._previous: float | None = None
        self._window: deque = deque(maxlen=ESTIMATE_WINDOW + 1)  # (t, seconds, log relative change)
        self._handle = None
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
        if (
            self.tol is not None
            and self.tol > 0
            and len(points) >= MIN_TREND_POINTS
            and math.isfinite(change)
            and change > 0
        ):
            its = np.array([p[0] for p in points], dtype=np.float64)
            logs = np.array([p[1] for p in points])
            slope = np.polyfit(its - its.mean(), logs, 1)[0] if np.ptp(its) > 0 else 0.0
            if slope < 0:
                trend = max(0.0, math.ceil((math.log(self.tol) - math.log(change)) / slope))
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
            tail = "rel.change <= tol"
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
        self.lines += 1
        if self._use_notebook():
            from IPython.display import Pretty, display

            if self._handle is None:
                self._handle = display(Pretty(text), display_id=True)
            else:
                self._handle.update(Pretty(text))
            return
        print(text, file=self.file if self.file is not None else sys.stdout, flush=True)

    def _use_notebook(self) -> bool:
        if self.notebook is not None:
            return bool(self.notebook) and "IPython" in sys.modules
        return in_notebook()


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
