"""Consumer-group benchmarks: keyed throughput against the plain-publication ceiling, failover
time, planned-handoff pause. Every consumer is a process of its own.

    python benches/bench_groups.py throughput [--count 2000000] [--keys 10000] [--size 100] [--api poll]
    python benches/bench_groups.py failover [--kills 20]
    python benches/bench_groups.py all --runs 3          # both, several times; prints a table

``throughput``: 1 publisher (here, ``publish_batch`` of pyarrow arrays: 10,000 keys, 100-byte
payloads) -> a group of 8 queues -> 2 consumer processes (``auto_ack=True``, ``poll_batch``, or
``poll`` with ``--api poll``); then, in the same
run, the same bytes through one plain unicast publication (``offer_batch`` of a pyarrow array)
to one subscriber process: the ceiling. Rates are messages delivered / (last delivery - first
delivery) over all receiving processes. CPU per message (``*_cpu_us_per_msg``) is the CPU time of
every process of a side (all its threads: the embedded drivers, the group threads) over its
window, divided by the messages: the receivers' between their first and last delivery, the
publisher's from its first offer until everything was delivered (the group's ``flush``, the plain
subscriber's exit). On a machine other work keeps busy, wall-clock rates swing with the load;
CPU per message much less. The result also names each side's window (wall-clock seconds, for
``perf record -k realtime`` profiles of one side).

``failover``: 2 consumers of a 2-queue group (count 2, default liveness 2 s, cycle 1 s) with a
publisher sending 2,000 messages/s; ``--kills`` times: SIGKILL consumer 1, measure until the
survivor processes the first message of the dead one's queue; restart consumer 1 and measure
the planned handoff pause of its queue (last message processed by the backup -> first message
processed by the primary). Reports p50/p99.

Each measurement is printed as one JSON line and appended to benches/results/groups.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import affinity
import pyarrow as pa
from affinity.groups import GroupConsumer, GroupPublisher, create_group

#: Where each result is appended; ``BENCH_GROUPS_RAW=/dev/null`` when benches/harness.py records them.
RESULTS = Path(os.environ.get("BENCH_GROUPS_RAW", str(Path(__file__).parent / "results" / "groups.jsonl")))
STREAM = 1001
#: A consumer process stops after this long without a message (once it had some).
IDLE_EXIT = 2.0
#: A queue's messages resumed after a silence this long count as "first message after a move".
GAP = 0.3
#: How a throughput consumer takes its messages: ``GroupConsumer.poll_batch`` (one Arrow record
#: batch per poll, as the plain subscriber's ``poll_batch(as_arrow=True)``) or ``poll`` (a
#: ``GroupMessage`` per message). Failover consumers always use ``poll`` (they read each queue).
CONSUMER_APIS = ("poll_batch", "poll")


def free_channel() -> str:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return f"aeron:udp?endpoint=127.0.0.1:{sock.getsockname()[1]}"


def record(result: dict[str, Any]) -> None:
    line = json.dumps(result)
    print(line, flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as out:
        out.write(line + "\n")


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_ready(process: subprocess.Popen[str], timeout: float = 30.0) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("ready"):
            return
        if not line and process.poll() is not None:
            raise SystemExit(f"child failed: {process.stderr.read() if process.stderr else ''}")
    raise SystemExit("child did not get ready")


def last_json(process: subprocess.Popen[str], timeout: float = 120.0) -> dict[str, Any]:
    out, err = process.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"child printed no result: {err[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# ---- children -----------------------------------------------------------------------------------


def run_group_consumer(args: argparse.Namespace) -> None:
    """Counts messages until idle; with --events prints queue gains/releases with times."""
    with affinity.Client() as client:
        consumer = GroupConsumer(
            client, args.group, args.index, args.count, auto_ack=True, registry=args.registry, cycle=args.cycle
        )
        print("ready", flush=True)
        received, first, last = 0, 0.0, 0.0
        cpu_first, cpu_last = 0.0, 0.0
        last_of_queue: dict[int, float] = {}
        owned: set[int] = set()
        while True:
            if args.events or args.api == "poll":
                messages: Any = consumer.poll(4096, 0.05)
            else:
                messages = consumer.poll_batch(4096, 0.05)
            now = time.time()
            if len(messages):
                if not first:
                    first, cpu_first = now, time.process_time()
                last, cpu_last = now, time.process_time()
                received += len(messages)
                if args.events:
                    for message in messages:
                        previous = last_of_queue.get(message.queue)
                        if previous is None or now - previous > GAP:
                            print(json.dumps({"event": "first", "queue": message.queue, "time": now}), flush=True)
                        last_of_queue[message.queue] = now
            if args.events:
                current = set(consumer.owned_queues())
                for queue in owned - current:
                    print(
                        json.dumps({"event": "released", "queue": queue, "last": last_of_queue.get(queue)}), flush=True
                    )
                    last_of_queue.pop(queue, None)
                owned = current
            elif received and now - last > IDLE_EXIT:
                break
        consumer.close()
        print(json.dumps({"received": received, "first": first, "last": last, "cpu": cpu_last - cpu_first}), flush=True)


def run_plain_subscriber(args: argparse.Namespace) -> None:
    with affinity.Client() as client:
        subscription = client.add_subscription(args.channel, STREAM)
        print("ready", flush=True)
        received, first, last = 0, 0.0, 0.0
        cpu_first, cpu_last = 0.0, 0.0
        while True:
            batch = subscription.poll_batch(4096, as_arrow=True)
            now = time.time()
            if len(batch):
                if not first:
                    first, cpu_first = now, time.process_time()
                last, cpu_last = now, time.process_time()
                received += len(batch)
                if received >= args.expect:
                    break
            elif received and now - last > IDLE_EXIT:
                break
        print(json.dumps({"received": received, "first": first, "last": last, "cpu": cpu_last - cpu_first}), flush=True)


# ---- throughput ---------------------------------------------------------------------------------


def arrays(count: int, keys: int, size: int) -> tuple[pa.Array, pa.Array]:
    key_values = [f"key-{k:05d}".encode() for k in range(keys)]
    key_array = pa.array([key_values[i % keys] for i in range(count)], type=pa.binary())
    payload = b"x" * size
    payload_array = pa.array([payload] * count, type=pa.binary())
    return key_array, payload_array


def throughput(args: argparse.Namespace) -> None:
    """Runs :func:`_throughput` on a temporary registry, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as registry:
        _throughput(args, registry)


