"""The Spark integration's pure parts: options, envelope, key and body encodings, deduplication."""

from __future__ import annotations

import struct
import uuid
from types import SimpleNamespace

import affinity
import pyarrow as pa
import pytest
from affinity.spark.consume import Deduplicator, decode_message
from affinity.spark.encoding import (
    decode_arrow,
    decode_binary,
    decode_json,
    encode_body,
    key_array,
    row_groups,
    split_by_queue,
)
from affinity.spark.envelope import (
    HEADER_LENGTH,
    MARKER_PARTITION,
    NIL_QUERY,
    Envelope,
    Kind,
    decode,
    decode_commit_body,
    encode,
    encode_commit_body,
)
from affinity.spark.errors import EnvelopeError, SparkOptionError
from affinity.spark.options import ValueFormat, parse_sink_options, parse_source_options
from hypothesis import given
from hypothesis import strategies as st

QUERY = uuid.UUID("12345678-1234-5678-1234-567812345678")


def data(batch_id: int, partition: int, sequence: int, query: uuid.UUID = QUERY) -> Envelope:
    return Envelope(Kind.DATA, ValueFormat.ARROW, query, batch_id, partition, 1, sequence)


def marker(kind: Kind, batch_id: int, query: uuid.UUID = QUERY) -> Envelope:
    return Envelope(kind, ValueFormat.ARROW, query, batch_id, MARKER_PARTITION, 0, 0)


# ---- options ----------------------------------------------------------------------------------


def test_sink_options_parse_group_mode_with_defaults() -> None:
    options = parse_sink_options({"group": "orders", "KEY": "account, region"})
    assert options.group == "orders" and options.channel is None
    assert options.key == ("account", "region")
    assert options.value is ValueFormat.ARROW
    assert options.max_batch_rows == 10_000 and options.max_batch_bytes == 1024 * 1024
    assert options.ack_timeout == 60.0


def test_sink_options_parse_channel_mode_and_durations() -> None:
    options = parse_sink_options(
        {"channel": "aeron:udp?endpoint=127.0.0.1:40100", "streamid": "7", "ackTimeout": "500ms", "value": "JSON"}
    )
    assert options.stream_id == 7 and options.ack_timeout == 0.5 and options.value is ValueFormat.JSON
    assert parse_sink_options({"channel": "aeron:ipc", "streamId": "1", "ackTimeout": "2m"}).ack_timeout == 120.0


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"group": "g", "key": "k", "colour": "blue"}, "colour='blue'"),
        ({"group": "g"}, "needs option key"),
        ({"group": "g", "key": "a,,b"}, "key='a,,b'"),
        ({"group": "g", "key": "a,a"}, "names a column twice"),
        ({"group": "g", "key": "k", "channel": "aeron:ipc"}, "cannot be combined"),
        ({"channel": "aeron:ipc"}, "needs option streamId"),
        ({"streamId": "3"}, "needs option channel"),
        ({"channel": "udp://x", "streamId": "3"}, "channel='udp://x'"),
        ({"channel": "aeron:ipc", "streamId": "x3"}, "streamId='x3' is not an integer"),
        ({"channel": "aeron:ipc", "streamId": "4294967296"}, "out of range"),
        ({"channel": "aeron:ipc", "streamId": "1", "key": "k"}, "applies only with option group"),
        ({"group": "g", "key": "k", "value": "avro"}, "value='avro'"),
        ({"group": "g", "key": "k", "maxBatchRows": "0"}, "maxBatchRows='0'"),
        ({"group": "g", "key": "k", "maxBatchBytes": "9999999999"}, "maxBatchBytes='9999999999'"),
        ({"group": "g", "key": "k", "ackTimeout": "soon"}, "ackTimeout='soon'"),
        ({"group": "g", "key": "k", "ackTimeout": "0s"}, "ackTimeout='0s'"),
        ({"group": "g", "key": "k", "driverDir": " "}, "driverDir=' ' is empty"),
        ({"group": "g", "key": "k", "control": "aeron:udp?endpoint=x"}, "control='aeron:udp?endpoint=x'"),
        (
            {"channel": "aeron:ipc", "streamId": "1", "host": "10.0.0.2"},
            "host='10.0.0.2' applies only with option group",
        ),
        ({"group": "g", "key": "k", "index": "1"}, "index='1' does not apply to the sink"),
        ({}, "no target"),
    ],
)
def test_bad_sink_options_name_the_option_and_value(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(SparkOptionError) as raised:
        parse_sink_options(options)
    assert fragment in str(raised.value)
    assert isinstance(raised.value, affinity.ConfigError) and isinstance(raised.value, affinity.AffinityError)


def test_driver_dir_host_and_control_are_taken_as_given() -> None:
    control = "aeron:udp?endpoint=224.0.1.1:40456|interface=127.0.0.1"
    options = {"group": "g", "key": "k", "driverDir": "/tmp/d", "HOST": "10.0.0.2", "control": control}
    sink = parse_sink_options(options)
    assert (sink.driver_dir, sink.host, sink.control) == ("/tmp/d", "10.0.0.2", control)
    source = parse_source_options({"group": "g", "index": "0", "count": "1", "driverdir": "/tmp/d"})
    assert (source.driver_dir, source.host, source.control) == ("/tmp/d", None, None)
    channel = parse_sink_options({"channel": "aeron:ipc", "streamId": "1", "driverDir": "/tmp/d"})
    assert channel.driver_dir == "/tmp/d"


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"group": "g"}, "needs options index and count"),
        ({"group": "g", "index": "2", "count": "2"}, "index=2 must be less than count=2"),
        ({"channel": "aeron:ipc", "streamId": "1", "index": "0"}, "apply only with option group"),
        ({"channel": "aeron:ipc", "streamId": "1", "value": "json"}, "value='json'"),
        ({"channel": "aeron:ipc", "streamId": "1", "key": "k"}, "key='k' does not apply to the source"),
        ({"channel": "aeron:ipc", "streamId": "1", "failOnDataLoss": "maybe"}, "failOnDataLoss='maybe'"),
    ],
)
def test_bad_source_options_name_the_option_and_value(options: dict[str, str], fragment: str) -> None:
    with pytest.raises(SparkOptionError) as raised:
        parse_source_options(options)
    assert fragment in str(raised.value)


