"""The stream source: ``spark.readStream.format("affinity")`` reads messages as rows.

It runs on the driver (a PySpark simple stream reader): each trigger polls the subscription and
returns what arrived, with per-publication stream positions as the offset. Spark keeps what a
trigger read until the batch commits; nothing older is kept. The transport keeps a window (the
publication's term buffers), not a log: a restarted query cannot re-read what it read before,
and a subscriber only sees messages sent while it is subscribed. The client a source opens is
closed when it stops or its worker ends (:mod:`affinity.spark.closing`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import SimpleDataSourceStreamReader

import affinity
from affinity.spark.clients import advertised_host, open_client
from affinity.spark.closing import Release, hold
from affinity.spark.encoding import decode_arrow
from affinity.spark.envelope import Envelope, Kind, decode
from affinity.spark.errors import EnvelopeError, RetentionError, SparkOptionError
from affinity.spark.options import SourceOptions, ValueFormat

__all__ = ["GROUP_SOURCE_BINARY_SCHEMA", "SOURCE_BINARY_SCHEMA", "GroupStreamSource", "StreamSource"]

#: The source's rows with ``value=binary``: the body (or the whole message when it carries no
#: envelope) plus where it came from and, for sink messages, the envelope's fields.
SOURCE_BINARY_SCHEMA: Final = (
    "value BINARY, session_id INT, stream_id INT, position BIGINT, "
    "kind STRING, query_id STRING, batch_id BIGINT, partition INT, sequence BIGINT"
)
_BINARY_ARROW_SCHEMA: Final = pa.schema(
    [
        ("value", pa.binary()),
        ("session_id", pa.int32()),
        ("stream_id", pa.int32()),
        ("position", pa.int64()),
        ("kind", pa.string()),
        ("query_id", pa.string()),
        ("batch_id", pa.int64()),
        ("partition", pa.int32()),
        ("sequence", pa.int64()),
    ]
)
#: The group source's rows with ``value=binary``: the envelope's fields as above, plus the
#: message's key, queue, producer and group sequence number (``position``).
GROUP_SOURCE_BINARY_SCHEMA: Final = (
    "value BINARY, key BINARY, queue INT, producer BIGINT, position BIGINT, "
    "kind STRING, query_id STRING, batch_id BIGINT, partition INT, sequence BIGINT"
)
_GROUP_ARROW_SCHEMA: Final = pa.schema(
    [
        ("value", pa.binary()),
        ("key", pa.binary()),
        ("queue", pa.int32()),
        ("producer", pa.int64()),
        ("position", pa.int64()),
        ("kind", pa.string()),
        ("query_id", pa.string()),
        ("batch_id", pa.int64()),
        ("partition", pa.int32()),
        ("sequence", pa.int64()),
    ]
)
#: Fragments taken per subscription poll, and the most messages one trigger takes.
_POLL_FRAGMENTS: Final = 1000
_MAX_MESSAGES_PER_TRIGGER: Final = 100_000
_POLL_BUDGET_SECONDS: Final = 0.25
#: How long the group source's consumer waits for acknowledgements when it leaves. Spark commits
#: nothing after a stop, so the queues are released at once; what was read and not committed is
#: redelivered to their next owner.
_GROUP_LEAVE_TIMEOUT_SECONDS: Final = 1.0


class StreamSource(SimpleDataSourceStreamReader):
    """Reads a channel + stream id; offsets are ``{session id: stream position}``."""

    def __init__(self, options: SourceOptions, schema: pa.Schema) -> None:
        self._options = options
        self._schema = schema
        self._client: affinity.Client | None = None
        self._subscription: affinity.Subscription | None = None
        self._release: Release | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel (a copy on an executor has no subscription)."""
        return {
            "_options": self._options,
            "_schema": self._schema,
            "_client": None,
            "_subscription": None,
            "_release": None,
        }

    def _subscribe(self) -> affinity.Subscription:
        if self._subscription is None:
            assert self._options.channel is not None and self._options.stream_id is not None
            self._release = hold(self._close)
            try:
                self._client = open_client(self._options.driver_dir)
                self._subscription = self._client.add_subscription(self._options.channel, self._options.stream_id)
            except SparkOptionError:
                self.stop()
                raise
            except affinity.ChannelUriError as error:
                self.stop()
                raise SparkOptionError(f"option channel={self._options.channel!r}: {error}") from None
        return self._subscription

    def _close(self) -> None:
        client, self._client, self._subscription = self._client, None, None
        if client is not None:
            client.close()

    def stop(self) -> None:
        """Closes the subscription and its client (a later read subscribes again)."""
        if self._release is not None:
            self._release()

    def initialOffset(self) -> dict[str, int]:
        """Subscribes now (what is sent from here on is read); no position yet."""
        self._subscribe()
        return {}

    def read(self, start: dict[str, int]) -> tuple[Iterator[pa.RecordBatch], dict[str, int]]:
        """Everything that arrived since the last trigger, and the positions after it."""
        subscription = self._subscribe()
        messages: list[tuple[bytes, int, int, int]] = []

        def handler(data: bytes, header: affinity.Header) -> None:
            messages.append((data, header.session_id, header.stream_id, header.position))

        deadline = time.monotonic() + _POLL_BUDGET_SECONDS
        while len(messages) < _MAX_MESSAGES_PER_TRIGGER and time.monotonic() < deadline:
            if subscription.poll(handler, _POLL_FRAGMENTS) == 0:
                break
        end = dict(start)
        fresh: list[tuple[bytes, int, int, int]] = []
        for message in messages:
            session = str(message[1])
            if message[3] > end.get(session, -1):
                fresh.append(message)
                end[session] = message[3]
        batches = self._binary(fresh) if self._options.value is ValueFormat.BINARY else self._arrow(fresh)
        return iter(batches), end

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]) -> Iterator[pa.RecordBatch]:
        """Replay after a restart: the transport keeps no log, so only an empty range can be served."""
        if start == end:
            return iter([])
        if self._options.fail_on_data_loss:
            raise RetentionError(
                f"cannot replay offsets {start} to {end}: the transport keeps a window, not a log, and this reader "
                "no longer holds them (set failOnDataLoss=false to skip them)"
            )
        return iter([])

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: Spark drops its cached batches itself."""

    def _binary(self, messages: list[tuple[bytes, int, int, int]]) -> list[pa.RecordBatch]:
        columns: dict[str, list[Any]] = {name: [] for name in _BINARY_ARROW_SCHEMA.names}
        for data, session, stream, position in messages:
            _append_envelope_columns(columns, data)
            columns["session_id"].append(session)
            columns["stream_id"].append(stream)
            columns["position"].append(position)
        return _binary_batches(columns, _BINARY_ARROW_SCHEMA, self._schema)

    def _arrow(self, messages: list[tuple[bytes, int, int, int]]) -> list[pa.RecordBatch]:
        batches = (
            _arrow_rows(data, f"session {session} position {position}", self._schema)
            for data, session, _, position in messages
        )
        return [batch for batch in batches if batch is not None]


def _append_envelope_columns(columns: dict[str, list[Any]], data: bytes) -> None:
    """``value`` and the envelope's columns of one message (nulls when it carries no envelope)."""
    envelope: Envelope | None
    try:
        envelope, body = decode(data)
        value = bytes(body)
    except EnvelopeError:
        envelope, value = None, data
    columns["value"].append(value)
    columns["kind"].append(None if envelope is None else envelope.kind.name.lower())
    columns["query_id"].append(None if envelope is None else str(envelope.query_id))
    columns["batch_id"].append(None if envelope is None else envelope.batch_id)
    data_envelope = envelope if envelope is not None and envelope.kind is Kind.DATA else None
    columns["partition"].append(None if data_envelope is None else data_envelope.partition)
    columns["sequence"].append(None if data_envelope is None else data_envelope.sequence)


