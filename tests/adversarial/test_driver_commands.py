"""One client cannot hang, starve or close the others of a shared ``affinity driver``.

Each test runs a real standalone driver, a well-behaved client in this process, and a hostile
client process (``ring_hostile_client.py``) that writes raw records into ``cnc.dat``'s to-driver
ring from the documented layout: a claim whose writer is killed with SIGKILL before the commit, a
malformed record length, a forged CLIENT_CLOSE naming the good client, a flood of
ADD_PUBLICATION and of keepalives from invented client ids. The good client's streams keep
carrying messages and its commands are answered within its command timeout.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import affinity
import pytest
from conftest import StandaloneDriver, start_standalone_driver, stop_standalone_driver
from ring_hostile_client import atomics

HOSTILE = Path(__file__).with_name("ring_hostile_client.py")
HOSTILE_TIMEOUT_S = 60.0
# A short client timeout: a claim never committed is padded over after a quarter of it.
CLIENT_TIMEOUT = "4s"
SETTLE_S = 1.0
STREAM = 1

pytestmark = pytest.mark.skipif(atomics() is None, reason="libatomic (compare-and-set from Python) is not installed")


@pytest.fixture
def driver(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StandaloneDriver]:
    options: tuple[str, ...] = getattr(request, "param", ())
    started = start_standalone_driver(tmp_path / "driver", "--client-timeout", CLIENT_TIMEOUT, *options)
    try:
        yield started
    finally:
        stop_standalone_driver(started)


def hostile(driver: StandaloneDriver, *args: str) -> str:
    """Runs the hostile client to its end (or its SIGKILL); what it printed."""
    done = subprocess.run(
        [sys.executable, str(HOSTILE), str(driver.dir), *args],
        capture_output=True,
        text=True,
        timeout=HOSTILE_TIMEOUT_S,
        check=False,
    )
    assert done.stdout, f"hostile client {args} printed nothing (status {done.returncode}): {done.stderr}"
    return done.stdout.strip()


def round_trip(publication: affinity.Publication, subscription: affinity.Subscription, count: int) -> list[bytes]:
    """Offers ``count`` messages and polls them back (bounded); what arrived."""
    received: list[bytes] = []
    for i in range(count):
        deadline = time.monotonic() + 5.0
        while publication.offer(f"m{i}".encode()) < 0:
            assert time.monotonic() < deadline, f"offer {i} refused for 5 s"
            time.sleep(0.001)
    deadline = time.monotonic() + 5.0
    while len(received) < count and time.monotonic() < deadline:
        subscription.poll(lambda data, _header: received.append(bytes(data)), 100)
    return received


def errors(driver: StandaloneDriver) -> list[tuple[int, str]]:
    return [(record.count, record.message) for record in affinity.driver_stat(str(driver.dir)).errors]


def test_a_client_killed_while_writing_a_command_does_not_block_the_others(driver: StandaloneDriver) -> None:
    with driver.client() as client:
        publication = client.add_publication("aeron:ipc", STREAM)
        subscription = client.add_subscription("aeron:ipc", STREAM)
        claimed = hostile(driver, "claim-and-die")
        assert claimed.startswith("claimed ")
        # Behind the dead claim: answered once the driver pads over it.
        started = time.monotonic()
        with client.add_subscription("aeron:ipc", STREAM + 1) as late:
            waited = time.monotonic() - started
            assert late.stream_id == STREAM + 1
        time.sleep(SETTLE_S)
        assert round_trip(publication, subscription, 100) == [f"m{i}".encode() for i in range(100)]
        logged = [(count, m) for count, m in errors(driver) if "was not committed" in m]
        assert len(logged) == 1 and logged[0][0] == 1, f"{errors(driver)} (waited {waited:.2f} s)"
        assert f"claimed at position {claimed.split()[1]}" in logged[0][1]


def test_a_malformed_record_length_is_skipped_once_and_logged_once(driver: StandaloneDriver) -> None:
    with driver.client() as client:
        publication = client.add_publication("aeron:ipc", STREAM)
        subscription = client.add_subscription("aeron:ipc", STREAM)
        at = hostile(driver, "malformed").split()[1]
        with client.add_subscription("aeron:ipc", STREAM + 1) as late:
            assert late.stream_id == STREAM + 1
        time.sleep(SETTLE_S)
        assert round_trip(publication, subscription, 100) == [f"m{i}".encode() for i in range(100)]
        logged = [(count, m) for count, m in errors(driver) if "record length 3" in m]
        assert len(logged) == 1 and logged[0][0] == 1, errors(driver)
        assert f"offset {at}: record length 3" in logged[0][1]
        assert affinity.driver_stat(str(driver.dir)).counter("Invalid commands") == 1


def test_impossible_ring_positions_are_reset_once_and_the_ring_carries_commands_again(
    driver: StandaloneDriver,
) -> None:
    with driver.client() as client:
        tail = hostile(driver, "corrupt-positions").split()[1]
        with client.add_subscription("aeron:ipc", STREAM) as subscription:
            assert subscription.stream_id == STREAM
        time.sleep(SETTLE_S)
        logged = [(count, m) for count, m in errors(driver) if "positions reset to 0" in m]
        assert len(logged) == 1 and logged[0][0] == 1, errors(driver)
        assert f"tail {tail} is more than the capacity" in logged[0][1]


@pytest.mark.parametrize("driver", [("--subscriptions-per-client", "2")], indirect=True)
def test_a_client_past_its_quota_gets_an_error_naming_it(driver: StandaloneDriver) -> None:
    with driver.client() as client, client.add_subscription("aeron:ipc", 1), client.add_subscription("aeron:ipc", 2):
        with pytest.raises(
            affinity.DriverError,
            match=r"quota subscriptions_per_client=2 reached \(affinity driver --subscriptions-per-client\)",
        ):
            client.add_subscription("aeron:ipc", 3)


def client_id_of_the_only_client(driver: StandaloneDriver) -> int:
    labels = [c.label for c in affinity.driver_stat(str(driver.dir)).counters if c.label.startswith("client-heartbeat")]
    assert len(labels) == 1, labels
    return int(labels[0].split(": ")[1])


def test_a_forged_close_does_not_stop_another_clients_streams(driver: StandaloneDriver) -> None:
    with driver.client() as client:
        publication = client.add_publication("aeron:ipc", STREAM)
        subscription = client.add_subscription("aeron:ipc", STREAM)
        assert round_trip(publication, subscription, 10) == [f"m{i}".encode() for i in range(10)]
        victim = client_id_of_the_only_client(driver)
        assert hostile(driver, "forge-close", str(victim)) == f"forged {victim}"
        time.sleep(SETTLE_S)
        stat = affinity.driver_stat(str(driver.dir))
        assert (stat.counter("Subscriptions"), stat.counter("IPC publications")) == (1, 1)
        assert publication.is_connected
        assert round_trip(publication, subscription, 100) == [f"m{i}".encode() for i in range(100)]
        ignored = [
            (count, m) for count, m in errors(driver) if m.startswith(f"client-close for client {victim} ignored")
        ]
        assert ignored and ignored[0][0] == 2, errors(driver)
        # Its commands still work.
        with client.add_subscription("aeron:ipc", STREAM + 1) as late:
            assert late.stream_id == STREAM + 1


@pytest.mark.parametrize(
    "driver",
    # The default quotas (1,024 ids, 1,024 publications per client); small logs.
    [
        (
            "--term-length",
            "64k",
        )
    ],
    indirect=True,
)
def test_a_flood_of_commands_and_invented_client_ids_does_not_starve_the_others(driver: StandaloneDriver) -> None:
    with driver.client() as client:
        publication = client.add_publication("aeron:ipc", STREAM)
        subscription = client.add_subscription("aeron:ipc", STREAM)
        flooder = subprocess.Popen(
            [sys.executable, str(HOSTILE), str(driver.dir), "flood", "3000", "12000"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # While the flood runs, the good client's commands are answered (within its
            # command timeout, else they raise) and its stream carries everything.
            answered = 0
            while flooder.poll() is None or answered < 3:
                added = client.add_publication("aeron:ipc", 100 + answered)
                assert added.stream_id == 100 + answered
                added.close()
                answered += 1
                assert round_trip(publication, subscription, 20) == [f"m{i}".encode() for i in range(20)]
                assert answered < 1000, "the flood never ended"
            out, err = flooder.communicate(timeout=HOSTILE_TIMEOUT_S)
        finally:
            if flooder.poll() is None:
                flooder.kill()
                flooder.communicate()
        assert out.startswith("flooded "), err
        flood_client = out.split()[1]
        # Counters are not exhausted: the good client still adds what it needs.
        with client.add_subscription("aeron:ipc", STREAM + 1) as late:
            assert late.stream_id == STREAM + 1
        time.sleep(SETTLE_S)
        stat = affinity.driver_stat(str(driver.dir))
        # Tracked ids time out (4 s) and others take their place: never more than the bound.
        assert 0 < (stat.counter("Clients") or 0) <= 1024, "max_clients bounds the ids tracked"
        messages = [m for _, m in errors(driver)]
        # Refused by its publications quota, or first by its queue of waiting commands (how
        # fast the flood arrives decides which).
        quotas = ("publications_per_client=1024", "queued_commands_per_client=256")
        refused = [m for m in messages if m.startswith(f"client {flood_client}: quota ")]
        assert refused and all(any(q in m for q in quotas) for m in refused), messages
        assert any(m.startswith("quota max_clients=1024 reached") for m in messages), messages
