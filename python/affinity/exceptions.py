"""The exception hierarchy: every error raised by affinity derives from :class:`AffinityError`.

Each class also derives from the built-in exception callers already catch for that kind of
failure (``ValueError``, ``TypeError``, ``OSError``, ``TimeoutError``, ...). The compiled module
raises these classes through one mapping (``rust/src/py/errors.rs``).

Warnings have their own root, :class:`AffinityWarning` (a ``UserWarning``): ``DataLossWarning``
says data handed over was dropped (``Client.close()`` stopped an embedded driver before it had sent
everything).

Outcomes that are part of normal operation are return values, not exceptions: ``offer`` returns
``NOT_CONNECTED``, ``BACK_PRESSURED``, ``ADMIN_ACTION``, ``CLOSED`` or ``MAX_POSITION_EXCEEDED``.
"""

from __future__ import annotations

__all__ = [
    "AffinityError",
    "AffinityOSError",
    "AffinityWarning",
    "ArgumentTypeError",
    "ChannelUriError",
    "ClosedError",
    "ConfigError",
    "DataLossWarning",
    "DriverError",
    "DriverTimeoutError",
    "InvalidArgumentError",
    "MessageTooLongError",
    "PolicyError",
    "RoutingError",
]


class AffinityError(Exception):
    """Root of every exception raised by affinity."""


class AffinityWarning(UserWarning):
    """Root of every warning affinity issues (``warnings.simplefilter("error", AffinityWarning)``
    turns them all into exceptions)."""


class DataLossWarning(AffinityWarning):
    """Data the caller handed over was dropped, not delivered: ``Client.close()`` stopped an
    embedded driver before its publications had sent everything. The message gives the
    messages and bytes dropped."""


class ConfigError(AffinityError, ValueError):
    """A setting, channel URI or routing configuration is invalid.

    For a setting the message names it and its allowed range
    (``receiver_window=0: must be between 64 and 536870912``); for a configuration file it gives
    file:line:column.
    """


class ChannelUriError(ConfigError):
    """A channel URI is malformed or asks for something the driver does not do; the message
    names the key and the value."""


class InvalidArgumentError(AffinityError, ValueError):
    """An argument has the right type but a value that cannot be used (a non-contiguous buffer,
    an Arrow array with nulls or with offsets that are negative, decreasing or out of bounds)."""


class ArgumentTypeError(AffinityError, TypeError):
    """An argument has the wrong type (for example ``offer`` given a ``str``); the message names the
    argument and the type received (``channel: expected a str, got NoneType``)."""


class AffinityOSError(AffinityError, OSError):
    """An operating-system call failed (binding a socket, ...); ``errno`` is set when known and
    the message names the channel and address."""


class ClosedError(AffinityError, RuntimeError):
    """The client, publication or subscription was closed before this call."""


class DriverError(AffinityError, RuntimeError):
    """The media driver failed (a driver thread that stopped, a poisoned lock: a bug)."""


class DriverTimeoutError(AffinityError, TimeoutError):
    """The media driver did not answer within ``command_timeout_ms``; nothing was created."""


class MessageTooLongError(AffinityError, ValueError):
    """A message is longer than the publication's term length allows (``min(term/8, 16 MiB)``)."""


class RoutingError(AffinityError, LookupError):
    """A routing table could not route a subject (for example: no member is up)."""


class PolicyError(AffinityError, RuntimeError):
    """A routing policy plugin could not be loaded or misbehaved."""
