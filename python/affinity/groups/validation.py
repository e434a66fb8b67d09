"""The hashed-delivery experiment's validation client as a pure state machine: per key, order, gaps, duplicates, owners.

Fed the republished records in arrival order (:meth:`Validator.observe`), it keeps for each key
(the experiment's "topic number") the highest sequence number seen, the sequence numbers skipped and
not yet seen, and the LBG client that processed the last record. Each record is one of:

- in order (``seqno == highest + 1``);
- a **gap** (``seqno > highest + 1``): the skipped numbers are remembered; if one arrives later
  it is **out of order**, if none does it is **lost**;
- a **duplicate** (``seqno <= highest`` and already seen): a redelivery after a failover of a
  message the dead owner had processed but not acknowledged.

Every record whose ``seqno`` is not ``highest + 1`` is a "sequence number error" in the experiment's
words; every change of LBG client for a key is a "shard assigned new lbgclient" event. The
report is a typed dataclass; ``ok`` is False on any out-of-order record or loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from affinity.groups.records import RepublishedRecord

__all__ = ["ConsumerChange", "SequenceEvent", "ValidationReport", "Validator"]

#: How many skipped sequence numbers are remembered in all (beyond that, losses are only counted).
MAX_TRACKED_MISSING = 1_000_000
#: How many sequence events and consumer changes a report keeps (all are counted).
MAX_REPORTED_EVENTS = 100_000


@dataclass(frozen=True)
class SequenceEvent:
    """A record whose sequence number was not the next one for its key."""

    time: float
    kind: str  # "gap", "out_of_order" or "duplicate"
    topic: int
    expected: int
    received: int
    lbgclient: int
    subject: str

    def log_line(self) -> str:
        """The experiment's log line for this event."""
        return (
            f"Sequence number error. topic number {self.topic} Expected {self.expected} but received "
            f"{self.received} :: lbg client - {self.lbgclient} :: original topic - {self.subject} ({self.kind})"
        )


@dataclass(frozen=True)
class ConsumerChange:
    """The LBG client processing a key changed (the experiment's "Shard assigned new lbgclient")."""

    time: float
    topic: int
    was: int
    now: int
    seqno: int
    queue: int
    subject: str

    def log_line(self) -> str:
        """The experiment's log line for this change."""
        return (
            f"Shard assigned new lbgclient. topic number {self.topic} was {self.was} now {self.now} "
            f":: original topic - {self.subject}"
        )


@dataclass
class _KeyState:
    highest: int = 0
    lbgclient: int | None = None
    missing: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class ValidationReport:
    """What the validation client saw; ``ok`` when nothing arrived out of order and nothing is lost."""

    received: int
    keys_seen: int
    expected_keys: int | None
    sequence_errors: int
    duplicates: int
    out_of_order: int
    gaps: int
    lost: int
    consumer_changes: int
    per_client: dict[int, int]
    highest: dict[int, int]
    events: list[SequenceEvent]
    changes: list[ConsumerChange]
    first_time: float | None
    last_time: float | None

    @property
    def ok(self) -> bool:
        """No record out of order, no sequence number lost, and every expected key seen."""
        keys_ok = self.expected_keys is None or self.keys_seen >= self.expected_keys
        return self.out_of_order == 0 and self.lost == 0 and keys_ok


class Validator:
    """Checks per-key order of republished records; see the module documentation."""

    def __init__(self, expected_keys: int | None = None) -> None:
        self._keys: dict[int, _KeyState] = {}
        self._expected_keys = expected_keys
        self._received = 0
        self._sequence_errors = 0
        self._duplicates = 0
        self._out_of_order = 0
        self._gaps = 0
        self._untracked_lost = 0
        self._tracked_missing = 0
        self._changes_count = 0
        self._per_client: dict[int, int] = {}
        self._events: list[SequenceEvent] = []
        self._changes: list[ConsumerChange] = []
        self._first_time: float | None = None
        self._last_time: float | None = None

    def observe(self, record: RepublishedRecord, now: float) -> list[SequenceEvent | ConsumerChange]:
        """Checks one record received at wall-clock time ``now``; returns what it revealed."""
        self._received += 1
        self._first_time = now if self._first_time is None else self._first_time
        self._last_time = now
        self._per_client[record.lbgclient] = self._per_client.get(record.lbgclient, 0) + 1
        state = self._keys.setdefault(record.topic, _KeyState())
        revealed: list[SequenceEvent | ConsumerChange] = []
        expected = state.highest + 1
        if record.seqno != expected:
            self._sequence_errors += 1
            if record.seqno > expected:
                kind = "gap"
                self._gaps += 1
                skipped = record.seqno - expected
                room = MAX_TRACKED_MISSING - self._tracked_missing
                tracked = min(skipped, max(room, 0))
                state.missing.update(range(expected, expected + tracked))
                self._tracked_missing += tracked
                self._untracked_lost += skipped - tracked
                state.highest = record.seqno
            elif record.seqno in state.missing:
                kind = "out_of_order"
                self._out_of_order += 1
                state.missing.discard(record.seqno)
                self._tracked_missing -= 1
            else:
                kind = "duplicate"
                self._duplicates += 1
            event = SequenceEvent(now, kind, record.topic, expected, record.seqno, record.lbgclient, record.subject)
            revealed.append(event)
            if len(self._events) < MAX_REPORTED_EVENTS:
                self._events.append(event)
        else:
            state.highest = record.seqno
        if state.lbgclient is not None and state.lbgclient != record.lbgclient:
            change = ConsumerChange(
                now, record.topic, state.lbgclient, record.lbgclient, record.seqno, record.queue, record.subject
            )
            self._changes_count += 1
            revealed.append(change)
            if len(self._changes) < MAX_REPORTED_EVENTS:
                self._changes.append(change)
        state.lbgclient = record.lbgclient
        return revealed

    def report(self) -> ValidationReport:
        """The report so far."""
        return ValidationReport(
            received=self._received,
            keys_seen=len(self._keys),
            expected_keys=self._expected_keys,
            sequence_errors=self._sequence_errors,
            duplicates=self._duplicates,
            out_of_order=self._out_of_order,
            gaps=self._gaps,
            lost=self._tracked_missing + self._untracked_lost,
            consumer_changes=self._changes_count,
            per_client=dict(sorted(self._per_client.items())),
            highest={topic: state.highest for topic, state in sorted(self._keys.items())},
            events=list(self._events),
            changes=list(self._changes),
            first_time=self._first_time,
            last_time=self._last_time,
        )
