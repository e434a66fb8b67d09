"""Mirrored masters kept in step: a publish at one master reaches the other masters of its
domain (``docs/cluster.md``, "Mirrored masters kept in step").

A node that is a configured master of a domain with other masters opens a source labelled
:data:`MIRROR_SOURCE_LABEL` at its own router. The router relays a publish from a local source
to its own subscribers as before and hands a copy to that source (the origin's id first); a
publish that came from another node (a ``node:<id>`` source: its origin sent it to every master
already) or from the node's own sources is never handed on, so nothing loops or arrives twice.
The node finds the publish's domain (the one it names, else the first domain whose include
pattern matches the subject) and, when this node is one of its masters, forwards it to the
others through :class:`affinity.cluster_node.Forwarding`: the same links (``node:<id>`` sources),
forward queues, bounds, warnings and dead-mirror rules as a publish at a slave, with this node
counted as a live master of the domain (a dead mirror's queue is dropped past its bound instead
of back-pressuring the source).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from affinity import _affinity
from affinity._polling import POLL_FRAGMENTS
from affinity.config.cluster import ClusterConfig
from affinity.subjects import Flags, Source

if TYPE_CHECKING:
    from affinity.cluster_node import ClusterNode

__all__ = ["MIRROR_SOURCE_LABEL", "MasterMirror", "other_masters"]

logger = logging.getLogger("affinity.cluster")

#: The label of a master's source its router hands local publishes to (from the core).
MIRROR_SOURCE_LABEL: Final[str] = _affinity.CLUSTER_MIRROR_SOURCE_LABEL


def other_masters(cluster: ClusterConfig, node_id: str) -> dict[str, tuple[str, ...]]:
    """Per domain ``node_id`` is a configured master of together with other nodes: those other
    masters, in configuration order (where its local publishes of the domain also go)."""
    node = cluster.node(node_id)
    if node is None:
        return {}
    found: dict[str, tuple[str, ...]] = {}
    for domain in node.master_of:
        others = tuple(master for master in cluster.masters(domain) if master != node_id)
        if others:
            found[domain] = others
    return found


class MasterMirror:
    """The node's side of the mirror: its source at its own router, open while this node is a
    master of a domain with other masters (reopened or closed by a reload, :meth:`reconfigure`)."""

    def __init__(self, node: ClusterNode) -> None:
        self._node = node
        self._source: Source | None = None
        self._others: dict[str, tuple[str, ...]] = {}
        self._patterns: list[tuple[str, list[_affinity.PosixRegex]]] = []
        self.reconfigure(node._cluster)

    def reconfigure(self, cluster: ClusterConfig) -> None:
        """Applies ``cluster`` (at start, and after a reload): the domains and their other masters
        now; the source opens when the first such domain appears and closes with the last."""
        node = self._node
        self._others = other_masters(cluster, node.node_id)
        self._patterns = [
            (domain.name, [_affinity.PosixRegex(pattern) for pattern in domain.include_patterns])
            for domain in cluster.domains
        ]
        if self._others and self._source is None:
            source = Source(
                node._client,
                node._listen,
                MIRROR_SOURCE_LABEL,
                host=node._router_host,
                heartbeat_interval=node._heartbeat_interval,
                liveness_timeout=node._liveness_timeout,
                secret=node._secret,
            )
            source.on_publish(self._publish)
            self._source = source
        elif not self._others and self._source is not None:
            self._source.close()
            self._source = None
            logger.info("Cluster node %s: no domain with another master now: publishes here stay here", node.node_id)
        for domain, others in self._others.items():
            logger.info("Cluster node %s: publishes of %s here go to %s too", node.node_id, domain, ", ".join(others))

    def _domain_of(self, subject: str, flags: Flags, body: bytes) -> str | None:
        """The domain a publish names, else the first whose include pattern matches its subject."""
        if flags & Flags.DOMAIN:
            named = _affinity.subject_domain(body)
            return None if named is None else named[0]
        for name, patterns in self._patterns:
            if any(pattern.is_match(subject) for pattern in patterns):
                return name
        return None

    def _publish(self, subject: str, flags: Flags, payload: bytes) -> None:
        source = self._source
        forwarding = self._node.forwarding
        split = forwarding.split_origin(subject, payload)
        if source is None or split is None:
            return
        origin, body = split
        domain = self._domain_of(subject, flags, body)
        others = self._others.get(domain, ()) if domain is not None else ()
        if domain is not None and others:  # else no domain, or one this node alone is master of
            forwarding.forward(source, origin, subject, flags, body, domain, others, taken_here=True)

    def poll(self) -> None:
        """Reads what the router hands the source (on the node's thread), as for its other sources."""
        if self._source is not None:
            self._source.poll(POLL_FRAGMENTS)

    def close(self) -> None:
        """Closes the source (the router stops handing publishes on)."""
        if self._source is not None:
            self._source.close()
            self._source = None
