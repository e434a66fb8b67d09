"""The demo's summary: rich tables on the console, ``report.txt``, ``report.json`` and the chart."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from affinity.demo.chart import write_chart
from affinity.demo.orchestrator import DemoResult
from affinity.demo.settings import CHART_PNG, REPORT_JSON, REPORT_TEXT
from affinity.demo.validation import MoveCause, percentile

#: Width of report.txt.
TEXT_WIDTH = 110
#: The failover bounds the run's latency when the p99 of all events is more than this many times
#: the p99 outside the failover's seconds (below it, the steady state's tail decides the p99).
FAILOVER_BOUND_RATIO = 1.2


@dataclass(frozen=True)
class ReportFiles:
    """Where the report went."""

    folder: Path
    json: Path
    text: Path
    chart: Path


def _verdict(ok: bool, text: str) -> Text:
    return Text(text, style="bold green" if ok else "bold red")


def event_time_text(ns: int) -> str:
    """An event time (ns since the epoch) as UTC ISO 8601 to the microsecond, e.g. ``2026-11-23T21:10:00.000250Z``."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=UTC).replace(microsecond=nanos // 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def steady_bound(result: DemoResult) -> str:
    """What bounds the latency outside a failover: the publisher, or Spark's micro-batch cycle."""
    if not result.settings.spark:
        return "the consumers' poll and republish: the GroupPublisher sends each event at once"
    batches = sorted(result.spark_batch_ms)
    if not batches:
        return "Spark's micro-batches (no batch after the warm-up was timed)"
    sink = sorted(result.spark_sink_ms)
    return (
        f"Spark's micro-batches: an event waits for the next batch, then for its task "
        f"(batch start to commit p50 {percentile(batches, 0.5):,} ms, p99 {percentile(batches, 0.99):,} ms "
        f"over {len(batches)} batches; the tasks (source read, sink write) and commit p50 {percentile(sink, 0.5):,} ms)"
    )


def latency_bound(result: DemoResult) -> str:
    """One line saying what bounds the end-to-end latency of this run: the failover after the
    SIGKILL when the events of its seconds make the p99, else the steady state (:func:`steady_bound`)."""
    latency = result.validation.latency
    window, outside = latency.failover_window, latency.p99_outside_failover_ms
    if window is None or outside is None or latency.p99_ms <= FAILOVER_BOUND_RATIO * outside:
        return steady_bound(result)
    held = (
        f"; Spark's micro-batch writing to them waited for their acknowledgements (longest batch "
        f"{max(result.spark_batch_ms):,} ms) and every later event waited for it"
        if result.settings.spark and result.spark_batch_ms
        else ""
    )
    return (
        f"the failover after the SIGKILL (t={window[0]:.1f} s): the killed consumer's queues are held until the "
        f"survivors' liveness timeout ({result.settings.liveness * 1000:,.0f} ms, --liveness) and a claim{held}. "
        f"Outside "
        f"t={window[0]:.1f}-{window[1]:.1f} s the p99 is {outside:,.1f} ms, bounded by {steady_bound(result)}"
    )


