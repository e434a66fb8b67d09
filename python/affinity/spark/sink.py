"""The sink's work inside a Spark task (and the driver's markers), independent of PySpark.

A task splits each Arrow batch by queue (group mode) or keeps it whole (channel mode), cuts row
groups of at most ``maxBatchRows`` rows / ``maxBatchBytes`` bytes, wraps each in an envelope and
publishes it, waiting on back-pressure (never dropping). It returns only after everything it sent
is acknowledged (group mode: ``flush``) or sent (channel mode), within ``ackTimeout``.

Transports are cached per Python process (Spark reuses its Python workers), so a task does not
pay for joining the group's control plane every time; they share the process's one client of
its driver (``driverDir``, ``$AFFINITY_DIR`` or embedded: :mod:`affinity.spark.clients`).
"""

from __future__ import annotations

import atexit
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import pyarrow as pa  # type: ignore[import-untyped]

import affinity
from affinity.exceptions import ChannelUriError, ClosedError, ConfigError
from affinity.spark.clients import advertised_host, close_shared, shared_client
from affinity.spark.encoding import check_key_columns, encode_body, key_array, row_groups, split_by_queue
from affinity.spark.envelope import (
    MARKER_PARTITION,
    Envelope,
    Kind,
    encode,
    encode_commit_body,
)
from affinity.spark.errors import AckTimeoutError, EnvelopeError, SparkOptionError
from affinity.spark.options import SinkOptions, ValueFormat

__all__ = [
    "CHANNEL_QUEUE",
    "TaskResult",
    "Transport",
    "check_group",
    "publish_markers",
    "transport_for",
    "validate_schema",
    "value_column",
    "write_task",
]

#: The queue number a channel-mode task reports its messages under.
CHANNEL_QUEUE: Final = 0
_WAIT_START: Final = 0.0002
_WAIT_MAX: Final = 0.01
_OUTCOME_NAMES: Final = {
    affinity.NOT_CONNECTED: "NOT_CONNECTED (no live consumer)",
    affinity.BACK_PRESSURED: "BACK_PRESSURED (consumers are behind)",
    affinity.ADMIN_ACTION: "ADMIN_ACTION",
    affinity.CLOSED: "CLOSED",
    affinity.MAX_POSITION_EXCEEDED: "MAX_POSITION_EXCEEDED",
}
_RETRY_OUTCOMES: Final = frozenset({affinity.NOT_CONNECTED, affinity.BACK_PRESSURED, affinity.ADMIN_ACTION})


class Transport(Protocol):
    """Where a task's messages go."""

    @property
    def queue_count(self) -> int:
        """Queues (1 for a channel)."""

    @property
    def hash_count(self) -> int:
        """Hash buckets (1 for a channel)."""

    def queues_of(self, keys: pa.Array) -> list[int]:
        """The queue of each key."""

    def send(self, queue: int, payload: bytes, deadline: float) -> None:
        """Publish one message, waiting on back-pressure until ``deadline`` (monotonic seconds)."""

    def flush(self, deadline: float) -> None:
        """Return once everything sent is acknowledged (or sent, for a channel), else raise."""

    def close(self) -> None:
        """Release the publication or leave the group."""


def _wait(delay: float) -> float:
    time.sleep(delay)
    return min(delay * 2, _WAIT_MAX)


def _offer_until(offer: Any, payload: bytes, deadline: float, what: str, timeout: float) -> None:
    delay = _WAIT_START
    while True:
        outcome = int(offer(payload))
        if outcome > 0:
            return
        if outcome not in _RETRY_OUTCOMES:
            name = _OUTCOME_NAMES.get(outcome, str(outcome))
            if outcome == affinity.CLOSED:
                raise ClosedError(f"{what} is closed")
            raise AckTimeoutError(f"{what} refused a message: {name}")
        if time.monotonic() >= deadline:
            name = _OUTCOME_NAMES.get(outcome, str(outcome))
            raise AckTimeoutError(
                f"{what}: could not publish for ackTimeout={timeout:g}s, last outcome {name}; rows were not dropped, "
                "the task fails so Spark can retry it"
            )
        delay = _wait(delay)