def test_source_defaults_to_binary_rows() -> None:
    options = parse_source_options({"channel": "aeron:ipc", "streamId": "9", "checkpointLocation": "/tmp/x"})
    assert options.value is ValueFormat.BINARY and options.fail_on_data_loss


# ---- envelope ---------------------------------------------------------------------------------


def test_envelope_round_trips_with_its_documented_layout() -> None:
    envelope = Envelope(Kind.DATA, ValueFormat.JSON, QUERY, 42, 3, 17, 9)
    message = encode(envelope, b"body")
    assert HEADER_LENGTH == 48 and len(message) == 52
    assert message[:4] == b"AFSK" and message[4] == 1 and message[5] == 0 and message[6] == 1
    assert message[8:24] == QUERY.bytes
    assert struct.unpack_from("<qIIQ", message, 24) == (42, 3, 17, 9)
    decoded, body = decode(message)
    assert decoded == envelope and bytes(body) == b"body"


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda m: m[:20], "shorter than the 48-byte"),
        (lambda m: b"XFSK" + m[4:], "magic"),
        (lambda m: m[:4] + b"\x02" + m[5:], "version 2"),
        (lambda m: m[:5] + b"\x07" + m[6:], "kind 7"),
        (lambda m: m[:6] + b"\x09" + m[7:], "format 9"),
        (lambda m: m[:7] + b"\x01" + m[8:], "flags"),
        (lambda m: m[:24] + struct.pack("<q", -1) + m[32:], "batch id -1"),
        (lambda m: m[:40] + struct.pack("<Q", 0) + m[48:], "sequence 0"),
        (lambda m: m[:5] + b"\x01" + m[6:], "commit marker has partition 3"),
    ],
)
def test_malformed_envelopes_are_refused_naming_the_field(mutate: object, fragment: str) -> None:
    message = encode(Envelope(Kind.DATA, ValueFormat.ARROW, QUERY, 1, 3, 1, 5), b"x")
    with pytest.raises(EnvelopeError, match=fragment):
        decode(mutate(message))  # type: ignore[operator]


@given(st.binary(max_size=200))
def test_arbitrary_bytes_either_decode_or_raise_envelope_error(raw: bytes) -> None:
    try:
        decode(raw)
    except EnvelopeError:
        pass


@given(st.binary(min_size=0, max_size=120))
def test_arbitrary_commit_bodies_either_decode_or_raise_envelope_error(raw: bytes) -> None:
    try:
        decode_commit_body(raw)
    except EnvelopeError:
        pass


def test_commit_body_round_trips_and_checks_its_length() -> None:
    body = encode_commit_body({2: 7, 0: 3})
    assert decode_commit_body(body) == {0: 3, 2: 7}
    with pytest.raises(EnvelopeError, match="does not hold 2 entries"):
        decode_commit_body(body[:-1])


# ---- keys and bodies --------------------------------------------------------------------------


def test_single_column_keys_are_the_plain_bytes_strings_and_decimal_integers() -> None:
    batch = pa.RecordBatch.from_pydict({"s": ["a", None, "é"], "i": [7, -12, None], "b": [b"\x00", b"", None]})
    assert key_array(batch, ["s"]).to_pylist() == [b"a", b"", "é".encode()]
    assert key_array(batch, ["i"]).to_pylist() == [b"7", b"-12", b""]
    assert key_array(batch, ["b"]).to_pylist() == [b"\x00", b"", b""]


