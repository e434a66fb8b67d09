"""Runs one benchmark command, bounded in time, and records what it printed with the machine load.

Used by ``benches/run_all.sh``; every run appends JSON lines to ``benches/results/<table>.jsonl``::

    python benches/harness.py meta --table transport --runs 3 --command "bash benches/run_all.sh"
    python benches/harness.py run --table transport --label invoker --run 1 --timeout 60 -- CMD...
    python benches/harness.py check-extension

``run`` reads ``/proc/loadavg`` before the command and samples it every 0.5 s while the command
runs (a background thread); it also measures how many cores' worth of CPU *other* processes used
while the command ran (``/proc/stat`` busy time minus the CPU time of the command's process tree,
``other_cores_during``), the figure that tells a loaded run from a quiet one (the 1-minute load
average lags by a minute). With ``--wait-quiet S`` it first waits, at most S seconds, until other
processes use less than ``--quiet-threshold`` cores. It then appends one record per JSON object the command printed on
stdout (or per line of the Rust routing bench's text output, ``--parse routing-text``), each with
the label, the run number and the load fields. A command that fails, times out or prints no
result appends a record with ``"failed": true`` so the rendered table shows the gap.

``check-extension`` exits non-zero, saying why, when the installed ``affinity._affinity`` is a
debug build (it carries DWARF ``.debug_info`` sections: the dev profile) or is older than the
Rust sources it is built from.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(os.environ.get("BENCH_RESULTS", str(ROOT / "benches" / "results")))
#: Seconds between two samples of /proc/loadavg while a command runs.
SAMPLE_INTERVAL = 0.5
ROUTING_LINE = re.compile(r"^(?P<name>.+?)\s+median\s+(?P<median>[\d.]+) M/s\s+runs \[(?P<runs>[^\]]*)\]$")


@dataclass(frozen=True)
class LoadSample:
    """One reading of /proc/loadavg: the 1-minute average and the runnable entities now."""

    load1: float
    runnable: int

    @staticmethod
    def read() -> LoadSample:
        fields = Path("/proc/loadavg").read_text().split()
        return LoadSample(float(fields[0]), int(fields[3].split("/")[0]))


def cpu_fields() -> list[int]:
    """The first line of /proc/stat: user nice system idle iowait irq softirq steal (ticks)."""
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def busy_seconds() -> float:
    """CPU seconds this machine's CPUs spent busy since boot (all but idle, iowait and steal)."""
    fields = cpu_fields()
    return (sum(fields) - fields[3] - fields[4] - fields[7]) / os.sysconf("SC_CLK_TCK")


def steal_seconds() -> float:
    """CPU seconds the hypervisor gave to someone else while this VM wanted them (steal time)."""
    return cpu_fields()[7] / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds used by this process's waited-for children (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def other_cores(window: float) -> float:
    """Cores' worth of CPU that something else than this process used over ``window`` seconds."""
    busy, own = busy_seconds(), time.process_time()
    time.sleep(window)
    return max(0.0, (busy_seconds() - busy - (time.process_time() - own)) / window)


def wait_quiet(limit: float, threshold: float) -> tuple[float, float]:
    """Waits (at most ``limit`` s) until other processes use less than ``threshold`` cores over
    half a second; returns (seconds waited, the last reading)."""
    start = time.monotonic()
    reading = other_cores(0.5)
    while reading > threshold and time.monotonic() - start < limit:
        reading = other_cores(0.5)
    return time.monotonic() - start, reading


@dataclass
class LoadSampler:
    """Samples /proc/loadavg in a background thread until stopped."""

    samples: list[LoadSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            self.samples.append(LoadSample.read())

    def __enter__(self) -> LoadSampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(LoadSample.read())


def git_commit() -> str:
    """The commit the tree is at, with ``+dirty`` when it has uncommitted changes."""

    def git(*args: str) -> str:
        result = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
        return result.stdout.strip()

    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    # Uncommitted changes to what is measured (the results files themselves do not count).
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "rust", "python", "benches", ":!benches/results")
    return commit + ("+dirty" if dirty else "")


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def parse_output(text: str, parser: str) -> Iterator[dict[str, object]]:
    """The result records in a command's stdout."""
    for line in text.splitlines():
        line = line.strip()
        if parser == "json":
            if line.startswith("{"):
                try:
                    value = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    yield value
        else:
            match = ROUTING_LINE.match(line)
            if match:
                runs = [float(v) for v in match["runs"].split(",") if v.strip()]
                yield {"measurement": match["name"], "median_mps": float(match["median"]), "inner_runs_mps": runs}


