"""Mirrored masters kept in step (``docs/cluster.md``, "Mirrored masters kept in step"), with
router processes on loopback.

heron and hobbit are both master of RUGBY_NEWS, avalon a slave subscribed to one subject at
each master. A source at heron publishing reaches hobbit's subscribers and, through hobbit,
avalon's subscriber of the subject avalon asked hobbit for; the same from hobbit; a publish at
avalon, which goes to both masters, still reaches every subscriber once (a master never passes
on what another node sent it). hobbit SIGKILLed while heron's source publishes: heron queues for
hobbit, then drops that queue past ``forward-queue`` (heron itself takes every publish), and the
source is told as at a slave, never back-pressured.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import affinity
import cluster_conf as conf
from affinity.cluster_mirror import other_masters
from affinity.config.faucet import analyse_router_text
from affinity.subjects import Flags, Source, Subscriber
from test_cluster_forward import Pollable, pump, settle, status_of
from test_cluster_mirror import (
    MASTERS,
    Feed,
    forwarded_counts,
    publish_past_a_dead_mirror,
    restart_hobbit,
    start_mirrored,
)
from test_subjects_processes import LIVENESS, Inbox, Process

#: Two subjects subscribed one after the other at avalon: round robin puts one at each master.
SUBJECTS = ("/RUGBY/match-a", "/RUGBY/match-b")
#: Updates each source publishes per subject.
PUBLISHES = 40


def updates(inbox: Inbox, subject: str) -> list[str]:
    return [p for s, f, p in inbox.items if s == subject and f & Flags.UPDATE]


def images(inbox: Inbox, subject: str) -> list[str]:
    return [p for s, f, p in inbox.items if s == subject and f & Flags.IMAGE]


def publish_all(source: Source, prefix: str, members: list[Pollable]) -> list[str]:
    """An image, then :data:`PUBLISHES` updates of each of :data:`SUBJECTS`, interleaved;
    returns the updates (the same for each subject)."""
    sent = [f"{prefix}{i}" for i in range(PUBLISHES)]
    for subject in SUBJECTS:
        assert source.publish(subject, f"{prefix}-image".encode(), image=True)
    for payload in sent:
        for subject in SUBJECTS:
            assert source.publish(subject, payload.encode()), f"{payload} accepted: {source.status()}"
        settle(members, 0.002)
    return sent


def test_a_publish_at_one_master_reaches_the_other_masters_subscribers_and_slaves_once_in_order(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    config, listens, started = start_mirrored(processes, tmp_path)
    for master in MASTERS:
        other = next(m for m in MASTERS if m != master)
        said = f"publishes of RUGBY_NEWS here go to {other} too"
        started[master].wait_for(lambda lines, said=said: any(said in line for line in lines), said)
        role = f"domain RUGBY_NEWS: master, kept in step with {other} (stratum 0)"
        assert any(role in line for line in started[master].snapshot()), started[master].snapshot()
    feeds = {master: Feed(client, master, listens[master]) for master in MASTERS}
    members: list[Pollable] = [feed.poll for feed in feeds.values()]
    subscribers: dict[str, Subscriber] = {}
    inboxes: dict[str, Inbox] = {}
    for node in (*MASTERS, "avalon"):
        subscribers[node] = Subscriber(client, listens[node], name=f"at-{node}", liveness_timeout=LIVENESS)
        inboxes[node] = Inbox(subscribers[node])
        members.append(lambda subscriber=subscribers[node]: subscriber.poll(256))
    for subject in SUBJECTS:  # at avalon one after the other: round robin, one at each master
        subscribers["avalon"].subscribe(subject, inboxes["avalon"])
        pump(members, lambda subject=subject: bool(images(inboxes["avalon"], subject)), f"{subject} at avalon")
    served = {subject: images(inboxes["avalon"], subject)[0].split(":")[0] for subject in SUBJECTS}
    assert sorted(served.values()) == sorted(MASTERS), f"one subject at each master: {served}"
    for master in MASTERS:
        for subject in SUBJECTS:
            subscribers[master].subscribe(subject, inboxes[master])
    for name, inbox in inboxes.items():
        for subject in SUBJECTS:
            pump(members, lambda inbox=inbox, s=subject: bool(images(inbox, s)), f"the image of {subject} at {name}")

    expected: list[str] = []
    images_expected = []
    for origin in (*MASTERS, "avalon"):
        source = Source(client, listens[origin], f"publisher-at-{origin}", liveness_timeout=LIVENESS)
        members.append(lambda source=source: source.poll(64))
        pump(members, lambda source=source: source.router_live, f"{origin} heard its publisher")
        expected += publish_all(source, origin, members)
        images_expected.append(f"{origin}-image")
        count = len(expected)
        for name, inbox in inboxes.items():
            for subject in SUBJECTS:
                pump(
                    members,
                    lambda inbox=inbox, s=subject, n=count: len(updates(inbox, s)) >= n,
                    f"{origin}'s publishes of {subject} at {name}",
                )
        settle(members, 0.3)
        for name, inbox in inboxes.items():
            for subject in SUBJECTS:
                assert updates(inbox, subject) == expected, f"{name}, {subject}: every update once, in order"
                shown = images(inbox, subject)
                assert shown[1:] == images_expected, f"{name}, {subject}: the feed's image, then each source's"
        pump(members, lambda source=source: not source.status().forward_warning, f"{origin}'s queues flushed")
        assert source.status().forward_refused == 0, source.status()
        if origin == "heron":
            # An erase at a master reaches the other master's subscribers and its slaves too.
            for subject in SUBJECTS:
                assert source.erase(subject)
            for name, inbox in inboxes.items():
                for subject in SUBJECTS:
                    pump(
                        members,
                        lambda inbox=inbox, s=subject: any(x == s and f & Flags.ERASE for x, f, _ in inbox.items),
                        f"the erase of {subject} at {name}",
                    )
    settle(members, 0.3)
    for name, inbox in inboxes.items():
        for subject in SUBJECTS:
            erases = sum(1 for s, f, _ in inbox.items if s == subject and f & Flags.ERASE)
            assert erases == 1, f"{name}, {subject}: one erase"
    # heron's node info counts what it forwarded to hobbit: every publish of heron's source
    # (an image and the updates per subject, and the erases), none from hobbit or avalon.
    shown = status_of(config, "heron", members)
    counts = forwarded_counts(shown, "hobbit")
    from_heron = len(SUBJECTS) * (PUBLISHES + 2)
    assert counts["sent"] + counts["flushed"] == from_heron, shown
    assert counts["refused"] == counts["dropped"] == 0, shown
    for subscriber in subscribers.values():
        subscriber.close()


def test_a_dead_mirror_at_a_master_is_queued_for_then_dropped_and_the_source_never_back_pressured(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    config, listens, started = start_mirrored(processes, tmp_path, MASTERS, queue="64K")
    heron = started["heron"]
    news = SUBJECTS[0]
    gina_sub = Subscriber(client, listens["heron"], name="gina", liveness_timeout=LIVENESS)
    gina = Inbox(gina_sub)
    gina_sub.subscribe(news, gina)
    hugo_sub = Subscriber(client, listens["hobbit"], name="hugo", liveness_timeout=LIVENESS)
    hugo = Inbox(hugo_sub)
    hugo_sub.subscribe(news, hugo)
    feeds = {master: Feed(client, master, listens[master]) for master in MASTERS}
    source = Source(client, listens["heron"], "rugby-publisher", liveness_timeout=LIVENESS)
    notices: list[str] = []
    members: list[Pollable] = [
        *(feed.poll for feed in feeds.values()),
        lambda: gina_sub.poll(256),
        lambda: hugo_sub.poll(256),
        source.poll,
        lambda: notices.append(source.status().last_forward_status),
    ]
    pump(members, lambda: bool(images(gina, news)) and bool(images(hugo, news)), "both masters' images")
    pump(members, lambda: source.router_live, "heron heard the source")
    source.publish(news, b"warm-up", image=True)
    pump(members, lambda: "warm-up" in images(hugo, news), "the warm-up at hobbit")
    pump(members, lambda: not source.status().forward_warning, "heron's link to hobbit settled")

    started["hobbit"].kill()
    settle(members, 2 * LIVENESS)
    # heron is a live master of the domain: past its bound hobbit's queue at heron is dropped.
    payloads = publish_past_a_dead_mirror(source, news, members)
    total = len(payloads)
    pump(members, lambda: len(updates(gina, news)) >= total, "every update at heron")
    settle(members, 0.3)
    assert updates(gina, news) == [p.decode() for p in payloads], "heron: every update once, in order"
    status = source.status()
    assert status.forward_refused == 0 and not status.back_pressured and not status.forward_warning, status
    told = [text.split(":")[0] for text in notices if text]
    assert "FORWARD_WARNING" in told and told[-1] == "FORWARD_CLEARED", f"told as at a slave: {set(told)}"
    drops = [line for line in heron.snapshot() if "mirrored master hobbit unreachable past forward-queue" in line]
    assert len(drops) == 1, drops
    shown = status_of(config, "heron", members)
    hobbit_line = next(line for line in shown.splitlines() if "forwarded to hobbit:" in line)
    assert hobbit_line.endswith("(stale: its queue was dropped)"), shown
    counts = forwarded_counts(shown, "hobbit")
    assert total - 20 <= counts["dropped"] <= total and counts["refused"] == 0, shown

    # hobbit restarted: heron's link settles, hobbit is no longer stale, the source is asked for
    # a fresh image of what hobbit missed, and hobbit's subscribers get what follows, in order.
    hana_sub, hana, resync = restart_hobbit(client, processes, config, listens["hobbit"], source, news, members)
    pump(members, lambda: bool(images(hana, news)), "an image at the restarted hobbit")
    pump(members, lambda: resync == [news], "the source asked for a fresh image of what hobbit missed")
    assert source.publish(news, b"fresh-image", image=True)
    pump(members, lambda: "fresh-image" in images(hana, news), "the fresh image at hobbit")
    later = [f"v{i}" for i in range(20)]
    for payload in later:
        assert source.publish(news, payload.encode())
        settle(members, 0.005)
    pump(members, lambda: len(updates(hana, news)) >= len(later), "the later updates at hobbit")
    settle(members, 0.3)
    assert updates(hana, news) == later, "hobbit: the later updates once, in order"
    assert updates(gina, news)[total:] == later, "heron: the later updates once, in order"
    for closing in (gina_sub, hugo_sub, hana_sub, source):
        closing.close()


def test_a_reload_taking_the_other_master_away_keeps_publishes_here_and_one_giving_it_back_mirrors_again(
    client: affinity.Client, processes: list[Process], tmp_path: Path
) -> None:
    config, listens, started = start_mirrored(processes, tmp_path, MASTERS)
    heron = started["heron"]
    news = SUBJECTS[0]
    inboxes: dict[str, Inbox] = {}
    members: list[Pollable] = []
    for master in MASTERS:
        subscriber = Subscriber(client, listens[master], name=f"at-{master}", liveness_timeout=LIVENESS)
        inboxes[master] = Inbox(subscriber)
        subscriber.subscribe(news, inboxes[master])
        members.append(lambda subscriber=subscriber: subscriber.poll(256))
    feeds = [Feed(client, master, listens[master]) for master in MASTERS]
    source = Source(client, listens["heron"], "rugby-publisher", liveness_timeout=LIVENESS)
    members += [feed.poll for feed in feeds] + [source.poll]
    pump(members, lambda: all(images(inbox, news) for inbox in inboxes.values()), "both masters' images")
    pump(members, lambda: source.router_live, "heron heard the source")

    def publish(prefix: str) -> list[str]:
        sent = [f"{prefix}{i}" for i in range(10)]
        for payload in sent:
            assert source.publish(news, payload.encode())
            settle(members, 0.005)
        pump(members, lambda: updates(inboxes["heron"], news)[-1:] == sent[-1:], f"{prefix} at heron")
        return sent

    def reload(text: str, logged: str) -> None:
        count = sum(logged in line for line in heron.snapshot())
        config.write_text(text)
        os.kill(heron.popen.pid, signal.SIGHUP)
        heron.wait_for(lambda lines: sum(logged in line for line in lines) > count, logged)

    first = publish("a")
    pump(members, lambda: updates(inboxes["hobbit"], news) == first, "heron's publishes at hobbit")
    # SIGHUP to heron with hobbit no longer master: heron's publishes stay at heron.
    mirrored = config.read_text()
    hobbit_master = f"    node-id hobbit\n    address {listens['hobbit']}\n    master-of RUGBY_NEWS\n"
    assert hobbit_master in mirrored
    alone = mirrored.replace(hobbit_master, f"    node-id hobbit\n    address {listens['hobbit']}\n")
    reload(alone, "no domain with another master now")
    second = publish("b")
    settle(members, 0.5)
    assert updates(inboxes["heron"], news) == first + second
    assert updates(inboxes["hobbit"], news) == first, "nothing of heron's reaches hobbit after the reload"
    # SIGHUP with hobbit master again: mirrored again, in order, once.
    reload(mirrored, "publishes of RUGBY_NEWS here go to hobbit too")
    third = publish("c")
    pump(members, lambda: updates(inboxes["hobbit"], news)[-1:] == third[-1:], "heron's publishes at hobbit again")
    settle(members, 0.3)
    assert updates(inboxes["hobbit"], news) == first + third, "hobbit: once each, in order"
    assert updates(inboxes["heron"], news) == first + second + third
    source.close()


def test_only_a_configured_master_of_a_domain_with_other_masters_mirrors_its_publishes() -> None:
    # heron and hobbit masters of RUGBY_NEWS, heron also golan's backup for STOCK_EXCHANGE.
    text = (
        conf.domain("RUGBY_NEWS", "^/RUGBY/")
        + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
        + conf.node("heron", conf.loopback(1), "master-of RUGBY_NEWS")
        + conf.node("hobbit", conf.loopback(2), "master-of RUGBY_NEWS")
        + conf.node("golan", conf.loopback(3), "master-of STOCK_EXCHANGE", "backup-node heron")
        + conf.node("avalon", conf.loopback(4))
    )
    analysis = analyse_router_text(text, "cluster.conf")
    assert not analysis.errors, analysis.diagnostics
    cluster = analysis.config.cluster
    assert cluster is not None
    assert other_masters(cluster, "heron") == {"RUGBY_NEWS": ("hobbit",)}, "not STOCK_EXCHANGE: a backup"
    assert other_masters(cluster, "hobbit") == {"RUGBY_NEWS": ("heron",)}
    assert other_masters(cluster, "golan") == {}, "the only master of its domain"
    assert other_masters(cluster, "avalon") == {}, "a slave forwards to every master itself"
