"""IPC through the standalone driver, publisher and subscriber in separate processes.

Every run starts a fresh driver (``target/release/affinity-driver``, ``--threading shared``), a
subscriber (``affinity-ipc subscribe``, Rust, which counts and checks every message) and one
publisher, one of:

- ``rust-offer``: ``affinity-ipc publish``, one message per ``offer``;
- ``rust-batch``: ``affinity-ipc publish --batch 8192`` (``offer_batch``, one claim per 1,024);
- ``py-offer``: Python ``Publication.offer`` in a loop;
- ``py-batch-list``: Python ``offer_batch`` with a list of 8,192 ``bytes``;
- ``py-batch-arrow``: Python ``offer_batch`` with a pyarrow ``binary`` array of 8,192.

Rust publishers number their messages and the subscriber checks the order; Python publishers send
identical messages and the subscriber checks count and length (``--check length``). The rate is the
subscriber's, first message to last; each line also carries the publisher's own rate, the CPU time
of both hot threads (``cpu_rate``: messages per CPU-second, what each side does with a core of its
own, independent of the machine's load), the driver process's CPU-seconds from the publisher's
start to the subscriber's exit (``driver_cpu_seconds``, all its threads, from
``/proc/<pid>/task/*/schedstat``) and the load average before and after the run. One JSON
line per run goes to stdout and to ``--out``; then a median / min / max summary per case.

    cargo build --release --no-default-features --bin affinity-driver --bin affinity-ipc
    maturin develop --release
    python benches/bench_standalone_ipc.py --runs 3 --out /tmp/ipc.jsonl

``--out`` appends. ``benches/results/ipc.jsonl`` holds the runs of the current IPC table of
docs/benchmarks.md; a re-measurement replaces it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

TIMEOUT_S = 300
BATCH = 8192
ROOT = Path(__file__).resolve().parent.parent
STREAM_ID = 1001

PUBLISHER = textwrap.dedent(
    """
    import os, resource, sys, time
    import affinity
    directory, count, size, mode, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    if mode == "py-batch-arrow":
        import pyarrow as pa
        messages = pa.array([bytes(size)] * batch, type=pa.binary())
    else:
        messages = [bytes(size)] * batch
    payload = bytes(size)
    with affinity.Client(dir=directory) as client:
        publication = client.add_publication("aeron:ipc", int(sys.argv[6]))
        deadline = time.monotonic() + 60
        while not publication.is_connected:
            assert time.monotonic() < deadline, "no subscriber"
            time.sleep(0.001)
        sent, start = 0, time.perf_counter()
        cpu = time.thread_time()
        if mode == "py-offer":
            while sent < count:
                if publication.offer(payload) > 0:
                    sent += 1
        elif mode == "py-batch-arrow":
            while sent < count:
                sent += publication.offer_batch(messages.slice(0, min(batch, count - sent)))
        else:
            while sent < count:
                n = min(batch, count - sent)
                sent += publication.offer_batch(messages if n == batch else messages[:n])
        elapsed = time.perf_counter() - start
        cpu = time.thread_time() - cpu
        publication.close()
    print('{"role":"publish","messages":%d,"seconds":%.6f,"rate":%.0f,"cpu_seconds":%.6f,"cpu_rate":%.0f}'
          % (sent, elapsed, sent / elapsed, cpu, sent / max(cpu, 1e-9)), flush=True)
    """
)


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def process_cpu_seconds(pid: int) -> float | None:
    """CPU time of every live thread of `pid` so far (``/proc/<pid>/task/*/schedstat``, ns)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return sum(int((task / "schedstat").read_text().split()[0]) for task in tasks) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def json_line(text: str, role: str) -> dict[str, Any]:
    for line in text.splitlines():
        if line.startswith("{") and f'"role":"{role}"' in line:
            result: dict[str, Any] = json.loads(line)
            return result
    raise RuntimeError(f"no {role} result in {text!r}")


def one_run(binaries: Path, subscriber_ipc: Path | None, case: str, count: int, size: int) -> dict[str, Any]:
    ipc = str(binaries / "affinity-ipc")
    subscriber_command = str(subscriber_ipc or binaries / "affinity-ipc")
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        directory = str(Path(tmp) / "driver")
        driver = subprocess.Popen(
            [str(binaries / "affinity-driver"), "--dir", directory, "--threading", "shared"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert driver.stdout is not None and "ready" in driver.stdout.readline()
            check = [] if case.startswith("rust") else ["--check", "length"]
            subscriber = subprocess.Popen(
                [
                    subscriber_command,
                    "subscribe",
                    "--dir",
                    directory,
                    "--count",
                    str(count),
                    "--size",
                    str(size),
                    *check,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert subscriber.stdout is not None and subscriber.stdout.readline().strip() == "ready"
            load_before = load_average()
            driver_cpu_before = process_cpu_seconds(driver.pid)
            window_start = time.perf_counter()
            if case.startswith("rust"):
                batch = ["--batch", str(BATCH)] if case == "rust-batch" else []
                command = [ipc, "publish", "--dir", directory, "--count", str(count), "--size", str(size), *batch]
            else:
                command = [sys.executable, "-c", PUBLISHER, directory, str(count), str(size), case, str(BATCH)]
                command.append(str(STREAM_ID))
            publisher = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
            out, _ = subscriber.communicate(timeout=TIMEOUT_S)
            # The driver's threads while the publisher ran and the subscriber drained (the
            # conductor is the only busy one on aeron:ipc).
            driver_cpu_after = process_cpu_seconds(driver.pid)
            window_seconds = time.perf_counter() - window_start
            driver_cpu = None
            if driver_cpu_before is not None and driver_cpu_after is not None:
                driver_cpu = round(driver_cpu_after - driver_cpu_before, 6)
            if subscriber.returncode != 0:
                raise RuntimeError(f"subscriber failed: {out!r}")
            sent = json_line(publisher.stdout, "publish")
            received = json_line(out, "subscribe")
            if received["messages"] != count:
                raise RuntimeError(f"subscriber received {received['messages']} of {count}")
            return {
                "received_per_s": received["rate"],
                "offered_per_s": sent["rate"],
                # Builds before the CPU figures were added report none.
                "subscriber_cpu_rate": received.get("cpu_rate"),
                "publisher_cpu_rate": sent.get("cpu_rate"),
                "driver_cpu_seconds": driver_cpu,
                "driver_cpu_seconds_total": driver_cpu_after,
                "driver_cpu_window_seconds": round(window_seconds, 6),
                "load_before": load_before,
                "load_after": load_average(),
            }
        finally:
            driver.terminate()
            driver.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10_000_000, help="messages per run (32 B; 1 KiB: a fifth)")
    parser.add_argument("--sizes", default="32,1024")
    parser.add_argument("--cases", default="rust-offer,rust-batch,py-offer,py-batch-list,py-batch-arrow")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--binaries", type=Path, default=ROOT / "target" / "release")
    parser.add_argument(
        "--subscriber-ipc", type=Path, help="affinity-ipc for the subscriber (default: the one in --binaries)"
    )
    parser.add_argument("--label", default="", help="recorded in every line (e.g. before / after)")
    parser.add_argument("--out", type=Path, help="append the JSON lines to this file")
    args = parser.parse_args()
    summary: list[str] = []
    for size in (int(s) for s in args.sizes.split(",")):
        for case in args.cases.split(","):
            count = args.count if size <= 64 else max(args.count // 5, 1)
            if case == "py-offer":
                count = max(count // 5, 1)  # one Python call per message: a shorter run
            rates = []
            for run in range(args.runs):
                result = one_run(args.binaries, args.subscriber_ipc, case, count, size)
                line = {"label": args.label, "case": case, "size": size, "count": count, "run": run, **result}
                text = json.dumps(line)
                print(text, flush=True)
                if args.out is not None:
                    with args.out.open("a") as out:
                        out.write(text + "\n")
                rates.append(result)
            received = [r["received_per_s"] / 1e6 for r in rates]
            publisher_cpu = [r["publisher_cpu_rate"] / 1e6 for r in rates if r["publisher_cpu_rate"]]
            subscriber_cpu = [r["subscriber_cpu_rate"] / 1e6 for r in rates if r["subscriber_cpu_rate"]]
            cpu = "n/a"
            if publisher_cpu and subscriber_cpu:
                cpu = f"{statistics.median(publisher_cpu):.2f} M / {statistics.median(subscriber_cpu):.2f} M"
            loads = [f"{r['load_before']:.1f}->{r['load_after']:.1f}" for r in rates]
            driver_cpu = [r["driver_cpu_seconds"] for r in rates if r["driver_cpu_seconds"] is not None]
            if driver_cpu:
                spread = f"{min(driver_cpu):.3f}-{max(driver_cpu):.3f}"
                cpu += f"; driver CPU {statistics.median(driver_cpu):.3f} s/run ({spread})"
            summary.append(
                f"{args.label:8} {case:15} {size:5} B  median {statistics.median(received):6.2f} M msg/s "
                f"(min {min(received):.2f}, max {max(received):.2f}); per CPU-second publisher / subscriber "
                f"{cpu}; load {', '.join(loads)}"
            )
    print("\n".join(summary))


if __name__ == "__main__":
    main()
