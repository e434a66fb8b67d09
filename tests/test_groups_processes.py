"""Consumer groups with real processes: the seed's story (kill, restart, scale up, scale down),
hostile control-plane datagrams, and two hosts in network namespaces.

Every role is ``python -m affinity.cli group ...`` in its own process with the test's registry;
timings are short (liveness 1 s, cycle 2 s) so each story takes seconds. The validation client's
report is the oracle, as in the seed: per key, no gap and no reordering, every message seen.
"""

from __future__ import annotations

import ast
import json
import random
import signal
import socket
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import affinity
import pytest
from affinity.groups import (
    GROUP_CONTROL_STREAM_ID,
    GROUP_DATA_STREAM_ID,
    GroupConsumer,
    GroupPublisher,
    create_group,
)
from affinity.testing import loopback_channel
from groups_harness import OWNS_LINE, START_TIMEOUT, Role, Roles, roles_fixture, run_group, run_two_hosts, wait_until

pytestmark = pytest.mark.slow

LIVENESS = 1.0
CYCLE = 2.0
HEARTBEAT = 0.1
#: Role options shared by every member of these tests.
TIMINGS = ("--liveness", f"{LIVENESS}s", "--heartbeat", f"{HEARTBEAT}s")


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    yield from roles_fixture(tmp_path)


def expected_owners(queue_count: int, count: int, live: set[int]) -> dict[int, set[int]]:
    """The contract's placement with no history: the primary (``q % count``) when live, else the
    first live consumer in the order ``(index - q % count) mod count``."""
    owners: dict[int, set[int]] = {index: set() for index in live}
    for queue in range(queue_count):
        owner = min(live, key=lambda index: (index - queue % count) % count)
        owners[owner].add(queue)
    return owners


def create(registry: Path, name: str, hc: int, qc: int, qs: int = 1 << 20, *extra: str) -> None:
    result = run_group(
        registry,
        "create",
        name,
        "--hash-prefix",
        f"__{name}__",
        "--hash-count",
        str(hc),
        "--queue-count",
        str(qc),
        "--queue-size",
        str(qs),
        *extra,
    )
    assert result.returncode == 0, result.stderr


def start_consumer(roles: Roles, group: str, index: int, count: int, channel: str, *extra: str) -> Role:
    return roles.start(
        f"consumer {index}",
        "consume",
        group,
        "--index",
        str(index),
        "--count",
        str(count),
        "--republish",
        channel,
        "--cycle",
        str(CYCLE),
        *TIMINGS,
        *extra,
    )


def start_validator(roles: Roles, group: str, channel: str, keys: int) -> Role:
    validator = roles.start(
        "validator",
        "validate",
        group,
        "--channel",
        channel,
        "--idle-exit",
        "3",
        "--duration",
        "120",
        "--expect-keys",
        str(keys),
        "--json",
        "--quiet",
    )
    validator.wait_line("validating group", START_TIMEOUT)
    return validator


def changes_between(report: dict[str, Any], start: float, end: float) -> set[tuple[int, int]]:
    return {(c["was"], c["now"]) for c in report["changes"] if start <= c["time"] <= end}


