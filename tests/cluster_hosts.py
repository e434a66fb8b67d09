"""The xmlBlaster cluster picture on separate "hosts": run inside a private network namespace
(``unshare -n``) with one host namespace per node (``tests/cluster_netns.py``), each running
``affinity router --node NODE --config ... --listen aeron:udp?endpoint=10.9.0.N:40500`` (its own
embedded driver): heron master of
RUGBY_NEWS, golan master of STOCK_EXCHANGE, avalon a slave of both, bilbo a slave of avalon
(stratum 2), and frodo, which golan's configuration does not know. This script is the clients'
host (10.9.0.1): a source ``stock-feed`` at golan, subscribers at bilbo and frodo, and
``affinity router status`` for frodo. Prints ``RESULT <json>`` with what they saw; the routers'
output goes to ``WORKDIR/<node>.log``.

    usage: cluster_hosts.py WORKDIR
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cluster_conf as conf
from affinity.cluster_info import node_info_subject, parse_node_info
from affinity.config.faucet import analyse_router_text
from affinity.subjects import Flags, Source, Subscriber
from cluster_netns import CLIENT_HOST, STEP_TIMEOUT, address, node_block, print_result, running_cluster, until

#: The nodes of this picture (frodo is not in the others' configuration).
NODES = ("heron", "golan", "avalon", "bilbo", "frodo")
SUBJECT = "/STOCK/IBM"
FEED = "stock-feed"
UPDATES = 200
#: ``affinity router status``.
STATUS = [sys.executable, "-m", "affinity.cli", "router", "status"]


#: The picture every node but frodo runs with (frodo is not in it).
CONFIG = (
    conf.data_service("stock", "^/STOCK/", FEED)
    + conf.domain("RUGBY_NEWS", "^/RUGBY/")
    + conf.domain("STOCK_EXCHANGE", "^/STOCK/")
    + node_block("heron", "master-of RUGBY_NEWS")
    + node_block("golan", "master-of STOCK_EXCHANGE")
    + node_block("avalon")
    + node_block("bilbo", "upstream RUGBY_NEWS avalon", "upstream STOCK_EXCHANGE avalon")
)
#: frodo's own configuration: the picture and itself, a slave asking golan.
FRODO_CONFIG = CONFIG + node_block("frodo")


def main() -> int:
    workdir = Path(sys.argv[1])
    started = time.monotonic()
    (workdir / "cluster.conf").write_text(CONFIG)
    (workdir / "frodo.conf").write_text(FRODO_CONFIG)
    cluster = analyse_router_text(CONFIG, "cluster.conf").config.cluster
    assert cluster is not None
    configs = {node: workdir / ("frodo.conf" if node == "frodo" else "cluster.conf") for node in NODES}
    with running_cluster(workdir, configs) as (_routers, client):
        result: dict[str, Any] = {"started_in": round(time.monotonic() - started, 2)}

        # The stratum-2 cascade: a subscriber at bilbo, the source at golan.
        requests: list[str] = []
        source = Source(client, address("golan"), FEED, host=CLIENT_HOST)
        source.on_request(requests.append)
        carol = Subscriber(client, address("bilbo"), name="carol", host=CLIENT_HOST)
        seen: dict[str, list[tuple[int, bytes]]] = {}
        carol.subscribe(SUBJECT, lambda s, f, p: seen.setdefault(s, []).append((int(f), p)))
        until("golan's request for the subject", lambda: bool(requests), source, carol)
        source.publish(SUBJECT, b"image-0", image=True)
        for i in range(UPDATES):
            source.publish(SUBJECT, f"u{i}".encode())
            source.poll(16)

        def updates() -> list[str]:
            return [p.decode() for f, p in seen.get(SUBJECT, []) if f & Flags.UPDATE]

        until("every update at bilbo", lambda: len(updates()) >= UPDATES, source, carol)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            if carol.poll(256) == 0:
                time.sleep(0.005)
        result["images"] = [p.decode() for f, p in seen[SUBJECT] if f & Flags.IMAGE]
        result["updates"] = updates()
        result["requests"] = requests

        # Node info of golan, avalon and bilbo itself, followed at bilbo.
        for node in ("golan", "avalon", "bilbo"):
            subject = node_info_subject(node)
            carol.subscribe(subject, lambda s, f, p: seen.setdefault(s, []).append((int(f), p)))
        infos = [node_info_subject(node) for node in ("golan", "avalon", "bilbo")]
        until("node info at bilbo", lambda: all(seen.get(s) for s in infos), source, carol)
        result["info"] = {}
        for subject in infos:
            flags, payload = seen[subject][-1]
            info = parse_node_info(subject, payload, cluster)
            result["info"][info.node] = {
                "flags": flags,
                "domains": [list(d) for d in info.domains],
                "connections": info.connections,
                "load": info.load,
            }

        # frodo: a node golan does not configure; its subscription at golan is refused.
        dave = Subscriber(client, address("frodo"), name="dave", host=CLIENT_HOST)
        refused: list[tuple[int, bytes]] = []
        dave.subscribe(SUBJECT, lambda s, f, p: refused.append((int(f), p)))
        until("frodo's answer", lambda: bool(refused), dave)
        result["frodo_answer"] = [refused[0][0], refused[0][1].decode(errors="replace")]
        status = subprocess.run(
            [
                *STATUS,
                "--config",
                str(workdir / "frodo.conf"),
                "--node",
                "frodo",
                "--host",
                CLIENT_HOST,
                "--timeout",
                "9",
            ],
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )
        result["frodo_status"] = [status.returncode, status.stdout, status.stderr]

        # golan counted frodo: its info (followed at bilbo) says so once it changed.
        golan = node_info_subject("golan")

        def golan_not_allowed() -> int:
            return parse_node_info(golan, seen[golan][-1][1], cluster).load.get("not_allowed", 0)

        until("golan's not_allowed in its node info", lambda: golan_not_allowed() >= 1, carol, dave)
        result["golan_not_allowed"] = golan_not_allowed()
        result["elapsed"] = round(time.monotonic() - started, 2)
        print_result(result)
        for peer in (source, carol, dave):
            peer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