def run(args: argparse.Namespace) -> int:
    """Runs the command once and appends its records; returns the command's exit status."""
    waited, other_before = wait_quiet(args.wait_quiet, args.quiet_threshold) if args.wait_quiet > 0 else (0.0, -1.0)
    before = LoadSample.read()
    started = now_utc()
    busy0, own0, steal0 = busy_seconds(), children_cpu_seconds() + time.process_time(), steal_seconds()
    t0 = time.monotonic()
    status: int | str
    stdout = stderr = ""
    with LoadSampler() as sampler:
        # A session of its own, so a timeout ends the command's children too.
        process = subprocess.Popen(
            args.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            stdout, stderr = process.communicate(timeout=args.timeout)
            status = process.returncode
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            status = f"timeout after {args.timeout:.0f} s"
    elapsed = time.monotonic() - t0
    own = children_cpu_seconds() + time.process_time() - own0
    other_during = max(0.0, (busy_seconds() - busy0 - own) / max(elapsed, 1e-3))
    steal_during = (steal_seconds() - steal0) / max(elapsed, 1e-3)
    during = sampler.samples or [before]
    common: dict[str, object] = {
        "table": args.table,
        "label": args.label,
        "run": args.run,
        "started": started,
        "elapsed_s": round(elapsed, 3),
        "load1_before": before.load1,
        "runnable_before": before.runnable,
        "load1_during_max": max(s.load1 for s in during),
        "runnable_during_mean": round(sum(s.runnable for s in during) / len(during), 2),
        "waited_quiet_s": round(waited, 1),
        "other_cores_before": round(other_before, 2),
        "other_cores_during": round(other_during, 2),
        "steal_cores_during": round(steal_during, 2),
        "commit": args.commit or git_commit(),
    }
    records = list(parse_output(stdout, args.parse)) if status == 0 else []
    path = RESULTS / f"{args.table}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        if not records:
            tail = (stderr or stdout).strip().splitlines()[-3:]
            failure = {**common, "failed": True, "status": status, "command": args.command, "error": " | ".join(tail)}
            out.write(json.dumps(failure) + "\n")
            print(f"FAILED [{args.table}/{args.label}] status {status}: {' '.join(args.command)}", file=sys.stderr)
            for line in tail:
                print(f"    {line}", file=sys.stderr)
            return 1
        for record in records:
            out.write(json.dumps({**common, **record}) + "\n")
    summary = json.dumps(records[-1])[:150]
    print(f"[{args.table}/{args.label} #{args.run} load {before.load1:.2f}->{common['load1_during_max']}] {summary}")
    return 0


def meta(args: argparse.Namespace) -> int:
    """Starts a table's raw file with one record describing the machine and the command."""
    path = RESULTS / f"{args.table}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "meta": True,
        "table": args.table,
        "date": now_utc(),
        "commit": git_commit(),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "runs": args.runs,
        "headline_runs": args.headline_runs,
        "command": args.command,
        "load1_before": LoadSample.read().load1,
    }
    path.write_text(json.dumps(record) + "\n")
    return 0


def elf_section_names(data: bytes) -> set[str]:
    """Section names of a 64-bit little-endian ELF file (empty for anything else)."""
    if data[:6] != b"\x7fELF\x02\x01":
        return set()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        return set()
    strtab = shoff + shstrndx * shentsize
    (names_offset,) = struct.unpack_from("<Q", data, strtab + 0x18)
    names = set()
    for index in range(shnum):
        (name,) = struct.unpack_from("<I", data, shoff + index * shentsize)
        end = data.find(b"\0", names_offset + name)
        names.add(data[names_offset + name : end].decode(errors="replace"))
    return names


def extension_problem() -> str | None:
    """Why the installed extension must not be benchmarked, or None when it is a fresh release build."""
    try:
        import affinity._affinity as extension
    except ImportError as error:
        return f"the affinity extension is not installed ({error}); run `maturin develop --release`"
    path = Path(extension.__file__ or "")
    if ".debug_info" in elf_section_names(path.read_bytes()):
        return (
            f"{path} is a debug build (it has DWARF .debug_info sections, as the dev profile makes): "
            "benchmark figures from it are meaningless; run `maturin develop --release`"
        )
    # The library's sources: the top crate's and the layer crates' under rust/crates (the binaries
    # under src/bin are not part of the extension).
    roots = [ROOT / "rust" / "src", *(ROOT / "rust" / "crates").glob("*/src")]
    sources = [p for root in roots for p in root.rglob("*.rs") if "bin" not in p.relative_to(root).parts]
    newest = max((p.stat().st_mtime for p in sources), default=0.0)
    if path.is_relative_to(ROOT) and newest > path.stat().st_mtime + 1:
        return f"{path} is older than the library sources under rust/; run `maturin develop --release`"
    return None


def check_extension(_: argparse.Namespace) -> int:
    problem = extension_problem()
    if problem:
        print(f"harness: refusing to benchmark: {problem}", file=sys.stderr)
        return 1
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = top.add_subparsers(dest="command_name", required=True)
    one = commands.add_parser("run", help="run one command and record its results")
    one.add_argument("--table", required=True)
    one.add_argument("--label", default="")
    one.add_argument("--run", type=int, default=1)
    one.add_argument("--timeout", type=float, default=120.0)
    one.add_argument("--parse", choices=["json", "routing-text"], default="json")
    one.add_argument("--commit", default="", help="default: git rev-parse HEAD")
    one.add_argument("--wait-quiet", type=float, default=0.0, help="wait up to this long for a quiet machine")
    one.add_argument("--quiet-threshold", type=float, default=0.3, help="cores other processes may use")
    one.add_argument("command", nargs=argparse.REMAINDER)
    head = commands.add_parser("meta", help="start a table's raw file")
    head.add_argument("--table", required=True)
    head.add_argument("--runs", type=int, required=True)
    head.add_argument("--headline-runs", type=int, required=True)
    head.add_argument("--command", required=True)
    commands.add_parser("check-extension", help="fail on a debug or stale build of the extension")
    return top


def main() -> int:
    args = parser().parse_args()
    if args.command_name == "run":
        if args.command and args.command[0] == "--":
            args.command = args.command[1:]
        if not args.command:
            raise SystemExit("harness run: no command after --")
        return run(args)
    if args.command_name == "meta":
        return meta(args)
    return check_extension(args)


if __name__ == "__main__":
    sys.exit(main())
