"""``affinity group ...``: define consumer groups, watch them, and try one by hand.

Definitions (stored in the registry: ``--registry``, else ``$AFFINITY_REGISTRY``, else
``$XDG_STATE_HOME/affinity``, else ``~/.local/state/affinity``)::

    affinity group create NAME --hash-prefix HP --hash-count HC --queue-count QC --queue-size QS [--no-secret]
    affinity group list
    affinity group delete NAME
    affinity group secret NAME                 # a new secret (an older group, or rotation)
    affinity group status NAME [--json] [--watch 1s]

Across hosts without a shared registry, members name each other's inboxes: ``--listen HOST:PORT``
(this member's inbox at a fixed address), ``--host ADDRESS`` (the address it advertises) and
``--bootstrap HOST:PORT,...`` (members to ask for the group's definition and members; a member
whose registry has no entry for the group learns the definition there).

A publisher, two consumers and a validator that checks per-key order (start the validator
first, then the consumers, then the publisher)::

    affinity group validate NAME --channel aeron:udp?endpoint=127.0.0.1:40500
    affinity group consume NAME --index 0 --count 2 --republish aeron:udp?endpoint=127.0.0.1:40500
    affinity group consume NAME --index 1 --count 2 --republish aeron:udp?endpoint=127.0.0.1:40500
    affinity group publish NAME --keys 1000 --rate 2000

``create`` also writes the group's secret (32 random bytes, ``<registry>/groups/NAME.secret``, 0600):
every member that finds it (or ``--secret-file``, ``$AFFINITY_GROUP_SECRET``,
``$AFFINITY_GROUP_SECRET_FILE``) authenticates every message; ``status`` says whether the group is
authenticated.

Exit status: 0 success; 1 a bad definition, argument or (validate) an ordering error or loss;
2 the registry or the transport is unavailable; 3 (publish) not everything was acknowledged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from affinity.cli._text import help_text
from affinity.exceptions import AffinityError, ConfigError
from affinity.groups.registry import (
    MAX_HASH_COUNT,
    MAX_QUEUE_COUNT,
    MAX_QUEUE_SIZE,
    MIN_QUEUE_SIZE,
    create_group,
    delete_group,
    list_groups,
    load_group,
)
from affinity.groups.secret import create_secret
from affinity.units import parse_duration

#: Exit status: success.
EXIT_OK = 0
#: Exit status: bad definition or argument; validate found an ordering error or a loss.
EXIT_ERRORS = 1
#: Exit status: the registry or the transport is unavailable.
EXIT_UNAVAILABLE = 2
#: Exit status: publish stopped with messages not acknowledged.
EXIT_UNACKED = 3


#: Fields of a member and of a queue in ``status`` output, in column order.
MEMBER_FIELDS = ("member_id", "name", "role", "index", "count", "endpoint", "last_heard_ms")
QUEUE_FIELDS = (
    "queue",
    "owner_id",
    "owner_name",
    "epoch",
    "state",
    "acked_sequence",
    "sent_sequence",
    "retained_bytes",
    "lag",
)


def duration(text: str) -> float:
    """Parses ``1s``, ``500ms``, ``2m`` or ``1.5`` (seconds) into seconds (``affinity.units``);
    argparse type."""
    try:
        seconds = parse_duration(text.strip(), "s")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: {exc}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must be positive")
    return seconds


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``group`` subcommand and its own subcommands."""
    parser = subparsers.add_parser(
        "group",
        help="consumer groups: define them, watch them, run a test publisher, consumers and a validator",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="group_command", required=True, metavar="ACTION")

    create = commands.add_parser("create", help="define a group in the registry")
    _registry_option(create)
    create.add_argument("name", metavar="NAME")
    create.add_argument("--hash-prefix", required=True, metavar="HP", help="subject prefix (first topic level)")
    create.add_argument(
        "--hash-count", required=True, type=int, metavar="HC", help=f"buckets a key hashes into (1..{MAX_HASH_COUNT})"
    )
    create.add_argument(
        "--queue-count",
        required=True,
        type=int,
        metavar="QC",
        help=f"queues the buckets are striped over (1..min(HC, {MAX_QUEUE_COUNT}))",
    )
    create.add_argument(
        "--queue-size",
        required=True,
        type=int,
        metavar="QS",
        help=f"bytes each publisher retains per queue until acknowledged ({MIN_QUEUE_SIZE}..{MAX_QUEUE_SIZE})",
    )
    create.add_argument(
        "--no-secret",
        action="store_true",
        help="do not create the group secret (unauthenticated: one host, trusted users only)",
    )
    create.set_defaults(run=_run_create)

    listing = commands.add_parser("list", help="list the groups defined in the registry")
    _registry_option(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    listing.set_defaults(run=_run_list)

    secret = commands.add_parser(
        "secret", help="write a new group secret (restart every member to use it; copy it to other hosts)"
    )
    _registry_option(secret)
    secret.add_argument("name", metavar="NAME")
    secret.set_defaults(run=_run_secret)

    delete = commands.add_parser("delete", help="remove a group's definition from the registry")
    _registry_option(delete)
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(run=_run_delete)

    status = commands.add_parser("status", help="members, owner and epoch of each queue, positions, lag")
    _member_options(status)
    status.add_argument("--json", action="store_true", help="print JSON (one object per line with --watch)")
    status.add_argument("--watch", type=duration, metavar="INTERVAL", help="print again every INTERVAL (1s, 500ms)")
    status.add_argument(
        "--settle",
        type=duration,
        default=0.5,
        metavar="TIME",
        help="listen this long before the first report (default 0.5s)",
    )
    status.set_defaults(run=_run_status)

    from affinity.cli import group_roles

    group_roles.register(commands, _member_options)


def _registry_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", metavar="DIR", help="registry directory (default: $AFFINITY_REGISTRY, ...)")


def _member_options(parser: argparse.ArgumentParser) -> None:
    """Options of every command that joins a group's control plane."""
    parser.add_argument("name", metavar="NAME")
    _registry_option(parser)
    parser.add_argument("--host", metavar="ADDRESS", help="address this member advertises (default 127.0.0.1)")
    parser.add_argument(
        "--listen", metavar="HOST:PORT", help="this member's inbox at a fixed address (default: a port the OS picks)"
    )
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT,...",
        help="members to ask for the group's definition and members (no shared registry needed)",
    )
    parser.add_argument(
        "--bootstrap-timeout", type=duration, metavar="TIME", help="how long to wait for a bootstrap answer (10s)"
    )
    parser.add_argument("--control", metavar="CHANNEL", help="optional multicast control channel")
    parser.add_argument("--liveness", type=duration, metavar="TIME", help="liveness timeout (default 2s)")
    parser.add_argument("--heartbeat", type=duration, metavar="TIME", help="heartbeat interval (default 100ms)")
    parser.add_argument(
        "--secret-file",
        metavar="PATH",
        help="the group secret (hex, 0600) (default: $AFFINITY_GROUP_SECRET, $AFFINITY_GROUP_SECRET_FILE, "
        "then the registry's NAME.secret; none: unauthenticated)",
    )


