"""Publish at a slave (``docs/cluster.md``, "Publish at a slave"), with router processes on
loopback: golan master of STOCK_EXCHANGE, avalon its slave (and bilbo a slave of avalon).

A source at avalon publishes a subject nobody requested from it: avalon forwards it to golan,
which fans it out to its own subscribers and, through avalon's slave subscription, to avalon's.
golan SIGKILLed: the source is told FORWARD_WARNING and its publishes queue at avalon; golan
restarted: the queue flushes in order. Past ``forward-queue`` the source is back-pressured and
told of every publish refused. An erase at either end reaches every subscriber.

"Once" across a master restart: every update the source published reaches every subscriber
exactly once, in publish order (no update lost, none repeated); the images a subscriber gets
are the feed's image, the source's image, and after the restart the feed's fresh image, in
that order (the restarted master holds no image: its feed gives a fresh one, as after any
router restart); STATUS and NODATA records are not updates and are not counted.
"""

from __future__ import annotations

import itertools
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
import cluster_conf as conf
import pytest
from affinity.cluster_info import FORWARD_COUNTERS, node_info_subject
from affinity.exceptions import ConfigError
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port
from test_cluster_nodes import FEED, SUBJECT, cluster_conf, start_node
from test_subjects_processes import LIVENESS, TIMEOUT, Inbox, Process, source_up

#: The label of the publishing source at a slave (no data service names it: it is never requested).
PUBLISHER = "stock-publisher"
#: Updates before, during and after the master's absence.
BEFORE, DURING = 100, 50


class Feed:
    """golan's source for the domain: answers each request with an image ``feed-<n>``."""

    def __init__(self, client: affinity.Client, router: str) -> None:
        self.source = Source(client, router, FEED, liveness_timeout=LIVENESS)
        self.requests: list[str] = []
        self.source.on_request(self._request)

    def _request(self, subject: str) -> None:
        self.source.publish(subject, f"feed-{len(self.requests)}".encode(), image=True)
        self.requests.append(subject)

    def poll(self) -> int:
        self.source.poll(64)
        return 0


Pollable = Callable[[], object]


