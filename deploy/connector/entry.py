"""The single-file connector's entry point: ``devyard-connector run|quick ...`` is
``devyard connector run|quick ...``; ``devyard-connector --version`` names the build. Built by
scripts/build-connector with PyInstaller: only the connector's commands are parsed, so nothing
of the server or the host daemon is imported or bundled."""

from __future__ import annotations

import argparse
import os
import sys

from devyard import __version__
from devyard.connector.commands import add_commands


def main(argv: list[str]) -> int:
    if argv in (["--version"], ["-V"]):
        print(f"devyard-connector {__version__}")
        return 0
    parser = argparse.ArgumentParser(prog="devyard-connector")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["connector", *argv])
    try:
        code: int = args.run(args, os.environ)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
