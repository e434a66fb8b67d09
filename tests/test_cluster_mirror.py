"""Mirrored masters and the slave cache's expiry (``docs/cluster.md``, "Cache expiry and
mirrored masters"), with router processes on loopback.

heron and hobbit are both master of RUGBY_NEWS, avalon a slave: successive subjects subscribed
at avalon are served by the masters in turn (the ``round-robin`` load balancer; which master
serves a subject is seen at the masters, by the requests their feeds get), and a publish or an
erase at avalon reaches both masters' subscribers (and avalon's own, once). A load balancer
plugin, named by ``package.module:attribute`` or by entry point, is what picks.

golan master of STOCK_EXCHANGE, avalon its slave with a short ``cache-expiry``: a subscriber
returning to avalon within the expiry is answered from avalon's cache (golan's feed is not asked
again and sees no DISCARD); past it avalon unsubscribes at golan.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import affinity
import cluster_conf as conf
import pytest
from affinity.subjects import Flags, Source, Subscriber
from affinity.testing import free_udp_port
from test_cluster_forward import Pollable, listen, pump, settle, status_of
from test_cluster_nodes import cluster_conf, start_node
from test_subjects_processes import LIVENESS, Inbox, Process

#: The label of the feed every master of RUGBY_NEWS has.
RUGBY_FEED = "rugby-feed"
#: The masters of RUGBY_NEWS, in configuration order.
MASTERS = ("heron", "hobbit")
#: Subjects subscribed one after the other at the slave.
SUBJECTS = tuple(f"/RUGBY/match-{i}" for i in range(6))
#: The subject published at the slave.
NEWS = "/RUGBY/news"
#: Updates published at the slave.
PUBLISHES = 50


def mirror_conf(ports: dict[str, int], balancer: str | None = None, queue: str | None = None) -> str:
    return (
        conf.settings(load_balancer=balancer, forward_queue=queue)
        + conf.data_service("rugby", "^/RUGBY/", RUGBY_FEED)
        + conf.node("heron", conf.loopback(ports["heron"]), "master-of RUGBY_NEWS")
        + conf.node("hobbit", conf.loopback(ports["hobbit"]), "master-of RUGBY_NEWS")
        + conf.node("avalon", conf.loopback(ports["avalon"]))
        + conf.domain("RUGBY_NEWS", "^/RUGBY/")
    )


def start_mirrored(
    processes: list[Process],
    tmp_path: Path,
    nodes: tuple[str, ...] = (*MASTERS, "avalon"),
    queue: str | None = None,
    start: Callable[[Path, str, str], Process] = start_node,
) -> tuple[Path, dict[str, str], dict[str, Process]]:
    """Writes :func:`mirror_conf` (heron, hobbit, avalon) and starts ``nodes`` with ``start``;
    returns the file, every node's listen channel and the processes started."""
    ports = {node: free_udp_port() for node in (*MASTERS, "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(mirror_conf(ports, queue=queue))
    listens = {node: listen(port) for node, port in ports.items()}
    started = {node: start(config, node, listens[node]) for node in nodes}
    processes.extend(started.values())
    return config, listens, started


class Feed:
    """A master's feed: answers each request with the image ``<master>:<subject>``."""

    def __init__(self, client: affinity.Client, master: str, router: str) -> None:
        self.master = master
        self.source = Source(client, router, RUGBY_FEED, liveness_timeout=LIVENESS)
        self.requests: list[str] = []
        self.source.on_request(self._request)

    def _request(self, subject: str) -> None:
        self.requests.append(subject)
        self.source.publish(subject, f"{self.master}:{subject}".encode(), image=True)

    def poll(self) -> None:
        self.source.poll(64)


def start_mirror(
    client: affinity.Client, processes: list[Process], tmp_path: Path, balancer: str | None = None
) -> tuple[dict[str, str], dict[str, Feed]]:
    ports = {node: free_udp_port() for node in (*MASTERS, "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(mirror_conf(ports, balancer))
    listens = {node: listen(port) for node, port in ports.items()}
    for node in (*MASTERS, "avalon"):
        processes.append(start_node(config, node, listens[node]))
    chosen_by = f"load-balancer {balancer or 'round-robin'}"
    said = f"domain RUGBY_NEWS: slave of heron, hobbit, mirrored masters chosen by {chosen_by}"
    assert any(said in line for line in processes[-1].snapshot()), processes[-1].snapshot()
    feeds = {master: Feed(client, master, listens[master]) for master in MASTERS}
    return listens, feeds


def subscribe_in_turn(
    subscriber: Subscriber, inbox: Inbox, feeds: dict[str, Feed], members: list[Pollable]
) -> dict[str, str]:
    """Subscribes :data:`SUBJECTS` one after the other at the slave (each once its image came);
    returns which master's feed was asked for each."""
    served: dict[str, str] = {}
    for subject in SUBJECTS:
        subscriber.subscribe(subject, inbox)
        pump(
            members,
            lambda subject=subject: any(s == subject and f & Flags.IMAGE for s, f, _ in inbox.items),
            f"the image of {subject} at avalon",
        )
        asked = [master for master, feed in feeds.items() if subject in feed.requests]
        assert len(asked) == 1, f"{subject}: asked of {asked}, not of one master"
        served[subject] = asked[0]
        image = next(p for s, f, p in inbox.items if s == subject and f & Flags.IMAGE)
        assert image == f"{asked[0]}:{subject}", "the image comes from the master that was asked"
    return served


def test_subscriptions_alternate_between_mirrored_masters_and_a_publish_reaches_both(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    listens, feeds = start_mirror(client, processes, tmp_path)
    alice_sub = Subscriber(client, listens["avalon"], name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(alice_sub)
    members: list[Pollable] = [*(feed.poll for feed in feeds.values()), lambda: alice_sub.poll(256)]

    served = subscribe_in_turn(alice_sub, alice, feeds, members)
    order = [served[subject] for subject in SUBJECTS]
    assert all(a != b for a, b in itertools.pairwise(order)), f"round-robin alternates: {order}"
    assert sorted(order) == sorted(MASTERS * (len(SUBJECTS) // 2))
    settle(members, 0.2)
    for master, feed in feeds.items():
        assert feed.requests == [s for s in SUBJECTS if served[s] == master], f"{master} asked once per subject"

    # A publish (and an erase) at the slave goes to both masters: each one's own subscriber
    # gets every update once, in order; the slave's subscriber once (from the master it asked).
    subscribers = {"avalon": alice_sub}
    inboxes = {"avalon": alice}
    for master in MASTERS:
        subscribers[master] = Subscriber(client, listens[master], name=f"at-{master}", liveness_timeout=LIVENESS)
        inboxes[master] = Inbox(subscribers[master])
        members.append(lambda subscriber=subscribers[master]: subscriber.poll(256))
    for name, subscriber in subscribers.items():
        subscriber.subscribe(NEWS, inboxes[name])
    for name, inbox in inboxes.items():
        pump(members, lambda inbox=inbox: any(s == NEWS for s, _, _ in inbox.items), f"the image of {NEWS} at {name}")
    source = Source(client, listens["avalon"], "rugby-publisher", liveness_timeout=LIVENESS)
    members.append(lambda: source.poll(64))
    pump(members, lambda: source.router_live, "avalon heard the publisher")
    # The first publish opens avalon's links to both masters: it is queued until they are heard.
    source.publish(NEWS, b"news-image", image=True)
    sent = [f"n{i}" for i in range(PUBLISHES)]
    for payload in sent:
        assert source.publish(NEWS, payload.encode()), "accepted (the queue is far from its bound)"
        source.poll(16)

    def news_updates(inbox: Inbox) -> list[str]:
        return [p for s, f, p in inbox.items if s == NEWS and f & Flags.UPDATE]

    for name, inbox in inboxes.items():
        pump(members, lambda inbox=inbox: len(news_updates(inbox)) >= PUBLISHES, f"every publish at {name}")
    settle(members, 0.3)
    for name, inbox in inboxes.items():
        assert news_updates(inbox) == sent, f"{name}: every update once, in order"
        images = [p for s, f, p in inbox.items if s == NEWS and f & Flags.IMAGE]
        assert images[1:] == ["news-image"] and images[0].endswith(f":{NEWS}"), f"{name}: {images}"

    source.erase(NEWS)
    for name, inbox in inboxes.items():
        pump(members, lambda inbox=inbox: any(s == NEWS and f & Flags.ERASE for s, f, _ in inbox.items), name)
    settle(members, 0.2)
    for name, inbox in inboxes.items():
        assert sum(1 for s, f, _ in inbox.items if s == NEWS and f & Flags.ERASE) == 1, f"{name}: one erase"
    for subscriber in subscribers.values():
        subscriber.close()
    source.close()


def publish_past_a_dead_mirror(source: Source, subject: str, members: list[Pollable]) -> list[bytes]:
    """Publishes 100 updates of 4 KiB of ``subject`` while a mirrored master is dead: its 64 KiB
    queue holds about 15, past it the queue is dropped (a live master takes every one), so each
    is accepted, never refused; returns them."""
    payloads = [f"u{i}:".encode() + bytes(4096) for i in range(100)]
    for index, payload in enumerate(payloads):
        assert source.publish(subject, payload), f"publish {index} refused: {source.status()}"
        settle(members, 0.01)
    return payloads


def restart_hobbit(
    client: affinity.Client,
    processes: list[Process],
    config: Path,
    hobbit: str,
    source: Source,
    subject: str,
    members: list[Pollable],
) -> tuple[Subscriber, Inbox, list[str]]:
    """Starts hobbit again (listening on ``hobbit``) and subscribes to ``subject`` there (polled
    with ``members``); returns the subscriber, its inbox and the subjects ``source`` is asked a
    fresh image of (``FORWARD_RESYNC``, recorded from now on)."""
    resync: list[str] = []
    source.on_forward_resync(resync.append)
    processes.append(start_node(config, "hobbit", hobbit))
    subscriber = Subscriber(client, hobbit, name="at-hobbit-again", liveness_timeout=LIVENESS)
    inbox = Inbox(subscriber)
    subscriber.subscribe(subject, inbox)
    members.append(lambda: subscriber.poll(256))
    return subscriber, inbox, resync


def forwarded_counts(shown: str, master: str) -> dict[str, int]:
    """The forward counters ``affinity router status`` prints for ``master``."""
    line = next(line for line in shown.splitlines() if f"forwarded to {master}:" in line)
    figures = line.split(":", 1)[1].split(" (")[0]
    return {name: int(value) for name, value in (pair.split() for pair in figures.split(", "))}


def test_a_dead_mirrors_queue_past_its_bound_is_dropped_and_counted_while_the_live_master_takes_every_publish(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    config, listens, started = start_mirrored(processes, tmp_path, queue="64K")
    avalon = started["avalon"]
    feeds = {master: Feed(client, master, listens[master]) for master in MASTERS}
    gina_sub = Subscriber(client, listens["heron"], name="gina", liveness_timeout=LIVENESS)
    gina = Inbox(gina_sub)
    gina_sub.subscribe(NEWS, gina)
    source = Source(client, listens["avalon"], "rugby-publisher", liveness_timeout=LIVENESS)
    members: list[Pollable] = [*(feed.poll for feed in feeds.values()), lambda: gina_sub.poll(256), source.poll]

    def news(inbox: Inbox, flag: Flags) -> list[str]:
        return [p for s, f, p in inbox.items if s == NEWS and f & flag]

    def logged(text: str) -> list[str]:
        return [line for line in avalon.snapshot() if text in line]

    pump(members, lambda: news(gina, Flags.IMAGE) == ["heron:/RUGBY/news"], "heron's image at heron")
    pump(members, lambda: source.router_live, "avalon heard the source")
    source.publish(NEWS, b"warm-up", image=True)
    pump(members, lambda: "warm-up" in news(gina, Flags.IMAGE) and not source.status().forward_warning, "warm-up")

    started["hobbit"].kill()
    settle(members, 2 * LIVENESS)
    payloads = publish_past_a_dead_mirror(source, NEWS, members)
    total = len(payloads)
    pump(members, lambda: len(news(gina, Flags.UPDATE)) >= total, "every update at heron")
    settle(members, 0.3)
    status = source.status()
    assert status.forward_refused == 0 and not status.back_pressured, status
    assert not status.forward_warning, "nothing of the source is queued once hobbit's queue was dropped"
    assert news(gina, Flags.UPDATE) == [p.decode() for p in payloads], "heron: every update once, in order"
    drops = logged("its queue of")
    assert len(drops) == 1 and "mirrored master hobbit unreachable past forward-queue" in drops[0], drops
    shown = status_of(config, "avalon", members)
    hobbit_line = next(line for line in shown.splitlines() if "forwarded to hobbit:" in line)
    assert hobbit_line.endswith("(stale: its queue was dropped)"), shown
    at_hobbit, at_heron = forwarded_counts(shown, "hobbit"), forwarded_counts(shown, "heron")
    dropped = at_hobbit["dropped"]
    assert total - 20 <= dropped <= total and at_hobbit["refused"] == 0, f"hobbit's publishes dropped: {shown}"
    assert at_heron["sent"] + at_heron["flushed"] == total + 1 and at_heron["dropped"] == 0, shown

    # hobbit restarted: avalon marks it back once its link settled and asks the source for a
    # fresh image of what hobbit missed; hobbit serves again and gets what is published from
    # then on, once, in order.
    hugo_sub, hugo, resync = restart_hobbit(client, processes, config, listens["hobbit"], source, NEWS, members)
    pump(members, lambda: bool(news(hugo, Flags.IMAGE)), "an image at the restarted hobbit")
    pump(members, lambda: bool(logged("mirrored master hobbit reachable again")), "avalon saw hobbit back")
    back = logged("mirrored master hobbit reachable again")
    assert len(back) == 1 and f"{dropped} publishes made while its queue was dropped" in back[0], back
    assert "1 sources' subjects asked for a fresh image (0 more not listed)" in back[0], back
    pump(members, lambda: resync == [NEWS], "the source asked for a fresh image of what hobbit missed")
    assert not source.status().forward_warning and source.status().forward_refused == 0, source.status()
    assert source.publish(NEWS, b"fresh-image", image=True)
    pump(members, lambda: "fresh-image" in news(hugo, Flags.IMAGE), "the fresh image at hobbit")
    later = [f"v{i}" for i in range(20)]
    for payload in later:
        assert source.publish(NEWS, payload.encode())
        settle(members, 0.005)
    pump(members, lambda: len(news(hugo, Flags.UPDATE)) >= len(later), "the later updates at hobbit")
    pump(members, lambda: len(news(gina, Flags.UPDATE)) >= total + len(later), "the later updates at heron")
    settle(members, 0.3)
    assert news(hugo, Flags.UPDATE) == later, "hobbit: the later updates once, in order"
    assert news(hugo, Flags.IMAGE) == ["hobbit:/RUGBY/news", "fresh-image"], "hobbit's feed's, then the fresh one"
    assert news(gina, Flags.UPDATE)[total:] == later, "heron: the later updates once, in order"
    shown = status_of(config, "avalon", members)
    assert "stale" not in next(line for line in shown.splitlines() if "forwarded to hobbit:" in line), shown
    for closing in (gina_sub, hugo_sub, source):
        closing.close()


#: A load balancer plugin: always the last candidate, each call written to ``$BALANCER_LOG``.
PLUGIN = """\
import itertools
import json
import subprocess
import sys
import os


class LastMaster:
    def select(self, composite, candidates):
        with open(os.environ["BALANCER_LOG"], "a") as log:
            log.write(json.dumps([composite, list(candidates)]) + "\\n")
        return candidates[-1]
"""


@pytest.mark.parametrize("spec", ["mirror_balancer:LastMaster", "last-master"], ids=["path", "entry-point"])
def test_a_load_balancer_plugin_picks_the_master(
    client: affinity.Client,
    processes: list[Process],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spec: str,
) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "mirror_balancer.py").write_text(PLUGIN)
    info = plugins / "mirror_balancer-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mirror-balancer\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[affinity.policies]\nlast-master = mirror_balancer:LastMaster\n")
    log = tmp_path / "balancer.log"
    monkeypatch.setenv("PYTHONPATH", str(plugins))
    monkeypatch.setenv("BALANCER_LOG", str(log))
    listens, feeds = start_mirror(client, processes, tmp_path, balancer=spec)
    alice_sub = Subscriber(client, listens["avalon"], name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(alice_sub)
    members: list[Pollable] = [*(feed.poll for feed in feeds.values()), lambda: alice_sub.poll(256)]
    served = subscribe_in_turn(alice_sub, alice, feeds, members)
    assert set(served.values()) == {MASTERS[-1]}, f"the plugin picks the last master: {served}"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [subject for subject, _ in calls] == list(SUBJECTS), "asked once per subject, in order"
    assert all(sorted(candidates) == sorted(MASTERS) for _, candidates in calls), calls
    alice_sub.close()


#: The slave's cache-expiry, seconds: long enough for a returning subscriber on a loaded machine.
EXPIRY = 5.0


def expiry_conf(golan: int, avalon: int) -> str:
    return conf.settings(cache_expiry=f"{int(EXPIRY * 1000)}ms") + cluster_conf(golan, avalon)


def test_a_slave_keeps_a_subject_for_cache_expiry_after_its_last_subscriber_then_unsubscribes(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    subject = "/STOCK/IBM"
    ports = {node: free_udp_port() for node in ("golan", "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(expiry_conf(ports["golan"], ports["avalon"]))
    listens = {node: listen(port) for node, port in ports.items()}
    for node in ("golan", "avalon"):
        processes.append(start_node(config, node, listens[node]))
    feed = Source(client, listens["golan"], "stock-feed", liveness_timeout=LIVENESS)
    requests: list[str] = []
    discards: list[float] = []
    feed.on_request(requests.append)
    feed.on_discard(lambda _subject: discards.append(time.monotonic()))
    members: list[Pollable] = [lambda: feed.poll(64)]

    def visit(name: str, expect_image: str, *, update: str | None = None) -> float:
        """A subscriber at avalon: gets ``expect_image`` (and ``update``), leaves; returns when."""
        subscriber = Subscriber(client, listens["avalon"], name=name, liveness_timeout=LIVENESS)
        inbox = Inbox(subscriber)
        subscriber.subscribe(subject, inbox)
        poll: Callable[[], object] = lambda: subscriber.poll(256)  # noqa: E731
        pump([*members, poll], lambda: any(f & Flags.IMAGE for _, f, _ in inbox.items), f"{name}'s image")
        if update is not None:
            feed.publish(subject, update.encode())
            pump([*members, poll], lambda: any(f & Flags.UPDATE for _, f, _ in inbox.items), f"{name}'s update")
        settle([*members, poll], 0.1)
        images = [p for _, f, p in inbox.items if f & Flags.IMAGE]
        assert images == [expect_image], f"{name}: {inbox.items}"
        assert [p for _, f, p in inbox.items if f & Flags.UPDATE] == ([] if update is None else [update]), name
        subscriber.unsubscribe(subject)
        left = time.monotonic()
        subscriber.close()
        return left

    # The first subscriber: avalon subscribes at golan, whose feed is asked.
    pump(members, lambda: feed.router_live, "golan heard the feed")
    first = Subscriber(client, listens["avalon"], name="alice", liveness_timeout=LIVENESS)
    alice = Inbox(first)
    first.subscribe(subject, alice)
    pump([*members, lambda: first.poll(256)], lambda: bool(requests), "golan asked its feed")
    feed.publish(subject, b"image-0", image=True)
    pump([*members, lambda: first.poll(256)], lambda: bool(alice.items), "alice's image")
    first.unsubscribe(subject)
    first.close()
    # While nobody at avalon holds it, golan's feed gives a new image: avalon, still subscribed
    # at golan, keeps its cache current.
    feed.publish(subject, b"image-1", image=True)
    settle(members, 0.3)
    left = visit("bob", "image-1", update="u-1")
    assert requests == [subject], "bob was answered from avalon's cache: golan's feed asked once"
    assert not discards, "avalon kept its subscription at golan"

    # Past the expiry avalon unsubscribes at golan: the feed gets the DISCARD, not before.
    pump(members, lambda: bool(discards), "the DISCARD after the expiry", timeout=EXPIRY + 10)
    assert discards[0] - left >= EXPIRY * 0.9, f"discarded {discards[0] - left:.2f} s after bob left"
    # A new subscriber: avalon asks golan again (golan asks its feed again).
    carol = Subscriber(client, listens["avalon"], name="carol", liveness_timeout=LIVENESS)
    inbox = Inbox(carol)
    carol.subscribe(subject, inbox)
    pump([*members, lambda: carol.poll(256)], lambda: len(requests) == 2, "golan asked again")
    feed.publish(subject, b"image-2", image=True)
    pump([*members, lambda: carol.poll(256)], lambda: bool(inbox.items), "carol's image")
    assert [p for _, f, p in inbox.items if f & Flags.IMAGE] == ["image-2"]
    carol.close()
    feed.close()


def test_a_load_balancer_plugin_that_cannot_be_loaded_stops_the_node_at_start_saying_why(tmp_path: Path) -> None:
    ports = {node: free_udp_port() for node in (*MASTERS, "avalon")}
    config = tmp_path / "cluster.conf"
    config.write_text(mirror_conf(ports, "no_such_balancer_module:Pick"))
    command = [sys.executable, "-m", "affinity.cli", "router", "--config", str(config), "--node", "avalon"]
    done = subprocess.run(
        [*command, "--listen", listen(ports["avalon"])], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0, done.stderr
    assert "module 'no_such_balancer_module' not found" in done.stderr, done.stderr
    assert "listening on" not in done.stderr


class StreamFeed:
    """:data:`RUGBY_FEED` at both masters with one numbering of updates: every requested
    subject gets update n at whichever master requested it; a request is answered with the
    image ``<master>:image:<last update>``. So after an image ``...:image:n`` exactly n+1, n+2 ...
    are due (none lost, none repeated, in order)."""

    def __init__(self, client: affinity.Client, listens: dict[str, str], liveness: float) -> None:
        self.seq = 0
        self.sources = {m: Source(client, listens[m], RUGBY_FEED, liveness_timeout=liveness) for m in MASTERS}
        self.requested: dict[str, set[str]] = {m: set() for m in MASTERS}
        self.requests: dict[str, list[str]] = {m: [] for m in MASTERS}
        for master, source in self.sources.items():
            source.on_request(self._request(master))
            source.on_discard(self.requested[master].discard)

    def _request(self, master: str) -> Callable[[str], None]:
        def request(subject: str) -> None:
            self.requested[master].add(subject)
            self.requests[master].append(subject)
            self.sources[master].publish(subject, f"{master}:image:{self.seq}".encode(), image=True)

        return request

    def tick(self) -> None:
        self.seq += 1
        for master, source in self.sources.items():
            for subject in sorted(self.requested[master]):
                source.publish(subject, str(self.seq).encode())

    def poll(self) -> None:
        for source in self.sources.values():
            source.poll(64)


def stream_of(inbox: Inbox, subject: str) -> list[tuple[Flags, str]]:
    return [(f, p) for s, f, p in inbox.items if s == subject]


def has_image(inbox: Inbox, subject: str) -> Callable[[], bool]:
    return lambda: any(s == subject and f & Flags.IMAGE for s, f, _ in inbox.items)


def check_stream(inbox: Inbox, subject: str) -> list[int]:
    """After every image of ``subject`` exactly the next updates, in order; returns them."""
    expected: int | None = None
    seen: list[int] = []
    for flags, payload in stream_of(inbox, subject):
        if flags & Flags.IMAGE:
            expected = int(payload.rsplit(":", 1)[1]) + 1
        elif flags & Flags.UPDATE:
            assert expected is not None, f"{subject}: an update before any image"
            assert int(payload) == expected, f"{subject}: update {payload} where {expected} was due"
            seen.append(int(payload))
            expected += 1
    return seen


def test_a_mirrored_master_killed_is_no_longer_picked_and_its_subscriptions_move_to_a_live_one(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    from test_cluster_failover import LIVENESS as NODE_LIVENESS
    from test_cluster_failover import start_node as start_slow_node

    config, listens, nodes = start_mirrored(processes, tmp_path, start=start_slow_node)
    feed = StreamFeed(client, listens, NODE_LIVENESS)
    alice_sub = Subscriber(client, listens["avalon"], name="alice", liveness_timeout=NODE_LIVENESS)
    gina_sub = Subscriber(client, listens["heron"], name="gina", liveness_timeout=NODE_LIVENESS)
    alice, gina = Inbox(alice_sub), Inbox(gina_sub)
    source = Source(client, listens["avalon"], "rugby-publisher", liveness_timeout=NODE_LIVENESS)
    members: list[Pollable] = [feed.poll, lambda: alice_sub.poll(256), lambda: gina_sub.poll(256), source.poll]
    pump(members, lambda: all(s.router_live for s in feed.sources.values()), "both masters heard their feed")
    first, second = SUBJECTS[:2]
    for subject in (first, second):
        alice_sub.subscribe(subject, alice)
        pump(members, has_image(alice, subject), f"the image of {subject} at avalon")
    at = {subject: next(m for m in MASTERS if subject in feed.requests[m]) for subject in (first, second)}
    assert sorted(at.values()) == sorted(MASTERS), f"round-robin: one subject at each master: {at}"
    doomed = next(s for s in (first, second) if at[s] == "hobbit")
    gina_sub.subscribe(NEWS, gina)
    pump(members, lambda: has_image(gina, NEWS)() and source.router_live, "gina's news image, the publisher")
    source.publish(NEWS, b"news-image", image=True)
    pump(
        members,
        lambda: not source.status().forward_warning and (Flags.IMAGE, "news-image") in stream_of(gina, NEWS),
        "the links to both masters",
    )
    for _ in range(20):
        feed.tick()
        settle(members, 0.01)
    pump(members, lambda: check_stream(alice, doomed)[-1:] == [feed.seq], "alice: the stream from hobbit")
    mark = len(alice.items)

    # SIGKILL hobbit mid-stream: avalon's subscription moves to heron (a STATUS, heron's fresh
    # image, then heron's updates once each, in order).
    nodes["hobbit"].kill()
    killed_at = time.monotonic()
    while not any(s == doomed and f & Flags.IMAGE for s, f, _ in alice.items[mark:]):
        assert time.monotonic() - killed_at < 10 * NODE_LIVENESS, f"no move of {doomed}: {alice.items[mark:][-5:]}"
        feed.tick()
        settle(members, 0.02)
    moved_in = time.monotonic() - killed_at
    after = [(f, p) for s, f, p in alice.items[mark:] if s == doomed]
    statuses = [i for i, (f, _) in enumerate(after) if f & Flags.STATUS]
    images = [p for f, p in after if f & Flags.IMAGE]
    assert statuses and statuses[0] < next(i for i, (f, _) in enumerate(after) if f & Flags.IMAGE), after[:5]
    # The link's own STATUS (hobbit lost) may come first; the move's says where it went.
    assert any("moved from node hobbit to node heron" in after[i][1] for i in statuses), after[:5]
    assert len(images) == 1 and images[0].startswith("heron:image:"), f"one fresh image from heron: {images}"
    assert doomed in feed.requests["heron"], "heron's feed was asked for the moved subject"
    nodes["avalon"].wait_for(lambda lines: any("mirrored master hobbit silent" in ln for ln in lines), "noticed")

    # While hobbit is down: publishes at avalon reach heron's subscriber (and avalon's own),
    # new subjects go to heron only.
    sent = [f"n{i}" for i in range(30)]
    for payload in sent:
        feed.tick()
        assert source.publish(NEWS, payload.encode()), "queued for hobbit, sent to heron"
        settle(members, 0.01)
    # (heron's feed streams NEWS to gina too: the publishes at avalon are the n<i>.)
    pump(members, lambda: [p for f, p in stream_of(gina, NEWS) if p[0] == "n" and f & Flags.UPDATE] == sent, "gina")
    for subject in SUBJECTS[2:4]:
        alice_sub.subscribe(subject, alice)
        pump(members, has_image(alice, subject), f"the image of {subject}")
        assert subject in feed.requests["heron"] and subject not in feed.requests["hobbit"], subject
    pump(members, lambda: check_stream(alice, doomed)[-1:] == [feed.seq], "alice: the stream from heron")
    seen = check_stream(alice, doomed)
    image_at = int(images[0].rsplit(":", 1)[1])
    assert seen[-(feed.seq - image_at) :] == list(range(image_at + 1, feed.seq + 1)), "every update after the image"
    assert len(seen) == len(set(seen)), "each update once"

    # hobbit back: picked again for new subjects (round-robin between both).
    nodes["hobbit"] = start_slow_node(config, "hobbit", listens["hobbit"])
    processes.append(nodes["hobbit"])
    nodes["avalon"].wait_for(lambda lines: any("mirrored master hobbit live again" in ln for ln in lines), "back")
    pump(members, lambda: feed.sources["hobbit"].router_live, "hobbit's feed registered again")
    for subject in SUBJECTS[4:6]:
        alice_sub.subscribe(subject, alice)
        pump(members, has_image(alice, subject), f"the image of {subject}")
    assert any(s in feed.requests["hobbit"] for s in SUBJECTS[4:6]), f"hobbit picked again: {feed.requests}"
    print(f"mirror failover: the subscription moved {moved_in:.2f} s after the kill (liveness {NODE_LIVENESS} s)")
    for closing in (alice_sub, gina_sub, source):
        closing.close()
