"""CPU an idle ``affinity router`` process uses: one router (its embedded driver included) with one
subscriber connected (heartbeats every 100 ms both ways) and nothing else flowing.

    python benches/idle_router_cpu.py [--seconds 5] [--label NAME]

Starts ``affinity router --config examples/services.conf`` on a loopback port, connects a
``Subscriber`` from this process, waits 2 s, then reads the router process's CPU time
and wake-ups (``/proc/PID/task/*/schedstat``, every thread) over ``--seconds``; prints
one JSON line per figure. Which build is measured is whichever ``affinity`` Python imports
(``PYTHONPATH`` may point at another copy of the package: the router process inherits it).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import affinity
from affinity.subjects import Subscriber
from affinity.testing import loopback_channel

CONFIG = Path(__file__).resolve().parent.parent / "examples" / "services.conf"
#: Seconds the router runs before the window opens (start-up, the subscriber's first heartbeats).
SETTLE = 2.0


def schedstat(pid: int) -> tuple[float, int]:
    """CPU seconds run and times scheduled in (its wake-ups), summed over every thread of ``pid``
    (``/proc/PID/task/*/schedstat``: nanoseconds run, nanoseconds waiting, time slices)."""
    run_ns, slices = 0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "schedstat").read_text().split()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        run_ns, slices = run_ns + int(fields[0]), slices + int(fields[2])
    return run_ns / 1e9, slices


def main() -> None:
    """Runs the router, measures it idle, stops it."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    listen = loopback_channel()
    command = [sys.executable, "-m", "affinity.cli", "router", "--config", str(CONFIG), "--listen", listen]
    router = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with affinity.Client() as client:
            subscriber = Subscriber(client, router=listen)
            time.sleep(SETTLE)
            if router.poll() is not None:
                raise SystemExit(f"the router exited with {router.returncode}")
            (cpu, woken), start = schedstat(router.pid), time.monotonic()
            time.sleep(args.seconds)
            elapsed = time.monotonic() - start
            cpu_after, woken_after = schedstat(router.pid)
            cpu, woken = cpu_after - cpu, woken_after - woken
            subscriber.close()
    finally:
        router.send_signal(signal.SIGTERM)
        router.wait(timeout=30)
    note = f"{args.seconds:g} s, one subscriber connected, nothing flowing; {affinity.__file__}"
    for measurement, value, unit in (
        ("idle router process CPU", 100 * cpu / elapsed, "% of a core"),
        ("idle router process wake-ups", woken / elapsed, "per second"),
    ):
        line = {"bench": "idle_router", "label": args.label, "measurement": measurement}
        print(json.dumps({**line, "value": round(value, 1), "unit": unit, "note": note}))


if __name__ == "__main__":
    main()
