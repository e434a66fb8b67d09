"""The consumer-group bindings convert keys and payloads safely: lists and pyarrow arrays agree,
and no offsets buffer, however hostile, gets past validation (it raises InvalidArgumentError)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import affinity
import affinity._affinity as compiled
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

VECTORS = Path(__file__).parent / "vectors" / "group_hash.json"


class FakeArray:
    """Quacks like a pyarrow binary array whose buffers are given verbatim (pyarrow itself
    refuses to build invalid arrays, so hostile input needs a stand-in)."""

    def __init__(self, type_name: str, length: int, offsets: bytes, data: bytes | None, offset: int = 0) -> None:
        self.type = type_name
        self.offset = offset
        self.null_count = 0
        self._length = length
        self._offsets = pa.py_buffer(offsets)
        self._data = None if data is None else pa.py_buffer(data)

    def __len__(self) -> int:
        return self._length

    def buffers(self) -> list[object]:
        return [None, self._offsets, self._data]


def test_group_hash_vectors_match_the_bindings() -> None:
    cases = json.loads(VECTORS.read_text())["cases"]
    for case in cases:
        if "key_repeat" in case:
            key = (case["key_repeat"]["text"] * case["key_repeat"]["count"]).encode()
        else:
            key = bytes.fromhex(case["key_hex"])
        for bucket in case["buckets"]:
            assert compiled.group_bucket(key, bucket["hash_count"]) == bucket["bucket"]
            for queue in bucket["queues"]:
                assert compiled.group_queue(key, bucket["hash_count"], queue["queue_count"]) == queue["queue"]
        if "key" in case:
            assert compiled.group_bucket(case["key"], 64) == compiled.group_bucket(key, 64)


def test_lists_and_every_arrow_string_type_agree() -> None:
    keys = ["", "a", "order-17", "日本語", "x" * 300]
    expected = [compiled.group_queue(key, 64, 8) for key in keys]
    assert compiled.group_queues(keys, 64, 8) == expected
    assert compiled.group_queues([key.encode() for key in keys], 64, 8) == expected
    for arrow_type in (pa.string(), pa.large_string()):
        assert compiled.group_queues(pa.array(keys, type=arrow_type), 64, 8) == expected
    for arrow_type in (pa.binary(), pa.large_binary()):
        array = pa.array([key.encode() for key in keys], type=arrow_type)
        assert compiled.group_queues(array, 64, 8) == expected
        assert compiled.group_queues(array.slice(1, 3), 64, 8) == expected[1:4]


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (FakeArray("binary", 1, struct.pack("<2i", 0, 1000), b"abc"), "beyond the data buffer"),
        (FakeArray("binary", 2, struct.pack("<3i", 3, 1, 2), b"abc"), "not monotonic"),
        (FakeArray("large_binary", 1, struct.pack("<2q", -5, 0), None), "negative"),
        (FakeArray("binary", 5, b"\0" * 8, None), "shorter than the array"),
        (FakeArray("binary", 1, b"\0" * 8, None, offset=2**62), "overflow"),
    ],
)
def test_hostile_arrow_offsets_raise_invalid_argument(array: FakeArray, message: str) -> None:
    with pytest.raises(affinity.InvalidArgumentError, match=message):
        compiled.group_queues(array, 64, 8)


def test_wrong_types_raise_argument_type_error() -> None:
    with pytest.raises(affinity.ArgumentTypeError, match="expected a pyarrow"):
        compiled.group_queues(FakeArray("int32", 1, b"", None), 64, 8)
    with pytest.raises(affinity.ArgumentTypeError, match="expected a sequence"):
        compiled.group_queues(b"not a list", 64, 8)
    with pytest.raises(affinity.ArgumentTypeError, match="bytes-like"):
        compiled.group_queues([1, 2], 64, 8)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["binary", "large_binary", "string", "large_string"]),
    st.integers(0, 6),
    st.binary(max_size=64),
    st.one_of(st.none(), st.binary(max_size=16)),
    st.integers(0, 4),
)
def test_arbitrary_offsets_buffers_never_crash(
    type_name: str, length: int, offsets: bytes, data: bytes | None, offset: int
) -> None:
    array = FakeArray(type_name, length, offsets, data, offset)
    try:
        queues = compiled.group_queues(array, 64, 8)
    except affinity.InvalidArgumentError:
        return
    assert len(queues) == length
    assert all(0 <= queue < 8 for queue in queues)


def test_bad_definitions_raise_config_error() -> None:
    with pytest.raises(affinity.ConfigError, match="HC >= QC"):
        compiled.group_queue(b"k", 4, 8)
    with pytest.raises(affinity.ConfigError, match="at least 1"):
        compiled.group_queues([b"k"], 4, 0)


def test_hostile_control_datagrams_are_counted_by_a_consumer(tmp_path: Path) -> None:
    with affinity.Client() as client:
        consumer = compiled.GroupConsumerCore(client, "orders", "hp", 8, 2, 1 << 20, 0, 1, registry_dir=str(tmp_path))
        try:
            member = json.loads(next((tmp_path / "members" / "orders").glob("*.json")).read_text())
            channel = f"aeron:udp?endpoint={member['endpoint']}"
            attacker = client.add_publication(channel, compiled.GROUP_CONTROL_STREAM_ID)
            deadline = time.monotonic() + 5
            while not attacker.is_connected:
                assert time.monotonic() < deadline
                time.sleep(0.001)
            for garbage in (b"", b"\x01\x01", b"\x07" * 40, b"\x01\x02" + b"\xff" * 60):
                assert attacker.offer(garbage) > 0
            while consumer.counters().control_malformed < 4:
                assert time.monotonic() < deadline, "hostile datagrams were not counted"
                time.sleep(0.01)
            assert consumer.counters().delivered == 0
        finally:
            consumer.close(1.0)


def test_poll_batch_returns_the_records_as_arrow_columns_and_ack_record_acknowledges(tmp_path: Path) -> None:
    from affinity.groups import GroupConsumer, GroupPublisher, create_group

    create_group("orders", "orders", hash_count=8, queue_count=2, queue_size=1 << 20, registry=tmp_path)
    fast = {"liveness_timeout": 0.5, "heartbeat_interval": 0.05}
    with affinity.Client() as client:
        consumer = GroupConsumer(client, "orders", 0, 1, registry=tmp_path, **fast)
        publisher = GroupPublisher(client, "orders", registry=tmp_path, **fast)
        try:
            deadline = time.monotonic() + 20
            while publisher.publish(b"key-0", b"payload-0", "topic-0") < 0:
                assert time.monotonic() < deadline, "the publisher never saw the consumer"
                time.sleep(0.02)
            count = 300
            for index in range(1, count):
                subject = f"topic-{index}" if index % 3 == 0 else None
                assert publisher.publish(f"key-{index}".encode(), f"payload-{index}".encode(), subject) > 0
            rows: list[dict[str, object]] = []
            while len(rows) < count:
                assert time.monotonic() < deadline, f"{len(rows)} of {count} records arrived"
                batch = consumer.poll_batch(64, 0.05)
                assert batch.schema.names == [
                    "key",
                    "payload",
                    "queue",
                    "bucket",
                    "producer",
                    "sequence",
                    "epoch",
                    "subject",
                ]  # type: ignore[attr-defined]
                assert len(batch) <= 64
                rows.extend(batch.to_pylist())
            assert len(rows) == count
            assert not publisher.flush(0.3), "acknowledged before any ack_record"
            last: dict[tuple[int, int], dict[str, object]] = {}
            for row in rows:
                index = int(bytes(row["key"]).decode().split("-")[1])  # type: ignore[arg-type]
                assert row["payload"] == f"payload-{index}".encode()
                # A subject travels as HP/bucket/topic.
                assert row["subject"] == (f"orders/{row['bucket']}/topic-{index}" if index % 3 == 0 else None)
                assert row["queue"] == compiled.group_queue(row["key"], 8, 2)  # type: ignore[arg-type]
                assert row["producer"] == publisher.producer_id
                queue = int(row["queue"])  # type: ignore[call-overload]
                previous = last.get((queue, publisher.producer_id))
                assert row["sequence"] == (int(previous["sequence"]) + 1 if previous else 1)  # type: ignore[call-overload]
                last[(queue, publisher.producer_id)] = row
            for row in last.values():
                consumer.ack_record(row["queue"], row["producer"], row["sequence"], row["epoch"])  # type: ignore[arg-type]
            assert publisher.flush(10.0), "ack_record did not acknowledge"
            with pytest.raises(affinity.InvalidArgumentError, match="producer"):
                consumer.ack_record(0, -1, 1, 1)
        finally:
            publisher.close()
            consumer.close(1.0)
