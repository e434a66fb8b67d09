"""Transport benchmarks from Python over loopback UDP, publisher and subscriber in two processes.

Each command prints one JSON line::

    python benches/bench_transport.py throughput --api offer --size 32 --count 1000000
    python benches/bench_transport.py throughput --api batch --size 1024 --count 200000
    python benches/bench_transport.py throughput --api arrow --size 32 --count 2000000
    python benches/bench_transport.py pingpong --size 32 --count 20000 --mode invoker

``throughput`` runs the publisher here (``offer`` one message per call, ``offer_batch`` of a
list, or ``offer_batch`` of a pyarrow binary array) and the subscriber as a child process
(``bench_transport.py sub``, or the Rust ``affinity-bench throughput-sub`` with ``--sub-exe``);
the subscriber reports the rate over the messages after the warm-up (wall time from the first
measured message to the last). ``pingpong`` runs ``ping`` here and ``pong`` as a child process.

``--params mtu=65504`` appends channel parameters to the loopback channels; ``--pub-cpu N`` /
``--sub-cpu N`` pin the publisher (or ping) and the subscriber (or pong) process to one CPU
(``os.sched_setaffinity``), for the placement experiments in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import time
from typing import Any

import affinity

STREAM = 1001


def free_channel(params: str = "") -> str:
    """A loopback channel on a port the OS just handed out, with ``params`` appended."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"aeron:udp?endpoint=127.0.0.1:{port}" + (f"|{params}" if params else "")


def pin(cpu: int) -> None:
    """Pins this process to one CPU (a negative number leaves it where the scheduler puts it)."""
    if cpu >= 0:
        os.sched_setaffinity(0, {cpu})


def make_client(args: argparse.Namespace) -> affinity.Client:
    return affinity.Client(threading=args.mode, idle=args.idle)


def make_idle(args: argparse.Namespace, client: affinity.Client) -> Any:
    """What the benchmark thread does when a poll or an offer made no progress."""
    if args.mode == "invoker":
        return client.do_work
    if args.app_idle == "yield":
        return os.sched_yield
    return lambda: None


def wait_connected(client: affinity.Client, publication: affinity.Publication) -> None:
    deadline = time.monotonic() + 10
    while not publication.is_connected:
        if time.monotonic() > deadline:
            raise SystemExit("the publication never connected")
        client.do_work()
        time.sleep(0.0001)


def run_sub(args: argparse.Namespace) -> dict[str, Any]:
    """Receives warmup + count messages; the rate covers those after the warm-up."""
    pin(args.sub_cpu)
    client = make_client(args)
    subscription = client.add_subscription(args.channel, STREAM)
    idle = make_idle(args, client)
    poll_batch = subscription.poll_batch
    total = args.warmup + args.count
    received = 0
    size = 0
    start: tuple[int, int] | None = None
    last = time.perf_counter_ns()
    deadline = time.monotonic() + args.max_seconds
    while received < total:
        messages = poll_batch(4096)
        if not messages:
            if time.monotonic() > deadline:
                raise SystemExit(f"sub: timed out after {received} of {total} messages")
            idle()
            continue
        last = time.perf_counter_ns()
        received += len(messages)
        size = len(messages[-1])
        if start is None and received >= args.warmup:
            start = (last, received)
    first, at_start = start if start is not None else (last, 0)
    count = received - at_start
    seconds = max((last - first) / 1e9, 1e-9)
    rate = count / seconds
    client.close()
    return {
        "role": "sub",
        "mode": args.mode,
        "size": size,
        "messages": count,
        "seconds": round(seconds, 6),
        "msgs_per_sec": round(rate),
        "mb_per_sec": round(rate * size / 1e6, 2),
    }


def sub_command(args: argparse.Namespace, channel: str) -> list[str]:
    common = ["--mode", args.mode, "--idle", args.idle, "--app-idle", args.app_idle]
    counts = ["--count", str(args.count), "--warmup", str(args.warmup)]
    if args.sub_exe:
        command = [args.sub_exe, "throughput-sub", "--channel", channel, *counts, *common]
        return (["taskset", "-c", str(args.sub_cpu)] if args.sub_cpu >= 0 else []) + command
    common += ["--sub-cpu", str(args.sub_cpu)]
    script = os.path.abspath(__file__)
    return [sys.executable, script, "sub", "--channel", channel, *counts, *common]


