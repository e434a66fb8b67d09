"""What ``affinity stat`` shows of a standalone driver at work: the per-stream counters of a UDP
stream (publisher, sender, flow control, receiver, subscriber), the datagram and heartbeat
system counters, a client killed with SIGKILL reclaimed at the default client timeout as
``affinity stat --json`` shows it, and every idle strategy moving data. Real processes; every
wait is bounded by time."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import affinity
import affinity.defaults
import pytest
from affinity.driver import DriverStat
from affinity.testing import loopback_channel
from conftest import StandaloneDriver, start_standalone_driver, stop_standalone_driver

CLI = [sys.executable, "-m", "affinity.cli"]
#: The driver's default client liveness timeout (`affinity driver --client-timeout`).
DEFAULT_CLIENT_TIMEOUT_S = affinity.defaults.CLIENT_TIMEOUT_MS / 1000
#: How long past the client timeout the reclaim may take: one conductor check and a stat refresh.
RECLAIM_SLACK_S = 2.5
WAIT_S = 30.0


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[StandaloneDriver]:
    driver = start_standalone_driver(tmp_path / "driver", "--term-length", "1m")
    try:
        yield driver
    finally:
        stop_standalone_driver(driver)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def stream_counters(stat: DriverStat, prefix: str) -> list[int]:
    """Values of the counters whose label starts with ``prefix`` (``"rcv-pos:"``, ...)."""
    return [counter.value for counter in stat.counters if counter.label.startswith(prefix)]


def system_counter(stat: DriverStat, label: str) -> int:
    (value,) = [counter.value for counter in stat.counters if counter.label == label]
    return value


STREAM_PREFIXES = ("pub-lmt:", "pub-pos:", "snd-pos:", "snd-lmt:", "fc-receivers:", "rcv-pos:", "rcv-hwm:", "sub-pos:")


def test_a_udp_stream_shows_every_per_stream_counter_and_they_go_with_it(driver: StandaloneDriver) -> None:
    channel = loopback_channel() + "|fc=min"
    messages = 5_000
    with driver.client() as client:
        before = affinity.driver_stat(str(driver.dir))
        publication = client.add_publication(channel, 42)
        subscription = client.add_subscription(channel, 42)
        wait_for(lambda: publication.is_connected, "the publication to connect")
        sent = 0
        received = 0
        deadline = time.monotonic() + WAIT_S
        while received < messages:
            assert time.monotonic() < deadline, f"{received} of {messages} received"
            if sent < messages and publication.offer(sent.to_bytes(8, "little") + bytes(56)) > 0:
                sent += 1
            for data in subscription.poll_batch(1000):
                assert int.from_bytes(data[:8], "little") == received
                received += 1
        end = publication.position
        # The counters are written by the driver's duty cycle: wait until they all reach the end.
        positions = ("pub-pos:", "snd-pos:", "rcv-pos:", "rcv-hwm:", "sub-pos:")

        def settled() -> bool:
            stat = affinity.driver_stat(str(driver.dir))
            return all(stream_counters(stat, prefix) == [end] for prefix in positions)

        wait_for(settled, f"every position counter at {end}")
        stat = affinity.driver_stat(str(driver.dir))
        for prefix in STREAM_PREFIXES:
            assert len(stream_counters(stat, prefix)) == 1, f"{prefix} {[c.label for c in stat.counters]}"
        (sender_limit,) = stream_counters(stat, "snd-lmt:")
        assert sender_limit >= end, "flow control lets the sender reach what it sent"
        assert stream_counters(stat, "fc-receivers:") == [1], "fc=min tracks the one receiver"
        (publisher_limit,) = stream_counters(stat, "pub-lmt:")
        assert publisher_limit > end, "a connected publication may append past what was sent"
        sent_datagrams = system_counter(stat, "Datagrams sent") - system_counter(before, "Datagrams sent")
        received_datagrams = system_counter(stat, "Datagrams received") - system_counter(before, "Datagrams received")
        # 64-byte messages, 96-byte frames: at most 14 to a 1,408-byte datagram, at least one SETUP.
        assert messages // 14 <= sent_datagrams and messages // 14 <= received_datagrams
        assert received_datagrams <= sent_datagrams, "loopback delivers no datagram twice"
        # An idle publication heartbeats; its image counts them.
        wait_for(
            lambda: (
                system_counter(affinity.driver_stat(str(driver.dir)), "Heartbeats received")
                > system_counter(before, "Heartbeats received")
            ),
            "a heartbeat received",
        )
        publication.close()
        subscription.close()

        def gone() -> bool:
            stat = affinity.driver_stat(str(driver.dir))
            return not any(stream_counters(stat, prefix) for prefix in STREAM_PREFIXES)

        wait_for(gone, "the stream's counters to be freed")


HOLDER = textwrap.dedent(
    """
    import sys, time
    import affinity
    client = affinity.Client(dir=sys.argv[1])
    publication = client.add_publication("aeron:ipc", 5)
    subscription = client.add_subscription(sys.argv[2], 6)
    print("ready", flush=True)
    time.sleep(120)
    """
)


def test_a_client_killed_with_sigkill_is_reclaimed_at_the_default_client_timeout_as_stat_json_shows(
    driver: StandaloneDriver,
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(driver.dir), loopback_channel()],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready", holder.stderr.read() if holder.stderr else ""
        watch = subprocess.Popen(
            [*CLI, "stat", "--dir", str(driver.dir), "--json", "--watch", "100ms", "--count", "200"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert watch.stdout is not None

        def snapshot() -> dict[str, object]:
            line = watch.stdout.readline() if watch.stdout else ""
            assert line, f"affinity stat --json ended: {watch.stderr.read() if watch.stderr else ''}"
            parsed: dict[str, object] = json.loads(line)
            return parsed

        def system(snap: dict[str, object]) -> dict[str, int]:
            counters = snap["counters"]
            assert isinstance(counters, list)
            return {c["label"]: c["value"] for c in counters if c["type_id"] == 0}

        def owned(snap: dict[str, object]) -> list[str]:
            counters = snap["counters"]
            assert isinstance(counters, list)
            return [c["label"] for c in counters if c["owner_id"] != 0]

        first = snapshot()
        assert system(first)["Clients"] == 1 and system(first)["IPC publications"] == 1
        assert system(first)["Subscriptions"] == 1
        labels = owned(first)
        assert any(label.startswith("pub-lmt:") for label in labels), labels
        assert any(label.startswith("client-heartbeat") for label in labels), labels
        timeouts_before = system(first)["Client timeouts"]
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        killed = time.monotonic()
        while True:
            snap = snapshot()
            counts = system(snap)
            if counts["Clients"] == 0:
                break
            assert time.monotonic() - killed < DEFAULT_CLIENT_TIMEOUT_S + RECLAIM_SLACK_S, "client not reclaimed"
        reclaimed_after = time.monotonic() - killed
        watch.kill()
        watch.communicate(timeout=10)
        # Not before the client timeout (its last keepalive is at most 100 ms before the kill).
        assert reclaimed_after >= DEFAULT_CLIENT_TIMEOUT_S - 0.5, f"reclaimed after {reclaimed_after:.2f} s"
        assert counts["Client timeouts"] == timeouts_before + 1
        assert counts["IPC publications"] == 0 and counts["Subscriptions"] == 0
        assert owned(snap) == [], "every counter the client owned is freed"
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate(timeout=10)


@pytest.mark.parametrize("idle", ["spin", "yield", "backoff"])
def test_every_idle_strategy_moves_udp_data_in_order(tmp_path: Path, idle: str) -> None:
    driver = start_standalone_driver(tmp_path / "driver", "--term-length", "1m", "--idle", idle)
    try:
        channel = loopback_channel()
        messages = 20_000
        with driver.client() as client:
            publication = client.add_publication(channel, 7)
            subscription = client.add_subscription(channel, 7)
            wait_for(lambda: publication.is_connected, "the publication to connect")
            sent = received = 0
            deadline = time.monotonic() + WAIT_S
            while received < messages:
                assert time.monotonic() < deadline, f"{received} of {messages} received with --idle {idle}"
                if sent < messages:
                    sent += publication.offer_batch(
                        [i.to_bytes(8, "little") for i in range(sent, min(sent + 256, messages))]
                    )
                for data in subscription.poll_batch(1000):
                    assert int.from_bytes(data, "little") == received
                    received += 1
    finally:
        stop_standalone_driver(driver)
