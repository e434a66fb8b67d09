"""A dead mirrored master on separate "hosts" (private network namespaces,
``tests/cluster_netns.py``): heron and hobbit both master of RUGBY_NEWS, avalon their slave, a
``forward-queue`` of 64 KiB. This script is the clients' host (10.9.0.1):

* gina subscribes ``/RUGBY/news`` at heron; a source at avalon publishes it (an image first);
* hobbit is SIGKILLed; once avalon noticed, 100 publishes of 4 KiB at avalon: hobbit's queue
  passes its bound and is dropped, heron takes every one, the source is never refused;
* hobbit is started again on its host; once avalon says it is back, hugo subscribes at hobbit
  and 20 more publishes reach gina and hugo;
* a source at heron (a master: mirrored masters kept in step) publishes 20 more: they reach
  hugo at hobbit too, through heron's link to hobbit.

Prints ``RESULT <json>`` with what they saw, the source's status and avalon's log lines about
hobbit; the routers' output goes to ``WORKDIR/<node>.log``.

    usage: cluster_mirror_hosts.py WORKDIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import cluster_conf as conf
from affinity.subjects import Flags, Source, Subscriber
from cluster_netns import CLIENT_HOST, Router, address, drain, node_block, print_result, running_cluster, until

NODES = ("heron", "hobbit", "avalon")
RUGBY_FEED = "rugby-feed"
NEWS = "/RUGBY/news"
#: Publishes while hobbit is dead (far past its 64 KiB queue), and after its return.
DURING, AFTER = 100, 20
#: The routers' and clients' liveness timeout, seconds (generous against a loaded machine).
LIVENESS = 2.0
CONFIG = (
    conf.settings(forward_queue="64K")
    + conf.data_service("rugby", "^/RUGBY/", RUGBY_FEED)
    + conf.domain("RUGBY_NEWS", "^/RUGBY/")
    + node_block("heron", "master-of RUGBY_NEWS")
    + node_block("hobbit", "master-of RUGBY_NEWS")
    + node_block("avalon")
)


def main() -> int:
    workdir = Path(sys.argv[1])
    started = time.monotonic()
    config = workdir / "cluster.conf"
    config.write_text(CONFIG)
    with running_cluster(workdir, dict.fromkeys(NODES, config), str(LIVENESS)) as (routers, client):
        result: dict[str, Any] = {}
        routers["avalon"].wait_for("Source cluster.RUGBY_NEWS")

        def subscriber(node: str, name: str) -> tuple[Subscriber, list[tuple[int, str]]]:
            peer = Subscriber(client, address(node), name=name, host=CLIENT_HOST, liveness_timeout=LIVENESS)
            got: list[tuple[int, str]] = []
            peer.subscribe(NEWS, lambda s, f, p: got.append((int(f), p[:16].decode(errors="replace"))))
            return peer, got

        def updates(got: list[tuple[int, str]]) -> list[str]:
            return [p for f, p in got if f & Flags.UPDATE]

        gina, at_heron = subscriber("heron", "gina")
        source = Source(client, address("avalon"), "rugby-publisher", host=CLIENT_HOST, liveness_timeout=LIVENESS)
        peers = [gina, source]
        until("avalon heard the source", lambda: source.router_live, *peers)
        source.publish(NEWS, b"warm-up", image=True)
        until("the warm-up at heron", lambda: any(p == "warm-up" for _, p in at_heron), *peers)
        until("nothing queued", lambda: not source.status().forward_warning, *peers)

        routers["hobbit"].kill()
        drain(2 * LIVENESS, peers)
        refused_at = None
        for i in range(DURING):
            if not source.publish(NEWS, f"u{i}:".encode() + bytes(4096)) and refused_at is None:
                refused_at = i
            drain(0.01, peers)
        until("every publish at heron", lambda: len(updates(at_heron)) >= DURING, *peers)
        drain(0.3, peers)
        result["refused_at"] = refused_at
        result["status_after_kill"] = list(vars(source.status()).values())
        result["heron_during"] = updates(at_heron)

        routers["hobbit"] = Router(workdir, "hobbit", config, str(LIVENESS))
        routers["hobbit"].wait_listening(time.monotonic() + 30)
        back = "mirrored master hobbit reachable again"
        until("avalon saw hobbit back", lambda: any(back in line for line in routers["avalon"].lines), *peers)
        hugo, at_hobbit = subscriber("hobbit", "hugo")
        peers.append(hugo)
        # hobbit's feed is not connected here: hugo is answered NODATA, and stays subscribed.
        until("hugo's answer at hobbit", lambda: bool(at_hobbit), *peers)
        for i in range(AFTER):
            assert source.publish(NEWS, f"v{i}".encode())
            drain(0.01, peers)
        until("the later publishes at hobbit", lambda: len(updates(at_hobbit)) >= AFTER, *peers)
        until("the later publishes at heron", lambda: len(updates(at_heron)) >= DURING + AFTER, *peers)
        drain(0.3, peers)
        result["heron"] = updates(at_heron)
        result["hobbit"] = updates(at_hobbit)
        at_master = Source(client, address("heron"), "heron-publisher", host=CLIENT_HOST, liveness_timeout=LIVENESS)
        peers.append(at_master)
        until("heron heard its source", lambda: at_master.router_live, *peers)
        for i in range(AFTER):
            assert at_master.publish(NEWS, f"w{i}".encode())
            drain(0.01, peers)
        until("heron's publishes at hobbit", lambda: len(updates(at_hobbit)) >= 2 * AFTER, *peers)
        until("heron's publishes at heron", lambda: len(updates(at_heron)) >= DURING + 2 * AFTER, *peers)
        drain(0.3, peers)
        result["heron_from_heron"] = updates(at_heron)[len(result["heron"]) :]
        result["hobbit_from_heron"] = updates(at_hobbit)[len(result["hobbit"]) :]
        result["avalon_lines"] = [line.strip() for line in routers["avalon"].lines if "mirrored master hobbit" in line]
        result["elapsed"] = round(time.monotonic() - started, 2)
        print_result(result)
        for peer in (gina, hugo, source, at_master):
            peer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
