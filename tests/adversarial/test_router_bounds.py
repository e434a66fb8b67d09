"""A real ``affinity router`` against hostile subscribers built from the documented subject
record layout (docs/subjects.md): forged subscribers with unreachable reply inboxes stay within
the router's backlog budget, a subject subscribed 2,000 times by one subscriber is relayed once,
and a burst of SUBSCRIBEs past the router's bound is refused with a report, not dropped."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import affinity
import pytest
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port, loopback_channel

#: The router's DATA stream (docs/subjects.md, control-plane.md).
DATA_STREAM = 0x41464402
#: The record header: version, kind, flags, subject length, reserved, payload length,
#: reserved, sender (little-endian, 24 bytes).
HEADER = struct.Struct("<BBHHHIIQ")
SUBSCRIBE, DATA = 1, 5
FLAG_STATUS, FLAG_REFUSED = 0x10, 0x20
#: The router's bound on subscribers (`subjects::router::MAX_SUBSCRIBERS`).
MAX_SUBSCRIBERS = 65_536
TIMEOUT = 20.0
#: Records packed per forged transport message.
PACK = 100
SERVICES = """\
add-data-service
    service-name prices
    include-pattern "^/PRICES/"
    add-source-group
        add-priority
            remote-label PriceFeed
        end-priority
    end-source-group
