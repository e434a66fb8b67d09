"""``affinity web`` without processes: move causes, rates, label parsing, hostile router reports
and page queries, the bounds of one page update and of one scrape at 1,000 streams and 4,096
queues, the docs' metric table, the vendored chart library."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import affinity
import pytest
from affinity.driver import CounterValue, DriverStat
from affinity.groups import create_group
from affinity.web import metrics as metrics_module
from affinity.web.drivers import parse_stream_counter, split
from affinity.web.groups import FAILOVER, HANDOFF, MoveTracker
from affinity.web.monitor import Monitor, WebOptions
from affinity.web.rates import CounterRates
from affinity.web.router_report import (
    MAX_REPORT_BYTES,
    MAX_REPORT_EVENTS,
    RouterEventLog,
    decode_report,
    encode_report,
)
from affinity.web.settings import HISTORY_STEP, QUEUE_PAGE_SIZE, STREAM_PAGE_SIZE
from affinity.web.view import Pages, page_data
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "python" / "affinity" / "web" / "static"


def member(member_id: int, name: str, last_heard_ms: int, index: int = 0, count: int = 2) -> SimpleNamespace:
    return SimpleNamespace(
        member_id=member_id,
        name=name,
        role="consumer",
        index=index,
        count=count,
        endpoint="127.0.0.1:1",
        last_heard_ms=last_heard_ms,
    )


def queue(number: int, owner_id: int, owner_name: str, epoch: int) -> SimpleNamespace:
    return SimpleNamespace(
        queue=number,
        owner_id=owner_id,
        owner_name=owner_name,
        epoch=epoch,
        state="active",
        acked_sequence=0,
        sent_sequence=0,
        retained_bytes=0,
        lag=0,
    )


def status(members: list[SimpleNamespace], queues: list[SimpleNamespace]) -> Any:
    return SimpleNamespace(members=members, queues=queues, authenticated=False, auth_refused=0)


def test_a_queue_taken_from_a_silent_owner_is_a_failover_and_from_a_live_one_a_handoff() -> None:
    tracker = MoveTracker(liveness_timeout_ms=2000)
    a, b = member(1, "a", 10, index=0), member(2, "b", 10, index=1)
    assert tracker.update(status([a, b], [queue(0, 1, "a", 1), queue(1, 1, "a", 1)]), 1.0) == []
    silent_a = member(1, "a", 2500)
    moves = tracker.update(status([silent_a, b], [queue(0, 2, "b", 2), queue(1, 1, "a", 1)]), 2.0)
    assert [(m.queue, m.source, m.target, m.cause) for m in moves] == [(0, "a", "b", FAILOVER)]
    assert "silent for 2500 ms" in moves[0].why
    # Queue 1's primary is b (1 % 2 == 1): a live a giving it to b is a handoff to its primary.
    moves = tracker.update(status([a, b], [queue(0, 2, "b", 2), queue(1, 2, "b", 2)]), 3.0)
    assert [(m.queue, m.cause) for m in moves] == [(1, HANDOFF)]
    assert moves[0].why == "a handed it over to its primary b"
    gone = tracker.update(status([a], [queue(0, 1, "a", 3), queue(1, 2, "b", 2)]), 4.0)
    assert gone[0].cause == FAILOVER and "no longer a member" in gone[0].why
    assert tracker.totals == {FAILOVER: 2, HANDOFF: 1}
    assert len(tracker.moves) == 3


def test_rates_are_per_second_and_never_negative_when_a_sum_goes_down() -> None:
    rates = CounterRates(("sent",))
    rates.add(0.0, (0,))
    rates.add(HISTORY_STEP / 2, (10,))  # too soon: no point
    rates.add(2 * HISTORY_STEP, (100,))
    rates.add(4 * HISTORY_STEP, (40,))  # a publisher left: its figures left the sum
    assert rates.series()["sent"] == [round(100 / (2 * HISTORY_STEP), 3), 0.0]


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        (
            "pub-pos: 7 1001 aeron:udp?endpoint=127.0.0.1:40123",
            ("pub-pos", 7, 1001, "aeron:udp?endpoint=127.0.0.1:40123"),
        ),
        ("snd-lmt: -5 3 aeron:ipc", ("snd-lmt", -5, 3, "aeron:ipc")),
        ("rcv-hwm: 42 9 1001 127.0.0.1:5555", ("rcv-hwm", 9, 1001, "127.0.0.1:5555")),
        ("sub-pos: 12 9 1001 ipc @0", ("sub-pos", 9, 1001, "ipc")),
        ("sub-pos: 12 9 1001 127.0.0.1:5555 @4096", ("sub-pos", 9, 1001, "127.0.0.1:5555")),
    ],
)
def test_per_stream_counter_labels_are_parsed(label: str, expected: tuple[str, int, int, str]) -> None:
    parsed = parse_stream_counter(CounterValue(5, 1, label, 77, 0, 0))
    assert parsed is not None
    assert (parsed.name, parsed.session, parsed.stream, parsed.channel) == expected


def test_an_unknown_label_is_kept_as_a_stream_counter_without_session() -> None:
    stat = DriverStat("/d", 1, 0, 0, 0, (CounterValue(3, 99, "something else", 5, 0, 0),), ())
    view = split(stat)
    assert [(s.name, s.session) for s in view.streams] == [("something else", None)]


def test_a_corrupt_record_and_a_dead_driver_are_named_in_the_view() -> None:
    corrupt = CounterValue(4, 1, "", 0, 0, 0, problem="label length 9999 at offset 2176 exceeds 380")
    view = split(DriverStat("/d", 1, 0, 0, 0, (corrupt,), ()))
    assert view.problem is not None and "label length 9999" in view.problem
    dead = split(DriverStat("/d", 1, 0, 0, 0, (), (), dead="driver pid 1 no longer exists"))
    assert dead.problem == "the driver is dead: driver pid 1 no longer exists" and not dead.up


class FakeRouterStatus:
    """What ``encode_report`` reads of a ``RouterStatus``."""

    def __init__(self, peers: int) -> None:
        self.relayed, self.subjects, self.authenticated = 5, 2, False
        self.members = tuple((f"peer-{i}", i % 2 == 0) for i in range(peers))


def _report(log: RouterEventLog, peers: int = 2) -> bytes:
    from dataclasses import make_dataclass

    status_type = make_dataclass(
        "S", [("relayed", int), ("subjects", int), ("authenticated", bool), ("members", tuple)]
    )
    fake = FakeRouterStatus(peers)
    return encode_report("router-a", status_type(fake.relayed, fake.subjects, fake.authenticated, fake.members), log)


def test_a_router_report_round_trips_with_moves_and_faucet_assignments() -> None:
    import logging

    log = RouterEventLog()
    logger = logging.getLogger("affinity.router")
    logger.addHandler(log)
    previous = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.info("Object <%s> moved from %s to %s: %s", "/PRICES/X", "peer 0 (A)", "peer 1 (B)", "member-down")
        logger.info("Faucet %s %s: %s", "assign", "/FAUCET/T", '{"publisher":"p1"}')
        logger.info("Peer 0 (A) is down")
    finally:
        logger.removeHandler(log)
        logger.setLevel(previous)
    report = decode_report(_report(log))
    assert report.node == "router-a" and report.status["relayed"] == 5 and report.moves == 1
    assert [kind for _, kind, _ in report.events] == ["move", "faucet", "peer"]
    assert report.faucet == (("/FAUCET/T", "assign", '{"publisher":"p1"}'),)
    assert report.peers == (("peer-0", True), ("peer-1", False))


def test_a_router_report_is_cut_to_its_byte_bound() -> None:
    log = RouterEventLog()
    for i in range(MAX_REPORT_EVENTS * 2):
        log.events.append((float(i), "other", "x" * 300))
    data = _report(log, peers=512)
    assert len(data) <= MAX_REPORT_BYTES
    decode_report(data)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"version": 9}', "version 9"),
        (b'{"version": 1, "node": "", "time": 1, "status": {}}', "'node'"),
        (b'{"version": 1, "node": "n", "time": "x", "status": {}}', "'time'"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {"relayed": "many"}}', "'relayed'"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {}, "peers": [["a"]]}', "peer"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {}, "moves": -1}', "'moves'"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {}, "events": [[1, 2, 3]]}', "event"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {}, "faucet": [["t", 1, "d"]]}', "faucet"),
        (b" " * (MAX_REPORT_BYTES + 1), "exceeds"),
        (b"[" * 60_000, "not UTF-8 JSON"),  # nested past the recursion limit
        # Numbers the page's JSON or /metrics cannot write (Python's json reads NaN and Infinity):
        (b'{"version": 1, "node": "n", "time": ' + b"9" * 400 + b', "status": {}}', "'time'"),
        (b'{"version": 1, "node": "n", "time": 1e999, "status": {}}', "'time'"),
        (b'{"version": 1, "node": "n", "time": NaN, "status": {}}', "'time'"),
        (b'{"version": 1, "node": "n", "time": -1, "status": {}}', "'time'"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {}, "events": [[NaN, "k", "t"]]}', "event's time"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {}, "events": [[Infinity, "k", "t"]]}', "event's time"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {"relayed": ' + b"9" * 400 + b"}}", "'relayed'"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {"relayed": -1}}', "'relayed'"),
        (b'{"version": 1, "node": "n", "time": 1, "status": {}, "moves": ' + b"9" * 400 + b"}", "'moves'"),
    ],
)
def test_a_hostile_router_report_is_refused_with_what_is_wrong(data: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        decode_report(data)


def _hostile_reports() -> list[bytes]:
    head = b'{"version": 1, "node": "router-a", '
    return [
        head + b'"time": ' + b"9" * 400 + b', "status": {}}',
        head + b'"time": 1e999, "status": {}}',
        head + b'"time": 5, "status": {}, "events": [[NaN, "other", "x"]]}',
        head + b'"time": 6, "status": {"relayed": ' + b"9" * 400 + b"}}",
    ]


class FakeReports:
    """A report subscription: what ``poll_batch`` gives, once."""

    def __init__(self, messages: list[bytes] | BaseException) -> None:
        self.messages = messages

    def poll_batch(self, limit: int) -> list[bytes]:
        if isinstance(self.messages, BaseException):
            raise self.messages
        batch, self.messages = self.messages[:limit], self.messages[limit:]
        return batch

    def close(self) -> None:
        pass


def test_hostile_router_reports_are_counted_and_the_page_and_metrics_still_render(tmp_path: Path) -> None:
    from affinity.web.app import _dumps
    from starlette.responses import JSONResponse

    log = RouterEventLog()
    log.events.append((1.0, "other", "started"))
    good = _report(log)
    monitor = Monitor(WebOptions((), str(tmp_path), ("aeron:ipc",)))
    try:
        watch = monitor._routers[0]
        watch.subscription = FakeReports([good, *_hostile_reports()])
        snapshot = monitor.sample()
        (router,) = snapshot.routers
        assert router.bad_reports == 4 and router.last_error is not None and "'relayed'" in router.last_error
        assert [node.report.node for node in router.nodes] == ["router-a"]
        data = page_data(snapshot, Pages())
        assert json.loads(_dumps(data))["routers"][0]["nodes"][0]["status"]["relayed"] == 5
        JSONResponse(data)  # /api/snapshot: Starlette writes JSON without NaN or Infinity too
        text = generate_latest(metrics_module.metrics_registry(monitor)).decode()
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert families["affinity_router_relayed"].samples[0].value == 5
    finally:
        monitor.close()


def test_a_router_watch_that_fails_unexpectedly_is_shown_and_sampling_goes_on(tmp_path: Path) -> None:
    monitor = Monitor(WebOptions((), str(tmp_path), ("aeron:ipc",)))
    try:
        watch = monitor._routers[0]
        watch.subscription = FakeReports(RuntimeError("a bug"))
        (router,) = monitor.sample().routers
        assert router.bad_reports == 1 and router.last_error == "a report could not be taken: RuntimeError: a bug"
        watch.subscription = FakeReports([])
        assert monitor.sample().sequence == 2
    finally:
        monitor.close()


@pytest.mark.parametrize(
    "query", [None, "", "not json", "[1]", '{"queues": {"g": -1}}', '{"queues": {"g": true}}', "{" * 5000]
)
def test_a_malformed_page_query_falls_back_to_first_pages(query: str | None) -> None:
    assert Pages.parse(query) == Pages()


def test_a_page_index_is_clamped() -> None:
    assert Pages.parse('{"queues": {"g": 99999999999}}').queues["g"] == 1 << 20


def big_driver(streams: int) -> DriverStat:
    counters = [CounterValue(i, 0, f"system {i}", i, 0, 0) for i in range(33)]
    counters += [
        CounterValue(33 + i, 12, f"pub-pos: {i} {1000 + i} aeron:udp?endpoint=127.0.0.1:{20000 + i}", i * 64, i, 1)
        for i in range(streams)
    ]
    return DriverStat("/big", 1, 0, 0, 0, tuple(counters), ())


@pytest.fixture(scope="module")
def big_group(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A real group of 4,096 queues (no consumer: every queue unowned) and the server's monitor."""
    registry = tmp_path_factory.mktemp("registry")
    create_group("wide", "wide", 4096, 4096, 1 << 20, registry)
    with affinity.Client() as client:
        monitor = Monitor(WebOptions(("/big",), str(registry)), client)
        try:
            yield monitor
        finally:
            monitor.close()