def _throughput(args: argparse.Namespace, registry: str) -> None:
    create_group("bench", "bench", 64, 8, 64 << 20, registry)
    key_array, payload_array = arrays(args.count, args.keys, args.size)
    chunk = 4096
    consumers = [
        child(
            "group-consumer",
            *("--group", "bench", "--registry", registry, "--index", str(i), "--count", "2", "--api", args.api),
        )
        for i in range(2)
    ]
    for process in consumers:
        wait_ready(process)
    with affinity.Client() as client:
        publisher = GroupPublisher(client, "bench", registry=registry)
        deadline = time.monotonic() + 30
        while len({queue.owner_id for queue in publisher.status().queues if queue.owner_id}) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("consumers did not take their queues")
            time.sleep(0.05)
        start, cpu_start = time.monotonic(), time.process_time()
        sent = 0
        while sent < args.count:
            taken = publisher.publish_batch(key_array.slice(sent, chunk), payload_array.slice(sent, chunk))
            sent += taken
            if taken == 0:
                os.sched_yield()
        flushed = publisher.flush(60.0)
        publish_seconds = time.monotonic() - start
        group_publisher_cpu = time.process_time() - cpu_start
        publisher.close()
    results = [last_json(process) for process in consumers]
    delivered = sum(r["received"] for r in results)
    group_window = (min(r["first"] for r in results if r["first"]), max(r["last"] for r in results))
    group_rate = delivered / (group_window[1] - group_window[0])
    group_cpu = group_publisher_cpu + sum(r["cpu"] for r in results)

    channel = free_channel()
    subscriber = child("plain-sub", "--channel", channel, "--expect", str(args.count))
    wait_ready(subscriber)
    with affinity.Client() as client:
        publication = client.add_publication(channel, STREAM)
        while not publication.is_connected:
            time.sleep(0.01)
        cpu_start = time.process_time()
        sent = 0
        while sent < args.count:
            taken = publication.offer_batch(payload_array.slice(sent, chunk))
            sent += max(taken, 0)
            if taken <= 0:
                os.sched_yield()
        plain = last_json(subscriber)
        plain_publisher_cpu = time.process_time() - cpu_start
    plain_rate = plain["received"] / (plain["last"] - plain["first"])
    plain_cpu = plain_publisher_cpu + plain["cpu"]
    record(
        {
            "bench": "groups-throughput",
            "count": args.count,
            "keys": args.keys,
            "size": args.size,
            "queues": 8,
            "consumers": 2,
            "consumer_api": args.api,
            "delivered": delivered,
            "acknowledged": flushed,
            "publish_seconds": round(publish_seconds, 3),
            "group_msgs_per_s": round(group_rate),
            "plain_msgs_per_s": round(plain_rate),
            "plain_delivered": plain["received"],
            "ratio": round(group_rate / plain_rate, 3),
            "group_cpu_us_per_msg": round(group_cpu / delivered * 1e6, 3),
            "plain_cpu_us_per_msg": round(plain_cpu / plain["received"] * 1e6, 3),
            "cpu_ratio": round(plain_cpu / plain["received"] / (group_cpu / delivered), 3),
            # The sending and the receiving processes apart (each with its embedded driver).
            "group_publisher_cpu_us_per_msg": round(group_publisher_cpu / delivered * 1e6, 3),
            "group_consumers_cpu_us_per_msg": round(sum(r["cpu"] for r in results) / delivered * 1e6, 3),
            "plain_publisher_cpu_us_per_msg": round(plain_publisher_cpu / plain["received"] * 1e6, 3),
            "plain_subscriber_cpu_us_per_msg": round(plain["cpu"] / plain["received"] * 1e6, 3),
            "group_window": [round(t, 3) for t in group_window],
            "plain_window": [round(plain["first"], 3), round(plain["last"], 3)],
        }
    )


