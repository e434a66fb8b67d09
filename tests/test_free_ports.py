"""``affinity.testing.free_udp_port``: outside the ephemeral range, each port once, apart per process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator

import affinity
import affinity.testing as testing
import pytest
from affinity.testing import EPHEMERAL_RANGE_FILE, free_udp_port, loopback_channel

#: Ports a child process takes in the test of two processes.
CHILD_PORTS = 40
#: A child printing the ports it was handed, as JSON.
_CHILD = f"""
import json
from affinity.testing import free_udp_port
print(json.dumps([free_udp_port() for _ in range({CHILD_PORTS})]))
"""


@pytest.fixture
def own_cursor(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test's own cursor, the module's given back afterwards."""
    monkeypatch.setattr(testing, "_cursor", None)
    yield


def ephemeral_range() -> tuple[int, int]:
    low, high = (int(field) for field in EPHEMERAL_RANGE_FILE.read_text().split())
    if testing._candidates() == (low, high - low + 1):
        pytest.skip(f"the ephemeral range {low}-{high} leaves too few ports outside it")
    return low, high


def test_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() -> None:
    low, high = ephemeral_range()
    ports = [free_udp_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= port <= high for port in ports), [p for p in ports if low <= p <= high]


def test_a_port_some_socket_holds_is_skipped() -> None:
    free_udp_port()
    cursor = testing._cursor
    assert cursor is not None
    upcoming = cursor.first + (cursor.start + cursor.taken) % cursor.count
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as holder:
        try:
            holder.bind(("127.0.0.1", upcoming))
        except OSError:
            pass  # someone else holds it: skipped all the same
        assert free_udp_port() != upcoming


def test_an_exhausted_range_raises_naming_it(own_cursor: None) -> None:
    first = free_udp_port()
    testing._cursor = testing._Cursor(first, 1, 0)
    assert free_udp_port() == first
    with pytest.raises(affinity.AffinityOSError, match=f"all 1 UDP ports from {first}"):
        free_udp_port()


def test_processes_started_together_take_different_ports() -> None:
    children = [subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    taken = [set(json.loads(child.communicate(timeout=30)[0])) for child in children]
    assert all(len(ports) == CHILD_PORTS for ports in taken)
    assert not taken[0] & taken[1]


def test_neighbouring_pids_start_far_apart() -> None:
    count = 22_768
    starts = [testing._start(pid, count) for pid in range(5000, 5100)]
    gaps = {(b - a) % count for a in starts for b in starts if a != b}
    assert min(min(gap, count - gap) for gap in gaps) > 100


def test_loopback_channel_names_a_free_port_or_the_one_given() -> None:
    assert loopback_channel(4242) == "aeron:udp?endpoint=127.0.0.1:4242"
    port = int(loopback_channel().rsplit(":", 1)[1])
    low, high = ephemeral_range()
    assert not low <= port <= high
