"""Single-threaded BLAS for a block of code, without rescanning the process's libraries.

``threadpoolctl.threadpool_limits`` builds a new controller at every call, which
lists every shared library the process has loaded (2,000+ modules after
``import dmlr``), and a search's fit enters it twice (the unit, then the solver):
for the small fits of a search that scan costs as much as the fit. The controller
here is built once and rebuilt only when modules were imported since (an import is
what loads another BLAS), so a call costs no scan.
"""

from __future__ import annotations

import sys
import threading

_lock = threading.Lock()
_controller = [None, -1]  # the ThreadpoolController, len(sys.modules) when it was built


def _current_controller():
    from threadpoolctl import ThreadpoolController

    with _lock:
        if _controller[0] is None or _controller[1] != len(sys.modules):
            n_modules = len(sys.modules)
            _controller[:] = [ThreadpoolController(), n_modules]
        return _controller[0]


def single_threaded_blas():
    """A context manager that limits every loaded BLAS to one thread (and restores it after),
    as ``threadpoolctl.threadpool_limits(limits=1, user_api="blas")``."""
    return _current_controller().limit(limits=1, user_api="blas")
