"""Renders the raw JSON lines of ``benches/run_all.sh`` as markdown tables (every table, not only
the transport one; the name is kept because the docs and scripts call it by it)::

    python benches/transport_table.py transport [benches/results/transport.jsonl]
    python benches/transport_table.py routing|multicast|ipc|groups|router|spark [RAW]
    python benches/transport_table.py udp-share RAW   # benches/media_driver_udp.sh's JSON lines
    python benches/transport_table.py udp-cpu RAW     # the same rows: CPU per GB by thread
    python benches/transport_table.py udp [RAW]       # the same, run by run_all.sh (harness records)

Each table says its command, date, commit, machine, the load before and during the runs and
the number of runs, and gives every figure as ``median [min-max]`` over the runs. The raw file
starts with one ``"meta": true`` record (``harness.py meta``); every other line is one result
of one run with its load fields (``harness.py run``). Runs that failed or timed out are listed
under the table, never dropped silently.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SETUPS = ("invoker", "shared-yield", "shared-spin")
DEFAULT_MTU = 1408
#: A run during which other processes used less CPU than this (in cores) counts as quiet.
QUIET_CORES = 0.3

Row = dict[str, object]


@dataclass(frozen=True)
class Raw:
    """One table's raw file: the meta record and the result rows."""

    meta: Row
    rows: list[Row]

    @property
    def ok(self) -> list[Row]:
        return [row for row in self.rows if not row.get("failed")]

    @property
    def failed(self) -> list[Row]:
        return [row for row in self.rows if row.get("failed")]


def load(path: Path) -> Raw:
    meta: Row = {}
    rows: list[Row] = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("meta"):
            meta = record
        else:
            rows.append(record)
    return Raw(meta, rows)


def number(row: Row, key: str) -> float:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise KeyError(f"{key} is not a number in {row}")
    return float(value)


def text(row: Row, key: str, default: str = "") -> str:
    value = row.get(key, default)
    return value if isinstance(value, str) else str(value)


def spread(values: Sequence[float], digits: int = 2, scale: float = 1.0) -> str:
    """``median [min-max]`` of ``values / scale``."""
    scaled = [v / scale for v in values]
    if not scaled:
        return "—"
    median = statistics.median(scaled)
    if len(scaled) == 1:
        return f"{median:.{digits}f}"
    return f"{median:.{digits}f} [{min(scaled):.{digits}f}-{max(scaled):.{digits}f}]"


def header(raw: Raw) -> list[str]:
    """The lines that say how, when and under what load the table was measured."""
    meta = raw.meta
    # One entry per run of a command (a command may print many results).
    runs: dict[tuple[str, str, str], Row] = {}
    for row in raw.rows:
        runs.setdefault((text(row, "label"), text(row, "run"), text(row, "started")), row)
    rows = list(runs.values())
    lines = []
    if meta:
        lines.append(
            f"- Command: `{text(meta, 'command').strip()}`; started {text(meta, 'date')}, "
            f"commit `{text(meta, 'commit')}`."
        )
        lines.append(
            f"- Machine: nproc {text(meta, 'nproc')}, {text(meta, 'cpu')}, Linux {text(meta, 'kernel')}, "
            f"Python {text(meta, 'python')}; release builds."
        )
    if rows:
        before = [number(r, "load1_before") for r in rows]
        during = [number(r, "load1_during_max") for r in rows]
        runnable = [number(r, "runnable_during_mean") for r in rows]
        lines.append(
            f"- Load average (1 min) before the runs {min(before):.2f}-{max(before):.2f}, highest while they ran "
            f"{max(during):.2f}; runnable threads while running (includes the benchmark's own) mean "
            f"{statistics.mean(runnable):.1f}, highest run mean {max(runnable):.1f}."
        )
        others = [number(r, "other_cores_during") for r in rows if "other_cores_during" in r]
        if others:
            quiet = sum(1 for v in others if v < QUIET_CORES)
            lines.append(
                f"- CPU used by other processes while a run ran (cores of {text(raw.meta, 'nproc', '?')}): mean "
                f"{statistics.mean(others):.2f}, max {max(others):.2f}; {quiet} of {len(others)} runs had less than "
                f"{QUIET_CORES} cores of other work (quiet)."
            )
    if meta:
        lines.append(
            f"- n = {text(meta, 'runs')} runs per figure ({text(meta, 'headline_runs')} for headline rows); "
            "figures are median [min-max] over the runs."
        )
    return lines


