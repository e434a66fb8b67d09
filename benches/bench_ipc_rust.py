"""IPC through the standalone driver from Rust: ``affinity-driver``, ``affinity-ipc subscribe`` and
``affinity-ipc publish`` as three processes (the throughput command of docs/benchmarks.md,
"Media driver"). Prints the subscriber's JSON line with the size added::

    python benches/bench_ipc_rust.py --bin target/release --count 10000000 --size 32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

TIMEOUT_S = 120


def ready(process: subprocess.Popen[str], marker: str) -> None:
    """Waits for the line containing ``marker`` that the process prints once it is set up."""
    assert process.stdout is not None
    line = process.stdout.readline()
    if marker not in line:
        raise SystemExit(f"expected {marker!r} from {process.args!r}, got {line!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin", default="target/release", help="directory of the release binaries")
    parser.add_argument("--count", type=int, default=10_000_000)
    parser.add_argument("--size", type=int, default=32)
    args = parser.parse_args()
    binaries = Path(args.bin)
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="affinity-bench-", dir=shm) as tmp:
        directory = str(Path(tmp) / "driver")
        driver = subprocess.Popen(
            [str(binaries / "affinity-driver"), "--dir", directory], stdout=subprocess.PIPE, text=True
        )
        try:
            ready(driver, "ready")
            counts = ["--dir", directory, "--count", str(args.count), "--size", str(args.size)]
            subscriber = subprocess.Popen(
                [str(binaries / "affinity-ipc"), "subscribe", *counts], stdout=subprocess.PIPE, text=True
            )
            try:
                ready(subscriber, "ready")
                subprocess.run(
                    [str(binaries / "affinity-ipc"), "publish", *counts],
                    check=True,
                    timeout=TIMEOUT_S,
                    stdout=subprocess.DEVNULL,
                )
                out, _ = subscriber.communicate(timeout=TIMEOUT_S)
            finally:
                if subscriber.poll() is None:
                    subscriber.kill()
                    subscriber.wait()
            if subscriber.returncode != 0:
                raise SystemExit(f"the subscriber failed ({subscriber.returncode})")
            result = json.loads(out.strip().splitlines()[-1])
            print(json.dumps({"bench": "ipc-rust", "size": args.size, "count": args.count, **result}), flush=True)
        finally:
            driver.terminate()
            driver.wait(timeout=30)


if __name__ == "__main__":
    main()
