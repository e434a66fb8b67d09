"""affinity: Aeron-wire-compatible reliable UDP transport with affinity routing."""

from __future__ import annotations

from affinity.exceptions import (
    AffinityError,
    ChannelUriError,
    ClosedError,
    ConfigError,
    DriverError,
    DriverTimeoutError,
    PolicyError,
    RoutingError,
)

__all__ = [
    "AffinityError",
    "ChannelUriError",
    "ClosedError",
    "ConfigError",
    "DriverError",
    "DriverTimeoutError",
    "PolicyError",
    "RoutingError",
]
