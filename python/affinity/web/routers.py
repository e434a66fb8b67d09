"""What the page and ``/metrics`` show of routers: the reports heard on each ``--router`` channel
(:mod:`affinity.web.router_report`), per node, with the relay rate.

A channel on which no report arrived for :data:`STALE_AFTER` seconds is shown as a problem in
place ("no report"); a report that does not decode is counted and its error shown, the last good
one kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from affinity.web.rates import CounterRates
from affinity.web.router_report import REPORT_INTERVAL, REPORT_STREAM_ID, RouterReport, decode_report

#: Seconds without a report after which a router is shown as not answering.
STALE_AFTER = 3 * REPORT_INTERVAL
#: The router rates charted: messages relayed to subscribers and sent in all, per second.
RATE_NAMES = ("relayed", "messages_sent")
#: Nodes kept per channel (reports naming more are dropped and counted).
MAX_NODES_PER_CHANNEL = 64
#: Messages read from one channel per look.
POLL_LIMIT = 256


@dataclass
class NodeState:
    """The last report of one node and its relay rate history."""

    report: RouterReport
    received_at: float
    rates: CounterRates = field(default_factory=lambda: CounterRates(RATE_NAMES))

    def add(self, report: RouterReport, now: float) -> None:
        """Takes a newer report and adds a rate point when one is due (times of the router's clock)."""
        self.report, self.received_at = report, now
        self.rates.add(report.time, tuple(int(report.status.get(name, 0)) for name in RATE_NAMES))


@dataclass
class RouterWatch:
    """One ``--router`` channel: a subscription to its reports and the nodes heard on it."""

    channel: str
    subscription: Any = None
    problem: str | None = None
    nodes: dict[str, NodeState] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    bad_reports: int = 0
    last_error: str | None = None

    def sample(self, now: float | None = None) -> None:
        """Reads what arrived and updates the nodes."""
        if self.subscription is None:
            return
        at = time.time() if now is None else now
        for data in self.subscription.poll_batch(POLL_LIMIT):
            self.take(bytes(data), at)

    def take(self, data: bytes, now: float) -> None:
        """One message from the channel (untrusted)."""
        try:
            report = decode_report(data)
        except (ValueError, ArithmeticError) as error:  # ArithmeticError: a number the checks missed
            self.bad_reports += 1
            self.last_error = str(error)
            return
        state = self.nodes.get(report.node)
        if state is None:
            if len(self.nodes) >= MAX_NODES_PER_CHANNEL:
                self.bad_reports += 1
                self.last_error = f"more than {MAX_NODES_PER_CHANNEL} nodes report on this channel"
                return
            self.nodes[report.node] = state = NodeState(report, now)
        state.add(report, now)

    def silence(self, now: float) -> str | None:
        """Why this channel looks dead, if it does."""
        if self.problem is not None:
            return self.problem
        if not self.nodes:
            waited = now - self.started
            if waited >= STALE_AFTER:
                return (
                    f"no router report on {self.channel} (stream {REPORT_STREAM_ID}) for {waited:.0f} s: "
                    f"is a router started with --status {self.channel}?"
                )
            return None
        return None

    def close(self) -> None:
        """Closes the subscription."""
        if self.subscription is not None:
            self.subscription.close()
            self.subscription = None
