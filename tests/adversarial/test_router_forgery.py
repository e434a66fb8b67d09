"""A real ``affinity router --secret-file`` against a forger on the network who builds subject
messages from the documented layouts (docs/subjects.md, docs/control-plane.md): a forged SUBSCRIBE
and forged source updates, unsealed or with a wrong tag, a replayed captured authenticated
message, and forged updates sent straight to a subscriber's inbox are refused and counted; the
real subscriber gets only the real source's updates. The same forgeries against a router without
a secret succeed (so the test can fail)."""

from __future__ import annotations

import os
import re
import secrets
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import affinity
import pytest
import test_router_bounds as bounds
from affinity.subjects import ROUTER_SECRET_ENV, ROUTER_SECRET_FILE_ENV, Source, Subscriber
from affinity.testing import free_udp_port, loopback_channel
from test_router_bounds import DATA, DATA_STREAM, SUBSCRIBE, Router, connected, parse, record

# The process runner and fixtures of the router-bounds scenarios.
services, routers, handles = bounds.services, bounds.routers, bounds.handles

#: A sealed message: the first record's version byte is 2, then sequence u64 and a 32-byte tag.
SEALED_VERSION = 2
TRAILER = struct.Struct("<Q32s")
FLAG_UPDATE = 0x0002
TIMEOUT = 20.0
SUBJECT = "/PRICES/real"
REFUSALS = re.compile(r"Refused (\d+) messages .*unauthenticated (\d+), bad tag (\d+), replayed (\d+)")


def wrong_tag(message: bytes) -> bytes:
    """``message`` laid out as sealed, with a tag nobody computed from the secret."""
    return bytes([SEALED_VERSION]) + message[1:] + TRAILER.pack(1, secrets.token_bytes(32))