def _fail(command: str, error: Exception, code: int = EXIT_ERRORS) -> int:
    print(f"affinity group {command}: {error}", file=sys.stderr)
    return code


def _run_create(args: argparse.Namespace) -> int:
    try:
        definition = create_group(
            args.name, args.hash_prefix, args.hash_count, args.queue_count, args.queue_size, args.registry
        )
        secret = None if args.no_secret else create_secret(definition.name, args.registry)
    except ConfigError as error:
        return _fail("create", error)
    print(
        f"created group {definition.name}: HP={definition.hash_prefix} HC={definition.hash_count} "
        f"QC={definition.queue_count} QS={definition.queue_size}"
    )
    print(f"secret: {secret}" if secret else "secret: none (unauthenticated: use on one host among trusted users)")
    return EXIT_OK


def _run_list(args: argparse.Namespace) -> int:
    try:
        definitions = list_groups(args.registry)
    except ConfigError as error:
        return _fail("list", error)
    if args.json:
        print(json.dumps([definition.to_json() for definition in definitions]))
        return EXIT_OK
    if not definitions:
        print("no groups defined")
    for definition in definitions:
        print(
            f"{definition.name}  HP={definition.hash_prefix} HC={definition.hash_count} "
            f"QC={definition.queue_count} QS={definition.queue_size}"
        )
    return EXIT_OK


