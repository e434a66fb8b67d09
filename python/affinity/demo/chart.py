"""The demo's PNG chart (matplotlib, Agg): throughput, per-consumer load and latency over time."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from affinity.demo.orchestrator import DemoResult

#: Bins averaged in the throughput and load panels: Spark's micro-batches arrive in bursts, so a
#: single one-second bin mostly shows when batches happened to land.
SMOOTHING_BINS = 3
#: Size of the chart in inches, and its resolution.
FIGURE_SIZE = (13.0, 9.0)
DPI = 110
KILL_COLOR = "#d62728"
JOIN_COLOR = "#2ca02c"
HANDOFF_COLOR = "#17becf"
#: Legends sit right of the panels, where they hide no data.
OUTSIDE_LEGEND: dict[str, object] = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8}


def _mark_events(axes: Axes, result: DemoResult, label: bool) -> None:
    for event in result.events:
        color = KILL_COLOR if event.kind == "kill" else JOIN_COLOR
        axes.axvline(event.at, color=color, linestyle="--", linewidth=1.5)
        if label:
            text = (
                f"SIGKILL c{event.consumer}"
                if event.kind == "kill"
                else f"c{event.consumer} joins (index {event.index})"
            )
            axes.annotate(
                text,
                xy=(event.at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(4, -14),
                textcoords="offset points",
                color=color,
                fontsize=9,
                fontweight="bold",
            )


def moving_average(values: np.ndarray, window: int) -> np.ndarray:
    """Centered moving average over ``window`` bins along the last axis (fewer bins at the edges)."""
    length = values.shape[-1]
    if window <= 1 or length == 0:
        return values
    half = window // 2
    index = np.arange(length)
    low = np.maximum(index - half, 0)
    high = np.minimum(index + half + 1, length)
    sums = np.concatenate([np.zeros((*values.shape[:-1], 1)), np.cumsum(values, axis=-1)], axis=-1)
    result: np.ndarray = (sums[..., high] - sums[..., low]) / (high - low)
    return result


def generated_rate(samples: list[tuple[float, int]], edges: np.ndarray) -> np.ndarray:
    """Events generated per second in each bin between ``edges``, from cumulative samples."""
    if len(samples) < 2:
        return np.zeros(max(len(edges) - 1, 0))
    times = np.array([s[0] for s in samples], dtype=float)
    counts = np.array([s[1] for s in samples], dtype=float)
    cumulative = np.interp(edges, times, counts)
    widths = np.diff(edges)
    rate: np.ndarray = np.diff(cumulative) / widths
    return rate


def write_chart(result: DemoResult, path: Path) -> None:
    """Writes the chart to ``path``."""
    timeline = result.validation.timeline
    bins = timeline.bins
    width = timeline.bin_seconds
    edges = np.arange(bins + 1, dtype=float) * width
    centers = edges[:-1] + width / 2
    consumers = sorted(timeline.per_consumer)
    per_consumer = np.array([timeline.per_consumer[c] for c in consumers], dtype=float).reshape(len(consumers), bins)
    per_consumer /= width
    raw_total = per_consumer.sum(axis=0) if consumers else np.zeros(bins)
    per_consumer = moving_average(per_consumer, SMOOTHING_BINS)
    total = moving_average(raw_total, SMOOTHING_BINS)
    smoothing = f"{SMOOTHING_BINS * width:g} s moving average"
    labels = {state.ordinal: f"c{state.ordinal} (index {state.index})" for state in result.consumers}

    figure, (throughput, load, latency) = plt.subplots(
        3, 1, figsize=FIGURE_SIZE, sharex=True, gridspec_kw={"height_ratios": [2, 3, 2]}
    )
    report = result.validation
    verdict = "PASS" if result.passed else "FAIL"
    source = "Spark Structured Streaming (format 'affinity')" if result.settings.spark else "GroupPublisher"
    figure.suptitle(
        f"affinity pipeline demo: {source} -> consumer group -> {result.settings.consumers} consumers\n"
        f"{result.generated:,} events, {result.settings.accounts:,} accounts: lost {report.lost}, "
        f"duplicated {report.duplicates}, order {'held' if report.order_held else 'BROKEN'} - {verdict}",
        fontsize=11,
        fontweight="bold",
    )

    generated = moving_average(generated_rate(result.generated_samples, edges), SMOOTHING_BINS)
    throughput.plot(centers, generated, color="#7f7f7f", label="generated (committed)")
    throughput.plot(centers, total, color="#1f77b4", linewidth=2, label="processed by consumers")
    throughput.set_ylabel("events/s")
    throughput.set_title(f"throughput ({smoothing})", loc="left", fontsize=10)
    throughput.legend(**OUTSIDE_LEGEND)
    throughput.set_ylim(bottom=0)
    _mark_events(throughput, result, label=True)

    if consumers:
        load.stackplot(centers, per_consumer, labels=[labels.get(c, f"c{c}") for c in consumers], alpha=0.85)
    load.set_ylabel("events/s")
    load.set_title(f"load per consumer, stacked ({smoothing})", loc="left", fontsize=10)
    load.set_ylim(bottom=0)
    _mark_events(load, result, label=False)
    # Queue moves as ticks along the top edge of the load panel.
    top = load.get_xaxis_transform()
    for move in report.moves:
        color = KILL_COLOR if move.cause.value == "failover" else HANDOFF_COLOR
        load.plot(move.at, 0.97, marker="v", color=color, transform=top, clip_on=False, markersize=7)
    load.plot([], [], marker="v", linestyle="", color=KILL_COLOR, label="queue moved\n(failover)")
    load.plot([], [], marker="v", linestyle="", color=HANDOFF_COLOR, label="queue moved\n(handoff)")
    load.legend(**OUTSIDE_LEGEND)

    empty = raw_total == 0
    latency.plot(centers, np.where(empty, np.nan, timeline.p50_ms), color="#9467bd", marker=".", label="p50")
    latency.plot(centers, np.where(empty, np.nan, timeline.p99_ms), color="#ff7f0e", marker=".", label="p99")
    latency.set_yscale("log")
    latency.set_ylabel("ms")
    latency.set_xlabel("seconds since the generator started")
    latency.set_title(
        f"latency generated -> consumed (overall p50 {report.latency.p50_ms:.1f} ms, "
        f"p99 {report.latency.p99_ms:.1f} ms)",
        loc="left",
        fontsize=10,
    )
    latency.legend(**OUTSIDE_LEGEND)
    _mark_events(latency, result, label=False)
    for axes in (throughput, load, latency):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=DPI)
    plt.close(figure)
