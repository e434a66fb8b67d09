"""A hostile client against the log buffers of a shared standalone driver (issue 25, "The driver:
one client cannot hang, starve or kill the others").

* Truncating a log buffer, as any client could through the name the driver gave it, used to
  kill the driver with SIGBUS, and every other client with it. The logs are now sealed memfds
  that no process can shrink (``docs/driver-protocol.md``, "Log buffers are sealed memfds"): the
  truncation is refused, the driver and the other clients' streams go on.
* A log whose metadata is impossible (an active term count whose partition holds another
  term) used to leave its publisher retrying ``ADMIN_ACTION`` for ever; now its owner gets a
  ``DriverError`` naming the field, the value and the log.

Clients and the hostile process are separate processes (a client that maps a truncated log
dies too). The hostile process finds the logs as a client could: the driver's memfds under
``/proc/<pid>/fd`` (and, for a driver that still keeps them as files, ``publications/``).
Every wait is bounded by time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import affinity
import pytest
from affinity.exceptions import DriverError
from affinity.testing import loopback_channel
from conftest import StandaloneDriver, start_standalone_driver, stop_standalone_driver

#: How long a streaming child runs at most (it is stopped earlier at the end of a test).
CHILD_SECONDS = 60.0
#: Bounded waits of these tests.
WAIT_S = 20.0
#: How long the other client's stream is watched after the attack.
WATCH_S = 2.0
#: Bytes of a log's metadata section, at its end (``LOG_META_DATA_LENGTH``).
LOG_META_DATA_LENGTH = 4096
#: Offsets in the metadata (``docs/driver-protocol.md``, "Log buffer").
ACTIVE_TERM_COUNT = 24
DEFAULT_FRAME_HEADER = 384
#: Offset of the stream id in a DATA header.
HEADER_STREAM_ID = 16

# A client with a publication and a subscription of one stream: offers and polls, and prints
# how many messages it received, every 50 ms.
STREAM_CHILD = """
import sys, time, affinity
directory, channel, stream_id, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
client = affinity.Client(dir=directory)
subscription = client.add_subscription(channel, stream_id)
publication = client.add_publication(channel, stream_id)
received = 0
def count(data, header):
    global received
    received += 1
deadline = time.monotonic() + seconds
report = 0.0
while time.monotonic() < deadline:
    publication.offer(b"m" * 64)
    subscription.poll(count, 100)
    now = time.monotonic()
    if now >= report:
        print(received, flush=True)
        report = now + 0.05
    time.sleep(0.0005)
"""

# The hostile process: truncates each log named in its arguments, as a client holding that name
# could, and prints what each truncation did (one JSON line per log).
HOSTILE_CHILD = """
import json, os, sys
for path in sys.argv[1:]:
    try:
        os.truncate(path, 0)
        outcome = "truncated"
    except OSError as error:
        outcome = f"errno {error.errno}"
    print(json.dumps({"log": path, "outcome": outcome}), flush=True)
"""


def driver_logs(directory: str, pid: int) -> list[Path]:
    """The logs of the driver ``pid`` on ``directory`` a client of the same user can open: its
    memfds named ``affinity-...`` (``/proc/<pid>/fd/<fd>``), or files under ``publications/``."""
    logs = sorted(Path(directory, "publications").glob("*.logbuffer"))
    fd_dir = Path(f"/proc/{pid}/fd")
    for entry in fd_dir.iterdir():
        try:
            target = os.readlink(entry)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("/memfd:affinity-"):
            logs.append(entry)
    return logs


def log_stream_id(path: Path) -> int | None:
    """The stream id in the default frame header of the log at ``path`` (``None`` if gone)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        length = os.fstat(fd).st_size
        at = length - LOG_META_DATA_LENGTH + DEFAULT_FRAME_HEADER + HEADER_STREAM_ID
        raw = os.pread(fd, 4, at)
    finally:
        os.close(fd)
    return int.from_bytes(raw, "little", signed=True) if len(raw) == 4 else None


def log_name(path: Path) -> str:
    """What the log at ``path`` is called: its memfd's name, or its file name."""
    return os.readlink(path) if path.is_symlink() else path.name


def logs_of_stream(directory: str, pid: int, stream_id: int) -> list[Path]:
    """The driver's logs of ``stream_id`` (a publication's and, over UDP, its image's)."""
    return [path for path in driver_logs(directory, pid) if log_stream_id(path) == stream_id]


class Progress:
    """The last count a streaming child printed, read by a thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.count = -1
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip().isdigit():
                self.count = int(line)

    def wait_above(self, value: int, timeout: float) -> bool:
        """Whether the count passes ``value`` within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count > value:
                return True
            if self.process.poll() is not None:
                return self.count > value
            time.sleep(0.02)
        return False

    def stop(self) -> str:
        """Ends the child; its stderr."""
        if self.process.poll() is None:
            self.process.kill()
        _, err = self.process.communicate(timeout=WAIT_S)
        self._thread.join(timeout=WAIT_S)
        return err


