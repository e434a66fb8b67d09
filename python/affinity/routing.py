"""Affinity routing: which member (peer) serves a subject, sticky per user, deterministic.

A thin typed layer over the Rust tables (:mod:`affinity._affinity`): it turns their answers into
dataclasses, logs their events on the ``affinity.routing`` logger in the DataSource formats and
hands them to subscribers. Hashing is specified in ``docs/hash-spec.md``.

>>> router = Router()
>>> router.add_data_service("trades", ["^/PRIVATE/"])
>>> rules = [("trading-adapters", "^/PRIVATE/([^/]+)/")]
>>> router.add_source_group("adapters", [["a1", "a2"]], rules)
>>> router.subscribe("/PRIVATE/alice/BLOTTER").composite
'trading-adapters:alice'
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from affinity import _affinity
from affinity._arguments import expect_callable, expect_int, expect_str, wrong_type
from affinity.config.model import RoutingConfig
from affinity.exceptions import RoutingError
from affinity.records import LegInfo, RoutingEventInfo
from affinity.rules import SelectionPolicy, load_policy

__all__ = [
    "BUILTIN_POLICIES",
    "HASH_VERSION",
    "MAX_PATTERN_POSITIONS",
    "SELECTIONS",
    "Decision",
    "Explanation",
    "PolicySpec",
    "PosixRegex",
    "Router",
    "RoutingEvent",
    "affinity_hash",
    "select_member",
]

logger = logging.getLogger("affinity.routing")

#: Event kinds whose log lines are above INFO (:meth:`RoutingEvent.log_lines`): logged even when
#: INFO is not, so the router builds these events whatever else it skips.
ABOVE_INFO_KINDS: Final = frozenset({"no-member-available", "policy-error"})

#: Fallback policies implemented in Rust, by configuration name (the Rust registry).
BUILTIN_POLICIES: tuple[str, ...] = _affinity.BUILTIN_POLICIES
#: Hash selection functions by configuration name (the Rust registry).
SELECTIONS: tuple[str, ...] = _affinity.SELECTIONS
#: Version of the affinity hash and selection functions (``docs/hash-spec.md``).
HASH_VERSION: int = _affinity.HASH_VERSION
#: Most positions a pattern may unroll to (nested ``{m,n}`` intervals multiply); larger
#: patterns are refused with :class:`affinity.ConfigError`.
MAX_PATTERN_POSITIONS: int = _affinity.MAX_PATTERN_POSITIONS

PosixRegex = _affinity.PosixRegex
affinity_hash = _affinity.affinity_hash
select_member = _affinity.select_member


#: What :meth:`Router.add_source_group` takes as a policy: a built-in name, a plugin object
#: (:class:`affinity.rules.SelectionPolicy`) or a function ``(composite, candidates) -> label``.
#: A plugin is asked once per new composite (or new non-affinity subject); raising, or answering
#: a label that is not a candidate, logs an error and the ``workload`` policy decides instead.
PolicySpec = str | SelectionPolicy | Callable[[str, list[str]], str]


@dataclass(frozen=True)
class Decision:
    """Where a subject goes: the member of its data service's primary source group.

    ``reason`` is one of ``sticky``, ``hashed``, ``failover``, ``workload``, ``least-assigned``,
    ``round-robin``, ``policy``, ``fallback`` (plugin failed), ``nodata``, ``retry``,
    ``unavailable`` (no member up). ``additional`` holds the decisions of the data service's
    other source groups, in order (a blotter container served by two source groups).
    """

    subject: str
    service: str
    source_group: str
    member: str | None
    peer_index: int | None
    composite: str | None
    reason: str
    rule_index: int | None
    priority_group: int | None = None
    since: int | None = None
    additional: tuple[Decision, ...] = ()


@dataclass(frozen=True)
class Explanation:
    """Why a subject is (or would be) routed where it is, by its primary source group.

    ``since`` is the sequence number of the event that bound the member (see
    :class:`RoutingEvent`); ``bound_reason`` is how it was first chosen when remembered;
    ``move_reason`` (``member-down``: its member went down) says why it last moved, when it moved
    after it was first bound, and ``moved_from`` from which member (known for subjects with a
    composite).
    """

    subject: str
    service: str
    source_group: str
    rule_index: int | None
    affinity_key: str | None
    pattern: str | None
    composite: str | None
    member: str | None
    peer_index: int | None
    priority_group: int | None
    reason: str
    bound_reason: str | None
    since: int | None
    subscribed: bool
    references: int
    policy: str
    selection: str
    moved_from: str | None = None
    move_reason: str | None = None

    def __str__(self) -> str:
        if self.composite is None:
            rule = f"no affinity rule matched: fallback policy {self.policy}"
        else:
            rule = (
                f"affinity rule #{self.rule_index} {self.affinity_key} {self.pattern!r} "
                f"-> {self.composite} (selection {self.selection})"
            )
        member = "no member" if self.member is None else f"peer {self.peer_index} ({self.member})"
        why = self.reason if self.bound_reason is None else f"{self.reason}, {self.bound_reason}"
        since = "" if self.since is None else f" since event #{self.since}"
        moved = "" if self.move_reason is None else f"; moved ({self.move_reason})"
        if self.moved_from is not None:
            moved = f"; moved from {self.moved_from} ({self.move_reason})"
        return (
            f"{self.subject}: service {self.service}, source group {self.source_group}; {rule}; {member} [{why}]{since}"
            f"{moved}"
        )


@dataclass(frozen=True)
class RoutingEvent:
    """One thing the routing tables did.

    ``kind``: ``bound``, ``moved``, ``forgotten``, ``no-member-available``, ``member-up``,
    ``member-down``, ``nodata``, ``policy-error``, ``reset``. ``move_reason`` (for ``moved``):
    ``member-down``, ``nodata-retry``, ``rebalance``.
    """

    sequence: int
    kind: str
    subject: str | None = None
    composite: str | None = None
    member: str | None = None
    peer_index: int | None = None
    previous: str | None = None
    previous_peer_index: int | None = None
    reason: str | None = None
    move_reason: str | None = None
    message: str | None = None

    @classmethod
    def from_record(cls, record: RoutingEventInfo) -> RoutingEvent:
        """The event the compiled tables (or the subject router's log) reported."""
        return cls(
            sequence=record.sequence,
            kind=record.kind,
            subject=record.subject,
            composite=record.composite,
            member=record.member,
            peer_index=record.peer_index,
            previous=record.previous,
            previous_peer_index=record.previous_peer_index,
            reason=record.reason,
            move_reason=record.move_reason,
            message=record.message,
        )

    def log_lines(self) -> list[tuple[int, str]]:
        """The (level, message) lines logged for this event, in the DataSource formats.

        Only the kinds in :data:`ABOVE_INFO_KINDS` log above INFO.
        """
        peer = f"peer {self.peer_index} ({self.member})"
        previous = f"peer {self.previous_peer_index} ({self.previous})"
        subject, composite = self.subject, self.composite
        request = f"We can request object <{subject}> from {peer}"
        if self.kind == "bound":
            if subject is None:
                return [(logging.INFO, f"Affinity <{composite}> is bound to {peer}")]
            lines = (
                [] if composite is None else [(logging.INFO, f"Object <{subject}> is bound to affinity <{composite}>")]
            )
            return [*lines, (logging.INFO, request)]
        if self.kind == "moved":
            what = f"Object <{subject}>" if subject is not None else f"Affinity <{composite}>"
            line = (logging.INFO, f"{what} moved from {previous} to {peer}: {self.move_reason}")
            return [line, (logging.INFO, request)] if subject is not None else [line]
        if self.kind == "forgotten":
            return [(logging.INFO, f"Affinity <{composite}> forgotten: no subscription holds it")]
        if self.kind == "no-member-available":
            what = f"object <{subject}>" if subject is not None else f"affinity <{composite}>"
            return [(logging.WARNING, f"No peer available for {what}")]
        if self.kind in ("member-up", "member-down"):
            return [(logging.INFO, f"Peer {self.peer_index} ({self.member}) is {self.kind[7:]}")]
        if self.kind == "nodata":
            return [(logging.INFO, f"Object <{subject}> NODATA from {peer}: {self.message}")]
        if self.kind == "policy-error":
            return [(logging.ERROR, self.message or "routing policy failed")]
        if self.kind == "reset":
            return [(logging.INFO, "Routing tables reset: every affinity forgotten")]
        return [(logging.INFO, f"{self.kind}: {self}")]


def _decision(subject: str, legs: Sequence[LegInfo]) -> Decision:
    first, *rest = legs
    return Decision(
        subject=subject,
        service=first.service,
        source_group=first.source_group,
        member=first.member,
        peer_index=first.peer_index,
        composite=first.composite,
        reason=first.reason,
        rule_index=first.rule_index,
        priority_group=first.priority_group,
        since=first.since,
        additional=tuple(_decision(subject, [leg]) for leg in rest),
    )


class Router:
    """Routing tables of one process: data services, source groups, members, affinities.

    Members are up when first named; :meth:`set_member_up` changes that. Events are logged on
    the ``affinity.routing`` logger, passed to :meth:`on_event` callbacks and queued (the newest
    ``max_events``) for :meth:`events`.
    """

    def __init__(self, *, max_events: int = 65536) -> None:
        expect_int("max_events", max_events)
        self._table = _affinity.RoutingTable()
        self._services: dict[str, int] = {}
        self._last_service: int | None = None
        self._events: deque[RoutingEvent] = deque(maxlen=max_events)
        self._callbacks: list[Callable[[RoutingEvent], object]] = []

    @classmethod
    def from_config(
        cls,
        config: RoutingConfig,
        *,
        resolve_policy: Callable[[str], PolicySpec] | None = None,
    ) -> Router:
        """One source group per ``add-source-group`` of every data service, in file order.

        Source groups with the same affinity key share affinity memory. ``resolve_policy`` maps a
        non-built-in policy name to a plugin object (default:
        :func:`affinity.rules.load_policy`: an entry point name or ``package.module:attribute``).
        """
        if not isinstance(config, RoutingConfig):
            raise wrong_type("config", "a RoutingConfig", config)
        if resolve_policy is not None:
            expect_callable("resolve_policy", resolve_policy)
        resolve: Callable[[str], PolicySpec] = resolve_policy or load_policy
        router = cls()
        for service in config.data_services:
            router.add_data_service(service.name, service.include_patterns)
            for index, group in enumerate(service.source_groups, start=1):
                policy = group.policy if group.policy in BUILTIN_POLICIES else resolve(group.policy)
                router.add_source_group(
                    f"{service.name}#{index}",
                    [list(priority.names) for priority in group.priority_groups],
                    [(rule.key, rule.pattern) for rule in group.affinity_rules],
                    policy=policy,
                    selection=group.selection,
                    service=service.name,
                )
        return router

    def add_data_service(self, name: str, include_patterns: Iterable[str]) -> None:
        """Adds a data service; subjects go to the first one with a matching include-pattern."""
        if expect_str("name", name) in self._services:
            raise RoutingError(f"data service {name!r} defined twice")
        index = self._table.add_service(name, include_patterns)
        self._services[name] = index
        self._last_service = index

    def add_source_group(
        self,
        name: str,
        priority_groups: Sequence[Sequence[str]],
        rules: Sequence[tuple[str, str]] = (),
        policy: PolicySpec = "workload",
        selection: str = "modulo",
        *,
        service: str | None = None,
    ) -> None:
        """Adds a source group to ``service`` (default: the last data service added, or a
        catch-all service ``default`` created on first use)."""
        if service is not None:
            if expect_str("service", service) not in self._services:
                raise RoutingError(f"unknown data service {service!r}")
            index = self._services[service]
        elif self._last_service is not None:
            index = self._last_service
        else:
            self.add_data_service("default", ["^"])
            index = self._services["default"]
        self._table.add_source_group(index, name, priority_groups, rules, policy, selection)

    def members(self) -> list[tuple[str, int, bool]]:
        """(label, peer index, up) of every member, in peer order."""
        return list(self._table.members())

    def set_member_up(self, label: str, up: bool) -> list[RoutingEvent]:
        """Marks a member up or down and returns the events it caused."""
        self._table.set_member_up(label, up)
        return self._pump(complete=True)

    def subscribe(self, subject: str) -> Decision:
        """Binds ``subject`` (reference counted) and says where it goes."""
        try:
            return _decision(subject, self._table.subscribe(subject))
        finally:
            self._pump()

    def unsubscribe(self, subject: str) -> None:
        """Drops one reference; the last one releases the subject and maybe its affinity."""
        try:
            self._table.unsubscribe(subject)
        finally:
            self._pump()

    def route(self, subject: str) -> Decision:
        """What :meth:`subscribe` would answer, without binding anything."""
        try:
            return _decision(subject, self._table.route(subject))
        finally:
            self._pump()

    def route_members(self, subjects: Sequence[str]) -> list[str | None]:
        """Member labels for a batch of subjects (primary source group), without binding."""
        try:
            return list(self._table.route_members(subjects))
        finally:
            self._pump()

    def subscribe_members(self, subjects: Sequence[str]) -> list[str | None]:
        """Subscribes a batch of subjects; returns their member labels (primary group)."""
        try:
            return list(self._table.subscribe_members(subjects))
        finally:
            self._pump()

    def explain(self, subject: str) -> Explanation:
        """Which rule matched, the composite, the member, since when and why."""
        try:
            data = self._table.explain(subject)
        finally:
            self._pump()
        return Explanation(
            subject=subject,
            service=data.service,
            source_group=data.source_group,
            rule_index=data.rule_index,
            affinity_key=data.affinity_key,
            pattern=data.pattern,
            composite=data.composite,
            member=data.member,
            peer_index=data.peer_index,
            priority_group=data.priority_group,
            reason=data.reason,
            bound_reason=data.bound_reason,
            since=data.since,
            subscribed=data.subscribed,
            references=data.references,
            policy=data.policy,
            selection=data.selection,
            moved_from=data.moved_from,
            move_reason=data.move_reason,
        )

    def report_nodata(self, subject: str, status: str) -> Decision:
        """Reports a NODATA answer (``unavailable``, ``notfound`` or ``other``) for a subscribed
        subject. On an affinity subject Unavailable/NotFound is authoritative for the source
        group: reason ``nodata``, nothing retried. Otherwise the request moves to a member not
        yet tried (reason ``retry``) or ends (``nodata``) when every member was tried."""
        try:
            return _decision(subject, [self._table.report_nodata(subject, status)])
        finally:
            self._pump()

    def affinity(self, composite: str) -> str | None:
        """The member a composite (``key:value``) is bound to, if any."""
        member: str | None = self._table.affinity(composite)
        return member

    def reset(self) -> None:
        """Forgets every subscription and affinity (as a restart would); members keep state."""
        self._table.reset()
        self._pump()

    def events(self) -> Iterator[RoutingEvent]:
        """Takes the queued events, oldest first (non-blocking; ends when the queue is empty)."""
        self._pump()
        while self._events:
            yield self._events.popleft()

    def on_event(self, callback: Callable[[RoutingEvent], object]) -> None:
        """Calls ``callback`` with every future event (an exception in it is logged)."""
        self._callbacks.append(expect_callable("callback", callback))

    def _pump(self, *, complete: bool = False) -> list[RoutingEvent]:
        """Moves the table's events to the log, the callbacks and the bounded history.

        When nothing else can see them (no callback, INFO not logged, the caller does not want them
        back: not ``complete``), only the events the history keeps (the last ``max_events``) and
        those logged above INFO are built; a batch of new subscriptions then costs no Python
        object per event. What is logged, called back and kept is the same either way.
        """
        keep = self._events.maxlen
        if complete or keep is None or self._callbacks or logger.isEnabledFor(logging.INFO):
            raw_events = self._table.drain_events()
        else:
            raw_events = self._table.drain_events_tail(keep, sorted(ABOVE_INFO_KINDS))
        events = [RoutingEvent.from_record(raw) for raw in raw_events]
        for event in events:
            for level, line in event.log_lines():
                logger.log(level, line)
            self._events.append(event)
            for callback in self._callbacks:
                try:
                    callback(event)
                except Exception:
                    logger.exception("routing event callback %r failed", callback)
        return events
