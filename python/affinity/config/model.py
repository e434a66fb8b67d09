"""The routing configuration model: what an ``add-data-service`` file says, with source locations.

The parser (:mod:`affinity.config.parser`) produces it, the checks (:mod:`affinity.config.checks`)
read it, and :class:`affinity.routing.Router` builds its Rust routing tables from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Location:
    """Where something was written: file, 1-based line and column."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class AffinityRule:
    """``affinity <key> <regex>``: a POSIX ERE with exactly one capture group."""

    key: str
    pattern: str
    location: Location
    #: Where the first character of the pattern text is (inside its quotes, if quoted), so a
    #: diagnostic can point at the offending character: column + index in ``pattern``.
    pattern_location: Location | None = None


@dataclass(frozen=True)
class PeerLabel:
    """``label NAME`` or ``remote-label NAME`` inside ``add-priority``."""

    name: str
    remote: bool
    location: Location


@dataclass(frozen=True)
class PriorityGroup:
    """``add-priority`` ... ``end-priority``: peers tried together, in label order."""

    labels: tuple[PeerLabel, ...]
    location: Location

    @property
    def names(self) -> tuple[str, ...]:
        """The peer labels in order."""
        return tuple(label.name for label in self.labels)


@dataclass(frozen=True)
class SourceGroup:
    """``add-source-group`` ... ``end-source-group``."""

    priority_groups: tuple[PriorityGroup, ...]
    affinity_rules: tuple[AffinityRule, ...]
    location: Location
    #: Fallback policy name when no affinity rule matches (``workload`` unless configured),
    #: or a dotted path ``package.module:attribute`` / entry-point name of a policy plugin.
    policy: str = "workload"
    #: Selection function for hashed routing: ``modulo`` (default) or ``rendezvous``.
    selection: str = "modulo"
    #: Where ``policy`` was written (``None`` when defaulted).
    policy_location: Location | None = None
    #: Where ``selection`` was written (``None`` when defaulted).
    selection_location: Location | None = None


@dataclass(frozen=True)
class DataService:
    """``add-data-service`` ... ``end-data-service``."""

    name: str
    include_patterns: tuple[str, ...]
    source_groups: tuple[SourceGroup, ...]
    location: Location
    #: Where ``service-name`` was written (``None`` when missing).
    name_location: Location | None = None
    #: Where each include pattern's text starts, parallel to ``include_patterns``.
    include_pattern_locations: tuple[Location, ...] = ()


@dataclass(frozen=True)
class RoutingConfig:
    """A whole configuration file: its data services in file order."""

    data_services: tuple[DataService, ...]
    source_file: str
    warnings: tuple[str, ...] = field(default=())
