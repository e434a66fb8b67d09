"""A restarted master's deferral, a publish naming its domain and a reload giving a domain its
first master, on separate "hosts" (private network namespaces, ``tests/cluster_netns.py``):
golan master of STOCK_EXCHANGE with ``backup-node heron``, heron master of PINNED, avalon a
slave; RADAR has no master until a reload makes heron its master. This script is the clients'
host (10.9.0.1):

* a feed labelled ``stock-feed`` at golan and at heron numbers its updates of ``/STOCK/IBM``
  (``image:<n>`` covers update n); alice at avalon, harry at heron and gus at golan subscribe it
  and ``/STOCK/NEWS``, which a source at avalon publishes;
* the source publishes ``/STOCK/NEWS`` naming domain PINNED (heron's), then naming none;
* golan is SIGKILLed (heron takes STOCK_EXCHANGE over) and started again: it defers the domain
  to heron, and gus, who restores his subscriptions at golan, is served through heron; the feed
  and the source go on;
* the source publishes ``/RADAR/north`` while RADAR has no master (queued at avalon); the file
  then makes heron RADAR's master and heron and avalon are sent SIGHUP: rita, subscribed at
  heron, gets the queued publishes in order.

Prints ``RESULT <json>`` with what everyone saw; the routers' output goes to
``WORKDIR/<node>.log``.

    usage: cluster_defer_hosts.py WORKDIR
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import cluster_conf as conf
from affinity.subjects import Flags, Source, Subscriber
from cluster_failover_hosts import STOCK_FEED, SUBJECT, TICK, Feed
from cluster_netns import CLIENT_HOST, Polled, Router, address, drain, node_block, print_result, running_cluster, until

NODES = ("golan", "heron", "avalon")
#: The subject the source at avalon publishes (STOCK_EXCHANGE's, never requested from it).
NEWS = "/STOCK/NEWS"
#: RADAR's subject, published while the domain has no master.
RADAR = "/RADAR/north"
#: Labels: the publishing source at avalon (no service names it) and heron's RADAR feed.
PUBLISHER, RADAR_FEED = "stock-publisher", "radar-feed"
#: Updates of the feed and publishes of the source after golan's restart; RADAR publishes queued.
AFTER, QUEUED = 30, 20
#: The routers' and clients' liveness timeout, seconds.
LIVENESS = 2.0


def config(*, radar_master: bool) -> str:
    """The cluster; with ``radar_master`` heron is also RADAR's master."""
    return (
        conf.data_service("stock", "^/STOCK/", STOCK_FEED)
        + conf.data_service("radar", "^/RADAR/", RADAR_FEED)
        + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
        + conf.domain("PINNED", "^/PINNED/")
        + conf.domain("RADAR", "^/RADAR/")
        + node_block("golan", "master-of STOCK_EXCHANGE", "backup-node heron")
        + node_block("heron", "master-of PINNED", *(("master-of RADAR",) if radar_master else ()))
        + node_block("avalon")
    )


