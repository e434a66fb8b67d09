"""Sans-IO rate histories: per-second rates of cumulative counters, one point per
:data:`~affinity.web.settings.HISTORY_STEP`, the last minutes kept (the page's charts)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from affinity.web.settings import HISTORY_POINTS, HISTORY_STEP


@dataclass
class CounterRates:
    """Rates of named cumulative counters; a counter that goes down (a member that left took
    its figures out of a sum, a restarted driver) gives 0 for that step, never a negative rate."""

    names: tuple[str, ...]
    points: deque[tuple[float, tuple[float, ...]]] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    last: tuple[float, tuple[int, ...]] | None = None

    def add(self, now: float, values: tuple[int, ...]) -> None:
        """Feeds the counters' values (in :attr:`names` order) at ``now`` (seconds)."""
        if self.last is None or now < self.last[0]:
            self.last = (now, values)
            return
        then, before = self.last
        elapsed = now - then
        if elapsed < HISTORY_STEP:
            return
        self.points.append((now, tuple(max(0, v - b) / elapsed for v, b in zip(values, before, strict=True))))
        self.last = (now, values)

    def series(self) -> dict[str, object]:
        """The history as the page's charts take it: times and one list per counter."""
        return {
            "t": [round(at, 3) for at, _ in self.points],
            **{name: [round(rates[i], 3) for _, rates in self.points] for i, name in enumerate(self.names)},
        }
