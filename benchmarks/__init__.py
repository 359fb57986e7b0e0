"""dmlr's benchmarks: one script per question, each printing a table (``python -m benchmarks LIST``).

The scripts import each other and :mod:`_common` by their plain names, as ``python
benchmarks/NAME.py`` runs them (its folder first on ``sys.path``); imported as this package,
the folder is put on ``sys.path`` for the same imports.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))
