"""A consumer SIGKILLed half-way through, then ``flush(timeout=30)``: everything is acknowledged
and the survivor leaves cleanly (issue 25, "Smaller": the failover check that failed in 4 of 29
runs on a busy machine with "publisher could not get everything acknowledged within 30 s").

Processes: a validator, two consumers of four queues, a publisher of 400 keys x 50 sequence
numbers (``affinity group ...``). Consumer 1 is SIGKILLed once about half of the records are
published; the publisher then flushes with a 30 s timeout. The oracle: the publisher's flush is
True, the validator saw every (key, sequence), the survivor owns every queue and exits 0 on
SIGTERM. Run it in a loop beside CPU hogs to check it does not flake.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from affinity.testing import loopback_channel
from groups_harness import START_TIMEOUT, Role, Roles, roles_fixture, run_group

pytestmark = pytest.mark.slow

#: As in ``test_groups_processes.py``: a short liveness timeout, so a starved member can be
#: taken for dead and come back (the interleavings this test is about).
LIVENESS = 1.0
TIMINGS = ("--liveness", f"{LIVENESS}s", "--heartbeat", "0.1s")
KEYS, ROUNDS = 400, 50
RATE = 2000
FLUSH_TIMEOUT = 30
#: The driver's client liveness timeout (``driver::agent::conductor::CLIENT_TIMEOUT``).
CLIENT_TIMEOUT = 5.0
#: Consumer 0 of 2 is the primary of the even queues, consumer 1 of the odd ones (QC = 4).
PRIMARIES = {0: {0, 2}, 1: {1, 3}}


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    yield from roles_fixture(tmp_path)


def start_consumer(roles: Roles, group: str, index: int, channel: str) -> Role:
    return roles.start(
        f"consumer {index}", "consume", group, "--index", str(index), "--count", "2", "--republish", channel,
        "--cycle", "2", *TIMINGS,
    )  # fmt: skip


def failover(roles: Roles, freeze: float) -> None:
    """The story; with ``freeze`` > 0 the survivor is also stopped (SIGSTOP) that long once it took
    the dead consumer's queues, as a process that gets no CPU for a while on a loaded machine."""
    group = "failover"
    created = run_group(
        roles.registry, "create", group, "--hash-prefix", group, "--hash-count", "16", "--queue-count", "4",
        "--queue-size", str(1 << 22),
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    channel = loopback_channel()
    validator = roles.start(
        "validator", "validate", group, "--channel", channel, "--idle-exit", "20", "--duration", "150",
        "--expect-keys", str(KEYS), "--json", "--quiet",
    )  # fmt: skip
    validator.wait_line("validating group", START_TIMEOUT)
    c0 = start_consumer(roles, group, 0, channel)
    c1 = start_consumer(roles, group, 1, channel)
    c0.wait_owned(PRIMARIES[0], START_TIMEOUT)
    c1.wait_owned(PRIMARIES[1], START_TIMEOUT)
    publisher = roles.start(
        "publisher", "publish", group, "--keys", str(KEYS), "--rate", str(RATE), "--count", str(KEYS * ROUNDS),
        "--flush-timeout", str(FLUSH_TIMEOUT), "--json", *TIMINGS,
    )  # fmt: skip
    publisher.wait_line("publisher", START_TIMEOUT)
    time.sleep(KEYS * ROUNDS / RATE / 2)

    c1.kill()
    c0.wait_owned({0, 1, 2, 3}, LIVENESS + 15.0)
    if freeze > 0:
        c0.process.send_signal(signal.SIGSTOP)
        time.sleep(freeze)
        c0.process.send_signal(signal.SIGCONT)

    code = publisher.process.wait(timeout=KEYS * ROUNDS / RATE + FLUSH_TIMEOUT + 60)
    published = publisher.json_result()
    context = f"{published}\n{c0.describe()}\n{publisher.describe()}"
    assert code == 0 and published["acknowledged"] is True, context
    assert published["sent"] == KEYS * ROUNDS, context
    report = validator.json_result(timeout=60)
    summary = {k: v for k, v in report.items() if k not in ("highest", "changes", "events")}
    assert report["lost"] == 0 and report["ok"] and report["keys_seen"] == KEYS, summary
    assert [report["highest"][str(k)] for k in range(KEYS)] == published["per_key_last"], summary
    # The survivor still owns everything and leaves cleanly (not left running until killed).
    assert c0.process.poll() is None, c0.describe()
    assert c0.stop(timeout=30) == 0, c0.describe()


def test_a_consumer_killed_half_way_then_flush_acknowledges_everything(roles: Roles) -> None:
    failover(roles, freeze=0.0)


def test_a_survivor_stopped_longer_than_the_client_timeout_still_gets_everything_acknowledged(
    roles: Roles,
) -> None:
    """The cause of the failures on a busy machine: a member process that got no CPU for longer
    than the driver's client timeout (5 s) had its embedded driver reclaim its own client when it
    ran again, so it went silent for ever (no heartbeat, no ack) while still owning its queues, and
    the publisher could not get anything acknowledged. Before the fix this failed in 3 of 8 runs with
    a 12 s stop and 1 of 4 runs of this test (a race on waking); the deterministic check is the
    conductor's unit test."""
    failover(roles, freeze=CLIENT_TIMEOUT + 3.0)
