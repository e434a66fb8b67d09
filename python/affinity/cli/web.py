"""``affinity web [--listen 127.0.0.1:8080] [--dir D ...] [--registry R] [--router CHANNEL ...]``:
a live page of the consumer groups of a registry, standalone drivers and routers, and
Prometheus metrics at ``/metrics``.

The page updates itself (server-sent events, every 0.5 s): each group's members and their
liveness, every queue's owner and epoch, acknowledged/sent/retained and lag, the moves as they
happen (failover or handoff, and why), publish and delivery rates; each driver's counters,
clients, distinct errors, longest duty cycle and rates; each router's subjects, peers, moves,
relay rate and faucet assignments. A router is watched through the reports it publishes with
``affinity router --status CHANNEL`` (give the same CHANNEL to ``--router``).

The server only reads: ``cnc.dat`` mapped read-only, the registry's definitions, and the
group's control plane through an observer (as ``affinity group status``). It listens on
loopback unless ``--listen`` names another address. A problem (no driver, a corrupt
``cnc.dat``, junk in the registry, a router that does not answer) is shown in place; the rest
keeps being served. Metric names: docs/observability.md.

Exit status: 0 after SIGTERM; 130 after Ctrl-C (SIGINT); 2 when the address cannot be listened
on or the web extra is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

from affinity.cli._text import help_text

#: Exit status: stopped by a signal.
EXIT_OK = 0
#: Exit status: cannot listen, or the web extra is not installed.
EXIT_UNAVAILABLE = 2
#: Modules of the ``web`` extra.
WEB_MODULES = ("starlette", "uvicorn", "sse_starlette", "prometheus_client")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``web`` subcommand."""
    from affinity.web.settings import DEFAULT_LISTEN

    parser = subparsers.add_parser(
        "web",
        help="a live web page of groups, drivers and routers, and Prometheus /metrics",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"address to serve on (default {DEFAULT_LISTEN})"
    )
    parser.add_argument(
        "--dir",
        action="append",
        metavar="DIR",
        help="a standalone driver's directory (repeatable; default $AFFINITY_DIR, else per user in /dev/shm)",
    )
    parser.add_argument("--registry", metavar="DIR", help="group registry (default: $AFFINITY_REGISTRY, ...)")
    parser.add_argument(
        "--router",
        action="append",
        default=[],
        metavar="CHANNEL",
        help="a channel routers report on (affinity router --status CHANNEL); repeatable",
    )
    parser.set_defaults(run=run)


def missing_modules() -> list[str]:
    """The modules of the web extra that are not installed."""
    return [name for name in WEB_MODULES if importlib.util.find_spec(name) is None]


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or Ctrl-C."""
    missing = missing_modules()
    if missing:
        from affinity.cli.demo import install_hint

        print(
            f"affinity web: needs the web extra (missing {', '.join(missing)}): {install_hint('web')}", file=sys.stderr
        )
        return EXIT_UNAVAILABLE
    from affinity.driver import default_driver_dir
    from affinity.web.app import bind, is_loopback, parse_listen, serve_forever
    from affinity.web.monitor import Monitor, WebOptions

    try:
        host, port = parse_listen(args.listen)
        sock = bind(host, port)
    except (ValueError, OSError) as error:
        print(f"affinity web: cannot listen on {args.listen}: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not is_loopback(host):
        print(
            f"affinity web: listening on {host}, not loopback: anyone who can reach it reads the page and /metrics",
            file=sys.stderr,
        )
    options = WebOptions(tuple(args.dir or [default_driver_dir()]), args.registry, tuple(args.router))
    serve_forever(Monitor(options), sock)
    return EXIT_OK
