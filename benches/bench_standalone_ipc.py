"""IPC through the standalone driver from Python: ``affinity driver`` in one process, a publisher
(``offer_batch`` with a pyarrow binary array) and a subscriber (``poll_batch(as_arrow=True)``)
in two others, all attached with ``Client(dir=...)``. Prints one JSON line per run and the
median messages/s (subscriber side: first message to last).

    python benches/bench_standalone_ipc.py --count 5000000 --size 32 --runs 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TIMEOUT_S = 300

PUBLISHER = textwrap.dedent(
    """
    import sys, time
    import affinity, pyarrow as pa
    directory, count, size, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), 8192
    array = pa.array([bytes(size)] * batch, type=pa.binary())
    with affinity.Client(dir=directory) as client:
        publication = client.add_publication("aeron:ipc", 77)
        deadline = time.monotonic() + 60
        while not publication.is_connected:
            assert time.monotonic() < deadline, "no subscriber"
            time.sleep(0.001)
        sent, start = 0, time.perf_counter()
        while sent < count:
            sent += publication.offer_batch(array.slice(0, min(batch, count - sent)))
        elapsed = time.perf_counter() - start
        publication.close()
    print(sent / elapsed, flush=True)
    """
)

SUBSCRIBER = textwrap.dedent(
    """
    import sys, time
    import affinity
    directory, count = sys.argv[1], int(sys.argv[2])
    with affinity.Client(dir=directory) as client:
        subscription = client.add_subscription("aeron:ipc", 77)
        print("ready", flush=True)
        received, start = 0, None
        deadline = time.monotonic() + 240
        while received < count and time.monotonic() < deadline:
            n = len(subscription.poll_batch(65536, as_arrow=True))
            if n and start is None:
                start = time.perf_counter()
            received += n
        elapsed = time.perf_counter() - (start or time.perf_counter())
        subscription.close()
    print(received, received / elapsed if elapsed else 0.0, flush=True)
    """
)


def one_run(count: int, size: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as tmp:
        directory = str(Path(tmp) / "driver")
        driver = subprocess.Popen(
            [sys.executable, "-m", "affinity.cli", "driver", "--dir", directory],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert driver.stdout is not None and "ready in" in driver.stdout.readline()
            subscriber = subprocess.Popen(
                [sys.executable, "-c", SUBSCRIBER, directory, str(count)], stdout=subprocess.PIPE, text=True
            )
            assert subscriber.stdout is not None and subscriber.stdout.readline().strip() == "ready"
            publisher = subprocess.run(
                [sys.executable, "-c", PUBLISHER, directory, str(count), str(size)],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=True,
            )
            out, _ = subscriber.communicate(timeout=TIMEOUT_S)
            received, rate = out.split()
            if int(received) != count:
                raise RuntimeError(f"subscriber received {received} of {count}")
            return {"received_per_s": float(rate), "offered_per_s": float(publisher.stdout.strip())}
        finally:
            driver.terminate()
            driver.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rates = []
    for run in range(args.runs):
        result = one_run(args.count, args.size)
        print(json.dumps({"run": run, "size": args.size, "count": args.count, **result}), flush=True)
        rates.append(result["received_per_s"])
    print(f"median {statistics.median(rates) / 1e6:.2f} M msg/s received ({args.size} B, {args.runs} runs)")


if __name__ == "__main__":
    main()
