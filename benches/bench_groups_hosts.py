"""Consumers on another host against consumers on the same host, in one run (network namespaces).

    python benches/bench_groups_hosts.py [--runs 3] [--count 200000] [--rate 2000] [--seconds 5]

Needs root, ``ip`` and ``unshare``: the script re-runs itself inside a private network namespace
(``unshare -n``; no packet reaches a real interface) and makes a bridge ``br0`` (10.9.0.1/24)
with two host namespaces on veth pairs, as ``tests/groups_two_hosts.py`` does: host 10.9.0.2
runs the publisher, host 10.9.0.3 is the other host. Each placement runs 2 consumer processes of
an 8-queue group (``auto_ack``, ``poll_batch``; every process its own embedded driver):

* ``same host``: the consumers on 10.9.0.2 with the publisher (UDP over that namespace's stack);
* ``other host``: the consumers on 10.9.0.3 (UDP across the veth pairs and the bridge).

Per placement two phases, one after the other, with the same processes:

* ``throughput``: ``--count`` 100-byte messages over 10,000 keys, ``publish_batch`` as fast as the
  group takes them; the rate is the messages received over the consumers' window (first to last
  delivery, all consumers).
* ``latency``: ``--rate`` messages/s for ``--seconds`` s, sent in 1 ms slices; a message's latency
  is its delivery time minus its send time (both ``time.time_ns`` on the one machine's clock).

The placements alternate within a run (same, other; then other, same), so load swings hit both.
One JSON line per placement and run is printed and appended to
``benches/results/groups_hosts.jsonl``; the table (medians with min and max) is printed last.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Where each result line is appended.
RESULTS = Path(__file__).parent / "results" / "groups_hosts.jsonl"
#: The hosts' addresses on the bridge.
PUBLISHER_HOST = "10.9.0.2"
OTHER_HOST = "10.9.0.3"
#: Queues of the benchmark's group, and its consumers.
QUEUES = 8
CONSUMERS = 2
#: Distinct keys of the messages.
KEYS = 10_000
#: Bytes per message (the first 8 are the send time and the phase).
PAYLOAD_BYTES = 100
#: Phases, as the payload's 9th byte.
THROUGHPUT, LATENCY = 1, 2
#: A consumer leaves after this many seconds without a message once the latency phase began.
IDLE_EXIT = 3.0
#: Seconds to wait for consumers to start and own their queues, and for everything to be acknowledged.
SETUP_TIMEOUT = 120.0
#: Seconds a whole placement may take before it is abandoned.
PLACEMENT_TIMEOUT = 600.0
#: Messages per ``poll_batch``.
POLL_MAX = 4096


def sh(command: str) -> None:
    subprocess.run(["bash", "-c", command], check=True)


def spawn_host(number: int, command: list[str], log: Path) -> subprocess.Popen[str]:
    """Runs ``command`` in a new network namespace whose ``eth0`` is 10.9.0.NUMBER on the bridge."""
    setup = (
        "echo ready; while ! ip link show eth0 >/dev/null 2>&1; do sleep 0.02; done; ip link set lo up && "
        f'ip addr add 10.9.0.{number}/24 dev eth0 && ip link set eth0 up && exec "$@" >{shlex.quote(str(log))} 2>&1'
    )
    child = subprocess.Popen(
        ["unshare", "-n", "bash", "-c", setup, "host", *command],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    sh(
        f"ip link add vh{number} type veth peer name eth0 netns {child.pid} && "
        f"ip link set vh{number} master br0 && ip link set vh{number} up"
    )
    return child


def _payload_times(column: Any) -> tuple[Any, Any]:
    """Send times (ns) and phases of a ``large_binary`` column of fixed-size payloads (numpy)."""
    import numpy as np

    offsets = np.frombuffer(column.buffers()[1], dtype=np.int64)[column.offset : column.offset + len(column) + 1]
    data = np.frombuffer(column.buffers()[2], dtype=np.uint8)
    starts = offsets[:-1]
    stamps = data[starts[:, None] + np.arange(8)].copy().view("<i8").ravel()
    return stamps, data[starts + 8]


def consume(args: argparse.Namespace) -> int:
    """One consumer process: owns its primaries, then records each phase's deliveries."""
    import affinity
    import numpy as np
    from affinity.groups import GroupConsumer

    out = Path(args.out)
    latencies: dict[int, list[Any]] = {THROUGHPUT: [], LATENCY: []}
    windows: dict[int, list[int]] = {THROUGHPUT: [0, 0], LATENCY: [0, 0]}
    counts = {THROUGHPUT: 0, LATENCY: 0}
    with affinity.Client() as client:
        consumer = GroupConsumer(
            client, args.group, args.index, CONSUMERS, auto_ack=True, registry=args.registry, host=args.host
        )
        primaries = [q for q in range(QUEUES) if q % CONSUMERS == args.index]
        deadline = time.monotonic() + SETUP_TIMEOUT
        while sorted(consumer.owned_queues()) != primaries:
            if time.monotonic() > deadline:
                raise SystemExit(f"consumer {args.index} never owned its primaries {primaries}")
            time.sleep(0.05)
        (out.parent / f"ready{args.index}").touch()
        last = ready = time.monotonic()
        while True:
            batch = consumer.poll_batch(POLL_MAX, 0.05)
            now = time.time_ns()
            if batch.num_rows == 0:
                idle = time.monotonic() - last
                if (counts[LATENCY] and idle > IDLE_EXIT) or time.monotonic() - ready > PLACEMENT_TIMEOUT:
                    break
                continue
            last = time.monotonic()
            stamps, phases = _payload_times(batch.column("payload"))
            for phase in (THROUGHPUT, LATENCY):
                mask = phases == phase
                taken = int(mask.sum())
                if not taken:
                    continue
                counts[phase] += taken
                latencies[phase].append(now - stamps[mask])
                window = windows[phase]
                window[0] = window[0] or now
                window[1] = now
        consumer.close()
    for phase, name in ((THROUGHPUT, "throughput"), (LATENCY, "latency")):
        values = np.concatenate(latencies[phase]) if latencies[phase] else np.zeros(0, dtype=np.int64)
        np.save(out.parent / f"{name}{args.index}.npy", values)
    out.write_text(json.dumps({"counts": counts, "windows": windows}))
    return 0


