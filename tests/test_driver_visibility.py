"""Driver events, counters, and malformed input through the Python API."""

from __future__ import annotations

import logging
import random
import socket
import time

import affinity
import pytest
from affinity.testing import free_udp_port


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.005)


def test_receiver_join_and_timeout_are_events_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    port = free_udp_port()
    caplog.set_level(logging.INFO, logger="affinity.driver")
    with affinity.Client() as publisher_side, affinity.Client() as subscriber_side:
        sub = subscriber_side.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}|gtag=7", 3)
        pub = publisher_side.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}|fc=tagged,g:7/1,t:300ms", 3)
        wait_for(lambda: pub.is_connected)
        counters = pub.counters()
        assert counters["strategy"] == "tagged" and counters["group_tag"] == 7
        assert counters["group_min_size"] == 1 and counters["receiver_timeout_ms"] == 300
        assert [r["group_tag"] for r in counters["receivers"]] == [7]
        events: list[dict[str, object]] = []
        wait_for(lambda: events.extend(publisher_side.events()) or any(e["kind"] == "receiver_joined" for e in events))
        joined = next(e for e in events if e["kind"] == "receiver_joined")
        assert joined["group_tag"] == 7 and joined["stream_id"] == 3
        # The subscriber's process "dies": no EOS, its status messages just stop.
        subscriber_side.close()
        del sub
        wait_for(lambda: events.extend(publisher_side.events()) or any(e["kind"] == "receiver_removed" for e in events))
        removed = next(e for e in events if e["kind"] == "receiver_removed")
        assert removed["receiver_id"] == joined["receiver_id"]
        assert removed["reason"] in {"timeout", "end of stream"}
        wait_for(lambda: not pub.is_connected)
    lines = [r.getMessage() for r in caplog.records if r.name == "affinity.driver"]
    assert any(line.startswith("receiver joined: receiver_id=") and "group_tag=7" in line for line in lines)
    assert any(line.startswith("receiver removed (") for line in lines)


def test_garbage_datagrams_are_counted_and_dropped_without_disturbing_the_stream() -> None:
    port = free_udp_port()
    rng = random.Random(3)
    with affinity.Client() as client:
        sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 8)
        pub = client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", 8)
        wait_for(lambda: pub.is_connected)
        garbage = [
            b"",
            b"\x01",
            bytes(7),
            b"\x20\x00\x00\x00\x01\xc0\x01\x00" + bytes(8),  # DATA header cut short
            b"\x28\x00\x00\x00\x00\x00\x05\x00" + bytes(10),  # SETUP cut short
            b"\x24\x00\x00\x00\x07\x00\x03\x00" + bytes(28),  # version 7
        ] + [rng.randbytes(rng.randint(1, 200)) for _ in range(300)]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
            received: list[bytes] = []
            for index, datagram in enumerate(garbage):
                attacker.sendto(datagram, ("127.0.0.1", port))
                while pub.offer(b"m%d" % index) < 0:
                    received.extend(sub.poll_batch(100))
            deadline = time.monotonic() + 10
            while len(received) < len(garbage) and time.monotonic() < deadline:
                received.extend(sub.poll_batch(100))
        assert received == [b"m%d" % i for i in range(len(garbage))]
        wait_for(lambda: client.counters()["invalid_data_frames"] >= 5)
