"""Exceptions raised by the Spark integration; every one derives from :class:`affinity.AffinityError`."""

from __future__ import annotations

from affinity.exceptions import AffinityError, ConfigError

__all__ = ["AckTimeoutError", "EnvelopeError", "RetentionError", "SparkOptionError", "SparkTaskError"]


class SparkOptionError(ConfigError):
    """A data source option is unknown, missing or malformed; the message names the option and the value."""


class EnvelopeError(AffinityError, ValueError):
    """A message is not a valid Spark envelope (or its body does not decode); the message says which field."""


class AckTimeoutError(AffinityError, TimeoutError):
    """The sink could not hand its rows over (back-pressure, no consumer, unacknowledged) within ``ackTimeout``."""


class RetentionError(AffinityError, LookupError):
    """The source was asked to replay offsets it no longer holds (the transport keeps a window, not a log)."""


class SparkTaskError(AffinityError, RuntimeError):
    """The sink ran where it cannot work: outside a Spark task, or under a continuous trigger."""
