"""``affinity group``: definitions, status, and the seed's publisher, LBG client and validator."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import affinity
import pytest
from affinity.cli.group import duration
from affinity.groups import GroupConsumer, GroupPublisher, create_group
from affinity.groups.records import REPUBLISH_STREAM_ID, PublishedRecord, RecordError, RepublishedRecord
from affinity.groups.secret import create_secret
from affinity.groups.validation import Validator
from affinity.testing import loopback_channel
from groups_harness import START_TIMEOUT, Roles, roles_fixture, run_group, wait_until

TIMINGS = ("--liveness", "1s", "--heartbeat", "100ms")


@pytest.fixture
def roles(tmp_path: Path) -> Iterator[Roles]:
    yield from roles_fixture(tmp_path)


def test_create_list_delete_round_trip(tmp_path: Path) -> None:
    created = run_group(
        tmp_path,
        "create",
        "orders",
        "--hash-prefix",
        "ord",
        "--hash-count",
        "64",
        "--queue-count",
        "8",
        "--queue-size",
        "67108864",
    )
    assert created.returncode == 0, created.stderr
    secret = tmp_path / "groups" / "orders.secret"
    assert created.stdout.splitlines() == ["created group orders: HP=ord HC=64 QC=8 QS=67108864", f"secret: {secret}"]
    assert secret.stat().st_mode & 0o777 == 0o600
    assert len(bytes.fromhex(secret.read_text())) == 32
    listed = run_group(tmp_path, "list", "--json")
    assert json.loads(listed.stdout) == [
        {"version": 1, "name": "orders", "HP": "ord", "HC": 64, "QC": 8, "QS": 67108864}
    ]
    assert "orders  HP=ord HC=64 QC=8 QS=67108864" in run_group(tmp_path, "list").stdout
    old = secret.read_text()
    rotated = run_group(tmp_path, "secret", "orders")
    assert rotated.returncode == 0 and rotated.stdout.strip() == f"secret: {secret}", rotated.stderr
    assert secret.read_text() != old and secret.stat().st_mode & 0o777 == 0o600
    assert run_group(tmp_path, "delete", "orders").returncode == 0
    assert not secret.exists(), "delete leaves the group secret behind"
    assert "unknown group 'orders'" in run_group(tmp_path, "secret", "orders").stderr
    assert run_group(tmp_path, "list").stdout.strip() == "no groups defined"
    again = run_group(tmp_path, "delete", "orders")
    assert again.returncode == 1 and "unknown group 'orders'" in again.stderr


@pytest.mark.parametrize(
    ("hc", "qc", "message"),
    [("4", "8", "queue count (QC) 8 exceeds hash count (HC) 4"), ("4", "0", "queue count (QC) 0 is out of range")],
)
def test_create_refuses_bad_counts_with_exit_status_one(tmp_path: Path, hc: str, qc: str, message: str) -> None:
    result = run_group(
        tmp_path,
        "create",
        "g",
        "--hash-prefix",
        "g",
        "--hash-count",
        hc,
        "--queue-count",
        qc,
        "--queue-size",
        "1048576",
    )
    assert result.returncode == 1
    assert message in result.stderr
    assert run_group(tmp_path, "list").stdout.strip() == "no groups defined"


def test_consumer_refuses_count_above_queue_count_and_unknown_group(tmp_path: Path) -> None:
    create_group("small", "small", 8, 4, 1 << 20, tmp_path)
    too_many = run_group(tmp_path, "consume", "small", "--index", "0", "--count", "5")
    assert too_many.returncode == 1
    assert "consumer count 5 is out of range for group 'small': expected 1 to its queue count (QC) 4" in too_many.stderr
    unknown = run_group(tmp_path, "consume", "nosuch", "--index", "0", "--count", "1")
    assert unknown.returncode == 1 and "unknown group 'nosuch'" in unknown.stderr
    publisher = run_group(tmp_path, "publish", "nosuch", "--count", "1")
    assert publisher.returncode == 1 and "unknown group 'nosuch'" in publisher.stderr


def test_api_refuses_bad_consumer_arguments_before_joining(tmp_path: Path) -> None:
    create_group("small", "small", 8, 4, 1 << 20, tmp_path)
    with affinity.Client() as client:
        with pytest.raises(affinity.ConfigError, match=r"consumer count 5 is out of range.*\(QC\) 4"):
            GroupConsumer(client, "small", index=0, count=5, registry=tmp_path)
        with pytest.raises(affinity.ConfigError, match="consumer index 2 is out of range"):
            GroupConsumer(client, "small", index=2, count=2, registry=tmp_path)
        with pytest.raises(affinity.ConfigError, match="cycle must be a positive number of seconds, found -1"):
            GroupConsumer(client, "small", index=0, count=2, registry=tmp_path, cycle=-1)
        with pytest.raises(affinity.ConfigError, match="unknown group 'nosuch'"):
            GroupPublisher(client, "nosuch", registry=tmp_path)


def test_publish_consume_validate_end_to_end(roles: Roles) -> None:
    create_group("e2e", "__e2e__", 32, 4, 1 << 20, roles.registry)
    channel = loopback_channel()
    validator = roles.start(
        "validator",
        "validate",
        "e2e",
        "--channel",
        channel,
        "--idle-exit",
        "2",
        "--duration",
        "60",
        "--expect-keys",
        "100",
        "--json",
        "--quiet",
    )
    validator.wait_line("validating group", START_TIMEOUT)
    consumer = roles.start(
        "consumer", "consume", "e2e", "--index", "0", "--count", "1", "--republish", channel, *TIMINGS
    )
    consumer.wait_owned({0, 1, 2, 3}, START_TIMEOUT)
    publisher = roles.start(
        "publisher", "publish", "e2e", "--keys", "100", "--rate", "2000", "--count", "3000", "--json", *TIMINGS
    )
    published = publisher.json_result(timeout=60)
    assert publisher.process.returncode == 0, publisher.describe()
    assert published["sent"] == 3000 and published["acknowledged"] and published["retained_bytes"] == 0
    report = validator.json_result(timeout=60)
    assert validator.process.returncode == 0
    assert report["received"] == 3000 and report["sequence_errors"] == 0 and report["consumer_changes"] == 0
    assert [report["highest"][str(k)] for k in range(100)] == published["per_key_last"] == [30] * 100
    assert report["per_client"] == {"0": 3000}
    assert consumer.stop() == 0


def test_status_shows_members_and_the_owner_and_epoch_of_each_queue(roles: Roles) -> None:
    create_group("watched", "watched", 8, 2, 1 << 20, roles.registry)
    consumer = roles.start(
        "consumer", "consume", "watched", "--index", "0", "--count", "1", "--member-name", "worker-a", *TIMINGS
    )
    consumer.wait_owned({0, 1}, START_TIMEOUT)
    result = run_group(roles.registry, "status", "watched", "--json", "--settle", "1s", *TIMINGS)
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout.strip().splitlines()[-1])
    consumers = [m for m in status["members"] if m["role"] == "consumer"]
    assert [(m["name"], m["index"], m["count"]) for m in consumers] == [("worker-a", 0, 1)]
    assert [(q["queue"], q["owner_name"], q["state"]) for q in status["queues"]] == [
        (0, "worker-a", "active"),
        (1, "worker-a", "active"),
    ]
    assert all(q["epoch"] >= 1 for q in status["queues"])
    assert status["authenticated"] is False
    table = run_group(roles.registry, "status", "watched", "--settle", "1s", *TIMINGS)
    assert table.returncode == 0 and "worker-a" in table.stdout and "owner_name" in table.stdout
    assert "UNAUTHENTICATED: no group secret" in table.stdout
    assert consumer.stop() == 0


def test_status_of_an_authenticated_group_verifies_and_counts_what_fails(roles: Roles, tmp_path: Path) -> None:
    create_group("sealed", "sealed", 8, 2, 1 << 20, roles.registry)
    secret = create_secret("sealed", roles.registry)
    consumer = roles.start("consumer", "consume", "sealed", "--index", "0", "--count", "1", *TIMINGS)
    consumer.wait_owned({0, 1}, START_TIMEOUT)
    table = run_group(roles.registry, "status", "sealed", "--settle", "1s", *TIMINGS)
    assert table.returncode == 0, table.stderr
    assert f"authenticated (secret: file {secret})" in table.stdout and "consumer-0" in table.stdout
    wrong = tmp_path / "wrong.secret"
    wrong.write_text("ab" * 32)
    wrong.chmod(0o600)
    result = run_group(roles.registry, "status", "sealed", "--json", "--settle", "1s", "--secret-file", str(wrong))
    status = json.loads(result.stdout.strip().splitlines()[-1])
    assert status["authenticated"] is True and status["auth_refused"] > 0 and status["members"] == []
    assert consumer.stop() == 0


def test_validator_reports_reordering_and_consumer_changes_in_the_seeds_words(roles: Roles) -> None:
    create_group("v", "v", 4, 2, 1 << 20, roles.registry)
    channel = loopback_channel()
    validator = roles.start(
        "validator", "validate", "v", "--channel", channel, "--idle-exit", "1", "--duration", "30", "--verbose"
    )
    validator.wait_line("validating group", START_TIMEOUT)

    def record(topic: int, seqno: int, client: int) -> bytes:
        return RepublishedRecord(topic, client, 0, seqno, 1, 1, seqno, 0, 0, f"v/1/key{topic}").encode()

    # Key 3: 1, 3 (gap), 2 (late: out of order), 3 (duplicate); key 4: 1 then 2 from another client.
    stream = [record(3, 1, 0), record(3, 3, 0), record(3, 2, 1), record(3, 3, 1), record(4, 1, 0), record(4, 2, 1)]
    with affinity.Client() as client:
        publication = client.add_publication(channel, REPUBLISH_STREAM_ID)
        wait_until("the validator to connect", lambda: publication.is_connected, 10)
        for data in stream:
            wait_until("an offer", lambda data=data: publication.offer(data) > 0, 5)
        validator.process.wait(timeout=30)
    output = validator.output()
    assert validator.process.returncode == 1
    gap = "Sequence number error. topic number 3 Expected 2 but received 3 :: lbg client - 0"
    assert f"{gap} :: original topic - v/1/key3 (gap)" in output
    assert any("Expected 4 but received 2 :: lbg client - 1" in line and "(out_of_order)" in line for line in output)
    assert any("Expected 4 but received 3" in line and "(duplicate)" in line for line in output)
    assert "Shard assigned new lbgclient. topic number 4 was 0 now 1 :: original topic - v/1/key4" in output
    assert "out of order 1, duplicates 1" in output[-1] and output[-1].endswith("FAILED")


def test_validator_prints_one_line_per_moved_queue_and_per_key_lines_only_when_verbose(roles: Roles) -> None:
    create_group("m", "m", 4, 2, 1 << 20, roles.registry)
    channel = loopback_channel()
    validator = roles.start("validator", "validate", "m", "--channel", channel, "--idle-exit", "1", "--duration", "30")
    validator.wait_line("validating group", START_TIMEOUT)

    def record(topic: int, seqno: int, client: int) -> bytes:
        return RepublishedRecord(topic, client, topic % 2, seqno, 1, 1, seqno, 0, 0, f"m/1/key{topic}").encode()

    # Twelve keys on queues 0 and 1, all moving from consumer 0 to consumer 1 (which never
    # sends again from consumer 0: a failover).
    stream = [record(topic, 1, 0) for topic in range(12)] + [record(topic, 2, 1) for topic in range(12)]
    with affinity.Client() as client:
        publication = client.add_publication(channel, REPUBLISH_STREAM_ID)
        wait_until("the validator to connect", lambda: publication.is_connected, 10)
        for data in stream:
            wait_until("an offer", lambda data=data: publication.offer(data) > 0, 5)
        validator.process.wait(timeout=30)
    output = validator.output()
    assert validator.process.returncode == 0, output
    assert not any("Shard assigned" in line for line in output), output
    moved = [line.split(" ", 1)[1] for line in output if " moved: " in line]
    assert sorted(moved) == [f"queue {q} moved: consumer 0 -> consumer 1" for q in (0, 1)]
    summaries = sorted(line.split(" ", 1)[1] for line in output if "keys moved; why:" in line)
    why = "why: consumer 0 sent nothing after it (it died or left: failover)"
    assert summaries == [f"queue {q}: consumer 0 -> consumer 1, 6 keys moved; {why}" for q in (0, 1)]


def test_validator_counts_gaps_that_are_never_filled_as_lost() -> None:
    validator = Validator(expected_keys=2)
    for seqno in (1, 2, 5, 6):
        validator.observe(RepublishedRecord(0, 0, 0, seqno, 1, 1, seqno, 0, 0, "s"), time.time())
    report = validator.report()
    assert (report.gaps, report.lost, report.out_of_order, report.keys_seen) == (1, 2, 0, 1)
    assert not report.ok
    validator.observe(RepublishedRecord(0, 0, 0, 3, 1, 1, 3, 0, 0, "s"), time.time())
    validator.observe(RepublishedRecord(0, 0, 0, 4, 1, 1, 4, 0, 0, "s"), time.time())
    validator.observe(RepublishedRecord(1, 0, 0, 1, 1, 1, 1, 0, 0, "s"), time.time())
    report = validator.report()
    assert (report.lost, report.out_of_order, report.keys_seen, report.highest) == (0, 2, 2, {0: 6, 1: 1})
    assert not report.ok  # reordering is an error even when nothing is lost


def test_records_round_trip_and_reject_foreign_or_truncated_bytes() -> None:
    published = PublishedRecord(7, 42, 123456789)
    assert PublishedRecord.decode(published.encode(100)) == published
    assert len(published.encode(100)) == 100
    republished = RepublishedRecord(7, 2, 3, 42, 5, 99, 41, 1, 2, "hp/3/ключ")
    assert RepublishedRecord.decode(republished.encode()) == republished
    with pytest.raises(RecordError, match="too short"):
        PublishedRecord.decode(b"AP\x01")
    with pytest.raises(RecordError, match="not a published record"):
        PublishedRecord.decode(republished.encode())
    with pytest.raises(RecordError, match="truncated"):
        RepublishedRecord.decode(republished.encode()[:-2])
    assert isinstance(RecordError("x"), affinity.AffinityError)


def test_durations_accept_units_and_refuse_nonsense() -> None:
    assert (duration("1s"), duration("500ms"), duration("2m"), duration("1.5"), duration("1h")) == (
        1.0,
        0.5,
        120.0,
        1.5,
        3600.0,
    )
    for bad in ("", "0s", "-1s", "1d", "fast"):
        with pytest.raises(Exception, match="invalid duration"):
            duration(bad)
