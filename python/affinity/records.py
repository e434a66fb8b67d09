"""Typed shapes of the dicts the compiled module returns (counters, images, events, routing
answers). They are plain dicts at runtime; these ``TypedDict`` classes give their keys and types
to type checkers and to readers.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

__all__ = [
    "DriverCounters",
    "DriverEventInfo",
    "ExplanationInfo",
    "ImageInfo",
    "LegInfo",
    "PublicationCounters",
    "ReceiverInfo",
    "RelayStats",
    "RoutingEventInfo",
]


class DriverCounters(TypedDict):
    """``Client.counters()``: driver-wide counts."""

    invalid_data_frames: int
    invalid_control_frames: int
    send_errors: int
    dropped_events: int


class ReceiverInfo(TypedDict):
    """One receiver a publication hears from (``PublicationCounters`` ``receivers`` entries)."""

    receiver_id: int
    group_tag: int | None
    position: int
    window: int


class PublicationCounters(TypedDict):
    """``Publication.counters()``: positions, flow control, receivers and traffic counts."""

    session_id: int
    stream_id: int
    position: int
    sender_position: int
    sender_limit: int
    publisher_limit: int
    connected: bool
    closed: bool
    strategy: str
    group_tag: int | None
    group_min_size: int
    receiver_timeout_ms: int
    receivers: list[ReceiverInfo]
    live_receivers: list[ReceiverInfo]
    status_messages: int
    naks_received: int
    naks_ignored: int
    retransmits_sent: int
    retransmitted_bytes: int
    datagrams_sent: int
    bytes_sent: int
    heartbeats_sent: int
    setups_sent: int
    errors_received: int
    invalid_control_frames: int


class ImageInfo(TypedDict):
    """``Subscription.images()`` entries: one image (one publication session) each."""

    session_id: int
    source: str
    position: int
    rebuild_position: int
    hwm_position: int
    active: bool
    datagrams_received: int
    bytes_received: int
    heartbeats_received: int
    duplicates: int
    overruns: int
    malformed: int
    loss_gaps: int
    loss_bytes: int
    unrecoverable_gaps: int
    unrecoverable_bytes: int
    naks_sent: int
    retransmits_received: int
    status_messages_sent: int


class DriverEventInfo(TypedDict):
    """``Client.events()`` entries; the keys after ``kind`` depend on it."""

    time: float
    level: str
    channel: str
    stream_id: int
    session_id: int
    kind: Literal["receiver_joined", "receiver_removed", "connection_changed", "receiver_error"]
    message: str
    receiver_id: NotRequired[int]
    group_tag: NotRequired[int | None]
    reason: NotRequired[str]
    connected: NotRequired[bool]
    code: NotRequired[int]
    error: NotRequired[str]


class RelayStats(TypedDict):
    """``LossyRelay.stats()``: datagram counts."""

    received: int
    dropped: int
    duplicated: int
    reordered: int


class LegInfo(TypedDict):
    """One source group's answer for a subject (``RoutingTable.subscribe``/``route``)."""

    service: str
    source_group: str
    member: str | None
    peer_index: int | None
    priority_group: int | None
    composite: str | None
    rule_index: int | None
    reason: str
    since: int | None


class ExplanationInfo(LegInfo):
    """``RoutingTable.explain``: the primary leg and why."""

    affinity_key: str | None
    pattern: str | None
    policy: str
    selection: str
    bound_reason: str | None
    subscribed: bool
    references: int
    moved_from: str | None
    move_reason: str | None


class RoutingEventInfo(TypedDict):
    """``RoutingTable.drain_events`` entries."""

    sequence: int
    kind: str
    subject: str | None
    composite: str | None
    member: str | None
    peer_index: int | None
    previous: str | None
    previous_peer_index: int | None
    reason: str | None
    move_reason: str | None
    message: str | None