def test_one_page_update_stays_bounded_with_1000_streams_and_4096_queues(
    big_group: Monitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from affinity.web import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "read_driver", lambda directory: split(big_driver(1000)))
    snapshot = big_group.sample()
    assert len(snapshot.groups[0].status.queues) == 4096  # type: ignore[union-attr]
    data = page_data(snapshot, Pages())
    group, driver = data["groups"][0], data["drivers"][0]
    assert len(group["queues"]["rows"]) == QUEUE_PAGE_SIZE and group["queues"]["total"] == 4096
    assert group["queues"]["pages"] == 4096 // QUEUE_PAGE_SIZE
    assert len(driver["streams"]["rows"]) == STREAM_PAGE_SIZE and driver["streams"]["total"] == 1000
    size = len(json.dumps(data))
    assert size < 128 * 1024, f"one update is {size} bytes"
    last = page_data(snapshot, Pages({"wide": 10**6}, {"/big": 10**6}))
    assert last["groups"][0]["queues"]["rows"][-1][0] == 4095
    assert last["drivers"][0]["streams"]["rows"][-1][1] == 999


def test_one_scrape_has_a_sample_per_queue_and_stream_and_no_more(
    big_group: Monitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_module, "read_driver", lambda directory: split(big_driver(1000)))
    big_group.sample()
    text = generate_latest(metrics_module.metrics_registry(big_group)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert len(families["affinity_group_queue_epoch"].samples) == 4096
    assert len(families["affinity_driver_stream_position_bytes"].samples) == 1000
    total = sum(len(f.samples) for f in families.values())
    # 5 per queue (unowned: no owner sample), one per stream, and a bounded rest.
    assert 4096 * 5 + 1000 <= total <= 4096 * 5 + 1000 + 200, total
    assert len(text) < 4096 * 5 * 120 + 1000 * 200 + 50_000


def test_every_metric_is_documented_with_its_type_and_unit() -> None:
    text = (ROOT / "docs" / "observability.md").read_text()
    rows = re.findall(r"^\| `(affinity_[a-z_]+)` \| (gauge|counter) \| ([a-z-]+) \| ([a-z, ]+) \|", text, re.M)
    documented = {name: (kind, unit, tuple(labels.split(", "))) for name, kind, unit, labels in rows}
    expected = {name: (spec.kind, spec.unit or "-", spec.labels) for name, spec in metrics_module.METRICS.items()}
    assert documented == expected


def test_the_vendored_chart_library_is_the_one_its_notice_names() -> None:
    notice = (STATIC / "NOTICE.md").read_text()
    library = (STATIC / "chart.min.js").read_bytes()
    digest = re.search(r"SHA-256: `([0-9a-f]{64})`", notice)
    assert digest is not None and hashlib.sha256(library).hexdigest() == digest.group(1)
    version = re.search(rb"Chart\.js v([\d.]+)", library[:500])
    assert version is not None and f"Chart.js {version.group(1).decode()}" in notice
    # The page loads only files of the package (it works with no internet access).
    page = (STATIC / "index.html").read_text()
    assert re.findall(r'(?:src|href)="(?!/static/|/metrics|data:)([^"]+)"', page) == []


def test_affinity_web_refuses_an_address_it_cannot_listen_on() -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "affinity.cli", "web", "--listen", f"127.0.0.1:{port}", "--dir", "/nonexistent"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2, result
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "affinity.cli", "web", "--listen", "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "is not HOST:PORT" in bad.stderr, bad


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False), ("10.1.2.3", False)],
)
def test_only_loopback_addresses_count_as_loopback(host: str, loopback: bool) -> None:
    from affinity.web.app import is_loopback

    assert is_loopback(host) is loopback


