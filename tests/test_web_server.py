"""``affinity web`` as a process over real ones (driver, two consumers, a publisher, a router):
``/metrics`` parsed with the Prometheus client's own parser against ``affinity stat --json`` and
``affinity group status --json`` read around the scrape, and hostile or missing inputs shown in
place while the rest is served."""

from __future__ import annotations

import os
import stat as stat_module
import subprocess
from pathlib import Path
from typing import Any

import affinity
import pytest
from affinity.groups import create_group
from affinity.web.metrics import METRICS, SYSTEM_COUNTERS, SYSTEM_SCALE
from affinity.web.router_report import REPORT_STREAM_ID
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from web_support import CLI, GROUP, QUEUE_COUNT, System, group_of, owners, running_system, wait_for

pytestmark = pytest.mark.slow


def _settled(system: System, router: bool = True) -> dict[str, Any] | None:
    """A snapshot once every queue is owned, each by its primary (and, with ``router``, the router reports)."""
    snapshot = system.snapshot()
    primaries = {q: f"consumer-{q % 2}" for q in range(QUEUE_COUNT)}
    nodes = snapshot["routers"][0]["nodes"]
    reported = not router or (nodes and nodes[0]["age_s"] < 3)
    return snapshot if owners(snapshot) == primaries and reported else None


def _between(value: float, first: float, second: float) -> bool:
    return min(first, second) <= value <= max(first, second)


def _samples(families: dict[str, Any], name: str) -> list[Any]:
    return list(families[name].samples)


