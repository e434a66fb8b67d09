"""Master failover by ``backup-node`` and SIGHUP reload of the cluster block
(``docs/cluster.md``, "Master failover and reload"), with router processes on loopback: golan
master of STOCK_EXCHANGE with ``backup-node heron``, heron and avalon its slaves.

The domain's feed is replicated: one source labelled ``stock-feed`` at golan and one at heron
(as a data source serves several routers), numbering its updates 1, 2, 3 ... and answering a
request with the image ``image:<n>`` (the state as of update n). So a subscriber can check
what it got: the updates after an image are exactly n+1, n+2, ... (none lost, none repeated,
in order). Across a move the updates published between the master's death and the
subscription's restoration at the backup are not delivered as updates: the fresh image stands
for them (the loss window is covered by the image, never a gap after it).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import affinity
import cluster_conf as conf
import pytest
from affinity.cluster_failover import (
    failover_order,
    fallback_domains,
    link_order,
    link_routers,
    read_reload,
    takeover_domains,
)
from affinity.cluster_info import node_info_subject
from affinity.cluster_node import NODE_NAME_PREFIX, cluster_router_config
from affinity.config.faucet import analyse_router_text
from affinity.config.model import DataService
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port
from test_cluster_forward import PUBLISHER, Pollable, listen, pump, settle
from test_cluster_nodes import FEED, SUBJECT
from test_subjects_processes import Inbox, Process, source_up

#: The liveness timeout of the nodes and of every member here, seconds: twice the other process
#: tests' (a silent node is taken over, so a loaded machine must not make one look silent).
LIVENESS = 2.0

#: A subject of the domain only publishers at avalon publish (the feed answers it with an image).
NEWS = "/STOCK/NEWS"
#: Feed updates and publishes before a move.
BEFORE = 40
#: Publishes while no master is reachable.
DURING = 30
#: Feed updates after a move (the subscribers must see every one).
AFTER = 40


def failover_conf(ports: dict[str, int], *, heron_master: bool = False, bilbo: int | None = None) -> str:
    """golan master of STOCK_EXCHANGE backed up by heron (``heron_master``: the reverse);
    avalon a slave; with ``bilbo`` a fourth node."""
    golan_roles = ("backup-node heron",) if heron_master else ("master-of STOCK_EXCHANGE", "backup-node heron")
    heron_roles = ("master-of STOCK_EXCHANGE", "backup-node golan") if heron_master else ()
    fourth = "" if bilbo is None else conf.node("bilbo", listen(bilbo))
    return (
        conf.data_service("stock", "^/STOCK/", FEED)
        + conf.node("golan", listen(ports["golan"]), *golan_roles)
        + conf.node("heron", listen(ports["heron"]), *heron_roles)
        + conf.node("avalon", listen(ports["avalon"]))
        + fourth
        + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
    )


def start_node(config: Path, node: str, channel: str) -> Process:
    """``affinity router --node`` with this module's :data:`LIVENESS`; returns once it listens."""
    options = ["--config", str(config), "--node", node, "--listen", channel, "--liveness-timeout", str(LIVENESS)]
    process = Process([sys.executable, "-m", "affinity.cli", "router", *options])
    process.wait_for(lambda lines: any("listening on" in line for line in lines), f"{node} start")
    return process


class ReplicatedFeed:
    """``stock-feed`` at several routers: one sequence of updates of :data:`SUBJECT` to every
    router that requested it; any request answered with ``image:<last update>``."""

    def __init__(self, client: affinity.Client, routers: list[str]) -> None:
        self.seq = 0
        self.sources = [Source(client, router, FEED, liveness_timeout=LIVENESS) for router in routers]
        self.requested: list[set[str]] = [set() for _ in routers]
        #: Every request each source got, in order.
        self.requests: list[list[str]] = [[] for _ in routers]
        for source, requested, requests in zip(self.sources, self.requested, self.requests, strict=True):
            source.on_request(self._request(source, requested, requests))
            source.on_discard(requested.discard)

    def _request(self, source: Source, requested: set[str], requests: list[str]) -> Callable[[str], None]:
        def request(subject: str) -> None:
            requested.add(subject)
            requests.append(subject)
            source.publish(subject, f"image:{self.seq}".encode(), image=True)

        return request

    def tick(self) -> None:
        """The next update, to every router serving the subject."""
        self.seq += 1
        for source, requested in zip(self.sources, self.requested, strict=True):
            if SUBJECT in requested:
                source.publish(SUBJECT, str(self.seq).encode())

    def poll(self) -> None:
        for source in self.sources:
            source.poll(64)

    def close(self) -> None:
        for source in self.sources:
            source.close()