def publish(args: argparse.Namespace) -> int:
    """The publisher: waits until every queue has an owner, then runs both phases."""
    import affinity
    import numpy as np
    import pyarrow as pa
    from affinity.groups import GroupPublisher

    keys = pa.array([f"account-{i}".encode() for i in range(KEYS)], type=pa.large_binary())

    def payloads(count: int, phase: int) -> Any:
        now = np.full(count, time.time_ns(), dtype="<i8").view(np.uint8).reshape(count, 8)
        body = np.zeros((count, PAYLOAD_BYTES), dtype=np.uint8)
        body[:, :8] = now
        body[:, 8] = phase
        flat = pa.py_buffer(body.tobytes())
        offsets = pa.py_buffer(np.arange(0, (count + 1) * PAYLOAD_BYTES, PAYLOAD_BYTES, dtype=np.int64).tobytes())
        return pa.Array.from_buffers(pa.large_binary(), count, [None, offsets, flat])

    summary: dict[str, Any] = {}
    with affinity.Client() as client:
        publisher = GroupPublisher(client, args.group, registry=args.registry, host=args.host)
        deadline = time.monotonic() + SETUP_TIMEOUT
        while not all(q.owner_id for q in publisher.status().queues):
            if time.monotonic() > deadline:
                raise SystemExit("the publisher never saw an owner for every queue")
            time.sleep(0.05)
        # Throughput: batches of 1,000 messages as fast as the group takes them.
        sent, started = 0, time.monotonic()
        while sent < args.count:
            n = min(1000, args.count - sent)
            taken = publisher.publish_batch(keys.slice(sent % (KEYS - n), n), payloads(n, THROUGHPUT))
            sent += taken
            if taken < n:
                if time.monotonic() - started > PLACEMENT_TIMEOUT:
                    raise SystemExit(f"throughput: only {sent} of {args.count} taken")
                time.sleep(0.0005)
        if not publisher.flush(SETUP_TIMEOUT):
            raise SystemExit("throughput: not everything acknowledged")
        summary["throughput_publish_s"] = time.monotonic() - started
        time.sleep(1.0)
        # Latency: --rate messages/s in 1 ms slices.
        total = int(args.rate * args.seconds)
        sent, started = 0, time.monotonic()
        while sent < total:
            due = min(total, int((time.monotonic() - started) * args.rate))
            while sent < due:
                n = min(due - sent, 1000)
                taken = publisher.publish_batch(keys.slice(sent % (KEYS - n), n), payloads(n, LATENCY))
                sent += taken
                if taken < n:
                    if time.monotonic() - started > args.seconds + SETUP_TIMEOUT:
                        raise SystemExit(f"latency: only {sent} of {total} taken")
                    time.sleep(0.0002)
            time.sleep(0.001)
        if not publisher.flush(SETUP_TIMEOUT):
            raise SystemExit("latency: not everything acknowledged")
        summary["latency_sent"] = sent
        publisher.close()
    print(json.dumps(summary), flush=True)
    return 0


