"""Node info as messages (``affinity.cluster_info``): the subject and its routing, the next hop
towards a node, every way a node info payload can be malformed or forged, and, with a real
``affinity router --node avalon`` process, forged node info arriving from golan's router counted
and never relayed while the genuine one reaches a subscriber at avalon; ``affinity router
status`` shows avalon's connection to golan and the count."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import affinity
import pytest
from affinity.cluster_info import (
    FORWARD_COUNTERS,
    NODE_INFO_LABEL,
    NODE_INFO_MAX_BYTES,
    NODE_INFO_RELAY_LABEL,
    NODE_INFO_VERSION,
    ForgedNodeInfo,
    info_hop,
    node_info_node,
    node_info_services,
    node_info_subject,
    parse_node_info,
)
from affinity.cluster_node import cluster_router_config
from affinity.config.faucet import analyse_router_text
from affinity.subjects import Flags, Source, SubjectRouter, Subscriber
from affinity.testing import free_udp_port
from test_cluster_config import PICTURE
from test_cluster_nodes import cluster_conf, start_node
from test_subjects_processes import LIVENESS, TIMEOUT, Inbox, Process

#: ``affinity router status``.
STATUS = [sys.executable, "-m", "affinity.cli", "router", "status"]
CLUSTER = analyse_router_text(PICTURE, "cluster.conf").config.cluster
assert CLUSTER is not None


def genuine(node: str = "golan", **changes: Any) -> dict[str, Any]:
    spec = CLUSTER.node(node) if CLUSTER is not None else None
    info: dict[str, Any] = {
        "version": NODE_INFO_VERSION,
        "node": node,
        "address": spec.address if spec is not None else "aeron:udp?endpoint=10.6.6.6:40500",
        "state": "running",
        "seq": 1,
        "time": 1.5,
        "domains": [{"name": "STOCK_EXCHANGE", "role": "master", "stratum": 0, "parent": None}],
        "connections": {"heron": "logged-in"},
        "load": {"subjects": 1, "subscribers": 2, "not_allowed": 0},
        "forged_node_info": 0,
    }
    info.update(changes)
    return info


def test_the_subject_names_its_node_and_the_core_defines_the_prefix() -> None:
    assert node_info_subject("heron") == "__sys__cluster.node.info[heron]"
    assert node_info_node("__sys__cluster.node.info[heron]") == "heron"
    assert node_info_node("__sys__cluster.node.info[]") is None
    assert node_info_node("/STOCK/IBM") is None


def test_a_node_serves_its_own_info_and_relays_every_other_nodes() -> None:
    assert CLUSTER is not None
    own, relay = node_info_services(CLUSTER, "avalon")
    assert own.source_groups[0].priority_groups[0].names == (NODE_INFO_LABEL,)
    assert relay.source_groups[0].priority_groups[0].names == (NODE_INFO_RELAY_LABEL,)
    # The patterns are POSIX EREs; these subjects need nothing Python's re reads differently.
    assert re.search(own.include_patterns[0], "__sys__cluster.node.info[avalon]")
    assert not re.search(own.include_patterns[0], "__sys__cluster.node.info[avalonX]")
    assert not re.search(own.include_patterns[0], "__sys__clusterXnode.info[avalon]")
    assert re.search(relay.include_patterns[0], "__sys__cluster.node.info[golan]")


def test_the_next_hop_towards_a_node_follows_the_domains_parents() -> None:
    assert CLUSTER is not None
    assert info_hop(CLUSTER, "bilbo", "golan") == "avalon", "stratum 2: through the middle node"
    assert info_hop(CLUSTER, "bilbo", "heron") == "avalon"
    assert info_hop(CLUSTER, "avalon", "golan") == "golan"
    assert info_hop(CLUSTER, "golan", "bilbo") == "bilbo", "not upstream: asked directly"


def test_genuine_node_info_parses() -> None:
    assert CLUSTER is not None
    subject = node_info_subject("golan")
    info = parse_node_info(subject, json.dumps(genuine()).encode(), CLUSTER)
    assert (info.node, info.stratum("STOCK_EXCHANGE"), info.connections) == ("golan", 0, {"heron": "logged-in"})


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[" * 5000, "not JSON (nested too deeply"),  # within the byte cap, past the decoder's depth
        (json.dumps(genuine(time=10**400)).encode(), "out of range"),  # too big for a float
        (json.dumps(genuine(time=float("inf"))).encode(), "out of range"),
        (b"[1]", "not a JSON object"),
        (json.dumps(genuine(version=2)).encode(), "version 2, expected 3"),
        (json.dumps(genuine(version=True)).encode(), "version True"),
        (json.dumps(genuine(node="heron")).encode(), "says it is from node 'heron'"),
        (json.dumps(genuine(address="aeron:udp?endpoint=10.6.6.6:1")).encode(), "is not golan's configured"),
        (json.dumps(genuine(seq="7")).encode(), "field 'seq'"),
        (json.dumps(genuine(state="asleep")).encode(), "state 'asleep' is not one of running, stopping"),
        (json.dumps(genuine(connections={"heron": "friendly"})).encode(), "not one of"),
        (json.dumps(genuine(domains=[{"name": "X", "role": "boss"}])).encode(), "bad role"),
        (json.dumps(genuine(load={"subjects": -1})).encode(), "'load' is not an object of counts"),
        (json.dumps(genuine(pad="x" * NODE_INFO_MAX_BYTES)).encode(), f"more than {NODE_INFO_MAX_BYTES}"),
        (json.dumps(genuine(queues={"heron": 5})).encode(), "'queues.heron' is not an object of counts"),
        (
            json.dumps(genuine(queues={"heron": {"bytes": 5}})).encode(),
            "queues.heron must hold exactly messages, bytes",
        ),
        (json.dumps(genuine(ptp_queues=[])).encode(), "'ptp_queues' is not an object of queue depths"),
        (json.dumps(genuine(ptp_queued={"clients": 1})).encode(), "ptp_queued must hold exactly clients"),
        (json.dumps(genuine(forwarded=[])).encode(), "'forwarded' is not an object of counters"),
        (
            json.dumps(genuine(forwarded={"heron": {"sent": 1}})).encode(),
            "forwarded.heron must hold exactly sent, queued, flushed, refused, dropped",
        ),
        (
            json.dumps(genuine(forwarded={"heron": dict.fromkeys(FORWARD_COUNTERS, -1)})).encode(),
            "'forwarded.heron' is not an object of counts",
        ),
        (json.dumps(genuine(stale_masters="heron")).encode(), "'stale_masters' is not a list of node ids"),
    ],
)
def test_forged_or_malformed_node_info_is_refused_saying_what_is_wrong(payload: bytes, reason: str) -> None:
    assert CLUSTER is not None
    with pytest.raises(ForgedNodeInfo, match=re.escape(reason)):
        parse_node_info(node_info_subject("golan"), payload, CLUSTER)


def test_queue_depths_parse_per_master_and_per_client() -> None:
    assert CLUSTER is not None
    depths = {
        "queues": {"heron": {"messages": 3, "bytes": 120}},
        "ptp_queues": {"/node/golan/client/joe": {"messages": 2, "bytes": 96}},
        "ptp_queued": {"clients": 1, "messages": 2, "bytes": 96},
    }
    info = parse_node_info(node_info_subject("golan"), json.dumps(genuine(**depths)).encode(), CLUSTER)
    assert info.queues == {"heron": (3, 120)}
    assert info.ptp_queues == {"/node/golan/client/joe": (2, 96)}
    assert info.ptp_queued == {"clients": 1, "messages": 2, "bytes": 96}


def test_a_node_id_the_configuration_does_not_know_is_forged() -> None:
    assert CLUSTER is not None
    with pytest.raises(ForgedNodeInfo, match="'frodo' is not a configured node"):
        parse_node_info(node_info_subject("frodo"), json.dumps(genuine(node="frodo")).encode(), CLUSTER)


def test_forged_node_info_from_the_wire_is_counted_and_never_relayed(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    golan_port, avalon_port = free_udp_port(), free_udp_port()
    config = tmp_path / "cluster.conf"
    config.write_text(cluster_conf(golan_port, avalon_port))
    golan_listen = f"aeron:udp?endpoint=127.0.0.1:{golan_port}"
    avalon_listen = f"aeron:udp?endpoint=127.0.0.1:{avalon_port}"
    analysis = analyse_router_text(config.read_text(), str(config))
    cluster = analysis.config.cluster
    assert cluster is not None and not analysis.errors
    subject = node_info_subject("golan")
    real = genuine(address=golan_listen, domains=[])
    forgeries = [
        b"{not json",
        json.dumps({**real, "node": "avalon"}).encode(),
        json.dumps({**real, "version": 99}).encode(),
        json.dumps({**real, "address": "aeron:udp?endpoint=127.0.0.1:1"}).encode(),
    ]
    # golan's router in this process; its node info is served by a forger under golan's own label.
    with SubjectRouter(
        client,
        cluster_router_config(analysis.config, "golan"),
        listen=golan_listen,
        liveness_timeout=LIVENESS,
        cluster_nodes=["avalon"],
    ):
        avalon = start_node(config, "avalon", avalon_listen)
        processes.append(avalon)
        requests: list[str] = []
        forger = Source(client, golan_listen, NODE_INFO_LABEL, liveness_timeout=LIVENESS)
        forger.on_request(requests.append)
        eve = Subscriber(client, avalon_listen, name="eve", liveness_timeout=LIVENESS)
        inbox = Inbox(eve)
        eve.subscribe(subject, inbox)
        deadline = time.monotonic() + TIMEOUT
        while not requests and time.monotonic() < deadline:
            forger.poll(64)
            eve.poll(64)
            time.sleep(0.005)
        assert requests == [subject], f"avalon asked golan for golan's info once; avalon: {avalon.snapshot()[-15:]}"
        for payload in [*forgeries, json.dumps(real).encode()]:
            forger.publish(subject, payload, image=True)
        forger.poll(64)
        inbox.wait_for(lambda items: bool(items), "golan's info at avalon")
        inbox.drain_for(0.3)
        assert [(f & Flags.IMAGE, json.loads(p)) for _, f, p in inbox.items] == [(Flags.IMAGE, real)]
        # avalon counted the forgeries: its own info says so.
        own = node_info_subject("avalon")
        mine = Inbox(eve)
        eve.subscribe(own, mine)

        def forged() -> int:
            return max((json.loads(p)["forged_node_info"] for s, _, p in mine.items if s == own), default=-1)

        mine.wait_for(lambda items: forged() == len(forgeries), "avalon's count of forged node info")
        shown = subprocess.run(
            [*STATUS, "--config", str(config), "--node", "avalon"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert "connection golan: logged-in" in shown.stdout, shown.stdout
        assert f"forged node info ignored: {len(forgeries)}" in shown.stdout, shown.stdout
        assert "domain STOCK_EXCHANGE: slave of golan, stratum 1" in shown.stdout, shown.stdout
        eve.close()
        forger.close()


def test_status_of_a_node_that_does_not_answer_fails_within_its_timeout(tmp_path: Path) -> None:
    config = tmp_path / "cluster.conf"
    config.write_text(cluster_conf(free_udp_port(), free_udp_port()))
    started = time.monotonic()
    shown = subprocess.run(
        [*STATUS, "--config", str(config), "--node", "golan", "--timeout", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 2, shown
    assert "no answer from golan within 1s" in shown.stderr
    assert time.monotonic() - started < 30


def golan_and_avalon(
    processes: list[Process], tmp_path: Path, *spare: str
) -> tuple[Path, dict[str, str], tuple[Process, Process]]:
    """golan (master) and avalon (slave) as router processes on loopback, from
    ``tmp_path/cluster.conf``: the file, every node's listen channel (``spare`` nodes get one
    too, in that order after golan's and avalon's) and the two processes."""
    nodes = ("golan", "avalon", *spare)
    listens = {node: f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}" for node in nodes}
    config = tmp_path / "cluster.conf"
    config.write_text(cluster_conf(*(int(listens[node].rsplit(":", 1)[1]) for node in ("golan", "avalon"))))
    started = (start_node(config, "golan", listens["golan"]), start_node(config, "avalon", listens["avalon"]))
    processes += started
    return config, listens, started


def test_a_node_stopped_cleanly_says_so_in_its_last_info_and_other_nodes_relay_it(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    _, listens, (_, avalon) = golan_and_avalon(processes, tmp_path)
    # A subscriber at golan follows avalon's info: golan relays it from avalon.
    watcher = Subscriber(client, listens["golan"], name="watcher", liveness_timeout=LIVENESS)
    infos: list[dict[str, Any]] = []
    subject = node_info_subject("avalon")
    watcher.subscribe(
        subject, lambda s, f, p: infos.append(json.loads(p)) if s == subject and f & Flags.IMAGE else None
    )
    deadline = time.monotonic() + TIMEOUT
    while not infos and time.monotonic() < deadline:
        watcher.poll(64)
        time.sleep(0.01)
    assert infos and infos[-1]["state"] == "running", infos
    avalon.stop()  # SIGTERM: a clean stop
    deadline = time.monotonic() + TIMEOUT
    while infos[-1]["state"] != "stopping" and time.monotonic() < deadline:
        watcher.poll(64)
        time.sleep(0.01)
    assert infos[-1]["state"] == "stopping", infos[-1]
    assert all(info["state"] == "running" for info in infos[:-1]), "stopping is the last word"
    watcher.close()


def test_a_node_added_by_a_reload_is_asked_for_its_info_and_its_info_is_not_forged(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    config, listens, (golan, avalon) = golan_and_avalon(processes, tmp_path, "bilbo")
    watcher = Subscriber(client, listens["golan"], name="watcher", liveness_timeout=LIVENESS)
    subject = node_info_subject("bilbo")
    got: list[tuple[Flags, bytes]] = []
    watcher.subscribe(subject, lambda s, f, p: got.append((f, p)) if s == subject else None)

    def wait(what: str, until: Callable[[], bool]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not until():
            assert time.monotonic() < deadline, f"{what}: {got}"
            watcher.poll(64)
            time.sleep(0.01)

    wait("NODATA notfound: bilbo is no node yet", lambda: any(f & Flags.NODATA_NOTFOUND for f, _ in got))
    watcher.unsubscribe(subject)

    # bilbo joins: a slave of avalon, in the file every node reads; golan and avalon reload it.
    ports = [int(listens[node].rsplit(":", 1)[1]) for node in ("golan", "avalon", "bilbo")]
    config.write_text(cluster_conf(*ports))
    bilbo = start_node(config, "bilbo", listens["bilbo"])
    processes.append(bilbo)
    for node in (golan, avalon):
        os.kill(node.popen.pid, signal.SIGHUP)
        node.wait_for(lambda lines: any("cluster configuration reloaded" in ln for ln in lines), "the reload")
    got.clear()
    watcher.subscribe(subject, lambda s, f, p: got.append((f, p)) if s == subject else None)
    wait("bilbo's info through golan", lambda: any(f & Flags.IMAGE for f, _ in got))
    info = json.loads(next(p for f, p in got if f & Flags.IMAGE))
    assert info["node"] == "bilbo" and info["address"] == listens["bilbo"], info
    assert [d["parent"] for d in info["domains"]] == ["avalon"], info["domains"]
    assert not any("ignored:" in line for line in golan.snapshot()), "bilbo's info is not forged at golan"
    watcher.close()