def stream_child(driver: StandaloneDriver, channel: str, stream_id: int) -> Progress:
    process = subprocess.Popen(
        [sys.executable, "-c", STREAM_CHILD, str(driver.dir), channel, str(stream_id), str(CHILD_SECONDS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return Progress(process)


def channel_of(transport: str) -> str:
    return "aeron:ipc" if transport == "ipc" else loopback_channel()


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[StandaloneDriver]:
    """A standalone driver of this test alone; it must exit 0 on SIGTERM at the end."""
    driver = start_standalone_driver(tmp_path / "driver")
    try:
        yield driver
    finally:
        stop_standalone_driver(driver)


@pytest.mark.parametrize("transport", ["ipc", "udp"])
def test_truncating_a_log_does_not_kill_the_driver_nor_stop_another_clients_stream(
    driver: StandaloneDriver, transport: str
) -> None:
    victim = stream_child(driver, channel_of(transport), 11)
    other = stream_child(driver, channel_of(transport), 12)
    try:
        assert victim.wait_above(0, WAIT_S), f"the victim's stream never moved: {victim.stop()}"
        assert other.wait_above(0, WAIT_S), f"the other stream never moved: {other.stop()}"
        pid = driver.process.pid
        expected = 1 if transport == "ipc" else 2  # UDP: the publication's log and the image's
        targets = logs_of_stream(str(driver.dir), pid, 11)
        assert len(targets) == expected, targets
        hostile = subprocess.run(
            [sys.executable, "-c", HOSTILE_CHILD, *map(str, targets)],
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=True,
        )
        outcomes = [json.loads(line) for line in hostile.stdout.splitlines()]
        assert len(outcomes) == expected, hostile.stdout + hostile.stderr
        seen = other.count
        alive = other.wait_above(seen, WATCH_S) and driver.process.poll() is None
        status = driver.process.poll()
        assert status is None, f"the driver died (status {status}) after {outcomes}"
        assert alive, f"the other client's stream stopped at {seen} after {outcomes}: {other.stop()}"
        # The seals refused every truncation: the victim's stream goes on too.
        assert all(o["outcome"] == "errno 1" for o in outcomes), outcomes
        assert victim.wait_above(victim.count, WATCH_S), f"the victim's stream stopped: {victim.stop()}"
    finally:
        victim.stop()
        other.stop()


@pytest.mark.parametrize("transport", ["ipc", "udp"])
def test_a_log_with_an_impossible_active_term_count_gives_its_owner_an_error_naming_it(
    driver: StandaloneDriver, transport: str
) -> None:
    channel = channel_of(transport)
    other = stream_child(driver, channel_of(transport), 22)
    client = affinity.Client(dir=str(driver.dir))
    try:
        subscription = client.add_subscription(channel, 21)
        publication = client.add_publication(channel, 21)
        deadline = time.monotonic() + WAIT_S
        while publication.offer(b"before") < 0 and time.monotonic() < deadline:
            subscription.poll(lambda data, header: None, 10)
            time.sleep(0.001)
        assert publication.position > 0
        logs = [
            path for path in logs_of_stream(str(driver.dir), driver.process.pid, 21) if "image" not in log_name(path)
        ]
        assert len(logs) == 1, logs
        fd = os.open(logs[0], os.O_RDWR)
        try:
            meta = os.fstat(fd).st_size - LOG_META_DATA_LENGTH
            # Term count 4 selects partition 1, which holds the term before the initial one.
            os.pwrite(fd, (4).to_bytes(4, "little"), meta + ACTIVE_TERM_COUNT)
        finally:
            os.close(fd)
        with pytest.raises(DriverError) as raised:
            for _ in range(10_000):  # was: ADMIN_ACTION (-3) on every one of them, for ever
                publication.offer(b"after")
        message = str(raised.value)
        assert "active term count 4 selects partition 1" in message, message
        assert "stream 21" in message and "corrupt" in message, message
        assert f"/proc/{driver.process.pid}/fd/" in message, message
        if transport == "ipc":
            # A subscriber that joins the stream now opens the log: refused when it is opened.
            late = affinity.Client(dir=str(driver.dir))
            try:
                late_subscription = late.add_subscription(channel, 21)
                deadline = time.monotonic() + WAIT_S
                with pytest.raises(DriverError) as refused:
                    while time.monotonic() < deadline:
                        late_subscription.poll(lambda data, header: None, 10)
                        time.sleep(0.01)
                message = str(refused.value)
                assert "tail counter of partition 1" in message and "active term count 4" in message, message
                assert "stream 21" in message, message
            finally:
                late.close()
        # Only this stream: the driver and the other client's stream go on.
        assert other.wait_above(other.count, WATCH_S), f"the other stream stopped: {other.stop()}"
        assert driver.process.poll() is None
    finally:
        client.close()
        other.stop()