def placement(args: argparse.Namespace, name: str, consumer_host: int, work: Path) -> dict[str, Any]:
    """Runs one placement (consumers on host ``consumer_host``) in a fresh registry; its result."""
    import numpy as np
    from affinity.groups import create_group

    folder = work / name.replace(" ", "-")
    folder.mkdir()
    registry = folder / "registry"
    group = "hosts"
    create_group(group, "__hosts__", QUEUES * 8, QUEUES, 64 << 20, registry)
    me = [sys.executable, str(Path(__file__).resolve())]
    common = ["--group", group, "--registry", str(registry)]
    consumer_address = f"10.9.0.{consumer_host}"
    host_command = []
    for index in range(CONSUMERS):
        run = [*me, "consume", *common, "--index", str(index), "--host", consumer_address]
        run += ["--out", str(folder / f"consumer{index}.json")]
        host_command.append(f"{shlex.join(run)} > {shlex.quote(str(folder / f'consumer{index}.log'))} 2>&1 &")
    publish_run = [*me, "publish", *common, "--host", PUBLISHER_HOST, "--count", str(args.count)]
    publish_run += ["--rate", str(args.rate), "--seconds", str(args.seconds)]
    wait_ready = " && ".join(f"[ -e {shlex.quote(str(folder / f'ready{i}'))} ]" for i in range(CONSUMERS))
    ready_loop = f"for i in $(seq {int(SETUP_TIMEOUT * 10)}); do {wait_ready} && break; sleep 0.1; done"
    if consumer_host == 2:
        script = "\n".join([*host_command, ready_loop, shlex.join(publish_run), "wait"])
        hosts = [spawn_host(2, ["bash", "-c", script], folder / "host2.log")]
    else:
        script = "\n".join([*host_command, "wait"])
        hosts = [spawn_host(3, ["bash", "-c", script], folder / "host3.log")]
        script = "\n".join([ready_loop, shlex.join(publish_run)])
        hosts.append(spawn_host(2, ["bash", "-c", script], folder / "host2.log"))
    try:
        for host in hosts:
            host.wait(timeout=PLACEMENT_TIMEOUT)
    finally:
        for host in hosts:
            if host.poll() is None:
                os.killpg(host.pid, signal.SIGKILL)  # the host's shell and every process it started
                host.wait()
    for number in (2, 3):
        subprocess.run(["ip", "link", "del", f"vh{number}"], capture_output=True, check=False)
    reports = []
    for index in range(CONSUMERS):
        path = folder / f"consumer{index}.json"
        if not path.exists():
            log = (folder / f"consumer{index}.log").read_text()[-2000:]
            raise SystemExit(f"{name}: consumer {index} wrote no report; its log:\n{log}")
        reports.append(json.loads(path.read_text()))
    result: dict[str, Any] = {"placement": name}
    for phase, key in ((THROUGHPUT, "throughput"), (LATENCY, "latency")):
        count = sum(r["counts"][str(phase)] for r in reports)
        first = min(r["windows"][str(phase)][0] for r in reports if r["windows"][str(phase)][0])
        last = max(r["windows"][str(phase)][1] for r in reports)
        values = np.sort(np.concatenate([np.load(folder / f"{key}{i}.npy") for i in range(CONSUMERS)]))
        result[f"{key}_received"] = count
        result[f"{key}_msgs_per_s"] = count / max((last - first) / 1e9, 1e-9)
        result[f"{key}_p50_ms"] = float(np.percentile(values, 50)) / 1e6
        result[f"{key}_p99_ms"] = float(np.percentile(values, 99)) / 1e6
    expected = {"throughput_received": args.count, "latency_received": int(args.rate * args.seconds)}
    for field, want in expected.items():
        if result[field] < want:
            raise SystemExit(f"{name}: {field} {result[field]} < {want} (lost messages?)")
    return result


