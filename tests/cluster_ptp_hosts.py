"""PtP addresses on separate "hosts" (private network namespaces, ``tests/cluster_netns.py``; the
picture of ``tests/cluster_hosts.py``): heron master of RUGBY_NEWS, golan of STOCK_EXCHANGE,
avalon a slave of both, bilbo a slave of avalon. This script is the clients' host (10.9.0.1):
alice at avalon sends to ``/node/heron/client/joe`` before and after joe logs in at heron, carol
at bilbo sends to joe through avalon, and alice sends to a node the cluster does not know.
Prints ``RESULT <json>`` with what they saw; the routers' output goes to ``WORKDIR/<node>.log``.

    usage: cluster_ptp_hosts.py WORKDIR
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from affinity.cluster_ptp import PtpClient
from cluster_hosts import CONFIG
from cluster_netns import CLIENT_HOST, STEP_TIMEOUT, address, print_result, running_cluster, until

#: The nodes of the picture (frodo is not needed here).
NODES = ("heron", "golan", "avalon", "bilbo")
#: Messages alice sends before joe logs in, after, and carol's.
BEFORE, AFTER, THROUGH = 50, 100, 50
JOE = "/node/heron/client/joe"


def send(sender: PtpClient, to: str, payload: bytes) -> None:
    """Sends until accepted (False: the router's liveness not heard lately; never a refusal)."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while not sender.send(to, payload):
        if time.monotonic() > deadline:
            raise SystemExit(f"a message to {to}: not accepted within {STEP_TIMEOUT} s")
        sender.poll(16)
        time.sleep(0.005)


def main() -> int:
    workdir = Path(sys.argv[1])
    started = time.monotonic()
    (workdir / "cluster.conf").write_text(CONFIG)
    with running_cluster(workdir, {node: workdir / "cluster.conf" for node in NODES}) as (_routers, client):
        result: dict[str, Any] = {"started_in": round(time.monotonic() - started, 2)}

        def at(node: str, login: str) -> PtpClient:
            return PtpClient(client, address(node), login=login, node=node, host=CLIENT_HOST)

        alice, carol = at("avalon", "alice"), at("bilbo", "carol")
        clients = (alice, carol)
        until("alice and carol logged in", lambda: all(c.logged_in and c.ready for c in clients), alice, carol)
        sent = [f"a{i}" for i in range(BEFORE)]
        for payload in sent:
            send(alice, JOE, payload.encode())
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            alice.poll(64)
            time.sleep(0.005)
        joe = at("heron", "joe")
        got: list[str] = []
        joe.on_message(lambda to, payload: got.append(payload.decode()))
        until("the queued messages at joe's login", lambda: len(got) >= BEFORE, alice, joe)
        after = [f"a{i}" for i in range(BEFORE, BEFORE + AFTER)]
        for payload in after:
            send(alice, JOE, payload.encode())
            alice.poll(16)
        through = [f"c{i}" for i in range(THROUGH)]
        for payload in through:
            send(carol, JOE, payload.encode())
            carol.poll(16)
        until("every message at joe", lambda: len(got) >= BEFORE + AFTER + THROUGH, alice, carol, joe)
        send(alice, "/node/frodo/client/joe", b"lost?")
        until("the refusal of frodo", lambda: bool(alice.refusals), alice, carol, joe)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            for peer in (alice, carol, joe):
                peer.poll(64)
            time.sleep(0.005)
        result["from_alice"] = [p for p in got if p.startswith("a")]
        result["from_carol"] = [p for p in got if p.startswith("c")]
        result["received"] = len(got)
        result["refusals"] = [[r.address, r.reason] for r in alice.refusals + carol.refusals]
        result["elapsed"] = round(time.monotonic() - started, 2)
        print_result(result)
        for peer in (alice, carol, joe):
            peer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
