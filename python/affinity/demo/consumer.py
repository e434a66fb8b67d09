"""A consumer process of the demo: consumes its share of the group, republishes what it processed, acks.

Run by the orchestrator as ``python -m affinity.demo.consumer ...``, like the seed's LBG client:
every processed event goes to the validator (with this consumer's ordinal, the queue, the event
time and the processing time) *before* it is acknowledged, so a SIGKILL can cause a replay of
unacknowledged events but never a loss. SIGTERM closes the consumer cleanly (planned handoff).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Protocol

import affinity
from affinity.demo import protocol
from affinity.demo.records import decode_event, encode_processed, event_times_ns, records_per_message
from affinity.demo.settings import (
    CONSUMER_CYCLE_SECONDS,
    CONSUMER_LIVENESS_TIMEOUT,
    CONSUMER_POLL_MAX,
    CONSUMER_POLL_TIMEOUT,
    HEARTBEATS_PER_LIVENESS,
    STARTUP_TIMEOUT,
    STATUS_INTERVAL,
    VALIDATION_STREAM_ID,
)
from affinity.groups import GroupConsumer, GroupMessage

#: Seconds a consumer keeps its client open after closing, so its last messages are delivered.
LINGER = 1.0
#: Seconds to sleep while the validator's publication is back-pressured.
OFFER_RETRY_SLEEP = 0.0005
#: Transport results after which an offer is simply retried.
RETRYABLE = frozenset({affinity.BACK_PRESSURED, affinity.NOT_CONNECTED, affinity.ADMIN_ACTION})

Row = tuple[int, int, int, int, int, int]


class RepublishError(affinity.AffinityError, RuntimeError):
    """The validator's publication refused a message for good (closed or position exhausted)."""


class EventSource(Protocol):
    """What a consumer reads from: a group consumer (plain events) or the Spark sink's Arrow batches."""

    def take(self, ordinal: int) -> list[Row]:
        """Processed rows of the next poll (``done_ns`` stamped now); may be empty."""

    def ack(self) -> None:
        """Acknowledges everything returned by the last :meth:`take`."""

    def owned(self) -> list[int]:
        """Queues this consumer owns now."""

    def close(self) -> None:
        """Planned handoff of every owned queue, then leave."""


class GroupEventSource:
    """Events published with :class:`affinity.groups.GroupPublisher` (the ``--no-spark`` generator)."""

    def __init__(
        self, client: affinity.Client, group: str, index: int, count: int, registry: str, name: str, liveness: float
    ) -> None:
        self._consumer = GroupConsumer(
            client,
            group,
            index=index,
            count=count,
            auto_ack=False,
            registry=registry,
            name=name,
            # The demo's timings (affinity.demo.settings says why each differs from the default).
            cycle=CONSUMER_CYCLE_SECONDS,
            liveness_timeout=liveness,
            heartbeat_interval=liveness / HEARTBEATS_PER_LIVENESS,
        )
        self._to_ack: dict[tuple[int, int], GroupMessage] = {}

    def take(self, ordinal: int) -> list[Row]:
        """Decoded events of the next poll, stamped with ``ordinal``, the queue and now."""
        messages = self._consumer.poll(CONSUMER_POLL_MAX, timeout=CONSUMER_POLL_TIMEOUT)
        now = time.time_ns()
        rows: list[Row] = []
        for message in messages:
            account, seq, event_ns = decode_event(message.payload)
            rows.append((account, seq, ordinal, message.queue, event_ns, now))
            # Acks are cumulative per (producer, queue): acking the last one acks the batch.
            self._to_ack[(message.producer, message.queue)] = message
        return rows

    def ack(self) -> None:
        """Acknowledges, per (producer, queue), the last message taken (acks are cumulative)."""
        for message in self._to_ack.values():
            self._consumer.ack(message)
        self._to_ack.clear()

    def owned(self) -> list[int]:
        """Queues this consumer owns now."""
        return sorted(self._consumer.owned_queues())

    def close(self) -> None:
        """Planned handoff of every owned queue, then leave."""
        self._consumer.close()


