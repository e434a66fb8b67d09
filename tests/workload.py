"""Deterministic message workloads shared by tests, the demo and benchmarks."""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable

import affinity


def mixed_sizes(count: int, seed: int = 1) -> list[int]:
    """Sizes mostly 1 B - 1 KiB, 1% up to 64 KiB (so large messages are fragmented)."""
    rng = random.Random(seed)
    return [rng.randint(8, 64 * 1024) if rng.random() < 0.01 else rng.randint(8, 1024) for _ in range(count)]


def make_message(index: int, size: int) -> bytes:
    """A message of `size` bytes (>= 8) that starts with its index and has index-dependent fill."""
    fill = bytes([index % 251]) * (size - 8)
    return struct.pack("<Q", index) + fill


def pump(
    pub: affinity.Publication,
    sub: affinity.Subscription,
    messages: list[bytes],
    *,
    timeout: float = 120.0,
    on_batch: Callable[[list[bytes]], None] | None = None,
    batch: int = 256,
) -> list[bytes]:
    """Offers every message (retrying on back-pressure) while polling; returns what arrived."""
    deadline = time.monotonic() + timeout
    while not pub.is_connected:
        if time.monotonic() > deadline:
            raise TimeoutError("publication never connected")
        time.sleep(0.001)
    received: list[bytes] = []
    sent = 0
    while len(received) < len(messages):
        if time.monotonic() > deadline:
            raise TimeoutError(f"stalled: sent {sent}, received {len(received)} of {len(messages)}")
        if sent < len(messages):
            sent += pub.offer_batch(messages[sent : sent + batch])
        got = sub.poll_batch(1024)
        if on_batch is not None and got:
            on_batch(got)
        received.extend(got)
    return received
