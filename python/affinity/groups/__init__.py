"""Hashed consumer groups: keyed, ordered, sticky delivery with no-loss failover and no broker.

>>> from affinity.groups import GroupPublisher, GroupConsumer, create_group   # doctest: +SKIP
>>> create_group("orders", "orders", hash_count=64, queue_count=8, queue_size=64 << 20)
>>> pub = GroupPublisher(client, "orders")                 # reads the definition by name
>>> pub.publish(b"account-17", b"payload")                 # > 0 accepted, < 0 NOT_CONNECTED ...
>>> consumer = GroupConsumer(client, "orders", index=0, count=2)
>>> for m in consumer.poll(1000):
...     consumer.ack(m)

The definitions live in the registry (:mod:`affinity.groups.registry`); the Rust layer
(``GroupPublisherCore`` and friends) runs the control plane and the data path.
"""

from __future__ import annotations

from affinity.groups.api import GroupConsumer, GroupObserver, GroupPublisher, learn_definition
from affinity.groups.registry import (
    GroupDefinition,
    create_group,
    delete_group,
    list_groups,
    load_group,
    registry_dir,
)
from affinity.groups.secret import create_secret, remove_secret
from affinity.groups.types import (
    GROUP_CONTROL_STREAM_ID,
    GROUP_DATA_STREAM_ID,
    ConsumerCounters,
    ConsumerStatus,
    GroupMessage,
    GroupStatus,
    MemberStatus,
    PublisherCounters,
    PublisherStatus,
    QueueSendStatus,
    QueueStatus,
    group_bucket,
    group_queue,
    group_queues,
)

__all__ = [
    "GROUP_CONTROL_STREAM_ID",
    "GROUP_DATA_STREAM_ID",
    "ConsumerCounters",
    "ConsumerStatus",
    "GroupConsumer",
    "GroupDefinition",
    "GroupMessage",
    "GroupObserver",
    "GroupPublisher",
    "GroupStatus",
    "MemberStatus",
    "PublisherCounters",
    "PublisherStatus",
    "QueueSendStatus",
    "QueueStatus",
    "create_group",
    "create_secret",
    "delete_group",
    "group_bucket",
    "group_queue",
    "group_queues",
    "learn_definition",
    "list_groups",
    "load_group",
    "registry_dir",
    "remove_secret",
]