def test_multi_column_keys_are_length_prefixed_and_unambiguous() -> None:
    batch = pa.RecordBatch.from_pydict({"a": ["ab", "a", None], "b": ["c", "bc", "c"]})
    keys = key_array(batch, ["a", "b"]).to_pylist()
    assert keys[0] == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert keys[1] == b"\x01\x00\x00\x00a\x02\x00\x00\x00bc"
    assert keys[2] == b"\xff\xff\xff\xff\x01\x00\x00\x00c"
    assert len(set(keys)) == 3


def test_split_by_queue_keeps_row_order_within_each_queue() -> None:
    batch = pa.RecordBatch.from_pydict({"n": list(range(8))})
    groups = split_by_queue(batch, [2, 0, 2, 1, 0, 2, 1, 0])
    assert [(q, rows.column("n").to_pylist()) for q, rows in groups] == [
        (0, [1, 4, 7]),
        (1, [3, 6]),
        (2, [0, 2, 5]),
    ]


def test_row_groups_respect_row_and_byte_caps() -> None:
    batch = pa.RecordBatch.from_pydict({"v": [b"x" * 100] * 1000})
    by_rows = list(row_groups(batch, 300, 1 << 20))
    assert [g.num_rows for g in by_rows] == [300, 300, 300, 100]
    by_bytes = list(row_groups(batch, 10_000, 10_000))
    assert sum(g.num_rows for g in by_bytes) == 1000 and all(g.nbytes <= 10_000 for g in by_bytes)


def test_bodies_round_trip_in_each_format() -> None:
    batch = pa.RecordBatch.from_pydict({"k": ["a", "b"], "n": [1, 2], "v": [b"\x01", b""]})
    assert decode_arrow(encode_body(batch, ValueFormat.ARROW)).equals(batch)
    assert decode_json(encode_body(batch, ValueFormat.JSON)) == [
        {"k": "a", "n": 1, "v": "AQ=="},
        {"k": "b", "n": 2, "v": ""},
    ]
    assert decode_binary(encode_body(batch, ValueFormat.BINARY, "v")) == [b"\x01", b""]


def test_truncated_bodies_raise_envelope_errors() -> None:
    with pytest.raises(EnvelopeError, match="runs past the end"):
        decode_binary(b"\x05\x00\x00\x00abc")
    with pytest.raises(EnvelopeError, match="arrow body"):
        decode_arrow(b"not arrow")
    with pytest.raises(EnvelopeError, match="line 2"):
        decode_json(b'{"a": 1}\n{oops')


# ---- deduplication ----------------------------------------------------------------------------


def test_a_retried_task_replaying_the_same_ids_is_discarded() -> None:
    dedup = Deduplicator()
    assert [dedup.admit(data(0, 1, s), 3) for s in (1, 2)] == ["deliver", "deliver"]
    # The retry sends 1..4: 1 and 2 were delivered already.
    assert [dedup.admit(data(0, 1, s), 3) for s in (1, 2, 3, 4)] == ["duplicate", "duplicate", "deliver", "deliver"]
    # The same ids on another queue or partition are other messages.
    assert dedup.admit(data(0, 1, 1), 4) == "deliver"
    assert dedup.admit(data(0, 2, 1), 3) == "deliver"


def test_data_of_a_committed_batch_is_a_replay_and_a_second_commit_is_dropped() -> None:
    dedup = Deduplicator()
    dedup.admit(data(5, 0, 1), 0)
    assert dedup.commit(marker(Kind.COMMIT, 5), 0, {0: 1}) is True
    assert dedup.admit(data(5, 0, 2), 0) == "replay"
    assert dedup.admit(data(4, 0, 9), 0) == "replay"
    assert dedup.commit(marker(Kind.COMMIT, 5), 0, {0: 1}) is None
    assert dedup.admit(data(6, 0, 1), 0) == "deliver"


def test_a_commit_reports_a_missing_message_as_incomplete() -> None:
    dedup = Deduplicator()
    dedup.admit(data(1, 0, 1), 0)
    assert dedup.commit(marker(Kind.COMMIT, 1), 0, {0: 2}) is False


def test_an_abort_lets_the_replayed_batch_through_again() -> None:
    dedup = Deduplicator()
    assert dedup.admit(data(2, 0, 1), 0) == "deliver"
    dedup.abort(marker(Kind.ABORT, 2), 0)
    assert dedup.admit(data(2, 0, 1), 0) == "deliver"
    other = uuid.uuid4()
    assert dedup.admit(data(2, 0, 1, other), 0) == "deliver"
    dedup.abort(marker(Kind.ABORT, 2, NIL_QUERY), 0)  # nil query: any query's batch 2
    assert dedup.admit(data(2, 0, 1, other), 0) == "deliver"
    assert dedup.admit(data(2, 0, 1), 0) == "deliver"