def inside(args: argparse.Namespace) -> int:
    """The coordinator, inside the private namespace."""
    sh("ip link set lo up && ip link add br0 type bridge && ip addr add 10.9.0.1/24 dev br0 && ip link set br0 up")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-groups-hosts-") as temporary:
        work = Path(temporary)
        for run in range(args.runs):
            order = [("same host", 2), ("other host", 3)]
            (work / f"run{run}").mkdir()
            for name, host in order if run % 2 == 0 else order[::-1]:
                result = placement(args, name, host, work / f"run{run}")
                result.update(
                    run=run,
                    count=args.count,
                    rate=args.rate,
                    seconds=args.seconds,
                    load=os.getloadavg()[0],
                    at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                )
                print(json.dumps(result), flush=True)
                results.append(result)
                with RESULTS.open("a") as raw:
                    raw.write(json.dumps(result) + "\n")
    print_table(results)
    return 0


def _cell(values: list[float], fmt: str) -> str:
    return f"{format(statistics.median(values), fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def print_table(results: list[dict[str, Any]]) -> None:
    """Medians [min-max] per placement, as docs/benchmarks.md shows them."""
    print("| placement | throughput msg/s | latency p50 ms | latency p99 ms | runs |")
    print("|---|---|---|---|---|")
    for name in ("same host", "other host"):
        rows = [r for r in results if r["placement"] == name]
        if not rows:
            continue
        print(
            f"| {name} | {_cell([r['throughput_msgs_per_s'] for r in rows], ',.0f')} "
            f"| {_cell([r['latency_p50_ms'] for r in rows], '.2f')} "
            f"| {_cell([r['latency_p99_ms'] for r in rows], '.2f')} | {len(rows)} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", nargs="?", default="run", choices=("run", "inside", "consume", "publish"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=200_000, help="messages of the throughput phase")
    parser.add_argument("--rate", type=int, default=2_000, help="messages/s of the latency phase")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of the latency phase")
    parser.add_argument("--group")
    parser.add_argument("--registry")
    parser.add_argument("--index", type=int)
    parser.add_argument("--host")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if args.role == "consume":
        return consume(args)
    if args.role == "publish":
        return publish(args)
    if args.role == "inside":
        return inside(args)
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        print("bench_groups_hosts.py needs root, ip (iproute2) and unshare (util-linux)", file=sys.stderr)
        return 2
    if args.runs < 1 or args.count < 1000 or args.rate < 1 or args.seconds <= 0:
        print("--runs >= 1, --count >= 1000, --rate >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    command = [sys.executable, str(Path(__file__).resolve()), "inside", "--runs", str(args.runs)]
    command += ["--count", str(args.count), "--rate", str(args.rate), "--seconds", str(args.seconds)]
    return subprocess.run(["unshare", "-n", *command], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