def feed_records(inbox: Inbox) -> list[tuple[Flags, str]]:
    return [(f, p) for s, f, p in inbox.items if s == SUBJECT]


def check_feed(inbox: Inbox, name: str) -> list[int]:
    """Every image of :data:`SUBJECT` is followed by exactly the next updates, in order; returns
    the update numbers received."""
    expected: int | None = None
    seen = []
    for flags, payload in feed_records(inbox):
        if flags & Flags.IMAGE:
            expected = int(payload.split(":")[1]) + 1
        elif flags & Flags.UPDATE:
            assert expected is not None, f"{name}: an update before any image"
            assert int(payload) == expected, f"{name}: update {payload} where {expected} was due: {inbox.items[-30:]}"
            seen.append(int(payload))
            expected += 1
    return seen


def moved_after(inbox: Inbox, mark: int, name: str) -> str:
    """After ``mark``: a STATUS for :data:`SUBJECT` before its images; returns the last image (a
    backup that relayed the subject itself may answer first from its cached image, then its
    own source's fresh one)."""
    after = [(f, p) for s, f, p in inbox.items[mark:] if s == SUBJECT]
    statuses = [i for i, (f, _) in enumerate(after) if f & Flags.STATUS]
    images = [i for i, (f, _) in enumerate(after) if f & Flags.IMAGE]
    assert statuses and images and statuses[0] < images[0], f"{name}: a STATUS, then a fresh image: {after[:10]}"
    return after[images[-1]][1]


def news(inbox: Inbox) -> list[str]:
    return [p for s, f, p in inbox.items if s == NEWS and f & Flags.UPDATE]


def has_image(inbox: Inbox, subject: str, since: int = 0) -> Callable[[], bool]:
    return lambda: any(s == subject and f & Flags.IMAGE for s, f, _ in inbox.items[since:])


def node_source_up(process: Process) -> None:
    """Waits until the node's own source for the domain is up at its router (a subscription
    made before would be served by the router's fallback, the node's own feed)."""
    process.wait_for(source_up("cluster.STOCK_EXCHANGE"), "the node's source for STOCK_EXCHANGE")


