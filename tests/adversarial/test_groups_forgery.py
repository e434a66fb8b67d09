"""Forged acknowledgements and queue claims against a real group (issue 25, first section).

Processes: a validator, two consumers, a publisher (``affinity group ...``) and a forger
(``groups_forger.py``), which builds version-1 ACKs and HEARTBEATs from the layouts in
``docs/control-plane.md`` and sends them to every member's inbox, impersonating the real
consumers. The group has a secret (``affinity group create`` makes one), so members verify every
message: the forgeries are counted and dropped. The validator counts every (key, sequence).

(a) forged acks during a freeze-then-kill failover (SIGSTOP a consumer, forge acks in its name
    and epoch, SIGKILL it): nothing is lost and ``flush()`` is True only once the survivor
    acknowledged everything.
(b) forged claims of every queue (epoch 2^64 - 1 and small epochs, the forger's own inbox) plus
    forged acks: the real consumers keep their queues, the forger receives no DATA, nothing is lost.

Without the MAC these scenarios lose records (issue 25: 961 of 6,999 and 619): the forger
impersonates the owner in its epoch, which the owner and epoch rules alone cannot tell apart.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from affinity.testing import loopback_channel
from groups_harness import START_TIMEOUT, Role, Roles, roles_fixture, run_group

pytestmark = pytest.mark.slow

#: Long enough that two busy CPUs do not make the consumers think each other dead (a swap of
#: queues under load would look like a takeover).
LIVENESS = 3.0
TIMINGS = ("--liveness", f"{LIVENESS}s", "--heartbeat", "0.1s")
FORGER = Path(__file__).parent / "groups_forger.py"
KEYS = 100
#: Consumer 0 of 2 is the primary of the even queues, consumer 1 of the odd ones (QC = 4).
PRIMARIES = {0: {0, 2}, 1: {1, 3}}


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    yield from roles_fixture(tmp_path)


def create(registry: Path, group: str) -> None:
    result = run_group(
        registry, "create", group, "--hash-prefix", group, "--hash-count", "16", "--queue-count", "4",
        "--queue-size", str(1 << 22),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (registry / "groups" / f"{group}.secret").stat().st_mode & 0o777 == 0o600


def start_consumer(roles: Roles, group: str, index: int, channel: str) -> Role:
    return roles.start(
        f"consumer {index}", "consume", group, "--index", str(index), "--count", "2", "--republish", channel,
        "--cycle", "2", *TIMINGS,
    )  # fmt: skip


def start_consumers(roles: Roles, group: str, channel: str) -> tuple[Role, Role]:
    """Consumers 0 and 1 of 2, once each owns its primaries."""
    c0 = start_consumer(roles, group, 0, channel)
    c1 = start_consumer(roles, group, 1, channel)
    c0.wait_owned(PRIMARIES[0], START_TIMEOUT)
    c1.wait_owned(PRIMARIES[1], START_TIMEOUT)
    return c0, c1


def ownership_reports(consumer: Role) -> list[str]:
    return [line for line in consumer.output() if " owns queues " in line]


def start_validator(roles: Roles, group: str, channel: str) -> Role:
    validator = roles.start(
        "validator", "validate", group, "--channel", channel, "--idle-exit", "3", "--duration", "120",
        "--expect-keys", str(KEYS), "--json", "--quiet",
    )  # fmt: skip
    validator.wait_line("validating group", START_TIMEOUT)
    return validator


def start_publisher(roles: Roles, group: str, count: int) -> Role:
    publisher = roles.start(
        "publisher", "publish", group, "--keys", str(KEYS), "--rate", "1000", "--count", str(count),
        "--flush-timeout", "30", "--json", *TIMINGS,
    )  # fmt: skip
    publisher.wait_line("publisher", START_TIMEOUT)
    return publisher


def start_forger(roles: Roles, group: str, duration: float, *modes: str) -> Role:
    command = [sys.executable, str(FORGER), str(roles.registry), group, "--duration", str(duration), *modes]
    forger = roles.start("forger", command=command)
    forger.wait_line('"started"', START_TIMEOUT)
    return forger


def check_delivery(publisher: Role, validator: Role) -> dict[str, Any]:
    """The publisher flushed (everything really acknowledged) and the validator saw every record."""
    assert publisher.process.wait(timeout=90) == 0, publisher.describe()
    published = publisher.json_result()
    report = validator.json_result(timeout=60)
    summary = {k: v for k, v in report.items() if k not in ("highest", "changes", "events")}
    assert published["acknowledged"] is True and published["authenticated"] is True, published
    assert report["lost"] == 0 and report["ok"], summary
    assert report["keys_seen"] == KEYS
    assert [report["highest"][str(k)] for k in range(KEYS)] == published["per_key_last"], summary
    assert sum(published["per_key_last"]) == published["sent"]
    return published


def forger_result(forger: Role) -> dict[str, Any]:
    result = forger.json_result(timeout=60)
    assert result["sent"] > 100, result
    return result


def auth_refused(consumer: Role) -> int:
    assert consumer.stop() == 0, consumer.describe()
    _, match = consumer.wait_line(r"authentication refused (\d+) \(on\), epochs refused (\d+)", 5.0)
    return int(match[1])


def test_forged_acks_during_a_freeze_then_kill_failover_lose_nothing(roles: Roles) -> None:
    group = "forged-acks"
    create(roles.registry, group)
    channel = loopback_channel()
    validator = start_validator(roles, group, channel)
    c0, c1 = start_consumers(roles, group, channel)
    publisher = start_publisher(roles, group, 7000)
    time.sleep(1.5)

    # Freeze consumer 1: its queues' records go unacknowledged while the forger acknowledges them
    # in its name and epoch (and in consumer 0's, and in a stranger's).
    c1.process.send_signal(signal.SIGSTOP)
    forger = start_forger(roles, group, 6.0, "--acks")
    time.sleep(1.5)
    c1.kill()
    c0.wait_owned({0, 1, 2, 3}, LIVENESS + 10.0)

    forged = forger_result(forger)
    published = check_delivery(publisher, validator)
    assert published["auth_refused"] >= forged["sent"] // 2, (published, forged)
    assert auth_refused(c0) == 0, "the forger sent no heartbeat to the consumer in this scenario"


def test_forged_claims_and_acks_take_nothing_over(roles: Roles) -> None:
    group = "forged-claims"
    create(roles.registry, group)
    channel = loopback_channel()
    validator = start_validator(roles, group, channel)
    c0, c1 = start_consumers(roles, group, channel)
    publisher = start_publisher(roles, group, 5000)
    before = {0: ownership_reports(c0), 1: ownership_reports(c1)}
    forger = start_forger(roles, group, 5.0, "--claims", "--acks")

    forged = forger_result(forger)
    assert forged["data_received"] == 0, "the publisher sent DATA to the forger's inbox"
    published = check_delivery(publisher, validator)
    assert published["auth_refused"] > 0 and published["epochs_refused"] == 0, published
    # The real consumers never lost a queue: no ownership change since the forger started.
    for index, consumer in ((0, c0), (1, c1)):
        assert ownership_reports(consumer) == before[index], c0.describe() + c1.describe() + publisher.describe()
        assert consumer.owned() is not None and consumer.owned()[1] == PRIMARIES[index]  # type: ignore[index]
    assert auth_refused(c0) > 0 and auth_refused(c1) > 0, "the forged heartbeats were not counted"


def test_the_forger_speaks_the_documented_layouts(roles: Roles) -> None:
    """Guards the scenarios above against a forger whose messages would be refused anyway: with no
    secret, the same forged HEARTBEAT is decoded (its huge epoch refused by the epoch bound)."""
    group = "forger-check"
    result = run_group(
        roles.registry, "create", group, "--hash-prefix", group, "--hash-count", "16", "--queue-count", "4",
        "--queue-size", str(1 << 22), "--no-secret",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    channel = loopback_channel()
    c0 = start_consumer(roles, group, 0, channel)
    c0.wait_owned({0, 1, 2, 3}, START_TIMEOUT)
    forger = start_forger(roles, group, 2.0, "--claims")
    forger_result(forger)
    assert c0.stop() == 0, c0.describe()
    _, match = c0.wait_line(r"authentication refused (\d+) \(off\), epochs refused (\d+)", 5.0)
    assert int(match[2]) > 0, "the forged claims were not decoded: the forger does not match the layouts"
    assert "malformed control messages 0" in match.string, match.string
