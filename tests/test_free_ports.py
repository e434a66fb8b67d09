"""``affinity.testing.free_udp_port`` (the Rust allocator, ``rust/crates/media-driver/src/media/ports.rs``, whose unit
tests pin the cursor): outside the ephemeral range, each port once, apart per process."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from affinity.testing import free_udp_port, loopback_channel

#: Where the kernel says which ports it picks for a bind to port 0.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Ports a child process takes in the test of two processes.
CHILD_PORTS = 40
#: A child printing the ports it was handed, as JSON.
_CHILD = f"""
import json
from affinity.testing import free_udp_port
print(json.dumps([free_udp_port() for _ in range({CHILD_PORTS})]))
"""
#: A child taking ports until the range is used up, printing how many it got and the error.
_EXHAUST = """
import json
import affinity
from affinity.testing import free_udp_port
ports = set()
try:
    while True:
        ports.add(free_udp_port())
except affinity.AffinityOSError as error:
    print(json.dumps([len(ports), error.errno, str(error)]))
"""


def ephemeral_range() -> tuple[int, int]:
    low, high = (int(field) for field in EPHEMERAL_RANGE_FILE.read_text().split())
    if low < 10000 + 1024 and high > 65535 - 1024:
        pytest.skip(f"the ephemeral range {low}-{high} leaves too few ports outside it")
    return low, high


def test_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() -> None:
    low, high = ephemeral_range()
    ports = [free_udp_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(not low <= port <= high for port in ports), [p for p in ports if low <= p <= high]


def test_a_used_up_range_raises_eaddrinuse_naming_it() -> None:
    low, high = ephemeral_range()
    child = subprocess.run([sys.executable, "-c", _EXHAUST], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    taken, code, message = json.loads(child.stdout)
    assert code == errno.EADDRINUSE
    first = 10000 if low >= 10000 + 1024 else high + 1
    named = re.search(rf"all (\d+) UDP ports from {first} were handed out or in use", message)
    assert named is not None, message
    assert 1000 < taken <= int(named.group(1)), (taken, message)


def test_processes_started_together_take_different_ports() -> None:
    children = [subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    taken = [set(json.loads(child.communicate(timeout=30)[0])) for child in children]
    assert all(len(ports) == CHILD_PORTS for ports in taken)
    assert not taken[0] & taken[1]


def test_a_forked_child_takes_ports_of_its_own() -> None:
    free_udp_port()  # the parent's cursor exists before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its ports, then out without running pytest's exit handlers
        try:
            os.write(write, json.dumps([free_udp_port() for _ in range(CHILD_PORTS)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(json.loads(pipe.read()))
    os.waitpid(pid, 0)
    parent = {free_udp_port() for _ in range(CHILD_PORTS)}
    assert len(child) == CHILD_PORTS and not child & parent


def test_loopback_channel_names_a_free_port_or_the_one_given() -> None:
    assert loopback_channel(4242) == "aeron:udp?endpoint=127.0.0.1:4242"
    port = int(loopback_channel().rsplit(":", 1)[1])
    low, high = ephemeral_range()
    assert not low <= port <= high
