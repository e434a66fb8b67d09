"""``affinity group publish | consume | validate``: a test publisher, consumer and validator of a group.

- ``publish``: ``--keys`` topics (``uuid/uuid`` strings), sent round robin, each key with its
  own sequence numbers from 1 (``PublishedRecord``), at ``--rate`` messages/s through
  ``publish_batch``; stops after ``--count`` messages or ``--duration`` (or SIGTERM/SIGINT), then
  flushes and prints a summary (``--json``: per-key last sequence number, for loss checks).
- ``consume``: consumer ``--index`` of ``--count``; republishes every message it processes, with
  its own index, to ``--republish CHANNEL`` (a plain publication), then acknowledges it. Prints a
  line whenever the queues it owns change. SIGTERM/SIGINT: clean leave (planned handoff). A
  republish channel that takes nothing for ``REPUBLISH_STALL_TIMEOUT`` seconds (the validator is
  gone) makes it leave with exit status 2, its records unacknowledged, instead of running for ever.
- ``validate``: reads the republished records from ``--channel`` and checks each key's order
  (:class:`affinity.groups.validation.Validator`), printing a line per sequence error and one
  per queue that moved to another consumer (``--verbose``: also one per key that moved); stops
  after ``--duration``, after ``--idle-exit`` without data (counted from its last poll that found
  some, and checked only after a poll that found none), or on SIGTERM/SIGINT, then prints
  each move (from, to, keys moved, why) and a summary. Log lines start with the UTC time
  (ISO 8601, milliseconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import affinity
from affinity.exceptions import AffinityError, ConfigError
from affinity.groups.records import (
    PUBLISHED_HEADER_SIZE,
    REPUBLISH_STREAM_ID,
    PublishedRecord,
    RecordError,
    RepublishedRecord,
)
from affinity.groups.validation import ConsumerChange, Validator

#: Exit status: success.
EXIT_OK = 0
#: Exit status: bad argument or definition; validate found an ordering error or a loss.
EXIT_ERRORS = 1
#: Exit status: the transport is unavailable.
EXIT_UNAVAILABLE = 2
#: Exit status: publish stopped with messages not acknowledged.
EXIT_UNACKED = 3
#: Largest batch handed to ``publish_batch`` at once.
PUBLISH_BATCH = 1000
#: How often ``consume`` checks whether the queues it owns changed (seconds).
OWNERSHIP_CHECK_INTERVAL = 0.05
#: ``consume``/``validate`` poll timeout (seconds): how quickly they notice a stop request.
POLL_TIMEOUT = 0.05
#: ``consume``: how long a record may wait for the republish channel (the validator) before the
#: consumer gives up and leaves (exit status 2); its queues then move to another consumer.
REPUBLISH_STALL_TIMEOUT = 30.0

MemberOptions = Callable[[argparse.ArgumentParser], None]


class RepublishStalledError(AffinityError):
    """``consume``: the republish channel took nothing for ``REPUBLISH_STALL_TIMEOUT`` seconds."""


def member_secret(args: argparse.Namespace) -> Path | None:
    """The ``secret=`` argument of a member started with ``--secret-file`` (``None``: look it up)."""
    return Path(args.secret_file) if args.secret_file else None


def register(commands: argparse._SubParsersAction[Any], member_options: MemberOptions) -> None:
    """Add ``publish``, ``consume`` and ``validate`` to the ``group`` subcommands."""
    publish = commands.add_parser("publish", help="publish keyed messages with per-key sequence numbers")
    member_options(publish)
    publish.add_argument("--keys", type=int, default=1000, help="number of keys (topics), default 1000")
    publish.add_argument("--rate", type=float, default=1000.0, help="messages/s, 0 = as fast as possible")
    publish.add_argument("--count", type=int, help="stop after this many messages")
    publish.add_argument("--duration", type=float, help="stop after this many seconds")
    publish.add_argument("--size", type=int, default=100, help=f"payload bytes (>= {PUBLISHED_HEADER_SIZE})")
    publish.add_argument("--seed", type=int, default=1, help="seed of the keys' names")
    publish.add_argument("--flush-timeout", type=float, default=10.0, help="seconds to wait for acks at the end")
    publish.add_argument("--resend", type=float, help="resend timeout in seconds (default 1)")
    publish.add_argument("--json", action="store_true", help="print the summary as JSON")
    publish.set_defaults(run=run_publish)

    consume = commands.add_parser("consume", help="consume a share of the queues: republish, then ack")
    member_options(consume)
    consume.add_argument("--index", type=int, required=True, help="this consumer's index (0..count-1)")
    consume.add_argument("--count", type=int, required=True, help="consumer count CC (<= QC)")
    consume.add_argument("--republish", metavar="CHANNEL", help="plain channel for the validator")
    consume.add_argument("--cycle", type=float, help="seconds between backup releases (default 30)")
    consume.add_argument("--duration", type=float, help="leave cleanly after this many seconds")
    consume.add_argument("--work", type=float, default=0.0, help="seconds of simulated work per message")
    consume.add_argument("--member-name", help="member name shown by status")
    consume.add_argument("--close-timeout", type=float, default=5.0, help="seconds allowed for the clean leave")
    consume.set_defaults(run=run_consume)

    validate = commands.add_parser("validate", help="check what consumers republish: order, gaps, moves")
    validate.add_argument("name", metavar="NAME")
    validate.add_argument("--registry", metavar="DIR", help="registry directory")
    validate.add_argument("--channel", required=True, help="the channel the consumers republish on")
    validate.add_argument("--duration", type=float, help="stop after this many seconds")
    validate.add_argument("--idle-exit", type=float, help="stop after this many seconds without data (once started)")
    validate.add_argument("--expect-keys", type=int, help="fail unless this many keys were seen")
    validate.add_argument("--json", action="store_true", help="print the report as one JSON object")
    validate.add_argument("--quiet", action="store_true", help="no per-event log lines")
    validate.add_argument(
        "--verbose", action="store_true", help="also one line per key that changed consumer (default: one per queue)"
    )
    validate.set_defaults(run=run_validate)


class _StopFlag:
    """Set by SIGTERM or SIGINT: the roles finish cleanly instead of dying."""

    def __init__(self) -> None:
        self._event = threading.Event()
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, self._handle)

    def _handle(self, number: int, frame: object) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self._event.is_set()


def log_time(moment: datetime | None = None) -> str:
    """A log line's time stamp: UTC, ISO 8601 to the millisecond (``2026-11-27T10:53:54.123Z``)."""
    moment = moment or datetime.now(UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _log(message: str) -> None:
    print(f"{log_time()} {message}", flush=True)


def topics(count: int, seed: int) -> list[str]:
    """The seed's topics: ``uuid/uuid`` strings, reproducible from ``seed``."""
    rng = random.Random(seed)
    return [
        f"{uuid.UUID(int=rng.getrandbits(128), version=4)}/{uuid.UUID(int=rng.getrandbits(128), version=4)}"
        for _ in range(count)
    ]


def run_publish(args: argparse.Namespace) -> int:
    """The hashed publisher; see the module documentation."""
    from affinity.groups import GroupPublisher

    if args.keys < 1 or args.size < PUBLISHED_HEADER_SIZE or args.rate < 0:
        print(
            f"affinity group publish: need --keys >= 1, --size >= {PUBLISHED_HEADER_SIZE}, --rate >= 0",
            file=sys.stderr,
        )
        return EXIT_ERRORS
    stop = _StopFlag()
    keys = topics(args.keys, args.seed)
    refused: dict[int, int] = {}
    try:
        with affinity.Client() as client:
            publisher = GroupPublisher(
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
                resend_timeout=args.resend,
            )
            _log(f"publisher {publisher.producer_id} of group {args.name}: {args.keys} keys")
            sent = 0
            start = time.monotonic()
            while not stop:
                now = time.monotonic()
                if args.duration is not None and now - start >= args.duration:
                    break
                if args.count is not None and sent >= args.count:
                    break
                due = PUBLISH_BATCH if args.rate == 0 else int(args.rate * (now - start)) - sent
                limit = PUBLISH_BATCH if args.count is None else args.count - sent
                batch = min(due, PUBLISH_BATCH, limit)
                if batch <= 0:
                    time.sleep(0.001)
                    continue
                stamp = time.time_ns()
                indexes = range(sent, sent + batch)
                batch_keys = [keys[i % args.keys] for i in indexes]
                payloads = [
                    PublishedRecord(i % args.keys, i // args.keys + 1, stamp).encode(args.size) for i in indexes
                ]
                taken = publisher.publish_batch(batch_keys, payloads)
                sent += taken
                if taken < batch:
                    # Find out why (the batch call only says how many): offer the next one alone.
                    code = publisher.publish(batch_keys[taken], payloads[taken])
                    if code > 0:
                        sent += 1
                    else:
                        refused[code] = refused.get(code, 0) + 1
                        if code == affinity.CLOSED:
                            break
                        time.sleep(0.001)
            elapsed = time.monotonic() - start
            flushed = publisher.flush(args.flush_timeout)
            status = publisher.status()
            counters = publisher.counters()
            publisher.close()
    except ConfigError as error:
        print(f"affinity group publish: {error}", file=sys.stderr)
        return EXIT_ERRORS
    except AffinityError as error:
        print(f"affinity group publish: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    per_key_last = [sent // args.keys + (1 if k < sent % args.keys else 0) for k in range(args.keys)]
    names = {affinity.NOT_CONNECTED: "not_connected", affinity.BACK_PRESSURED: "back_pressured"}
    summary = {
        "sent": sent,
        "seconds": round(elapsed, 3),
        "rate": round(sent / elapsed, 1) if elapsed > 0 else None,
        "acknowledged": flushed,
        "refused": {names.get(code, str(code)): count for code, count in sorted(refused.items())},
        "retained_bytes": sum(queue.retained_bytes for queue in status.queues),
        "per_key_last": per_key_last,
        "authenticated": status.authenticated,
        "auth_refused": status.auth_refused,
        "acks_not_owner": counters.acks_not_owner,
        "epochs_refused": counters.epochs_refused,
        "records_resent": counters.records_resent,
        "owner_changes": counters.owner_changes,
        "control_send_refused": counters.control_send_refused,
        # Per queue at the end (owner, epoch, sent, acked): what a failed flush was waiting for.
        "queues": [
            {
                "queue": q.queue,
                "owner": q.owner_id,
                "epoch": q.epoch,
                "sent": q.sent_sequence,
                "acked": q.acked_sequence,
            }
            for q in status.queues
        ],
    }
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        _log(f"published {sent} messages in {elapsed:.1f}s; acknowledged: {flushed}; refused: {summary['refused']}")
    return EXIT_OK if flushed else EXIT_UNACKED


def _subject(definition_prefix: str, message: Any) -> str:
    subject = message.subject
    if subject:
        return str(subject)
    key = message.key.decode("utf-8", "replace")
    return f"{definition_prefix}/{message.bucket}/{key}"


def run_consume(args: argparse.Namespace) -> int:
    """The LBG client; see the module documentation."""
    from affinity.groups import GroupConsumer

    stop = _StopFlag()
    try:
        with affinity.Client() as client:
            consumer = GroupConsumer(
                client,
                args.name,
                index=args.index,
                count=args.count,
                registry=args.registry,
                name=args.member_name,
                host=args.host,
                control=args.control,
                listen=args.listen,
                bootstrap=args.bootstrap,
                bootstrap_timeout=args.bootstrap_timeout,
                secret=member_secret(args),
                cycle=args.cycle,
                liveness_timeout=args.liveness,
                heartbeat_interval=args.heartbeat,
            )
            republish = client.add_publication(args.republish, REPUBLISH_STREAM_ID) if args.republish else None
            prefix = consumer.definition.hash_prefix
            _log(f"consumer {args.index}/{args.count} member {consumer.member_id} of group {args.name} started")
            owned: list[int] = []
            next_check = 0.0
            processed = 0
            undecodable = 0
            start = time.monotonic()
            while not stop:
                now = time.monotonic()
                if args.duration is not None and now - start >= args.duration:
                    break
                if now >= next_check:
                    current = sorted(consumer.owned_queues())
                    if current != owned:
                        _log(f"consumer {args.index} owns queues {current} (was {owned})")
                        owned = current
                    next_check = now + OWNERSHIP_CHECK_INTERVAL
                for message in consumer.poll(1000, POLL_TIMEOUT):
                    if args.work > 0:
                        time.sleep(args.work)
                    if republish is not None:
                        try:
                            record = PublishedRecord.decode(message.payload)
                        except RecordError:
                            undecodable += 1
                        else:
                            out = RepublishedRecord(
                                topic=record.topic,
                                lbgclient=args.index,
                                queue=message.queue,
                                seqno=record.seqno,
                                epoch=message.epoch,
                                producer=message.producer,
                                sequence=message.sequence,
                                sent_ns=record.sent_ns,
                                processed_ns=time.time_ns(),
                                subject=_subject(prefix, message),
                            ).encode()
                            if not _offer_until_taken(republish, out, stop):
                                break  # stopping before the validator took it: leave it unacknowledged
                    consumer.ack(message)
                    processed += 1
            _log(f"consumer {args.index} leaving: processed {processed}, undecodable {undecodable}")
            consumer.close(args.close_timeout)
            status = consumer.status()
            transport = client.counters()
            invalid = transport.invalid_data_frames + transport.invalid_control_frames
            group = consumer.counters()
            _log(
                f"consumer {args.index} left: delivered {status.delivered}, duplicates {status.duplicates_dropped}, "
                f"invalid datagrams ignored {invalid}, malformed control messages {group.control_malformed}, "
                f"malformed data messages {group.data_malformed}, "
                f"authentication refused {status.auth_refused} ({'on' if status.authenticated else 'off'}), "
                f"epochs refused {group.epochs_refused}"
            )
    except ConfigError as error:
        print(f"affinity group consume: {error}", file=sys.stderr)
        return EXIT_ERRORS
    except AffinityError as error:
        print(f"affinity group consume: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return EXIT_OK


def _offer_until_taken(publication: affinity.Publication, data: bytes, stop: _StopFlag) -> bool:
    """Offers ``data`` until the publication takes it (True) or a stop is requested (False).

    Raises :class:`RepublishStalledError` when nothing took it for ``REPUBLISH_STALL_TIMEOUT`` seconds (the
    validator is gone): the consumer leaves instead of holding its queues, unacknowledged, for ever.
    """
    deadline = time.monotonic() + REPUBLISH_STALL_TIMEOUT
    while (code := publication.offer(data)) < 0:
        if code == affinity.CLOSED:
            raise affinity.ClosedError("the republish publication was closed")
        if stop:
            return False
        if time.monotonic() >= deadline:
            raise RepublishStalledError(
                f"the republish channel took nothing for {REPUBLISH_STALL_TIMEOUT:g} s (last offer: {code})"
            )
        time.sleep(0.0005)
    return True


@dataclass
class QueueMove:
    """A queue whose keys started coming from another consumer, as the validator saw it (a key
    counts once it is next seen from the new consumer)."""

    queue: int
    source: int
    target: int
    first_time: float
    keys: int = 0

    def line(self) -> str:
        """The line printed when the first key of the move is seen."""
        return f"queue {self.queue} moved: consumer {self.source} -> consumer {self.target}"

    def summary(self, moves: QueueMoves) -> str:
        """The end-of-run line: from, to, keys moved and why (as far as the records tell)."""
        last = moves.last_seen.get(self.source)
        if last is not None and last > self.first_time:
            why = f"consumer {self.source} kept sending other queues (a planned handoff)"
        else:
            why = f"consumer {self.source} sent nothing after it (it died or left: failover)"
        return (
            f"queue {self.queue}: consumer {self.source} -> consumer {self.target}, {self.keys} keys moved; why: {why}"
        )


@dataclass
class QueueMoves:
    """Per-key consumer changes gathered into one move per queue (from, to)."""

    moves: dict[tuple[int, int, int], QueueMove] = dataclasses.field(default_factory=dict)
    #: Wall-clock time of the last record from each consumer.
    last_seen: dict[int, float] = dataclasses.field(default_factory=dict)

    def seen(self, consumer: int, now: float) -> None:
        """A record from ``consumer`` arrived at ``now``."""
        self.last_seen[consumer] = now

    def add(self, change: ConsumerChange) -> QueueMove | None:
        """Counts one key's change; returns the move when this key is its first."""
        key = (change.queue, change.was, change.now)
        move = self.moves.get(key)
        first = move is None
        if move is None:
            move = self.moves[key] = QueueMove(change.queue, change.was, change.now, change.time)
        move.keys += 1
        return move if first else None


def run_validate(args: argparse.Namespace) -> int:
    """The validation client; see the module documentation."""
    from affinity.groups import load_group

    stop = _StopFlag()
    try:
        definition = load_group(args.name, args.registry)
        validator = Validator(args.expect_keys)
        moves = QueueMoves()
        undecodable = 0
        with affinity.Client() as client:
            subscription = client.add_subscription(args.channel, REPUBLISH_STREAM_ID)
            _log(f"validating group {definition.name} (HP={definition.hash_prefix}) on {args.channel}")
            start = time.monotonic()
            last_data = start
            received = False
            while not stop:
                now = time.monotonic()
                if args.duration is not None and now - start >= args.duration:
                    break
                batch = subscription.poll_batch(1000)
                if not batch:
                    # Idle only after a poll that found nothing: a validator that got no CPU for a
                    # while must not leave with records waiting for it.
                    if args.idle_exit is not None and received and time.monotonic() - last_data >= args.idle_exit:
                        break
                    time.sleep(0.001)
                    continue
                received = True
                last_data = time.monotonic()
                wall = time.time()
                for data in batch:
                    try:
                        record = RepublishedRecord.decode(data)
                    except RecordError:
                        undecodable += 1
                        continue
                    moves.seen(record.lbgclient, wall)
                    for event in validator.observe(record, wall):
                        if isinstance(event, ConsumerChange):
                            move = moves.add(event)
                            if move is not None and not args.quiet:
                                print(f"{log_time()} {move.line()}", flush=False)
                            if not args.verbose:
                                continue
                        if not args.quiet:
                            print(event.log_line(), flush=False)
                sys.stdout.flush()
    except ConfigError as error:
        print(f"affinity group validate: {error}", file=sys.stderr)
        return EXIT_ERRORS
    except AffinityError as error:
        print(f"affinity group validate: {error}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    report = validator.report()
    if args.json:
        result = dataclasses.asdict(report)
        result["ok"] = report.ok
        result["undecodable"] = undecodable
        print(json.dumps(result), flush=True)
    else:
        for move in moves.moves.values():
            print(f"{log_time()} {move.summary(moves)}")
        print(
            f"received {report.received} from {report.keys_seen} keys; sequence errors {report.sequence_errors} "
            f"(gaps {report.gaps}, out of order {report.out_of_order}, duplicates {report.duplicates}); "
            f"lost {report.lost}; consumer changes {report.consumer_changes}; per client {report.per_client}; "
            f"undecodable {undecodable}; {'OK' if report.ok else 'FAILED'}",
            flush=True,
        )
    return EXIT_OK if report.ok else EXIT_ERRORS
