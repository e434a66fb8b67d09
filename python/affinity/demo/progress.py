"""The live progress display (rich): rates, per-consumer share, queue owners, moves and checks."""

from __future__ import annotations

import time
from collections import deque

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from affinity.demo.children import ConsumerState, GeneratorState
from affinity.demo.settings import DISPLAY_REFRESH_PER_SECOND, DemoSettings
from affinity.demo.validation import LiveStats, MoveCause

#: Lines of the event log shown under the tables.
NOTES_SHOWN = 8
#: Queue moves shown (the most recent).
MOVES_SHOWN = 8
#: Seconds over which the live rates are computed: longer than a Spark micro-batch usually takes
#: on 2 cores, so that the rate does not drop to 0 between two batches.
RATE_WINDOW = 6.0
#: Seconds between plain progress lines when the output is not a terminal.
PLAIN_INTERVAL = 5.0


def consumer_state_text(state: ConsumerState) -> Text:
    """``running``, ``starting`` or ``killed at 20.0 s``, coloured."""
    if state.killed_at is not None:
        return Text(f"killed at {state.killed_at:.1f} s", style="bold red")
    if state.status is None:
        return Text("starting", style="yellow")
    return Text("running", style="green")


def queue_claims(consumers: dict[int, ConsumerState]) -> dict[int, str]:
    """The label of the consumer claiming each queue (live consumers' last status)."""
    return {
        q: state.label
        for state in consumers.values()
        if state.status is not None and state.killed_at is None
        for q in state.status.owned
    }


