"""The ``affinity`` command line: one module per subcommand, each with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: Subcommand modules, in the order ``affinity --help`` lists them.
SUBCOMMAND_MODULES = (
    "affinity.cli.demo",
    "affinity.cli.check",
    "affinity.cli.route",
    "affinity.cli.driver",
    "affinity.cli.stat",
    "affinity.cli.group",
    "affinity.cli.router",
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(prog="affinity", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``affinity`` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
