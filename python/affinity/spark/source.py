"""The stream source: ``spark.readStream.format("affinity")`` reads messages as rows.

It runs on the driver (a PySpark simple stream reader): each trigger polls the subscription and
returns what arrived, with per-publication stream positions as the offset. Spark keeps what a
trigger read until the batch commits; nothing older is kept. The transport keeps a window (the
publication's term buffers), not a log: a restarted query cannot re-read what it read before,
and a subscriber only sees messages sent while it is subscribed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import SimpleDataSourceStreamReader

import affinity
from affinity.spark.encoding import decode_arrow
from affinity.spark.envelope import Envelope, Kind, decode
from affinity.spark.errors import EnvelopeError, RetentionError, SparkOptionError
from affinity.spark.options import SourceOptions, ValueFormat

__all__ = ["SOURCE_BINARY_SCHEMA", "StreamSource"]

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
#: Fragments taken per subscription poll, and the most messages one trigger takes.
_POLL_FRAGMENTS: Final = 1000
_MAX_MESSAGES_PER_TRIGGER: Final = 100_000
_POLL_BUDGET_SECONDS: Final = 0.25


class StreamSource(SimpleDataSourceStreamReader):
    """Reads a channel + stream id; offsets are ``{session id: stream position}``."""

    def __init__(self, options: SourceOptions, schema: pa.Schema) -> None:
        if options.group is not None:
            raise SparkOptionError(
                f"option group={options.group!r} on the source is not available yet; read a channel + streamId"
            )
        self._options = options
        self._schema = schema
        self._client: affinity.Client | None = None
        self._subscription: affinity.Subscription | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Only the options travel (a copy on an executor has no subscription)."""
        return {"_options": self._options, "_schema": self._schema, "_client": None, "_subscription": None}

    def _subscribe(self) -> affinity.Subscription:
        if self._subscription is None:
            assert self._options.channel is not None and self._options.stream_id is not None
            self._client = affinity.Client()
            try:
                self._subscription = self._client.add_subscription(self._options.channel, self._options.stream_id)
            except affinity.ChannelUriError as error:
                raise SparkOptionError(f"option channel={self._options.channel!r}: {error}") from None
        return self._subscription

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
        if not messages:
            return []
        columns: dict[str, list[Any]] = {name: [] for name in _BINARY_ARROW_SCHEMA.names}
        for data, session, stream, position in messages:
            envelope: Envelope | None
            try:
                envelope, body = decode(data)
                value = bytes(body)
            except EnvelopeError:
                envelope, value = None, data
            columns["value"].append(value)
            columns["session_id"].append(session)
            columns["stream_id"].append(stream)
            columns["position"].append(position)
            columns["kind"].append(None if envelope is None else envelope.kind.name.lower())
            columns["query_id"].append(None if envelope is None else str(envelope.query_id))
            columns["batch_id"].append(None if envelope is None else envelope.batch_id)
            is_data = envelope is not None and envelope.kind is Kind.DATA
            columns["partition"].append(envelope.partition if is_data and envelope is not None else None)
            columns["sequence"].append(envelope.sequence if is_data and envelope is not None else None)
        batch = pa.RecordBatch.from_pydict(columns, schema=_BINARY_ARROW_SCHEMA)
        return [batch.select(self._schema.names)] if self._schema.names != _BINARY_ARROW_SCHEMA.names else [batch]

    def _arrow(self, messages: list[tuple[bytes, int, int, int]]) -> list[pa.RecordBatch]:
        result: list[pa.RecordBatch] = []
        for data, session, _stream, position in messages:
            try:
                envelope, body = decode(data)
            except EnvelopeError as error:
                raise EnvelopeError(f"session {session} position {position}: {error} (value=arrow)") from None
            if envelope.kind is not Kind.DATA:
                continue
            if envelope.format is not ValueFormat.ARROW:
                raise EnvelopeError(
                    f"session {session} position {position}: body format {envelope.format.value}, "
                    "but the source reads value=arrow"
                )
            batch = decode_arrow(body)
            missing = [name for name in self._schema.names if name not in batch.schema.names]
            if missing:
                raise EnvelopeError(
                    f"session {session} position {position}: columns {missing} of the read schema are not in "
                    f"the message ({batch.schema.names})"
                )
            result.append(
                pa.RecordBatch.from_arrays(
                    [batch.column(name).cast(self._schema.field(name).type) for name in self._schema.names],
                    schema=self._schema,
                )
            )
        return result
