"""A router as a node of a cluster: slave subscriptions at the parent node (``docs/cluster.md``).

A node that is a slave of a domain serves that domain's subjects to its own router as a source
(label :func:`slave_label`, a data service :func:`slave_services` adds in front of the
configuration's own): when the router requests a subject (its first local subscriber), the
node subscribes once at the parent node (the domain's master, or the node's ``upstream``) as a
subscriber named ``node:<id>`` (:data:`NODE_NAME_PREFIX`), over the subject codec and control
plane every subscriber uses; the parent's images and updates are published to the local router,
which caches the image (later local subscribers are answered from it) and relays every update
to its subscribers, in order. A DISCARD (the last local subscriber gone) unsubscribes at the
parent. The link to a parent opens lazily, at the first request that needs it.

A parent refuses a node id it does not configure (``not-allowed``, counted in its
``RouterStatus.not_allowed``); the node logs the refusal, marks the connection ``not-allowed``
and answers its local subscribers NODATA unavailable.

Not built yet (``docs/cluster.md``, "Not done"): publishes at a slave forwarded to the
master, forward queues, cache expiry, mirrored masters through the load balancer, failover.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Final
from urllib.parse import urlsplit

from affinity import _affinity
from affinity.cluster_info import node_info_services
from affinity.config.cluster import ClusterConfig
from affinity.config.faucet import RouterConfig
from affinity.config.model import DataService, PeerLabel, PriorityGroup, SourceGroup
from affinity.exceptions import AffinityError, ConfigError
from affinity.secret import SecretArgument
from affinity.subjects import Flags, Source, Subscriber

__all__ = [
    "CONNECTION_STATES",
    "NODE_NAME_PREFIX",
    "ClusterNode",
    "cluster_router_config",
    "slave_label",
    "slave_services",
]

logger = logging.getLogger("affinity.cluster")

#: The subscriber name prefix a node uses at another node (``node:<id>``; the router's, from the core).
NODE_NAME_PREFIX: Final[str] = _affinity.CLUSTER_NODE_NAME_PREFIX
#: Connection states to another node (xmlBlaster's): heard, tried but not heard, refused.
CONNECTION_STATES: Final[tuple[str, ...]] = tuple(_affinity.CLUSTER_CONNECTION_STATES)
LOGGED_IN, POLLING, NOT_ALLOWED = CONNECTION_STATES
#: Fragments read per poll of each link, per loop iteration.
POLL_FRAGMENTS = 256
#: Seconds the node's thread sleeps when an iteration found nothing to do.
IDLE_SLEEP = 0.0005


def slave_label(domain: str) -> str:
    """The source label a slave node serves ``domain`` under at its own router."""
    return f"cluster.{domain}"


def slave_services(cluster: ClusterConfig, node_id: str) -> tuple[DataService, ...]:
    """One data service per domain ``node_id`` is a slave of (a parent is known): the domain's
    include patterns, served by :func:`slave_label`."""
    services = []
    for domain in cluster.domains:
        if cluster.parent(node_id, domain.name) is None:
            continue
        label = PeerLabel(slave_label(domain.name), True, domain.location)
        group = SourceGroup((PriorityGroup((label,), domain.location),), (), domain.location)
        services.append(DataService(f"cluster-{domain.name}", domain.include_patterns, (group,), domain.location))
    return tuple(services)


def cluster_router_config(config: RouterConfig, node_id: str) -> RouterConfig:
    """``config`` with the slave data services of ``node_id`` and its node info services
    (:func:`affinity.cluster_info.node_info_services`) in front of its own (the first matching
    service routes, so a domain's subjects go to the cluster)."""
    if config.cluster is None or config.cluster.node(node_id) is None:
        raise ConfigError(f"node {node_id!r}: not a node-id of the configuration's cluster")
    services = slave_services(config.cluster, node_id) + node_info_services(config.cluster, node_id)
    routing = replace(config.routing, data_services=services + config.routing.data_services)
    return replace(config, routing=routing)


def _endpoint_host(channel: str) -> str:
    """The host of an ``aeron:udp?endpoint=host:port`` channel (127.0.0.1 when it has none)."""
    query = urlsplit(channel.replace("aeron:udp?", "aeron://x/?", 1)).query
    for part in query.replace("|", "&").split("&"):
        key, _, value = part.partition("=")
        if key == "endpoint" and ":" in value:
            return value.rsplit(":", 1)[0]
    return "127.0.0.1"


class _Parent:
    """The link to one parent node: a subscriber named ``node:<this>`` at its address."""

    def __init__(self, subscriber: Subscriber) -> None:
        self.subscriber = subscriber
        self.state = POLLING


class ClusterNode:
    """Runs ``node_id``'s side of the cluster beside its router (listening on ``listen``).

    For every domain this node is a slave of, a :class:`~affinity.subjects.Source` on the local
    router serves the domain's subjects from the parent node; links to parents open lazily.
    :meth:`connections` reports each parent's state (:data:`CONNECTION_STATES`).
    """

    def __init__(
        self,
        client: _affinity.Client,
        cluster: ClusterConfig,
        node_id: str,
        *,
        listen: str,
        heartbeat_interval: float = 0.1,
        liveness_timeout: float = 2.0,
        secret: SecretArgument = None,
    ) -> None:
        node = cluster.node(node_id)
        if node is None:
            raise ConfigError(f"node {node_id!r}: not a node-id of the cluster")
        self.node_id = node_id
        self._client = client
        self._cluster = cluster
        self._heartbeat_interval, self._liveness_timeout = heartbeat_interval, liveness_timeout
        self._secret = secret
        self._host = _endpoint_host(node.address)
        self._parents: dict[str, _Parent] = {}
        self._lock = threading.Lock()
        self._sources: list[Source] = []
        for domain in cluster.domains:
            parent = cluster.parent(node_id, domain.name)
            if parent is None:
                continue
            source = Source(
                client,
                listen,
                slave_label(domain.name),
                host=_endpoint_host(listen),
                heartbeat_interval=heartbeat_interval,
                liveness_timeout=liveness_timeout,
                secret=secret,
            )
            source.on_request(self._on_request(source, parent))
            source.on_discard(self._on_discard(parent))
            self._sources.append(source)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"affinity-cluster-{node_id}", daemon=True)
        self._thread.start()

    def connections(self) -> dict[str, str]:
        """Per parent node linked so far: its state (:data:`CONNECTION_STATES`)."""
        with self._lock:
            return {node: parent.state for node, parent in self._parents.items()}

    def _parent(self, node_id: str) -> _Parent:
        parent = self._parents.get(node_id)
        if parent is None:
            spec = self._cluster.node(node_id)
            assert spec is not None  # parents come from the checked configuration
            subscriber = Subscriber(
                self._client,
                spec.address,
                name=f"{NODE_NAME_PREFIX}{self.node_id}",
                host=self._host,
                heartbeat_interval=self._heartbeat_interval,
                liveness_timeout=self._liveness_timeout,
                secret=self._secret,
            )
            parent = self._parents[node_id] = _Parent(subscriber)
            logger.info("Cluster node %s: connecting to %s at %s", self.node_id, node_id, spec.address)
        return parent

    def _on_request(self, source: Source, node_id: str) -> Callable[[str], None]:
        def request(subject: str) -> None:
            with self._lock:
                parent = self._parent(node_id)
            parent.subscriber.subscribe(subject, self._relay(source, node_id, parent))

        return request

    def _on_discard(self, node_id: str) -> Callable[[str], None]:
        def discard(subject: str) -> None:
            with self._lock:
                parent = self._parents.get(node_id)
            if parent is not None:
                try:
                    parent.subscriber.unsubscribe(subject)
                except ConfigError:
                    pass  # already refused and forgotten by the parent

        return discard

    def _relay(self, source: Source, node_id: str, parent: _Parent) -> Callable[[str, Flags, bytes], None]:
        def relay(subject: str, flags: Flags, payload: bytes) -> None:
            if flags & Flags.REFUSED:
                reason = payload.decode("utf-8", "replace")
                with self._lock:
                    if reason.startswith(NOT_ALLOWED):
                        parent.state = NOT_ALLOWED
                logger.warning("Cluster node %s: %s refused %s: %s", self.node_id, node_id, subject, reason)
                source.nodata(subject, "unavailable")
                return
            with self._lock:
                if parent.state == POLLING:
                    parent.state = LOGGED_IN
            if flags & Flags.STATUS:
                return  # the parent moved or restarted: a fresh image follows
            if flags & Flags.NODATA_NOTFOUND:
                source.nodata(subject, "notfound")
            elif flags & Flags.NODATA_UNAVAILABLE:
                source.nodata(subject, "unavailable")
            else:
                source.publish(subject, payload, image=bool(flags & Flags.IMAGE))

        return relay

    def _run(self) -> None:
        while not self._stop.is_set():
            work = 0
            try:
                for source in self._sources:
                    source.poll(POLL_FRAGMENTS)
                with self._lock:
                    parents = list(self._parents.values())
                for parent in parents:
                    work += parent.subscriber.poll(POLL_FRAGMENTS)
            except AffinityError as exc:  # closed client or link: the node stops
                if not self._stop.is_set():
                    logger.error("Cluster node %s stopped: %s", self.node_id, exc)
                return
            if work == 0:
                self._stop.wait(IDLE_SLEEP)

    def close(self) -> None:
        """Stops the thread and closes every link (parents see this node leave)."""
        self._stop.set()
        self._thread.join()
        for source in self._sources:
            source.close()
        for parent in self._parents.values():
            parent.subscriber.close()
