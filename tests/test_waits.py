"""``Publication.wait_connected`` and ``Subscription.wait_image``: wait without busy-spinning, give
the GIL away, honour Ctrl-C, and say whether the connection came. Each test runs with an embedded
and with a standalone driver (conftest.py, ``driver_kind``)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import affinity
import pytest
from affinity.testing import loopback_channel

pytestmark = pytest.mark.both_drivers

#: Timeout of the waits that must give up (short: the tests wait for it).
SHORT = 0.3
#: Slack past a timeout a loaded machine may add before a wait returns (bounds a hang, not a speed).
SLACK = 5.0


def test_wait_connected_returns_true_once_a_subscriber_answers(client: affinity.Client, channel: str) -> None:
    with client.add_subscription(channel, 3) as sub, client.add_publication(channel, 3) as pub:
        assert pub.wait_connected(timeout=10.0)
        assert pub.is_connected
        assert pub.offer(b"x") > 0
        assert sub.wait_image(timeout=10.0)
        assert sub.is_connected


def test_wait_connected_gives_up_after_the_timeout_without_a_subscriber(client: affinity.Client, channel: str) -> None:
    with client.add_publication(channel, 4) as pub:
        started = time.monotonic()
        assert pub.wait_connected(SHORT) is False
        elapsed = time.monotonic() - started
        assert SHORT <= elapsed < SHORT + SLACK
        assert pub.wait_connected(0) is False  # a zero timeout is a plain check


def test_wait_image_gives_up_after_the_timeout_without_a_publication(client: affinity.Client, channel: str) -> None:
    with client.add_subscription(channel, 5) as sub:
        started = time.monotonic()
        assert sub.wait_image(timeout=SHORT) is False
        assert SHORT <= time.monotonic() - started < SHORT + SLACK


def test_wait_image_returns_when_a_publication_appears_later(client: affinity.Client, channel: str) -> None:
    with client.add_subscription(channel, 6) as sub:
        publications: list[affinity.Publication] = []
        timer = threading.Timer(0.2, lambda: publications.append(client.add_publication(channel, 6)))
        started = time.monotonic()
        timer.start()
        try:
            assert sub.wait_image(timeout=10.0)
            assert time.monotonic() - started >= 0.2
        finally:
            timer.join()
            for pub in publications:
                pub.close()


def ticks_during(wait: Callable[[], object]) -> tuple[int, float]:
    """How often another Python thread ran (1 ms sleeps) while ``wait()`` ran, and how long it took."""
    ticks = 0
    stop = threading.Event()

    def tick() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.monotonic()
    try:
        wait()
    finally:
        elapsed = time.monotonic() - started
        stop.set()
        ticker.join()
    return ticks, elapsed


def test_waits_release_the_gil(client: affinity.Client, channel: str) -> None:
    # Different stream ids: neither ever connects, so each wait lasts its whole timeout.
    with client.add_publication(channel, 7) as pub, client.add_subscription(channel, 8) as sub:
        for wait in (lambda: pub.wait_connected(1.0), lambda: sub.wait_image(1.0)):
            # The same ticker during a plain sleep, just before: how fast it runs on this (loaded) machine.
            baseline, slept = ticks_during(lambda: time.sleep(1.0))
            ticks, elapsed = ticks_during(wait)
            # Holding the GIL for the whole wait stops the ticker (2 ticks in 1 s against ~800 in a sleep,
            # measured with the detach removed); releasing it lets the ticker run about as often as in a sleep.
            assert ticks / elapsed >= baseline / slept / 5, (
                f"{ticks} ticks in {elapsed:.2f} s during the wait, {baseline} in {slept:.2f} s during a sleep"
            )


@pytest.mark.parametrize("handle", ["publication", "subscription"])
def test_ctrl_c_interrupts_a_wait(client: affinity.Client, channel: str, handle: str) -> None:
    with client.add_publication(channel, 9) as pub, client.add_subscription(channel, 10) as sub:
        wait = pub.wait_connected if handle == "publication" else sub.wait_image
        timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            wait(30.0)
        timer.join()
        assert time.monotonic() - started < SLACK  # the wait was for 30 s


def test_waits_on_closed_handles_raise_closed_error(client: affinity.Client, channel: str) -> None:
    pub = client.add_publication(channel, 11)
    sub = client.add_subscription(channel, 12)
    pub.close()
    sub.close()
    with pytest.raises(affinity.ClosedError, match="publication is closed"):
        pub.wait_connected(10.0)
    with pytest.raises(affinity.ClosedError, match="subscription is closed"):
        sub.wait_image(10.0)


def test_wait_timeouts_are_checked(client: affinity.Client, channel: str) -> None:
    with client.add_publication(channel, 13) as pub, client.add_subscription(channel, 14) as sub:
        for wait in (pub.wait_connected, sub.wait_image):
            with pytest.raises(affinity.ConfigError, match="timeout=-1"):
                wait(-1.0)
            with pytest.raises(affinity.ConfigError, match="timeout=NaN"):
                wait(float("nan"))
            with pytest.raises(affinity.ArgumentTypeError, match="timeout: expected a number, got str"):
                wait("1")  # type: ignore[arg-type]


@pytest.mark.parametrize("channel_kind", ["udp", "ipc"])
def test_waits_run_the_driver_of_an_invoker_client(channel_kind: str) -> None:
    """With no driver thread the waits themselves run the duty cycle, or nothing would ever connect."""
    channel = loopback_channel() if channel_kind == "udp" else "aeron:ipc"
    with (
        affinity.Client(threading="invoker") as client,
        client.add_subscription(channel, 15) as sub,
        client.add_publication(channel, 15) as pub,
    ):
        assert pub.wait_connected(timeout=10.0)
        assert sub.wait_image(timeout=10.0)
