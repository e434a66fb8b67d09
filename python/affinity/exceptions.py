"""The exception hierarchy: every error raised by affinity derives from :class:`AffinityError`."""

from __future__ import annotations

__all__ = [
    "AffinityError",
    "ChannelUriError",
    "ClosedError",
    "ConfigError",
    "DriverError",
    "DriverTimeoutError",
    "MessageTooLongError",
    "PolicyError",
    "RoutingError",
]


class AffinityError(Exception):
    """Root of every exception raised by affinity."""


class ChannelUriError(AffinityError, ValueError):
    """A channel URI is malformed; the message names the key and the value."""


class ClosedError(AffinityError, RuntimeError):
    """The client, publication or subscription was closed before this call."""


class DriverError(AffinityError, RuntimeError):
    """The media driver failed (socket error, resource exhaustion, ...)."""


class DriverTimeoutError(AffinityError, TimeoutError):
    """The media driver did not answer in time."""


class MessageTooLongError(AffinityError, ValueError):
    """A message is longer than the publication's term length allows (``min(term/8, 16 MiB)``)."""


class ConfigError(AffinityError, ValueError):
    """A routing configuration file is invalid; the message gives file:line:column."""


class RoutingError(AffinityError, LookupError):
    """A routing table could not route a subject (for example: no member is up)."""


class PolicyError(AffinityError, RuntimeError):
    """A routing policy plugin could not be loaded or misbehaved."""
