"""Consumers of what the sink sends: typed items, duplicates from retried tasks discarded.

:class:`SinkConsumer` wraps a :class:`affinity.groups.GroupConsumer` (``auto_ack``: a poll acks
what the previous poll returned, so a message is acknowledged only once the application asked
for more). :func:`consume` is the same as a generator.

Deduplication (per queue): a data message is delivered once per ``(query, batch, partition,
sequence)``; a retried task or a restarted query replays the same ids, and what was already
delivered is discarded. Data of a batch whose commit this consumer has seen is discarded. An abort
forgets the batch's delivered ids (a later replay of it is delivered again) and is surfaced so the
application drops that batch's uncommitted rows. A message that does not decode (not an envelope,
or a commit marker whose body is broken) is skipped and counted in ``stats.foreign``; the items
decoded before it in the same poll are delivered.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]

import affinity
from affinity.spark.encoding import decode_arrow, decode_binary, decode_json
from affinity.spark.envelope import NIL_QUERY, Envelope, Kind, decode, decode_commit_body
from affinity.spark.errors import EnvelopeError
from affinity.spark.options import ValueFormat

__all__ = [
    "AbortItem",
    "CommitItem",
    "ConsumerStats",
    "DataItem",
    "Deduplicator",
    "Item",
    "SinkConsumer",
    "consume",
    "decode_message",
]

#: Most (query, queue) pairs whose last committed batch is remembered.
MAX_REMEMBERED_QUERIES: Final = 4096
#: Most (query, batch, partition, queue) entries of uncommitted batches remembered.
MAX_OPEN_ENTRIES: Final = 262_144


@dataclass(frozen=True)
class DataItem:
    """One row group the sink sent: its envelope, the queue it came on and the encoded body."""

    envelope: Envelope
    queue: int
    body: bytes

    @property
    def query_id(self) -> uuid.UUID:
        """The writing query's id (a batch write: one id per ``save()``)."""
        return self.envelope.query_id

    @property
    def batch_id(self) -> int:
        """The micro-batch id (0 for a batch write)."""
        return self.envelope.batch_id

    @property
    def partition(self) -> int:
        """The Spark partition that wrote it."""
        return self.envelope.partition

    @property
    def sequence(self) -> int:
        """Its place in the partition's output, from 1."""
        return self.envelope.sequence

    @property
    def format(self) -> ValueFormat:
        """How the body is encoded."""
        return self.envelope.format

    def batch(self) -> pa.RecordBatch:
        """The rows as Arrow (``json``: from the objects; ``binary``: one ``value`` column)."""
        if self.envelope.format is ValueFormat.ARROW:
            return decode_arrow(self.body)
        if self.envelope.format is ValueFormat.JSON:
            return pa.RecordBatch.from_pylist(decode_json(self.body))
        return pa.RecordBatch.from_pydict({"value": pa.array(decode_binary(self.body), pa.binary())})

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts (any format)."""
        if self.envelope.format is ValueFormat.JSON:
            return decode_json(self.body)
        rows: list[dict[str, Any]] = self.batch().to_pylist()
        return rows

    def values(self) -> list[bytes]:
        """The values of a ``binary`` body."""
        if self.envelope.format is not ValueFormat.BINARY:
            raise EnvelopeError(f"values() reads binary bodies; this one is {self.envelope.format.value}")
        return decode_binary(self.body)


@dataclass(frozen=True)
class CommitItem:
    """The batch is committed: every row of it for this queue was delivered before this item."""

    query_id: uuid.UUID
    batch_id: int
    queue: int
    #: partition -> sequence of the last data message that partition sent to this queue.
    last_sequences: dict[int, int]
    #: Whether this consumer delivered each of those (False after a failover from a dead owner
    #: that delivered some of them itself).
    complete: bool


@dataclass(frozen=True)
class AbortItem:
    """The batch is aborted: drop its rows delivered so far on this queue (nil query id: any query)."""

    query_id: uuid.UUID
    batch_id: int
    queue: int


#: What a consumer yields.
Item = DataItem | CommitItem | AbortItem


@dataclass
class ConsumerStats:
    """Counts since the consumer started."""

    data: int = 0
    rows: int = 0
    commits: int = 0
    aborts: int = 0
    #: Data messages discarded because their ids were already delivered (retried tasks).
    duplicates_discarded: int = 0
    #: Data messages of a batch already committed here (a restarted query's replay).
    replays_discarded: int = 0
    #: Commit markers seen again (a re-run commit).
    markers_discarded: int = 0
    #: Messages that are not sink envelopes, or commit markers whose body does not decode (skipped).
    foreign: int = 0


@dataclass
class Deduplicator:
    """Per-queue delivery state: what was delivered of open batches, the last committed batch per query."""

    committed: OrderedDict[tuple[uuid.UUID, int], int] = field(default_factory=OrderedDict)
    delivered: OrderedDict[tuple[uuid.UUID, int, int, int], int] = field(default_factory=OrderedDict)

    def admit(self, envelope: Envelope, queue: int) -> str:
        """``"deliver"``, ``"duplicate"`` or ``"replay"`` for a data message on ``queue``."""
        if envelope.batch_id <= self.committed.get((envelope.query_id, queue), -1):
            return "replay"
        key = (envelope.query_id, envelope.batch_id, envelope.partition, queue)
        if envelope.sequence <= self.delivered.get(key, 0):
            return "duplicate"
        self.delivered[key] = envelope.sequence
        self.delivered.move_to_end(key)
        while len(self.delivered) > MAX_OPEN_ENTRIES:
            self.delivered.popitem(last=False)
        return "deliver"

    def commit(self, envelope: Envelope, queue: int, last_sequences: dict[int, int]) -> bool | None:
        """Completeness of the batch on ``queue``, or None if that commit was seen already."""
        marker = (envelope.query_id, queue)
        if envelope.batch_id <= self.committed.get(marker, -1):
            return None
        complete = all(
            self.delivered.get((envelope.query_id, envelope.batch_id, partition, queue), 0) >= last
            for partition, last in last_sequences.items()
        )
        self.committed[marker] = envelope.batch_id
        self.committed.move_to_end(marker)
        while len(self.committed) > MAX_REMEMBERED_QUERIES:
            self.committed.popitem(last=False)
        self._forget(envelope.query_id, envelope.batch_id, queue)
        return complete

    def abort(self, envelope: Envelope, queue: int) -> None:
        """Forget what was delivered of the batch, so a replay of it is delivered again."""
        self._forget(None if envelope.query_id == NIL_QUERY else envelope.query_id, envelope.batch_id, queue)

    def _forget(self, query: uuid.UUID | None, batch_id: int, queue: int) -> None:
        doomed = [
            key
            for key in self.delivered
            if key[1] == batch_id and key[3] == queue and (query is None or key[0] == query)
        ]
        for key in doomed:
            del self.delivered[key]


def decode_message(payload: bytes, queue: int = 0) -> Item:
    """One sink message as an item, without deduplication (for plain channel subscribers)."""
    envelope, body = decode(payload)
    if envelope.kind is Kind.DATA:
        return DataItem(envelope, queue, bytes(body))
    if envelope.kind is Kind.COMMIT:
        return CommitItem(envelope.query_id, envelope.batch_id, queue, decode_commit_body(body), True)
    return AbortItem(envelope.query_id, envelope.batch_id, queue)


class SinkConsumer:
    """A group consumer that turns the sink's messages into items, exactly once per committed batch."""

    def __init__(
        self,
        group: str,
        index: int,
        count: int,
        *,
        client: affinity.Client | None = None,
        registry: str | None = None,
        name: str | None = None,
        **group_options: Any,
    ) -> None:
        from affinity.groups import GroupConsumer

        self._own_client = client is None
        self._client = affinity.Client() if client is None else client
        self._consumer = GroupConsumer(
            self._client,
            group,
            index=index,
            count=count,
            auto_ack=True,
            registry=registry,
            name=name,
            **group_options,
        )
        self._dedup = Deduplicator()
        self.stats = ConsumerStats()

    def poll(self, max_messages: int = 1000, timeout: float = 0.0) -> list[Item]:
        """Items that arrived (acks what the previous poll returned)."""
        items: list[Item] = []
        for message in self._consumer.poll(max_messages, timeout):
            item = self._accept(bytes(message.payload), int(message.queue))
            if item is not None:
                items.append(item)
        return items

    def _accept(self, payload: bytes, queue: int) -> Item | None:
        try:
            envelope, body = decode(payload)
        except EnvelopeError:
            self.stats.foreign += 1
            return None
        if envelope.kind is Kind.DATA:
            verdict = self._dedup.admit(envelope, queue)
            if verdict == "duplicate":
                self.stats.duplicates_discarded += 1
                return None
            if verdict == "replay":
                self.stats.replays_discarded += 1
                return None
            self.stats.data += 1
            self.stats.rows += envelope.rows
            return DataItem(envelope, queue, bytes(body))
        if envelope.kind is Kind.COMMIT:
            try:
                last_sequences = decode_commit_body(body)
            except EnvelopeError:
                self.stats.foreign += 1
                return None
            complete = self._dedup.commit(envelope, queue, last_sequences)
            if complete is None:
                self.stats.markers_discarded += 1
                return None
            self.stats.commits += 1
            return CommitItem(envelope.query_id, envelope.batch_id, queue, last_sequences, complete)
        self._dedup.abort(envelope, queue)
        self.stats.aborts += 1
        return AbortItem(envelope.query_id, envelope.batch_id, queue)

    def owned_queues(self) -> list[int]:
        """Queues this consumer delivers now."""
        queues: list[int] = self._consumer.owned_queues()
        return queues

    def close(self) -> None:
        """Hand the queues over (planned handoff), leave the group, close an own client."""
        self._consumer.close()
        if self._own_client:
            self._client.close()

    def __enter__(self) -> SinkConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def consume(
    group: str,
    index: int,
    count: int,
    *,
    client: affinity.Client | None = None,
    registry: str | None = None,
    name: str | None = None,
    poll_timeout: float = 0.1,
    idle_timeout: float | None = None,
    stop: threading.Event | None = None,
    **group_options: Any,
) -> Iterator[Item]:
    """Items from the group as consumer ``index`` of ``count``, until ``stop`` is set or nothing came for
    ``idle_timeout`` seconds (None: forever). Closing the generator closes the consumer.

    ``group_options`` go to :class:`affinity.groups.GroupConsumer` (``host``, ``control``, ``cycle``,
    ``liveness_timeout``, ...).
    """
    consumer = SinkConsumer(group, index, count, client=client, registry=registry, name=name, **group_options)
    try:
        last = time.monotonic()
        while stop is None or not stop.is_set():
            items = consumer.poll(1000, poll_timeout)
            if items:
                last = time.monotonic()
            elif idle_timeout is not None and time.monotonic() - last > idle_timeout:
                return
            yield from items
    finally:
        consumer.close()
