"""The subject router in process: API, faucet coverage, hostile input, configuration errors.
Each test runs with an embedded and with a standalone driver (conftest.py, ``driver_kind``)."""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import affinity
import pytest
from affinity import _affinity
from affinity.config.faucet import analyse_router_text, parse_router_file
from affinity.exceptions import AffinityError, ConfigError
from affinity.subjects import (
    ROUTER_SECRET_ENV,
    ROUTER_SECRET_FILE_ENV,
    FaucetEvent,
    Flags,
    Source,
    SubjectRouter,
    Subscriber,
    resolve_router_secret,
)
from affinity.testing import loopback_channel

DATA = Path(__file__).parent / "data"
TIMEOUT = 10.0
FAST = {"heartbeat_interval": 0.05, "liveness_timeout": 1.0}

pytestmark = pytest.mark.both_drivers


def until(step: Callable[[], object], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        step()
        if done():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def listen() -> str:
    return loopback_channel()


@pytest.fixture
def transformer(client: affinity.Client, listen: str) -> Iterator[SubjectRouter]:
    with SubjectRouter(client, DATA / "worked_example_transformer.conf", listen=listen, liveness_timeout=1.0) as r:
        yield r


def wait_up(router: SubjectRouter, *labels: str) -> None:
    until(lambda: None, lambda: all(up for label, up in router.status().members if label in labels), f"{labels} up")


def test_a_subscriber_gets_the_image_then_updates_and_the_log_has_the_seed_lines(
    client: affinity.Client, listen: str, transformer: SubjectRouter, caplog: pytest.LogCaptureFixture
) -> None:
    adapters = [Source(client, listen, label, **FAST) for label in ("TradeAdapterA", "TradeAdapterB")]
    wait_up(transformer, "TradeAdapterA", "TradeAdapterB")
    requested: list[tuple[str, str]] = []
    for source in adapters:
        source.on_request(lambda subject, source=source: requested.append((source.label, subject)))
    sub = Subscriber(client, listen, name="alice", **FAST)
    got: list[tuple[str, Flags, bytes]] = []
    sub.subscribe("/PRIVATE/alice-0/FXTRADE", lambda s, f, p: got.append((s, f, p)))
    until(lambda: [s.poll() for s in adapters], lambda: bool(requested), "a request")
    label, subject = requested[0]
    server = next(s for s in adapters if s.label == label)
    server.publish(subject, b"image", image=True)
    server.publish(subject, b"update")
    until(lambda: sub.poll(), lambda: len(got) >= 2, "image and update")
    assert got == [(subject, Flags.IMAGE, b"image"), (subject, Flags.UPDATE, b"update")]
    with caplog.at_level(logging.INFO, logger="affinity.router"):
        transformer.flush_log()
    peer = 1 + ["TradeAdapterA", "TradeAdapterB"].index(label)
    assert f"Object <{subject}> is bound to affinity <trading-adapters:alice>" in caplog.messages
    assert f"We can request object <{subject}> from peer {peer} ({label})" in caplog.messages
    sub.unsubscribe(subject)
    discarded: list[str] = []
    server.on_discard(discarded.append)
    until(lambda: server.poll(), lambda: discarded == [subject], "discard")
    with pytest.raises(ConfigError, match="not subscribed"):
        sub.unsubscribe(subject)
    for source in adapters:
        source.close()
    sub.close()


def test_hostile_subject_and_control_messages_are_counted_and_ignored(
    client: affinity.Client, listen: str, transformer: SubjectRouter
) -> None:
    # The subject router listens on the control plane's stream ids (exported as GROUP_*).
    data = client.add_publication(listen, _affinity.GROUP_DATA_STREAM_ID)
    control = client.add_publication(listen, _affinity.GROUP_CONTROL_STREAM_ID)
    until(lambda: None, lambda: data.is_connected and control.is_connected, "raw publications connected")
    garbage = [b"\x01", b"\xff" * 40, b"\x01\x05\x00\x00\xff\xff" + b"\x00" * 18, b"\x01\x03" + b"\x00" * 60]
    for message in garbage:
        data.offer(message)
        control.offer(message)
    until(
        lambda: None,
        lambda: transformer.status().malformed >= 3 and transformer.status().control_malformed >= 4,
        "counters",
    )
    data.close()
    control.close()
    status = transformer.status()
    assert status.subjects == 0
    # The router still works afterwards.
    source = Source(client, listen, "HistoricalAdapter", **FAST)
    wait_up(transformer, "HistoricalAdapter")
    sub = Subscriber(client, listen, name="bob", **FAST)
    got: list[bytes] = []
    sub.subscribe("/PRIVATE/bob/ITEM", lambda s, f, p: got.append(p))
    source.on_request(lambda subject: source.publish(subject, b"item", image=True))
    until(lambda: (source.poll(), sub.poll()), lambda: got == [b"item"], "item")
    source.close()
    sub.close()


def test_a_subject_no_service_covers_is_answered_nodata_notfound(
    client: affinity.Client, listen: str, transformer: SubjectRouter
) -> None:
    sub = Subscriber(client, listen, name="carol", **FAST)
    got: list[tuple[Flags, bytes]] = []
    sub.subscribe("/NOWHERE", lambda s, f, p: got.append((f, p)))
    until(lambda: sub.poll(), lambda: bool(got), "nodata")
    assert got[0][0] == Flags.NODATA_NOTFOUND
    assert b"no data service" in got[0][1]
    sub.close()


def test_two_callbacks_share_one_subscription_each_runs_once_and_the_status_counts_duplicates(
    client: affinity.Client, listen: str, transformer: SubjectRouter
) -> None:
    source = Source(client, listen, "HistoricalAdapter", **FAST)
    wait_up(transformer, "HistoricalAdapter")
    source.on_request(lambda subject: source.publish(subject, b"item", image=True))
    sub = Subscriber(client, listen, name="dave", **FAST)
    first: list[bytes] = []
    second: list[bytes] = []
    sub.subscribe("/PRIVATE/dave/ITEM", lambda s, f, p: first.append(p))
    sub.subscribe("/PRIVATE/dave/ITEM", lambda s, f, p: second.append(p))
    until(lambda: (source.poll(), sub.poll()), lambda: bool(first and second), "item")
    # A hostile duplicate straight from the core: the router counts it and relays once.
    sub._core.subscribe("/PRIVATE/dave/ITEM")
    until(lambda: None, lambda: transformer.status().duplicate_subscribes == 1, "duplicate counted")
    source.publish("/PRIVATE/dave/ITEM", b"update")
    until(lambda: (source.poll(), sub.poll()), lambda: len(first) >= 2, "update")
    sub.poll()
    assert (first, second) == ([b"item", b"update"], [b"item", b"update"])
    assert transformer.status().refused_subscribes == 0
    # One unsubscribe per callback; the last one ends the router's subscription.
    sub.unsubscribe("/PRIVATE/dave/ITEM")
    source.publish("/PRIVATE/dave/ITEM", b"still")
    until(lambda: (source.poll(), sub.poll()), lambda: first[-1:] == [b"still"], "the first callback still served")
    assert second == [b"item", b"update"]
    sub.unsubscribe("/PRIVATE/dave/ITEM")
    until(lambda: None, lambda: transformer.status().subjects == 0, "unsubscribed")
    source.close()
    sub.close()


def test_the_backlog_budget_is_checked_once_and_parsed_by_the_cli(client: affinity.Client, listen: str) -> None:
    from affinity.cli.router import byte_size
    from affinity.subjects import DEFAULT_BACKLOG_BUDGET, MIN_BACKLOG_BUDGET

    assert (byte_size("256M"), byte_size("4194304"), byte_size("1g")) == (DEFAULT_BACKLOG_BUDGET, 4 << 20, 1 << 30)
    for bad in ("1K", "lots", "-5M", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            byte_size(bad)
    with pytest.raises(ConfigError, match="backlog budget 1024 bytes: must be at least"):
        SubjectRouter(client, DATA / "worked_example_transformer.conf", listen=listen, backlog_budget=1024)
    with SubjectRouter(
        client, DATA / "worked_example_transformer.conf", listen=listen, backlog_budget=MIN_BACKLOG_BUDGET
    ) as router:
        assert router.status().backlog_bytes == 0


def test_faucet_coverage_limits_a_publisher_and_late_enlistment_takes_outstanding_topics(
    client: affinity.Client, listen: str
) -> None:
    with SubjectRouter(client, DATA / "faucet_space.conf", listen=listen, liveness_timeout=1.0):
        cobalt = Source(client, listen, "cpub", coverage=["/space/C.*"], **FAST)
        sub = Subscriber(client, listen, name="s1", **FAST)
        events: list[FaucetEvent] = []
        watcher = Subscriber(client, listen, name="watcher", **FAST)
        watcher.subscribe("space_faucet_control", lambda s, f, p: events.append(FaucetEvent.from_json(p)))
        time.sleep(0.3)
        requests: dict[str, list[str]] = {"cpub": [], "apub": []}
        cobalt.on_request(requests["cpub"].append)
        for topic in ("/space/COBALT", "/space/A"):
            sub.subscribe(topic, lambda s, f, p: None)
            until(
                lambda: (sub.poll(), watcher.poll(), cobalt.poll()),
                lambda t=topic: any(e.topic == t for e in events),
                topic,
            )
        assert [(e.event, e.topic, e.client_name) for e in events] == [
            ("assign", "/space/COBALT", "cpub"),
            ("no_handlers", "/space/A", None),
        ]
        assert events[0].subscriber_client_name is None  # default announcements
        assert events[0].connection_name == f"{cobalt.connection_id:016x}"
        # A publisher covering /space/A enlists late: the outstanding topic is assigned to it.
        apub = Source(client, listen, "apub", coverage=["/space/A.*", "/space/("], **FAST)
        apub.on_request(requests["apub"].append)
        until(lambda: (watcher.poll(), apub.poll(), cobalt.poll()), lambda: len(events) >= 3, "late assign")
        assert (events[2].event, events[2].topic, events[2].client_name) == ("assign", "/space/A", "apub")
        until(lambda: apub.poll(), lambda: requests["apub"] == ["/space/A"], "request to apub")
        assert requests["cpub"] == ["/space/COBALT"]
        for handle in (cobalt, apub, sub, watcher):
            handle.close()


def test_a_faucet_event_nested_past_the_decoders_depth_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nested too deeply"):
        FaucetEvent.from_json(b"[" * 5000)


def test_faucet_events_decode_to_typed_records() -> None:
    payload = json.dumps({"client_name": "p", "connection_name": "01", "topic": "/t", "event": "assign"})
    event = FaucetEvent.from_json(payload.encode())
    assert event == FaucetEvent("assign", "/t", "p", "01", None, None)
    with pytest.raises(ConfigError):
        FaucetEvent.from_json(b"not json")
    with pytest.raises(ConfigError):
        FaucetEvent.from_json(b"[1]")


def test_the_faucet_block_is_parsed_with_file_line_errors() -> None:
    text = (
        "add-faucet\n"
        "    control-topic ctl\n"
        '    subscription-topic "/s/("\n'
        "    announcements some\n"
        "    bogus x\n"
        "end-faucet\n"
        'add-data-service service-name s include-pattern "^/x" add-source-group add-priority label p '
        "end-priority end-source-group end-data-service\n"
    )
    analysis = analyse_router_text(text, "r.conf")
    messages = [str(d) for d in analysis.errors]
    assert any(m.startswith("r.conf:3:25: error: subscription-topic '/s/('") for m in messages), messages
    assert any(m.startswith("r.conf:4:19: error: announcements 'some'") for m in messages), messages
    assert any(m.startswith("r.conf:5:5: error: unexpected 'bogus'") for m in messages), messages
    assert analysis.config.faucet is None
    # The data service after the block keeps its line numbers and parses.
    assert [s.name for s in analysis.config.routing.data_services] == ["s"]
    missing = analyse_router_text("add-faucet\n control-topic c\n", "m.conf")
    assert [str(d) for d in missing.errors] == ["m.conf:1:1: error: add-faucet without end-faucet"]
    two = analyse_router_text(
        "add-faucet control-topic a subscription-topic /a end-faucet\n"
        "add-faucet control-topic b subscription-topic /b end-faucet\n",
        "t.conf",
    )
    assert [str(d) for d in two.errors] == ["t.conf:2:1: error: only one add-faucet block is allowed"]
    assert two.config.faucet is not None and two.config.faucet.control_topic == "a"


def test_parse_router_file_reads_the_seed_faucet_configurations() -> None:
    symbols = parse_router_file(DATA / "faucet_symbols.conf").faucet
    space = parse_router_file(DATA / "faucet_space.conf").faucet
    assert symbols is not None and space is not None
    assert (symbols.control_topic, symbols.subscription_topic, symbols.announcements) == (
        "symbol_faucet_control",
        "/symbols/.*",
        "all",
    )
    assert (space.subscription_topic, space.announcements, space.coverage_option) == (
        "/space/.*",
        "default",
        "udo_coverage",
    )


def test_invalid_arguments_raise_affinity_errors(client: affinity.Client, listen: str) -> None:
    with pytest.raises(AffinityError):
        Subscriber(client, listen, name="", **FAST)
    with pytest.raises(AffinityError):
        Subscriber(client, listen, name="x", heartbeat_interval=0.0)
    source = Source(client, listen, "S", **FAST)
    with pytest.raises(ConfigError, match="nodata status"):
        source.nodata("/a", "gone")
    with pytest.raises(AffinityError):
        source.publish("", b"x")
    with pytest.raises(ConfigError):
        Source(client, listen, "S2", coverage="/a.*")  # type: ignore[arg-type]
    source.close()
    with pytest.raises(AffinityError, match="closed"):
        source.publish("/a", b"x")


SECRET = bytes(range(32))


@pytest.fixture
def no_router_secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ROUTER_SECRET_ENV, raising=False)
    monkeypatch.delenv(ROUTER_SECRET_FILE_ENV, raising=False)


def test_with_a_router_secret_only_members_holding_it_are_heard_and_the_rest_is_counted(
    client: affinity.Client, listen: str, no_router_secret_env: None
) -> None:
    with SubjectRouter(
        client, DATA / "worked_example_transformer.conf", listen=listen, liveness_timeout=1.0, secret=SECRET
    ) as router:
        assert router.status().authenticated and router.secret_source == "argument"
        source = Source(client, listen, "HistoricalAdapter", secret=SECRET, **FAST)
        assert source.authenticated
        wait_up(router, "HistoricalAdapter")
        source.on_request(lambda subject: source.publish(subject, b"item", image=True))
        # Another secret: heartbeats and SUBSCRIBE refused (bad tag); none: unauthenticated.
        other = Subscriber(client, listen, name="mallory", secret=bytes(32), **FAST)
        plain = Subscriber(client, listen, name="eve", **FAST)
        assert not plain.authenticated
        refused: list[bytes] = []
        other.subscribe("/PRIVATE/mallory/ITEM", lambda s, f, p: refused.append(p))
        plain.subscribe("/PRIVATE/eve/ITEM", lambda s, f, p: refused.append(p))
        until(
            lambda: None,
            lambda: router.status().auth_bad_tag >= 2 and router.status().auth_unauthenticated >= 2,
            "refusals counted",
        )
        sub = Subscriber(client, listen, name="alice", secret=SECRET, **FAST)
        got: list[bytes] = []
        sub.subscribe("/PRIVATE/alice/ITEM", lambda s, f, p: got.append(p))
        until(lambda: (source.poll(), sub.poll()), lambda: got == [b"item"], "item")
        other.poll()
        plain.poll()
        # The status is a snapshot the router thread refreshes every 10 ms: wait for the one after the item.
        until(lambda: None, lambda: router.status().subjects == 1, "the router's status to show the subject")
        status = router.status()
        assert refused == [], refused
        assert status.auth_refused == status.auth_bad_tag + status.auth_unauthenticated
        assert sub.counters().auth_bad_tag == 0 and sub.counters().received == 1
        for member in (source, other, plain, sub):
            member.close()


def test_a_router_without_a_secret_says_so_and_refuses_sealed_messages(
    client: affinity.Client, listen: str, no_router_secret_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    with SubjectRouter(client, DATA / "worked_example_transformer.conf", listen=listen, liveness_timeout=1.0) as router:
        assert not router.status().authenticated and router.secret_source == "none"
        sealed = Subscriber(client, listen, name="sealed", secret=SECRET, **FAST)
        sealed.subscribe("/PRIVATE/sealed/ITEM", lambda s, f, p: None)
        until(lambda: None, lambda: router.status().auth_unverifiable >= 2, "unverifiable counted")
        assert router.status().subjects == 0
        with caplog.at_level(logging.WARNING, logger="affinity.router"):
            router.flush_log()
        assert any("not authentic" in m and "unverifiable" in m for m in caplog.messages), caplog.messages
        sealed.close()


def test_the_router_secret_comes_from_the_argument_the_environment_or_a_safe_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_router_secret_env: None
) -> None:
    assert resolve_router_secret() == (None, "none")
    monkeypatch.setenv(ROUTER_SECRET_ENV, SECRET.hex())
    assert resolve_router_secret() == (SECRET, f"${ROUTER_SECRET_ENV}")
    assert resolve_router_secret(bytes(16)) == (bytes(16), "argument")
    monkeypatch.delenv(ROUTER_SECRET_ENV)
    path = tmp_path / "router.secret"
    path.write_text(SECRET.hex() + "\n")
    path.chmod(0o600)
    monkeypatch.setenv(ROUTER_SECRET_FILE_ENV, str(path))
    assert resolve_router_secret() == (SECRET, f"file {path} (${ROUTER_SECRET_FILE_ENV})")
    path.chmod(0o640)
    with pytest.raises(ConfigError, match=r"router secret .*0640 lets group or others read it"):
        resolve_router_secret()
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(ConfigError, match=r"router secret .* symbolic link"):
        resolve_router_secret(link)
    with pytest.raises(ConfigError, match="the router secret has 4 bytes"):
        resolve_router_secret(b"tiny")
    monkeypatch.setenv(ROUTER_SECRET_ENV, "not hex")
    with pytest.raises(ConfigError, match=f"\\${ROUTER_SECRET_ENV}: the router secret must be hex text"):
        resolve_router_secret()
    with pytest.raises(ConfigError, match="secret=: expected bytes or a path"):
        resolve_router_secret("a string")  # type: ignore[arg-type]