def pump(pollables: list[Pollable], until: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Polls every member until ``until()`` holds (an assertion error naming ``what`` after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for poll in pollables:
            poll()
        if until():
            return
        time.sleep(0.005)
    raise AssertionError(f"{what}: not seen within {timeout} s")


def settle(pollables: list[Pollable], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for poll in pollables:
            poll()
        time.sleep(0.005)


def updates(inbox: Inbox) -> list[str]:
    return [p for s, f, p in inbox.items if s == SUBJECT and f & Flags.UPDATE]


def has_updates(inbox: Inbox, count: int) -> Callable[[], bool]:
    return lambda: len(updates(inbox)) >= count


def has_erase(inbox: Inbox) -> Callable[[], bool]:
    return lambda: any(f & Flags.ERASE for _, f, _ in inbox.items)


def images(inbox: Inbox) -> list[str]:
    return [p for s, f, p in inbox.items if s == SUBJECT and f & Flags.IMAGE]


def forward_conf(golan: int, avalon: int, bilbo: int | None = None, queue: str | None = None) -> str:
    return conf.settings(forward_queue=queue) + cluster_conf(golan, avalon, bilbo)


def listen(port: int) -> str:
    return conf.loopback(port)


def status_of(config: Path, node: str, members: list[Pollable]) -> str:
    """What ``affinity router status`` prints for ``node`` (it must answer), polling ``members``
    meanwhile (their heartbeats keep them members of their routers)."""
    with subprocess.Popen(
        [sys.executable, "-m", "affinity.cli", "router", "status", "--config", str(config), "--node", node],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as shown:
        pump(members, lambda: shown.poll() is not None, f"affinity router status --node {node}", timeout=60)
        out, err = shown.communicate()
    assert shown.returncode == 0, out + err
    return out


def test_a_publish_at_a_slave_reaches_every_subscriber_and_queues_in_order_while_the_master_is_down(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(forward_conf(ports["golan"], ports["avalon"]))
    golan = start_node(config, "golan", listen(ports["golan"]))
    processes.append(golan)
    avalon = start_node(config, "avalon", listen(ports["avalon"]))
    processes.append(avalon)

    feed = Feed(client, listen(ports["golan"]))
    gina_sub = Subscriber(client, listen(ports["golan"]), name="gina", liveness_timeout=LIVENESS)
    alice_sub = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    gina, alice = Inbox(gina_sub), Inbox(alice_sub)
    gina_sub.subscribe(SUBJECT, gina)
    alice_sub.subscribe(SUBJECT, alice)
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    # avalon's node info: its forward queue for golan (``queues``: publishes and bytes).
    watcher = Subscriber(client, listen(ports["avalon"]), name="watcher", liveness_timeout=LIVENESS)
    infos = Inbox(watcher)
    watcher.subscribe(node_info_subject("avalon"), infos)

    def depths() -> list[dict[str, int]]:
        """avalon's forward queue for golan in every node info seen so far, in order."""
        found = [json.loads(payload) for _, _, payload in infos.items if payload.startswith("{")]
        return [info["queues"]["golan"] for info in found if "golan" in info.get("queues", {})]

    def queued_for_golan() -> dict[str, int] | None:
        seen = depths()
        return seen[-1] if seen else None

    def forwarded_to_golan() -> dict[str, int]:
        """avalon's forward counters for golan in the latest node info (``forwarded``)."""
        found = [json.loads(payload) for _, _, payload in infos.items if payload.startswith("{")]
        counted = [info["forwarded"]["golan"] for info in found if "golan" in info.get("forwarded", {})]
        return counted[-1] if counted else dict.fromkeys(FORWARD_COUNTERS, 0)

    members: list[Pollable] = [
        feed.poll,
        lambda: gina_sub.poll(256),
        lambda: alice_sub.poll(256),
        source.poll,
        lambda: watcher.poll(256),
    ]
    # Both subscriptions are in place at golan once each has the feed's image.
    pump(members, lambda: images(gina) == images(alice) == ["feed-0"], "the feed's image at golan and avalon")
    pump(members, lambda: source.router_live, "the slave heard the source")

    # The source publishes a subject nobody requested from it, at the slave.
    source.publish(SUBJECT, b"image-1", image=True)
    sent = [f"u{i}" for i in range(BEFORE)]
    for payload in sent:
        assert source.publish(SUBJECT, payload.encode())
        source.poll(16)
    for inbox in (gina, alice):
        pump(members, has_updates(inbox, BEFORE), "every update before the kill")
    settle(members, 0.2)
    for name, inbox in (("gina at golan", gina), ("alice at avalon", alice)):
        assert images(inbox) == ["feed-0", "image-1"], name
        assert updates(inbox) == sent, f"{name}: every update once, in order"
    assert not source.status().forward_warning, "nothing queued while golan is up"
    assert feed.requests == [SUBJECT], "golan asked its feed once; the publishes were not requests"
    empty = {"messages": 0, "bytes": 0}
    pump(members, lambda: queued_for_golan() == empty, "avalon's node info: nothing queued for golan")
    seen_before_kill = len(depths())
    # Its counters for golan, published in its node info: the image and every update went
    # (the first ones queued while the link to golan opened, then flushed), none refused.
    pump(
        members,
        lambda: forwarded_to_golan()["sent"] + forwarded_to_golan()["flushed"] == 1 + BEFORE,
        "avalon's node info counting what it forwarded to golan",
    )
    before = forwarded_to_golan()
    assert before["queued"] == before["flushed"] and before["refused"] == before["dropped"] == 0, before

    # SIGKILL golan mid-stream; once avalon's link to it is silent past the liveness timeout,
    # the publishes queue at avalon and the source is told FORWARD_WARNING.
    golan.kill()
    settle(members, 2 * LIVENESS)
    during = [f"u{i}" for i in range(BEFORE, BEFORE + DURING)]
    for payload in during:
        assert source.publish(SUBJECT, payload.encode()), "queued, not back-pressured"
        source.poll(16)
    pump(members, lambda: source.status().forward_warning, "FORWARD_WARNING at the source")
    assert source.status().last_forward_status.startswith("FORWARD_WARNING")
    assert updates(alice) == sent, "nothing reached avalon's subscribers while golan is down"
    # The depth rises to every publish made while golan is down (and their bytes), never falls.
    pump(
        members,
        lambda: (queued_for_golan() or empty)["messages"] == DURING,
        "avalon's node info showing its queue for golan",
    )
    during_counts = forwarded_to_golan()
    assert during_counts["queued"] - before["queued"] >= DURING, (before, during_counts)
    assert during_counts["flushed"] == before["flushed"] and during_counts["sent"] == before["sent"]
    rising = depths()[seen_before_kill:]
    assert all(a["messages"] <= b["messages"] and a["bytes"] <= b["bytes"] for a, b in itertools.pairwise(rising))
    assert rising[-1]["bytes"] >= sum(len(payload) for payload in during), rising[-1]
    shown = status_of(config, "avalon", members)
    depth = rising[-1]
    assert f"forward queues: golan {DURING} publishes / {depth['bytes']} bytes" in shown, shown
    assert "forwarded to golan: sent " in shown, shown

    # golan back (same address, no state): the queue flushes in order.
    golan = start_node(config, "golan", listen(ports["golan"]))
    processes.append(golan)
    sent += during
    for name, inbox in (("gina at golan", gina), ("alice at avalon", alice)):
        pump(members, has_updates(inbox, len(sent)), f"{name}: the flushed updates")
    pump(members, lambda: not source.status().forward_warning, "the warning cleared once flushed")
    pump(members, lambda: queued_for_golan() == empty, "avalon's node info showing its queue for golan empty")
    pump(
        members,
        lambda: forwarded_to_golan()["flushed"] == forwarded_to_golan()["queued"] > during_counts["flushed"],
        "avalon's node info counting the flush",
    )
    settle(members, 0.3)
    for name, inbox in (("gina at golan", gina), ("alice at avalon", alice)):
        assert updates(inbox) == sent, f"{name}: every update once, in order, across the master's restart"
        assert images(inbox) == ["feed-0", "image-1", "feed-1"], f"{name}: images once each"
    assert source.status().forward_refused == 0

    # Erase at the slave goes to the master, which passes it to every subscriber (and slave).
    assert source.erase(SUBJECT)
    for name, inbox in (("gina at golan", gina), ("alice at avalon", alice)):
        pump(members, has_erase(inbox), f"{name}: the erase")
    # avalon forgot the image: a new local subscriber gets none from its cache.
    bob_sub = Subscriber(client, listen(ports["avalon"]), name="bob", liveness_timeout=LIVENESS)
    bob = Inbox(bob_sub)
    bob_sub.subscribe(SUBJECT, bob)
    settle([*members, lambda: bob_sub.poll(256)], 0.5)
    assert images(bob) == [], "the erased image is not served from avalon's cache"
    # Erase at the master (its feed) reaches the slave's subscribers.
    feed.source.erase(SUBJECT)
    pump(
        [*members, lambda: bob_sub.poll(256)],
        lambda: any(f & Flags.ERASE for _, f, _ in bob.items),
        "the master's erase at avalon",
    )
    for closing in (bob_sub, gina_sub, alice_sub, source, feed.source):
        closing.close()
    # avalon's counters, logged when it stops: every publish (the image, the updates, the erase)
    # was sent at once or queued then flushed, at least those made while golan was away were
    # queued (the first ones too, while the link to golan opened), none refused.
    avalon.stop()
    counted = [line for line in avalon.snapshot() if "publishes forwarded:" in line]
    assert counted, avalon.snapshot()[-10:]
    figures = dict(part.rsplit(" ", 1) for part in counted[-1].split("publishes forwarded: ")[1].split(", "))
    numbers = {name: int(value) for name, value in figures.items()}
    assert numbers["sent"] + numbers["queued"] == 1 + BEFORE + DURING + 1, numbers
    assert numbers["flushed"] == numbers["queued"] >= DURING and numbers["refused"] == 0, numbers


def test_past_the_forward_queue_bound_the_source_is_back_pressured_and_nothing_is_dropped(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(forward_conf(ports["golan"], ports["avalon"], queue="64K"))
    golan = start_node(config, "golan", listen(ports["golan"]))
    processes.append(golan)
    processes.append(start_node(config, "avalon", listen(ports["avalon"])))
    feed = Feed(client, listen(ports["golan"]))
    alice_sub = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(alice_sub)
    alice_sub.subscribe(SUBJECT, alice)
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [feed.poll, lambda: alice_sub.poll(256), source.poll]
    pump(members, lambda: images(alice) == ["feed-0"], "the feed's image at avalon")
    pump(members, lambda: source.router_live, "the slave heard the source")
    source.publish(SUBJECT, b"warm-up", image=True)
    pump(members, lambda: images(alice) == ["feed-0", "warm-up"] and not source.status().forward_warning, "warm-up")

    golan.kill()
    settle(members, 2 * LIVENESS)
    # 4 KiB updates: 64 KiB hold about 15. Publish until the source is back-pressured.
    total = 40
    payloads = [f"u{i}:".encode() + bytes(4096) for i in range(total)]
    published = 0
    while published < total and source.publish(SUBJECT, payloads[published]):
        published += 1
        settle(members, 0.02)
    status = source.status()
    assert status.back_pressured and published < total, "the queue bound back-pressures the source"
    assert not source.publish(SUBJECT, payloads[published]), "publish returns False while back-pressured"
    settle(members, 0.3)
    refused = source.status().forward_refused
    assert 1 <= refused <= published, source.status()
    accepted = published - refused  # the refused ones are the tail of what was published

    golan = start_node(config, "golan", listen(ports["golan"]))
    processes.append(golan)
    pump(members, lambda: len(updates(alice)) >= accepted, "the queued updates flushed")
    pump(members, lambda: not source.status().back_pressured, "room again after the flush")
    settle(members, 0.3)
    expected = [p.decode() for p in payloads[:accepted]]
    assert updates(alice) == expected, "exactly what was accepted, in order: nothing dropped silently"
    # The source publishes its refused tail, and the rest.
    for payload in payloads[accepted:]:
        assert source.publish(SUBJECT, payload)
        settle(members, 0.005)
    pump(members, lambda: len(updates(alice)) >= total, "every update")
    settle(members, 0.3)
    assert updates(alice) == [p.decode() for p in payloads], "every update once, in order"
    for closing in (alice_sub, source, feed.source):
        closing.close()


def test_a_publish_at_a_slave_of_a_slave_goes_through_the_middle_node_to_the_master(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "avalon", "bilbo")}
    config = tmp_path / "cluster.conf"
    config.write_text(forward_conf(ports["golan"], ports["avalon"], ports["bilbo"]))
    for node, port in ports.items():
        processes.append(start_node(config, node, listen(port)))
    feed = Feed(client, listen(ports["golan"]))
    gina_sub = Subscriber(client, listen(ports["golan"]), name="gina", liveness_timeout=LIVENESS)
    carol_sub = Subscriber(client, listen(ports["bilbo"]), name="carol", liveness_timeout=LIVENESS)
    gina, carol = Inbox(gina_sub), Inbox(carol_sub)
    gina_sub.subscribe(SUBJECT, gina)
    carol_sub.subscribe(SUBJECT, carol)
    source = Source(client, listen(ports["bilbo"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [feed.poll, lambda: gina_sub.poll(256), lambda: carol_sub.poll(256), source.poll]
    pump(members, lambda: images(gina) == images(carol) == ["feed-0"], "the feed's image at golan and bilbo")
    pump(members, lambda: source.router_live, "the slave heard the source")
    sent = [f"u{i}" for i in range(BEFORE)]
    for payload in sent:
        assert source.publish(SUBJECT, payload.encode())
        source.poll(16)
    for inbox in (gina, carol):
        pump(members, has_updates(inbox, BEFORE), "every update at golan and bilbo")
    settle(members, 0.2)
    assert updates(gina) == updates(carol) == sent, "bilbo -> avalon -> golan -> avalon -> bilbo: once, in order"
    for closing in (gina_sub, carol_sub, source, feed.source):
        closing.close()


def test_a_publish_for_a_domain_without_a_master_is_accepted_and_queued_within_the_bound(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "avalon")}
    config = tmp_path / "cluster.conf"
    radar = "add-domain\n    name RADAR\n    include-pattern '^/RADAR/'\nend-domain\n"
    config.write_text(forward_conf(ports["golan"], ports["avalon"], queue="64K") + radar)
    processes.append(start_node(config, "avalon", listen(ports["avalon"])))
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [source.poll]
    assert not source.publish("/RADAR/north", b"too early"), "avalon has not heard the source yet"
    pump(members, lambda: source.router_live, "avalon heard the source")
    assert source.publish("/RADAR/north", b"image", image=True)
    pump(members, lambda: source.status().forward_warning, "FORWARD_WARNING: queued until a master appears")
    assert not source.status().back_pressured
    # The queue is bounded all the same: past 64 KiB the source is back-pressured.
    published = 0
    while published < 40 and source.publish("/RADAR/north", bytes(4096)):
        published += 1
        settle(members, 0.02)
    assert source.status().back_pressured and 10 <= published < 40, (published, source.status())
    # avalon's node info shows that queue: the image and every publish the queue accepted.
    watcher = Subscriber(client, listen(ports["avalon"]), name="watcher", liveness_timeout=LIVENESS)
    infos: list[dict[str, Any]] = []
    watcher.subscribe(node_info_subject("avalon"), lambda _s, _f, payload: infos.append(json.loads(payload)))
    members.append(lambda: watcher.poll(64))

    def radar() -> dict[str, int] | None:
        return infos[-1].get("queues_without_master", {}).get("RADAR") if infos else None

    pump(members, lambda: radar() is not None, "avalon's node info showing the queue of RADAR")
    depth = radar()
    # The source's last accepted publishes may have been refused at the bound (told afterwards).
    accepted = 1 + published - source.status().forward_refused
    assert depth is not None and depth["messages"] == accepted, (depth, published, source.status())
    assert 4096 * (accepted - 1) <= depth["bytes"] <= 64 * 1024, depth
    shown = status_of(config, "avalon", members)
    assert f"queued without a master: RADAR {accepted} publishes / {depth['bytes']} bytes" in shown, shown
    watcher.close()
    # A subscriber of the domain is answered NODATA unavailable (no master to ask).
    subscriber = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(subscriber)
    subscriber.subscribe("/RADAR/north", alice)
    alice.wait_for(lambda items: any(f & Flags.NODATA_UNAVAILABLE for _, f, _ in items), "NODATA unavailable")
    for closing in (subscriber, source):
        closing.close()


def radar_conf(golan: int, avalon: int, *, golan_master: bool) -> str:
    """golan master of STOCK_EXCHANGE (and, with ``golan_master``, of RADAR), avalon a slave;
    golan's router has a data service of its own for RADAR (its feed ``radar-feed``)."""
    return (
        conf.data_service("radar", "'^/RADAR/'", RADAR_FEED)
        + conf.data_service("stock", "^/STOCK/", FEED)
        + conf.node(
            "golan", conf.loopback(golan), "master-of STOCK_EXCHANGE", *(("master-of RADAR",) if golan_master else ())
        )
        + conf.node("avalon", conf.loopback(avalon))
        + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
        + conf.domain("RADAR", "^/RADAR/")
    )


#: The label of golan's own feed for RADAR (served once golan is RADAR's master).
RADAR_FEED = "radar-feed"


def flushed_then_later(
    members: list[Pollable], source: Source, subject: str, queued: list[str], got: Callable[[], list[str]], at: str
) -> None:
    """The ``queued`` publishes reach ``got()`` and the warning clears; then ten later publishes
    of ``subject``: every one once, in order."""
    pump(members, lambda: len(got()) >= len(queued), f"the queued publishes at {at}")
    pump(members, lambda: not source.status().forward_warning, "the warning cleared once flushed")
    later = [f"l{i}" for i in range(10)]
    for payload in later:
        assert source.publish(subject, payload.encode())
        source.poll(16)
    pump(members, lambda: len(got()) >= len(queued) + len(later), f"the later publishes at {at}")
    settle(members, 0.3)
    assert got() == queued + later, "every publish once, in order"


def test_a_reload_giving_a_domain_its_first_master_hands_it_the_queued_publishes_in_order(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(radar_conf(ports["golan"], ports["avalon"], golan_master=False))
    nodes = {node: start_node(config, node, listen(ports[node])) for node in ("golan", "avalon")}
    processes.extend(nodes.values())
    # golan's own feed for RADAR is its router's fallback, behind the node's source: a
    # subscription made before that source is up would be served by the feed at once.
    nodes["golan"].wait_for(source_up("cluster.RADAR"), "golan's node source for RADAR")
    subject = "/RADAR/north"
    feed = Source(client, listen(ports["golan"]), RADAR_FEED, liveness_timeout=LIVENESS)
    feed.on_request(lambda requested: feed.publish(requested, b"radar-feed-image", image=True))
    gina_sub = Subscriber(client, listen(ports["golan"]), name="gina", liveness_timeout=LIVENESS)
    gina = Inbox(gina_sub)
    gina_sub.subscribe(subject, gina)
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [lambda: feed.poll(64), lambda: gina_sub.poll(256), source.poll]

    def radar(flag: Flags) -> list[str]:
        return [p for s, f, p in gina.items if s == subject and f & flag]

    # No master yet: golan's node answers NODATA, and golan's router then asks its own feed
    # (the next member of the service) when that is up: either is an answer. Publishes at
    # avalon queue under the domain.
    answered = Flags.NODATA_UNAVAILABLE | Flags.IMAGE
    pump(members, lambda: any(f & answered for _, f, _ in gina.items), "an answer at golan")
    pump(members, lambda: source.router_live, "avalon heard the source")
    queued = [f"q{i}" for i in range(20)]
    assert source.publish(subject, b"radar-image", image=True)
    for payload in queued:
        assert source.publish(subject, payload.encode())
        source.poll(16)
    pump(members, lambda: source.status().forward_warning, "FORWARD_WARNING: no master")
    assert "queued without a master: RADAR 21 publishes" in status_of(config, "avalon", members)
    assert radar(Flags.UPDATE) == [], "nothing reached golan"

    # The reload makes golan RADAR's master: golan serves it from its own feed (gina gets a
    # STATUS and the feed's image), avalon hands its queue to golan, flushed in order.
    config.write_text(radar_conf(ports["golan"], ports["avalon"], golan_master=True))
    os.kill(nodes["golan"].popen.pid, signal.SIGHUP)
    taken = "takes over domain RADAR (the reloaded configuration makes this node its master)"
    pump(members, lambda: any(taken in line for line in nodes["golan"].snapshot()), "golan taking RADAR over")
    pump(members, lambda: "radar-feed-image" in radar(Flags.IMAGE), "golan's own feed serving RADAR")
    os.kill(nodes["avalon"].popen.pid, signal.SIGHUP)
    pump(
        members,
        lambda: any("RADAR has a master now (golan): its 21 queued" in line for line in nodes["avalon"].snapshot()),
        "avalon handing its RADAR queue to golan",
    )
    flushed_then_later(members, source, subject, queued, lambda: radar(Flags.UPDATE), "golan")
    assert radar(Flags.IMAGE) == ["radar-feed-image", "radar-image"], "the feed's image, then the queued one"
    assert source.status().forward_refused == 0
    shown = status_of(config, "avalon", members)
    assert "queued without a master" not in shown, shown
    # avalon now asks golan for RADAR's subjects: a subscriber there gets golan's image.
    alice_sub = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(alice_sub)
    alice_sub.subscribe("/RADAR/south", alice)
    pump(
        [*members, lambda: alice_sub.poll(256)],
        lambda: any(f & Flags.IMAGE and p == "radar-feed-image" for _, f, p in alice.items),
        "golan's image of /RADAR/south at avalon",
    )
    for closing in (alice_sub, gina_sub, source, feed):
        closing.close()


def test_a_reload_making_this_node_the_first_master_relays_what_it_had_queued_in_order(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "avalon")}

    def avalon_conf(*, master: bool) -> str:
        return (
            conf.data_service("radar", "'^/RADAR/'", RADAR_FEED)
            + conf.data_service("stock", "^/STOCK/", FEED)
            + conf.node("golan", conf.loopback(ports["golan"]), "master-of STOCK_EXCHANGE")
            + conf.node("avalon", conf.loopback(ports["avalon"]), *(("master-of RADAR",) if master else ()))
            + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
            + conf.domain("RADAR", "^/RADAR/")
        )

    config = tmp_path / "cluster.conf"
    config.write_text(avalon_conf(master=False))
    nodes = {node: start_node(config, node, listen(ports[node])) for node in ("golan", "avalon")}
    processes.extend(nodes.values())
    nodes["avalon"].wait_for(source_up("cluster.RADAR"), "avalon's node source for RADAR")
    subject = "/RADAR/north"
    alice_sub = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(alice_sub)
    alice_sub.subscribe(subject, alice)
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [lambda: alice_sub.poll(256), source.poll]
    # avalon's own RADAR feed starts only once avalon is the master: before, the routing tables
    # would move alice's subject to it on the node's NODATA, and publishes would stay local.
    pump(members, lambda: any(f & Flags.NODATA_UNAVAILABLE for _, f, _ in alice.items), "NODATA: no master")

    def radar(flag: Flags) -> list[str]:
        return [p for s, f, p in alice.items if s == subject and f & flag]

    pump(members, lambda: source.router_live, "avalon heard the source")
    queued = [f"q{i}" for i in range(20)]
    for payload in queued:
        assert source.publish(subject, payload.encode())
        source.poll(16)
    pump(members, lambda: source.status().forward_warning, "FORWARD_WARNING: no master")
    settle(members, 0.3)
    assert radar(Flags.UPDATE) == [], "queued, not relayed"

    # The reload makes avalon itself RADAR's master: its router takes the queue, in order.
    config.write_text(avalon_conf(master=True))
    for process in nodes.values():
        os.kill(process.popen.pid, signal.SIGHUP)
    pump(
        members,
        lambda: any("RADAR has a master now (avalon): its 20 queued" in ln for ln in nodes["avalon"].snapshot()),
        "avalon handing its RADAR queue to its own router",
    )
    feed = Source(client, listen(ports["avalon"]), RADAR_FEED, liveness_timeout=LIVENESS)
    feed.on_request(lambda requested: feed.publish(requested, b"radar-feed-image", image=True))
    members.append(lambda: feed.poll(64))
    flushed_then_later(members, source, subject, queued, lambda: radar(Flags.UPDATE), "alice")
    assert source.status().forward_refused == 0
    for closing in (alice_sub, source, feed):
        closing.close()


def test_a_publish_naming_its_domain_goes_to_that_domains_master_not_the_subjects(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "heron", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(
        conf.data_service("stock", "^/STOCK/", FEED)
        + conf.node("golan", conf.loopback(ports["golan"]), "master-of STOCK_EXCHANGE")
        + conf.node("heron", conf.loopback(ports["heron"]), "master-of PINNED")
        + conf.node("avalon", conf.loopback(ports["avalon"]))
        + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
        + conf.domain("PINNED", "^/PINNED/")
    )
    for node in ports:
        processes.append(start_node(config, node, listen(ports[node])))
    feed = Feed(client, listen(ports["golan"]))
    inboxes: dict[str, Inbox] = {}
    subscribers = {}
    for node, name in (("golan", "gina"), ("heron", "hugo"), ("avalon", "alice")):
        subscribers[node] = Subscriber(client, listen(ports[node]), name=name, liveness_timeout=LIVENESS)
        inboxes[node] = Inbox(subscribers[node])
        subscribers[node].subscribe(SUBJECT, inboxes[node])
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [feed.poll, source.poll, *(lambda s=s: s.poll(256) for s in subscribers.values())]
    for node, inbox in inboxes.items():
        pump(members, lambda inbox=inbox: images(inbox) == ["feed-0"], f"golan's image at {node}")
    pump(members, lambda: source.router_live, "avalon heard the source")

    with pytest.raises(ConfigError, match=re.escape("""domain "RUGBY NEWS": ' ' is not one of A-Z a-z 0-9 _ . -""")):
        source.publish(SUBJECT, b"x", domain="RUGBY NEWS")
    # The subject's pattern says STOCK_EXCHANGE (golan); the publish says PINNED (heron), or a
    # domain no node defines (handled at avalon, the default master), or nothing (golan).
    for payload, domain in (("pinned-1", "PINNED"), ("nowhere-1", "NOWHERE"), ("plain-1", None)):
        assert source.publish(SUBJECT, payload.encode(), domain=domain), payload
        source.poll(16)
    pump(members, lambda: "pinned-1" in updates(inboxes["heron"]), "the PINNED publish at heron")
    for node in inboxes:
        pump(members, lambda node=node: "plain-1" in updates(inboxes[node]), f"the plain publish at {node}")
    settle(members, 0.3)
    assert updates(inboxes["golan"]) == ["plain-1"], "golan, STOCK_EXCHANGE's master, never got the others"
    # Once each (two paths: no order between them).
    assert sorted(updates(inboxes["heron"])) == ["pinned-1", "plain-1"], "heron: its own domain's and golan's relay"
    assert sorted(updates(inboxes["avalon"])) == ["nowhere-1", "plain-1"], "avalon: the undefined domain's, here"
    assert all(not payload.startswith("\x06") for inbox in inboxes.values() for _, _, payload in inbox.items)
    for closing in (*subscribers.values(), source, feed.source):
        closing.close()
