"""``affinity route CONFIG SUBJECT... [--down LABEL...] [--json]``: where subjects go, and why.

Builds the routing tables from CONFIG (as the transport does), marks the ``--down`` peers as
down, and asks where each subject would go (``Router.route``: nothing is bound, so the answers do
not depend on the order of the subjects). A data service with several source groups (a blotter
container fed by two adapters) shows the other groups' decisions after ``also:``.

Exit status: 0 when every subject was routed, 1 when the configuration has errors or a
``--down`` label is unknown, 2 when the file cannot be read, 3 when some subject could not be
routed (no data service, or no peer up).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TypedDict

from affinity.cli._text import help_text
from affinity.config.model import RoutingConfig
from affinity.config.parser import analyse_file
from affinity.exceptions import AffinityError
from affinity.routing import Decision, Router

#: Exit status: every subject routed.
EXIT_OK = 0
#: Exit status: the configuration (or a ``--down`` label) is wrong.
EXIT_ERRORS = 1
#: Exit status: the file cannot be read.
EXIT_UNAVAILABLE = 2
#: Exit status: at least one subject could not be routed.
EXIT_UNROUTED = 3


class RouteResult(TypedDict, total=False):
    """One subject's answer as ``--json`` prints it: the :class:`affinity.routing.Decision`
    fields (``additional`` only when the service has other source groups), or ``subject``,
    ``member`` (``None``) and ``error`` when it could not be routed."""

    subject: str
    service: str
    source_group: str
    member: str | None
    peer_index: int | None
    priority_group: int | None
    composite: str | None
    reason: str
    rule_index: int | None
    additional: list[RouteResult]
    error: str


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``route`` subcommand."""
    parser = subparsers.add_parser(
        "route",
        help="show which peer each subject is routed to, and why",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config", metavar="CONFIG", help="configuration file")
    parser.add_argument("subjects", metavar="SUBJECT", nargs="+", help="subjects to route")
    parser.add_argument(
        "--down",
        metavar="LABEL",
        nargs="+",
        action="extend",
        default=[],
        help="peer labels to mark down before routing",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON array of decisions")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Route ``args.subjects``; print one line (or JSON object) per subject."""
    try:
        analysis = analyse_file(args.config)
    except OSError as exc:
        print(f"affinity route: cannot read {args.config}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    if not analysis.ok:
        for diagnostic in analysis.errors:
            print(diagnostic, file=sys.stderr)
        return EXIT_ERRORS
    unknown = sorted(set(args.down) - _labels(analysis.config))
    if unknown:
        known = ", ".join(sorted(_labels(analysis.config)))
        print(
            f"affinity route: unknown peer label(s) {', '.join(unknown)} (known: {known})",
            file=sys.stderr,
        )
        return EXIT_ERRORS
    try:
        router = Router.from_config(analysis.config)
        for label in args.down:
            router.set_member_up(label, False)
    except AffinityError as exc:
        print(f"affinity route: {exc}", file=sys.stderr)
        return EXIT_ERRORS
    results = [_route(router, subject) for subject in args.subjects]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            print(_describe(result))
    routed = all(result.get("member") is not None for result in results)
    return EXIT_OK if routed else EXIT_UNROUTED


def _labels(config: RoutingConfig) -> set[str]:
    return {
        label.name
        for service in config.data_services
        for group in service.source_groups
        for priority in group.priority_groups
        for label in priority.labels
    }


def _route(router: Router, subject: str) -> RouteResult:
    """One decision as a JSON-ready dict; an ``error`` entry when the subject is not routed."""
    try:
        decision = router.route(subject)
    except AffinityError as exc:
        return {"subject": subject, "member": None, "error": str(exc)}
    return _decision_dict(decision)


def _decision_dict(decision: Decision) -> RouteResult:
    result: RouteResult = {
        "subject": decision.subject,
        "service": decision.service,
        "source_group": decision.source_group,
        "member": decision.member,
        "peer_index": decision.peer_index,
        "priority_group": decision.priority_group,
        "composite": decision.composite,
        "reason": decision.reason,
        "rule_index": decision.rule_index,
    }
    if decision.additional:
        result["additional"] = [_decision_dict(item) for item in decision.additional]
    return result


def _describe(result: RouteResult) -> str:
    subject = result["subject"]
    if result.get("member") is None:
        return f"{subject} -> not routed: {result.get('error') or result.get('reason')}"
    why = [f"service {result['service']}"]
    if result.get("composite") is not None:
        rule = result.get("rule_index")
        rule_text = f" (affinity rule {rule})" if rule is not None else ""
        why.append(f"affinity {result['composite']}{rule_text}")
    if result.get("reason") is not None:
        why.append(f"reason {result['reason']}")
    line = f"{subject} -> {result['member']} (peer {result['peer_index']}; {'; '.join(why)})"
    others = [_describe(item).partition(" -> ")[2] for item in result.get("additional", [])]
    return line + "".join(f"; also: {other}" for other in others)