def _binary_batches(columns: dict[str, list[Any]], full: pa.Schema, wanted: pa.Schema) -> list[pa.RecordBatch]:
    if not columns["value"]:
        return []
    batch = pa.RecordBatch.from_pydict(columns, schema=full)
    return [batch] if wanted.names == full.names else [batch.select(wanted.names)]


def _arrow_rows(data: bytes, where: str, schema: pa.Schema) -> pa.RecordBatch | None:
    """The rows of an Arrow data message, in ``schema``; None for a marker."""
    try:
        envelope, body = decode(data)
    except EnvelopeError as error:
        raise EnvelopeError(f"{where}: {error} (value=arrow)") from None
    if envelope.kind is not Kind.DATA:
        return None
    if envelope.format is not ValueFormat.ARROW:
        raise EnvelopeError(f"{where}: body format {envelope.format.value}, but the source reads value=arrow")
    batch = decode_arrow(body)
    missing = [name for name in schema.names if name not in batch.schema.names]
    if missing:
        raise EnvelopeError(
            f"{where}: columns {missing} of the read schema are not in the message ({batch.schema.names})"
        )
    columns = [batch.column(name).cast(schema.field(name).type) for name in schema.names]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class GroupStreamSource(SimpleDataSourceStreamReader):
    """Reads a group as consumer ``index`` of ``count``; offsets are ``{"producer/queue": sequence}``.

    Messages are acknowledged when Spark commits the micro-batch that read them, so a restarted
    query (or the consumer that takes the queues over) gets again what was not committed.
    """

    def __init__(self, options: SourceOptions, schema: pa.Schema) -> None:
        self._options = options
        self._schema = schema
        self._client: affinity.Client | None = None
        self._consumer: Any = None
        self._pending: list[tuple[dict[str, int], dict[str, Any]]] = []
        self._release: Release | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel (a copy on an executor has no consumer)."""
        return {
            "_options": self._options,
            "_schema": self._schema,
            "_client": None,
            "_consumer": None,
            "_pending": [],
            "_release": None,
        }

    def _join(self) -> Any:
        if self._consumer is None:
            from affinity.groups import GroupConsumer

            options = self._options
            assert options.group is not None and options.index is not None and options.count is not None
            self._release = hold(self._close)
            try:
                self._client = open_client(options.driver_dir)
                self._consumer = GroupConsumer(
                    self._client,
                    options.group,
                    options.index,
                    options.count,
                    auto_ack=False,
                    registry=options.registry,
                    host=advertised_host(options.host),
                    control=options.control,
                    bootstrap=options.bootstrap,
                )
            except SparkOptionError:
                self.stop()
                raise
            except affinity.ConfigError as error:
                self.stop()
                raise SparkOptionError(f"option group={options.group!r}: {error}") from None
        return self._consumer

    def _close(self) -> None:
        consumer, client = self._consumer, self._client
        self._consumer, self._client, self._pending = None, None, []
        try:
            if consumer is not None:
                consumer.close(_GROUP_LEAVE_TIMEOUT_SECONDS)
        finally:
            if client is not None:
                client.close()

    def stop(self) -> None:
        """Leaves the group without acknowledging what no commit covered (redelivered to the next owner)."""
        if self._release is not None:
            self._release()

    def initialOffset(self) -> dict[str, int]:
        """Joins the group now; no position yet."""
        self._join()
        return {}

    def read(self, start: dict[str, int]) -> tuple[Iterator[pa.RecordBatch], dict[str, int]]:
        """What the owned queues delivered since the last trigger, and the sequences after it."""
        consumer = self._join()
        messages: list[Any] = []
        deadline = time.monotonic() + _POLL_BUDGET_SECONDS
        while len(messages) < _MAX_MESSAGES_PER_TRIGGER and time.monotonic() < deadline:
            polled = consumer.poll(_POLL_FRAGMENTS, 0.0)
            if not polled:
                break
            messages.extend(polled)
        end = dict(start)
        last: dict[str, Any] = {}
        for message in messages:
            name = f"{message.producer}/{message.queue}"
            end[name] = int(message.sequence)
            last[name] = message
        if last:
            self._pending.append((end, last))
        if self._options.value is ValueFormat.BINARY:
            columns: dict[str, list[Any]] = {name: [] for name in _GROUP_ARROW_SCHEMA.names}
            for message in messages:
                _append_envelope_columns(columns, bytes(message.payload))
                columns["key"].append(bytes(message.key))
                columns["queue"].append(int(message.queue))
                columns["producer"].append(int(message.producer))
                columns["position"].append(int(message.sequence))
            return iter(_binary_batches(columns, _GROUP_ARROW_SCHEMA, self._schema)), end
        rows = (
            _arrow_rows(bytes(m.payload), f"producer {m.producer} queue {m.queue} sequence {m.sequence}", self._schema)
            for m in messages
        )
        return iter([batch for batch in rows if batch is not None]), end

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]) -> Iterator[pa.RecordBatch]:
        """Unacknowledged messages come again to the queue's next owner, not by offset: only an empty range."""
        if start == end or not self._options.fail_on_data_loss:
            return iter([])
        raise RetentionError(
            f"cannot replay offsets {start} to {end} by position: the group redelivers what was not committed "
            "to the queue's next owner instead (set failOnDataLoss=false to skip)"
        )

    def commit(self, end: dict[str, int]) -> None:
        """Acknowledge everything read up to ``end`` (cumulative per producer and queue)."""
        keep: list[tuple[dict[str, int], dict[str, Any]]] = []
        for offset, last in self._pending:
            if all(end.get(name, -1) >= offset[name] for name in last):
                for message in last.values():
                    self._consumer.ack(message)
            else:
                keep.append((offset, last))
        self._pending = keep
