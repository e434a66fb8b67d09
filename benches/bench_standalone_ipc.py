"""IPC through the standalone driver, publisher and subscriber in separate processes.

Every run starts a fresh driver (``target/release/affinity-driver``, ``--threading shared``), a
subscriber (``affinity-ipc subscribe``, Rust, which counts and checks every message) and one
publisher, one of:

- ``rust-offer``: ``affinity-ipc publish``, one message per ``offer``;
- ``rust-batch``: ``affinity-ipc publish --batch 8192`` (``offer_batch``, one claim per 1,024);
- ``rust-exclusive``, ``rust-exclusive-batch``: the same into an exclusive publication
  (``--exclusive 1``: ``add_exclusive_publication``, one writer, no atomic add on the tail);
- ``py-offer``: Python ``Publication.offer`` in a loop;
- ``py-batch-list``: Python ``offer_batch`` with a list of 8,192 ``bytes``;
- ``py-batch-arrow``: Python ``offer_batch`` with a pyarrow ``binary`` array of 8,192;
- ``aeron-offer``: the peer, Aeron C's own driver and samples instead of this package: ``aeronmd``
  (``aeron.threading.mode=SHARED``, its default 64 MiB IPC terms), ``rate_subscriber`` and
  ``streaming_publisher -m COUNT -L SIZE`` (one message per ``aeron_publication_offer``), from the
  build directory ``--aeron-build`` names (``benches/aeron_ipc.sh`` says how to build it; nothing
  is downloaded). Its rate is the publisher's own ``Total:`` line (the publisher runs at most one
  term window, 32 MiB, ahead of the subscriber); the subscriber's count is checked to reach COUNT.
- ``aeron-exclusive``: the same with ``streaming_exclusive_publisher``, Aeron's sample changed to
  an exclusive publication (``aeron_exclusive_publication_offer``; Aeron's samples have no such
  option: ``benches/aeron_ipc.sh`` says how it is made from ``streaming_publisher.c``).

``--batch`` sets the ``offer_batch`` size of ``rust-batch`` and the Python batch cases.

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
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

TIMEOUT_S = 300
BATCH = 8192
AERON_CASE = "aeron-offer"
"""The peer every ratio is taken against: Aeron C's driver and samples, a concurrent publication."""
AERON_EXCLUSIVE_CASE = "aeron-exclusive"
"""The second peer, with its own ratio column: Aeron's exclusive publication."""
AERON_PUBLISHERS = {AERON_CASE: "streaming_publisher", AERON_EXCLUSIVE_CASE: "streaming_exclusive_publisher"}
"""The cases run through Aeron C's driver and samples rather than this package, and their publisher."""
RUST_PUBLISHER_FLAGS = {
    "rust-offer": [],
    "rust-batch": ["--batch"],
    "rust-exclusive": ["--exclusive", "1"],
    "rust-exclusive-batch": ["--exclusive", "1", "--batch"],
}
"""``affinity-ipc publish`` options per Rust case (``--batch`` is followed by the batch size)."""
AERON_BINARIES = "binaries"
"""Where ``aeronmd`` and the C samples are under an Aeron CMake build directory."""
AERON_START_S = 20.0
"""How long Aeron's driver may take to create its CnC file, and its subscriber to drain."""
AERON_TOTAL = re.compile(r"^Total: (\d+)ms, ([0-9.e+]+) msgs/sec")
"""Aeron's ``streaming_publisher`` summary: ``Total: 1234ms, 2.1e+07 msgs/sec, ...``."""
AERON_TOTALS = re.compile(r"totals (\d+) messages")
"""Aeron's ``rate_subscriber`` report, once a second: ``..., totals 123 messages 4 MB payloads``."""
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


def aeron_binary(build: Path, name: str) -> str:
    """The path of Aeron's `name` under the CMake build directory `build`, checked to exist."""
    path = build / AERON_BINARIES / name
    if not os.access(path, os.X_OK):
        raise SystemExit(f"--aeron-build {build}: no executable {path} (build aeronmd and the C samples first)")
    return str(path)


