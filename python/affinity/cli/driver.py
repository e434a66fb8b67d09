"""``affinity driver [--dir PATH] [--threading MODE] [--idle spin|yield|backoff] [...]``: run the
standalone media driver in the foreground until Ctrl-C or SIGTERM.

Clients attach through the driver directory (``--dir``, else ``$AFFINITY_DIR``, else a per-user
folder under ``/dev/shm``); on SIGINT/SIGTERM the driver ends every stream, removes its files and
exits 0. A second driver on a directory whose driver is alive refuses (exit 1) and names the
pid; a stale directory is taken over. ``affinity driver --help`` lists the driver's options (the
same as the ``affinity-driver`` executable's).

``--bootstrap-listen HOST:PORT`` (with ``--registry DIR``): the driver also answers BOOTSTRAP there
for every group of that registry, so a group member's ``bootstrap=`` list may name this driver
(``docs/groups.md``, "A driver or a router in the bootstrap list"); the answers stop with the
driver, the groups that joined through it do not.

Exit status: 0 after a clean shutdown, 1 when the driver cannot start, 2 on a bad option.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from affinity.cli._text import help_text
from affinity.driver import DRIVER_USAGE, run_driver
from affinity.exceptions import ConfigError, DriverError

#: Exit status: the driver ran and shut down cleanly.
EXIT_OK = 0
#: Exit status: the driver could not start (live driver in the directory, permissions, ...).
EXIT_FAILED = 1
#: Exit status: an option is invalid.
EXIT_USAGE = 2


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``driver`` subcommand."""
    parser = subparsers.add_parser(
        "driver",
        help="run the standalone media driver in the foreground",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        prefix_chars="\0",
    )
    parser.add_argument("options", nargs=argparse.REMAINDER, help="driver options (see --help)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run the driver with ``args.options``; return the exit status."""
    options: list[str] = list(args.options)
    if "-h" in options or "--help" in options:
        print(DRIVER_USAGE)
        return EXIT_OK
    try:
        run_driver(options)
    except ConfigError as exc:
        print(f"affinity driver: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DriverError as exc:
        print(f"affinity driver: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
