"""Router failure with real processes: subscribers and sources hear the router's ALIVE records,
notice a router killed with SIGKILL, and restore every subscription by themselves at the
restarted router, at the next router of their list, or where a router stopped cleanly sends
them (``docs/subjects.md``, "Router failure")."""

from __future__ import annotations

import sys
import time

import affinity
from affinity.subjects import Flags, Subscriber
from affinity.testing import loopback_channel
from test_subjects_processes import DATA, LIVENESS, Inbox, Process, count, image_from, peer, source_up

CONFIG = DATA / "worked_example_transformer.conf"
SUBJECTS = ["/PRIVATE/alice-0/FXTRADE", "/PRIVATE/bob-1/FXTRADE"]
#: A liveness timeout no test waits for: only the stopping router's word can move a member.
LONG_LIVENESS = 60.0


def start_router(listen: str, *extra: str) -> Process:
    process = Process(
        [
            sys.executable,
            "-m",
            "affinity.cli",
            "router",
            "--config",
            str(CONFIG),
            "--listen",
            listen,
            "--liveness-timeout",
            str(LIVENESS),
            *extra,
        ]
    )
    process.wait_for(lambda lines: any("listening on" in line for line in lines), "router start")
    return process


def subscribe_all(subscriber: Subscriber) -> Inbox:
    inbox = Inbox(subscriber)
    for subject in SUBJECTS:
        subscriber.subscribe(subject, inbox)
    return inbox


def updates_after(inbox: Inbox, start: int, subject: str) -> list[str]:
    return [p for s, f, p in inbox.items[start:] if s == subject and f & Flags.UPDATE]


def restored(inbox: Inbox, start: int, label: str = "TradeAdapterA") -> None:
    """After `start`: for every subject a STATUS, then a fresh image, then updates."""
    for subject in SUBJECTS:
        inbox.wait_for(
            lambda items, subject=subject: (
                len(updates_after(inbox, start, subject)) >= 3
                and any(s == subject and f & Flags.STATUS for s, f, _ in items[start:])
            ),
            f"{subject} restored",
        )
        after = [(f, p) for s, f, p in inbox.items[start:] if s == subject]
        statuses = [i for i, (f, _) in enumerate(after) if f & Flags.STATUS]
        images = [i for i, (f, p) in enumerate(after) if f & Flags.IMAGE and p.startswith(f"{label}:")]
        assert statuses and images and statuses[0] < images[0], after
        assert max(i for i, (f, _) in enumerate(after) if f & Flags.UPDATE) > images[0]


def test_a_router_killed_and_restarted_gets_every_subscription_and_source_back(
    client: affinity.Client, processes: list[Process]
) -> None:
    listen = loopback_channel()
    first = start_router(listen)
    processes.append(first)
    source = peer("TradeAdapterA", listen, extra=("--failover",))
    processes.append(source)
    first.wait_for(source_up("TradeAdapterA"), "source up")
    subscribers = [
        Subscriber(client, routers=[listen], name=name, heartbeat_interval=0.05, liveness_timeout=LIVENESS)
        for name in ("alice", "bob")
    ]
    inboxes = [subscribe_all(subscriber) for subscriber in subscribers]
    for inbox in inboxes:
        for subject in SUBJECTS:
            inbox.wait_for(image_from("TradeAdapterA", subject), f"{subject} image")

    first.kill()
    marks = [len(inbox.items) for inbox in inboxes]
    for inbox in inboxes:
        inbox.drain_for(LIVENESS / 2)  # updates stop: the router is gone
    second = start_router(listen)
    processes.append(second)
    # The source comes back by itself (it heard the new router's id, or its silence).
    second.wait_for(source_up("TradeAdapterA"), "source back")
    for inbox, mark in zip(inboxes, marks, strict=True):
        restored(inbox, mark)
    for subscriber in subscribers:
        assert subscriber.counters().router_switches >= 1
        assert subscriber.router == listen
        subscriber.close()
    # Each subject was requested again at the new router.
    assert count(source.snapshot(), f"REQUEST 0 {SUBJECTS[0]}") >= 2


def test_subscribers_move_to_the_second_router_when_the_first_is_killed(
    client: affinity.Client, processes: list[Process]
) -> None:
    listens = [loopback_channel(), loopback_channel()]
    routers = [start_router(listen) for listen in listens]
    processes += routers
    # The adapter serves both routers (one source per router, as DataSource peers do).
    source = peer("TradeAdapterA", *listens)
    processes.append(source)
    for process in routers:
        process.wait_for(source_up("TradeAdapterA"), "source up")
    subscriber = Subscriber(client, routers=listens, name="alice", heartbeat_interval=0.05, liveness_timeout=LIVENESS)
    inbox = subscribe_all(subscriber)
    for subject in SUBJECTS:
        inbox.wait_for(image_from("TradeAdapterA", subject), f"{subject} image")
    assert subscriber.router == listens[0]
    assert count(source.snapshot(), "REQUEST 1") == 0

    routers[0].kill()
    mark = len(inbox.items)
    restored(inbox, mark)
    assert subscriber.router == listens[1]
    statuses = [p for _, f, p in inbox.items[mark:] if f & Flags.STATUS]
    assert any(f"router {listens[0]} lost" in p and listens[1] in p for p in statuses), statuses
    assert count(source.snapshot(), f"REQUEST 1 {SUBJECTS[0]}") == 1
    subscriber.close()


def test_a_router_stopped_cleanly_forwards_its_members_at_once(
    client: affinity.Client, processes: list[Process]
) -> None:
    listens = [loopback_channel() for _ in range(3)]
    # The first forwards to the third: a member skips the second, and does not wait for a
    # liveness timeout (it has a long one).
    routers = [start_router(listens[0], "--forward", listens[2])] + [start_router(listen) for listen in listens[1:]]
    processes += routers
    source = peer("TradeAdapterA", *listens)
    processes.append(source)
    for process in routers:
        process.wait_for(source_up("TradeAdapterA"), "source up")
    subscriber = Subscriber(
        client, routers=listens, name="alice", heartbeat_interval=0.05, liveness_timeout=LONG_LIVENESS
    )
    inbox = subscribe_all(subscriber)
    for subject in SUBJECTS:
        inbox.wait_for(image_from("TradeAdapterA", subject), f"{subject} image")

    stopped_at = time.monotonic()
    routers[0].stop()
    mark = len(inbox.items)
    restored(inbox, mark)
    assert time.monotonic() - stopped_at < LONG_LIVENESS
    assert subscriber.router == listens[2]
    statuses = [p for _, f, p in inbox.items[mark:] if f & Flags.STATUS]
    assert any(f"router {listens[0]} stopped" in p for p in statuses), statuses
    assert count(source.snapshot(), f"REQUEST 2 {SUBJECTS[0]}") == 1
    assert count(source.snapshot(), "REQUEST 1") == 0
    subscriber.close()
