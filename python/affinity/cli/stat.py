"""``affinity stat [--dir PATH] [--watch 1s] [--json] [--errors]``: show a standalone driver's
counters (like AeronStat) or its error log, read from the driver directory's ``cnc.dat``.

The cnc file is mapped read-only: ``stat`` sends no command and writes nothing, so it never
disturbs the driver. ``--watch`` refreshes the table every interval (``--count`` stops after
that many refreshes); ``--json`` prints one JSON object per refresh instead (counters with id,
type id, label, value, registration id and owner); ``--errors`` prints the distinct errors with
their counts and first/last time. A corrupt counter label or error record is shown marked
with what is wrong and where; the rest is shown as usual.

Exit status: 0; 1 when no readable driver directory is found (no driver runs there: the message
says how to start one); 2 when the driver is dead (its
pid is gone or its heartbeat is too old: the snapshot is still printed, the reason on stderr);
3 when the snapshot holds a corrupt counter or error record.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from affinity.cli._text import help_text
from affinity.driver import DriverStat, default_driver_dir, driver_stat
from affinity.exceptions import ConfigError, DriverError
from affinity.units import parse_duration

#: Exit status: the snapshot(s) were printed.
EXIT_OK = 0
#: Exit status: no readable driver directory.
EXIT_NO_DRIVER = 1
#: Exit status: the directory's driver is dead (pid gone or heartbeat too old).
EXIT_DRIVER_DEAD = 2
#: Exit status: a counter or error record is corrupt (shown marked, the rest as usual).
EXIT_CORRUPT = 3

#: The driver's control file, whose absence means no driver ever ran in (or is left in) a directory.
CNC_FILE = "cnc.dat"


def parse_interval(text: str) -> float:
    """Seconds in ``1s``, ``500ms``, ``2m`` or a bare number of seconds (``affinity.units``)."""
    try:
        seconds = parse_duration(text.strip(), "s")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 1s or 500ms: {exc}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return seconds


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``stat`` subcommand."""
    parser = subparsers.add_parser(
        "stat",
        help="show a standalone driver's counters or errors",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dir", help="driver directory (default $AFFINITY_DIR, else per user in /dev/shm)")
    parser.add_argument("--watch", type=parse_interval, metavar="DUR", help="refresh every DUR (1s, 500ms)")
    parser.add_argument("--count", type=int, metavar="N", help="with --watch: stop after N refreshes")
    parser.add_argument("--json", action="store_true", help="one JSON object per refresh")
    parser.add_argument("--errors", action="store_true", help="print the error log instead of counters")
    parser.set_defaults(run=run)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def render_table(stat: DriverStat) -> str:
    """The AeronStat-like text table."""
    lines = [
        f"{stat.dir}  driver pid {stat.pid}  up since {_iso(stat.start_ms)}  "
        f"heartbeat {stat.heartbeat_age_ms} ms ago  cnc version {stat.version >> 16}.{(stat.version >> 8) & 0xFF}",
        "=" * 80,
    ]
    lines.extend(
        f"{c.id:4d}: {c.value:20,d} - {c.label}"
        if c.problem is None
        else f"{c.id:4d}: {c.value:20,d} - CORRUPT {c.problem}"
        for c in stat.counters
    )
    return "\n".join(lines)


def render_errors(stat: DriverStat) -> str:
    """The error log: count, first and last time, message."""
    lines = [
        f"{e.count} observations from {_iso(e.first_ms)} to {_iso(e.last_ms)}: {e.message}"
        if e.problem is None
        else f"CORRUPT record: {e.problem}"
        for e in stat.errors
    ]
    corrupt = sum(e.problem is not None for e in stat.errors)
    lines.append(
        f"{len(stat.errors) - corrupt} distinct errors in {stat.dir}" + (f", {corrupt} corrupt" if corrupt else "")
    )
    return "\n".join(lines)


def render_json(stat: DriverStat) -> str:
    """One JSON line."""
    payload = asdict(stat)
    payload["time_ms"] = int(time.time() * 1000)
    return json.dumps(payload, separators=(",", ":"))


def no_driver_message(directory: str | None, error: DriverError) -> str:
    """Why no snapshot could be read: with no ``cnc.dat`` at all, that no driver runs there and
    how to start one; otherwise the error itself (unreadable or not a driver's file)."""
    folder = Path(directory if directory is not None else default_driver_dir())
    if not (folder / CNC_FILE).exists():
        return f"no driver runs in {folder} (no {CNC_FILE} there); start one with: affinity driver --dir {folder}" + (
            "" if directory is not None else " (or set $AFFINITY_DIR, or pass --dir, to look elsewhere)"
        )
    return str(error)


def _status(stat: DriverStat) -> int:
    """The exit status of a printed snapshot (the reason a dead driver is dead goes to stderr)."""
    if stat.dead is not None:
        print(f"affinity stat: the driver in {stat.dir} is dead: {stat.dead}", file=sys.stderr)
        return EXIT_DRIVER_DEAD
    if any(c.problem is not None for c in stat.counters) or any(e.problem is not None for e in stat.errors):
        return EXIT_CORRUPT
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Print one snapshot, or refresh every ``--watch`` interval; return the exit status."""
    refreshes = 0
    while True:
        try:
            stat = driver_stat(args.dir)
        except DriverError as exc:
            print(f"affinity stat: {no_driver_message(args.dir, exc)}", file=sys.stderr)
            return EXIT_NO_DRIVER
        if args.json:
            text = render_json(stat)
        elif args.errors:
            text = render_errors(stat)
        else:
            text = render_table(stat)
        if args.watch is not None and not args.json and sys.stdout.isatty():
            print("\033[H\033[2J", end="")
        try:
            print(text, flush=True)
        except BrokenPipeError:  # `affinity stat | head`
            return EXIT_OK
        refreshes += 1
        status = _status(stat)
        if status == EXIT_DRIVER_DEAD or args.watch is None or (args.count is not None and refreshes >= args.count):
            return status
        time.sleep(args.watch)
