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

``--router FILE``: the driver's process also runs the subject router (``affinity router``,
``docs/subjects.md``) on a client attached to this driver, with the routing configuration FILE
read and checked as ``affinity router --config FILE`` checks it (diagnostics as
``file:line:column``, exit 1 on errors, before the driver starts) and the router's own options:
``--listen CHANNEL`` (default ``aeron:udp?endpoint=127.0.0.1:40500``), ``--node NODE_ID``,
``--control CHANNEL``, ``--liveness-timeout SECONDS``, ``--forward CHANNEL``,
``--backlog-budget BYTES``, ``--secret-file PATH``. One process then serves both the host's
clients and its subjects; when it dies, subscribers and sources notice the router's silence
(``docs/subjects.md``, "Router failure"); on SIGINT/SIGTERM the router tells its members it
stops, then the driver closes.

Exit status: 0 after a clean shutdown, 1 when the driver (or its router) cannot start or the
router's configuration has errors, 2 on a bad option or an unreadable configuration.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from affinity.cli import router as router_cli
from affinity.cli._text import help_text
from affinity.config.faucet import RouterAnalysis
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


#: Seconds the driver waits for its router to listen before it gives up (and stops).
ROUTER_START_TIMEOUT = 30.0
#: Usage of the router's options of ``affinity driver`` (printed after the driver's own).
ROUTER_USAGE = """\
  --router FILE
      also run the subject router in this process (as affinity router --config FILE), with its
      options --listen, --node, --control, --liveness-timeout, --forward, --backlog-budget,
      --secret-file (affinity router --help)"""


def router_parser() -> argparse.ArgumentParser:
    """The router's options of ``affinity driver`` (the rest are the driver's)."""
    parser = argparse.ArgumentParser(prog="affinity driver", add_help=False, allow_abbrev=False)
    parser.add_argument("--router", dest="config", metavar="FILE")
    router_cli.add_router_options(parser)
    parser.set_defaults(action="run", bootstrap_listen=None, registry=None, status=None)
    return parser


class RouterCompanion:
    """The subject router on a thread of the driver's process (``router_cli.run`` on a client
    attached to the driver): started by :meth:`start` once the driver is ready, closed before
    the driver closes."""

    def __init__(self, args: argparse.Namespace, analysis: RouterAnalysis) -> None:
        self._args, self._analysis = args, analysis
        self._stop, self._ready = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self.status: int | None = None

    def start(self, directory: str) -> RouterCompanion:
        """Attaches a client to the driver in ``directory`` and starts the router; raises
        DriverError when it cannot start (the driver then stops)."""
        from affinity import _affinity

        client = _affinity.Client(dir=directory)
        self._thread = threading.Thread(target=self._run, args=(client,), name="affinity-driver-router", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + ROUTER_START_TIMEOUT
        while not self._ready.wait(0.05):
            if not self._thread.is_alive():
                raise DriverError(f"the router did not start (exit status {self.status})")
            if time.monotonic() > deadline:
                self.close()
                raise DriverError(f"the router did not listen within {ROUTER_START_TIMEOUT:g} s")
        return self

    def _run(self, client: Any) -> None:
        self.status = router_cli.run(
            self._args, client=client, stop=self._stop, ready=self._ready, analysis=self._analysis
        )

    def close(self) -> None:
        """Stops the router (it tells its members it stops) and waits for its thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(ROUTER_START_TIMEOUT)


def run(args: argparse.Namespace) -> int:
    """Run the driver with ``args.options``; return the exit status."""
    options: list[str] = list(args.options)
    if "-h" in options or "--help" in options:
        print(DRIVER_USAGE)
        print(ROUTER_USAGE)
        return EXIT_OK
    companion = None
    if any(option == "--router" or option.startswith("--router=") for option in options):
        try:
            router_args, options = router_parser().parse_known_args(options)
        except SystemExit as exc:  # argparse printed what is wrong
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        loaded = router_cli.load_config(router_args)
        if isinstance(loaded, int):
            return loaded
        companion = RouterCompanion(router_args, loaded)
    try:
        run_driver(options, companion.start if companion is not None else None)
    except ConfigError as exc:
        print(f"affinity driver: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DriverError as exc:
        print(f"affinity driver: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
