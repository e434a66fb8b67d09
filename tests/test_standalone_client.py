"""``affinity.Client(dir=...)``: Python clients attached to a standalone driver process
(``affinity driver``) over ``aeron:ipc`` (and ``aeron:udp``), with publisher, subscriber and driver in separate
processes. A million messages in order through ``offer_batch``; kill -9 of the driver raises
``DriverTimeoutError``; data offered before a publisher process exits is still delivered.
Every wait is bounded by time."""

from __future__ import annotations

import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import affinity
import affinity.records
import pyarrow as pa
import pytest
from affinity.exceptions import ChannelUriError, ConfigError, DriverTimeoutError
from affinity.records import as_dict, fields
from affinity.testing import loopback_channel

CLI = [sys.executable, "-m", "affinity.cli"]
STREAM_ID = 1001
CHANNEL = "aeron:ipc"
MESSAGE_SIZE = 32
PROCESS_TIMEOUT_S = 120.0


def start_driver(directory: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*CLI, "driver", "--dir", str(directory), "--term-length", "1m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "ready in" in line, f"driver did not start: {line!r} {process.stderr.read() if process.stderr else ''}"
    return process


@pytest.fixture
def driver_dir(tmp_path: Path) -> Path:
    return tmp_path / "driver"


@pytest.fixture
def driver(driver_dir: Path) -> Iterator[subprocess.Popen[str]]:
    process = start_driver(driver_dir)
    yield process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    process.communicate(timeout=20)


# Shared by the child scripts: message i is i (8 bytes, little endian) padded to MESSAGE_SIZE.
CHILD_PRELUDE = f"""
import sys, time
import affinity
import pyarrow as pa
DIR, COUNT = sys.argv[1], int(sys.argv[2])
STREAM_ID, CHANNEL, SIZE = {STREAM_ID}, {CHANNEL!r}, {MESSAGE_SIZE}
DEADLINE = time.monotonic() + {PROCESS_TIMEOUT_S}
def message(i):
    return i.to_bytes(8, "little") + bytes(SIZE - 8)
"""

PUBLISHER = CHILD_PRELUDE + textwrap.dedent(
    """
    BATCH = 4096
    with affinity.Client(dir=DIR) as client:
        publication = client.add_publication(CHANNEL, STREAM_ID)
        while not publication.is_connected:
            assert time.monotonic() < DEADLINE, "no subscriber connected"
            time.sleep(0.001)
        sent = 0
        while sent < COUNT:
            assert time.monotonic() < DEADLINE, f"only {sent} of {COUNT} offered"
            end = min(sent + BATCH, COUNT)
            batch = pa.array([message(i) for i in range(sent, end)], type=pa.binary())
            taken = publication.offer_batch(batch)
            # A refused message ends the batch: the next batch starts with it.
            sent += taken
        publication.close()
    print("sent", sent, flush=True)
    """
)

SUBSCRIBER = CHILD_PRELUDE + textwrap.dedent(
    """
    with affinity.Client(dir=DIR) as client:
        subscription = client.add_subscription(CHANNEL, STREAM_ID)
        print("subscribed", flush=True)
        expected = 0
        while expected < COUNT:
            assert time.monotonic() < DEADLINE, f"only {expected} of {COUNT} received"
            for data in subscription.poll_batch(4096):
                if data != message(expected):
                    print("out of order at", expected, data.hex(), flush=True)
                    sys.exit(1)
                expected += 1
        subscription.close()
    print("received", expected, flush=True)
    """
)


def spawn(script: str, directory: Path, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, str(directory), str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def message(i: int) -> bytes:
    return i.to_bytes(8, "little") + bytes(MESSAGE_SIZE - 8)


def finish(process: subprocess.Popen[str]) -> str:
    try:
        out, err = process.communicate(timeout=PROCESS_TIMEOUT_S + 30)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    assert process.returncode == 0, f"exit {process.returncode}: {out} {err}"
    return out


def test_a_million_messages_offered_in_arrow_batches_arrive_in_order_between_processes(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    count = 1_000_000
    subscriber = spawn(SUBSCRIBER, driver_dir, count)
    assert subscriber.stdout is not None
    assert subscriber.stdout.readline().strip() == "subscribed"
    publisher = spawn(PUBLISHER, driver_dir, count)
    assert f"sent {count}" in finish(publisher)
    assert f"received {count}" in finish(subscriber)


def test_data_offered_before_the_publisher_process_exits_is_still_delivered(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    count = 5_000
    with affinity.Client(dir=str(driver_dir)) as client:
        subscription = client.add_subscription(CHANNEL, STREAM_ID)
        publisher = spawn(PUBLISHER, driver_dir, count)
        assert f"sent {count}" in finish(publisher)
        # The publisher process is gone before anything was read here.
        received: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(received) < count and time.monotonic() < deadline:
            received.extend(subscription.poll_batch(1000))
        assert received == [message(i) for i in range(count)]
        subscription.close()


def test_a_driver_killed_with_sigkill_makes_the_next_call_raise_driver_timeout_within_the_timeout(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    timeout_s = 1.0
    client = affinity.Client(dir=str(driver_dir), driver_timeout_ms=int(timeout_s * 1000))
    try:
        _kill_the_driver_under(client, driver, driver_dir, timeout_s)
    finally:
        client.close()


def _kill_the_driver_under(
    client: affinity.Client, driver: subprocess.Popen[str], driver_dir: Path, timeout_s: float
) -> None:
    subscription = client.add_subscription(CHANNEL, STREAM_ID)
    publication = client.add_publication(CHANNEL, STREAM_ID)
    # The driver links the subscriber in its own time: offers say NOT_CONNECTED until then.
    deadline = time.monotonic() + 20
    while not publication.is_connected:
        assert time.monotonic() < deadline, "the IPC publication never connected"
        time.sleep(0.001)
    assert publication.offer(message(0)) > 0
    received: list[bytes] = []
    while not received and time.monotonic() < deadline:
        received = subscription.poll_batch(10)
    assert received == [message(0)]
    driver.kill()
    driver.wait(timeout=10)
    killed = time.monotonic()
    raised = None
    while time.monotonic() - killed < timeout_s + 5:
        try:
            publication.offer(message(1))
            subscription.poll_batch(10)
        except DriverTimeoutError as error:
            raised = time.monotonic() - killed
            assert str(driver_dir) in str(error)
            break
        time.sleep(0.01)
    assert raised is not None, "no DriverTimeoutError after the driver was killed"
    # The heartbeat is checked every keepalive interval (100 ms): allow for that and scheduling.
    assert raised < timeout_s + 1.0
    with pytest.raises(DriverTimeoutError):
        subscription.poll_batch(10)
    publication.close()
    subscription.close()


def test_udp_through_the_standalone_driver_delivers_in_order_and_a_bad_uri_names_the_channel(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    channel = loopback_channel()
    count = 10_000
    with affinity.Client(dir=str(driver_dir)) as client:
        subscription = client.add_subscription(channel, STREAM_ID)
        publication = client.add_publication(channel, STREAM_ID)
        deadline = time.monotonic() + 20
        while not publication.is_connected:
            assert time.monotonic() < deadline, "the UDP publication never connected"
            time.sleep(0.001)
        sent = 0
        received: list[bytes] = []
        while len(received) < count and time.monotonic() < deadline:
            if sent < count and publication.offer(message(sent)) > 0:
                sent += 1
            received.extend(subscription.poll_batch(1000))
        assert received == [message(i) for i in range(count)]
        publication.close()
        subscription.close()
        bad = "aeron:udp?endpoint=nowhere"
        with pytest.raises(ChannelUriError) as raised:
            client.add_publication(bad, STREAM_ID)
        assert bad in str(raised.value)


def test_attached_client_reads_the_drivers_counters_and_has_no_duty_cycle_to_run(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    with affinity.Client(dir=str(driver_dir)) as client:
        assert client.threading == "standalone"
        counters = client.counters()
        values = as_dict(counters)
        assert set(values) == set(fields(affinity.records.DriverCounters)) and len(values) == 10
        assert all(isinstance(value, int) and value >= 0 for value in values.values())
        assert client.do_work() == 0
        assert client.events() == []
        publication = client.add_publication(CHANNEL, STREAM_ID)
        assert publication.channel == CHANNEL and publication.stream_id == STREAM_ID
        assert not publication.is_connected
        assert publication.offer(message(0)) == affinity.NOT_CONNECTED
        publication.close()
        assert publication.is_closed
    assert client.is_closed
    with pytest.raises(ConfigError, match="driver_timeout_ms"):
        affinity.Client(driver_timeout_ms=1000)
    with pytest.raises(ConfigError, match="term_length configures the embedded driver"):
        affinity.Client(dir=str(driver_dir), term_length=1 << 20)


def test_affinity_dir_in_the_environment_attaches_and_attach_takes_well_under_50_ms(
    driver: subprocess.Popen[str], driver_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AFFINITY_DIR", str(driver_dir))
    durations = []
    for _ in range(5):
        start = time.perf_counter()
        client = affinity.Client()
        durations.append(time.perf_counter() - start)
        assert client.threading == "standalone"
        client.close()
    assert statistics.median(durations) < 0.05, durations


def test_attaching_where_no_driver_runs_raises_driver_timeout(tmp_path: Path) -> None:
    with pytest.raises(DriverTimeoutError, match="no driver is running"):
        affinity.Client(dir=str(tmp_path / "nothing"))


def test_offer_batch_over_many_claims_keeps_order_fragments_and_frame_end_positions(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    # 2,500 messages: more than two batch claims (1,024 each), some longer than the MTU.
    messages = [i.to_bytes(4, "little") * (1 + (i % 7) * (500 if i % 50 == 0 else 3)) for i in range(2500)]
    with affinity.Client(dir=str(driver_dir)) as client:
        subscription = client.add_subscription(CHANNEL, STREAM_ID + 7)
        publication = client.add_publication(CHANNEL, STREAM_ID + 7)
        deadline = time.monotonic() + 10
        while not publication.is_connected:
            assert time.monotonic() < deadline, "no subscriber"
            time.sleep(0.001)
        taken = publication.offer_batch(messages[:1500])
        taken += publication.offer_batch(pa.array(messages[taken:], type=pa.binary()))
        assert taken == len(messages)
        received: list[bytes] = []
        ends: list[int] = []

        def on_message(data: bytes, header: affinity.Header) -> None:
            received.append(data)
            ends.append(header.position)

        deadline = time.monotonic() + 10
        while len(received) < len(messages) and time.monotonic() < deadline:
            subscription.poll(on_message, 1000)
        position = publication.position
        publication.close()
        subscription.close()
    assert received == messages
    # A header's position is the end of its last frame: the stream position after it.
    assert ends[-1] == position
    assert ends == sorted(ends) and len(set(ends)) == len(ends)
    assert all(end % 32 == 0 for end in ends)
