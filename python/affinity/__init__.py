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
    AffinityOSError,
    ArgumentTypeError,
    ChannelUriError,
    ClosedError,
    ConfigError,
    DriverError,
    DriverTimeoutError,
    InvalidArgumentError,
    MessageTooLongError,
    PolicyError,
    RoutingError,
)

__all__ = [
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "CLOSED",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "AffinityError",
    "AffinityOSError",
    "ArgumentTypeError",
    "ChannelUriError",
    "Client",
    "ClosedError",
    "ConfigError",
    "DriverError",
    "DriverTimeoutError",
    "Header",
    "InvalidArgumentError",
    "MessageTooLongError",
    "PolicyError",
    "Publication",
    "RoutingError",
    "Subscription",
    "__version__",
]
