"""A publish at a slave whose link to the master is full (``docs/cluster.md``, "Publish at a
slave"): the core's forward queues let the link's send decide, so a publish the link did not
take is queued (the origin warned), or refused past the bound (the origin told), never counted
sent and lost. Unit-level: ``Forwarding`` with fake links, no router processes.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any, cast

from affinity import _affinity
from affinity.cluster_node import Forwarding, _Forwarder
from affinity.subjects import FORWARD_WARNING, Flags

ORIGIN = 7
SUBJECT = "/STOCK/IBM"
FLAGS = Flags.UPDATE | Flags.PUBLISH


class Core:
    """A source core whose link takes records only while ``accepting``."""

    def __init__(self, accepting: bool) -> None:
        self.accepting = accepting
        self.sent: list[tuple[str, int, bytes]] = []

    def send_data(self, subject: str, flags: int, payload: bytes) -> bool:
        if self.accepting:
            self.sent.append((subject, flags, payload))
        return self.accepting


class Link:
    """A live link (a ``Source`` as ``Forwarding`` uses it)."""

    def __init__(self, accepting: bool = True) -> None:
        self._core = Core(accepting)
        self._closed = False
        self.router_live = True

    def poll(self, limit: int) -> int:
        return 0

    def statuses(self) -> list[str]:
        length = _affinity.SUBJECT_ORIGIN_LENGTH
        return [payload[length:].decode() for _, flags, payload in self._core.sent if flags & Flags.STATUS]


def forwarding(bound: int, links: dict[str, Link]) -> Forwarding:
    """``Forwarding`` of a node whose links to ``links`` are settled (heard long enough)."""
    node = SimpleNamespace(
        node_id="avalon", _heartbeat_interval=0.01, _liveness_timeout=0.05, _lock=threading.Lock(), _parents={}
    )
    result = Forwarding(cast(Any, node), bound)
    for master, link in links.items():
        forwarder = _Forwarder(cast(Any, link))
        forwarder.live_since = time.monotonic() - 60
        result._forwarders[master] = forwarder
    return result


def publish(node: Forwarding, local: Link, body: bytes, parents: tuple[str, ...]) -> None:
    node.forward(cast(Any, local), ORIGIN, SUBJECT, FLAGS, body, "STOCK_EXCHANGE", parents)


def test_a_publish_a_full_link_does_not_take_is_queued_then_flushed_never_lost() -> None:
    golan, local = Link(accepting=False), Link()
    node = forwarding(1 << 16, {"golan": golan})
    publish(node, local, b"ibm 100", ("golan",))
    assert node.counters()["sent"] == 0, "the full link did not take it"
    assert node.counters()["queued"] == 1
    assert node.queue_depths()["golan"][0] == 1
    node.service()
    assert local.statuses() and local.statuses()[-1].startswith(FORWARD_WARNING)
    golan._core.accepting = True
    node.service()
    assert golan._core.sent == [(SUBJECT, int(FLAGS), b"ibm 100")], "flushed once the link takes it"
    assert node.counters() == {"sent": 0, "queued": 1, "flushed": 1, "refused": 0, "dropped": 0}
    assert local.statuses()[-1].startswith(_affinity.FORWARD_CLEARED)


def test_a_publish_a_full_link_does_not_take_past_the_bound_is_refused_and_the_origin_told() -> None:
    golan, local = Link(accepting=False), Link()
    node = forwarding(64, {"golan": golan})
    publish(node, local, b"x" * 200, ("golan",))
    assert node.counters()["refused"] == 1 and node.counters()["sent"] == 0
    refused = [p for s, f, p in local._core.sent if s == SUBJECT and f & Flags.REFUSED]
    assert len(refused) == 1 and b"FORWARD_REFUSED" in refused[0]


def test_a_mirrored_master_whose_link_is_full_gets_the_publish_queued() -> None:
    heron, golan, local = Link(), Link(accepting=False), Link()
    node = forwarding(1 << 16, {"heron": heron, "golan": golan})
    publish(node, local, b"ibm 101", ("heron", "golan"))
    assert heron._core.sent == [(SUBJECT, int(FLAGS), b"ibm 101")]
    assert node.counters_by_master()["heron"]["sent"] == 1
    assert node.counters_by_master()["golan"]["sent"] == 0
    assert node.counters_by_master()["golan"]["queued"] == 1
