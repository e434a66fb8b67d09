"""The one grammar of sizes and durations (the Rust core's ``units``, shared with channel URIs,
``affinity driver`` and ``affinity.Client``).

* A size is digits with an optional ``k``, ``m`` or ``g`` suffix (times 1024 each): ``64k``, ``16m``.
* A duration is a decimal number with a unit ``ns``, ``us``, ``ms``, ``s``, ``m`` or ``h``:
  ``500ms``, ``1.5s``, ``2m``. A bare number is in the unit the setting names (``bare_unit``):
  the commands whose options are documented in seconds (``--watch 1``, ``--cycle 30``,
  ``ackTimeout=30``) pass ``"s"``; without one, a bare number other than 0 is refused.

Both raise ``ConfigError`` (also a ``ValueError``) naming the text and what is expected.
"""

from __future__ import annotations

from typing import Literal

from affinity import _affinity

#: The units a duration may be written in (and a bare number may mean).
TimeUnit = Literal["ns", "us", "ms", "s", "m", "h"]

#: Nanoseconds in a second.
_NS_PER_SECOND = 1_000_000_000


def parse_size(text: str) -> int:
    """Bytes in ``text`` (``65536``, ``64k``, ``16m``, ``1g``)."""
    return _affinity.parse_size(text)


def parse_duration(text: str, bare_unit: TimeUnit | None = None) -> float:
    """Seconds in ``text`` (``500ms``, ``1.5s``, ``2m``); a bare number is in ``bare_unit``."""
    return _affinity.parse_duration_ns(text, bare_unit) / _NS_PER_SECOND


__all__ = ["TimeUnit", "parse_duration", "parse_size"]