def run_throughput(args: argparse.Namespace) -> dict[str, Any]:
    """Publisher here, subscriber in a child process."""
    channel = free_channel(args.params)
    child = subprocess.Popen(sub_command(args, channel), stdout=subprocess.PIPE, text=True)
    try:
        publisher = publish(args, channel, child)
    except BaseException:
        child.kill()
        raise
    out, _ = child.communicate(timeout=args.max_seconds)
    if child.returncode != 0 or not out.strip():
        raise SystemExit(f"the subscriber failed ({child.returncode}): {out}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    del result["role"]
    result = {"bench": "throughput", "lang": "python", "api": args.api, **result}
    result["sub"] = "rust" if args.sub_exe else "python"
    result["params"] = args.params
    result.update({f"pub_{key}": value for key, value in publisher.items()})
    return result


def publish(args: argparse.Namespace, channel: str, child: subprocess.Popen[str]) -> dict[str, Any]:
    pin(args.pub_cpu)
    client = make_client(args)
    publication = client.add_publication(channel, STREAM)
    wait_connected(client, publication)
    idle = make_idle(args, client)
    total = args.warmup + args.count
    payload = bytes([0xA5]) * args.size
    sent = 0
    refusals = 0
    deadline = time.monotonic() + args.max_seconds
    started = time.perf_counter()
    if args.api == "offer":
        offer = publication.offer
        while sent < total:
            if offer(payload) > 0:
                sent += 1
            else:
                refusals += 1
                idle()
                if refusals & 0xFFFF == 0 and time.monotonic() > deadline:
                    raise SystemExit(f"pub: timed out after {sent} of {total}")
    else:
        if args.api == "arrow":
            import pyarrow as pa

            batch: Any = pa.array([payload] * args.batch, type=pa.binary())
        else:
            batch = [payload] * args.batch
        offer_batch = publication.offer_batch
        # Whole batches are offered each time (the tail of a refused one is offered again as
        # part of the next), so up to one batch more than warmup + count may be sent.
        while sent < total:
            taken = offer_batch(batch)
            sent += taken
            if taken < args.batch:
                refusals += 1
                idle()
                if refusals & 0xFFF == 0 and time.monotonic() > deadline:
                    raise SystemExit(f"pub: timed out after {sent} of {total}")
    offer_seconds = time.perf_counter() - started
    # Keep the driver going until the subscriber has everything.
    while child.poll() is None:
        if time.monotonic() > deadline:
            child.kill()
            raise SystemExit("the subscriber did not finish in time")
        if client.do_work() == 0:
            time.sleep(0.00005)
    client.close()
    return {
        "batch": 1 if args.api == "offer" else args.batch,
        "offered": sent,
        "offer_seconds": round(offer_seconds, 6),
        "refusals": refusals,
    }


def run_pong(args: argparse.Namespace) -> None:
    """Echoes what arrives on --channel-in to --channel-out until idle for --max-seconds."""
    pin(args.sub_cpu)
    client = make_client(args)
    subscription = client.add_subscription(args.channel_in, STREAM)
    publication = client.add_publication(args.channel_out, STREAM)
    idle = make_idle(args, client)
    last = time.monotonic()
    while True:
        messages = subscription.poll_batch(16)
        if not messages:
            if time.monotonic() - last > args.max_seconds:
                return
            idle()
            continue
        last = time.monotonic()
        for message in messages:
            while publication.offer(message) <= 0:
                idle()


def run_pingpong(args: argparse.Namespace) -> dict[str, Any]:
    """Ping here, pong in a child process; one message in flight at a time."""
    out_channel, back_channel = free_channel(args.params), free_channel(args.params)
    script = os.path.abspath(__file__)
    command = [sys.executable, script, "pong", "--channel-in", out_channel]
    command += ["--channel-out", back_channel, "--mode", args.mode, "--idle", args.idle]
    command += ["--app-idle", args.app_idle, "--max-seconds", "10", "--sub-cpu", str(args.sub_cpu)]
    child = subprocess.Popen(command)
    try:
        return ping(args, out_channel, back_channel)
    finally:
        child.kill()
        child.wait()


def ping(args: argparse.Namespace, out_channel: str, back_channel: str) -> dict[str, Any]:
    pin(args.pub_cpu)
    client = make_client(args)
    subscription = client.add_subscription(back_channel, STREAM)
    publication = client.add_publication(out_channel, STREAM)
    wait_connected(client, publication)
    idle = make_idle(args, client)
    padding = bytes(max(args.size, 8) - 8)
    deadline = time.monotonic() + args.max_seconds
    rtts: list[int] = []
    measure_start = 0.0
    clock = time.perf_counter_ns
    for sequence in range(args.warmup + args.count):
        message = struct.pack("<Q", sequence) + padding
        sent_at = clock()
        while publication.offer(message) <= 0:
            idle()
        echoed = -1
        while echoed != sequence:
            for reply in subscription.poll_batch(16):
                echoed = struct.unpack_from("<Q", reply)[0]
            if echoed != sequence:
                if time.monotonic() > deadline:
                    raise SystemExit(f"ping: no echo of {sequence}")
                idle()
        if sequence >= args.warmup:
            rtts.append(clock() - sent_at)
            now = time.monotonic()
            measure_start = measure_start or now
            if now - measure_start > args.budget_ms / 1000:
                break
    client.close()
    rtts.sort()

    def percentile(p: float) -> float:
        return round(rtts[round(p / 100 * (len(rtts) - 1))] / 1000, 1) if rtts else 0.0

    return {
        "bench": "pingpong",
        "lang": "python",
        "mode": args.mode,
        "size": max(args.size, 8),
        "samples": len(rtts),
        "p50_us": percentile(50),
        "p99_us": percentile(99),
        "p99_9_us": percentile(99.9),
        "max_us": percentile(100),
        "mean_us": round(sum(rtts) / max(len(rtts), 1) / 1000, 1),
        "params": args.params,
    }


def parser() -> argparse.ArgumentParser:
    formatter = argparse.RawTextHelpFormatter
    top = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    commands = top.add_subparsers(dest="command", required=True)
    for name in ("sub", "throughput", "pong", "pingpong"):
        command = commands.add_parser(name)
        command.add_argument("--mode", choices=["shared", "invoker"], default="invoker")
        command.add_argument("--idle", choices=["backoff", "yield", "busy-spin"], default="backoff")
        command.add_argument("--app-idle", choices=["spin", "yield"], default="spin")
        command.add_argument("--max-seconds", type=float, default=20)
        command.add_argument("--size", type=int, default=32)
        command.add_argument("--count", type=int, default=100_000)
        command.add_argument("--warmup", type=int, default=-1, help="default: count / 10")
        command.add_argument("--params", default="", help="channel parameters, e.g. mtu=65504")
        command.add_argument("--pub-cpu", type=int, default=-1, help="pin the publisher/ping")
        command.add_argument("--sub-cpu", type=int, default=-1, help="pin the subscriber/pong")
    sub, throughput = commands.choices["sub"], commands.choices["throughput"]
    sub.add_argument("--channel", required=True)
    throughput.add_argument("--api", choices=["offer", "batch", "arrow"], default="offer")
    throughput.add_argument("--batch", type=int, default=256)
    throughput.add_argument("--sub-exe", default="", help="a Rust affinity-bench for the sub")
    pong = commands.choices["pong"]
    pong.add_argument("--channel-in", required=True)
    pong.add_argument("--channel-out", required=True)
    commands.choices["pingpong"].add_argument("--budget-ms", type=int, default=5000)
    return top


def main() -> None:
    args = parser().parse_args()
    if args.warmup < 0:
        args.warmup = args.count // 10
    if args.command == "sub":
        print(json.dumps(run_sub(args)), flush=True)
    elif args.command == "throughput":
        print(json.dumps(run_throughput(args)), flush=True)
    elif args.command == "pong":
        run_pong(args)
    else:
        print(json.dumps(run_pingpong(args)), flush=True)


if __name__ == "__main__":
    main()