def test_arrow_bodies_carry_timestamp_columns_through_the_envelope() -> None:
    from affinity.demo.records import event_times_ns

    micros = [1_763_900_000_000_001, 1_763_900_000_250_000]
    # A Spark TimestampType column reaches the sink in the session's time zone.
    batch = pa.RecordBatch.from_arrays(
        [pa.array([1, 2]), pa.array(micros, type=pa.timestamp("us", tz="Europe/Paris"))],
        names=["account", "event_time"],
    )
    item = decode_message(encode(data(0, 0, 1), encode_body(batch, ValueFormat.ARROW)), queue=0)
    received = item.batch()  # type: ignore[union-attr]
    assert received.equals(batch)
    assert received.schema.field("event_time").type == pa.timestamp("us", tz="Europe/Paris")
    assert event_times_ns(received.column("event_time")) == [us * 1000 for us in micros]


def test_decode_message_gives_typed_items() -> None:
    batch = pa.RecordBatch.from_pydict({"n": [1, 2, 3]})
    item = decode_message(encode(data(0, 0, 1), encode_body(batch, ValueFormat.ARROW)), queue=2)
    assert item.queue == 2 and item.batch().equals(batch)  # type: ignore[union-attr]
    commit = decode_message(encode(marker(Kind.COMMIT, 0), encode_commit_body({0: 1})))
    assert commit.last_sequences == {0: 1}  # type: ignore[union-attr]


class FakeGroupConsumer:
    """What ``SinkConsumer`` reads of a ``GroupConsumer``: one poll's messages, then nothing."""

    def __init__(self, client: object, group: str, **options: object) -> None:
        self.batches: list[list[SimpleNamespace]] = []

    def poll(self, max_messages: int, timeout: float) -> list[SimpleNamespace]:
        return self.batches.pop(0) if self.batches else []

    def close(self) -> None:
        pass


def test_a_broken_commit_body_is_counted_and_the_rest_of_the_poll_is_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import affinity.groups
    from affinity.spark.consume import CommitItem, DataItem, SinkConsumer

    monkeypatch.setattr(affinity.groups, "GroupConsumer", FakeGroupConsumer)
    consumer = SinkConsumer("g", 0, 1, client=object())  # type: ignore[arg-type]
    body = encode_body(pa.RecordBatch.from_pydict({"n": [1]}), ValueFormat.ARROW)
    commit = marker(Kind.COMMIT, 0)
    broken = [
        encode(commit, b"\x01\x00\x00"),  # 3 bytes: no entry count
        encode(commit, struct.pack("<I", 2) + struct.pack("<IQ", 0, 1)),  # says 2 entries, holds 1
        encode(commit, struct.pack("<I", 2) + struct.pack("<IQ", 0, 1) * 2),  # partition 0 twice
    ]
    messages = [encode(data(0, 0, 1), body), *broken, encode(data(0, 0, 2), body)]
    fake = consumer._consumer
    assert isinstance(fake, FakeGroupConsumer)
    fake.batches.append([SimpleNamespace(payload=m, queue=0) for m in messages])
    fake.batches.append([SimpleNamespace(payload=encode(commit, encode_commit_body({0: 2})), queue=0)])
    items = consumer.poll()
    assert [type(i) for i in items] == [DataItem, DataItem]
    assert [i.sequence for i in items if isinstance(i, DataItem)] == [1, 2]
    assert consumer.stats.foreign == 3 and consumer.stats.data == 2 and consumer.stats.commits == 0
    # The broken markers committed nothing: the genuine one still does, complete.
    (committed,) = consumer.poll()
    assert isinstance(committed, CommitItem) and committed.complete and committed.last_sequences == {0: 2}


def test_docs_list_every_option() -> None:
    from pathlib import Path

    from affinity.spark.options import OPTIONS

    table = (Path(__file__).parent.parent / "docs" / "spark.md").read_text(encoding="utf-8")
    for spec in OPTIONS:
        assert f"| `{spec.name}` |" in table, spec.name


def test_every_spark_exception_derives_from_the_root() -> None:
    import affinity.spark.errors as errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), affinity.AffinityError), name


def test_a_value_json_cannot_encode_raises_an_envelope_error() -> None:
    batch = pa.RecordBatch.from_pydict({"when": pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval())})
    with pytest.raises(EnvelopeError, match="does not encode as JSON"):
        encode_body(batch, ValueFormat.JSON)