def _run_secret(args: argparse.Namespace) -> int:
    try:
        definition = load_group(args.name, args.registry)
        path = create_secret(definition.name, args.registry)
    except ConfigError as error:
        return _fail("secret", error)
    print(f"secret: {path}")
    return EXIT_OK


def _run_delete(args: argparse.Namespace) -> int:
    try:
        definition = delete_group(args.name, args.registry)
    except ConfigError as error:
        return _fail("delete", error)
    print(f"deleted group {definition.name}")
    return EXIT_OK


def plain(value: object) -> object:
    """A pyclass attribute as JSON-ready data (lists and dicts of plain values kept)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return str(value)


def status_json(status: object) -> dict[str, object]:
    """A ``GroupStatus`` as a JSON-ready object: ``authenticated``, ``auth_refused``, ``members``, ``queues``."""
    return {
        "authenticated": bool(getattr(status, "authenticated", False)),
        "auth_refused": plain(getattr(status, "auth_refused", 0)),
        "members": [{name: plain(getattr(m, name, None)) for name in MEMBER_FIELDS} for m in status.members],  # type: ignore[attr-defined]
        "queues": [{name: plain(getattr(q, name, None)) for name in QUEUE_FIELDS} for q in status.queues],  # type: ignore[attr-defined]
    }


def _authentication_line(report: dict[str, object], source: str) -> str:
    if report["authenticated"]:
        line = f"authenticated (secret: {source})"
    else:
        line = "UNAUTHENTICATED: no group secret; anyone who can reach a member's inbox can forge its messages"
    refused = report["auth_refused"]
    if refused:
        line += f"; {refused} messages failed authentication (another secret, or forged)"
    return line


def _table(rows: list[dict[str, object]], columns: tuple[str, ...]) -> list[str]:
    cells = [[str(row[column]) if row[column] is not None else "-" for column in columns] for row in rows]
    widths = [max([len(column), *(len(line[i]) for line in cells)]) for i, column in enumerate(columns)]
    lines = ["  ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in cells]
    return lines


def _run_status(args: argparse.Namespace) -> int:
    try:
        import affinity
        from affinity.cli.group_roles import member_secret
        from affinity.groups import GroupObserver

        with affinity.Client() as client:
            observer = GroupObserver(
                client,
                args.name,
                registry=args.registry,
                host=args.host,
                control=args.control,
                listen=args.listen,
                bootstrap=args.bootstrap,
                bootstrap_timeout=args.bootstrap_timeout,
                secret=member_secret(args),
                liveness_timeout=args.liveness,
                heartbeat_interval=args.heartbeat,
            )
            try:
                time.sleep(args.settle)
                while True:
                    report = status_json(observer.status())
                    if args.json:
                        print(json.dumps(report), flush=True)
                    else:
                        print(f"group {args.name} at {time.strftime('%H:%M:%S')}")
                        print(_authentication_line(report, observer.secret_source))
                        print(*_table(report["members"], MEMBER_FIELDS), sep="\n")  # type: ignore[arg-type]
                        print(*_table(report["queues"], QUEUE_FIELDS), sep="\n", flush=True)  # type: ignore[arg-type]
                    if args.watch is None:
                        return EXIT_OK
                    time.sleep(args.watch)
            finally:
                observer.close()
    except ConfigError as error:
        return _fail("status", error)
    except AffinityError as error:
        return _fail("status", error, EXIT_UNAVAILABLE)
