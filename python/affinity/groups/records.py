"""Test records of the hashed-delivery experiment: what ``affinity group publish``, ``consume``, ``validate`` exchange.

Its hashed publisher sends a map ``{seqno, topicnumber}`` on topic ``HP/bucket/topic``;
its LBG client republishes ``{seqno, topicnumber, lbgclient, originaltopic}`` to one plain
topic; its validation client checks, per topic number, that ``seqno`` goes up by one and reports
every change of ``lbgclient``. These are the same records as fixed little-endian structs (decoded
from untrusted bytes with typed errors, never an index error), plus the times the failover
measurements need.

Published record (the group message's payload; ``size`` pads it with zeros)::

    0      2       3      4            8                 16                24
    +------+-------+------+------------+-----------------+-----------------+-----
    | "AP" | ver=1 | 0    | topic u32  | seqno u64       | sent_ns u64     | pad
    +------+-------+------+------------+-----------------+-----------------+-----

Republished record (one plain-publication message per processed group message)::

    0      2       3      4            8           12          16          24
    +------+-------+------+------------+-----------+-----------+-----------+
    | "AR" | ver=1 | 0    | topic u32  | lbgclient | queue u32 | seqno u64 |
    +------+-------+------+------------+-----------+-----------+-----------+
    | epoch u64 | producer u64 | group sequence u64 | sent_ns u64 | processed_ns u64 |
    +-----------+--------------+--------------------+-------------+------------------+
    | subject length u16 | subject (UTF-8, ``HP/bucket/topic``) |
    +--------------------+--------------------------------------+
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from affinity.exceptions import AffinityError

__all__ = [
    "PUBLISHED_HEADER_SIZE",
    "REPUBLISH_STREAM_ID",
    "PublishedRecord",
    "RecordError",
    "RepublishedRecord",
]

#: Record layout version carried in every record.
RECORD_VERSION = 1
#: Stream id of the plain publication the consumers republish on and the validator reads.
REPUBLISH_STREAM_ID = 1001
_PUBLISHED = struct.Struct("<2sBxIQQ")
_REPUBLISHED = struct.Struct("<2sBxIIIQQQQQQH")
_PUBLISHED_MAGIC = b"AP"
_REPUBLISHED_MAGIC = b"AR"
#: Bytes of a published record before its padding: the smallest ``--size``.
PUBLISHED_HEADER_SIZE = _PUBLISHED.size
#: Longest subject a republished record carries (longer ones are cut at a character boundary).
MAX_SUBJECT_BYTES = 1024


class RecordError(AffinityError, ValueError):
    """Bytes that are not a record of the expected kind; the message says what is wrong."""


def _check_header(data: bytes, layout: struct.Struct, magic: bytes, what: str) -> tuple[int | bytes, ...]:
    if len(data) < layout.size:
        raise RecordError(f"{what} record too short: {len(data)} bytes, need {layout.size}")
    fields = layout.unpack_from(data)
    if fields[0] != magic:
        raise RecordError(f"not a {what} record: magic {fields[0]!r}, expected {magic!r}")
    if fields[1] != RECORD_VERSION:
        raise RecordError(f"{what} record version {fields[1]} is not {RECORD_VERSION}")
    return tuple(fields)


@dataclass(frozen=True)
class PublishedRecord:
    """What the hashed publisher sends for key number ``topic``: its ``seqno``-th message (from 1)."""

    topic: int
    seqno: int
    sent_ns: int

    def encode(self, size: int = PUBLISHED_HEADER_SIZE) -> bytes:
        """The payload, zero-padded to ``size`` bytes (at least the header)."""
        header = _PUBLISHED.pack(_PUBLISHED_MAGIC, RECORD_VERSION, self.topic, self.seqno, self.sent_ns)
        return header.ljust(size, b"\0")

    @classmethod
    def decode(cls, data: bytes) -> PublishedRecord:
        """Parses a payload; ``RecordError`` when it is not a published record."""
        fields = _check_header(data, _PUBLISHED, _PUBLISHED_MAGIC, "published")
        _, _, topic, seqno, sent_ns = fields
        return cls(topic=int(topic), seqno=int(seqno), sent_ns=int(sent_ns))


@dataclass(frozen=True)
class RepublishedRecord:
    """What an LBG client republishes after processing one group message (the experiment's map)."""

    topic: int
    lbgclient: int
    queue: int
    seqno: int
    epoch: int
    producer: int
    sequence: int
    sent_ns: int
    processed_ns: int
    subject: str

    def encode(self) -> bytes:
        """The republished message's bytes."""
        subject = self.subject.encode("utf-8")[:MAX_SUBJECT_BYTES].decode("utf-8", "ignore").encode("utf-8")
        return (
            _REPUBLISHED.pack(
                _REPUBLISHED_MAGIC,
                RECORD_VERSION,
                self.topic,
                self.lbgclient,
                self.queue,
                self.seqno,
                self.epoch,
                self.producer,
                self.sequence,
                self.sent_ns,
                self.processed_ns,
                len(subject),
            )
            + subject
        )

    @classmethod
    def decode(cls, data: bytes) -> RepublishedRecord:
        """Parses a republished message; ``RecordError`` when it is not one or is truncated."""
        fields = _check_header(data, _REPUBLISHED, _REPUBLISHED_MAGIC, "republished")
        length = int(fields[-1])
        end = _REPUBLISHED.size + length
        if len(data) < end:
            raise RecordError(f"republished record truncated: subject of {length} bytes, {len(data)} bytes in all")
        try:
            subject = data[_REPUBLISHED.size : end].decode("utf-8")
        except UnicodeDecodeError as error:
            raise RecordError(f"republished record subject is not UTF-8: {error}") from None
        values = [int(value) for value in fields[2:-1]]
        topic, lbgclient, queue, seqno, epoch, producer, sequence, sent_ns, processed_ns = values
        return cls(topic, lbgclient, queue, seqno, epoch, producer, sequence, sent_ns, processed_ns, subject)