def main() -> int:
    workdir = Path(sys.argv[1])
    started = time.monotonic()
    path = workdir / "cluster.conf"
    path.write_text(config(radar_master=False))
    with running_cluster(workdir, dict.fromkeys(NODES, path), str(LIVENESS)) as (routers, client):
        result: dict[str, Any] = {"started_in": round(time.monotonic() - started, 2)}
        for node in ("heron", "avalon"):
            routers[node].wait_for("Source cluster.STOCK_EXCHANGE")
        routers["golan"].wait_for("serves domain STOCK_EXCHANGE")

        stock = Feed(client, STOCK_FEED, ("golan", "heron"), lambda node, subject, seq: f"image:{seq}")
        #: Everything each subscriber got: (subject, flags, payload).
        got: dict[str, list[tuple[str, int, str]]] = {}
        subscribers: dict[str, Subscriber] = {}
        for name, node in (("alice", "avalon"), ("harry", "heron"), ("gus", "golan")):
            inbox = got.setdefault(name, [])
            subscriber = Subscriber(client, address(node), name=name, host=CLIENT_HOST, liveness_timeout=LIVENESS)
            for subject in (SUBJECT, NEWS):
                subscriber.subscribe(subject, lambda s, f, p, inbox=inbox: inbox.append((s, int(f), p.decode())))
            subscribers[name] = subscriber
        source = Source(client, address("avalon"), PUBLISHER, host=CLIENT_HOST, liveness_timeout=LIVENESS)
        peers: tuple[Polled, ...] = (stock, source, *subscribers.values())

        def has(name: str, subject: str, flag: Flags, since: int = 0, payload: str | None = None) -> bool:
            return any(s == subject and f & flag and (payload is None or p == payload) for s, f, p in got[name][since:])

        for name in subscribers:
            until(f"{name}: the image from golan's feed", lambda name=name: has(name, SUBJECT, Flags.IMAGE), *peers)
        until("avalon heard the source", lambda: source.router_live, *peers)

        # A publish naming PINNED goes to heron (its master), not to golan (the subject's).
        assert source.publish(NEWS, b"pinned-1", domain="PINNED")
        assert source.publish(NEWS, b"plain-1")
        for name in subscribers:
            until(f"{name}: the plain publish", lambda name=name: has(name, NEWS, Flags.UPDATE, 0, "plain-1"), *peers)
        until("harry: the PINNED publish", lambda: has("harry", NEWS, Flags.UPDATE, 0, "pinned-1"), *peers)
        drain(0.3, peers)
        result["news_before"] = {
            name: [p for s, f, p in got[name] if s == NEWS and f & Flags.UPDATE] for name in subscribers
        }

        # SIGKILL golan: heron takes the domain over; alice and harry get heron's fresh image.
        marks = {name: len(records) for name, records in got.items()}
        routers["golan"].kill()
        routers["heron"].wait_for("takes over domain STOCK_EXCHANGE", time.monotonic() + 10 * LIVENESS)
        for name in ("alice", "harry"):
            until(
                f"{name}: heron's fresh image",
                lambda name=name: has(name, SUBJECT, Flags.IMAGE, marks[name]),
                *peers,
            )

        # golan started again: heron's node info says it serves the domain, so golan defers to
        # it; gus restores his subscriptions at golan, served through heron.
        asked = len(stock.requests["golan"])
        routers["golan"] = Router(workdir, "golan", path, str(LIVENESS))
        routers["golan"].wait_listening(time.monotonic() + 30)
        routers["golan"].wait_for("defers domain STOCK_EXCHANGE to heron", time.monotonic() + 10 * LIVENESS)
        until("gus: an image through heron", lambda: has("gus", SUBJECT, Flags.IMAGE, marks["gus"]), *peers)
        until(
            "avalon forwards to heron",
            lambda: source.router_live and not source.status().forward_warning,
            *peers,
        )
        sent = [f"p{i}" for i in range(AFTER)]
        for payload in sent:
            stock.tick()
            assert source.publish(NEWS, payload.encode())
            drain(TICK, peers)
        for name in subscribers:
            until(
                f"{name}: the feed's last update",
                lambda name=name: has(name, SUBJECT, Flags.UPDATE, 0, str(stock.seq)),
                *peers,
            )
            until(f"{name}: the last publish", lambda name=name: has(name, NEWS, Flags.UPDATE, 0, sent[-1]), *peers)
        drain(0.3, peers)
        result["sent"] = sent
        result["last"] = stock.seq
        result["golan_feed_asked_after_restart"] = stock.requests["golan"][asked:]
        golan_lines = routers["golan"].lines
        result["golan_served_after_restart"] = [ln for ln in golan_lines if "serves domain" in ln or "takes over" in ln]

        # RADAR has no master: the source's publishes queue at avalon (FORWARD_WARNING); rita at
        # heron is answered by heron's own RADAR feed.
        radar_feed = Source(client, address("heron"), RADAR_FEED, host=CLIENT_HOST, liveness_timeout=LIVENESS)
        radar_feed.on_request(lambda subject: radar_feed.publish(subject, b"radar-feed-image", image=True))
        rita = Subscriber(client, address("heron"), name="rita", host=CLIENT_HOST, liveness_timeout=LIVENESS)
        got["rita"] = []
        rita.subscribe(RADAR, lambda s, f, p: got["rita"].append((s, int(f), p.decode())))
        peers = (*peers, radar_feed, rita)
        until("rita: an answer at heron", lambda: has("rita", RADAR, Flags.IMAGE | Flags.NODATA_UNAVAILABLE), *peers)
        queued = [f"q{i}" for i in range(QUEUED)]
        for payload in queued:
            assert source.publish(RADAR, payload.encode())
        until("FORWARD_WARNING: RADAR has no master", lambda: source.status().forward_warning, *peers)
        drain(0.3, peers)
        result["rita_before_reload"] = [p for s, f, p in got["rita"] if f & Flags.UPDATE]

        # The file makes heron RADAR's master; heron and avalon re-read it.
        path.write_text(config(radar_master=True))
        os.kill(routers["heron"].process.pid, signal.SIGHUP)
        routers["heron"].wait_for("takes over domain RADAR")
        os.kill(routers["avalon"].process.pid, signal.SIGHUP)
        routers["avalon"].wait_for("RADAR has a master now (heron)")
        until("rita: the queued publishes", lambda: has("rita", RADAR, Flags.UPDATE, 0, queued[-1]), *peers)
        until("the warning cleared", lambda: not source.status().forward_warning, *peers)
        later = [f"l{i}" for i in range(10)]
        for payload in later:
            assert source.publish(RADAR, payload.encode())
        until("rita: the later publishes", lambda: has("rita", RADAR, Flags.UPDATE, 0, later[-1]), *peers)
        drain(0.3, peers)
        result["queued"] = queued + later
        result["got"] = got
        result["forward_refused"] = source.status().forward_refused
        result["elapsed"] = round(time.monotonic() - started, 2)
        print_result(result)
        for subscriber in (*subscribers.values(), rita):
            subscriber.close()
        for closing in (source, radar_feed):
            closing.close()
        for feed_source in stock.sources.values():
            feed_source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
