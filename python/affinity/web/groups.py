"""What the page and ``/metrics`` show of consumer groups: one observer per group of the registry
(what ``affinity group status`` runs), the moves seen between two looks, and the rates.

A move is a queue whose owner changed. Its cause is read from what the observer knows of the
previous owner when the new one appears: gone from the members or silent for longer than the
liveness timeout is a ``failover``; still live is a ``handoff`` (a clean leave, or a queue given
back to its primary after a backup cycle).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from affinity.groups import GroupDefinition, GroupObserver, GroupStatus
from affinity.web.rates import CounterRates
from affinity.web.settings import MAX_MOVES_KEPT

#: Liveness timeout of the group members, in ms (the library default; the observer uses it too).
LIVENESS_TIMEOUT_MS = 2_000
#: The group rates charted: messages published and delivered (acknowledged) per second.
RATE_NAMES = ("published", "delivered")
#: A move's cause when the previous owner is gone or silent.
FAILOVER = "failover"
#: A move's cause when the previous owner is still live.
HANDOFF = "handoff"


@dataclass(frozen=True)
class Move:
    """A queue that changed owner, when (epoch seconds), and why."""

    at: float
    queue: int
    source: str
    target: str
    epoch: int
    cause: str
    why: str


@dataclass(frozen=True)
class Owner:
    """The holder of a queue as last seen."""

    member_id: int
    name: str
    epoch: int


@dataclass
class MoveTracker:
    """Sans-IO: compares each group status with the previous one and names the moves."""

    liveness_timeout_ms: int = LIVENESS_TIMEOUT_MS
    owners: dict[int, Owner] = field(default_factory=dict)
    moves: deque[Move] = field(default_factory=lambda: deque(maxlen=MAX_MOVES_KEPT))
    #: Moves seen since start, by cause (the metric ``affinity_group_moves_total``).
    totals: dict[str, int] = field(default_factory=lambda: {FAILOVER: 0, HANDOFF: 0})

    def update(self, status: GroupStatus, now: float) -> list[Move]:
        """The moves between the previous status and ``status`` (also kept in :attr:`moves`)."""
        members = {m.member_id: m for m in status.members}
        found: list[Move] = []
        for queue in status.queues:
            if queue.owner_id == 0:
                continue
            previous = self.owners.get(queue.queue)
            self.owners[queue.queue] = Owner(queue.owner_id, queue.owner_name, queue.epoch)
            if previous is None or previous.member_id == queue.owner_id:
                continue
            before = members.get(previous.member_id)
            if before is None:
                cause, why = FAILOVER, f"{previous.name} left or went silent (no longer a member)"
            elif before.last_heard_ms >= self.liveness_timeout_ms:
                cause, why = FAILOVER, f"{previous.name} silent for {before.last_heard_ms} ms"
            else:
                target = members.get(queue.owner_id)
                primary = target is not None and target.count > 0 and queue.queue % target.count == target.index
                cause = HANDOFF
                why = f"{previous.name} handed it over" + (f" to its primary {queue.owner_name}" if primary else "")
            move = Move(now, queue.queue, previous.name, queue.owner_name, queue.epoch, cause, why)
            found.append(move)
            self.moves.append(move)
            self.totals[cause] += 1
        return found


@dataclass
class GroupWatch:
    """One group of the registry: its observer, the last status, moves and rates."""

    definition: GroupDefinition
    observer: GroupObserver | None = None
    status: GroupStatus | None = None
    problem: str | None = None
    moves: MoveTracker = field(default_factory=MoveTracker)
    rates: CounterRates = field(default_factory=lambda: CounterRates(RATE_NAMES))
    secret_source: str = "none"
    #: When to try again to start an observer that could not start (monotonic seconds).
    retry_at: float = 0.0

    def sample(self, now: float | None = None) -> None:
        """Reads the observer's status and updates moves and rates."""
        if self.observer is None:
            return
        at = time.time() if now is None else now
        status = self.observer.status()
        self.status = status
        self.moves.update(status, at)
        self.rates.add(at, (sum(q.sent_sequence for q in status.queues), sum(q.acked_sequence for q in status.queues)))

    def close(self) -> None:
        """Leaves the group's control plane."""
        if self.observer is not None:
            self.observer.close()
            self.observer = None
