"""Row encodings: routing keys as bytes, row groups split by queue and size, message bodies.

Key bytes (what the group hashes; docs/spark.md "Keys"):

- one key column: a string is its UTF-8 bytes, binary is as is, an integer is its decimal text
  (so ``publish(key=str(account_id))`` from any other publisher reaches the same queue); null is
  the empty key;
- several key columns: for each column in order, a 4-byte little-endian length then those bytes,
  a null column as length ``0xFFFFFFFF`` and no bytes. Unambiguous: no two rows with different
  key tuples share the encoding.

Bodies (:class:`ValueFormat`): ``arrow`` an Arrow IPC stream (schema + one record batch), ``json``
JSON Lines (orjson; binary values as base64 text, decimals as text, dates as ``YYYY-MM-DD``,
timestamps as RFC 3339 text in UTC such as ``2026-01-02T03:04:05.123456+00:00`` -- orjson leaves out
the fraction when it is zero -- and time-zone-less timestamps without an offset), ``binary`` one
binary column, each value as a 4-byte little-endian length then the bytes.
"""

from __future__ import annotations

import base64
import decimal
import struct
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from affinity.spark.errors import EnvelopeError, SparkOptionError
from affinity.spark.options import ValueFormat

__all__ = [
    "body_rows",
    "check_key_columns",
    "decode_arrow",
    "decode_binary",
    "decode_json",
    "encode_body",
    "key_array",
    "row_groups",
    "split_by_queue",
]

_LENGTH: Final = struct.Struct("<I")
_NULL_LENGTH: Final = b"\xff\xff\xff\xff"
#: Time zone the ``json`` body writes time-zone-aware timestamps in (whatever the session's).
JSON_TIMEZONE: Final = "UTC"
#: Share of ``maxBatchBytes`` a row group is sized for before encoding (IPC framing, schema).
_SIZE_HEADROOM: Final = 0.9


def _key_type_ok(data_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_integer(data_type)
    )


def check_key_columns(schema: pa.Schema, key: Sequence[str]) -> None:
    """Every key column exists and has a routable type (string, binary, integer)."""
    for name in key:
        index = schema.get_field_index(name)
        if index < 0:
            raise SparkOptionError(f"option key={','.join(key)!r}: column {name!r} is not in {schema.names}")
        data_type = schema.field(index).type
        if not _key_type_ok(data_type):
            raise SparkOptionError(
                f"option key={','.join(key)!r}: column {name!r} has type {data_type}; "
                "key columns must be string, binary or integer"
            )


def _as_binary(column: pa.Array) -> pa.Array:
    """The column's key bytes, nulls kept."""
    if pa.types.is_integer(column.type):
        column = pc.cast(column, pa.string())
    if pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        return pc.cast(column, pa.large_binary())
    return pc.cast(column, pa.binary())


def _length_prefixes(values: pa.Array) -> pa.Array:
    """Each value's 4-byte little-endian length (``0xFFFFFFFF`` for null), built without a Python loop."""
    lengths = pc.fill_null(pc.cast(pc.binary_length(values), pa.uint32()), pa.scalar(0xFFFF_FFFF, pa.uint32()))
    if sys.byteorder != "little":
        return pa.array(
            [_NULL_LENGTH if n == 0xFFFF_FFFF else _LENGTH.pack(n) for n in lengths.to_pylist()], pa.large_binary()
        )
    fixed = pa.Array.from_buffers(pa.binary(4), len(lengths), [None, lengths.buffers()[1]], offset=lengths.offset)
    return pc.cast(fixed, pa.large_binary())


def key_array(batch: pa.RecordBatch, key: Sequence[str]) -> pa.Array:
    """One binary key per row (see the module doc for the encoding)."""
    if len(key) == 1:
        return pc.cast(pc.fill_null(_as_binary(batch.column(key[0])), b""), pa.binary())
    parts: list[pa.Array] = []
    for name in key:
        values = pc.cast(_as_binary(batch.column(name)), pa.large_binary())
        parts.append(_length_prefixes(values))
        parts.append(pc.fill_null(values, b""))
    joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary()))
    keys: pa.Array = pc.cast(joined, pa.binary())
    return keys