def summary(result: DemoResult) -> RenderableType:
    """The summary tables: the checks, the consumers and the queue moves."""
    report = result.validation
    settings = result.settings
    checks = Table(title="pipeline demo: validation", title_justify="left", show_header=False)
    checks.add_column("what")
    checks.add_column("value", justify="right")
    source = "Spark Structured Streaming (local[2]) -> format('affinity')" if settings.spark else "GroupPublisher"
    checks.add_row("generator", source)
    if result.driver_pid is not None:
        checks.add_row(
            "media driver",
            f"one standalone affinity driver (pid {result.driver_pid}) under every process, "
            f"at most {result.driver_clients_peak} clients at once",
        )
    else:
        checks.add_row("media driver", "embedded, one in each process")
    checks.add_row("accounts (keys)", f"{settings.accounts:,}")
    checks.add_row("events generated", f"{result.generated:,} in {result.generation_seconds:.1f} s")
    checks.add_row("events processed (incl. replays)", f"{report.received:,}")
    checks.add_row("delivered", f"{report.delivered:,}")
    checks.add_row("lost", _verdict(report.lost == 0, f"{report.lost:,}"))
    checks.add_row("duplicated", _verdict(report.duplicates == 0, f"{report.duplicates:,}"))
    checks.add_row("per-key order", _verdict(report.order_held, "held" if report.order_held else "BROKEN"))
    checks.add_row("order errors (gaps, late arrivals)", f"{report.order_errors:,}")
    if report.unexpected:
        checks.add_row("unexpected records", _verdict(False, f"{report.unexpected:,}"))
    checks.add_row(
        "replayed after the SIGKILL (processed, never acked)",
        f"{report.failover_replays:,}",
    )
    checks.add_row(
        "latency generated -> consumed",
        f"p50 {report.latency.p50_ms:,.1f} ms   p99 {report.latency.p99_ms:,.1f} ms   "
        f"max {report.latency.max_ms:,.0f} ms",
    )
    checks.add_row("latency bounded by", latency_bound(result))
    if report.latency.warmup_events:
        checks.add_row("warm-up events (Spark's first batch, not in the latency)", f"{report.latency.warmup_events:,}")
    if report.last_event_ns:
        carried = "Spark TimestampType column" if settings.spark else "event field"
        checks.add_row(
            f"event times (UTC, {carried})",
            f"{event_time_text(report.first_event_ns)} .. {event_time_text(report.last_event_ns)}",
        )
    rate = result.generated / result.generation_seconds if result.generation_seconds > 0 else 0.0
    checks.add_row("throughput", f"{rate:,.0f} events/s over the generation")
    checks.add_row(
        "queue moved after the kill", _verdict(result.failover_seen, "yes" if result.failover_seen else "no")
    )
    checks.add_row(
        "queue moved to the new consumer", _verdict(result.rejoin_seen, "yes" if result.rejoin_seen else "no")
    )
    checks.add_row("run time, start to report", f"{result.wall_seconds:.0f} s")
    if result.interrupted_at is not None:
        verdict = f"INTERRUPTED at t={result.interrupted_at:.1f} s (Ctrl-C): partial report, no verdict"
    else:
        verdict = "PASS" if result.passed else "FAIL"
    checks.add_row("verdict", _verdict(result.passed, verdict))

    consumers = Table(title="consumers", title_justify="left")
    for column in ("consumer", "index", "started", "killed", "processed", "share"):
        consumers.add_column(column, justify="right" if column in ("processed", "share") else "left")
    total = max(report.received, 1)
    for state in result.consumers:
        processed = report.per_consumer.get(state.ordinal, 0)
        consumers.add_row(
            state.label,
            str(state.index),
            f"{state.started_at:.1f} s",
            f"{state.killed_at:.1f} s" if state.killed_at is not None else "-",
            f"{processed:,}",
            f"{processed * 100 / total:.1f}%",
        )

    moves = Table(title="queue moves (who processed each queue, from the records)", title_justify="left")
    for column in ("time", "queue", "from", "to", "cause", "keys moved", "replayed"):
        moves.add_column(column, justify="right" if column in ("time", "keys moved", "replayed") else "left")
    for move in report.moves:
        moves.add_row(
            f"{move.at:.2f} s",
            f"q{move.queue}",
            f"c{move.source}",
            f"c{move.target}",
            Text(move.cause.value, style="red" if move.cause == MoveCause.FAILOVER else "cyan"),
            f"{move.keys:,}",
            f"{move.replayed:,}",
        )
    parts: list[RenderableType] = [checks, consumers, moves]
    if report.errors:
        parts.append(Text("first errors:\n" + "\n".join(report.errors), style="red"))
    return Group(*parts)


def _json_default(value: object) -> object:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"cannot write {type(value).__name__} to the JSON report")


def result_json(result: DemoResult) -> str:
    """The whole result as JSON (settings, counts, moves, timeline, events)."""
    data = dataclasses.asdict(result)
    data["passed"] = result.passed
    data["interrupted"] = result.interrupted_at is not None
    data["failover_seen"] = result.failover_seen
    data["rejoin_seen"] = result.rejoin_seen
    data["validation"]["passed"] = result.validation.passed
    data["validation"]["order_held"] = result.validation.order_held
    return json.dumps(data, indent=2, default=_json_default)


def write_report(result: DemoResult, console: Console) -> ReportFiles:
    """Prints the summary and writes report.json, report.txt and the chart into the output folder."""
    folder = result.settings.out
    files = ReportFiles(folder, folder / REPORT_JSON, folder / REPORT_TEXT, folder / CHART_PNG)
    rendered = summary(result)
    console.print(rendered)
    files.json.write_text(result_json(result))
    with files.text.open("w") as text:
        Console(file=text, width=TEXT_WIDTH, color_system=None, force_terminal=False).print(rendered)
    write_chart(result, files.chart)
    return files
