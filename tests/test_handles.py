"""Handle lifetime: unclosed handles are closed when collected, with a ResourceWarning, and
collecting one never blocks other Python threads (the GIL is released). Each test runs with an
embedded and with a standalone driver (conftest.py, ``driver_kind``)."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time

import affinity
import pytest
from affinity.testing import loopback_channel
from conftest import ClientFactory, StandaloneDriver

pytestmark = pytest.mark.both_drivers


def collect() -> None:
    for _ in range(3):
        gc.collect()


def test_unclosed_publication_warns_when_collected(client: affinity.Client, channel: str) -> None:
    pub = client.add_publication(channel, 1)
    with pytest.warns(ResourceWarning, match="Publication collected without close"):
        del pub
        collect()


def test_unclosed_subscription_warns_and_stops_receiving(client: affinity.Client, channel: str) -> None:
    with client.add_publication(channel, 1) as pub:
        with pytest.warns(ResourceWarning, match="Subscription collected without close"):
            client.add_subscription(channel, 1)  # the result is dropped at once
            collect()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert not pub.is_connected, "a dropped subscription still receives"
            time.sleep(0.01)


def test_unclosed_client_warns_when_collected(driver_kind: str, request: pytest.FixtureRequest) -> None:
    if driver_kind == "standalone":
        driver: StandaloneDriver = request.getfixturevalue("standalone_driver")
        client = driver.client()
    else:
        client = affinity.Client(threading="invoker")
    with pytest.warns(ResourceWarning, match="Client collected without close"):
        del client
        collect()


def test_closed_handles_do_not_warn(client: affinity.Client, channel: str) -> None:
    sub = client.add_subscription(channel, 1)
    pub = client.add_publication(channel, 1)
    sub.close()
    pub.close()
    del sub, pub
    collect()  # filterwarnings = error: a warning here would fail the test


def test_handles_of_a_closed_client_do_not_warn(new_client: ClientFactory, channel: str) -> None:
    with new_client() as client:
        sub = client.add_subscription(channel, 1)
        pub = client.add_publication(channel, 1)
    del sub, pub
    collect()


@pytest.mark.slow
@pytest.mark.embedded_only(
    "only an embedded client drains on close (it stops its driver); an attached client's close "
    "returns at once and the standalone driver lets the publication linger: nothing to wait for"
)
def test_collecting_an_unclosed_client_releases_the_gil_while_it_drains(driver_kind: str) -> None:
    channel = loopback_channel()
    with affinity.Client() as receiving:
        sub = receiving.add_subscription(channel, 1)
        sender = affinity.Client()
        pub = sender.add_publication(channel, 1)
        deadline = time.monotonic() + 10
        while not pub.is_connected:
            assert time.monotonic() < deadline, "never connected"
            time.sleep(0.001)
        # Fill the window: the subscriber does not poll, so the sender keeps unsent data and
        # closing drains for up to 2 s.
        message = b"x" * 1024
        while pub.offer(message) > 0 and time.monotonic() < deadline:
            pass
        ticks = 0
        stop = threading.Event()

        def tick() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                time.sleep(0.001)

        ticker = threading.Thread(target=tick)
        ticker.start()
        try:
            pub.close()  # closed, but its data is still unsent: the client drains it
            del pub
            with (
                pytest.warns(ResourceWarning, match="Client collected without close"),
                # The subscriber never polls: what the 2 s drain could not send is dropped, and said so.
                pytest.warns(affinity.DataLossWarning, match=r"stopped with \d+ messages \(\d+ bytes\) not sent"),
            ):
                started = time.monotonic()
                del sender
                collect()
                elapsed = time.monotonic() - started
        finally:
            stop.set()
            ticker.join()
        sub.close()
    assert elapsed > 0.2, "the drain did not happen: the test proves nothing"
    # With the GIL held for the whole drain the ticker could not run at all.
    assert ticks > 50 * elapsed, f"{ticks} ticks in {elapsed:.2f} s"


def test_ctrl_c_interrupts_a_poll_loop(client: affinity.Client, channel: str) -> None:
    with client.add_subscription(channel, 1) as sub:
        timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            while time.monotonic() - started < 5:
                sub.poll(lambda data, header: None, 10)
        timer.join()
        assert time.monotonic() - started < 2