class ChannelTransport:
    """A plain publication on ``channel`` + ``streamId`` (no keys, one queue)."""

    def __init__(self, client: affinity.Client, channel: str, stream_id: int, ack_timeout: float) -> None:
        try:
            self._publication = client.add_publication(channel, stream_id)
        except ChannelUriError as error:
            raise SparkOptionError(f"option channel={channel!r}: {error}") from None
        self._what = f"publication {channel} stream {stream_id}"
        self._timeout = ack_timeout

    @property
    def queue_count(self) -> int:
        """One."""
        return 1

    @property
    def hash_count(self) -> int:
        """One."""
        return 1

    def queues_of(self, keys: pa.Array) -> list[int]:
        """Every row goes to queue 0."""
        return [CHANNEL_QUEUE] * len(keys)

    def send(self, queue: int, payload: bytes, deadline: float) -> None:
        """Offer the message, waiting while not connected or back-pressured."""
        if len(payload) > self._publication.max_message_length:
            raise SparkOptionError(
                f"a message of {len(payload)} bytes exceeds the publication's largest message "
                f"({self._publication.max_message_length}); lower maxBatchBytes"
            )
        _offer_until(self._publication.offer, payload, deadline, self._what, self._timeout)

    def flush(self, deadline: float) -> None:
        """Wait until the sender has sent everything offered (a plain publication has no acks)."""
        delay = _WAIT_START
        while True:
            sent = self._publication.counters().sender_position
            if sent >= self._publication.position:
                return
            if time.monotonic() >= deadline:
                raise AckTimeoutError(
                    f"{self._what}: {self._publication.position - sent} bytes not sent within "
                    f"ackTimeout={self._timeout:g}s"
                )
            delay = _wait(delay)

    def close(self) -> None:
        """Close the publication."""
        self._publication.close()


def check_group(options: SinkOptions) -> None:
    """The group's definition is there: in the registry, or (option ``bootstrap``, no registry entry)
    from the first listed member that answers. Else :class:`SparkOptionError` naming the option."""
    from affinity.groups import learn_definition, load_group

    group, registry = options.group, options.registry
    assert group is not None
    where = "" if registry is None else f" (registry={registry!r})"
    if options.bootstrap is not None:
        where += f" (bootstrap={options.bootstrap!r})"
    try:
        if options.bootstrap is None:
            load_group(group, registry)
        else:
            learn_definition(
                shared_client(options.driver_dir),
                group,
                bootstrap=options.bootstrap,
                registry=registry,
                host=advertised_host(options.host),
            )
    except ConfigError as error:
        raise SparkOptionError(f"option group={group!r}{where}: {error}") from None


class GroupTransport:
    """A :class:`affinity.groups.GroupPublisher` of the group named by the ``group`` option."""

    def __init__(self, client: affinity.Client, options: SinkOptions) -> None:
        from affinity.groups import GroupPublisher

        group, registry, ack_timeout = options.group, options.registry, options.ack_timeout
        assert group is not None
        if options.bootstrap is None:
            check_group(options)  # with a bootstrap list the publisher learns the definition itself
        self._publisher = GroupPublisher(
            client,
            group,
            registry=registry,
            host=advertised_host(options.host),
            control=options.control,
            bootstrap=options.bootstrap,
        )
        self._hash_count = self._publisher.definition.hash_count
        self._queue_count = self._publisher.definition.queue_count
        self._what = f"group {group!r}"
        self._timeout = ack_timeout

    @property
    def queue_count(self) -> int:
        """The group's QC."""
        return self._queue_count

    @property
    def hash_count(self) -> int:
        """The group's HC."""
        return self._hash_count

    def queues_of(self, keys: pa.Array) -> list[int]:
        """``affinity_hash(key) % HC % QC`` for each key, in Rust."""
        from affinity.groups import group_queues

        queues: list[int] = group_queues(keys, self._hash_count, self._queue_count)
        return queues

    def send(self, queue: int, payload: bytes, deadline: float) -> None:
        """``publish_to_queue``, waiting while back-pressured or while the group has no live consumer."""

        def offer(data: bytes) -> int:
            rc: int = self._publisher.publish_to_queue(queue, data)
            return rc

        _offer_until(offer, payload, deadline, f"{self._what} queue {queue}", self._timeout)

    def flush(self, deadline: float) -> None:
        """``flush`` until every message is acknowledged by the queues' owners."""
        remaining = max(deadline - time.monotonic(), 0.001)
        if not self._publisher.flush(timeout=remaining):
            raise AckTimeoutError(
                f"{self._what}: messages still unacknowledged after ackTimeout={self._timeout:g}s "
                "(consumers slow or gone); the task fails so Spark can retry it"
            )

    def close(self) -> None:
        """Leave the group."""
        self._publisher.close()


_LOCK = threading.Lock()
_TRANSPORTS: dict[tuple[str | None, ...], Transport] = {}


def close_transports() -> None:
    """Closes this process's transports, then their clients (at exit)."""
    with _LOCK:
        for transport in _TRANSPORTS.values():
            transport.close()
        _TRANSPORTS.clear()
    close_shared()


def transport_for(options: SinkOptions) -> Transport:
    """This process's transport for the options' target (created once, then reused)."""
    cache_key = (
        options.group,
        options.channel,
        None if options.stream_id is None else str(options.stream_id),
        options.registry,
        options.driver_dir,
        options.host,
        options.control,
        options.bootstrap,
    )
    with _LOCK:
        transport: Transport | None = _TRANSPORTS.get(cache_key)
        if transport is None:
            client = shared_client(options.driver_dir)
            if not _TRANSPORTS:
                atexit.register(close_transports)  # after the client's: runs before it
            if options.group is not None:
                transport = GroupTransport(client, options)
            else:
                assert options.channel is not None and options.stream_id is not None
                transport = ChannelTransport(client, options.channel, options.stream_id, options.ack_timeout)
            _TRANSPORTS[cache_key] = transport
        return transport