def split_by_queue(batch: pa.RecordBatch, queues: Sequence[int]) -> list[tuple[int, pa.RecordBatch]]:
    """The batch's rows grouped by queue (ascending), each group keeping the rows' order."""
    if batch.num_rows == 0:
        return []
    queue_array = pa.array(queues, pa.int32())
    if len(queue_array) != batch.num_rows:
        raise EnvelopeError(f"{len(queue_array)} queues for {batch.num_rows} rows")
    order = pc.sort_indices(queue_array)  # stable: rows of one queue keep their order
    ordered = batch.take(order)
    runs = pc.run_end_encode(queue_array.take(order))
    result: list[tuple[int, pa.RecordBatch]] = []
    start = 0
    for end, queue in zip(runs.run_ends.to_pylist(), runs.values.to_pylist(), strict=True):
        result.append((int(queue), ordered.slice(start, end - start)))
        start = end
    return result


def row_groups(batch: pa.RecordBatch, max_rows: int, max_bytes: int) -> Iterator[pa.RecordBatch]:
    """Consecutive slices of at most ``max_rows`` rows and about ``max_bytes`` bytes each."""
    total = batch.num_rows
    if total == 0:
        return
    size = max(batch.nbytes, 1)
    by_size = max(1, int(max_bytes * _SIZE_HEADROOM * total / size))
    step = min(max_rows, by_size)
    for start in range(0, total, step):
        yield batch.slice(start, min(step, total - start))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _utc_timestamps(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with every time-zone-aware top-level timestamp column relabelled to UTC (same instants)."""
    schema = batch.schema
    aware = [
        i for i, f in enumerate(schema) if pa.types.is_timestamp(f.type) and f.type.tz not in (None, JSON_TIMEZONE)
    ]
    if not aware:
        return batch
    columns = list(batch.columns)
    for i in aware:
        columns[i] = columns[i].cast(pa.timestamp(schema.field(i).type.unit, tz=JSON_TIMEZONE))
    return pa.RecordBatch.from_arrays(columns, names=schema.names)


def encode_body(batch: pa.RecordBatch, fmt: ValueFormat, value_column: str | None = None) -> bytes:
    """The message body of a row group in format ``fmt`` (``value_column`` names the binary column)."""
    if fmt is ValueFormat.ARROW:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        encoded: bytes = sink.getvalue().to_pybytes()
        return encoded
    if fmt is ValueFormat.JSON:
        import orjson

        dumps = orjson.dumps
        try:
            rows = _utc_timestamps(batch).to_pylist()
            return b"\n".join(dumps(row, default=_json_default) for row in rows)
        except orjson.JSONEncodeError as error:
            raise EnvelopeError(f"a row does not encode as JSON (value=json): {error}") from None
    if value_column is None:
        raise EnvelopeError("binary bodies need the value column")
    column = batch.column(value_column)
    if column.null_count:
        raise EnvelopeError(f"column {value_column!r} has {column.null_count} null values; binary mode sends bytes")
    values = [v if isinstance(v, bytes) else bytes(v) for v in column.to_pylist()]
    return b"".join(_LENGTH.pack(len(v)) + v for v in values)


def decode_arrow(body: bytes | memoryview) -> pa.RecordBatch:
    """The record batch of an ``arrow`` body (one batch; an empty stream is an error)."""
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(body))
        batches = list(reader)
    except (pa.ArrowInvalid, OSError) as error:
        raise EnvelopeError(f"arrow body does not decode: {error}") from None
    if len(batches) != 1:
        raise EnvelopeError(f"arrow body holds {len(batches)} record batches (expected 1)")
    return batches[0]


def decode_json(body: bytes | memoryview) -> list[dict[str, Any]]:
    """The rows of a ``json`` body."""
    import orjson

    raw = bytes(body)
    if not raw:
        return []
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise EnvelopeError(f"json body line {number} does not decode: {error}") from None
        if not isinstance(row, dict):
            raise EnvelopeError(f"json body line {number} is a {type(row).__name__}, not an object")
        rows.append(row)
    return rows


def decode_binary(body: bytes | memoryview) -> list[bytes]:
    """The values of a ``binary`` body; a length running past the end is an error naming the offset."""
    view = memoryview(body)
    values: list[bytes] = []
    offset = 0
    while offset < len(view):
        if offset + _LENGTH.size > len(view):
            raise EnvelopeError(f"binary body: truncated length at offset {offset} of {len(view)}")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += _LENGTH.size
        if offset + length > len(view):
            raise EnvelopeError(
                f"binary body: value of {length} bytes at offset {offset} runs past the end ({len(view)})"
            )
        values.append(bytes(view[offset : offset + length]))
        offset += length
    return values


def body_rows(fmt: ValueFormat, body: bytes | memoryview) -> int:
    """How many rows a body holds (used to check the envelope's row count)."""
    if fmt is ValueFormat.ARROW:
        rows: int = decode_arrow(body).num_rows
        return rows
    if fmt is ValueFormat.JSON:
        return len(decode_json(body))
    return len(decode_binary(body))
