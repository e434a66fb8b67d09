"""``affinity check CONFIG``: run the configuration checklist and print every diagnostic.

Checks a routing or router configuration: data services, the faucet block and the cluster
blocks (``add-cluster``, ``add-cluster-node``, ``add-domain``: unknown domains or nodes,
duplicate ids, a loop of ``upstream`` references).

Exit status: 0 when the configuration is usable (no problem, or warnings only), 1 when it has
errors, 2 when the file cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from affinity.cli._text import help_text
from affinity.config.diagnostics import plural, summary
from affinity.config.faucet import analyse_router_file

#: Exit status: no error (warnings allowed).
EXIT_OK = 0
#: Exit status: the configuration has errors.
EXIT_ERRORS = 1
#: Exit status: the file could not be read.
EXIT_UNREADABLE = 2


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``check`` subcommand."""
    parser = subparsers.add_parser(
        "check",
        help="check a routing configuration file",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", metavar="CONFIG", help="configuration file")
    parser.add_argument(
        "--no-plugins",
        action="store_true",
        help="do not import policy plugins (only check their names)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Check ``args.config``; print diagnostics and a summary; return the exit status."""
    try:
        analysis = analyse_router_file(args.config, load_plugins=not args.no_plugins)
    except OSError as exc:
        print(f"affinity check: cannot read {args.config}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    for diagnostic in analysis.diagnostics:
        print(diagnostic)
    if analysis.diagnostics:
        print(f"{args.config}: {summary(analysis.diagnostics)}")
    else:
        services = analysis.config.routing.data_services
        groups = sum(len(service.source_groups) for service in services)
        counts = f"{plural(len(services), 'data service')}, {plural(groups, 'source group')}"
        cluster = analysis.config.cluster
        if cluster is not None:
            counts += f", {plural(len(cluster.nodes), 'cluster node')}, {plural(len(cluster.domains), 'domain')}"
        print(f"{args.config}: ok ({counts})")
    return EXIT_ERRORS if analysis.errors else EXIT_OK