def test_a_master_killed_moves_its_domain_to_the_backup_and_subscribers_follow_in_order(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "heron", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(failover_conf(ports))
    nodes = {node: start_node(config, node, listen(port)) for node, port in ports.items()}
    processes += nodes.values()
    node_source_up(nodes["heron"])
    node_source_up(nodes["avalon"])
    feed = ReplicatedFeed(client, [listen(ports["golan"]), listen(ports["heron"])])
    alice_sub = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    harry_sub = Subscriber(client, listen(ports["heron"]), name="harry", liveness_timeout=LIVENESS)
    alice, harry = Inbox(alice_sub), Inbox(harry_sub)
    for subscriber, inbox in ((alice_sub, alice), (harry_sub, harry)):
        subscriber.subscribe(SUBJECT, inbox)
        subscriber.subscribe(NEWS, inbox)
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    # heron's node info: its role in the domain.
    watcher = Subscriber(client, listen(ports["heron"]), name="watcher", liveness_timeout=LIVENESS)
    infos = Inbox(watcher)
    watcher.subscribe(node_info_subject("heron"), infos)

    def heron_role() -> tuple[str, int | None, str | None] | None:
        latest = [json.loads(p) for _, f, p in infos.items if f & Flags.IMAGE and p.startswith("{")][-1:]
        if not latest:
            return None
        (domain,) = latest[0]["domains"]
        return domain["role"], domain["stratum"], domain["parent"]

    members: list[Pollable] = [
        feed.poll,
        lambda: alice_sub.poll(256),
        lambda: harry_sub.poll(256),
        source.poll,
        lambda: watcher.poll(256),
    ]
    pump(members, lambda: heron_role() == ("slave", 1, "golan"), "heron's info: a slave of golan")
    for name, inbox in (("alice at avalon", alice), ("harry at heron", harry)):
        pump(members, has_image(inbox, SUBJECT), f"{name}: the image from golan's feed")
        pump(members, has_image(inbox, NEWS), f"{name}: the news image")
    pump(members, lambda: source.router_live, "avalon heard the publisher")
    assert feed.requested[1] == set(), "heron, a slave, asked golan, not its own feed"

    sent = [f"p{i}" for i in range(BEFORE)]
    for payload in sent:
        feed.tick()
        assert source.publish(NEWS, payload.encode())
        settle(members, 0.005)
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(members, lambda inbox=inbox: len(news(inbox)) >= BEFORE, f"{name}: every publish before the kill")
        pump(
            members,
            lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [BEFORE],
            f"{name}: the feed's updates",
        )
    marks = {"alice": len(alice.items), "harry": len(harry.items)}

    # SIGKILL golan; the feed goes on (at heron only now). heron takes over after its liveness
    # timeout, avalon's link moves to heron after its own.
    nodes["golan"].kill()
    moved_at = time.monotonic()
    nodes["heron"].wait_for(lambda lines: any("takes over domain STOCK_EXCHANGE" in ln for ln in lines), "takeover")
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(members, has_image(inbox, SUBJECT, marks[name]), f"{name}: a fresh image after the move")
    took = time.monotonic() - moved_at
    pump(members, lambda: heron_role() == ("master", 0, None), "heron's info: master of the domain")
    assert feed.requested[1] >= {SUBJECT, NEWS}, "heron serves the domain from its own feed now"
    # The backup's own feed answered (image:<n>, n its last update) once heron took over.
    fresh = f"image:{feed.seq}"
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(members, lambda inbox=inbox, name=name: moved_after(inbox, marks[name], name) == fresh, f"{name}: {fresh}")
    for _ in range(AFTER):
        feed.tick()
        settle(members, 0.005)
    more = [f"p{i}" for i in range(BEFORE, BEFORE + AFTER // 2)]
    pump(members, lambda: not source.status().forward_warning, "avalon's forwarding settled at heron")
    for payload in more:
        assert source.publish(NEWS, payload.encode())
        settle(members, 0.005)
    sent += more
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(
            members,
            lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [feed.seq],
            f"{name}: the feed's last update",
        )
        pump(members, lambda inbox=inbox: news(inbox)[-1:] == sent[-1:], f"{name}: the publishes after the move")
    settle(members, 0.3)
    for name, inbox in (("alice", alice), ("harry", harry)):
        seen = check_feed(inbox, name)  # after each image exactly the next updates, in order
        image_at = int(fresh.split(":")[1])
        assert seen[:BEFORE] == list(range(1, BEFORE + 1)), name
        assert seen[BEFORE:] == list(range(image_at + 1, feed.seq + 1)), f"{name}: every update after the fresh image"
        assert news(inbox) == sent, f"{name}: every publish once, in order"
    print(f"failover: subscribers moved {took:.2f} s after the kill (liveness timeout {LIVENESS} s)")

    # golan back: it hears heron serves the domain and defers to it (no two masters serving);
    # nothing moves by itself (the domain stays at heron, links stay there).
    golan = start_node(config, "golan", listen(ports["golan"]))
    processes.append(golan)
    golan.wait_for(lambda lines: any("defers domain STOCK_EXCHANGE to heron" in ln for ln in lines), "deferral")
    asked = len(feed.requests[0])
    for _ in range(int(2 * LIVENESS / 0.02)):
        feed.tick()
        settle(members, 0.02)
    assert len(feed.requests[0]) == asked, "no subscription went back to golan by itself"
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(members, lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [feed.seq], f"{name}: at heron")
    # SIGHUP: golan serves the domain itself again, avalon's links go back to golan, the first
    # of their order, and heron hands the domain back; harry's subscription stays on heron's
    # feed (the router never moves it back).
    mark = len(alice.items)
    os.kill(golan.popen.pid, signal.SIGHUP)
    golan.wait_for(lambda lines: any("serves domain STOCK_EXCHANGE" in ln for ln in lines), "golan serves again")
    for node in ("heron", "avalon"):
        os.kill(nodes[node].popen.pid, signal.SIGHUP)
    nodes["heron"].wait_for(lambda lines: any("hands domain STOCK_EXCHANGE back" in ln for ln in lines), "hand back")
    pump(members, lambda: heron_role() == ("slave", 1, "golan"), "heron's info: a slave of golan again")
    pump(members, lambda: SUBJECT in feed.requests[0][asked:], "avalon subscribed at golan again")
    pump(members, has_image(alice, SUBJECT, mark), "alice: golan's fresh image")
    moved_after(alice, mark, "alice")
    pump(members, lambda: not source.status().forward_warning and source.router_live, "the forwarder at golan")
    back = [f"p{i}" for i in range(len(sent), len(sent) + 10)]
    for payload in back:
        feed.tick()
        assert source.publish(NEWS, payload.encode())
        settle(members, 0.02)
    sent += back
    pump(members, lambda: news(alice)[-1:] == sent[-1:], "alice: the publishes through golan")
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(members, lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [feed.seq], f"{name}: the last")
    assert news(alice) == sent, "alice: every publish once, in order, across both moves"
    for closing in (alice_sub, harry_sub, source, watcher):
        closing.close()
    feed.close()


def test_publishes_queued_at_a_slave_for_a_dead_master_flush_to_the_backup(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "heron", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(failover_conf(ports))
    golan = start_node(config, "golan", listen(ports["golan"]))
    avalon = start_node(config, "avalon", listen(ports["avalon"]))
    processes += [golan, avalon]
    node_source_up(avalon)
    feed = ReplicatedFeed(client, [listen(ports["golan"]), listen(ports["heron"])])
    alice_sub = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(alice_sub)
    alice_sub.subscribe(NEWS, alice)
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [feed.poll, lambda: alice_sub.poll(256), source.poll]
    pump(members, has_image(alice, NEWS), "the news image from golan's feed")
    pump(members, lambda: source.router_live, "avalon heard the publisher")
    sent = [f"p{i}" for i in range(BEFORE)]
    for payload in sent:
        assert source.publish(NEWS, payload.encode())
        settle(members, 0.005)
    pump(members, lambda: len(news(alice)) >= BEFORE, "every publish before the kill")

    # golan killed while heron is not running: no master is reachable, the publishes queue.
    golan.kill()
    settle(members, 2 * LIVENESS)
    during = [f"p{i}" for i in range(BEFORE, BEFORE + DURING)]
    for payload in during:
        assert source.publish(NEWS, payload.encode()), "queued, not back-pressured"
        settle(members, 0.005)
    pump(members, lambda: source.status().forward_warning, "FORWARD_WARNING at the source")
    settle(members, LIVENESS)
    assert news(alice) == sent, "nothing reached avalon's subscriber while no master is up"

    # heron starts: golan is silent, so heron takes the domain over; avalon's links reach it,
    # its subscription is answered, and the queue flushes there, in order.
    heron = start_node(config, "heron", listen(ports["heron"]))
    processes.append(heron)
    heron.wait_for(lambda lines: any("takes over domain STOCK_EXCHANGE" in ln for ln in lines), "takeover")
    sent += during
    pump(members, lambda: len(news(alice)) >= len(sent), "the queued publishes flushed at heron")
    pump(members, lambda: not source.status().forward_warning, "the warning cleared")
    settle(members, 0.3)
    assert news(alice) == sent, "every publish once, in order: before via golan, the queued ones via heron"
    images = [p for s, f, p in alice.items if s == NEWS and f & Flags.IMAGE]
    assert len(images) == 2, f"golan's image, then heron's fresh one: {images}"
    assert feed.requested[1] == {NEWS}, "heron's own feed serves the domain"
    for closing in (alice_sub, source):
        closing.close()
    feed.close()


def test_sighup_reloads_the_cluster_block_a_bad_file_keeps_the_old_one_a_moved_master_is_followed(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "heron", "avalon")}
    bilbo = free_udp_port()
    config = tmp_path / "cluster.conf"
    config.write_text(failover_conf(ports))
    nodes = {node: start_node(config, node, listen(port)) for node, port in ports.items()}
    processes += nodes.values()
    node_source_up(nodes["heron"])
    node_source_up(nodes["avalon"])
    feed = ReplicatedFeed(client, [listen(ports["golan"]), listen(ports["heron"])])
    alice_sub = Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS)
    harry_sub = Subscriber(client, listen(ports["heron"]), name="harry", liveness_timeout=LIVENESS)
    alice, harry = Inbox(alice_sub), Inbox(harry_sub)
    alice_sub.subscribe(SUBJECT, alice)
    harry_sub.subscribe(SUBJECT, harry)
    members: list[Pollable] = [feed.poll, lambda: alice_sub.poll(256), lambda: harry_sub.poll(256)]
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(members, has_image(inbox, SUBJECT), f"{name}: the image from golan's feed")

    def knock(node: str) -> list[tuple[str, Flags, str]]:
        """What a subscriber named node:bilbo gets at ``node`` (refused, or an answer)."""
        stranger = Subscriber(client, listen(ports[node]), name=f"{NODE_NAME_PREFIX}bilbo", liveness_timeout=LIVENESS)
        inbox = Inbox(stranger)
        stranger.subscribe(SUBJECT, inbox)
        inbox.wait_for(lambda items: bool(items), f"an answer to node:bilbo at {node}")
        stranger.close()
        return inbox.items

    assert knock("avalon")[0][1] & Flags.REFUSED, "bilbo is not a node yet"

    # A bad file on SIGHUP: the error is logged with its place, the old configuration stays.
    good = failover_conf(ports, heron_master=True, bilbo=bilbo)
    bad_lines = good.splitlines()
    bad_lines.insert(1, "    service-name stock-again")  # the original, now line 3, repeats it
    config.write_text("\n".join(bad_lines) + "\n")
    for node in ("heron", "avalon"):
        os.kill(nodes[node].popen.pid, signal.SIGHUP)
    for node in ("heron", "avalon"):
        nodes[node].wait_for(
            lambda lines: (
                any(f"{config}:3:5: error: service-name given twice" in ln for ln in lines)
                and any("keeping the old configuration" in ln for ln in lines)
            ),
            f"{node}: the bad file's error and the old configuration kept",
        )
    for _ in range(BEFORE):
        feed.tick()
        settle(members, 0.005)
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(
            members,
            lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [feed.seq],
            f"{name}: still served by golan",
        )
    assert feed.requested[1] == set(), "nothing moved"
    assert knock("avalon")[0][1] & Flags.REFUSED, "the bad file did not add bilbo"

    # The good file: heron master of the domain, bilbo a new node. Every node re-reads it.
    marks = {"alice": len(alice.items), "harry": len(harry.items)}
    config.write_text(good)
    for process in nodes.values():
        os.kill(process.popen.pid, signal.SIGHUP)
    for name, process in nodes.items():
        process.wait_for(lambda lines: any("cluster configuration reloaded" in ln for ln in lines), f"{name} reloaded")
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(members, has_image(inbox, SUBJECT, marks[name]), f"{name}: a fresh image from heron's feed")
        moved_after(inbox, marks[name], name)
    assert SUBJECT in feed.requested[1], "heron's own feed serves the domain"
    for _ in range(AFTER):
        feed.tick()
        settle(members, 0.005)
    for name, inbox in (("alice", alice), ("harry", harry)):
        pump(
            members,
            lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [feed.seq],
            f"{name}: the last update",
        )
    settle(members, 0.3)
    for name, inbox in (("alice", alice), ("harry", harry)):
        seen = check_feed(inbox, name)
        assert seen == sorted(set(seen)) and seen[-1] == feed.seq, f"{name}: in order, once, to the last"
    assert not knock("avalon")[0][1] & Flags.REFUSED, "bilbo is let in after the reload"
    golan_lines = nodes["golan"].snapshot()
    assert any("hands domain STOCK_EXCHANGE to heron" in line for line in golan_lines), golan_lines[-10:]
    for closing in (alice_sub, harry_sub):
        closing.close()
    feed.close()


def test_a_reload_moves_a_domains_master_to_a_node_that_is_no_backup_and_the_old_master_follows(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "heron", "avalon")}

    def moved_conf(master: str) -> str:
        nodes = "".join(
            conf.node(node, listen(port), *(("master-of STOCK_EXCHANGE",) if node == master else ()))
            for node, port in ports.items()
        )
        return conf.data_service("stock", "^/STOCK/", FEED) + nodes + conf.domain("STOCK_EXCHANGE", "^/STOCK/")

    config = tmp_path / "cluster.conf"
    config.write_text(moved_conf("golan"))
    nodes = {node: start_node(config, node, listen(port)) for node, port in ports.items()}
    processes += nodes.values()
    node_source_up(nodes["heron"])
    node_source_up(nodes["avalon"])
    feed = ReplicatedFeed(client, [listen(ports["golan"]), listen(ports["heron"])])
    subscribers = {
        name: Subscriber(client, listen(ports[node]), name=name, liveness_timeout=LIVENESS)
        for name, node in (("alice", "avalon"), ("harry", "heron"), ("gus", "golan"))
    }
    inboxes = {name: Inbox(subscriber) for name, subscriber in subscribers.items()}
    for name, subscriber in subscribers.items():
        subscriber.subscribe(SUBJECT, inboxes[name])
    members: list[Pollable] = [feed.poll, *(lambda s=s: s.poll(256) for s in subscribers.values())]
    for name, inbox in inboxes.items():
        pump(members, has_image(inbox, SUBJECT), f"{name}: the image from golan's feed")
    assert feed.requests == [[SUBJECT], []], "golan's feed alone serves the domain"

    # heron, no backup of golan's, becomes the master; every node re-reads the file.
    marks = {name: len(inbox.items) for name, inbox in inboxes.items()}
    config.write_text(moved_conf("heron"))
    for process in nodes.values():
        os.kill(process.popen.pid, signal.SIGHUP)
    for name, process in nodes.items():
        process.wait_for(lambda lines: any("cluster configuration reloaded" in ln for ln in lines), f"{name} reloaded")
    taken = "takes over domain STOCK_EXCHANGE (the reloaded configuration makes this node its master)"
    nodes["heron"].wait_for(lambda lines: any(taken in ln for ln in lines), "heron taking the domain")
    nodes["golan"].wait_for(lambda lines: any("hands domain STOCK_EXCHANGE to heron" in ln for ln in lines), "handed")
    for name in ("alice", "harry"):
        pump(members, has_image(inboxes[name], SUBJECT, marks[name]), f"{name}: a fresh image from heron's feed")
        moved_after(inboxes[name], marks[name], name)
    assert feed.requests[1] == [SUBJECT], "heron's own feed serves the domain"
    # At golan, the subject it serves from its own feed stays there; a new one goes to heron.
    fresh = "/STOCK/FRESH"
    gina = Inbox(subscribers["gus"])
    subscribers["gus"].subscribe(fresh, gina)
    pump(members, lambda: any(s == fresh and f & Flags.IMAGE for s, f, _ in gina.items), "gus: the new subject")
    assert feed.requests == [[SUBJECT], [SUBJECT, fresh]], "the new subject asked of heron's feed only"
    for _ in range(AFTER):
        feed.tick()
        settle(members, 0.005)
    for name, inbox in inboxes.items():
        pump(members, lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [feed.seq], f"{name}: the last")
    settle(members, 0.3)
    for name, inbox in inboxes.items():
        seen = check_feed(inbox, name)
        assert seen == sorted(set(seen)) and seen[-1] == feed.seq, f"{name}: in order, once, to the last"
    assert not [ln for ln in nodes["heron"].snapshot() if "restart it" in ln]
    for subscriber in subscribers.values():
        subscriber.close()
    feed.close()


def test_links_follow_the_backup_order_and_only_a_masters_backups_take_over(tmp_path: Path) -> None:
    ports = {"golan": 1, "heron": 2, "avalon": 3}
    text = failover_conf(ports).replace("    backup-node heron\n", "    backup-node heron\n    backup-node avalon\n")
    analysis = analyse_router_text(text, "cluster.conf")
    assert not analysis.errors, analysis.diagnostics
    cluster = analysis.config.cluster
    assert cluster is not None
    assert failover_order(cluster, "golan") == ("golan", "heron", "avalon")
    # A backup's links stop before itself; another node's go through the whole order.
    assert link_order(cluster, "heron", "golan") == ("golan",)
    assert link_order(cluster, "avalon", "golan") == ("golan", "heron")
    assert link_routers(cluster, "avalon", "golan") == [listen(1), listen(2)]
    assert takeover_domains(cluster, "heron") == {"STOCK_EXCHANGE": ("golan",)}
    assert takeover_domains(cluster, "avalon") == {"STOCK_EXCHANGE": ("golan", "heron")}
    assert takeover_domains(cluster, "golan") == {}, "a master takes over nothing"
    # The backups' routers serve the domain from the node's source, then from their own feed.
    for node in ("heron", "avalon"):
        services = cluster_router_config(analysis.config, node).routing.data_services
        slave = _service(services, "cluster-STOCK_EXCHANGE")
        names = [group.names for group in slave.source_groups[0].priority_groups]
        assert names == [("cluster.STOCK_EXCHANGE",), (FEED,)], node
    assert fallback_domains(cluster_router_config(analysis.config, "heron").routing.data_services) == {"STOCK_EXCHANGE"}
    # Without backup-node nobody takes over; a slave's service keeps its own feed behind the
    # node's source all the same (a reload may make it the master).
    plain = analyse_router_text(failover_conf(ports).replace("    backup-node heron\n", ""), "cluster.conf")
    assert plain.config.cluster is not None
    assert takeover_domains(plain.config.cluster, "heron") == {}
    services = cluster_router_config(plain.config, "heron").routing.data_services
    slave = _service(services, "cluster-STOCK_EXCHANGE")
    assert [g.names for g in slave.source_groups[0].priority_groups] == [("cluster.STOCK_EXCHANGE",), (FEED,)]
    assert fallback_domains(services) == {"STOCK_EXCHANGE"}
    # Without a data service of its own for the domain a node has no fallback.
    bare = analyse_router_text(failover_conf(ports).replace("^/STOCK/", "^/BONDS/", 1), "cluster.conf")
    assert bare.config.cluster is not None
    assert fallback_domains(cluster_router_config(bare.config, "heron").routing.data_services) == set()


def _service(services: tuple[DataService, ...], name: str) -> DataService:
    """The data service ``name`` among a router's (the node adds its own in front)."""
    return next(service for service in services if service.name == name)


def test_a_reload_file_with_errors_or_without_the_node_is_refused_with_its_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "cluster.conf"
    ports = {"golan": 1, "heron": 2, "avalon": 3}
    config.write_text(failover_conf(ports).replace("backup-node heron", "backup-node frodo"))
    with caplog.at_level(logging.WARNING, logger="affinity.cluster"):
        assert read_reload(str(config), "avalon") is None
    assert any(
        f"{config}:" in r.getMessage() and "backup-node 'frodo': no such" in r.getMessage() for r in caplog.records
    )
    assert "keeping the old configuration" in caplog.records[-1].getMessage()
    caplog.clear()
    config.write_text(failover_conf(ports))
    with caplog.at_level(logging.WARNING, logger="affinity.cluster"):
        assert read_reload(str(config), "bilbo") is None, "a file that no longer configures this node"
        assert read_reload(str(tmp_path / "missing.conf"), "avalon") is None
    assert "does not configure node bilbo" in caplog.records[0].getMessage()
    assert "cannot read" in caplog.records[1].getMessage()
    reloaded = read_reload(str(config), "avalon")
    assert reloaded is not None and reloaded.masters("STOCK_EXCHANGE") == ("golan",)


def test_a_master_restarted_after_a_takeover_defers_to_the_backup_so_one_node_serves_the_domain(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    ports = {node: free_udp_port() for node in ("golan", "heron", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(failover_conf(ports))
    nodes = {node: start_node(config, node, listen(port)) for node, port in ports.items()}
    processes += nodes.values()
    node_source_up(nodes["heron"])
    node_source_up(nodes["avalon"])
    # At a cold start golan hears heron is a slave (or nothing within the liveness timeout).
    nodes["golan"].wait_for(lambda lines: any("serves domain STOCK_EXCHANGE" in ln for ln in lines), "golan serves")
    feed = ReplicatedFeed(client, [listen(ports["golan"]), listen(ports["heron"])])
    subscribers = {
        "alice at avalon": Subscriber(client, listen(ports["avalon"]), name="alice", liveness_timeout=LIVENESS),
        "harry at heron": Subscriber(client, listen(ports["heron"]), name="harry", liveness_timeout=LIVENESS),
        "gus at golan": Subscriber(client, listen(ports["golan"]), name="gus", liveness_timeout=LIVENESS),
    }
    inboxes = {name: Inbox(subscriber) for name, subscriber in subscribers.items()}
    for name, subscriber in subscribers.items():
        subscriber.subscribe(SUBJECT, inboxes[name])
        subscriber.subscribe(NEWS, inboxes[name])
    source = Source(client, listen(ports["avalon"]), PUBLISHER, liveness_timeout=LIVENESS)
    members: list[Pollable] = [feed.poll, source.poll, *(lambda s=s: s.poll(256) for s in subscribers.values())]
    gus = inboxes["gus at golan"]
    for name, inbox in inboxes.items():
        pump(members, has_image(inbox, SUBJECT), f"{name}: the image from golan's feed")
    marks = {name: len(inbox.items) for name, inbox in inboxes.items()}
    nodes["golan"].kill()
    nodes["heron"].wait_for(lambda lines: any("takes over domain STOCK_EXCHANGE" in ln for ln in lines), "takeover")
    for name in ("alice at avalon", "harry at heron"):
        pump(members, has_image(inboxes[name], SUBJECT, marks[name]), f"{name}: heron's fresh image")

    # golan restarted: heron's node info says it serves the domain, so golan defers to it.
    asked = len(feed.requests[0])
    golan = start_node(config, "golan", listen(ports["golan"]))
    processes.append(golan)
    golan.wait_for(lambda lines: any("defers domain STOCK_EXCHANGE to heron" in ln for ln in lines), "deferral")
    # gus, subscribed at golan, restores his subscriptions there by himself: golan serves them
    # through heron (a STATUS, then heron's image).
    since = marks["gus at golan"]
    pump(members, lambda: has_image(gus, SUBJECT, since)() and has_image(gus, NEWS, since)(), "gus: through heron")
    moved_after(gus, since, "gus")
    pump(members, lambda: source.router_live and not source.status().forward_warning, "avalon forwards to heron")
    sent = [f"p{i}" for i in range(AFTER)]
    for payload in sent:
        feed.tick()
        assert source.publish(NEWS, payload.encode())
        settle(members, 0.01)
    for name, inbox in inboxes.items():
        pump(members, lambda inbox=inbox, name=name: check_feed(inbox, name)[-1:] == [feed.seq], f"{name}: the feed")
        pump(members, lambda inbox=inbox: news(inbox)[-1:] == sent[-1:], f"{name}: the publishes at avalon")
    settle(members, 0.3)
    for name, inbox in inboxes.items():
        seen = check_feed(inbox, name)  # after each image exactly the next updates, in order
        assert len(seen) == len(set(seen)) and seen[-AFTER:] == list(range(feed.seq - AFTER + 1, feed.seq + 1)), name
        assert news(inbox) == sent, f"{name}: every publish at avalon once, in order"
    assert len(feed.requests[0]) == asked, "golan's own feed was not asked: only heron serves the domain"
    assert not [ln for ln in golan.snapshot() if "serves domain" in ln or "takes over" in ln], golan.snapshot()

    # SIGHUP to golan: it serves the domain again; gus gets a STATUS and golan's fresh image.
    mark = len(gus.items)
    os.kill(golan.popen.pid, signal.SIGHUP)
    golan.wait_for(lambda lines: any("domain STOCK_EXCHANGE (the reloaded" in ln for ln in lines), "golan serves")
    pump(members, lambda: SUBJECT in feed.requests[0][asked:], "golan's feed asked again")
    pump(members, has_image(gus, SUBJECT, mark), "gus: golan's fresh image")
    moved_after(gus, mark, "gus")
    for _ in range(10):
        feed.tick()
        settle(members, 0.01)
    pump(members, lambda: check_feed(gus, "gus")[-1:] == [feed.seq], "gus: the feed from golan")
    for subscriber in subscribers.values():
        subscriber.close()
    source.close()
    feed.close()