# ---- failover and planned handoff ---------------------------------------------------------------


class Events:
    """Collects a consumer child's JSON event lines."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                with self.lock:
                    self.lines.append(json.loads(line))

    def wait(self, predicate: Any, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                for event in self.lines:
                    if predicate(event):
                        return event
            time.sleep(0.005)
        raise SystemExit("timed out waiting for a consumer event")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def failover(args: argparse.Namespace) -> None:
    """Runs :func:`_failover` on a temporary registry, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as registry:
        _failover(args, registry)


def _failover(args: argparse.Namespace, registry: str) -> None:
    create_group("fo", "fo", 16, 2, 64 << 20, registry)

    def consumer(index: int) -> tuple[subprocess.Popen[str], Events]:
        process = child(
            "group-consumer",
            "--group",
            "fo",
            "--registry",
            registry,
            "--index",
            str(index),
            "--count",
            "2",
            "--events",
            "--cycle",
            str(args.cycle),
        )
        wait_ready(process)
        return process, Events(process)

    stop = threading.Event()
    keys = [f"k{i}".encode() for i in range(64)]

    with affinity.Client() as client:
        publisher = GroupPublisher(client, "fo", registry=registry)

        def publish() -> None:
            interval = 1.0 / args.rate
            n = 0
            next_at = time.monotonic()
            while not stop.is_set():
                if publisher.publish(keys[n % len(keys)], b"p" * 100) > 0:
                    n += 1
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)

        c0, e0 = consumer(0)
        c1, e1 = consumer(1)
        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        e1.wait(lambda e: e["event"] == "first" and e["queue"] == 1, 30)
        failovers: list[float] = []
        pauses: list[float] = []
        try:
            for _ in range(args.kills):
                time.sleep(0.5)
                killed_at = time.time()
                c1.kill()
                c1.wait()
                took = e0.wait(lambda e, t=killed_at: e["event"] == "first" and e["queue"] == 1 and e["time"] > t, 30)
                failovers.append(took["time"] - killed_at)
                c1, e1 = consumer(1)
                gained = e1.wait(lambda e: e["event"] == "first" and e["queue"] == 1, 30)
                released = e0.wait(
                    lambda e, t=killed_at: e["event"] == "released" and e["queue"] == 1 and (e["last"] or 0) > t, 10
                )
                pauses.append(gained["time"] - released["last"])
        finally:
            stop.set()
            thread.join(5)
            publisher.close()
            for process in (c0, c1):
                process.kill()
                process.wait()
    record(
        {
            "bench": "groups-failover",
            "kills": len(failovers),
            "liveness_s": 2.0,
            "failover_p50_ms": round(statistics.median(failovers) * 1000, 1),
            "failover_p99_ms": round(percentile(failovers, 0.99) * 1000, 1),
            "failover_ms": [round(v * 1000, 1) for v in failovers],
            "handoff_pause_p50_ms": round(statistics.median(pauses) * 1000, 1),
            "handoff_pause_p99_ms": round(percentile(pauses, 0.99) * 1000, 1),
            "handoff_pause_ms": [round(v * 1000, 1) for v in pauses],
        }
    )


