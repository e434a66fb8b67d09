"""Mirrored masters and failover on separate "hosts" (private network namespaces,
``tests/cluster_netns.py``): heron and hobbit both master of RUGBY_NEWS, golan master of
STOCK_EXCHANGE with ``backup-node heron``, avalon and bilbo slaves. This script is the clients'
host (10.9.0.1):

* a feed labelled ``rugby-feed`` at heron and at hobbit answers each request with the image
  ``<master>:<subject>``; carol at avalon subscribes four subjects one after the other (the
  round-robin load balancer alternates between the masters);
* a feed labelled ``stock-feed`` at golan and at heron numbers its updates (``image:<n>`` covers
  update n); erin subscribes ``/STOCK/IBM`` with ``routers=[avalon, bilbo]``; avalon is SIGKILLed
  mid-stream (erin moves to bilbo), then golan (heron takes the domain over, bilbo's link
  follows). Before that, hobbit is SIGKILLed once carol has her images: the subjects it served
  move to heron. Prints ``RESULT <json>`` with what they saw; the routers' output goes to
  ``WORKDIR/<node>.log``.

    usage: cluster_failover_hosts.py WORKDIR
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import affinity
import cluster_conf as conf
from affinity.subjects import Flags, Source, Subscriber
from cluster_netns import CLIENT_HOST, address, drain, node_block, print_result, running_cluster, until

NODES = ("heron", "hobbit", "golan", "avalon", "bilbo")
RUGBY_FEED, STOCK_FEED = "rugby-feed", "stock-feed"
RUGBY_SUBJECTS = tuple(f"/RUGBY/match-{i}" for i in range(4))
SUBJECT = "/STOCK/IBM"
#: Feed updates before the first kill and after each one.
UPDATES = 30
#: The routers' and clients' liveness timeout, seconds (a takeover waits for it; generous
#: against a loaded machine, where a live node must not look silent).
LIVENESS = 2.0
#: Seconds between two feed updates.
TICK = 0.02
CONFIG = (
    conf.data_service("stock", "^/STOCK/", STOCK_FEED)
    + conf.data_service("rugby", "^/RUGBY/", RUGBY_FEED)
    + conf.domain("RUGBY_NEWS", "^/RUGBY/")
    + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
    + node_block("heron", "master-of RUGBY_NEWS")
    + node_block("hobbit", "master-of RUGBY_NEWS")
    + node_block("golan", "master-of STOCK_EXCHANGE", "backup-node heron")
    + node_block("avalon")
    + node_block("bilbo")
)


class Feed:
    """``label`` at several nodes with one numbering of updates of :data:`SUBJECT`; a request
    is answered with ``image`` (of the node and subject)."""

    def __init__(self, client: affinity.Client, label: str, nodes: tuple[str, ...], image: Callable[..., str]) -> None:
        self.seq = 0
        self.image = image
        self.sources = {
            node: Source(client, address(node), label, host=CLIENT_HOST, liveness_timeout=LIVENESS) for node in nodes
        }
        self.requests: dict[str, list[str]] = {node: [] for node in nodes}
        self.requested: dict[str, set[str]] = {node: set() for node in nodes}
        for node, source in self.sources.items():
            source.on_request(self._request(node))
            source.on_discard(self.requested[node].discard)

    def _request(self, node: str) -> Callable[[str], None]:
        def request(subject: str) -> None:
            self.requests[node].append(subject)
            self.requested[node].add(subject)
            self.sources[node].publish(subject, self.image(node, subject, self.seq).encode(), image=True)

        return request

    def tick(self) -> None:
        self.seq += 1
        for node, source in self.sources.items():
            if SUBJECT in self.requested[node]:
                source.publish(SUBJECT, str(self.seq).encode())

    def poll(self, limit: int) -> None:
        for source in self.sources.values():
            source.poll(limit)


def main() -> int:
    workdir = Path(sys.argv[1])
    started = time.monotonic()
    (workdir / "cluster.conf").write_text(CONFIG)
    with running_cluster(workdir, {node: workdir / "cluster.conf" for node in NODES}, str(LIVENESS)) as (
        routers,
        client,
    ):
        result: dict[str, Any] = {"started_in": round(time.monotonic() - started, 2)}
        for node in ("golan", "avalon", "bilbo"):
            routers[node].wait_for("Source cluster.STOCK_EXCHANGE")

        # Two masters of RUGBY_NEWS: subscriptions at avalon alternate between them.
        rugby = Feed(client, RUGBY_FEED, ("heron", "hobbit"), lambda node, subject, seq: f"{node}:{subject}")
        carol = Subscriber(client, address("avalon"), name="carol", host=CLIENT_HOST, liveness_timeout=LIVENESS)
        images: dict[str, str] = {}
        #: Everything carol got: (subject, flags, payload).
        carol_got: list[tuple[str, int, str]] = []
        until("the rugby feeds heard", lambda: all(s.router_live for s in rugby.sources.values()), rugby)
        for subject in RUGBY_SUBJECTS:

            def keep(s: str, f: Flags, p: bytes) -> None:
                carol_got.append((s, int(f), p.decode(errors="replace")))
                if f & Flags.IMAGE:
                    images.setdefault(s, p.decode())

            carol.subscribe(subject, keep)
            until(f"the image of {subject}", lambda subject=subject: subject in images, rugby, carol)
        result["rugby_images"] = [images[subject] for subject in RUGBY_SUBJECTS]
        result["rugby_requests"] = {node: list(asked) for node, asked in rugby.requests.items()}

        # SIGKILL hobbit, one of RUGBY_NEWS's two masters: avalon's subscriptions it served move to
        # heron (a STATUS, then heron's image), and heron's feed is asked for them.
        doomed = [subject for subject in RUGBY_SUBJECTS if images[subject].startswith("hobbit:")]
        mark = len(carol_got)
        routers["hobbit"].kill()
        killed = time.monotonic()

        def heron_serves(subject: str) -> bool:
            return any(s == subject and f & Flags.IMAGE and p.startswith("heron:") for s, f, p in carol_got[mark:])

        while not all(heron_serves(subject) for subject in doomed):
            if time.monotonic() - killed > 10 * LIVENESS:
                raise SystemExit(f"hobbit's subjects did not move to heron: {carol_got[mark:]}")
            drain(TICK, (rugby, carol))
        result["hobbit_move_s"] = round(time.monotonic() - killed, 2)
        result["hobbit_subjects"] = doomed
        drain(0.3, (rugby, carol))
        result["carol_after_hobbit"] = carol_got[mark:]
        result["rugby_requests_after_hobbit"] = {node: list(asked) for node, asked in rugby.requests.items()}

        # The stock stream to erin, who names two routers.
        stock = Feed(client, STOCK_FEED, ("golan", "heron"), lambda node, subject, seq: f"image:{seq}")
        until("the stock feeds heard", lambda: all(s.router_live for s in stock.sources.values()), stock)
        erin = Subscriber(
            client,
            routers=[address("avalon"), address("bilbo")],
            name="erin",
            host=CLIENT_HOST,
            liveness_timeout=LIVENESS,
        )
        got: list[tuple[int, str]] = []
        erin.subscribe(SUBJECT, lambda s, f, p: got.append((int(f), p.decode(errors="replace"))))
        peers = (stock, erin, carol, rugby)
        until("erin's image", lambda: any(f & Flags.IMAGE for f, _ in got), *peers)

        def stream(count: int) -> None:
            for _ in range(count):
                stock.tick()
                drain(TICK, peers)

        def moved(mark: int) -> Callable[[], bool]:
            return lambda: any(f & Flags.IMAGE for f, _ in got[mark:])

        stream(UPDATES)
        until("erin: the updates before the kills", lambda: got[-1:] == [(int(Flags.UPDATE), str(stock.seq))], *peers)

        # SIGKILL avalon: erin moves to bilbo by herself (a STATUS, bilbo's image, updates).
        mark = len(got)
        routers["avalon"].kill()
        killed = time.monotonic()
        while not moved(mark)():
            if time.monotonic() - killed > 10 * LIVENESS:
                raise SystemExit(f"erin did not move: {got[-5:]}")
            stream(1)
        result["avalon_move_s"] = round(time.monotonic() - killed, 2)
        result["erin_router_after_avalon"] = erin.router
        stream(UPDATES)
        until("erin: updates at bilbo", lambda: got[-1:] == [(int(Flags.UPDATE), str(stock.seq))], *peers)

        # SIGKILL golan: heron takes the domain over, bilbo's link follows, erin hears it.
        mark = len(got)
        routers["golan"].kill()
        killed = time.monotonic()
        while not moved(mark)():
            if time.monotonic() - killed > 10 * LIVENESS:
                raise SystemExit(f"no move after golan: {got[-5:]}")
            stream(1)
        result["golan_move_s"] = round(time.monotonic() - killed, 2)
        routers["heron"].wait_for("takes over domain STOCK_EXCHANGE")
        stream(UPDATES)
        until("erin: updates from heron", lambda: got[-1:] == [(int(Flags.UPDATE), str(stock.seq))], *peers)
        result["erin"] = got
        result["stock_requests"] = stock.requests
        result["last"] = stock.seq
        result["elapsed"] = round(time.monotonic() - started, 2)
        print_result(result)
        for peer in (carol, erin):
            peer.close()
        for feed in (rugby, stock):
            for source in feed.sources.values():
                source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
