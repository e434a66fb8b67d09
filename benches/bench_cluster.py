"""Cluster of routers across network-namespace hosts on one machine: latency per level and fan-out.

Run as root inside a private network namespace (packets never leave it)::

    unshare -n python3 benches/bench_cluster.py WORKDIR [--updates 2000] [--seconds 5] [--subscribers 100]

Makes the bridge ``br0`` (10.9.0.1/24) and one host namespace per node (``tests/cluster_netns.py``,
the helpers the multi-host cluster tests use), each running ``affinity router --node NODE`` on its
own embedded driver: golan master of STOCK_EXCHANGE (stratum 0), avalon and heron its slaves
(stratum 1), bilbo a slave of avalon (stratum 2). This script is the clients' host (10.9.0.1, one
embedded driver): the source ``stock-feed`` at golan, subscribers at each node.

* Latency per level: one update at a time (payload: its send time), received by a subscriber at
  golan (level 0), avalon (1) and bilbo (2), all polled by one thread; per update the time from
  ``publish`` to each receipt, and the increments level 1 minus level 0 and level 2 minus level 1.
* Fan-out: master → 2 slaves (avalon, heron) → ``--subscribers`` subscribers split between them,
  one subject; the source publishes updates in batches for ``--seconds``; updates delivered per
  second in total (every subscriber's receipts), polled by one thread of this process.

``--rust-subscribers BINARY`` (``target/release/examples/fanout_subscribers``) measures the fan-out a
second time with the subscribers in a Rust process of their own (one embedded driver, one polling
thread), which the Python client does not bound; the source stays this script's.

``--relay-idle-sleep SECONDS`` starts each router with ``affinity._polling.IDLE_SLEEP`` (how long
the cluster node's relay loop sleeps when idle, 0.5 ms) set to SECONDS, to measure what that
sleep costs a level.

Prints one JSON line per figure (``measurement``, ``value``, ``unit``, ``note``).
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import affinity
import cluster_conf as conf
import cluster_netns
from affinity.subjects import Flags, Source, Subscriber
from cluster_hosts import FEED
from cluster_netns import Router, address, make_bridge, node_block

#: The nodes this benchmark runs (host numbers 10.9.0.N as ``tests/cluster_netns.py`` gives them;
#: this script is host 1).
NODES = ("golan", "avalon", "bilbo", "heron")
CLIENT_HOST = "10.9.0.1"
LATENCY_SUBJECT = "/STOCK/LATENCY"
FANOUT_SUBJECT = "/STOCK/FANOUT"
#: The subject of the fan-out to Rust subscribers (a fresh one: the Python fan-out's is cached).
RUST_FANOUT_SUBJECT = "/STOCK/FANOUT-RUST"
#: Seconds a step may take before the benchmark gives up.
STEP_TIMEOUT = 60.0
#: Updates per publish batch in the fan-out phase.
BATCH = 64


CONFIG = (
    conf.data_service("stock", "^/STOCK/", FEED)
    + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
    + node_block("golan", "master-of STOCK_EXCHANGE")
    + node_block("avalon")
    + node_block("heron")
    + node_block("bilbo", "upstream STOCK_EXCHANGE avalon")
)


def figure(measurement: str, value: float, unit: str, note: str) -> None:
    print(
        json.dumps(
            {"bench": "cluster", "measurement": measurement, "value": round(value, 1), "unit": unit, "note": note}
        )
    )


def until(what: str, predicate: Any, *polled: Any) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        for peer in polled:
            peer.poll(256)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


def latency(client: affinity.Client, source: Source, requests: list[str], updates: int) -> None:
    received: dict[str, dict[int, int]] = {node: {} for node in ("golan", "avalon", "bilbo")}
    subscribers = []
    for node in received:
        subscriber = Subscriber(client, address(node), name=f"lat-{node}", host=CLIENT_HOST)
        seen = received[node]

        def on_data(subject: str, flags: Flags, payload: bytes, seen: dict[int, int] = seen) -> None:
            if flags & Flags.UPDATE:
                seen[int(payload)] = time.perf_counter_ns()

        subscriber.subscribe(LATENCY_SUBJECT, on_data)
        subscribers.append(subscriber)
    until("golan's request", lambda: LATENCY_SUBJECT in requests, source, *subscribers)
    source.publish(LATENCY_SUBJECT, b"image", image=True)
    # Warm up: every level receives updates before anything is timed.
    warm = 0

    def all_have(key: int) -> bool:
        return all(key in seen for seen in received.values())

    while not all_have(warm):
        warm = time.perf_counter_ns()
        source.publish(LATENCY_SUBJECT, str(warm).encode())
        end = time.monotonic() + 0.2
        while time.monotonic() < end and not all_have(warm):
            for subscriber in subscribers:
                subscriber.poll(64)
            source.poll(16)
    sent: list[int] = []
    for _ in range(updates):
        stamp = time.perf_counter_ns()
        source.publish(LATENCY_SUBJECT, str(stamp).encode())
        sent.append(stamp)
        until("an update at every level", lambda stamp=stamp: all_have(stamp), *subscribers)
    note = f"{updates} updates one at a time, network namespaces on one machine, one polling thread"
    for node, level in (("golan", 0), ("avalon", 1), ("bilbo", 2)):
        times = [(received[node][s] - s) / 1e3 for s in sent]
        figure(f"publish -> subscriber at level {level} ({node}), p50", quantile(times, 0.5), "µs", note)
        figure(f"publish -> subscriber at level {level} ({node}), p99", quantile(times, 0.99), "µs", note)
    for upper, lower, level in (("golan", "avalon", 1), ("avalon", "bilbo", 2)):
        steps = [(received[lower][s] - received[upper][s]) / 1e3 for s in sent]
        figure(f"one level: {upper} -> {lower} (level {level}), p50", quantile(steps, 0.5), "µs", note)
        figure(f"one level: {upper} -> {lower} (level {level}), p99", quantile(steps, 0.99), "µs", note)
    for subscriber in subscribers:
        subscriber.close()


def fanout(client: affinity.Client, source: Source, requests: list[str], count: int, seconds: float) -> None:
    delivered = [0]

    def on_data(subject: str, flags: Flags, payload: bytes) -> None:
        if flags & Flags.UPDATE:
            delivered[0] += 1

    images = [0]

    def on_image(subject: str, flags: Flags, payload: bytes) -> None:
        if flags & Flags.IMAGE:
            images[0] += 1
        on_data(subject, flags, payload)

    subscribers = []
    for index in range(count):
        node = ("avalon", "heron")[index % 2]
        subscriber = Subscriber(client, address(node), name=f"fan-{index}", host=CLIENT_HOST)
        subscriber.subscribe(FANOUT_SUBJECT, on_image)
        subscribers.append(subscriber)
    until("golan's request", lambda: FANOUT_SUBJECT in requests, source, *subscribers)
    source.publish(FANOUT_SUBJECT, b"image", image=True)
    until("every fan-out subscriber's image", lambda: images[0] >= count, source, *subscribers)
    stop = threading.Event()
    published = [0]

    def publish() -> None:
        payload = b"x" * 100
        while not stop.is_set():
            for _ in range(BATCH):
                source.publish(FANOUT_SUBJECT, payload)
            published[0] += BATCH
            source.poll(16)

    publisher = threading.Thread(target=publish, daemon=True)
    start = time.monotonic()
    delivered[0] = 0
    publisher.start()
    while time.monotonic() - start < seconds:
        for subscriber in subscribers:
            subscriber.poll(1024)
    stop.set()
    publisher.join()
    elapsed = time.monotonic() - start
    got = delivered[0]
    figure(
        f"fan-out master -> 2 slaves -> {count} subscribers, updates delivered",
        got / elapsed,
        "updates/s",
        f"{published[0]} published in {elapsed:.1f} s, {got} delivered of {published[0] * count} "
        "(what one polling thread of this process took in; the rest was dropped or still queued)",
    )
    for subscriber in subscribers:
        subscriber.close()


def fanout_rust(source: Source, requests: list[str], binary: Path, count: int, seconds: float) -> None:
    """The fan-out to ``count`` subscribers in a Rust process (``fanout_subscribers``), split
    between avalon and heron; this script publishes until that process reports."""
    routers = ",".join(address(node) for node in ("avalon", "heron"))
    command = [str(binary), routers, RUST_FANOUT_SUBJECT, str(count), str(seconds), CLIENT_HOST]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line.strip()) for line in child.stdout or ()], daemon=True)
    reader.start()

    def expect(word: str) -> str:
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            source.poll(16)
            try:
                line = lines.get(timeout=0.001)
            except queue.Empty:
                if time.monotonic() > deadline or child.poll() is not None:
                    raise SystemExit(f"the Rust subscribers never said {word!r} (exit {child.poll()})") from None
                continue
            if line.startswith(word):
                return line

    try:
        expect("subscribed")
        until("golan's request for the Rust fan-out", lambda: RUST_FANOUT_SUBJECT in requests, source)
        source.publish(RUST_FANOUT_SUBJECT, b"image", image=True)
        expect("imaged")
        payload = b"x" * 100
        published, start, result = 0, time.monotonic(), None
        deadline = start + seconds + STEP_TIMEOUT
        while result is None and time.monotonic() < deadline:
            for _ in range(BATCH):
                source.publish(RUST_FANOUT_SUBJECT, payload)
            published += BATCH
            source.poll(16)
            try:
                line = lines.get_nowait()
            except queue.Empty:
                continue
            if line.startswith("{"):
                result = json.loads(line)
        elapsed = time.monotonic() - start
        if result is None:
            raise SystemExit("the Rust subscribers never reported")
    finally:
        if child.poll() is None:
            child.wait(timeout=STEP_TIMEOUT)
    figure(
        f"fan-out master -> 2 slaves -> {count} Rust subscribers, updates delivered",
        result["delivered"] / result["seconds"],
        "updates/s",
        f"{published} published by this script in {elapsed:.1f} s ({published / elapsed:.0f}/s, owed "
        f"{published * count / elapsed:.0f} deliveries/s); {result['delivered']} delivered in "
        f"{result['seconds']} s to subscribers in one Rust process (one polling thread)",
    )


#: Run by each router with ``--relay-idle-sleep`` (``python -c PATCH SECONDS -m affinity.cli ARGS``):
#: sets the relay loop's idle sleep, then runs ``affinity.cli`` with ARGS.
RELAY_SLEEP_PATCH = (
    "import runpy, sys; import affinity._polling as polling; polling.IDLE_SLEEP = float(sys.argv[1]); "
    "sys.argv = ['affinity'] + sys.argv[4:]; runpy.run_module('affinity.cli', run_name='__main__')"
)


class RelaySleepSys:
    """Stands in for ``sys`` in ``cluster_hosts``, whose ``Router`` starts ``[sys.executable, "-m",
    "affinity.cli", ...]``: its ``executable`` is a wrapper script that runs Python with
    :data:`RELAY_SLEEP_PATCH` first."""

    def __init__(self, workdir: Path, seconds: float) -> None:
        self.executable = str(workdir / "python-relay-sleep")
        script = f'#!/bin/sh\nexec {sys.executable} -c "{RELAY_SLEEP_PATCH}" {seconds!r} "$@"\n'
        Path(self.executable).write_text(script)
        Path(self.executable).chmod(0o700)

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--updates", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--relay-idle-sleep", type=float, metavar="SECONDS")
    parser.add_argument("--rust-subscribers", type=Path, metavar="BINARY")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    (args.workdir / "cluster.conf").write_text(CONFIG)
    make_bridge()
    if args.relay_idle_sleep is not None:
        cluster_netns.sys = RelaySleepSys(args.workdir, args.relay_idle_sleep)  # type: ignore[assignment]
    routers = [Router(args.workdir, node, args.workdir / "cluster.conf") for node in NODES]
    client = affinity.Client()
    try:
        deadline = time.monotonic() + STEP_TIMEOUT
        for router in routers:
            router.wait_listening(deadline)
        requests: list[str] = []
        source = Source(client, address("golan"), FEED, host=CLIENT_HOST)
        source.on_request(requests.append)
        latency(client, source, requests, args.updates)
        fanout(client, source, requests, args.subscribers, args.seconds)
        if args.rust_subscribers is not None:
            fanout_rust(source, requests, args.rust_subscribers, args.subscribers, args.seconds)
        source.close()
    finally:
        client.close()
        for router in routers:
            router.stop()
    print(json.dumps({"bench": "cluster", "load_after": open("/proc/loadavg").read().split()[:3]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
