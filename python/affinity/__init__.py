"""affinity: Aeron-wire-compatible reliable UDP transport with affinity routing.

>>> import affinity
>>> with affinity.Client() as client:                       # doctest: +SKIP
...     pub = client.add_publication("aeron:udp?endpoint=127.0.0.1:40123", 10)
...     sub = client.add_subscription("aeron:udp?endpoint=127.0.0.1:40123", 10)
"""

from __future__ import annotations

from affinity._affinity import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    Client,
    Header,
    Publication,
    Subscription,
    __version__,
)
from affinity.exceptions import (
    AffinityError,
    ChannelUriError,
    ClosedError,
    ConfigError,
    DriverError,
    DriverTimeoutError,
    MessageTooLongError,
    PolicyError,
    RoutingError,
)
from affinity.groups import (
    ConsumerStatus,
    GroupConsumer,
    GroupDefinition,
    GroupMessage,
    GroupObserver,
    GroupPublisher,
    GroupStatus,
    MemberStatus,
    PublisherStatus,
    QueueSendStatus,
    QueueStatus,
    create_group,
    delete_group,
    group_bucket,
    group_queue,
    group_queues,
    list_groups,
    load_group,
)

__all__ = [
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "CLOSED",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "AffinityError",
    "ChannelUriError",
    "Client",
    "ClosedError",
    "ConfigError",
    "ConsumerStatus",
    "DriverError",
    "DriverTimeoutError",
    "GroupConsumer",
    "GroupDefinition",
    "GroupMessage",
    "GroupObserver",
    "GroupPublisher",
    "GroupStatus",
    "Header",
    "MemberStatus",
    "MessageTooLongError",
    "PolicyError",
    "Publication",
    "PublisherStatus",
    "QueueSendStatus",
    "QueueStatus",
    "RoutingError",
    "Subscription",
    "__version__",
    "create_group",
    "delete_group",
    "group_bucket",
    "group_queue",
    "group_queues",
    "list_groups",
    "load_group",
]
