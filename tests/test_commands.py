"""Client commands (add_publication / add_subscription) either return their resource or fail
and leave nothing behind, whoever runs the driver's duty cycle."""

from __future__ import annotations

import os
import threading
import time

import affinity
import pytest
from affinity.testing import loopback_channel


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def descriptors_of_kind(prefix: str) -> int:
    """Open descriptors of this process whose link starts with ``prefix`` (``socket:``, or
    ``/memfd:affinity-`` for the embedded driver's log buffers)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(prefix)
        except OSError:
            continue  # closed meanwhile
    return count


@pytest.mark.slow
def test_invoker_commands_succeed_while_another_thread_polls() -> None:
    channel = loopback_channel()
    with affinity.Client(threading="invoker") as client, client.add_subscription(channel, 1) as sub:
        stop = threading.Event()
        polls = 0

        def poll() -> None:
            nonlocal polls
            deadline = time.monotonic() + 60
            while not stop.is_set() and time.monotonic() < deadline:
                sub.poll(lambda data, header: None, 10)
                polls += 1

        poller = threading.Thread(target=poll)
        before = open_descriptors()
        sockets, logs = descriptors_of_kind("socket:"), descriptors_of_kind("/memfd:affinity-")
        poller.start()
        publications: list[affinity.Publication] = []
        try:
            for stream_id in range(100):
                publications.append(client.add_publication(channel, 100 + stream_id))
        finally:
            stop.set()
            poller.join()
        assert len(publications) == 100
        assert polls > 0, "the poller never ran: the test proves nothing"
        # One socket and one log (a sealed memfd of the driver) per publication, none orphaned.
        assert descriptors_of_kind("socket:") - sockets == 100
        assert descriptors_of_kind("/memfd:affinity-") - logs == 100
        assert open_descriptors() - before == 200
        for publication in publications:
            publication.close()


def test_failed_command_leaves_no_descriptor_behind(client: affinity.Client) -> None:
    before = open_descriptors()
    for _ in range(20):
        with pytest.raises(affinity.AffinityOSError):
            client.add_subscription("aeron:udp?endpoint=192.0.2.1:40000", 1)
    assert open_descriptors() == before