def test_scan_groups_names_each_junk_file_and_keeps_the_good_definitions(tmp_path: Path) -> None:
    from affinity.groups.registry import scan_groups

    create_group("good", "good", 8, 2, 1 << 20, tmp_path)
    (tmp_path / "groups" / "bad.json").write_text("{ nope")
    (tmp_path / "groups" / "worse.json").write_bytes(b"\xff\xfe")
    definitions, problems = scan_groups(tmp_path)
    assert [d.name for d in definitions] == ["good"]
    assert [
        str(tmp_path / "groups" / name) in str(p) for p, name in zip(problems, ("bad.json", "worse.json"), strict=True)
    ] == [True, True]


def test_a_drivers_errors_clients_and_duty_cycle_reach_the_page_data() -> None:
    from affinity.driver import DriverErrorRecord
    from affinity.web.drivers import CLIENT_HEARTBEAT_TYPE_ID, DUTY_CYCLE_LABEL
    from affinity.web.monitor import DriverSnapshot, Snapshot
    from affinity.web.settings import ERRORS_SHOWN

    now_ms = 1_000_000
    counters = (
        CounterValue(6, 0, DUTY_CYCLE_LABEL, 43_000, 0, 0),
        CounterValue(40, CLIENT_HEARTBEAT_TYPE_ID, "client-heartbeat: 17", now_ms - 250, 17, 17),
    )
    errors = tuple(DriverErrorRecord(i + 1, 10, 20, f"error {i}") for i in range(ERRORS_SHOWN + 5))
    errors += (DriverErrorRecord(0, 0, 0, "", problem="record at offset 64: length 9 below the header"),)
    view = split(DriverStat("/d", 42, 1, 0, 0, counters, errors), wall_ms=now_ms)
    snapshot = Snapshot(1.0, 1, "/registry", (), (DriverSnapshot(view, {"t": []}, {}),), (), ())
    (driver,) = page_data(snapshot, Pages())["drivers"]
    assert driver["duty_cycle_max_ns"] == 43_000
    assert driver["clients"] == {"total": 1, "rows": [[17, 250]]}
    assert driver["errors"]["total"] == ERRORS_SHOWN + 6 and len(driver["errors"]["rows"]) == ERRORS_SHOWN
    assert driver["errors"]["rows"][0] == [1, 10, 20, "error 0"]
    assert "1 corrupt record(s)" in driver["problem"] and "offset 64" in driver["problem"]