class SparkEventSource:
    """Row groups the Spark sink wrote (Arrow columns ``account``, ``seq``, ``event_time``: a timestamp).

    The sink's consumer acknowledges what a poll returned at the next poll (``auto_ack``), so the
    rows are republished before they are acknowledged, as with :class:`GroupEventSource`. Commit
    markers need no action (every row was republished when it arrived); an abort is counted: the
    demo's query never aborts a batch, so a count above zero shows up in the consumer's log.
    """

    def __init__(
        self, client: affinity.Client, group: str, index: int, count: int, registry: str, name: str, liveness: float
    ) -> None:
        from affinity.spark import SinkConsumer

        self._consumer = SinkConsumer(
            group,
            index,
            count,
            client=client,
            registry=registry,
            name=name,
            cycle=CONSUMER_CYCLE_SECONDS,
            liveness_timeout=liveness,
            heartbeat_interval=liveness / HEARTBEATS_PER_LIVENESS,
        )
        self.aborts = 0

    def take(self, ordinal: int) -> list[Row]:
        """The rows of the row groups of the next poll (acknowledges the previous poll's)."""
        from affinity.spark import AbortItem, DataItem

        items = self._consumer.poll(CONSUMER_POLL_MAX, CONSUMER_POLL_TIMEOUT)
        now = time.time_ns()
        rows: list[Row] = []
        for item in items:
            if isinstance(item, DataItem):
                batch = item.batch()
                accounts = batch.column("account").to_pylist()
                seqs = batch.column("seq").to_pylist()
                event_ns = event_times_ns(batch.column("event_time"))
                queue = item.queue
                rows.extend(
                    (account, seq, ordinal, queue, ns, now)
                    for account, seq, ns in zip(accounts, seqs, event_ns, strict=True)
                )
            elif isinstance(item, AbortItem):
                self.aborts += 1
                print(f"consumer: batch {item.batch_id} aborted on queue {item.queue}", file=sys.stderr)
        return rows

    def ack(self) -> None:
        """Nothing to do: the next poll acknowledges."""

    def owned(self) -> list[int]:
        """Queues this consumer owns now."""
        return sorted(self._consumer.owned_queues())

    def close(self) -> None:
        """Planned handoff of every owned queue, then leave."""
        self._consumer.close()


@dataclass
class _Stop:
    requested: bool = False

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


def _offer(publication: affinity.Publication, message: bytes, stop: _Stop) -> bool:
    """True once the message is taken; False when a stop was requested while it was refused."""
    while True:
        result = publication.offer(message)
        if result > 0:
            return True
        if stop.requested:
            return False
        if result not in RETRYABLE:
            raise RepublishError(f"the validator's publication {publication.channel} refused a message: {result}")
        time.sleep(OFFER_RETRY_SLEEP)


def _chunks(rows: list[Row], size: int) -> Iterator[list[Row]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def run(source: EventSource, client: affinity.Client, args: argparse.Namespace) -> int:
    """The consumer loop; returns the exit code."""
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop.handler)
    signal.signal(signal.SIGINT, stop.handler)
    publication = client.add_publication(args.validator, VALIDATION_STREAM_ID)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not publication.is_connected:
        if time.monotonic() > deadline:
            raise affinity.DriverTimeoutError(f"the validator on {args.validator} never connected")
        time.sleep(0.005)
    per_message = records_per_message(publication.max_message_length)
    processed = 0
    next_status = 0.0
    last_owned: list[int] | None = None
    try:
        while not stop.requested:
            rows = source.take(args.ordinal)
            if not all(_offer(publication, encode_processed(chunk), stop) for chunk in _chunks(rows, per_message)):
                break  # not republished, so not acknowledged: the next owner gets them
            source.ack()
            processed += len(rows)
            now = time.monotonic()
            if now >= next_status:
                owned = source.owned()
                if owned != last_owned or rows:
                    print(protocol.encode(protocol.ConsumerStatus(args.ordinal, owned, processed)), flush=True)
                    last_owned = owned
                next_status = now + STATUS_INTERVAL
    finally:
        source.close()
        # The embedded driver stops with the client: give the last republished messages time to
        # reach the validator (and their retransmissions, if any) before it does.
        time.sleep(LINGER)
    print(protocol.encode(protocol.ConsumerStatus(args.ordinal, [], processed)), flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m affinity.demo.consumer``."""
    parser = argparse.ArgumentParser(prog="python -m affinity.demo.consumer", description=__doc__)
    parser.add_argument("--group", required=True)
    parser.add_argument("--registry", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--ordinal", type=int, required=True, help="this process's number in the demo (0, 1, ...)")
    parser.add_argument("--validator", required=True, help="channel of the validation subscription")
    parser.add_argument("--spark", action="store_true", help="read the Spark sink's Arrow batches")
    parser.add_argument(
        "--liveness", type=float, default=CONSUMER_LIVENESS_TIMEOUT, help="liveness timeout in seconds (%(default)g)"
    )
    args = parser.parse_args(argv)
    name = f"consumer-{args.ordinal}"
    with affinity.Client() as client:
        source: EventSource
        if args.spark:
            source = SparkEventSource(client, args.group, args.index, args.count, args.registry, name, args.liveness)
        else:
            source = GroupEventSource(client, args.group, args.index, args.count, args.registry, name, args.liveness)
        return run(source, client, args)


if __name__ == "__main__":
    sys.exit(main())
