"""Helpers for tests and demos: a loss-injecting relay and free loopback ports.

:func:`free_udp_port` hands out ports outside the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``), where the kernel never puts a socket bound to port 0 (a
driver's sending socket, another test's probe): a port handed out here cannot be taken by one of
those between the probe and the bind of whatever uses it. A cursor through the range hands every
port out once per process; it starts at a point picked from the pid, which keeps processes
running at once (a test and the children it starts) apart. ``rust/tests/support/ports.rs`` does
the same for the Rust tests.

The starting point is the pid's Fibonacci hash scaled to the range (the fractional part of
``pid * golden ratio``): pids close together, as a test's and its children's are, start far
apart (within 100 pids of each other, more than 100 ports apart in a 22,768-port range).
"""

from __future__ import annotations

import errno
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from affinity._affinity import LossyRelay
from affinity.exceptions import AffinityOSError

__all__ = ["LossyRelay", "free_udp_port", "loopback_channel"]

#: Where the kernel says which ports it picks for a bind to port 0.
EPHEMERAL_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's default ephemeral range, used when that file cannot be read.
DEFAULT_EPHEMERAL_RANGE: Final = (32768, 60999)
#: The lowest port handed out (registered services cluster below).
LOWEST_PORT: Final = 10000
#: The fewest ports a range outside the ephemeral one must hold to be used.
MIN_RANGE: Final = 1024
#: The highest port number.
HIGHEST_PORT: Final = 65535
#: 2**64 / golden ratio: multiplying by it (mod 2**64) spreads consecutive pids evenly.
_FIBONACCI_MULTIPLIER: Final = 0x9E3779B97F4A7C15
_WORD_BITS: Final = 64


@dataclass
class _Cursor:
    """The ports of this process: ``count`` from ``first``, handed out from ``start`` on."""

    first: int
    count: int
    start: int
    taken: int = 0


_lock = threading.Lock()
_cursor: _Cursor | None = None


def free_udp_port() -> int:
    """A UDP port no socket of this host used (on any address) when probed, and that this
    process has not handed out before.

    Raises :class:`~affinity.AffinityOSError` (``EADDRINUSE``) once every port of the range was
    handed out or found in use.
    """
    global _cursor
    with _lock:
        if _cursor is None:
            first, count = _candidates()
            _cursor = _Cursor(first, count, _start(os.getpid(), count))
        cursor = _cursor
        while cursor.taken < cursor.count:
            port = cursor.first + (cursor.start + cursor.taken) % cursor.count
            cursor.taken += 1
            if _unused(port):
                return port
    raise AffinityOSError(
        errno.EADDRINUSE, f"all {cursor.count} UDP ports from {cursor.first} were handed out or in use"
    )


def loopback_channel(port: int | None = None) -> str:
    """``aeron:udp?endpoint=127.0.0.1:<port>`` on a free port unless one is given."""
    return f"aeron:udp?endpoint=127.0.0.1:{port if port is not None else free_udp_port()}"


def _start(pid: int, count: int) -> int:
    """Where ``pid`` starts in a range of ``count`` ports."""
    spread = pid * _FIBONACCI_MULTIPLIER % (1 << _WORD_BITS)
    return spread * count >> _WORD_BITS


def _unused(port: int) -> bool:
    """Bound on the wildcard address, the probe fails if any socket holds the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def _candidates() -> tuple[int, int]:
    """The first port and how many to hand out: below the ephemeral range, else above it, else
    (the ephemeral range covers nearly everything) the ephemeral range itself."""
    low, high = _ephemeral_range()
    if low >= LOWEST_PORT + MIN_RANGE:
        return LOWEST_PORT, low - LOWEST_PORT
    if high <= HIGHEST_PORT - MIN_RANGE:
        return high + 1, HIGHEST_PORT - high
    return low, high - low + 1


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(field) for field in EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def _forget_in_child() -> None:
    """A forked child starts its own cursor, from its own pid."""
    global _cursor, _lock
    _cursor = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
