"""Two router processes as cluster nodes (``docs/cluster.md``): golan master of STOCK_EXCHANGE,
avalon its slave. A subscriber at avalon makes avalon subscribe once at golan; a second one is
answered from avalon's cache; a source at golan reaches both, every update once and in order;
the last one leaving unsubscribes avalon at golan (after ``cache-expiry``).
A node id golan does not configure is refused ``not-allowed`` and counted."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import affinity
import cluster_conf as conf
from affinity.cluster_failover import WATCH_LABEL_PREFIX
from affinity.cluster_node import NODE_NAME_PREFIX, cluster_router_config, slave_label
from affinity.cluster_ptp import PTP_LINK_PREFIX
from affinity.config.faucet import analyse_router_text
from affinity.subjects import Flags, Source, SubjectRouter, Subscriber
from affinity.testing import free_udp_port
from test_subjects_processes import LIVENESS, TIMEOUT, Inbox, Process

SUBJECT = "/STOCK/IBM"
UPDATES = 200
FEED = "stock-feed"


def cluster_conf(golan: int, avalon: int, bilbo: int | None = None) -> str:
    """golan master of STOCK_EXCHANGE, avalon its slave, and with ``bilbo`` a slave of avalon."""
    third = "" if bilbo is None else conf.node("bilbo", conf.loopback(bilbo), "upstream STOCK_EXCHANGE avalon")
    return (
        third
        + conf.data_service("stock", "^/STOCK/", FEED)
        + conf.node("golan", conf.loopback(golan), "master-of STOCK_EXCHANGE")
        + conf.node("avalon", conf.loopback(avalon))
        + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
    )


def start_node(config: Path, node: str, listen: str) -> Process:
    process = Process(
        [
            sys.executable,
            "-m",
            "affinity.cli",
            "router",
            "--config",
            str(config),
            "--node",
            node,
            "--listen",
            listen,
            "--liveness-timeout",
            str(LIVENESS),
        ]
    )
    process.wait_for(lambda lines: any("listening on" in line for line in lines), f"{node} start")
    return process


def updates(inbox: Inbox) -> list[str]:
    return [p for s, f, p in inbox.items if s == SUBJECT and f & Flags.UPDATE]


def test_a_slave_subscribes_once_at_the_master_caches_the_image_and_relays_every_update_in_order(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    golan_port, avalon_port = free_udp_port(), free_udp_port()
    config = tmp_path / "cluster.conf"
    # A short cache-expiry: avalon unsubscribes at golan soon after its last subscriber left.
    config.write_text("add-cluster\n    cache-expiry 500ms\nend-cluster\n" + cluster_conf(golan_port, avalon_port))
    golan_listen = f"aeron:udp?endpoint=127.0.0.1:{golan_port}"
    avalon_listen = f"aeron:udp?endpoint=127.0.0.1:{avalon_port}"
    processes.append(start_node(config, "golan", golan_listen))
    avalon = start_node(config, "avalon", avalon_listen)
    processes.append(avalon)

    # The source serves /STOCK/ at golan only; it counts the requests golan sends it.
    requests: list[str] = []
    source = Source(client, golan_listen, FEED, liveness_timeout=LIVENESS)
    source.on_request(requests.append)
    discards: list[str] = []
    source.on_discard(discards.append)

    first = Subscriber(client, avalon_listen, name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(first)
    first.subscribe(SUBJECT, alice)

    # golan requests the subject from the source once avalon subscribed there.
    deadline = time.monotonic() + TIMEOUT
    while not requests and time.monotonic() < deadline:
        source.poll(64)
        first.poll(64)
        time.sleep(0.005)
    assert requests == [SUBJECT], f"golan never requested {SUBJECT}; avalon said: {avalon.snapshot()[-10:]}"
    source.publish(SUBJECT, b"image-0", image=True)
    alice.wait_for(lambda items: any(f & Flags.IMAGE and p == "image-0" for _, f, p in items), "image at avalon")

    # A second local subscriber at avalon: answered from avalon's cache, golan is not asked again.
    second = Subscriber(client, avalon_listen, name="bob", liveness_timeout=LIVENESS)
    bob = Inbox(second)
    second.subscribe(SUBJECT, bob)
    bob.wait_for(lambda items: any(f & Flags.IMAGE and p == "image-0" for _, f, p in items), "cached image")

    sent = [f"u{i}" for i in range(UPDATES)]
    for payload in sent:
        source.publish(SUBJECT, payload.encode())
        source.poll(16)
    for inbox in (alice, bob):
        inbox.wait_for(lambda items: len([p for s, f, p in items if f & Flags.UPDATE]) >= UPDATES, "every update")
        inbox.drain_for(0.2)
        assert updates(inbox) == sent, "every update once, in order"
    source.poll(64)
    assert requests == [SUBJECT], "golan was asked once: avalon subscribed once"
    # The last local subscriber gone: after cache-expiry avalon unsubscribes at golan, which
    # discards at the source.
    first.close()
    second.close()
    deadline = time.monotonic() + TIMEOUT
    while not discards and time.monotonic() < deadline:
        source.poll(64)
        time.sleep(0.005)
    assert discards == [SUBJECT]
    source.close()


def test_a_slave_of_a_slave_stratum_2_gets_the_image_and_every_update_through_the_middle_node(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "avalon", "bilbo")}
    config = tmp_path / "cluster.conf"
    config.write_text(cluster_conf(ports["golan"], ports["avalon"], ports["bilbo"]))
    listens = {node: f"aeron:udp?endpoint=127.0.0.1:{port}" for node, port in ports.items()}
    for node, listen in listens.items():
        processes.append(start_node(config, node, listen))
    requests: list[str] = []
    source = Source(client, listens["golan"], FEED, liveness_timeout=LIVENESS)
    source.on_request(requests.append)
    subscriber = Subscriber(client, listens["bilbo"], name="carol", liveness_timeout=LIVENESS)
    carol = Inbox(subscriber)
    subscriber.subscribe(SUBJECT, carol)
    deadline = time.monotonic() + TIMEOUT
    while not requests and time.monotonic() < deadline:
        source.poll(64)
        time.sleep(0.005)
    assert requests == [SUBJECT], "bilbo -> avalon -> golan: golan asked once"
    source.publish(SUBJECT, b"image-0", image=True)
    sent = [f"u{i}" for i in range(UPDATES)]
    for payload in sent:
        source.publish(SUBJECT, payload.encode())
    carol.wait_for(lambda items: len([p for s, f, p in items if f & Flags.UPDATE]) >= UPDATES, "every update")
    carol.drain_for(0.2)
    assert [p for _, f, p in carol.items if f & Flags.IMAGE] == ["image-0"]
    assert updates(carol) == sent, "every update once, in order, across two levels"
    subscriber.close()
    source.close()


def test_a_node_id_the_master_does_not_configure_is_refused_not_allowed(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    golan_port = free_udp_port()
    config = tmp_path / "cluster.conf"
    config.write_text(cluster_conf(golan_port, free_udp_port()))
    golan_listen = f"aeron:udp?endpoint=127.0.0.1:{golan_port}"
    analysis = analyse_router_text(config.read_text(), str(config))
    assert not analysis.errors
    # golan in this process, so its counters can be read; frodo and avalon knock as nodes.
    with SubjectRouter(
        client,
        cluster_router_config(analysis.config, "golan"),
        listen=golan_listen,
        liveness_timeout=LIVENESS,
        cluster_nodes=["avalon"],
    ) as golan:
        frodo = Subscriber(client, golan_listen, name=f"{NODE_NAME_PREFIX}frodo", liveness_timeout=LIVENESS)
        refused = Inbox(frodo)
        frodo.subscribe(SUBJECT, refused)
        refused.wait_for(lambda items: any(f & Flags.REFUSED for _, f, _ in items), "refusal")
        assert refused.items[0][2].startswith('not-allowed: node "frodo"'), refused.items
        avalon = Subscriber(client, golan_listen, name=f"{NODE_NAME_PREFIX}avalon", liveness_timeout=LIVENESS)
        allowed = Inbox(avalon)
        avalon.subscribe(SUBJECT, allowed)
        # No source serves /STOCK/ here: a let-in node is routed (and gets NODATA, not a refusal).
        allowed.wait_for(lambda items: bool(items), "an answer")
        assert not any(f & Flags.REFUSED for _, f, _ in allowed.items), allowed.items
        # The status is a snapshot refreshed every 10 ms: wait for the one after the answer.
        deadline = time.monotonic() + TIMEOUT
        while golan.status().subscribers < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        status = golan.status()
        assert (status.not_allowed, status.subscribers) == (1, 1)
        frodo.close()
        avalon.close()


def test_a_source_claiming_a_node_the_master_does_not_configure_is_not_let_in(
    client: affinity.Client, tmp_path: Path
) -> None:
    # A forwarder (``node:<id>``), a PtP link and a backup's watch are sources at another node:
    # only a configured node's id gets in, so a stranger cannot publish into a domain as a node.
    config = tmp_path / "cluster.conf"
    config.write_text(cluster_conf(free_udp_port(), free_udp_port()))
    golan_listen = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    analysis = analyse_router_text(config.read_text(), str(config))
    assert not analysis.errors
    with SubjectRouter(
        client,
        cluster_router_config(analysis.config, "golan"),
        listen=golan_listen,
        liveness_timeout=LIVENESS,
        cluster_nodes=["avalon"],
    ) as golan:
        gina = Subscriber(client, golan_listen, name="gina", liveness_timeout=LIVENESS)
        inbox = Inbox(gina)
        gina.subscribe(SUBJECT, inbox)
        inbox.wait_for(lambda items: bool(items), "an answer (no feed: NODATA)")
        labels = [f"{NODE_NAME_PREFIX}frodo", f"{PTP_LINK_PREFIX}frodo", f"{WATCH_LABEL_PREFIX}frodo"]
        strangers = [Source(client, golan_listen, label, liveness_timeout=LIVENESS) for label in labels]
        avalon = Source(client, golan_listen, f"{NODE_NAME_PREFIX}avalon", liveness_timeout=LIVENESS)
        deadline = time.monotonic() + TIMEOUT
        while not avalon.router_live and time.monotonic() < deadline:
            for source in [*strangers, avalon]:
                source.poll(16)
            time.sleep(0.005)
        assert avalon.router_live, "the configured node's source is let in"
        # Each stranger heartbeats for a while: never answered, its publishes go nowhere.
        for source in strangers:
            source.poll(16)
            assert not source.router_live
            assert not source.publish(SUBJECT, b"forged", image=True)
        assert avalon.publish(SUBJECT, b"from-avalon")
        inbox.wait_for(lambda items: any(p == "from-avalon" for _, _, p in items), "avalon's publish")
        inbox.drain_for(0.3)
        assert not any(p == "forged" for _, _, p in inbox.items), inbox.items
        # Counted at every heartbeat (the status is a snapshot refreshed every 10 ms).
        deadline = time.monotonic() + TIMEOUT
        while golan.status().not_allowed < len(strangers) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert golan.status().not_allowed >= len(strangers)
        for source in [*strangers, avalon]:
            source.close()
        gina.close()


def test_a_slave_routes_its_domain_to_the_cluster_before_its_own_services() -> None:
    analysis = analyse_router_text(cluster_conf(1, 2), "cluster.conf")
    avalon = cluster_router_config(analysis.config, "avalon").routing.data_services
    info = ["cluster-node-info", "cluster-node-info-relay"]
    # PtP addresses before everything (the node maps relative ones to their domain itself).
    assert [s.name for s in avalon] == ["cluster-ptp", "cluster-STOCK_EXCHANGE", *info, "stock"]
    assert avalon[1].source_groups[0].priority_groups[0].names == (slave_label("STOCK_EXCHANGE"),)
    golan = cluster_router_config(analysis.config, "golan").routing.data_services
    # A master serves its domain from its own feed: the node's source in front of it opens only
    # when a reload hands the domain to another master.
    assert [s.name for s in golan] == ["cluster-ptp", "cluster-STOCK_EXCHANGE", *info, "stock"]
    groups = golan[1].source_groups[0].priority_groups
    assert [group.names for group in groups] == [(slave_label("STOCK_EXCHANGE"),), (FEED,)]
