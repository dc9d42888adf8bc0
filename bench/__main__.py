"""`python -m bench NAME [args]`: run `bench.NAME.main(argv) -> int`."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path


def _available() -> list[str]:
    here = str(Path(__file__).parent)
    return sorted(m.name for m in pkgutil.iter_modules([here]) if not m.name.startswith("_"))


def main(argv: list[str]) -> int:
    usage = "usage: python -m bench NAME [args]   (NAME: " + ", ".join(_available()) + ")"
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    if argv[0] in {"-h", "--help"}:
        print(usage)
        return 0
    name, rest = argv[0], argv[1:]
    if name.startswith("_") or name not in _available():
        print(f"bench: no benchmark {name!r} (have: {', '.join(_available())})", file=sys.stderr)
        return 2
    module = importlib.import_module(f"bench.{name}")
    entry: Callable[[list[str]], int] = module.main
    return entry(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
