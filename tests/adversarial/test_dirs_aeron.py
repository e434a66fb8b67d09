"""A directory that holds a live Aeron media driver: a client attaching to it is told so at once,
and ``affinity driver --dir`` refuses it naming the pid instead of deleting Aeron's files. The
Aeron driver is fabricated: a ``cnc.dat`` with Aeron's ``CncFileDescriptor`` header (version
0.2.0 at offset 0, to-driver buffer length at 4, pid at 40, no affinity magic) whose pid is a live
``sleep`` process and whose heartbeat (the to-driver ring's consumer heartbeat, 640 bytes into
the ring's 768-byte trailer) is fresh."""

from __future__ import annotations

import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import affinity
import pytest
from affinity.exceptions import DriverError

#: Aeron's ``CncFileDescriptor.CNC_VERSION``: SemanticVersion 0.2.0.
AERON_CNC_VERSION = 0 << 16 | 2 << 8 | 0
#: Aeron's cnc header length and ring trailer, and the heartbeat's place in the trailer.
META_DATA_LENGTH = 128
RING_TRAILER = 768
CONSUMER_HEARTBEAT_IN_TRAILER = 640
RING_CAPACITY = 64 * 1024
#: Longest a refusal may take (it is at once; this bounds a hang or a driver that started).
REFUSAL_TIMEOUT_S = 20.0


def write_aeron_cnc(directory: Path, pid: int) -> Path:
    to_driver = RING_CAPACITY + RING_TRAILER
    data = bytearray(META_DATA_LENGTH + to_driver + 64 * 1024)
    struct.pack_into("<iiiiii", data, 0, AERON_CNC_VERSION, to_driver, 64 * 1024 - 1024, 0, 0, 0)
    struct.pack_into("<qqq", data, 24, 10_000_000_000, int(time.time() * 1000), pid)
    struct.pack_into("<i", data, 48, 4096)
    heartbeat = META_DATA_LENGTH + RING_CAPACITY + CONSUMER_HEARTBEAT_IN_TRAILER
    struct.pack_into("<q", data, heartbeat, int(time.time() * 1000))
    directory.mkdir(mode=0o700, exist_ok=True)
    cnc = directory / "cnc.dat"
    cnc.write_bytes(bytes(data))
    return cnc


@pytest.fixture
def aeron_pid() -> Iterator[int]:
    """A live process standing for the Aeron driver."""
    process = subprocess.Popen(["sleep", "120"])
    yield process.pid
    process.kill()
    process.wait()


def test_a_client_is_told_at_once_the_directory_holds_a_live_aeron_driver(tmp_path: Path, aeron_pid: int) -> None:
    directory = tmp_path / "aeron"
    write_aeron_cnc(directory, aeron_pid)
    started = time.monotonic()
    with pytest.raises(DriverError) as raised:
        affinity.Client(dir=str(directory))
    assert time.monotonic() - started < REFUSAL_TIMEOUT_S
    assert not isinstance(raised.value, TimeoutError)
    expected = f"directory {directory} holds a live Aeron media driver (pid {aeron_pid}, cnc version 0.2.0)"
    assert expected in str(raised.value)


def test_the_driver_refuses_a_live_aeron_drivers_directory_and_keeps_its_files(tmp_path: Path, aeron_pid: int) -> None:
    directory = tmp_path / "aeron"
    cnc = write_aeron_cnc(directory, aeron_pid)
    (directory / "publications").mkdir()
    (directory / "publications" / "1.logbuffer").write_bytes(b"aeron's log")
    before = cnc.read_bytes()
    process = subprocess.Popen(
        [sys.executable, "-m", "affinity.cli", "driver", "--dir", str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = process.communicate(timeout=REFUSAL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("the driver took over a live Aeron driver's directory")
    assert process.returncode == 1, stderr
    assert f"holds a live Aeron media driver (pid {aeron_pid}, cnc version 0.2.0)" in stderr, stderr
    assert cnc.read_bytes() == before
    assert (directory / "publications" / "1.logbuffer").read_bytes() == b"aeron's log"
