"""The affinity command line: one module per subcommand, each with register(subparsers)."""

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
    "affinity.cli.web",
)

#: Exit code after Ctrl-C (128 + SIGINT, what a shell reports for it).
EXIT_INTERRUPTED = 130
#: Attribute of the parsed arguments naming the (innermost) subcommand parser that parsed them.
PARSER_ATTRIBUTE = "_subcommand_parser"

DESCRIPTION = "affinity: keyed messaging over an Aeron-compatible transport (driver, consumer groups, router, demo)."


def _version() -> str:
    """The package version, compiled into the extension (one definition: the crate's version)."""
    from affinity import __version__

    return __version__


def _mark_subcommand_parsers(parser: argparse.ArgumentParser) -> None:
    """Makes every subcommand parser, at any depth, record itself in the parsed arguments, so that
    an error found after parsing (an unknown option) is reported with that subcommand's usage."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(**{PARSER_ATTRIBUTE: sub})
                _mark_subcommand_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(prog="affinity", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    _mark_subcommand_parsers(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``affinity`` console script; returns the process exit code.

    Ctrl-C ends any subcommand with exit code 130 and no traceback (the subcommand closes what
    it opened on the way out).
    """
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        owner: argparse.ArgumentParser = getattr(args, PARSER_ATTRIBUTE, parser)
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        result: int = args.run(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return result


if __name__ == "__main__":
    sys.exit(main())
