"""The demo's validation: per-account order, loss and duplicates, ownership changes, latency.

Consumers republish every event they processed (:mod:`affinity.demo.records`); the validator
receives them on one plain publication per consumer. The per-key checks are those of the seed's
validation client, :class:`affinity.groups.validation.Validator` (gaps, out-of-order arrivals,
duplicates, change of consumer per key). This module adds what the demo shows on top:

* processing order: records are checked in ``done_ns`` order, not arrival order. Two consumers'
  publications are separate streams, so a record processed before a handoff may be polled after
  one processed just after it; a short reorder window (:data:`REORDER_WINDOW_NS`) restores the
  order in which they were processed.
* failover replays: a sequence number seen before is a *failover replay* when the account's
  previous consumer was SIGKILLed and the number is not beyond what that consumer had processed
  (it processed the event but its acknowledgement never left: at-least-once across a crash,
  reported, not an error); any other repeat is a *duplicate* (an error).
* queue moves (which consumer delivers each queue, when it changed, why, how many keys moved),
  the expected total (a missing tail is lost too), end-to-end latency and a per-second timeline.
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass, field
from enum import StrEnum

from affinity.groups.records import RepublishedRecord
from affinity.groups.validation import ConsumerChange
from affinity.groups.validation import Validator as KeyValidator

#: Records are checked once they are this old (processing time), so that records of two
#: consumers' streams are checked in the order they were processed.
REORDER_WINDOW_NS = 1_000_000_000
#: Buffered records are sorted and checked at most this often (sorting on every small poll would
#: cost more than the checks).
RELEASE_INTERVAL_NS = 100_000_000
#: How many error descriptions a report keeps (the counters count them all).
MAX_ERROR_EXAMPLES = 20
#: The key validator's name for a sequence number seen before.
DUPLICATE = "duplicate"

Row = tuple[int, int, int, int, int, int]
_done_ns = operator.itemgetter(5)


class MoveCause(StrEnum):
    """Why a queue's records started coming from another consumer."""

    FAILOVER = "failover"
    HANDOFF = "handoff"


@dataclass(frozen=True)
class QueueMove:
    """One change of the consumer delivering a queue, as seen in the processed records."""

    #: Seconds since generation start of the first record the new consumer processed.
    at: float
    queue: int
    source: int
    target: int
    cause: MoveCause
    #: Accounts whose records moved with the queue (counted as each account is next seen).
    keys: int
    #: Events the new consumer processed again after a failover (the killed one never acked them).
    replayed: int


@dataclass(frozen=True)
class LatencySummary:
    """End-to-end latency (event generated -> processed by a consumer), in milliseconds.

    Events of a warm-up batch (due before the demo's clock started) are not included.
    """

    count: int
    #: Events left out: due before the clock started.
    warmup_events: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    #: Seconds since the start (from, to) of the failover after a SIGKILL: from the kill to one
    #: bin after the last queue moved away from the killed consumer (the held events catch up
    #: then); None without a kill or a failover.
    failover_window: tuple[float, float] | None = None
    #: p99 of the events processed outside the time bins the failover window touches (None
    #: without a failover window): the steady state's tail.
    p99_outside_failover_ms: float | None = None


@dataclass(frozen=True)
class Timeline:
    """Processed events per time bin: totals per consumer and latency percentiles per bin."""

    bin_seconds: float
    #: consumer -> events processed in each bin (all lists have the same length).
    per_consumer: dict[int, list[int]]
    p50_ms: list[float]
    p99_ms: list[float]

    @property
    def bins(self) -> int:
        """Number of bins."""
        return len(self.p50_ms)


@dataclass(frozen=True)
class ValidationReport:
    """What the validator concluded once everything generated was accounted for."""

    expected: int
    received: int
    delivered: int
    lost: int
    duplicates: int
    failover_replays: int
    order_errors: int
    unexpected: int
    per_consumer: dict[int, int]
    moves: list[QueueMove]
    latency: LatencySummary
    timeline: Timeline
    errors: list[str]
    #: Event time of the earliest and the latest event processed (ns since the epoch; 0 when none):
    #: the Spark generator's ``event_time`` TimestampType column, or the plain generator's field.
    first_event_ns: int = 0
    last_event_ns: int = 0

    @property
    def order_held(self) -> bool:
        """Every account's events were processed in sequence-number order."""
        return self.order_errors == 0

    @property
    def passed(self) -> bool:
        """Nothing lost, nothing duplicated, order held, nothing unexpected."""
        return self.lost == 0 and self.duplicates == 0 and self.order_held and self.unexpected == 0


@dataclass(frozen=True)
class LiveStats:
    """A snapshot for the live display."""

    received: int
    per_consumer: dict[int, int]
    queue_owners: dict[int, int]
    moves: list[QueueMove]
    duplicates: int
    failover_replays: int
    order_errors: int
    latency_p99_ms: float


@dataclass
class _Move:
    at: float
    queue: int
    source: int
    target: int
    cause: MoveCause
    keys: int = 0
    replayed: int = 0

    def frozen(self) -> QueueMove:
        return QueueMove(self.at, self.queue, self.source, self.target, self.cause, self.keys, self.replayed)


