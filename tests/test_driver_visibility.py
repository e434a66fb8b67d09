"""Driver events, counters, and malformed input through the Python API, each test run with an
embedded and with a standalone driver (conftest.py, ``driver_kind``). A standalone driver's
counters are shared by the module's tests: tests compare counters before and after."""

from __future__ import annotations

import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time

import affinity
import affinity.records
import pytest
from affinity.records import fields
from affinity.testing import LossyRelay, free_udp_port
from conftest import ClientFactory

pytestmark = pytest.mark.both_drivers


def wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.005)


SUBSCRIBER_PROCESS = """
import sys, time
import affinity
client = affinity.Client()
subscription = client.add_subscription(sys.argv[1], 3)
print("ready", flush=True)
time.sleep(60)
"""


def test_receiver_join_and_timeout_are_events_logged_at_info(
    new_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_udp_port()
    caplog.set_level(logging.INFO, logger="affinity.driver")
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    # The subscriber runs an embedded driver of its own in both cases: what is watched is the
    # publisher's driver (embedded here, or the standalone one).
    subscriber_env = {key: value for key, value in os.environ.items() if key != "AFFINITY_DIR"}
    with new_client() as publisher_side:
        # The subscriber is a process of its own, so it can die without a word (SIGKILL: no EOS).
        subscriber = subprocess.Popen(
            [sys.executable, "-c", SUBSCRIBER_PROCESS, f"{channel}|gtag=7"],
            stdout=subprocess.PIPE,
            text=True,
            env=subscriber_env,
        )
        try:
            assert subscriber.stdout is not None and subscriber.stdout.readline().strip() == "ready"
            pub = publisher_side.add_publication(f"{channel}|fc=tagged,g:7/1,t:300ms", 3)
            wait_for(lambda: pub.is_connected)
            counters = pub.counters()
            assert counters.strategy == "tagged" and counters.group_tag == 7
            assert counters.group_min_size == 1 and counters.receiver_timeout_ms == 300
            assert [r.group_tag for r in counters.receivers] == [7]
            events: list[affinity.records.DriverEventInfo] = []

            def has_event(kind: str) -> bool:
                events.extend(publisher_side.events())
                return any(e.kind == kind for e in events)

            wait_for(lambda: has_event("receiver_joined"))
            joined = next(e for e in events if e.kind == "receiver_joined")
            assert joined.group_tag == 7 and joined.stream_id == 3
            os.kill(subscriber.pid, signal.SIGKILL)
            subscriber.wait(timeout=10)
            wait_for(lambda: has_event("receiver_removed"))
            removed = next(e for e in events if e.kind == "receiver_removed")
            assert removed.receiver_id == joined.receiver_id
            # Killed: its status messages just stop. Only a timeout can have removed it.
            assert removed.reason == "timeout"
            wait_for(lambda: not pub.is_connected)
        finally:
            subscriber.kill()
            subscriber.wait(timeout=10)
            if subscriber.stdout is not None:
                subscriber.stdout.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "affinity.driver"]
    assert any(line.startswith("receiver joined: receiver_id=") and "group_tag=7" in line for line in lines)
    assert any(line.startswith("receiver removed (timeout)") for line in lines), lines


def malformed_datagrams(rng: random.Random) -> list[bytes]:
    """Datagrams every one of which the receiver must count as malformed."""
    crafted = [
        b"",
        b"\x01",
        bytes(7),
        b"\x20\x00\x00\x00\x01\xc0\x01\x00" + bytes(8),  # DATA header cut short
        b"\x28\x00\x00\x00\x00\x00\x05\x00" + bytes(10),  # SETUP cut short
        b"\x24\x00\x00\x00\x07\x00\x03\x00" + bytes(28),  # version 7
    ]
    randoms = []
    for _ in range(300):
        datagram = bytearray(rng.randbytes(rng.randint(8, 200)))
        datagram[4] = rng.randint(1, 255)  # any version but 0: never a valid frame
        randoms.append(bytes(datagram))
    return crafted + randoms


def driver_counters(client: affinity.Client) -> dict[str, int]:
    """Every driver counter's value now."""
    counters = client.counters()
    return {name: getattr(counters, name) for name in fields(type(counters))}


def counter_growth(client: affinity.Client, before: dict[str, int]) -> dict[str, int]:
    """How much each driver counter grew since ``before``."""
    now = client.counters()
    return {name: getattr(now, name) - value for name, value in before.items()}


def test_garbage_datagrams_are_counted_exactly_and_dropped_without_disturbing_the_stream(
    new_client: ClientFactory,
) -> None:
    port = free_udp_port()
    rng = random.Random(3)
    with new_client() as client:
        sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 8)
        pub = client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}", 8)
        wait_for(lambda: pub.is_connected)
        before = driver_counters(client)
        garbage = malformed_datagrams(rng)
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
        wait_for(lambda: counter_growth(client, before)["invalid_data_frames"] >= len(garbage))
        time.sleep(0.2)
        counters = counter_growth(client, before)
        assert counters["invalid_data_frames"] == len(garbage), counters
        (image,) = sub.images()
        assert image.malformed == 0, "garbage without a valid header never reaches an image"
        assert counters["duplicate_data_frames"] == image.duplicates == 0, counters
        assert counters["overrun_data_frames"] == image.overruns == 0, counters


def test_duplicates_are_counted_as_duplicates_not_as_malformed(new_client: ClientFactory) -> None:
    port = free_udp_port()
    with new_client() as client:
        before = driver_counters(client)
        sub = client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 9)
        relay = LossyRelay(f"127.0.0.1:{port}", duplicate=0.2, seed=11)
        try:
            pub = client.add_publication(f"aeron:udp?endpoint={relay.address}", 9)
            wait_for(lambda: pub.is_connected)
            received: list[bytes] = []
            deadline = time.monotonic() + 20
            for index in range(2000):
                while pub.offer(b"d%d" % index) < 0:
                    assert time.monotonic() < deadline
                    received.extend(sub.poll_batch(100))
            while len(received) < 2000 and time.monotonic() < deadline:
                received.extend(sub.poll_batch(100))
            assert received == [b"d%d" % i for i in range(2000)]
            assert relay.stats().duplicated > 0
            # Then a known number of malformed datagrams straight at the subscription.
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
                for datagram in malformed_datagrams(random.Random(5))[:40]:
                    attacker.sendto(datagram, ("127.0.0.1", port))
            wait_for(lambda: counter_growth(client, before)["invalid_data_frames"] >= 40)
            time.sleep(0.2)
            counters = counter_growth(client, before)
            (image,) = sub.images()
            assert counters["invalid_data_frames"] == 40, counters
            assert image.malformed == 0
            assert image.duplicates > 0, image
            assert counters["duplicate_data_frames"] == image.duplicates, (counters, image)
            assert counters["overrun_data_frames"] == image.overruns, (counters, image)
            assert counters["inactive_image_frames"] == 0, counters
        finally:
            relay.close()