end-data-service
"""


def record(kind: int, sender: int, subject: str, payload: bytes = b"", flags: int = 0) -> bytes:
    """One subject record, laid out as docs/subjects.md documents it."""
    name = subject.encode()
    return HEADER.pack(1, kind, flags, len(name), 0, len(payload), 0, sender) + name + payload


def parse(message: bytes) -> list[tuple[int, int, str, bytes]]:
    """The records of one transport message: (kind, flags, subject, payload)."""
    records, offset = [], 0
    while offset + HEADER.size <= len(message):
        _, kind, flags, subject_length, _, payload_length, _, _ = HEADER.unpack_from(message, offset)
        start = offset + HEADER.size
        subject = message[start : start + subject_length].decode()
        payload = message[start + subject_length : start + subject_length + payload_length]
        records.append((kind, flags, subject, payload))
        offset = start + subject_length + payload_length
    return records


def subscribe_record(sender: int, subject: str, inbox: str) -> bytes:
    return record(SUBSCRIBE, sender, subject, f"{inbox}\nforged{sender}".encode())


class Router:
    """``affinity router`` as a child process; its output lines are collected by a thread."""

    def __init__(self, config: Path, listen: str, *options: str) -> None:
        args = [sys.executable, "-m", "affinity.cli", "router", "--config", str(config), "--listen", listen, *options]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.popen = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self.wait_for(lambda lines: any("listening on" in line for line in lines), "router start")

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_for(self, predicate: Callable[[list[str]], bool], what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and self.popen.poll() is None:
            if predicate(self.snapshot()):
                return
            time.sleep(0.02)
        raise AssertionError(f"{what}: not seen; output:\n" + "\n".join(self.snapshot()[-30:]))

    def memory_kib(self, field: str) -> int:
        """A field of the router process's ``/proc/<pid>/status`` (``VmRSS``, ``RssAnon``), in KiB."""
        for line in Path(f"/proc/{self.popen.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"{field} not in /proc/{self.popen.pid}/status")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        self._thread.join(timeout=5)
        if self.popen.stdout is not None:
            self.popen.stdout.close()


@pytest.fixture
def services(tmp_path: Path) -> Path:
    path = tmp_path / "services.conf"
    path.write_text(SERVICES)
    return path


@pytest.fixture
def routers() -> Iterator[list[Router]]:
    started: list[Router] = []
    yield started
    for router in started:
        router.stop()


@pytest.fixture
def handles() -> Iterator[list[affinity.Publication | affinity.Subscription | Source]]:
    """Publications, subscriptions and sources the test opens, closed after it."""
    opened: list[affinity.Publication | affinity.Subscription | Source] = []
    yield opened
    for handle in reversed(opened):
        handle.close()


def connected(publication: affinity.Publication) -> affinity.Publication:
    deadline = time.monotonic() + TIMEOUT
    while not publication.is_connected:
        assert time.monotonic() < deadline, "the router's listen channel never connected"
        time.sleep(0.01)
    return publication


def send_all(publication: affinity.Publication, records: list[bytes]) -> None:
    """Packs `records` PACK to a message and offers each until accepted (bounded)."""
    deadline = time.monotonic() + TIMEOUT
    for start in range(0, len(records), PACK):
        message = b"".join(records[start : start + PACK])
        while publication.offer(message) < 0:
            assert time.monotonic() < deadline, "the router never accepted the forged records"
            time.sleep(0.001)


def feed(client: affinity.Client, listen: str, router: Router) -> tuple[Source, set[str]]:
    """The PriceFeed source, serving whatever the router requests; the subjects requested."""
    source = Source(client, listen, "PriceFeed", heartbeat_interval=0.05)
    requested: set[str] = set()
    source.on_request(requested.add)
    router.wait_for(lambda lines: any("Source PriceFeed" in line and "is up" in line for line in lines), "feed up")
    return source, requested


def wait_requested(source: Source, requested: set[str], subject: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while subject not in requested:
        assert time.monotonic() < deadline, f"{subject} never requested"
        source.poll(100)
        time.sleep(0.005)


def test_forged_subscribers_with_unreachable_inboxes_stay_within_the_backlog_budget(
    client: affinity.Client, services: Path, routers: list[Router], handles: list[Any]
) -> None:
    # Backlogs are heap memory: the router's anonymous RSS may grow by the budget plus slack
    # (per-destination buffers of one poll, allocator). Its log buffers (shared memory of a
    # fixed size per publication and image, term-length 1m / 16m) are not backlogs.
    budget_mib, slack_mib = 16, 32
    listen = loopback_channel()
    router = Router(services, listen, "--backlog-budget", f"{budget_mib}M", "--liveness-timeout", "30")
    routers.append(router)
    source, requested = feed(client, listen, router)
    handles.append(source)
    forged = connected(client.add_publication(listen, DATA_STREAM))
    handles.append(forged)
    # 48 forged subscribers whose reply inboxes nobody reads (free ports, nothing bound).
    subscribes = [subscribe_record(9_000 + i, "/PRICES/hot", f"127.0.0.1:{free_udp_port()}") for i in range(48)]
    send_all(forged, subscribes)
    wait_requested(source, requested, "/PRICES/hot")
    time.sleep(0.5)
    baseline_kib = router.memory_kib("RssAnon")
    peak_kib = baseline_kib
    payload = bytes(32 * 1024)
    end = time.monotonic() + 4.0
    last_resubscribe = 0.0
    while time.monotonic() < end:
        source.publish("/PRICES/hot", payload)
        source.poll(10)
        now = time.monotonic()
        if now - last_resubscribe > 0.5:  # evicted ones come back: the pressure stays
            send_all(forged, subscribes)
            last_resubscribe = now
        peak_kib = max(peak_kib, router.memory_kib("RssAnon"))
        time.sleep(0.004)
    print("anonymous RSS KiB: baseline", baseline_kib, "peak", peak_kib)
    assert peak_kib <= baseline_kib + (budget_mib + slack_mib) * 1024, (
        f"router anonymous RSS {peak_kib} KiB: more than {baseline_kib} KiB + budget {budget_mib} MiB + {slack_mib} MiB"
    )
    router.wait_for(lambda lines: any("dropped: its backlog" in line for line in lines), "an eviction logged")


def test_a_subject_subscribed_two_thousand_times_by_one_subscriber_is_relayed_once(
    client: affinity.Client, services: Path, routers: list[Router], handles: list[Any]
) -> None:
    listen = loopback_channel()
    router = Router(services, listen, "--liveness-timeout", "30")
    routers.append(router)
    source, requested = feed(client, listen, router)
    handles.append(source)
    inbox_endpoint = f"127.0.0.1:{free_udp_port()}"
    inbox = client.add_subscription(f"aeron:udp?endpoint={inbox_endpoint}", DATA_STREAM)
    forged = connected(client.add_publication(listen, DATA_STREAM))
    handles += [inbox, forged]
    send_all(forged, [subscribe_record(7_001, "/PRICES/dup", inbox_endpoint)] * 2_000)
    wait_requested(source, requested, "/PRICES/dup")
    updates = [f"update-{i}".encode() for i in range(20)]
    for payload in updates:
        source.publish("/PRICES/dup", payload)
        time.sleep(0.01)
    received: list[bytes] = []
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        for message in inbox.poll_batch(256):
            received += [p for kind, _, s, p in parse(message) if kind == DATA and s == "/PRICES/dup"]
        if len(received) >= len(updates):
            time.sleep(0.5)  # any copy would have arrived with the first
            for message in inbox.poll_batch(4096):
                received += [p for kind, _, s, p in parse(message) if kind == DATA and s == "/PRICES/dup"]
            break
        time.sleep(0.01)
    assert sorted(received) == sorted(updates), f"{len(received)} deliveries of {len(updates)} updates"


def test_a_burst_of_subscribes_past_the_bound_is_refused_and_reported_not_dropped(
    client: affinity.Client, services: Path, routers: list[Router], handles: list[Any]
) -> None:
    listen = loopback_channel()
    router = Router(services, listen, "--liveness-timeout", "30")
    routers.append(router)
    inbox_endpoint = f"127.0.0.1:{free_udp_port()}"
    inbox = client.add_subscription(f"aeron:udp?endpoint={inbox_endpoint}", DATA_STREAM)
    forged = connected(client.add_publication(listen, DATA_STREAM))
    handles += [inbox, forged]
    beyond = 40
    burst = [subscribe_record(1 + i, "/PRICES/burst", inbox_endpoint) for i in range(MAX_SUBSCRIBERS + beyond)]
    send_all(forged, burst)
    refusals: list[tuple[int, str]] = []
    deadline = time.monotonic() + TIMEOUT
    while len(refusals) < beyond and time.monotonic() < deadline:
        for message in inbox.poll_batch(256):
            refusals += [(f, p.decode()) for kind, f, _, p in parse(message) if kind == DATA and f & FLAG_REFUSED]
        time.sleep(0.01)
    assert len(refusals) == beyond, f"{len(refusals)} of {beyond} refused SUBSCRIBEs reported"
    assert all(flags == FLAG_STATUS | FLAG_REFUSED and "65536 subscribers" in text for flags, text in refusals)
    # A subscriber using the API hears its refusal through its callback.
    heard: list[tuple[str, Flags, bytes]] = []
    with Subscriber(client, listen, name="late") as late:
        late.subscribe("/PRICES/burst", lambda subject, flags, payload: heard.append((subject, flags, payload)))
        deadline = time.monotonic() + TIMEOUT
        while not heard and time.monotonic() < deadline:
            late.poll(100)
            time.sleep(0.01)
    assert heard, "the refusal never reached the subscriber"
    subject, flags, reason = heard[0]
    assert (subject, flags) == ("/PRICES/burst", Flags.STATUS | Flags.REFUSED)
    assert b"65536 subscribers" in reason


def test_subscribes_the_link_to_a_router_that_does_not_read_cannot_take_are_reported(
    client: affinity.Client,
) -> None:
    # Nobody listens on the router channel: every SUBSCRIBE stays in the subscriber's link,
    # which takes at most 64 MiB; the ones past it are reported, not dropped silently.
    subjects = [f"/PRICES/{i:06d}/{'x' * 1000}" for i in range(80_000)]
    refused: list[tuple[str, Flags, bytes]] = []
    with Subscriber(client, loopback_channel(), name="bursty") as subscriber:
        for subject in subjects:
            subscriber.subscribe(subject, lambda subject, flags, payload: refused.append((subject, flags, payload)))
        subscriber.poll(10)
    assert refused, "every SUBSCRIBE past the link's limit was dropped silently"
    assert len(refused) < len(subjects)
    assert all(flags == Flags.STATUS | Flags.REFUSED and b"link to the router is full" in p for _, flags, p in refused)
    # The refused ones are the last: the link took the first ones, in order.
    assert [subject for subject, _, _ in refused] == subjects[len(subjects) - len(refused) :]