def value_column(schema: pa.Schema, options: SinkOptions) -> str | None:
    """The binary column of ``value=binary`` (the one binary column that is not a key)."""
    if options.value is not ValueFormat.BINARY:
        return None
    candidates: list[str] = [
        f.name
        for f in schema
        if f.name not in options.key and (pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type))
    ]
    if len(candidates) != 1:
        raise SparkOptionError(
            f"option value='binary' needs exactly one binary column besides the key; found {candidates or 'none'} "
            f"in {schema.names}"
        )
    return candidates[0]


def validate_schema(schema: pa.Schema, options: SinkOptions) -> None:
    """Key columns exist and are routable; ``binary`` has its one binary column."""
    if options.key:
        check_key_columns(schema, options.key)
    value_column(schema, options)


@dataclass
class TaskResult:
    """What one task sent: the commit message's content."""

    query_id: uuid.UUID
    batch_id: int
    partition: int
    rows: int = 0
    messages: int = 0
    #: queue -> sequence of the last message this task sent to it.
    last_sequences: dict[int, int] = field(default_factory=dict)


def write_task(
    batches: Iterable[pa.RecordBatch],
    options: SinkOptions,
    transport: Transport,
    query_id: uuid.UUID,
    batch_id: int,
    partition: int,
) -> TaskResult:
    """Publish one task's rows; returns once all of them are acknowledged (within ``ackTimeout``).

    The sequence numbering depends only on the input rows and the options, so a retried attempt
    of the task numbers the same rows the same way and consumers discard what they already have.
    """
    result = TaskResult(query_id, batch_id, partition)
    deadline = time.monotonic() + options.ack_timeout
    sequence = 0
    value_name: str | None = None
    checked = False
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if not checked:
            validate_schema(batch.schema, options)
            value_name = value_column(batch.schema, options)
            checked = True
        if options.key:
            groups = split_by_queue(batch, transport.queues_of(key_array(batch, options.key)))
        else:
            groups = [(CHANNEL_QUEUE, batch)]
        for queue, rows in groups:
            for group in row_groups(rows, options.max_batch_rows, options.max_batch_bytes):
                for part, part_body in _fit(group, encode_body(group, options.value, value_name), options, value_name):
                    sequence += 1
                    envelope = Envelope(
                        Kind.DATA, options.value, query_id, batch_id, partition, part.num_rows, sequence
                    )
                    # Each message gets the full ackTimeout to get through back-pressure.
                    transport.send(queue, encode(envelope, part_body), time.monotonic() + options.ack_timeout)
                    result.last_sequences[queue] = sequence
                    result.rows += part.num_rows
                    result.messages += 1
        deadline = time.monotonic() + options.ack_timeout
    transport.flush(deadline)
    return result


def _fit(
    group: pa.RecordBatch, body: bytes, options: SinkOptions, value_name: str | None
) -> list[tuple[pa.RecordBatch, bytes]]:
    """Halve a row group whose encoding came out larger than ``maxBatchBytes`` until it fits."""
    if len(body) <= options.max_batch_bytes:
        return [(group, body)]
    if group.num_rows == 1:
        raise SparkOptionError(
            f"one row encodes to {len(body)} bytes, more than maxBatchBytes={options.max_batch_bytes}"
        )
    half = group.num_rows // 2
    result: list[tuple[pa.RecordBatch, bytes]] = []
    for part in (group.slice(0, half), group.slice(half)):
        result.extend(_fit(part, encode_body(part, options.value, value_name), options, value_name))
    return result


def publish_markers(
    transport: Transport,
    kind: Kind,
    query_id: uuid.UUID,
    batch_id: int,
    results: Iterable[TaskResult],
    timeout: float,
) -> None:
    """A commit or abort marker to every queue (commit: each queue's last sequence per partition)."""
    if kind is Kind.DATA:
        raise EnvelopeError("markers are commit or abort")
    per_queue: dict[int, dict[int, int]] = {q: {} for q in range(transport.queue_count)}
    for task in results:
        for queue, last in task.last_sequences.items():
            if queue in per_queue:
                per_queue[queue][task.partition] = last
    deadline = time.monotonic() + timeout
    for queue in range(transport.queue_count):
        body = encode_commit_body(per_queue[queue]) if kind is Kind.COMMIT else b""
        envelope = Envelope(kind, ValueFormat.ARROW, query_id, batch_id, MARKER_PARTITION, 0, 0)
        transport.send(queue, encode(envelope, body), deadline)
    transport.flush(deadline)
