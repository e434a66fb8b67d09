"""Helpers for tests and demos: a loss-injecting relay and free loopback ports."""

from __future__ import annotations

import socket

from affinity._affinity import LossyRelay

__all__ = ["LossyRelay", "free_udp_port", "loopback_channel"]


def free_udp_port() -> int:
    """A UDP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def loopback_channel(port: int | None = None) -> str:
    """``aeron:udp?endpoint=127.0.0.1:<port>`` on a free port unless one is given."""
    return f"aeron:udp?endpoint=127.0.0.1:{port if port is not None else free_udp_port()}"