def until(step: Callable[[], object], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        step()
        if done():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def offer(publication: affinity.Publication, message: bytes) -> None:
    until(lambda: None, lambda: publication.offer(message) >= 0, "the forged message accepted")


def capture_sealed_subscribe(client: affinity.Client, secret_file: Path, handles: list[Any]) -> bytes:
    """An authenticated SUBSCRIBE as it travels: a member holding the secret sends it to a decoy
    "router" the forger listens on (what a sniffer on the path would record)."""
    decoy = loopback_channel()
    sniffer = client.add_subscription(decoy, DATA_STREAM)
    handles.append(sniffer)
    victim = Subscriber(client, decoy, name="victim", secret=secret_file)
    handles.append(victim)
    victim.subscribe("/PRICES/victim", lambda *_: None)
    captured: list[bytes] = []
    until(lambda: captured.extend(sniffer.poll_batch(16)), lambda: bool(captured), "a captured SUBSCRIBE")
    assert captured[0][0] == SEALED_VERSION, "the member's SUBSCRIBE left unsealed"
    return captured[0]


def attack(
    client: affinity.Client, services: Path, routers: list[Router], handles: list[Any], secret_file: Path | None
) -> dict[str, Any]:
    """Runs every forgery against a real router (with ``--secret-file`` when given); what each
    party saw."""
    listen = loopback_channel()
    options = ["--secret-file", str(secret_file)] if secret_file is not None else []
    router = Router(services, listen, "--liveness-timeout", "30", *options)
    routers.append(router)
    members = {"secret": secret_file} if secret_file is not None else {}
    source = Source(client, listen, "PriceFeed", heartbeat_interval=0.05, **members)
    handles.append(source)
    requested: set[str] = set()
    source.on_request(requested.add)
    router.wait_for(lambda lines: any("Source PriceFeed" in line and "is up" in line for line in lines), "feed up")
    subscriber = Subscriber(client, listen, name="alice", heartbeat_interval=0.05, **members)
    handles.append(subscriber)
    got: list[bytes] = []
    subscriber.subscribe(SUBJECT, lambda subject, flags, payload: got.append(payload))
    until(lambda: source.poll(), lambda: SUBJECT in requested, "the request")
    source.publish(SUBJECT, b"image", image=True)
    until(lambda: subscriber.poll(), lambda: got == [b"image"], "the image")

    # The forger: an inbox of its own, a publication to the router, one to the subscriber.
    inbox_endpoint = f"127.0.0.1:{free_udp_port()}"
    forger_inbox = client.add_subscription(f"aeron:udp?endpoint={inbox_endpoint}", DATA_STREAM)
    to_router = connected(client.add_publication(listen, DATA_STREAM))
    to_subscriber = connected(client.add_publication(f"aeron:udp?endpoint={subscriber.endpoint}", DATA_STREAM))
    handles += [forger_inbox, to_router, to_subscriber]
    forged_subscribe = record(SUBSCRIBE, 77_001, SUBJECT, f"{inbox_endpoint}\nmallory".encode())
    # Updates claiming to come from the real source (its id is in every record it sends).
    forged_update = record(DATA, source.connection_id, SUBJECT, b"forged-via-router", FLAG_UPDATE)
    for message in (forged_subscribe, wrong_tag(forged_subscribe), forged_update, wrong_tag(forged_update)):
        offer(to_router, message)
    direct = record(DATA, 1, SUBJECT, b"forged-direct", FLAG_UPDATE)
    offer(to_subscriber, direct)
    offer(to_subscriber, wrong_tag(direct))
    if secret_file is not None:
        captured = capture_sealed_subscribe(client, secret_file, handles)
        offer(to_router, captured)  # the member's own message, first seen here: accepted
        offer(to_router, captured)  # the same again: a replay

        def refusals(lines: list[str]) -> bool:
            counts = [tuple(map(int, m.groups())) for m in map(REFUSALS.search, lines) if m]
            return any(u >= 2 and b >= 2 and r >= 1 for _, u, b, r in counts)

        router.wait_for(refusals, "the router's refusals logged")
    else:
        until(lambda: subscriber.poll(), lambda: b"forged-via-router" in got, "the forged update relayed")
    source.publish(SUBJECT, b"update-1")
    until(lambda: subscriber.poll(), lambda: b"update-1" in got, "the real update")
    stolen: list[bytes] = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        subscriber.poll()
        for message in forger_inbox.poll_batch(64):
            stolen += [p for kind, _, s, p in parse(message) if kind == DATA and s == SUBJECT]
        time.sleep(0.01)
    return {"got": got, "stolen": stolen, "counters": subscriber.counters(), "lines": router.snapshot()}


@pytest.fixture(autouse=True)
def no_secret_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ROUTER_SECRET_ENV, raising=False)
    monkeypatch.delenv(ROUTER_SECRET_FILE_ENV, raising=False)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "router.secret"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, secrets.token_bytes(32).hex().encode() + b"\n")
    os.close(fd)
    return path


def test_forged_subscribes_and_updates_are_refused_and_counted_by_a_router_with_a_secret(
    client: affinity.Client, services: Path, routers: list[Router], handles: list[Any], secret_file: Path
) -> None:
    seen = attack(client, services, routers, handles, secret_file)
    assert any("authenticated (secret from file" in line for line in seen["lines"])
    assert seen["got"] == [b"image", b"update-1"], "the subscriber got something the real source did not send"
    assert seen["stolen"] == [], "the forged SUBSCRIBE was served"
    counters = seen["counters"]
    assert counters.auth_unauthenticated == 1 and counters.auth_bad_tag == 1, counters


def test_the_same_forgeries_succeed_against_a_router_without_a_secret(
    client: affinity.Client, services: Path, routers: list[Router], handles: list[Any]
) -> None:
    seen = attack(client, services, routers, handles, None)
    assert any("UNAUTHENTICATED: no router secret" in line for line in seen["lines"])
    assert b"forged-via-router" in seen["got"] and b"forged-direct" in seen["got"]
    assert b"update-1" in seen["stolen"], "the forged SUBSCRIBE was not served"


def test_the_router_refuses_to_start_with_an_unsafe_secret_file(
    services: Path, secret_file: Path, tmp_path: Path
) -> None:
    os.chmod(secret_file, 0o644)
    link = tmp_path / "link.secret"
    link.symlink_to(secret_file)
    for path, message in ((secret_file, "0644 lets group or others read it"), (link, "symbolic link")):
        done = subprocess.run(
            [sys.executable, "-m", "affinity.cli", "router", "--config", str(services), "--secret-file", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert f"router secret {path}" in done.stderr and message in done.stderr, done.stderr
