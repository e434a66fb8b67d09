"""The subject router with real processes: the seed's worked example end to end (two routers,
three adapters, kill -9 and restart) and a faucet losing a publisher."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import affinity
from affinity.routing import select_member
from affinity.subjects import Flags, Subscriber
from affinity.testing import loopback_channel

HERE = Path(__file__).parent
PEER = HERE / "subject_peer.py"
DATA = HERE / "data"
LIVENESS = 1.0
TIMEOUT = 20.0
ADAPTERS = ["TradeAdapterA", "TradeAdapterB"]
CHANNEL = "/PRIVATE/alice-0/FXTRADE"
CONTAINER = "/PRIVATE/alice/BLOTTER/TRADE"


class Process:
    """A child process whose stdout and stderr lines are collected by a thread."""

    def __init__(self, args: list[str]) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.popen = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_for(self, predicate: Callable[[list[str]], bool], what: str, timeout: float = TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.snapshot()):
                return
            if self.popen.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"{what}: not seen; output:\n" + "\n".join(self.snapshot()[-40:]))

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)
        self._close()

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close()

    def _close(self) -> None:
        self._thread.join(timeout=5)
        if self.popen.stdout is not None and not self.popen.stdout.closed:
            self.popen.stdout.close()


def router(config: Path, listen: str) -> Process:
    process = Process(
        [
            sys.executable,
            "-m",
            "affinity.cli",
            "router",
            "--config",
            str(config),
            "--listen",
            listen,
            "--liveness-timeout",
            str(LIVENESS),
        ]
    )
    process.wait_for(lambda lines: any("listening on" in line for line in lines), "router start")
    return process


def peer(label: str, *routers: str, extra: tuple[str, ...] = ()) -> Process:
    process = Process([sys.executable, str(PEER), label, *routers, "--liveness", str(LIVENESS), *extra])
    process.wait_for(lambda lines: "READY" in lines, f"{label} ready")
    return process


def count(lines: list[str], pattern: str) -> int:
    return sum(1 for line in lines if re.search(pattern, line))


def source_up(label: str, times: int = 1) -> Callable[[list[str]], bool]:
    """Whether a router logged `label` coming up at least `times` times."""
    return lambda lines: count(lines, f"Source {label} .* is up") >= times


class Inbox:
    """What a subscriber received, in order: (subject, flags, payload)."""

    def __init__(self, subscriber: Subscriber) -> None:
        self.subscriber = subscriber
        self.items: list[tuple[str, Flags, str]] = []

    def __call__(self, subject: str, flags: Flags, payload: bytes) -> None:
        self.items.append((subject, flags, payload.decode()))

    def wait_for(self, predicate: Callable[[list[tuple[str, Flags, str]]], bool], what: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            self.subscriber.poll(256)
            if predicate(self.items):
                return
            time.sleep(0.005)
        raise AssertionError(f"{what}: not received; got {self.items[-20:]}")

    def drain_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.subscriber.poll(256)
            time.sleep(0.005)


def image_from(label: str, subject: str) -> Callable[[list[tuple[str, Flags, str]]], bool]:
    return lambda items: any(s == subject and f & Flags.IMAGE and p.startswith(f"{label}:") for s, f, p in items)


def test_worked_example_one_adapter_serves_both_legs_moves_on_kill_and_stays_after_restart(
    client: affinity.Client, processes: list[Process]
) -> None:
    liberator_listen, transformer_listen = loopback_channel(), loopback_channel()
    liberator = router(DATA / "worked_example_liberator_router.conf", liberator_listen)
    transformer = router(DATA / "worked_example_transformer.conf", transformer_listen)
    processes += [liberator, transformer]
    adapters = {label: peer(label, liberator_listen, transformer_listen) for label in ADAPTERS}
    historical = peer("HistoricalAdapter", transformer_listen)
    processes += [*adapters.values(), historical]
    for label in ADAPTERS:
        for process in (liberator, transformer):
            process.wait_for(source_up(label), f"{label} up")
    transformer.wait_for(source_up("HistoricalAdapter"), "historical up")

    chosen = select_member("trading-adapters:alice", ADAPTERS)
    survivor = next(label for label in ADAPTERS if label != chosen)
    via_liberator = Subscriber(
        client, liberator_listen, name="alice", heartbeat_interval=0.05, liveness_timeout=LIVENESS
    )
    via_transformer = Subscriber(
        client, transformer_listen, name="alice", heartbeat_interval=0.05, liveness_timeout=LIVENESS
    )
    channel, container = Inbox(via_liberator), Inbox(via_transformer)
    via_liberator.subscribe(CHANNEL, channel)
    via_transformer.subscribe(CONTAINER, container)

    # The trade channel (via Liberator) and the blotter container (via Transformer) are served
    # by the same adapter; the container's second leg by the historical adapter.
    channel.wait_for(image_from(chosen, CHANNEL), "channel image")
    container.wait_for(image_from(chosen, CONTAINER), "container live image")
    container.wait_for(image_from("HistoricalAdapter", CONTAINER), "container initial image")
    assert count(adapters[chosen].snapshot(), f"REQUEST 0 {CHANNEL}") == 1
    assert count(adapters[chosen].snapshot(), f"REQUEST 1 {CONTAINER}") == 1
    assert count(adapters[survivor].snapshot(), "REQUEST") == 0
    peer_number = 2 + ADAPTERS.index(chosen)  # Transformer is peer 1 of the Liberator config
    liberator.wait_for(
        lambda lines: (
            f"INFO: Object <{CHANNEL}> is bound to affinity <trading-adapters:alice>" in lines
            and f"INFO: We can request object <{CHANNEL}> from peer {peer_number} ({chosen})" in lines
        ),
        "the seed's log lines",
    )

    # kill -9 the adapter: both subjects move to the survivor; status first, then fresh data.
    adapters[chosen].kill()
    killed_at = len(channel.items), len(container.items)
    channel.wait_for(image_from(survivor, CHANNEL), "channel moved")
    container.wait_for(image_from(survivor, CONTAINER), "container moved")
    for inbox, start in ((channel, killed_at[0]), (container, killed_at[1])):
        after = inbox.items[start:]
        statuses = [i for i, (_, flags, _) in enumerate(after) if flags & Flags.STATUS]
        fresh = [i for i, (_, flags, p) in enumerate(after) if flags & Flags.IMAGE and p.startswith(survivor)]
        assert statuses and fresh and statuses[0] < fresh[0], after
        assert "member-down" in after[statuses[0]][2]
        assert not any(p.startswith(chosen) for _, _, p in after[statuses[0] :])
    for process in (liberator, transformer):
        process.wait_for(lambda lines: count(lines, f"to peer \\d+ \\({survivor}\\): member-down") >= 1, "move line")

    # Restart it: nothing moves back.
    restarted = peer(chosen, liberator_listen, transformer_listen)
    processes.append(restarted)
    for process in (liberator, transformer):
        process.wait_for(source_up(chosen, 2), "restarted up")
    mark = len(channel.items)
    channel.drain_for(0.5)
    assert count(restarted.snapshot(), "REQUEST") == 0
    latest = [p for s, f, p in channel.items[mark:] if f & Flags.UPDATE]
    assert latest and all(p.startswith(f"{survivor}:") for p in latest)

    # NODATA notfound under source affinity: forwarded, never re-routed to the other adapter.
    ghost = "/PRIVATE/ghost-0/FXTRADE"
    via_liberator.subscribe(ghost, channel)
    channel.wait_for(lambda items: any(s == ghost and f & Flags.NODATA_NOTFOUND for s, f, _ in items), "nodata")
    channel.drain_for(0.5)
    asked = sum(count(p.snapshot(), f"REQUEST 0 {ghost}") for p in (adapters[survivor], restarted))
    assert asked == 1
    via_liberator.close()
    via_transformer.close()


def test_faucet_assigns_least_assigned_announces_every_transition_and_survives_kill(
    client: affinity.Client, processes: list[Process]
) -> None:
    listen = loopback_channel()
    faucet_router = router(DATA / "faucet_symbols.conf", listen)
    processes.append(faucet_router)
    publishers = {}
    for label in ("pub1", "pub2"):  # activation order: pub1 first
        publishers[label] = peer(label, listen, extra=("--faucet",))
        processes.append(publishers[label])
        faucet_router.wait_for(source_up(label), label)
        time.sleep(0.2)  # its ENLIST reaches the router before the next publisher's
    watcher, s1, s2 = (
        Subscriber(client, listen, name=name, heartbeat_interval=0.05, liveness_timeout=LIVENESS)
        for name in ("watcher", "s1", "s2")
    )
    control, one, two = Inbox(watcher), Inbox(s1), Inbox(s2)
    watcher.subscribe("symbol_faucet_control", control)
    control.drain_for(0.3)

    def events() -> list[tuple[str, str, str | None, str | None]]:
        import json

        parsed = [json.loads(p) for _, _, p in control.items]
        return [(e["event"], e["topic"], e.get("client_name"), e.get("subscriber_client_name")) for e in parsed]

    def expect(*wanted: tuple[str, str, str | None, str | None]) -> None:
        control.wait_for(lambda _: len(events()) >= len(wanted), f"events {wanted}")
        control.drain_for(0.1)
        assert events() == list(wanted)

    s1.subscribe("/symbols/A", one)
    expect(("assign", "/symbols/A", "pub1", "s1"))
    s1.subscribe("/symbols/B", one)
    sequence = [("assign", "/symbols/A", "pub1", "s1"), ("assign", "/symbols/B", "pub2", "s1")]
    expect(*sequence)
    s2.subscribe("/symbols/A", two)
    sequence.append(("assign", "/symbols/A", "pub1", "s2"))
    expect(*sequence)
    one.wait_for(image_from("pub1", "/symbols/A"), "A from pub1")
    one.wait_for(image_from("pub2", "/symbols/B"), "B from pub2")

    publishers["pub1"].kill()
    sequence += [
        ("unassign", "/symbols/A", "pub1", "s1"),
        ("unassign", "/symbols/A", "pub1", "s2"),
        ("assign", "/symbols/A", "pub2", "s1"),
        ("assign", "/symbols/A", "pub2", "s2"),
    ]
    expect(*sequence)
    two.wait_for(image_from("pub2", "/symbols/A"), "A moved to pub2")
    statuses = [i for i, (_, f, _) in enumerate(two.items) if f & Flags.STATUS]
    fresh = [i for i, (_, f, p) in enumerate(two.items) if f & Flags.IMAGE and p.startswith("pub2")]
    assert statuses and statuses[0] < fresh[0]

    s2.unsubscribe("/symbols/A")
    sequence.append(("unassign", "/symbols/A", "pub2", "s2"))
    expect(*sequence)
    publishers["pub2"].wait_for(
        lambda lines: "EVENT unassign /symbols/A pub2 s2" in lines, "publishers see events on poll"
    )
    for subscriber in (watcher, s1, s2):
        subscriber.close()