def failures(raw: Raw) -> list[str]:
    if not raw.failed:
        return []
    lines = ["", f"**{len(raw.failed)} run(s) failed or timed out** (not in the figures):", ""]
    for row in raw.failed:
        command = row.get("command")
        shown = " ".join(str(part) for part in command) if isinstance(command, list) else ""
        where = f"- `{text(row, 'label')}` run {text(row, 'run')}: status {text(row, 'status')}"
        lines.append(f"{where}: `{shown[:160]}` {text(row, 'error')[:200]}")
    return lines


def mtu_of(row: Row) -> int:
    for param in text(row, "params").split("|"):
        name, _, value = param.partition("=")
        if name == "mtu" and value.isdigit():
            return int(value)
    return DEFAULT_MTU


def api_name(row: Row) -> str:
    if row.get("lang") == "rust":
        return "Rust offer" if number(row, "pub_batch") == 1 else "Rust offer_batch(256)"
    name = {
        "offer": "Python offer",
        "batch": "Python offer_batch(list of 256)",
        "arrow": "Python offer_batch(pyarrow 256)",
    }[text(row, "api")]
    return name + (", Rust sub" if row.get("sub") == "rust" else "")


def transport(raw: Raw) -> list[str]:
    ceilings: dict[tuple[int, int], list[float]] = defaultdict(list)
    ceiling_rows: dict[tuple[int, int], list[Row]] = defaultdict(list)
    throughput: dict[tuple[str, int, int, str], list[float]] = defaultdict(list)
    latency: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
    for row in raw.ok:
        bench = row.get("bench")
        if bench == "ceiling":
            key = (int(number(row, "payload")), int(number(row, "mtu")))
            ceilings[key].append(number(row, "msgs_per_sec"))
            ceiling_rows[key].append(row)
        elif bench == "throughput":
            size = int(number(row, "size"))
            throughput[(api_name(row), size, mtu_of(row), text(row, "label"))].append(number(row, "msgs_per_sec"))
        elif bench == "pingpong":
            lang = "Rust" if row.get("lang") == "rust" else "Python"
            latency[(lang, text(row, "label"), mtu_of(row))].append(row)
    out = header(raw)
    out += [
        "",
        "Throughput, messages/s (M/s), median [min-max]; (R c) after a cell: R = its median divided by the "
        "loopback ceiling of the same payload and MTU measured in the same run. MB/s of payload = M/s x size.",
        "",
        "| publisher API | size | MTU | " + " | ".join(SETUPS) + " |",
        "|---|---|---|" + "---|" * len(SETUPS),
    ]
    apis = sorted({key[0] for key in throughput}, key=lambda a: (not a.startswith("Rust"), a))
    for mtu in sorted({key[2] for key in throughput}):
        for api in apis:
            for size in (32, 1024):
                cells = []
                for setup in SETUPS:
                    values = throughput.get((api, size, mtu, setup), [])
                    if not values:
                        cells.append("—")
                        continue
                    cell = f"{spread(values, 2, 1e6)} (n={len(values)})"
                    ceiling = ceilings.get((size, mtu))
                    if ceiling:
                        cell += f" ({statistics.median(values) / statistics.median(ceiling):.2f} c)"
                    cells.append(cell)
                if any(cell != "—" for cell in cells):
                    out.append(f"| {api} | {size} B | {mtu} | " + " | ".join(cells) + " |")
    if ceilings:
        out += [
            "",
            "Loopback ceiling (`loopback-ceiling`: bare `sendmmsg`/`recvmmsg`, two processes, full datagrams, "
            "no protocol, only a count sent back so nothing is dropped), same run:",
            "",
            "| payload | MTU | frames/datagram | datagram | messages/s (M/s) | datagrams/s (k/s) | MB/s payload"
            " | lost |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for (payload, mtu), rows in sorted(ceiling_rows.items(), key=lambda item: (item[0][1], item[0][0])):
            first = rows[0]
            out.append(
                f"| {payload} B | {mtu} | {text(first, 'frames_per_datagram')} | {text(first, 'datagram')} B | "
                f"{spread([number(r, 'msgs_per_sec') for r in rows], 2, 1e6)} (n={len(rows)}) | "
                f"{spread([number(r, 'datagrams_per_sec') for r in rows], 0, 1e3)} | "
                f"{spread([number(r, 'mb_per_sec') for r in rows], 0)} | "
                f"{spread([number(r, 'lost_fraction') * 100 for r in rows], 0)} % |"
            )
    if latency:
        out += [
            "",
            "Ping-pong round trip, 32 B, one message in flight (µs; median [min-max] of the per-run percentiles):",
            "",
            "| ping-pong | setup | MTU | p50 µs | p99 µs | p99.9 µs | samples/run | runs |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for lang in ("Rust", "Python"):
            for setup in SETUPS:
                for mtu in sorted({key[2] for key in latency}):
                    rows = latency.get((lang, setup, mtu), [])
                    if rows:
                        cells = [spread([number(r, key) for r in rows], 1) for key in ("p50_us", "p99_us", "p99_9_us")]
                        samples = statistics.median(number(r, "samples") for r in rows)
                        out.append(
                            f"| {lang} | {setup} | {mtu} | " + " | ".join(cells) + f" | {samples:.0f} | {len(rows)} |"
                        )
    return out + failures(raw)


Measurement = tuple[str, float, str]


def routing_measurements(row: Row) -> Iterable[Measurement]:
    lang = "Rust" if row.get("label") == "rust" else "Python"
    yield f"{lang}: {text(row, 'measurement')}", number(row, "median_mps"), "M/s"


def groups_measurements(row: Row) -> Iterable[Measurement]:
    if row.get("bench") == "groups-throughput":
        yield (
            "keyed throughput, group (publish_batch → 8 queues → 2 consumers)",
            number(row, "group_msgs_per_s") / 1e6,
            "M/s",
        )
        yield "same payloads, plain publication → 1 subscriber (ceiling)", number(row, "plain_msgs_per_s") / 1e6, "M/s"
        yield "group / plain", number(row, "ratio"), "ratio"
    elif row.get("bench") == "groups-failover":
        yield "failover after SIGKILL, p50", number(row, "failover_p50_ms"), "ms"
        yield "failover after SIGKILL, p99", number(row, "failover_p99_ms"), "ms"
        yield "planned handoff pause, p50", number(row, "handoff_pause_p50_ms"), "ms"
        yield "planned handoff pause, p99", number(row, "handoff_pause_p99_ms"), "ms"


def ipc_measurements(row: Row) -> Iterable[Measurement]:
    size = text(row, "size")
    if "received_per_s" in row:
        yield (
            f"Python offer_batch(pyarrow 8192) → poll_batch(as_arrow), {size} B",
            number(row, "received_per_s") / 1e6,
            "M/s",
        )
    elif row.get("role") == "subscribe" or "rate" in row:
        yield f"Rust affinity-ipc publish → subscribe, {size} B", number(row, "rate") / 1e6, "M/s"


def direct_measurements(row: Row) -> Iterable[Measurement]:
    """Rows that carry ``measurement``, ``value`` and ``unit`` themselves."""
    yield text(row, "measurement"), number(row, "value"), text(row, "unit")


def spark_measurements(row: Row) -> Iterable[Measurement]:
    for key, value in row.items():
        if key.endswith("rows_per_s") and isinstance(value, int | float):
            yield f"{text(row, 'path', text(row, 'label'))}: {key}", float(value), "rows/s"


def generic(raw: Raw, extract: Callable[[Row], Iterable[Measurement]]) -> list[str]:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row in raw.ok:
        for name, value, unit in extract(row):
            values[(name, unit)].append(value)
    out = [*header(raw), "", "| measurement | unit | median [min-max] | n |", "|---|---|---|---|"]
    for (name, unit), measured in values.items():
        digits = 0 if unit in ("ms", "rows/s", "/s", "µs") else 2
        out.append(f"| {name} | {unit} | {spread(measured, digits)} | {len(measured)} |")
    return out + failures(raw)


def gap(raw: Raw) -> list[str]:
    """The reproducibility experiments (benches/repro_gap.sh): one row per variant and figure,
    with the CPU other processes used while the runs ran."""
    figures: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in raw.ok:
        if row.get("bench") == "pingpong":
            name = "Python ping-pong p50 (µs)"
        else:
            name = f"{api_name(row)} {text(row, 'size')} B (M/s)"
        figures[(text(row, "label"), name)].append(row)
    out = header(raw)
    out += [
        "",
        "| variant | figure | median [min-max] | n | other processes' CPU during (cores, mean) |",
        "|---|---|---|---|---|",
    ]
    for (label, name), rows in figures.items():
        if name.startswith("Python ping-pong"):
            value = spread([number(r, "p50_us") for r in rows], 1)
        else:
            value = spread([number(r, "msgs_per_sec") for r in rows], 2, 1e6)
        other = statistics.mean(number(r, "other_cores_during") for r in rows)
        out.append(f"| {label} | {name} | {value} | {len(rows)} | {other:.2f} |")
    return out + failures(raw)


#: The ceiling rows of ``benches/media_driver_udp.sh`` (loopback-ceiling with offload on).
CEILING_LABEL = "ceiling-offload"
#: The label suffix of the rows run with the previous build (``BASE_BIN``).
BASE_SUFFIX = "-base"
#: The label suffix of the rows run with pinned threads (``PIN=1``), compared to the unpinned.
PINNED_SUFFIX = "-pinned"


def udp_rate(row: Row) -> float:
    """Messages per second of one ``media_driver_udp.sh`` row (its ``result`` record)."""
    result = row.get("result")
    if not isinstance(result, dict):
        raise KeyError(f"no result record in {row}")
    return number(result, "rate" if "rate" in result else "msgs_per_sec")


def udp_round(row: Row) -> str:
    """The round of a ``media_driver_udp.sh`` row: under benches/harness.py (run_all.sh) each
    command is one round and ``"run"`` numbers it."""
    return text(row, "run") if "run" in row else text(row, "round")


def udp_share(raw: Raw) -> list[str]:
    """The standalone/embedded UDP rows of ``benches/media_driver_udp.sh`` as a share of the
    loopback ceiling (offload on) measured in the same round: messages per second over the
    ceiling's (its datagram rate times frames per datagram); at 1 KiB one message is one datagram,
    so this is also the share in bytes per second. With ``BASE_BIN`` rows, each build's ratio
    to the previous build per round too. Rows carrying a ``"set"`` (several runs kept in one
    raw file) get one table per set, in the file's order."""
    return per_set(raw, udp_share_of_one_run)


def per_set(raw: Raw, render_one: Callable[[Raw], list[str]]) -> list[str]:
    """``render_one`` of each ``"set"`` of rows in the file's order, each under its name (one
    table when no row names a set); a set it renders as nothing is left out."""
    sets = list(dict.fromkeys(row["set"] for row in raw.rows if "set" in row))
    if not sets:
        return render_one(raw)
    out: list[str] = []
    for name in sets:
        rendered = render_one(Raw(raw.meta, [row for row in raw.rows if row.get("set") == name]))
        if rendered:
            out += ["", f"set {name}:", "", *rendered]
    return out[1:]


def udp_share_of_one_run(raw: Raw) -> list[str]:
    """[`udp_share`] of the rows of one run of ``benches/media_driver_udp.sh``."""
    by_round: dict[tuple[str, int, str], float] = {}
    loads: dict[str, list[float]] = defaultdict(list)
    for row in raw.ok:
        key = (text(row, "driver"), int(number(row, "size")), udp_round(row))
        by_round[key] = udp_rate(row)
        loads[text(row, "driver")].append(number(row, "load"))
    sizes = sorted({size for _, size, _ in by_round})
    labels = list(dict.fromkeys(label for label, _, _ in by_round))
    out = [
        "| configuration | size (B) | M msg/s | MB/s (payload) | share of the ceiling | n | load before |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios: list[str] = []
    for size in sizes:
        for label in labels:
            rounds = sorted(r for lab, sz, r in by_round if lab == label and sz == size)
            if not rounds:
                continue
            rates = [by_round[(label, size, r)] for r in rounds]
            shares = [
                by_round[(label, size, r)] / by_round[(CEILING_LABEL, size, r)]
                for r in rounds
                if (CEILING_LABEL, size, r) in by_round
            ]
            share = spread(shares, 3) if label != CEILING_LABEL else "1"
            load_range = f"{min(loads[label]):.1f}-{max(loads[label]):.1f}"
            out.append(
                f"| {label} | {size} | {spread(rates, 3, 1e6)} | {spread([r * size for r in rates], 0, 1e6)} "
                f"| {share} | {len(rates)} | {load_range} |"
            )
            # Each variant against the row it varies, per round: the head over its base, the
            # pinned over the unpinned.
            for suffix, head_first in ((BASE_SUFFIX, True), (PINNED_SUFFIX, False)):
                if not label.endswith(suffix):
                    continue
                other = label[: -len(suffix)]
                top, bottom = (other, label) if head_first else (label, other)
                per_round = [
                    by_round[(top, size, r)] / by_round[(bottom, size, r)]
                    for r in rounds
                    if (other, size, r) in by_round
                ]
                if per_round:
                    ratios.append(f"| {top} ÷ {bottom} | {size} | {spread(per_round, 3)} | {len(per_round)} |")
    if ratios:
        out += ["", "| ratio per round (same minutes) | size (B) | median [min-max] | n |", "|---|---|---|---|"]
        out += ratios
    return out + failures(raw)


def udp_cpu(raw: Raw) -> list[str]:
    """Where the CPU of the standalone rows of ``benches/media_driver_udp.sh`` went, in
    CPU-seconds per GB of payload delivered: each driver thread's user and system time, the
    publisher's and subscriber's hot threads, and what half the loopback ceiling of the same
    round allows on the machine's cores (``cpus`` ÷ half the ceiling's bytes per second). The last
    line is that allowance less everything but the driver threads' user time: what their own
    work may cost for the row to reach half the ceiling. One table per ``"set"``."""
    return per_set(raw, udp_cpu_of_one_run)


def udp_cpu_of_one_run(raw: Raw) -> list[str]:
    """[`udp_cpu`] of the rows of one run of ``benches/media_driver_udp.sh``."""
    ceilings = {
        (int(number(row, "size")), udp_round(row)): udp_rate(row)
        for row in raw.ok
        if text(row, "driver") == CEILING_LABEL
    }
    parts: dict[tuple[str, int], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in raw.ok:
        threads, publisher, result = row.get("driver_threads"), row.get("publisher"), row.get("result")
        if not isinstance(threads, dict) or not isinstance(publisher, dict) or not isinstance(result, dict):
            continue
        size = int(number(row, "size"))
        ceiling = ceilings.get((size, udp_round(row)))
        if ceiling is None:
            continue
        gigabytes = number(result, "messages") * size / 1e9
        per_gb = parts[(text(row, "driver"), size)]
        spent = 0.0
        for name, cpu in sorted(threads.items()):
            for kind in ("user", "system"):
                seconds = number(cpu, kind)
                per_gb[f"driver {name}, {kind}"].append(seconds / gigabytes)
                spent += seconds if kind == "system" else 0.0
        for role, record in (("publisher", publisher), ("subscriber", result)):
            per_gb[f"{role} (its hot thread)"].append(number(record, "cpu_seconds") / gigabytes)
            spent += number(record, "cpu_seconds")
        allowance = number(row, "cpus") / (ceiling * size / 2 / 1e9)
        per_gb["half the ceiling allows (cpus ÷ half its bytes/s)"].append(allowance)
        per_gb["left for the driver threads' user time"].append(allowance - spent / gigabytes)
    if not parts:
        return []
    out = ["| configuration | size (B) | part | CPU-s per GB, median [min-max] | n |", "|---|---|---|---|---|"]
    for (label, size), figures in parts.items():
        for part, values in figures.items():
            # A thread that did nothing (the conductor, the main thread) is left out.
            if part.startswith("driver ") and max(values) < 0.005:
                continue
            out.append(f"| {label} | {size} | {part} | {spread(values, 3)} | {len(values)} |")
    return out + failures(raw)


RENDERERS: dict[str, Callable[[Raw], list[str]]] = {
    "gap": gap,
    "udp-share": udp_share,
    "udp-cpu": udp_cpu,
    "udp": lambda raw: [*header(raw), "", *udp_share(raw)],
    "transport": transport,
    "routing": lambda raw: generic(raw, routing_measurements),
    "groups": lambda raw: generic(raw, groups_measurements),
    "ipc": lambda raw: generic(raw, ipc_measurements),
    "multicast": lambda raw: generic(raw, direct_measurements),
    "router": lambda raw: generic(raw, direct_measurements),
    "spark": lambda raw: generic(raw, spark_measurements),
}


def render(table: str, path: Path) -> str:
    return "\n".join(RENDERERS[table](load(path))) + "\n"


def main(argv: Sequence[str]) -> int:
    if len(argv) < 1 or argv[0] not in RENDERERS:
        print(f"usage: transport_table.py {{{'|'.join(RENDERERS)}}} [RAW.jsonl]", file=sys.stderr)
        return 2
    table = argv[0]
    path = Path(argv[1]) if len(argv) > 1 else RESULTS / f"{table}.jsonl"
    sys.stdout.write(render(table, path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
