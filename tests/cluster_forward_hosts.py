"""Publish at a slave across "hosts" (private network namespaces, ``tests/cluster_netns.py``):
the xmlBlaster picture (heron master of RUGBY_NEWS, golan master of STOCK_EXCHANGE, avalon a
slave of both, bilbo a slave of avalon, stratum 2). This script is the clients' host (10.9.0.1):

* a feed labelled ``stock-feed`` at golan answers each request with the image ``feed-<n>``;
* gina subscribes ``/STOCK/IBM`` at golan, alice at avalon, bob at bilbo;
* a source labelled ``stock-publisher`` at avalon publishes the subject (nobody requested it
  from it): an image, then updates, forwarded to golan and fanned out to every subscriber;
* golan is SIGKILLed mid-stream: the source is told FORWARD_WARNING and its publishes queue at
  avalon; golan is started again on its host: the queue flushes in order.

Prints ``RESULT <json>`` with what each subscriber saw and what the source was told; the
routers' output goes to ``WORKDIR/<node>.log``.

    usage: cluster_forward_hosts.py WORKDIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import affinity
from affinity.subjects import Flags, Source, Subscriber
from cluster_hosts import CONFIG, FEED, SUBJECT
from cluster_netns import CLIENT_HOST, Router, address, drain, print_result, running_cluster, until

NODES = ("heron", "golan", "avalon", "bilbo")
PUBLISHER = "stock-publisher"
#: Updates before the kill, and while golan is down.
BEFORE, DURING = 100, 50
#: The routers' and clients' liveness timeout, seconds (generous against a loaded machine).
LIVENESS = 2.0


class Inbox:
    """What one subscriber got for :data:`SUBJECT`: ``(flags, payload)`` in order."""

    def __init__(self, client: affinity.Client, node: str, name: str) -> None:
        self.got: list[tuple[int, str]] = []
        self.subscriber = Subscriber(client, address(node), name=name, host=CLIENT_HOST, liveness_timeout=LIVENESS)
        self.subscriber.subscribe(SUBJECT, lambda s, f, p: self.got.append((int(f), p.decode(errors="replace"))))

    def poll(self, limit: int) -> object:
        return self.subscriber.poll(limit)

    def close(self) -> None:
        self.subscriber.close()

    def updates(self) -> list[str]:
        return [p for f, p in self.got if f & Flags.UPDATE]

    def images(self) -> list[str]:
        return [p for f, p in self.got if f & Flags.IMAGE]


def main() -> int:
    workdir = Path(sys.argv[1])
    started = time.monotonic()
    config = workdir / "cluster.conf"
    config.write_text(CONFIG)
    with running_cluster(workdir, {node: config for node in NODES}, str(LIVENESS)) as (routers, client):
        result: dict[str, Any] = {"started_in": round(time.monotonic() - started, 2)}
        for node in ("avalon", "bilbo"):
            routers[node].wait_for("Source cluster.STOCK_EXCHANGE")
        feed = Source(client, address("golan"), FEED, host=CLIENT_HOST, liveness_timeout=LIVENESS)
        requests: list[str] = []

        def answer(subject: str) -> None:
            feed.publish(subject, f"feed-{len(requests)}".encode(), image=True)
            requests.append(subject)

        feed.on_request(answer)
        inboxes = {
            name: Inbox(client, node, name) for name, node in (("gina", "golan"), ("alice", "avalon"), ("bob", "bilbo"))
        }
        source = Source(client, address("avalon"), PUBLISHER, host=CLIENT_HOST, liveness_timeout=LIVENESS)
        peers = (feed, source, *inboxes.values())
        until("the feed's image everywhere", lambda: all(i.images() == ["feed-0"] for i in inboxes.values()), *peers)
        until("avalon heard the source", lambda: source.router_live, *peers)

        sent = [f"u{i}" for i in range(BEFORE)]
        source.publish(SUBJECT, b"image-1", image=True)
        for payload in sent:
            source.publish(SUBJECT, payload.encode())
            source.poll(16)
        until("every update before the kill", lambda: all(len(i.updates()) >= BEFORE for i in inboxes.values()), *peers)
        result["warning_before"] = source.status().forward_warning

        # SIGKILL golan mid-stream: once avalon's link to it is silent past the liveness timeout,
        # what the source publishes queues at avalon, and it is told FORWARD_WARNING.
        routers["golan"].kill()
        drain(2 * LIVENESS, peers)
        during = [f"u{i}" for i in range(BEFORE, BEFORE + DURING)]
        result["accepted_during"] = all(source.publish(SUBJECT, p.encode()) for p in during)
        until("FORWARD_WARNING at the source", lambda: source.status().forward_warning, *peers)
        result["warning_status"] = source.status().last_forward_status
        drain(0.5, peers)
        result["while_down"] = {name: len(i.updates()) for name, i in inboxes.items()}

        # golan again on its host (same address, no state): avalon's queue flushes in order.
        routers["golan"] = Router(workdir, "golan", config, str(LIVENESS))
        routers["golan"].wait_listening(time.monotonic() + 30)
        restarted = time.monotonic()
        sent += during
        try:
            until("every flushed update", lambda: all(len(i.updates()) >= len(sent) for i in inboxes.values()), *peers)
        except SystemExit as timeout:
            seen = {name: (len(i.updates()), i.images(), i.got[-3:]) for name, i in inboxes.items()}
            raise SystemExit(f"{timeout}: {seen}, source {source.status()}") from None
        result["flush_s"] = round(time.monotonic() - restarted, 2)
        until("the warning cleared", lambda: not source.status().forward_warning, *peers)
        drain(0.5, peers)  # late duplicates would show
        result["sent"] = sent
        result["updates"] = {name: i.updates() for name, i in inboxes.items()}
        result["images"] = {name: i.images() for name, i in inboxes.items()}
        result["forward_refused"] = source.status().forward_refused
        result["elapsed"] = round(time.monotonic() - started, 2)
        print_result(result)
        for peer in peers:
            peer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