@dataclass
class _Bins:
    counts: dict[int, list[int]] = field(default_factory=dict)
    latencies: list[list[int]] = field(default_factory=list)

    def add(self, consumer: int, index: int, latency_ns: int | None) -> None:
        while len(self.latencies) <= index:
            self.latencies.append([])
        if latency_ns is not None:
            self.latencies[index].append(latency_ns)
        counts = self.counts.setdefault(consumer, [])
        if len(counts) <= index:
            counts.extend([0] * (index + 1 - len(counts)))
        counts[index] += 1


def percentile(sorted_values: list[int], fraction: float) -> int:
    """Nearest-rank percentile of an ascending list (0 for an empty list)."""
    if not sorted_values:
        return 0
    rank = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values) + 0.5) - 1))
    return sorted_values[rank]


def expected_per_account(generated: int, accounts: int, account: int) -> int:
    """Events of ``account`` among the first ``generated`` events (event v is account v % accounts)."""
    return generated // accounts + (1 if account < generated % accounts else 0)


class Validator:
    """Checks processed records; not thread-safe (one thread feeds it, others read snapshots under a lock)."""

    def __init__(self, accounts: int, start_ns: int | None, bin_seconds: float) -> None:
        self._accounts = accounts
        self._start_ns = start_ns or 0
        self._started = start_ns is not None
        self._bin_ns = int(bin_seconds * 1e9)
        self._bin_seconds = bin_seconds
        self._pending: list[Row] = []
        self._last_release_ns = 0
        self._keys = KeyValidator(expected_keys=accounts)
        self._owner = [-1] * accounts
        self._high = [0] * accounts
        self._replay_limit = [0] * accounts
        self._first_event_ns = 0
        self._last_event_ns = 0
        self._queue_owner: dict[int, int] = {}
        self._current_move: dict[int, _Move] = {}
        self._moves: list[_Move] = []
        self._killed: set[int] = set()
        #: When the first consumer was killed (ns since the epoch), if the caller said.
        self._killed_at_ns: int | None = None
        self._per_consumer: dict[int, int] = {}
        self._bins = _Bins()
        self._received = 0
        self._duplicates = 0
        self._replays = 0
        self._warmup = 0
        self._order_errors = 0
        self._unexpected = 0
        self._errors: list[str] = []

    @property
    def received_total(self) -> int:
        """Records received so far, checked or still waiting in the reorder window."""
        return self._received + len(self._pending)

    def rebase(self, start_ns: int) -> None:
        """Sets the time origin (generation start) of the timeline and of every reported time.

        Until then records are only buffered, so that none is placed on a timeline with the
        wrong origin (the Spark generator's warm-up batch arrives before its clock starts).
        """
        self._start_ns = start_ns
        self._started = True

    def mark_killed(self, consumer: int, at_ns: int | None = None) -> None:
        """Records that ``consumer`` was SIGKILLed (``at_ns``: when, ns since the epoch): what it
        processed but never acked may be replayed, and the report tells the failover's latency apart."""
        self._killed.add(consumer)
        if at_ns is not None and self._killed_at_ns is None:
            self._killed_at_ns = at_ns

    def _failover_window(self) -> tuple[float, float] | None:
        """Seconds since the start from the kill to one bin after the last failover move (None: no failover)."""
        if self._killed_at_ns is None:
            return None
        moved = [m.at for m in self._moves if m.cause == MoveCause.FAILOVER]
        if not moved:
            return None
        return ((self._killed_at_ns - self._start_ns) / 1e9, max(moved) + self._bin_seconds)

    def add(self, rows: list[Row], now_ns: int) -> None:
        """Buffers processed records and checks those older than the reorder window."""
        self._pending.extend(rows)
        if now_ns - self._last_release_ns >= RELEASE_INTERVAL_NS:
            self._last_release_ns = now_ns
            self._release(now_ns - REORDER_WINDOW_NS)

    def flush(self) -> None:
        """Checks every buffered record (at the end, once nothing more can arrive)."""
        self._started = True
        self._release(None)

    def _release(self, cutoff_ns: int | None) -> None:
        if not self._pending or not self._started:
            return
        self._pending.sort(key=_done_ns)
        if cutoff_ns is None:
            ready, self._pending = self._pending, []
        else:
            split = bisect.bisect_right(self._pending, cutoff_ns, key=_done_ns)
            ready, self._pending = self._pending[:split], self._pending[split:]
        for row in ready:
            self._check(*row)

    def _error(self, text: str) -> None:
        if len(self._errors) < MAX_ERROR_EXAMPLES:
            self._errors.append(text)

    def _check(self, account: int, seq: int, consumer: int, queue: int, event_ns: int, done_ns: int) -> None:
        self._received += 1
        self._first_event_ns = min(self._first_event_ns or event_ns, event_ns)
        self._last_event_ns = max(self._last_event_ns, event_ns)
        self._per_consumer[consumer] = self._per_consumer.get(consumer, 0) + 1
        # Events due before the clock started (the Spark generator's warm-up batch) measure the
        # query's start-up, not the pipeline: they are counted but left out of the latency.
        warmup = event_ns < self._start_ns
        self._warmup += warmup
        self._bins.add(
            consumer, max(0, (done_ns - self._start_ns) // self._bin_ns), None if warmup else done_ns - event_ns
        )
        at = (done_ns - self._start_ns) / 1e9
        if not 0 <= account < self._accounts:
            self._unexpected += 1
            self._error(f"consumer {consumer} processed account {account}, outside 0..{self._accounts - 1}")
            return
        previous_queue_owner = self._queue_owner.get(queue)
        if previous_queue_owner != consumer:
            if previous_queue_owner is not None:
                cause = MoveCause.FAILOVER if previous_queue_owner in self._killed else MoveCause.HANDOFF
                move = _Move(at, queue, previous_queue_owner, consumer, cause)
                self._moves.append(move)
                self._current_move[queue] = move
            self._queue_owner[queue] = consumer
        if self._owner[account] != consumer:
            # A new streak: repeats up to the highest number seen so far are replays only when the
            # previous consumer was killed.
            self._replay_limit[account] = self._high[account] if self._owner[account] in self._killed else 0
            self._owner[account] = consumer
        record = RepublishedRecord(account, consumer, queue, seq, 0, 0, 0, event_ns, done_ns, "")
        for finding in self._keys.observe(record, at):
            if isinstance(finding, ConsumerChange):
                current = self._current_move.get(queue)
                if current is not None and current.target == consumer:
                    current.keys += 1
            elif finding.kind == DUPLICATE and seq <= self._replay_limit[account]:
                self._replays += 1
                current = self._current_move.get(queue)
                if current is not None:
                    current.replayed += 1
            else:
                if finding.kind == DUPLICATE:
                    self._duplicates += 1
                else:
                    self._order_errors += 1
                self._error(f"t={at:.2f}s queue {queue}: {finding.log_line()}")
        self._high[account] = max(self._high[account], seq)

    def live(self) -> LiveStats:
        """A snapshot for the live display."""
        bins = self._bins.latencies
        last_full = len(bins) - 2
        recent = sorted(bins[last_full]) if last_full >= 0 else []
        return LiveStats(
            received=self._received,
            per_consumer=dict(self._per_consumer),
            queue_owners=dict(self._queue_owner),
            moves=[m.frozen() for m in self._moves],
            duplicates=self._duplicates,
            failover_replays=self._replays,
            order_errors=self._order_errors,
            latency_p99_ms=percentile(recent, 0.99) / 1e6,
        )

    def report(self, generated: int) -> ValidationReport:
        """The verdict, given how many events the generator produced (call :meth:`flush` first)."""
        lost = self._keys.report().lost  # skipped and never seen
        unexpected = self._unexpected
        for account in range(self._accounts):
            expected = expected_per_account(generated, self._accounts, account)
            high = self._high[account]
            lost += max(0, expected - high)  # the tail nobody processed
            if high > expected:
                unexpected += high - expected
                self._error(f"account {account}: seq {high} processed but only {expected} were generated")
        all_latencies = sorted(v for bin_ in self._bins.latencies for v in bin_)
        window = self._failover_window()
        outside: float | None = None
        if window is not None:
            width = self._bin_seconds
            steady = sorted(
                v
                for index, bin_ in enumerate(self._bins.latencies)
                if not ((index + 1) * width > window[0] and index * width < window[1])
                for v in bin_
            )
            outside = percentile(steady, 0.99) / 1e6
        bins = len(self._bins.latencies)
        per_bin_sorted = [sorted(v) for v in self._bins.latencies]
        per_consumer_bins = {c: v + [0] * (bins - len(v)) for c, v in sorted(self._bins.counts.items())}
        return ValidationReport(
            expected=generated,
            received=self._received,
            delivered=generated - lost,
            lost=lost,
            duplicates=self._duplicates,
            failover_replays=self._replays,
            order_errors=self._order_errors,
            unexpected=unexpected,
            per_consumer=dict(sorted(self._per_consumer.items())),
            moves=[m.frozen() for m in self._moves],
            latency=LatencySummary(
                count=len(all_latencies),
                warmup_events=self._warmup,
                p50_ms=percentile(all_latencies, 0.50) / 1e6,
                p99_ms=percentile(all_latencies, 0.99) / 1e6,
                max_ms=(all_latencies[-1] / 1e6) if all_latencies else 0.0,
                failover_window=window,
                p99_outside_failover_ms=outside,
            ),
            timeline=Timeline(
                bin_seconds=self._bin_seconds,
                per_consumer=per_consumer_bins,
                p50_ms=[percentile(v, 0.50) / 1e6 for v in per_bin_sorted],
                p99_ms=[percentile(v, 0.99) / 1e6 for v in per_bin_sorted],
            ),
            errors=list(self._errors),
            first_event_ns=self._first_event_ns,
            last_event_ns=self._last_event_ns,
        )
