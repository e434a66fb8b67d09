"""The envelope every sink message carries: a fixed 48-byte header, then the body.

Layout (little-endian, version 1)::

     0        4     5     6      7      8                 24          32          36       40          48
     +--------+-----+-----+------+------+-----------------+-----------+-----------+--------+-----------+------
     | "AFSK" | ver |kind |format|flags | query id (UUID) | batch id  | partition |  rows  | sequence  | body
     +--------+-----+-----+------+------+-----------------+-----------+-----------+--------+-----------+------

- ``kind``: 0 data, 1 commit, 2 abort. ``format``: the body's :class:`ValueFormat` (0 arrow, 1 json,
  2 binary; 0 on markers). ``flags``: reserved, must be 0.
- ``batch id``: Spark's micro-batch id (signed 64-bit, >= 0; 0 for a batch write).
- ``partition``: the Spark partition id of a data message; :data:`MARKER_PARTITION` on markers.
- ``rows``: rows in the body (data) or 0. ``sequence``: the message's place in its task's output,
  from 1, the same in every attempt of the task (markers: 0).
- A commit marker's body lists, for the queue it is sent to, ``(partition u32, last sequence u64)``
  pairs: the last data message each partition sent to that queue (a u32 count first).

:func:`decode` takes untrusted bytes and raises :class:`EnvelopeError` naming the field.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from affinity.spark.errors import EnvelopeError
from affinity.spark.options import ValueFormat

__all__ = [
    "ENVELOPE_VERSION",
    "HEADER_LENGTH",
    "MAGIC",
    "MARKER_PARTITION",
    "NIL_QUERY",
    "Envelope",
    "Kind",
    "decode",
    "decode_commit_body",
    "encode",
    "encode_commit_body",
]

MAGIC: Final = b"AFSK"
#: Version of the layout above; a decoder refuses any other.
ENVELOPE_VERSION: Final = 1
_HEADER: Final = struct.Struct("<4sBBBB16sqIIQ")
#: Bytes before the body.
HEADER_LENGTH: Final = _HEADER.size
#: Partition field of commit and abort markers.
MARKER_PARTITION: Final = 0xFFFF_FFFF
#: Query id of an abort marker sent when Spark reported no task's query id (applies to every query).
NIL_QUERY: Final = uuid.UUID(int=0)
_FORMAT_CODES: Final = {ValueFormat.ARROW: 0, ValueFormat.JSON: 1, ValueFormat.BINARY: 2}
_FORMATS_BY_CODE: Final = {code: fmt for fmt, code in _FORMAT_CODES.items()}
_COMMIT_ENTRY: Final = struct.Struct("<IQ")
_COUNT: Final = struct.Struct("<I")
_MAX_U32: Final = 0xFFFF_FFFF
_MAX_U64: Final = 0xFFFF_FFFF_FFFF_FFFF


class Kind(IntEnum):
    """What a message is."""

    DATA = 0
    COMMIT = 1
    ABORT = 2


@dataclass(frozen=True)
class Envelope:
    """The decoded header of one sink message."""

    kind: Kind
    format: ValueFormat
    query_id: uuid.UUID
    batch_id: int
    partition: int
    rows: int
    sequence: int


def encode(envelope: Envelope, body: bytes | memoryview = b"") -> bytes:
    """Header then body, as one message."""
    if not 0 <= envelope.batch_id < 2**63:
        raise EnvelopeError(f"batch id {envelope.batch_id} is out of range [0, 2^63)")
    if not 0 <= envelope.partition <= _MAX_U32:
        raise EnvelopeError(f"partition {envelope.partition} is out of range [0, 2^32)")
    if not 0 <= envelope.rows <= _MAX_U32:
        raise EnvelopeError(f"row count {envelope.rows} is out of range [0, 2^32)")
    if not 0 <= envelope.sequence <= _MAX_U64:
        raise EnvelopeError(f"sequence {envelope.sequence} is out of range [0, 2^64)")
    header = _HEADER.pack(
        MAGIC,
        ENVELOPE_VERSION,
        int(envelope.kind),
        _FORMAT_CODES[envelope.format],
        0,
        envelope.query_id.bytes,
        envelope.batch_id,
        envelope.partition,
        envelope.rows,
        envelope.sequence,
    )
    return header + bytes(body)


def decode(message: bytes | memoryview) -> tuple[Envelope, memoryview]:
    """The envelope and a view of the body; :class:`EnvelopeError` says which field is wrong."""
    view = memoryview(message)
    if len(view) < HEADER_LENGTH:
        raise EnvelopeError(f"message of {len(view)} bytes is shorter than the {HEADER_LENGTH}-byte envelope header")
    magic, version, kind, fmt, flags, query, batch_id, partition, rows, sequence = _HEADER.unpack_from(view)
    if magic != MAGIC:
        raise EnvelopeError(f"magic {magic!r} at offset 0 is not {MAGIC!r}: not a Spark sink message")
    if version != ENVELOPE_VERSION:
        raise EnvelopeError(
            f"envelope version {version} at offset 4 is not supported (this decoder: {ENVELOPE_VERSION})"
        )
    try:
        kind_value = Kind(kind)
    except ValueError:
        raise EnvelopeError(f"kind {kind} at offset 5 is not data (0), commit (1) or abort (2)") from None
    format_value = _FORMATS_BY_CODE.get(fmt)
    if format_value is None:
        raise EnvelopeError(f"format {fmt} at offset 6 is not arrow (0), json (1) or binary (2)")
    if flags != 0:
        raise EnvelopeError(f"flags {flags:#04x} at offset 7 must be 0 in version {ENVELOPE_VERSION}")
    if batch_id < 0:
        raise EnvelopeError(f"batch id {batch_id} at offset 24 is negative")
    is_marker = kind_value is not Kind.DATA
    if is_marker and (partition != MARKER_PARTITION or sequence != 0 or rows != 0):
        raise EnvelopeError(
            f"{kind_value.name.lower()} marker has partition {partition}, rows {rows}, sequence {sequence} "
            f"(must be {MARKER_PARTITION}, 0, 0)"
        )
    if not is_marker and (partition == MARKER_PARTITION or sequence == 0):
        raise EnvelopeError(f"data message has partition {partition} and sequence {sequence} (sequence starts at 1)")
    envelope = Envelope(kind_value, format_value, uuid.UUID(bytes=bytes(query)), batch_id, partition, rows, sequence)
    return envelope, view[HEADER_LENGTH:]


def encode_commit_body(last_sequences: dict[int, int]) -> bytes:
    """A commit marker's body: for each partition that sent data to the queue, its last sequence."""
    parts = [_COUNT.pack(len(last_sequences))]
    parts.extend(_COMMIT_ENTRY.pack(partition, last) for partition, last in sorted(last_sequences.items()))
    return b"".join(parts)


def decode_commit_body(body: bytes | memoryview) -> dict[int, int]:
    """The inverse of :func:`encode_commit_body`, checked against the body's length."""
    view = memoryview(body)
    if len(view) < _COUNT.size:
        raise EnvelopeError(f"commit body of {len(view)} bytes has no entry count")
    (count,) = _COUNT.unpack_from(view)
    expected = _COUNT.size + count * _COMMIT_ENTRY.size
    if len(view) != expected:
        raise EnvelopeError(f"commit body of {len(view)} bytes does not hold {count} entries ({expected} bytes)")
    result: dict[int, int] = {}
    for i in range(count):
        partition, last = _COMMIT_ENTRY.unpack_from(view, _COUNT.size + i * _COMMIT_ENTRY.size)
        if partition in result:
            raise EnvelopeError(f"commit body names partition {partition} twice")
        result[partition] = last
    return result
