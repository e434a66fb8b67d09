"""``Client.close(timeout=...)`` on an embedded driver tells the caller when it drops data not yet sent.

A receiver process holds a min-flow-control publication back (it stops polling, so its image's window
stops moving); closing the publishing client with a short timeout drops what the sender had not sent:
``close()`` returns False and warns with ``DataLossWarning`` giving the count. The messages dropped
plus the messages the receiver gets add up to the messages offered. With a receiver that keeps up,
``close()`` returns True without a warning.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from typing import IO

import affinity
import pytest
from affinity.testing import loopback_channel

STREAM_ID = 1001
MESSAGE = b"m" * 100
#: Bounds of the waits (none is a speed assertion).
WAIT_S = 30.0
#: How long offers must stay back-pressured before the stream counts as held back.
HELD_BACK_S = 0.5
#: A receiver process: subscribes, says "ready", and polls only while told to ("poll" / "stop" lines on
#: stdin); on "count" prints how many messages it has, on "quit" closes and exits.
RECEIVER = r"""
import select, sys, affinity
channel, stream_id = sys.argv[1], int(sys.argv[2])
count = 0
def handler(data, header):
    global count
    count += 1
with affinity.Client() as client:
    subscription = client.add_subscription(channel, stream_id)
    print("ready", flush=True)
    polling = sys.argv[3] == "poll"
    while True:
        readable, _, _ = select.select([sys.stdin], [], [], 0 if polling else 0.05)
        if readable:
            # Unbuffered: a buffered readline would keep a second command where select cannot see it.
            command = sys.stdin.buffer.raw.readline().decode().strip()
            if command in ("", "quit"):
                break
            if command == "count":
                print(count, flush=True)
            polling = command == "poll" or (polling and command == "count")
        if polling:
            subscription.poll(handler, 1000)
"""


class Receiver:
    """The receiver process and its pipes."""

    def __init__(self, channel: str, mode: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, channel, str(STREAM_ID), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.readline() == "ready"

    def readline(self) -> str:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        return stdout.readline().strip()

    def send(self, command: str) -> None:
        stdin: IO[str] | None = self.process.stdin
        assert stdin is not None
        stdin.write(command + "\n")
        stdin.flush()

    def count(self) -> int:
        self.send("count")
        return int(self.readline())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.send("quit")
            try:
                self.process.wait(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def channel() -> str:
    return loopback_channel() + "|fc=min"


def receiver_process(channel: str, mode: str) -> Iterator[Receiver]:
    receiver = Receiver(channel, mode)
    try:
        yield receiver
    finally:
        receiver.stop()


@pytest.fixture
def stalled(channel: str) -> Iterator[Receiver]:
    yield from receiver_process(channel, "stop")


@pytest.fixture
def keeping_up(channel: str) -> Iterator[Receiver]:
    yield from receiver_process(channel, "poll")


def connected_publication(client: affinity.Client, channel: str) -> affinity.Publication:
    publication = client.add_publication(channel, STREAM_ID)
    deadline = time.monotonic() + WAIT_S
    while not publication.is_connected:
        assert time.monotonic() < deadline, "the receiver never connected"
        time.sleep(0.01)
    return publication


def offer_until_held_back(publication: affinity.Publication) -> int:
    """Offers until back-pressure has lasted ``HELD_BACK_S``; returns the messages accepted."""
    offered = 0
    deadline = time.monotonic() + WAIT_S
    held_since: float | None = None
    while True:
        assert time.monotonic() < deadline, "the publication was never held back"
        if publication.offer(MESSAGE) > 0:
            offered += 1
            held_since = None
            continue
        now = time.monotonic()
        held_since = now if held_since is None else held_since
        if now - held_since >= HELD_BACK_S:
            return offered
        time.sleep(0.001)


def test_close_that_drops_unsent_data_returns_false_and_warns_with_the_count(channel: str, stalled: Receiver) -> None:
    client = affinity.Client()
    publication = connected_publication(client, channel)
    offered = offer_until_held_back(publication)
    with pytest.warns(affinity.DataLossWarning) as warned:
        assert client.close(timeout=0.2) is False
    assert len(warned) == 1
    match = re.search(r"with (\d+) messages \((\d+) bytes\) not sent", str(warned[0].message))
    assert match is not None, str(warned[0].message)
    dropped, dropped_bytes = int(match.group(1)), int(match.group(2))
    assert 0 < dropped < offered
    # Each 100-byte message takes a 32-byte header, aligned to 32: 160 log bytes; the half-term window
    # holds at most one term end, padded with less than one message.
    assert dropped * 160 <= dropped_bytes < (dropped + 1) * 160
    stalled.send("poll")
    deadline = time.monotonic() + WAIT_S
    while (received := stalled.count()) < offered - dropped:
        assert time.monotonic() < deadline, f"received {received} of the {offered - dropped} sent"
        time.sleep(0.05)
    assert received == offered - dropped, "what close() reports dropped is exactly what never arrived"
    assert client.close(timeout=0.2) is True, "a second close has nothing left to drop"


def test_close_after_everything_was_sent_returns_true_without_a_warning(channel: str, keeping_up: Receiver) -> None:
    client = affinity.Client()
    publication = connected_publication(client, channel)
    offered = 0
    deadline = time.monotonic() + WAIT_S
    while offered < 2_000:
        assert time.monotonic() < deadline, f"offered only {offered} messages"
        if publication.offer(MESSAGE) > 0:
            offered += 1
    while keeping_up.count() < offered:
        assert time.monotonic() < deadline, "the receiver did not get every message"
        time.sleep(0.05)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert client.close(timeout=0.5) is True
    assert not [w for w in caught if issubclass(w.category, affinity.DataLossWarning)]


@pytest.mark.parametrize("timeout", [-1.0, float("nan"), float("inf")])
def test_close_refuses_a_timeout_that_is_not_a_finite_number_of_seconds(timeout: float) -> None:
    client = affinity.Client()
    try:
        with pytest.raises(affinity.ConfigError, match=r"^timeout=.*: must be a finite number of seconds >= 0$"):
            client.close(timeout=timeout)
        assert not client.is_closed
    finally:
        client.close()
