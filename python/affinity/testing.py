"""Helpers for tests and demos: a loss-injecting relay and free loopback ports.

:func:`free_udp_port` is the allocator of the Rust tests (``rust/crates/media-driver/src/media/ports.rs``), so
Python and Rust test processes running at once pick ports the same way: ports outside the
kernel's ephemeral range (``net.ipv4.ip_local_port_range``), where the kernel never puts a
socket bound to port 0 (a driver's sending socket, another test's probe), so a port handed out
here cannot be taken by one of those between the probe and the bind of whatever uses it. A
cursor through the range hands every port out once per process; it starts at a point picked
from the pid (its Fibonacci hash scaled to the range), which keeps processes running at once (a
test and the children it starts, a forked child) apart.
"""

from __future__ import annotations

from affinity import _affinity
from affinity._affinity import LossyRelay

__all__ = ["LossyRelay", "free_udp_port", "loopback_channel"]


def free_udp_port() -> int:
    """A UDP port no socket of this host used (on any address) when probed, and that this
    process has not handed out before.

    Raises :class:`~affinity.AffinityOSError` (``EADDRINUSE``) once every port of the range was
    handed out or found in use.
    """
    return _affinity.free_udp_port()


def loopback_channel(port: int | None = None) -> str:
    """``aeron:udp?endpoint=127.0.0.1:<port>`` on a free port unless one is given."""
    return f"aeron:udp?endpoint=127.0.0.1:{port if port is not None else free_udp_port()}"