def test_seed_story_kill_restart_scale_up_and_down_loses_nothing_and_keeps_order(roles: Roles) -> None:
    group, queues, count, keys = "seed", 4, 3, 200
    create(roles.registry, group, hc=16, qc=queues)
    channel = loopback_channel()
    validator = start_validator(roles, group, channel, keys)

    # Two of three consumers: each serves its primaries, consumer 0 also the absent 2's queue.
    c0 = start_consumer(roles, group, 0, count, channel)
    c1 = start_consumer(roles, group, 1, count, channel)
    owners = expected_owners(queues, count, {0, 1})
    assert owners == {0: {0, 2, 3}, 1: {1}}
    c0.wait_owned(owners[0], START_TIMEOUT)
    c1.wait_owned(owners[1], START_TIMEOUT)
    publisher = roles.start("publisher", "publish", group, "--keys", str(keys), "--rate", "1000", "--json", *TIMINGS)
    publisher.wait_line("publisher", START_TIMEOUT)
    time.sleep(2.0)

    # SIGKILL consumer 1: its queue moves to the survivor within the liveness timeout + 1 s.
    killed_at = c1.kill()
    took_over_at = c0.wait_owned({0, 1, 2, 3}, LIVENESS + 5.0)
    assert took_over_at - killed_at <= LIVENESS + 1.0, f"failover took {took_over_at - killed_at:.2f}s"
    time.sleep(1.5)

    # Restart it: it gets its primary back within one cycle, by planned handoff.
    restarted_at = time.time()
    c1 = start_consumer(roles, group, 1, count, channel)
    started_at, _ = c1.wait_line("started", START_TIMEOUT)
    back_at = c1.wait_owned({1}, START_TIMEOUT)
    c0.wait_owned({0, 2, 3}, 5.0)
    assert back_at - started_at <= CYCLE + 1.0, f"primary back after {back_at - started_at:.2f}s"
    time.sleep(1.5)

    # Scale up: the third consumer gets its primary within one cycle.
    scaled_up_at = time.time()
    c2 = start_consumer(roles, group, 2, count, channel)
    started_at, _ = c2.wait_line("started", START_TIMEOUT)
    back_at = c2.wait_owned({2}, START_TIMEOUT)
    c0.wait_owned({0, 3}, 5.0)
    assert back_at - started_at <= CYCLE + 1.0, f"scale-up took {back_at - started_at:.2f}s"
    time.sleep(1.5)

    # Scale down to one: clean leaves hand every queue to consumer 0.
    scaled_down_at = time.time()
    assert c2.stop() == 0, c2.describe()
    assert c1.stop() == 0, c1.describe()
    c0.wait_owned({0, 1, 2, 3}, 10.0)
    time.sleep(1.5)

    assert publisher.stop(timeout=30) == 0, publisher.describe()
    published = publisher.json_result()
    report = validator.json_result(timeout=60)
    assert c0.stop() == 0, c0.describe()

    print(
        f"failover {took_over_at - killed_at:.2f}s; sent {published['sent']}, received {report['received']}, "
        f"duplicates {report['duplicates']}, consumer changes {report['consumer_changes']}, "
        f"per client {report['per_client']}"
    )
    assert report["ok"], {k: v for k, v in report.items() if k not in ("highest", "changes")}
    assert report["lost"] == 0 and report["out_of_order"] == 0 and report["gaps"] == 0
    assert report["undecodable"] == 0
    assert report["keys_seen"] == keys
    assert [report["highest"][str(k)] for k in range(keys)] == published["per_key_last"]
    assert sum(published["per_key_last"]) == published["sent"] > 5000
    # Only the failover may redeliver (what consumer 1 processed but had not acknowledged).
    duplicate_times = [event["time"] for event in report["events"] if event["kind"] == "duplicate"]
    assert all(killed_at <= t <= killed_at + LIVENESS + 3.0 for t in duplicate_times), duplicate_times
    # Each step shows as a change of consumer, as in the seed's validation output.
    assert (1, 0) in changes_between(report, killed_at, restarted_at)
    assert (0, 1) in changes_between(report, restarted_at, scaled_up_at)
    assert (0, 2) in changes_between(report, scaled_up_at, scaled_down_at)
    assert {(1, 0), (2, 0)} <= changes_between(report, scaled_down_at, time.time())
    assert set(report["per_client"]) == {"0", "1", "2"}


def owned_reports(role: Role, after: float) -> list[set[int]]:
    """Every "owns queues" report ``role`` printed at or after ``after`` (epoch seconds)."""
    found = []
    for line in role.output():
        match = OWNS_LINE.match(line)
        if match is not None and datetime.fromisoformat(match["time"]).timestamp() >= after:
            found.append(set(ast.literal_eval(match["queues"])))
    return found


