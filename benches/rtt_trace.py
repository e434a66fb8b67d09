"""Where the tail of the round trips comes from: reads the two files of
`affinity-bench run-pingpong --trace PREFIX` (PREFIX.ping, PREFIX.pong) and prints, for the
round trips above a threshold against the rest, which leg was slow and what each process saw.

    python benches/rtt_trace.py PREFIX [--over-us 20]

PREFIX.ping lines: sequence, sent (CLOCK_MONOTONIC ns), round trip (ns), wait-loop iterations,
longest iteration (ns), minor faults, voluntary and involuntary context switches (since the
line before). PREFIX.pong lines: sequence, when the message was polled (ns), iterations and
longest iteration of the loop since the previous message, faults and context switches.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class RoundTrip:
    """One round trip joined with the pong's view of it."""

    rtt: float
    forward: float
    back: float
    ping_longest: float
    pong_longest: float
    ping_faults: int
    pong_faults: int
    ping_preempted: int
    pong_preempted: int
    ping_iterations: int
    pong_iterations: int


def load(prefix: str) -> list[RoundTrip]:
    """The round trips the ping measured, joined by sequence with the pong's lines."""
    pong: dict[int, list[int]] = {}
    with open(f"{prefix}.pong") as lines:
        for line in lines:
            fields = [int(x) for x in line.split()]
            pong[fields[0]] = fields[1:]
    trips = []
    with open(f"{prefix}.ping") as lines:
        for line in lines:
            seq, sent, rtt, iterations, longest, faults, _voluntary, involuntary = (int(x) for x in line.split())
            echo = pong.get(seq)
            if echo is None:
                continue
            arrived, p_iter, p_longest, p_faults, _p_voluntary, p_involuntary = echo
            rtt_us, forward_us, back_us, longest_us, p_longest_us = (
                value / 1000 for value in (rtt, arrived - sent, sent + rtt - arrived, longest, p_longest)
            )
            counts = (faults, p_faults, involuntary, p_involuntary, iterations, p_iter)
            trips.append(RoundTrip(rtt_us, forward_us, back_us, longest_us, p_longest_us, *counts))
    return trips


def percentile(values: list[float], p: float) -> float:
    """The value at percentile `p` (nearest rank), as the benchmark computes it."""
    ordered = sorted(values)
    return ordered[round(p / 100 * (len(ordered) - 1))] if ordered else 0.0


def describe(name: str, trips: list[RoundTrip]) -> None:
    """One line of medians and shares for a set of round trips."""
    n = len(trips)
    if n == 0:
        print(f"{name}: none")
        return

    def share(test: Callable[[RoundTrip], object]) -> str:
        return f"{100 * sum(1 for t in trips if test(t)) / n:5.1f}%"

    def median(field: str) -> float:
        return float(statistics.median(getattr(t, field) for t in trips))

    print(
        f"{name}: n={n} rtt {median('rtt'):.1f} forward {median('forward'):.1f} back {median('back'):.1f}"
        f" | longest iteration ping {median('ping_longest'):.1f} pong {median('pong_longest'):.1f}"
        f" | iterations ping {median('ping_iterations'):.0f} pong {median('pong_iterations'):.0f}"
        f"\n    preempted ping {share(lambda t: t.ping_preempted)} pong {share(lambda t: t.pong_preempted)}"
        f" | faults ping {share(lambda t: t.ping_faults)} pong {share(lambda t: t.pong_faults)}"
        f" | an iteration > 5 us: ping {share(lambda t: t.ping_longest > 5)} pong {share(lambda t: t.pong_longest > 5)}"
        f" | forward > back {share(lambda t: t.forward > t.back)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefix")
    parser.add_argument("--over-us", type=float, default=20.0)
    args = parser.parse_args()
    trips = load(args.prefix)
    rtts = [t.rtt for t in trips]
    print(
        f"{len(trips)} round trips: p50 {percentile(rtts, 50):.1f} p99 {percentile(rtts, 99):.1f}"
        f" p99.9 {percentile(rtts, 99.9):.1f} us"
    )
    clean = [t.rtt for t in trips if not (t.ping_preempted or t.pong_preempted)]
    print(
        f"without a preemption in either process ({len(clean)}): p50 {percentile(clean, 50):.1f}"
        f" p99 {percentile(clean, 99):.1f} p99.9 {percentile(clean, 99.9):.1f} us"
    )
    describe(f"over {args.over_us} us", [t for t in trips if t.rtt > args.over_us])
    describe("the rest", [t for t in trips if t.rtt <= args.over_us])


if __name__ == "__main__":
    main()