def test_metrics_have_every_documented_family_and_match_stat_and_group_status(tmp_path: Path) -> None:
    with running_system(tmp_path) as system:
        with (system.logs / "publisher.log").open("w") as log:
            system.extra.append(
                subprocess.Popen(
                    [*CLI, "group", "publish", GROUP, "--keys", "50", "--rate", "200", "--duration", "120"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=system.env,
                )
            )
        wait_for("every queue owned by its primary and the router reporting", lambda: _settled(system))
        wait_for(
            "the publisher's figures in the group status",
            lambda: sum(row[5] for row in group_of(system.snapshot())["queues"]["rows"]) > 0,  # type: ignore[index]
        )
        stat_before = system.cli_json("stat", "--json", "--dir", str(system.driver.dir))
        group_before = system.cli_json("group", "status", GROUP, "--json", "--settle", "1s")
        text = system.get("/metrics").decode()
        stat_after = system.cli_json("stat", "--json", "--dir", str(system.driver.dir))
        group_after = system.cli_json("group", "status", GROUP, "--json", "--settle", "1s")

    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name, spec in METRICS.items():
        assert name in families, f"{name} is documented but not exposed"
        assert families[name].type == spec.kind, f"{name} is a {families[name].type}, documented as {spec.kind}"
        assert families[name].unit == spec.unit, name

    directory = str(system.driver.dir)
    up = _samples(families, "affinity_driver_up")
    assert [(s.labels, s.value) for s in up] == [({"driver": directory}, 1.0)]
    before = {c["label"]: c for c in stat_before["counters"]}
    after = {c["label"]: c for c in stat_after["counters"]}
    for label, spec in SYSTEM_COUNTERS.items():
        suffix = "_total" if spec.kind == "counter" else ""
        (sample,) = [s for s in _samples(families, spec.name) if s.name == spec.name + suffix]
        scale = SYSTEM_SCALE.get(label, 1)
        assert _between(sample.value, before[label]["value"] * scale, after[label]["value"] * scale), (
            f"{spec.name} = {sample.value}, affinity stat said {before[label]['value']} then {after[label]['value']}"
        )
    positions = {
        (s.labels["counter"], s.labels["session"], s.labels["stream"], s.labels["channel"]): s.value
        for s in _samples(families, "affinity_driver_stream_position_bytes")
    }
    assert positions, "the consumers' and the publisher's streams have position counters"
    checked = 0
    for label, counter in before.items():
        name, _, rest = label.partition(": ")
        if name not in ("pub-pos", "pub-lmt", "snd-pos", "snd-lmt") or label not in after:
            continue
        session, stream, channel = rest.split(" ", 2)
        value = positions[(name, session, stream, channel)]
        assert _between(value, counter["value"], after[label]["value"]), label
        checked += 1
    assert checked > 0
    clients = [c for c in before if c.startswith("client-heartbeat: ")]
    assert len(_samples(families, "affinity_driver_client_heartbeat_age_seconds")) == len(clients)

    owner_samples = {s.labels["queue"]: s.labels for s in _samples(families, "affinity_group_queue_owner")}
    epochs = {s.labels["queue"]: s.value for s in _samples(families, "affinity_group_queue_epoch")}
    for queue_before, queue_after in zip(group_before["queues"], group_after["queues"], strict=True):
        queue = str(queue_before["queue"])
        assert queue_before["owner_name"] == queue_after["owner_name"], "ownership was stable around the scrape"
        assert owner_samples[queue]["member"] == queue_before["owner_name"]
        assert owner_samples[queue]["state"] == queue_before["state"]
        assert epochs[queue] == queue_before["epoch"]
        for metric, field in (
            ("affinity_group_queue_sent_sequence", "sent_sequence"),
            ("affinity_group_queue_acked_sequence", "acked_sequence"),
        ):
            (sample,) = [s for s in _samples(families, metric) if s.labels == {"group": GROUP, "queue": queue}]
            assert _between(sample.value, queue_before[field], queue_after[field]), (metric, queue)
    sent = sum(s.value for s in _samples(families, "affinity_group_queue_sent_sequence"))
    assert sent > 0, "the publisher's messages are counted"
    members = {s.labels["role"]: s.value for s in _samples(families, "affinity_group_members")}
    assert members["consumer"] == 2 and members["publisher"] == 1
    (router_up,) = _samples(families, "affinity_router_up")
    assert router_up.value == 1
    peers = {s.labels["peer"]: s.value for s in _samples(families, "affinity_router_peer_up")}
    assert peers == {"PriceSourceA": 0.0, "PriceSourceB": 0.0}


def test_hostile_and_missing_inputs_are_shown_in_place_and_the_rest_is_served(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt-driver"
    corrupt.mkdir()
    (corrupt / "cnc.dat").write_bytes(b"\xa5" * 8192)
    missing = tmp_path / "no-driver"
    with running_system(tmp_path, "--dir", str(corrupt), "--dir", str(missing), with_router=False) as system:
        groups = system.registry / "groups"
        create_group("locked", "locked", 8, 2, 1 << 20, system.registry)  # before the junk: create reads it
        (groups / "junk.json").write_text("{ this is not json")
        (groups / "wrong.json").write_text('{"version": 1, "name": "wrong", "HP": "w", "HC": 0, "QC": 1, "QS": 1}')
        os.mkfifo(groups / "fifo.json")
        secret = groups / "locked.secret"
        secret.write_text("not a hex secret\n")
        secret.chmod(0o600)
        assert stat_module.S_ISFIFO((groups / "fifo.json").stat().st_mode)
        with affinity.Client(dir=str(system.driver.dir)) as client:
            forged = client.add_publication(system.router_channel, REPORT_STREAM_ID)
            wait_for("the forged report's publication connecting", lambda: forged.is_connected)
            wait_for("a forged report taken", lambda: forged.offer(b"\xff not a report") > 0)
            snapshot = wait_for(
                "the problems on the page",
                lambda: (
                    (s := system.snapshot())["registry_problem_count"] >= 3
                    and s["routers"][0]["bad_reports"] >= 1
                    and (group_of(s, "locked") or {}).get("problem")
                    and s["routers"][0]["problem"]
                    and _settled(system, router=False)
                    and s
                ),
            )
        text = system.get("/metrics").decode()
        page = system.get("/").decode()

    problems = "\n".join(snapshot["registry_problems"])
    for name in ("junk.json", "wrong.json", "fifo.json"):
        assert str(groups / name) in problems, (name, problems)
    locked = group_of(snapshot, "locked")
    assert locked is not None and "cannot watch the group" in locked["problem"] and str(secret) in locked["problem"]
    drivers = {d["dir"]: d for d in snapshot["drivers"]}
    assert (
        "invalid cnc file" in drivers[str(corrupt)]["problem"]
        and str(corrupt / "cnc.dat") in drivers[str(corrupt)]["problem"]
    )
    assert str(missing / "cnc.dat") in drivers[str(missing)]["problem"]
    assert drivers[str(system.driver.dir)]["problem"] is None and drivers[str(system.driver.dir)]["pid"] > 0
    (router,) = snapshot["routers"]
    assert "no router report" in router["problem"] and "not UTF-8 JSON" in router["last_error"]
    assert {o["owner"]: o["queues"] for o in group_of(snapshot)["owners"]} == {  # type: ignore[index]
        "consumer-0": QUEUE_COUNT // 2,
        "consumer-1": QUEUE_COUNT // 2,
    }
    families = {family.name: family for family in text_string_to_metric_families(text)}
    up = {s.labels["driver"]: s.value for s in families["affinity_driver_up"].samples}
    assert up == {str(system.driver.dir): 1.0, str(corrupt): 0.0, str(missing): 0.0}
    assert "affinity" in page and "/static/app.js" in page


def test_a_routers_peers_and_moves_reach_the_page_and_the_metrics(tmp_path: Path) -> None:
    from affinity.subjects import Source, Subscriber

    fast = {"heartbeat_interval": 0.05, "liveness_timeout": 0.5}
    with running_system(tmp_path) as system:
        wait_for("the router's first report", lambda: _settled(system))
        with affinity.Client(dir=str(system.driver.dir)) as client:
            sources = {
                label: Source(client, system.router_listen, label, **fast) for label in ("PriceSourceA", "PriceSourceB")
            }
            requested: list[tuple[str, str]] = []
            for label, source in sources.items():
                source.on_request(lambda subject, label=label: requested.append((label, subject)))
            subscriber = Subscriber(client, system.router_listen, name="watcher", **fast)
            subscriber.subscribe("/PRICES/EURUSD", lambda subject, flags, payload: None)

            def node() -> dict[str, Any]:
                for source in sources.values():
                    source.poll()
                subscriber.poll()
                nodes = system.snapshot()["routers"][0]["nodes"]
                return nodes[0] if nodes else {}

            wait_for(
                "both peers up, the subject routed, the subscriber counted",
                lambda: (
                    (n := node())
                    and n["status"]["routed"] >= 1
                    and n["status"]["subscribers"] == 1
                    and all(up for _, up in n["peers"])
                ),
            )
            first = requested[0][0]
            sources.pop(first).close()
            moved = wait_for("the move on the page", lambda: (n := node()) and n["moves"] >= 1 and n)
        text = system.get("/metrics").decode()
    moves = [event for event in moved["events"] if event[1] == "move"]
    assert moves and "moved from peer" in moves[0][2] and first in moves[0][2], moved["events"]
    assert any(event[1] == "peer" and first in event[2] and event[2].endswith("is down") for event in moved["events"])
    families = {family.name: family for family in text_string_to_metric_families(text)}
    (subscribers,) = families["affinity_router_subscribers"].samples
    assert subscribers.value == 1
    (router_moves,) = families["affinity_router_moves"].samples
    assert router_moves.value >= 1
    peers = {s.labels["peer"]: s.value for s in families["affinity_router_peer_up"].samples}
    assert peers[first] == 0.0 and sum(peers.values()) == 1.0
