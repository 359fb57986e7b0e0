"""``python -m benchmarks LIST``: each benchmark's name and what it measures;
``python -m benchmarks NAME [args...]``: run ``benchmarks/NAME.py`` with those arguments."""

from __future__ import annotations

import ast
import importlib
import sys

from benchmarks import HERE


def benchmarks() -> dict[str, str]:
    """{name: the first line of its docstring} of every script in ``benchmarks/`` (not the helpers, ``_*``)."""
    out = {}
    for path in sorted(HERE.glob("*.py")):
        if not path.stem.startswith("_"):
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            out[path.stem] = doc.strip().split("\n")[0]
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    known = benchmarks()
    if not argv or argv[0] in ("LIST", "-h", "--help"):
        width = max(map(len, known))
        for name, line in known.items():
            print(f"{name:<{width}}  {line}")
        return 0
    name, rest = argv[0].removesuffix(".py"), argv[1:]
    if name not in known:
        print(f"no benchmark {name!r}; `python -m benchmarks LIST` lists them", file=sys.stderr)
        return 2
    sys.argv = [str(HERE / f"{name}.py"), *rest]  # as `python benchmarks/NAME.py` would see it (--docs headers)
    return importlib.import_module(name).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