def aeron_run(build: Path, count: int, size: int, case: str = AERON_CASE) -> dict[str, Any]:
    """One run of Aeron C's own driver and samples over ``aeron:ipc``: fresh ``aeronmd`` (SHARED),
    ``rate_subscriber``, then `case`'s publisher of `count` messages of `size` bytes."""
    aeronmd, subscriber_bin, publisher_bin = (
        aeron_binary(build, name) for name in ("aeronmd", "rate_subscriber", AERON_PUBLISHERS[case])
    )
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        directory = str(Path(tmp) / "aeron")
        driver = subprocess.Popen(
            [aeronmd, f"-Daeron.dir={directory}", "-Daeron.threading.mode=SHARED"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        subscriber: subprocess.Popen[str] | None = None
        try:
            deadline = time.monotonic() + AERON_START_S
            while not (Path(directory) / "cnc.dat").exists():
                if driver.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"aeronmd did not start: {driver.stderr.read() if driver.stderr else ''}")
                time.sleep(0.01)
            # Line-buffered, so that its once-a-second reports arrive while it runs.
            subscriber = subprocess.Popen(
                ["stdbuf", "-oL", subscriber_bin, "-p", directory, "-c", "aeron:ipc", "-s", str(STREAM_ID)],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert subscriber.stdout is not None
            reports: list[str] = []
            for line in subscriber.stdout:
                if line.startswith("Subscription channel status"):
                    break
            else:
                raise RuntimeError("rate_subscriber exited before subscribing")
            reader = _LineReader(subscriber.stdout, reports)
            load_before = load_average()
            driver_cpu_before = process_cpu_seconds(driver.pid)
            subscriber_cpu_before = process_cpu_seconds(subscriber.pid)
            window_start = time.perf_counter()
            stream = ["-p", directory, "-c", "aeron:ipc", "-s", str(STREAM_ID)]
            publisher = subprocess.Popen(
                [publisher_bin, *stream, "-m", str(count), "-L", str(size)],
                stdout=subprocess.PIPE,
                text=True,
            )
            # Reaped by hand for its resource usage (CPU time of all its threads); killed when
            # it outlives the run timeout.
            watchdog = threading.Timer(TIMEOUT_S, publisher.kill)
            watchdog.start()
            try:
                assert publisher.stdout is not None
                out = publisher.stdout.read()
                _, status, usage = os.wait4(publisher.pid, 0)
            finally:
                watchdog.cancel()
            publisher.returncode = os.waitstatus_to_exitcode(status)
            if publisher.returncode != 0:
                raise RuntimeError(f"streaming_publisher failed ({publisher.returncode}): {out!r}")
            totals = [AERON_TOTAL.match(line) for line in out.splitlines()]
            total = next((m for m in totals if m is not None), None)
            if total is None:
                raise RuntimeError(f"no Total line from streaming_publisher: {out!r}")
            # The subscriber's CPU until the publisher's last offer (it is at most one term
            # window behind), not its spinning while its once-a-second report comes.
            subscriber_cpu_after = process_cpu_seconds(subscriber.pid)
            received = reader.wait_for(count, AERON_START_S)
            driver_cpu_after = process_cpu_seconds(driver.pid)
            window_seconds = time.perf_counter() - window_start
            if received != count:
                raise RuntimeError(f"rate_subscriber reported {received} of {count} messages")
            publisher_seconds = int(total.group(1)) / 1e3
            publisher_cpu = usage.ru_utime + usage.ru_stime
            driver_cpu = subscriber_cpu = None
            if driver_cpu_before is not None and driver_cpu_after is not None:
                driver_cpu = round(driver_cpu_after - driver_cpu_before, 6)
            if subscriber_cpu_before is not None and subscriber_cpu_after is not None:
                subscriber_cpu = subscriber_cpu_after - subscriber_cpu_before
            return {
                # Aeron's subscriber reports once a second: its rate is not timed to the message.
                "received_per_s": None,
                "offered_per_s": float(total.group(2)),
                "offered_seconds": publisher_seconds,
                "subscriber_cpu_rate": round(count / subscriber_cpu) if subscriber_cpu else None,
                # The whole publisher process (its start and connection included, all threads).
                "publisher_cpu_rate": round(count / publisher_cpu) if publisher_cpu else None,
                "driver_cpu_seconds": driver_cpu,
                "driver_cpu_window_seconds": round(window_seconds, 6),
                "load_before": load_before,
                "load_after": load_average(),
            }
        finally:
            if subscriber is not None:
                subscriber.send_signal(signal.SIGINT)
                try:
                    subscriber.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    subscriber.kill()
                    subscriber.wait()
            driver.send_signal(signal.SIGINT)
            try:
                driver.wait(timeout=30)
            except subprocess.TimeoutExpired:
                driver.kill()
                driver.wait()


class _LineReader:
    """Reads Aeron's ``rate_subscriber`` reports on a thread; the last ``totals`` count wins."""

    def __init__(self, stream: Any, lines: list[str]) -> None:
        self._lines = lines
        self._totals = 0
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            match = AERON_TOTALS.search(line)
            with self._changed:
                self._lines.append(line)
                if match is not None:
                    self._totals = int(match.group(1))
                self._changed.notify_all()

    def wait_for(self, count: int, timeout: float) -> int:
        """The subscriber's count once it reaches `count`, or the last one after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._totals < count and time.monotonic() < deadline:
                self._changed.wait(timeout=max(deadline - time.monotonic(), 0.0))
            return self._totals


def one_run(
    binaries: Path, subscriber_ipc: Path | None, case: str, count: int, size: int, batch_size: int = BATCH
) -> dict[str, Any]:
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
                flags = RUST_PUBLISHER_FLAGS[case] + ([str(batch_size)] if case.endswith("batch") else [])
                command = [ipc, "publish", "--dir", directory, "--count", str(count), "--size", str(size), *flags]
            else:
                command = [sys.executable, "-c", PUBLISHER, directory, str(count), str(size), case, str(batch_size)]
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
                # Refused offers and empty polls (builds before they were counted report none).
                "publisher_idle_calls": sent.get("idle_calls"),
                "subscriber_idle_calls": received.get("idle_calls"),
                "driver_cpu_seconds": driver_cpu,
                "driver_cpu_seconds_total": driver_cpu_after,
                "driver_cpu_window_seconds": round(window_seconds, 6),
                "load_before": load_before,
                "load_after": load_average(),
            }
        finally:
            driver.terminate()
            driver.communicate(timeout=30)


def summarize(lines: list[dict[str, Any]]) -> str:
    """Median [min-max] per label, case and size of the publisher's rate (wall clock, first offer
    to last), the subscriber's, and the publisher's messages per CPU-second (independent of the
    machine's load); the load over the runs; and each group's ratios of medians to the Aeron
    group of the same size, by wall clock and per publisher CPU-second (publisher rates: Aeron's
    subscriber does not time its messages). Failed runs are counted, not averaged."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for line in lines:
        groups.setdefault((line.get("label", ""), line["case"], line["size"]), []).append(line)

    def values(runs: list[dict[str, Any]], key: str) -> list[float]:
        return [r[key] / 1e6 for r in runs if not r.get("failed") and r.get(key)]

    def spread(numbers: list[float]) -> str:
        return f"{statistics.median(numbers):6.2f} [{min(numbers):.2f}-{max(numbers):.2f}]" if numbers else "   n/a"

    def ratio(numbers: list[float], peer: list[float]) -> str:
        return f"{statistics.median(numbers) / statistics.median(peer):.2f}x" if numbers and peer else "n/a"

    aeron = {size: runs for (_, case, size), runs in groups.items() if case == AERON_CASE}
    exclusive = {size: runs for (_, case, size), runs in groups.items() if case == AERON_EXCLUSIVE_CASE}
    rows = [
        "label      case                 size  n  offered M msg/s      received M msg/s     "
        "publisher M msg/CPU-s  load       x Aeron, wall / CPU  x Aeron exclusive"
    ]
    for (label, case, size), runs in sorted(
        groups.items(), key=lambda item: (item[0][2], item[0][1] not in AERON_PUBLISHERS, item[0][1])
    ):
        done = [r for r in runs if not r.get("failed")]
        offered, cpu = values(runs, "offered_per_s"), values(runs, "publisher_cpu_rate")
        peer, exclusive_peer = aeron.get(size, []), exclusive.get(size, [])
        loads = [r["load_before"] for r in done] + [r["load_after"] for r in done]
        load = f"{min(loads):.1f}-{max(loads):.1f}" if loads else "n/a"
        failed = f" ({len(runs) - len(done)} failed)" if len(done) < len(runs) else ""
        received = values(runs, "received_per_s")
        rows.append(
            f"{label:10} {case:20} {size:5} {len(done):2}  {spread(offered)}  {spread(received)}  "
            f"{spread(cpu)}  {load:10} {ratio(offered, values(peer, 'offered_per_s'))} / "
            f"{ratio(cpu, values(peer, 'publisher_cpu_rate'))}  "
            f"{ratio(offered, values(exclusive_peer, 'offered_per_s'))} / "
            f"{ratio(cpu, values(exclusive_peer, 'publisher_cpu_rate'))}{failed}"
        )
    return "\n".join(rows)


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
    parser.add_argument("--batch", type=int, default=BATCH, help="offer_batch size of the batch cases")
    parser.add_argument(
        "--aeron-build",
        type=Path,
        help=f"Aeron C CMake build directory (for the {AERON_CASE} case: {AERON_BINARIES}/aeronmd and the samples)",
    )
    parser.add_argument("--label", default="", help="recorded in every line (e.g. before / after)")
    parser.add_argument("--out", type=Path, help="append the JSON lines to this file")
    parser.add_argument(
        "--summarize",
        type=argparse.FileType("r"),
        help="print the summary of these JSON lines (a file, or - for stdin) and run nothing",
    )
    args = parser.parse_args()
    if args.summarize is not None:
        print(summarize([json.loads(line) for line in args.summarize if line.startswith("{")]))
        return
    summary: list[str] = []
    for size in (int(s) for s in args.sizes.split(",")):
        for case in args.cases.split(","):
            count = args.count if size <= 64 else max(args.count // 5, 1)
            if case == "py-offer":
                count = max(count // 5, 1)  # one Python call per message: a shorter run
            rates = []
            for run in range(args.runs):
                if case in AERON_PUBLISHERS:
                    if args.aeron_build is None:
                        raise SystemExit(f"the {case} case needs --aeron-build")
                    result = aeron_run(args.aeron_build, count, size, case)
                else:
                    result = one_run(args.binaries, args.subscriber_ipc, case, count, size, args.batch)
                line = {"label": args.label, "case": case, "size": size, "count": count, "run": run, **result}
                if case.endswith("batch") or case.startswith("py-batch"):
                    line["batch"] = args.batch
                text = json.dumps(line)
                print(text, flush=True)
                if args.out is not None:
                    with args.out.open("a") as out:
                        out.write(text + "\n")
                rates.append(result)
            # Aeron's subscriber does not time its messages: its publisher's rate stands in.
            received = [(r["received_per_s"] or r["offered_per_s"]) / 1e6 for r in rates]
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