def table(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    through = [r for r in rows if r["bench"] == "groups-throughput"]
    fails = [r for r in rows if r["bench"] == "groups-failover"]
    print("| measurement | median | runs |\n|---|---|---|")
    if through:
        for name in ("group_msgs_per_s", "plain_msgs_per_s", "ratio"):
            print(f"| {name} | {statistics.median(r[name] for r in through)} | {len(through)} |")
    if fails:
        for name in ("failover_p50_ms", "failover_p99_ms", "handoff_pause_p50_ms", "handoff_pause_p99_ms"):
            print(f"| {name} | {statistics.median(r[name] for r in fails)} | {len(fails)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("throughput")
    p.add_argument("--count", type=int, default=2_000_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--api", choices=CONSUMER_APIS, default="poll_batch", help="how the consumers take messages")
    p = commands.add_parser("failover")
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--rate", type=float, default=2000.0)
    p.add_argument("--cycle", type=float, default=1.0)
    p = commands.add_parser("all")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--count", type=int, default=2_000_000)
    p.add_argument("--kills", type=int, default=20)
    p = commands.add_parser("table")
    p.add_argument("path", nargs="?", default=str(RESULTS))
    p = commands.add_parser("group-consumer")
    for name in ("--group", "--registry"):
        p.add_argument(name, required=True)
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--cycle", type=float)
    p.add_argument("--events", action="store_true")
    p.add_argument("--api", choices=CONSUMER_APIS, default="poll_batch")
    p = commands.add_parser("plain-sub")
    p.add_argument("--channel", required=True)
    p.add_argument("--expect", type=int, required=True)
    args = parser.parse_args()
    if args.command == "throughput":
        throughput(args)
    elif args.command == "failover":
        failover(args)
    elif args.command == "all":
        for _ in range(args.runs):
            throughput(argparse.Namespace(count=args.count, keys=10_000, size=100, api="poll_batch"))
        for _ in range(args.runs):
            failover(argparse.Namespace(kills=args.kills, rate=2000.0, cycle=1.0))
        table(RESULTS)
    elif args.command == "table":
        table(Path(args.path))
    elif args.command == "group-consumer":
        run_group_consumer(args)
    else:
        run_plain_subscriber(args)


if __name__ == "__main__":
    main()
