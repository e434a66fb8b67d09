"""The compiled consumer-group types and hash functions, re-exported under their public names.

The status classes and :class:`GroupMessage` are frozen pyclasses built by the Rust layer
(``rust/src/py/groups.rs``); their fields are documented in ``_affinity.pyi``.
"""

from __future__ import annotations

from affinity._affinity import (
    ConsumerStatus,
    GroupMessage,
    GroupStatus,
    MemberStatus,
    PublisherStatus,
    QueueSendStatus,
    QueueStatus,
    group_bucket,
    group_queue,
    group_queues,
)

__all__ = [
    "ConsumerStatus",
    "GroupMessage",
    "GroupStatus",
    "MemberStatus",
    "PublisherStatus",
    "QueueSendStatus",
    "QueueStatus",
    "group_bucket",
    "group_queue",
    "group_queues",
]
