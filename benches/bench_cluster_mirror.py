"""What keeping mirrored masters in step costs a publish at a master: updates per second from a
source at heron to a subscriber at heron, and (mirrored) to one at hobbit, router processes on
loopback, variants interleaved in rounds::

    python benches/bench_cluster_mirror.py WORKDIR [--rounds 5] [--updates 20000]

Variants, each round in this order (fresh router processes for every run):

* ``single``: heron the only master of RUGBY_NEWS (hobbit a slave): no mirror, heron's router
  relays the publishes to its subscriber only (the path before mirrored masters were kept in step);
* ``mirrored``: heron and hobbit both masters: heron's router also hands every publish to its
  node, which forwards it to hobbit.

Per run: the time from the first publish to the last update at each subscriber (every update
once, in order, or the run fails). Prints one JSON line per run and one per variant and
subscriber (median, min, max; ``os.getloadavg()`` at the start and end).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import affinity
import cluster_conf as conf
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port
from bench_cluster_mapper import print_summary
from test_cluster_nodes import start_node
from test_subjects_processes import LIVENESS, Process

SUBJECT = "/RUGBY/bench"
FEED = "rugby-feed"
RUN_TIMEOUT = 120.0


def configuration(ports: dict[str, int], mirrored: bool) -> str:
    hobbit = ("master-of RUGBY_NEWS",) if mirrored else ()
    return (
        conf.data_service("rugby", "^/RUGBY/", FEED)
        + conf.node("heron", conf.loopback(ports["heron"]), "master-of RUGBY_NEWS")
        + conf.node("hobbit", conf.loopback(ports["hobbit"]), *hobbit)
        + conf.domain("RUGBY_NEWS", "^/RUGBY/")
    )


class Receiver:
    """A subscriber of :data:`SUBJECT` at one router, recording when each update came."""

    def __init__(self, client: affinity.Client, router: str) -> None:
        self.subscriber = Subscriber(client, router, name="bench", liveness_timeout=LIVENESS)
        self.received: list[int] = []
        self.done_at = 0.0
        self.subscriber.subscribe(SUBJECT, self._on_data)

    def _on_data(self, subject: str, flags: Flags, payload: bytes) -> None:
        if flags & Flags.UPDATE:
            self.received.append(int(payload))
            self.done_at = time.perf_counter()


def run_once(client: affinity.Client, workdir: Path, mirrored: bool, updates: int) -> dict[str, float]:
    """One run: updates per second at each receiving node."""
    ports = {node: free_udp_port() for node in ("heron", "hobbit")}
    config = workdir / "cluster.conf"
    config.write_text(configuration(ports, mirrored))
    processes: list[Process] = [start_node(config, node, conf.loopback(ports[node])) for node in ports]
    nodes = ("heron", "hobbit") if mirrored else ("heron",)
    feeds = [Source(client, conf.loopback(ports[node]), FEED, liveness_timeout=LIVENESS) for node in nodes]
    for feed in feeds:
        feed.on_request(lambda subject, feed=feed: feed.publish(subject, b"image", image=True))
    receivers = {node: Receiver(client, conf.loopback(ports[node])) for node in nodes}
    source = Source(client, conf.loopback(ports["heron"]), "bench-publisher", liveness_timeout=LIVENESS)
    deadline = time.monotonic() + RUN_TIMEOUT

    def poll() -> None:
        source.poll(64)
        for feed in feeds:
            feed.poll(16)
        for receiver in receivers.values():
            receiver.subscriber.poll(1024)
        assert time.monotonic() < deadline, f"not done within {RUN_TIMEOUT} s"

    try:
        # Warm up: one update through to every receiver (the first publish opens heron's link).
        while not source.router_live or not source.publish(SUBJECT, b"-1"):
            poll()
        while not all(r.received for r in receivers.values()) or source.status().forward_warning:
            poll()
        for receiver in receivers.values():
            receiver.received.clear()
        started, sent = time.perf_counter(), 0
        while any(len(r.received) < updates for r in receivers.values()):
            while sent < updates and source.publish(SUBJECT, str(sent).encode()):
                sent += 1
                if sent % 64 == 0:
                    break
            poll()
        for node, receiver in receivers.items():
            assert receiver.received == list(range(updates)), f"{node}: every update once, in order"
        return {node: updates / (r.done_at - started) for node, r in receivers.items()}
    finally:
        for closing in (source, *feeds, *(r.subscriber for r in receivers.values())):
            closing.close()
        for process in processes:
            process.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--updates", type=int, default=20000)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    results: dict[tuple[str, str], list[float]] = {}
    client = affinity.Client()
    try:
        for round_ in range(args.rounds):
            for name, mirrored in (("single", False), ("mirrored", True)):
                rates = run_once(client, args.workdir, mirrored, args.updates)
                for node, rate in rates.items():
                    results.setdefault((name, node), []).append(rate)
                line = {"round": round_, "variant": name, "updates_per_s": {n: round(r) for n, r in rates.items()}}
                print(json.dumps({**line, "load": os.getloadavg()}), flush=True)
    finally:
        client.close()
    load_end = os.getloadavg()
    for (name, node), rates in results.items():
        measurement = f"publish at heron, variant {name}, received at {node}"
        print_summary(measurement, rates, args.updates, (load_start, load_end))
    return 0


if __name__ == "__main__":
    sys.exit(main())