def test_a_consumer_stopped_past_the_liveness_timeout_does_not_take_its_live_peers_queues(roles: Roles) -> None:
    # A member whose own process stalled (SIGSTOP: every thread, its driver's included) must not
    # take its own stall for the others' silence: resumed, it steps back on the queues its peer
    # took over and never claims the peer's primaries.
    group, count, queues = "stall", 2, 4
    create(roles.registry, group, 16, queues)
    channel = loopback_channel()
    c0 = start_consumer(roles, group, 0, count, channel)
    c1 = start_consumer(roles, group, 1, count, channel)
    c0.wait_owned({0, 2}, START_TIMEOUT)
    c1.wait_owned({1, 3}, START_TIMEOUT)
    c0.process.send_signal(signal.SIGSTOP)
    try:
        c1.wait_owned({0, 1, 2, 3}, LIVENESS + 5.0)
        time.sleep(2 * LIVENESS)
    finally:
        c0.process.send_signal(signal.SIGCONT)
    resumed = time.time()
    # Its primaries come back within a cycle, by the peer's planned handoff.
    c0.wait_owned({0, 2}, CYCLE + 5.0)
    c1.wait_owned({1, 3}, 5.0)
    time.sleep(1.0)
    assert all(mine & {1, 3} == set() for mine in owned_reports(c0, resumed)), c0.describe()
    assert all({1, 3} <= theirs for theirs in owned_reports(c1, resumed)), c1.describe()
    assert c0.stop() == 0, c0.describe()
    assert c1.stop() == 0, c1.describe()


def member_files(registry: Path, group: str) -> list[dict[str, Any]]:
    folder = registry / "members" / group
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError):
            continue  # being rewritten
    return found


def test_hostile_datagrams_at_a_members_inbox_are_ignored_while_delivery_continues(roles: Roles) -> None:
    group, keys = "hostile", 50
    # Unauthenticated: garbage must reach the decoders (with a secret it stops at the MAC check).
    create(roles.registry, group, 8, 2, 1 << 20, "--no-secret")
    channel = loopback_channel()
    validator = start_validator(roles, group, channel, keys)
    consumer = start_consumer(roles, group, 0, 1, channel)
    consumer.wait_owned({0, 1}, START_TIMEOUT)
    wait_until(
        "the consumer's member file",
        lambda: any(m.get("role") == "consumer" for m in member_files(roles.registry, group)),
        10,
    )
    member = next(m for m in member_files(roles.registry, group) if m.get("role") == "consumer")
    host, _, port = str(member["endpoint"]).rpartition(":")  # the inbox, "ip:port"
    publisher = roles.start(
        "publisher", "publish", group, "--keys", str(keys), "--rate", "500", "--count", "3000", "--json", *TIMINGS
    )
    rng = random.Random(7)
    garbage = [rng.randbytes(rng.randrange(1, 600)) for _ in range(200)]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, affinity.Client() as client:
        # Well-formed transport frames with garbage inside, on the group's control and data streams.
        inbox = f"aeron:udp?endpoint={host}:{port}"
        streams = [
            client.add_publication(inbox, GROUP_CONTROL_STREAM_ID),
            client.add_publication(inbox, GROUP_DATA_STREAM_ID),
        ]
        wait_until("publications to the inbox", lambda: all(p.is_connected for p in streams), 10)
        framed = sum(1 for payload in garbage for stream in streams if stream.offer(payload) > 0)
        # And raw random datagrams at the inbox port.
        deadline = time.monotonic() + 4.0
        sent = 0
        while time.monotonic() < deadline and publisher.process.poll() is None:
            sock.sendto(rng.randbytes(rng.randrange(0, 1400)), (host, int(port)))
            sent += 1
            if sent % 50 == 0:
                time.sleep(0.01)
        for stream in streams:
            stream.close()
    assert sent > 1000
    assert publisher.process.wait(timeout=60) == 0, publisher.describe()
    published = publisher.json_result()
    report = validator.json_result(timeout=60)
    assert consumer.process.poll() is None, consumer.describe()
    consumer.wait_owned({0, 1}, 1.0)
    assert consumer.stop() == 0, consumer.describe()
    pattern = r"invalid datagrams ignored (\d+), malformed control messages (\d+), malformed data messages (\d+)"
    _, left = consumer.wait_line(pattern, 5.0)
    invalid, control, data = int(left[1]), int(left[2]), int(left[3])
    assert invalid >= sent // 2, f"{sent} random datagrams sent, {invalid} counted"
    assert framed >= 300 and control + data >= framed * 9 // 10, (framed, control, data)
    assert control > 0 and data > 0
    assert report["ok"] and report["lost"] == 0 and report["duplicates"] == 0
    assert [report["highest"][str(k)] for k in range(keys)] == published["per_key_last"]


