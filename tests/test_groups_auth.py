"""Group authentication: the secret's sources and file checks, and members that seal and verify.

A group with a secret delivers as before; a member with another secret, or none, is never heard
(its messages are counted as refused); secret files are never followed, never block, and must be
the user's own and private.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import affinity
import pytest
from affinity.exceptions import ConfigError
from affinity.groups import GroupConsumer, GroupPublisher, create_group
from affinity.groups.secret import (
    MAX_SECRET_FILE_SIZE,
    SECRET_ENV,
    SECRET_FILE_ENV,
    create_secret,
    read_secret_file,
    remove_secret,
    resolve_secret,
    secret_file,
)

FAST = {"liveness_timeout": 0.5, "heartbeat_interval": 0.05}


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(SECRET_ENV, raising=False)
    monkeypatch.delenv(SECRET_FILE_ENV, raising=False)
    create_group("orders", "orders", hash_count=8, queue_count=2, queue_size=1 << 20, registry=tmp_path)
    return tmp_path


def test_create_secret_is_private_and_read_back(registry: Path) -> None:
    path = create_secret("orders", registry)
    assert path == secret_file("orders", registry)
    assert path.stat().st_mode & 0o777 == 0o600
    secret = read_secret_file(path)
    assert len(secret) == 32
    assert resolve_secret("orders", registry) == (secret, f"file {path}")
    # A second create replaces the secret (a deleted group's leftover), never appends to it.
    assert create_secret("orders", registry) == path and read_secret_file(path) != secret


def test_create_secret_does_not_follow_a_planted_link(registry: Path, tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("precious")
    secret_file("orders", registry).symlink_to(target)
    path = create_secret("orders", registry)
    assert target.read_text() == "precious", "the secret was written through a link"
    assert not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600


def test_unsafe_secret_files_are_refused_with_the_reason(registry: Path, tmp_path: Path) -> None:
    good = create_secret("orders", registry)
    link = tmp_path / "link.secret"
    link.symlink_to(good)
    with pytest.raises(ConfigError, match="symbolic link"):
        read_secret_file(link)
    fifo = tmp_path / "fifo.secret"
    os.mkfifo(fifo, 0o600)
    started = time.monotonic()
    with pytest.raises(ConfigError, match="not a regular file"):
        read_secret_file(fifo)
    assert time.monotonic() - started < 5, "a FIFO blocked the read"
    readable = tmp_path / "readable.secret"
    readable.write_text("00" * 32)
    readable.chmod(0o644)
    with pytest.raises(ConfigError, match="0644 lets group or others read it"):
        read_secret_file(readable)
    for name, text, message in (
        ("big.secret", "0" * (MAX_SECRET_FILE_SIZE + 1), "more than"),
        ("short.secret", "00" * 8, "has 8 bytes"),
        ("text.secret", "not hex at all!", "must be hex"),
    ):
        path = tmp_path / name
        path.write_text(text)
        path.chmod(0o600)
        with pytest.raises(ConfigError, match=message):
            read_secret_file(path)


def test_sources_in_order_argument_environment_file_registry(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve_secret("orders", registry) == (None, "none")
    in_registry = read_secret_file(create_secret("orders", registry))
    elsewhere = tmp_path / "elsewhere.secret"
    elsewhere.write_text("11" * 32)
    elsewhere.chmod(0o600)
    monkeypatch.setenv(SECRET_FILE_ENV, str(elsewhere))
    assert resolve_secret("orders", registry)[0] == b"\x11" * 32
    monkeypatch.setenv(SECRET_ENV, "22" * 32)
    assert resolve_secret("orders", registry) == (b"\x22" * 32, f"${SECRET_ENV}")
    assert resolve_secret("orders", registry, b"\x33" * 16) == (b"\x33" * 16, "argument")
    assert resolve_secret("orders", registry, elsewhere)[0] == b"\x11" * 32
    with pytest.raises(ConfigError, match="has 4 bytes"):
        resolve_secret("orders", registry, b"tiny")
    monkeypatch.delenv(SECRET_ENV)
    monkeypatch.delenv(SECRET_FILE_ENV)
    assert resolve_secret("orders", registry)[0] == in_registry
    assert remove_secret("orders", registry) and resolve_secret("orders", registry) == (None, "none")


def _deliver(publisher: GroupPublisher, consumer: GroupConsumer, count: int, timeout: float = 20.0) -> list[bytes]:
    deadline = time.monotonic() + timeout
    while publisher.publish(b"key-0", b"first") < 0:
        assert time.monotonic() < deadline, "the publisher never saw the consumer"
        time.sleep(0.02)
    for index in range(1, count):
        assert publisher.publish(f"key-{index}".encode(), b"payload") > 0
    received: list[bytes] = []
    while len(received) < count and time.monotonic() < deadline:
        for message in consumer.poll(100, 0.05):
            received.append(message.key)
            consumer.ack(message)
    return received


def test_members_sharing_the_secret_deliver_and_say_they_are_authenticated(registry: Path) -> None:
    create_secret("orders", registry)
    with affinity.Client() as client:
        consumer = GroupConsumer(client, "orders", 0, 1, registry=registry, **FAST)
        publisher = GroupPublisher(client, "orders", registry=registry, **FAST)
        try:
            assert len(_deliver(publisher, consumer, 200)) == 200
            assert publisher.flush(10.0)
            assert publisher.status().authenticated and consumer.status().authenticated
            assert publisher.status().auth_refused == 0 and consumer.status().auth_refused == 0
            assert publisher.secret_source.startswith("file ")
        finally:
            publisher.close()
            consumer.close(1.0)


@pytest.mark.parametrize("other", [b"\x99" * 32, None], ids=["another secret", "no secret"])
def test_a_member_without_the_groups_secret_is_never_heard(registry: Path, other: bytes | None) -> None:
    create_secret("orders", registry)
    with affinity.Client() as client:
        # The consumer has another secret, or none (the registry's file is gone when it starts;
        # the publisher gets the secret by argument).
        if other is None:
            secret = read_secret_file(secret_file("orders", registry))
            remove_secret("orders", registry)
            consumer = GroupConsumer(client, "orders", 0, 1, registry=registry, **FAST)
            publisher = GroupPublisher(client, "orders", registry=registry, secret=secret, **FAST)
        else:
            consumer = GroupConsumer(client, "orders", 0, 1, registry=registry, secret=other, **FAST)
            publisher = GroupPublisher(client, "orders", registry=registry, **FAST)
        try:
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                assert publisher.publish(b"key", b"payload") == affinity.NOT_CONNECTED
                time.sleep(0.05)
            assert consumer.status().authenticated == (other is not None)
            assert publisher.status().auth_refused > 0, "the consumer's heartbeats were not refused"
            assert consumer.status().auth_refused > 0, "the publisher's heartbeats were not refused"
            counters = publisher.counters()
            if other is None:
                assert counters.auth_unauthenticated > 0 and consumer.counters().auth_unverifiable > 0
            else:
                assert counters.auth_bad_tag > 0
        finally:
            publisher.close()
            consumer.close(1.0)
