"""Byte layouts of the demo's records: the generated event and the record a consumer republishes.

Event (the group message payload of the plain-Python generator; the Spark generator sends the
same fields as Arrow columns ``account``, ``seq`` and ``event_time``, the last a Spark
``TimestampType``, read back by :func:`event_times_ns`)::

    0        8        16       24
    +--------+--------+--------+
    |account |  seq   |event_ns|     little-endian u64, u64, i64
    +--------+--------+--------+

Processed record (what a consumer republishes to the validator, packed back to back in one
transport message)::

    0        8        16  18  20       28       36
    +--------+--------+---+---+--------+--------+
    |account |  seq   |c  |q  |event_ns|done_ns |   u64, u64, u16 consumer, u16 queue, i64, i64
    +--------+--------+---+---+--------+--------+
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from affinity.exceptions import AffinityError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

EVENT = struct.Struct("<QQq")
PROCESSED = struct.Struct("<QQHHqq")


class RecordError(AffinityError, ValueError):
    """A demo record has the wrong length; the message names the record kind and the length."""


@dataclass(frozen=True, slots=True)
class Processed:
    """One event as processed by one consumer."""

    account: int
    seq: int
    consumer: int
    queue: int
    event_ns: int
    done_ns: int


def encode_event(account: int, seq: int, event_ns: int) -> bytes:
    """The payload of one generated event."""
    return EVENT.pack(account, seq, event_ns)


def decode_event(payload: bytes) -> tuple[int, int, int]:
    """``(account, seq, event_ns)`` of an event payload."""
    if len(payload) != EVENT.size:
        raise RecordError(f"event payload is {len(payload)} bytes, expected {EVENT.size}")
    account, seq, event_ns = EVENT.unpack(payload)
    return account, seq, event_ns


def encode_processed(rows: Sequence[tuple[int, int, int, int, int, int]]) -> bytes:
    """Processed records ``(account, seq, consumer, queue, event_ns, done_ns)`` packed into one message."""
    buffer = bytearray(PROCESSED.size * len(rows))
    for i, row in enumerate(rows):
        PROCESSED.pack_into(buffer, i * PROCESSED.size, *row)
    return bytes(buffer)


def decode_processed(message: bytes) -> Iterator[tuple[int, int, int, int, int, int]]:
    """The processed records of one message, as tuples in :class:`Processed` field order."""
    if len(message) % PROCESSED.size:
        raise RecordError(f"processed message is {len(message)} bytes, not a multiple of {PROCESSED.size}")
    rows: Iterator[tuple[int, int, int, int, int, int]] = PROCESSED.iter_unpack(message)
    return rows


def event_times_ns(column: pa.Array | pa.ChunkedArray, name: str = "event_time") -> list[int]:
    """The instants of an Arrow timestamp column (any unit, any or no time zone) in ns since the epoch.

    A Spark ``TimestampType`` column reaches the consumers as ``timestamp[us, <session time zone>]``;
    the instant is the same whatever the zone. Anything but a timestamp column raises
    :class:`RecordError` naming the column and its type.
    """
    import pyarrow as pa

    if not pa.types.is_timestamp(column.type):
        raise RecordError(f"column {name!r} is {column.type}, expected a timestamp (Spark TimestampType)")
    # The stored integers are the instant in the column's unit, whatever its time zone.
    nanos = column.cast(pa.timestamp("ns", tz=column.type.tz)).cast(pa.int64())
    values: list[int] = nanos.to_pylist()
    if any(v is None for v in values):
        raise RecordError(f"column {name!r} has null event times")
    return values


def records_per_message(max_message_length: int) -> int:
    """How many processed records fit in one transport message."""
    return max(1, max_message_length // PROCESSED.size)