class Display:
    """A rich ``Live`` view on a terminal; plain progress lines otherwise (pipes, tests, CI)."""

    def __init__(self, settings: DemoSettings, console: Console | None = None) -> None:
        self._settings = settings
        self._console = console or Console()
        self._interactive = settings.live and self._console.is_terminal
        self._live: Live | None = None
        self._notes: list[str] = []
        self._notes_before_live = 0
        self._next_plain = 0.0
        #: (time, events validated) at the previous plain line, for its rate.
        self._last_plain: tuple[float, int] | None = None
        self._history: deque[tuple[float, dict[int, int]]] = deque()

    def note(self, text: str) -> None:
        """Adds a line to the event log (printed at once when not interactive)."""
        self._notes.append(text)
        if self._live is None:
            self._console.print(text, highlight=False)

    def start(self) -> None:
        """Starts the live view (no-op when not interactive)."""
        if self._interactive and self._live is None:
            self._notes_before_live = len(self._notes)
            self._live = Live(
                Text("starting ..."),
                console=self._console,
                refresh_per_second=DISPLAY_REFRESH_PER_SECOND,
                transient=False,
            )
            self._live.start()

    def stop(self) -> None:
        """Stops the live view, leaving its last frame on screen."""
        if self._live is not None:
            self._live.stop()
            self._live = None

    def refresh_idle(self, consumers: dict[int, ConsumerState]) -> None:
        """Nothing to show before generation starts (the event log says what happens)."""

    def update(
        self, now: float, consumers: dict[int, ConsumerState], generator: GeneratorState, stats: LiveStats
    ) -> None:
        """Redraws the live view, or prints a progress line every few seconds."""
        rates = self._rates(now, stats)
        if self._live is not None:
            self._live.update(self.render(now, consumers, generator, stats, rates))
            return
        if time.monotonic() >= self._next_plain:
            self._next_plain = time.monotonic() + PLAIN_INTERVAL
            self._console.print(self.plain_line(now, consumers, generator, stats), highlight=False)

    def generated_label(self) -> str:
        """What the generator's count means: rows whose Spark batch committed (consumers may
        validate a batch's rows before its commit), or events the publisher took."""
        return "committed by Spark" if self._settings.spark else "published"

    def plain_line(
        self, now: float, consumers: dict[int, ConsumerState], generator: GeneratorState, stats: LiveStats
    ) -> str:
        """One progress line: counts, the validation rate since the previous line, each consumer's
        share, the owner of every queue and the checks."""
        generated = generator.progress.generated if generator.progress else 0
        previous = self._last_plain
        self._last_plain = (now, stats.received)
        rate = (stats.received - previous[1]) / (now - previous[0]) if previous and now > previous[0] else 0.0
        shares = " ".join(
            f"{consumers[c].label if c in consumers else c}={n * 100 / max(stats.received, 1):.0f}%"
            for c, n in sorted(stats.per_consumer.items())
        )
        owners = " ".join(f"q{q}={label}" for q, label in sorted(queue_claims(consumers).items()))
        return (
            f"t={now:5.1f}s {self.generated_label()} {generated:,} validated {stats.received:,} "
            f"({rate:,.0f}/s) {shares} owners [{owners or 'none yet'}] "
            f"dup {stats.duplicates} order errors {stats.order_errors} replays {stats.failover_replays}"
        )

    def _rates(self, now: float, stats: LiveStats) -> dict[int, float]:
        """Events per second of each consumer over the last :data:`RATE_WINDOW` seconds."""
        self._history.append((now, dict(stats.per_consumer)))
        while len(self._history) > 1 and now - self._history[1][0] >= RATE_WINDOW:
            self._history.popleft()
        then, before = self._history[0]
        elapsed = now - then
        if elapsed <= 0:
            return {}
        return {c: (n - before.get(c, 0)) / elapsed for c, n in stats.per_consumer.items()}

    def render(
        self,
        now: float,
        consumers: dict[int, ConsumerState],
        generator: GeneratorState,
        stats: LiveStats,
        rates: dict[int, float],
    ) -> RenderableType:
        """The live view."""
        settings = self._settings
        generated = generator.progress.generated if generator.progress else 0
        rate = sum(rates.values())
        header = Text.assemble(
            ("affinity pipeline demo  ", "bold"),
            f"t={now:5.1f}s " + (f"/ {settings.duration:g}s   " if now <= settings.duration else "(draining)   "),
            (f"{self.generated_label()} ", "dim"),
            f"{generated:,}   ",
            ("validated ", "dim"),
            f"{stats.received:,}  ({rate:,.0f} rows/s)   ",
            ("p99 latency ", "dim"),
            f"{stats.latency_p99_ms:,.0f} ms",
        )
        table = Table(title="consumers", title_justify="left", expand=False)
        for column in ("consumer", "index", "state", "processed", "share", "rows/s", "owns queues"):
            table.add_column(column, justify="right" if column in ("processed", "share", "rows/s") else "left")
        for ordinal, state in sorted(consumers.items()):
            processed = stats.per_consumer.get(ordinal, 0)
            owned = state.status.owned if state.status and state.killed_at is None else []
            table.add_row(
                state.label,
                str(state.index),
                consumer_state_text(state),
                f"{processed:,}",
                f"{processed * 100 / max(stats.received, 1):.1f}%",
                f"{rates.get(ordinal, 0.0):,.0f}",
                " ".join(str(q) for q in owned) or "-",
            )
        owners = Table(title="queue owners (claims)", title_justify="left", show_header=True, expand=False)
        claims = queue_claims(consumers)
        for q in range(settings.queue_count):
            owners.add_column(f"q{q}", justify="center")
        owners.add_row(*(claims.get(q, Text("-", style="red")) for q in range(settings.queue_count)))
        moves = Text()
        for move in stats.moves[-MOVES_SHOWN:]:
            style = "red" if move.cause == MoveCause.FAILOVER else "cyan"
            moves.append(
                f"t={move.at:5.1f}s  q{move.queue}: c{move.source} -> c{move.target}  {move.cause.value}"
                f"  ({move.keys} keys moved, {move.replayed} replayed)\n",
                style=style,
            )
        checks = Text.assemble(
            ("checks  ", "bold"),
            ("duplicates ", "dim"),
            (str(stats.duplicates), "red" if stats.duplicates else "green"),
            ("   order errors ", "dim"),
            (str(stats.order_errors), "red" if stats.order_errors else "green"),
            ("   failover replays ", "dim"),
            str(stats.failover_replays),
        )
        notes = Text("\n".join(self._notes[self._notes_before_live :][-NOTES_SHOWN:]), style="dim")
        return Group(header, table, owners, Text("queue moves", style="bold"), moves, checks, notes)