def test_publisher_and_consumers_on_two_hosts_in_network_namespaces(tmp_path: Path) -> None:
    registry = tmp_path / "registry"
    create(registry, "twohosts", hc=16, qc=4)
    _published, _report, members = run_two_hosts(tmp_path, registry)
    # The consumers advertised their veth address, not loopback.
    endpoints = [str(m["endpoint"]) for m in members if m["role"] == "consumer"]
    assert len(endpoints) == 2 and all("10.9.0.3" in endpoint for endpoint in endpoints), endpoints


def test_full_retention_back_pressures_and_loses_nothing_once_the_consumer_acknowledges(tmp_path: Path) -> None:
    queue_size = 16 * 1024
    create_group("bp", "bp", 4, 1, queue_size, tmp_path)
    payloads = [f"{n:08d}".encode() * 12 for n in range(2000)]  # 96 bytes each
    with affinity.Client() as publisher_client, affinity.Client() as consumer_client:
        publisher = GroupPublisher(
            publisher_client, "bp", registry=tmp_path, liveness_timeout=LIVENESS, heartbeat_interval=HEARTBEAT
        )
        assert publisher.publish(b"k", payloads[0]) == affinity.NOT_CONNECTED  # nobody to send to yet
        consumer = GroupConsumer(
            consumer_client, "bp", 0, 1, registry=tmp_path, liveness_timeout=LIVENESS, heartbeat_interval=HEARTBEAT
        )
        wait_until("the consumer to own the queue", lambda: consumer.owned_queues() == [0], START_TIMEOUT)
        wait_until("the publisher to see the owner", lambda: publisher.status().queues[0].owner_id != 0, 10)
        received: list[bytes] = []
        unacked: list[Any] = []
        sent, codes = 0, set()
        deadline = time.monotonic() + 20
        # Poll without acknowledging: retention fills up to QS, then publish refuses.
        while sent < len(payloads) and time.monotonic() < deadline:
            code = publisher.publish(b"k", payloads[sent])
            if code > 0:
                assert code == sent + 1  # sequence numbers from 1, none skipped
                sent += 1
            else:
                codes.add(code)
                if code == affinity.BACK_PRESSURED:
                    break
            unacked += consumer.poll(100)
        assert codes == {affinity.BACK_PRESSURED}, codes
        retained = publisher.status().queues[0].retained_bytes
        assert 0 < retained <= queue_size and sent < len(payloads), (sent, retained)
        full_at = sent
        # Acknowledge as the application processes: publishing resumes, every message arrives once, in order.
        while (sent < len(payloads) or len(received) < len(payloads)) and time.monotonic() < deadline:
            unacked += consumer.poll(500, 0.01)
            if unacked:
                received += [message.payload for message in unacked]
                consumer.ack(unacked[-1])
                unacked = []
            while sent < len(payloads) and (code := publisher.publish(b"k", payloads[sent])) > 0:
                sent += 1
        assert received == payloads, (len(received), full_at)
        assert publisher.flush(10.0)
        assert publisher.status().queues[0].retained_bytes == 0
        consumer.close()
        publisher.close()
