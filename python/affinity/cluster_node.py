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

A publish at a slave (any source, any subject of the domain) is handed by the router to the
node's source, which forwards it to the parent (:class:`Forwarding`): queued while the parent is
unreachable, bounded by ``forward-queue`` bytes, flushed in order; the publishing source is told
``FORWARD_WARNING`` while its publishes are queued, and back-pressured past the bound.

Which domain a subject the router hands the node belongs to (its subscription's parents, its
publishes' masters) is the cluster's ``master-mapper``'s (:mod:`affinity.cluster_mapping`; by
default the domain whose include pattern matched).

Mirrored masters (several masters of a domain): a subject is subscribed at the one the load
balancer picks, a publish goes to every one (:mod:`affinity.cluster_balance`). A subject whose
last local subscriber left stays subscribed and cached for ``cache-expiry``
(:mod:`affinity.cluster_cache`).

Master failover by ``backup-node`` and SIGHUP reload are :mod:`affinity.cluster_failover`'s
(links over the parent's backup order, takeover, reload).

A domain without a master: its publishes queue under the domain; a reload that gives it a
master hands that queue to the master (:meth:`Forwarding.assign`), flushed in order there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Final
from urllib.parse import urlsplit

from affinity import _affinity
from affinity._polling import POLL_FRAGMENTS, poll_until_stopped
from affinity.cluster_cache import SlaveSubscriptions, pass_on
from affinity.cluster_failover import Failover, deferral_services, link_routers, with_takeover_fallback
from affinity.cluster_info import node_info_services
from affinity.cluster_mapping import Mapping
from affinity.cluster_mirror import MasterMirror
from affinity.cluster_ptp import PtpNode, ptp_services
from affinity.config.cluster import DEFAULT_MASTER_MAPPER, ClusterConfig
from affinity.config.faucet import RouterConfig
from affinity.config.model import DataService, PeerLabel, PriorityGroup, SourceGroup
from affinity.exceptions import ConfigError
from affinity.secret import SecretArgument
from affinity.subjects import FORWARD_WARNING, Flags, Source, Subscriber

__all__ = [
    "CONNECTION_STATES",
    "FORWARD_SETTLE_HEARTBEATS",
    "NODE_NAME_PREFIX",
    "QUEUED_SOURCE_LABEL",
    "ClusterNode",
    "Forwarding",
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
#: The label of the source through which a node made a domain's master by a reload hands its
#: own router the publishes it had queued for want of a master (a ``cluster.`` label: its
#: router neither refuses it nor hands its publishes to a mirror; ``+`` is in no domain name).
QUEUED_SOURCE_LABEL: Final[str] = "cluster.+queued"
#: The subject of a forward status that concerns all of an origin's publishes.
ALL_SUBJECTS: Final[str] = "*"
#: Heartbeat intervals a parent must have been heard again before queued publishes are flushed
#: to it. When it was lost or restarted it must have been heard again for the node's liveness
#: timeout (its own returning subscribers re-subscribe meanwhile) and have answered the node's
#: own restored subscriptions there, so that its fan-out of the flushed publishes reaches them.
FORWARD_SETTLE_HEARTBEATS = 3


def slave_label(domain: str) -> str:
    """The source label a slave node serves ``domain`` under at its own router."""
    return f"cluster.{domain}"


def slave_services(cluster: ClusterConfig, node_id: str) -> tuple[DataService, ...]:
    """One data service per domain ``node_id`` is not master of: the domain's include patterns,
    served by :func:`slave_label` (the node asks the parent, or, for a domain without a master,
    answers NODATA and queues its publishes)."""
    services = []
    for domain in cluster.domains:
        if node_id in cluster.masters(domain.name):
            continue
        label = PeerLabel(slave_label(domain.name), True, domain.location)
        group = SourceGroup((PriorityGroup((label,), domain.location),), (), domain.location)
        services.append(DataService(f"cluster-{domain.name}", domain.include_patterns, (group,), domain.location))
    return tuple(services)


def cluster_router_config(config: RouterConfig, node_id: str) -> RouterConfig:
    """``config`` with the slave data services of ``node_id``, its node info services
    (:func:`affinity.cluster_info.node_info_services`) and its PtP services
    (:func:`affinity.cluster_ptp.ptp_services`, first) in front of its own (the first matching
    service routes, so a domain's subjects go to the cluster)."""
    if config.cluster is None or config.cluster.node(node_id) is None:
        raise ConfigError(f"node {node_id!r}: not a node-id of the configuration's cluster")
    own = config.routing.data_services
    slaves = with_takeover_fallback(slave_services(config.cluster, node_id), own, config.cluster, node_id)
    slaves += deferral_services(own, config.cluster, node_id)
    services = ptp_services(config.cluster, node_id) + slaves + node_info_services(config.cluster, node_id)
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

    def __init__(self, subscriber: Subscriber, routers: list[str]) -> None:
        self.subscriber = subscriber
        #: The parent and its backups (``cluster_failover.link_routers``): where the link may be.
        self.routers = routers
        self.state = POLLING
        #: The parent was lost or restarted (a STATUS) and has not answered a subscription since.
        self.awaiting_answer = False


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
        fallbacks: frozenset[str] = frozenset(),
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
        #: Subscriptions at the parents: mirrored masters balanced, kept for cache-expiry.
        self.subscriptions = SlaveSubscriptions(cluster, node_id)
        self._next_expiry = 0.0
        self._sources: list[Source] = []
        self._slave_domains: list[str] = []
        #: Subscriptions at the parents: mirrored masters balanced, kept for cache-expiry.
        self.subscriptions = SlaveSubscriptions(cluster, node_id)
        self._next_expiry = 0.0
        #: Per domain: the node asked for it (changes with a reload).
        self._parent_of: dict[str, str | None] = {}
        self._listen = listen
        #: The host of ``listen``: where the node's sources at its own router get their answers.
        self._router_host = _endpoint_host(listen)
        #: The ``master-mapper`` (raises PolicyError when its plugin cannot be loaded).
        self.mapping = Mapping(cluster, node_id)
        self.forwarding = Forwarding(self, cluster.settings.forward_queue)
        for domain in cluster.domains:
            if node_id not in cluster.masters(domain.name):
                self._open_slave_source(domain.name)
        #: Takes over domains of silent masters (``backup-node``) and applies reloads.
        self.failover = Failover(self, set(fallbacks))
        #: Local publishes of a domain with other masters go to them too (``affinity.cluster_mirror``).
        self.mirror = MasterMirror(self)
        #: PtP addresses (``affinity.cluster_ptp``): driven by this node's thread.
        self.ptp = PtpNode(
            client,
            cluster,
            node_id,
            listen=listen,
            listen_host=_endpoint_host(listen),
            link_host=self._host,
            heartbeat_interval=heartbeat_interval,
            liveness_timeout=liveness_timeout,
            secret=secret,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"affinity-cluster-{node_id}", daemon=True)
        self._thread.start()

    def _open_slave_source(self, domain: str) -> None:
        """The node's source for ``domain`` at its own router (:func:`slave_label`): requests go
        to the parent, publishes are forwarded to it."""
        parent = self._cluster.parent(self.node_id, domain)
        source = Source(
            self._client,
            self._listen,
            slave_label(domain),
            host=self._router_host,
            heartbeat_interval=self._heartbeat_interval,
            liveness_timeout=self._liveness_timeout,
            secret=self._secret,
        )
        serve, no_master = self._on_request(source, domain), _no_master(source, domain)

        def request(subject: str) -> None:
            # A domain without a master (until a reload gives it one) answers NODATA; a custom
            # master-mapper may send its subjects to a domain with one.
            if self._parent_of.get(domain) is None and self._cluster.settings.master_mapper == DEFAULT_MASTER_MAPPER:
                no_master(subject)
            else:
                serve(subject)

        source.on_request(request)
        source.on_discard(self.subscriptions.discard)
        source.on_publish(self.forwarding.on_publish(source, domain))
        self._parent_of[domain] = parent
        self._sources.append(source)
        self._slave_domains.append(domain)

    def connections(self) -> dict[str, str]:
        """Per parent node linked so far: its state (:data:`CONNECTION_STATES`)."""
        with self._lock:
            return {node: parent.state for node, parent in self._parents.items()}

    def _parent(self, node_id: str) -> _Parent:
        parent = self._parents.get(node_id)
        if parent is None:
            routers = link_routers(self._cluster, self.node_id, node_id)
            parent = self._parents[node_id] = _Parent(self._subscriber(routers), routers)
            logger.info("Cluster node %s: connecting to %s at %s", self.node_id, node_id, ", ".join(routers))
        return parent

    def _subscriber(self, routers: list[str]) -> Subscriber:
        """A link to a parent: a subscriber named ``node:<this>`` over ``routers``."""
        return Subscriber(
            self._client,
            routers=routers,
            name=f"{NODE_NAME_PREFIX}{self.node_id}",
            host=self._host,
            heartbeat_interval=self._heartbeat_interval,
            liveness_timeout=self._liveness_timeout,
            secret=self._secret,
        )

    def _on_request(self, source: Source, domain: str) -> Callable[[str], None]:
        def request(subject: str) -> None:
            mapped = self.mapping.domain_for(subject, domain)
            if mapped not in self.subscriptions.balancers:  # a domain no add-domain defines
                logger.warning(
                    "Cluster node %s: %s mapped to domain %s, which has no master here", self.node_id, subject, mapped
                )
                source.nodata(subject, "unavailable")
                return
            answer = self.subscriptions.request(mapped, subject)
            if answer.parent is not None:
                with self._lock:
                    parent = self._parent(answer.parent)
                parent.subscriber.subscribe(subject, self._relay(source, answer.parent, parent))
            elif answer.refused:
                source.nodata(subject, "unavailable")
            elif answer.nodata is not None:
                source.nodata(subject, answer.nodata)
            elif answer.flags is not None:
                source.publish(subject, answer.payload, image=True)

        return request

    def _expire(self) -> None:
        """Unsubscribes at the parents the subjects idle past ``cache-expiry``."""
        for _, subject in self.subscriptions.expire():
            # At whichever link holds it now (a reload may have moved it to another parent's).
            with self._lock:
                parents = list(self._parents.values())
            for parent in parents:
                if subject in parent.subscriber.subjects():
                    try:
                        parent.subscriber.unsubscribe(subject)
                    except ConfigError:
                        pass  # already refused and forgotten by the parent

    def _relay(self, source: Source, node_id: str, parent: _Parent) -> Callable[[str, Flags, bytes], None]:
        def relay(subject: str, flags: Flags, payload: bytes) -> None:
            if flags & Flags.REFUSED:
                reason = payload.decode("utf-8", "replace")
                with self._lock:
                    if reason.startswith(NOT_ALLOWED):
                        parent.state = NOT_ALLOWED
                logger.warning("Cluster node %s: %s refused %s: %s", self.node_id, node_id, subject, reason)
                self.subscriptions.forget(subject)
                source.nodata(subject, "unavailable")
                return
            with self._lock:
                if parent.state == POLLING:
                    parent.state = LOGGED_IN
            with self._lock:
                # STATUS: the parent was lost or restarted; a fresh image follows once it is back.
                parent.awaiting_answer = bool(flags & Flags.STATUS)
            # A STATUS (the link moved to a backup, or the parent restarted) reaches the local
            # subscribers too, before the fresh image; the rest only when the cache relays it.
            if flags & Flags.STATUS or self.subscriptions.on_data(node_id, subject, flags, payload):
                pass_on(source, subject, flags, payload)

        return relay

    def _run(self) -> None:
        poll_until_stopped(self._stop, self._step, f"Cluster node {self.node_id}", logger, self._client.wait_for_data)

    def _step(self) -> int:
        """One iteration of the node's thread: its sources, its parent links, its forwarding."""
        work = 0
        for source in self._sources:
            source.poll(POLL_FRAGMENTS)
        with self._lock:
            parents = list(self._parents.values())
        for parent in parents:
            work += parent.subscriber.poll(POLL_FRAGMENTS)
        now = time.monotonic()
        if now >= self._next_expiry:
            self._next_expiry = now + self.subscriptions.check_every
            self._expire()
        self.mirror.poll()
        return work + self.forwarding.service() + self.failover.service() + self.ptp.poll(POLL_FRAGMENTS)

    def close(self) -> None:
        """Stops the thread and closes every link (parents see this node leave)."""
        self._stop.set()
        self._thread.join()
        for source in self._sources:
            source.close()
        for parent in self._parents.values():
            parent.subscriber.close()
        self.mirror.close()
        self.forwarding.close()
        self.failover.close()
        self.ptp.close()


def _no_master(source: Source, domain: str) -> Callable[[str], None]:
    """A request for a subject of ``domain``, which no node is master of: NODATA unavailable."""

    def request(subject: str) -> None:
        logger.warning("Cluster node: %s of domain %s requested, but the domain has no master", subject, domain)
        source.nodata(subject, "unavailable")

    return request


class _Forwarder:
    """The link publishes go to one parent node on: a source labelled ``node:<this>`` there."""

    def __init__(self, source: Source) -> None:
        self.source = source
        #: When the parent was last found heard again (None: not heard now).
        self.live_since: float | None = None
        #: The parent was heard, then lost (killed, restarted, moved): it settles longer.
        self.lost = False


class Forwarding:
    """Publishes at this node forwarded to the parent of their domain (``docs/cluster.md``,
    "Publish at a slave"): the I/O around the core's forward queues
    (:class:`affinity._affinity.ClusterForwardQueues`: order, bound, who must be told what).

    The router hands each publish of a domain this node is a slave of to the node's source for
    the domain, the origin source's id first. It is sent to the parent at once when the link to
    the parent is live (heard for :data:`FORWARD_SETTLE_HEARTBEATS`), nothing is queued before
    it and the link takes it (not full); else queued (the origin is told ``FORWARD_WARNING``),
    or past ``forward-queue`` bytes refused (the origin is told each refusal and is
    back-pressured for that queue until room is made).
    Links to parents open lazily, at the first publish for them.
    """

    def __init__(self, node: ClusterNode, bound: int) -> None:
        self._node = node
        self.queues = _affinity.ClusterForwardQueues(bound)
        self._forwarders: dict[str, _Forwarder] = {}
        #: The node's source the statuses for each origin go back through.
        self._reply: Source | None = None
        #: Domains publishes were queued under for want of a master (configured domains, or a
        #: mapper's names: at most ``cluster_mapping.MAX_UNKNOWN_DOMAINS`` of those).
        self._without_master: set[str] = set()

    def _forwarder(self, node_id: str) -> _Forwarder:
        forwarder = self._forwarders.get(node_id)
        if forwarder is None:
            node = self._node
            spec = node._cluster.node(node_id)
            assert spec is not None  # parents come from the checked configuration
            if node_id == node.node_id:  # master now (a reload): its own router relays them
                label, routers, host = QUEUED_SOURCE_LABEL, [node._listen], node._router_host
            else:
                label, routers = f"{NODE_NAME_PREFIX}{node.node_id}", link_routers(node._cluster, node.node_id, node_id)
                host = node._host
            source = Source(
                node._client,
                label=label,
                routers=routers,
                host=host,
                heartbeat_interval=node._heartbeat_interval,
                liveness_timeout=node._liveness_timeout,
                secret=node._secret,
            )
            forwarder = self._forwarders[node_id] = _Forwarder(source)
            logger.info("Cluster node %s: forwarding publishes to %s at %s", node.node_id, node_id, spec.address)
        return forwarder

    def _settled(self, node_id: str, forwarder: _Forwarder, now: float) -> bool:
        if not forwarder.source.router_live:
            forwarder.lost = forwarder.lost or forwarder.live_since is not None
            forwarder.live_since = None
            return False
        if forwarder.live_since is None:
            forwarder.live_since = now
        settle = FORWARD_SETTLE_HEARTBEATS * self._node._heartbeat_interval
        if forwarder.lost:
            # A parent back after a loss knows no subscriber: its own clients re-subscribe
            # within their liveness timeout, and the flushed publishes must find them there.
            settle = max(settle, self._node._liveness_timeout)
        if now - forwarder.live_since < settle:
            return False
        forwarder.lost = False
        # The node's own subscriptions at that parent go first: a restarted parent fans the
        # flushed publishes out only to the subscribers it knows, this node among them once it
        # has answered the node's restored subscriptions.
        node = self._node
        with node._lock:
            link = node._parents.get(node_id)
            return link is None or not link.awaiting_answer or not link.subscriber.subjects()

    def on_publish(self, local: Source, domain: str) -> Callable[[str, Flags, bytes], None]:
        """The callback of the node's source for ``domain``: forwards what the router hands it."""

        def publish(subject: str, flags: Flags, payload: bytes) -> None:
            split = self.split_origin(subject, payload)
            if split is None:
                return
            # The domain the master-mapper gives; every master of it (mirrored masters), or the
            # node's upstream for it, as the configuration says now (a reload may move them).
            origin, body = split
            mapped = self._node.mapping.domain_for(subject, domain)
            self.forward(local, origin, subject, flags, body, mapped, self._node.failover.parents(mapped))

        return publish

    def split_origin(self, subject: str, payload: bytes) -> tuple[int, bytes] | None:
        """``(origin, payload)`` of a publish the router handed a node source (the origin
        source's id first); ``None``, logged, when it is too short to hold one."""
        if len(payload) < _affinity.SUBJECT_ORIGIN_LENGTH:
            logger.warning("Cluster node %s: a publish of %s without its origin", self._node.node_id, subject)
            return None
        length = _affinity.SUBJECT_ORIGIN_LENGTH
        return int.from_bytes(payload[:length], "little"), payload[length:]

    def forward(
        self,
        local: Source,
        origin: int,
        subject: str,
        flags: Flags,
        body: bytes,
        domain: str,
        parents: tuple[str, ...],
        *,
        taken_here: bool = False,
    ) -> None:
        """Forwards ``origin``'s publish of ``subject`` (of ``domain``) to every one of
        ``parents``, or queues it under the domain when there is none; ``local`` is the node's
        source the router handed it to (statuses for the origin go back through it).
        ``taken_here``: this node is a master of the domain too and its router relayed it (a
        dead mirror's queue is then dropped past its bound, never back-pressuring the origin)."""
        self._reply = local
        if parents:
            now = time.monotonic()
            targets: list[tuple[str, bool, Callable[[str, int, bytes], bool]]] = []
            for parent in parents:
                forwarder = self._forwarder(parent)
                settled = self._settled(parent, forwarder, now)
                targets.append((parent, settled, forwarder.source._core.send_data))
            # Sent when the link takes it (a full link's is queued, or refused past the bound); a
            # dead mirror's queue past its bound is dropped ("dropped") while another master
            # takes the publish; with none reachable the bound back-pressures.
            outcomes = self.queues.publish_all(targets, origin, subject, int(flags), body, taken_here)
        else:  # master unknown (a domain no node is master of): queued under the domain
            self._without_master.add(domain)
            outcomes = [self.queues.publish(None, domain, origin, subject, int(flags), body, False)]
        if "full" in outcomes:
            text = f"FORWARD_REFUSED: the queue for {', '.join(parents) or domain} is full; publish again later"
            self._tell(origin, subject, Flags.STATUS | Flags.REFUSED | Flags.PUBLISH, text)

    def _tell(self, origin: int, subject: str, flags: Flags, text: str) -> None:
        if self._reply is not None and self._reply._closed:
            # The node's source for the domain closed (this node took the domain over): its own
            # router's queue source, a cluster source too, carries the statuses from then on.
            own = self._forwarders.get(self._node.node_id)
            self._reply = None if own is None else own.source
        if self._reply is None:
            return
        payload = origin.to_bytes(_affinity.SUBJECT_ORIGIN_LENGTH, "little") + text.encode()
        self._reply._core.send_data(subject, int(flags), payload)

    def service(self) -> int:
        """Polls the links, flushes the queues of parents heard again, tells origins; returns
        the work done (records polled and publishes flushed)."""
        work = 0
        now = time.monotonic()
        for node_id, forwarder in list(self._forwarders.items()):
            forwarder.source.poll(POLL_FRAGMENTS)
            if self._settled(node_id, forwarder, now):
                work += self.queues.flush(node_id, forwarder.source._core.send_data)
        for event, master, count, resync, unlisted in self.queues.events():
            work += 1
            if event == "dropped":
                logger.warning(
                    "Cluster node %s: mirrored master %s unreachable past forward-queue: its queue of %d publishes "
                    "is dropped (another master of the domain takes them); publishes are not queued for it until "
                    "it is back, and its subscribers need a fresh image then",
                    self._node.node_id,
                    master,
                    count,
                )
            else:
                logger.warning(
                    "Cluster node %s: mirrored master %s reachable again: it gets publishes from now on; "
                    "%d publishes made while its queue was dropped never reach it; %d sources' subjects asked "
                    "for a fresh image (%d more not listed)",
                    self._node.node_id,
                    master,
                    count,
                    len(resync),
                    unlisted,
                )
                text = f"{_affinity.FORWARD_RESYNC}: mirrored master {master} missed publishes of this subject"
                for origin, subject in resync:
                    self._tell(origin, subject, Flags.STATUS | Flags.PUBLISH, text)
        for origin, notice in self.queues.notices():
            work += 1
            if notice == "warning":
                node = self._node.node_id
                text = f"{FORWARD_WARNING}: publishes queued at node {node} for an unreachable or unknown master"
            else:
                text = f"{_affinity.FORWARD_CLEARED}: queued publishes sent on"
            self._tell(origin, ALL_SUBJECTS, Flags.STATUS | Flags.PUBLISH, text)
        return work

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        """``(publishes, bytes)`` queued now per parent node this node forwards to (node info's
        ``queues``; safe to call from another thread than the node's)."""
        return {node_id: self.queues.queued(node_id) for node_id in list(self._forwarders)}

    def depths_without_master(self) -> dict[str, tuple[int, int]]:
        """``(publishes, bytes)`` queued now per domain without a master (node info's
        ``queues_without_master``; safe to call from another thread than the node's)."""
        return {domain: self.queues.queued_without_master(domain) for domain in list(self._without_master)}

    def counters(self) -> dict[str, int]:
        """Publishes ``sent`` at once, ``queued``, ``flushed``, ``refused`` and ``dropped`` (for a
        dead mirrored master, "Publish at a slave") since start, over every master."""
        return self.queues.counters()

    def counters_by_master(self) -> dict[str, dict[str, int]]:
        """:meth:`counters` per master this node forwards to (node info's ``forwarded``; safe to
        call from another thread than the node's)."""
        return {node_id: self.queues.counters_for(node_id) for node_id in list(self._forwarders)}

    def stale_masters(self) -> list[str]:
        """Mirrored masters whose queue was dropped and that were not reachable since (node
        info's ``stale_masters``; safe to call from another thread than the node's)."""
        return [node_id for node_id in list(self._forwarders) if self.queues.is_stale(node_id)]

    def domains_without_master(self) -> set[str]:
        """Domains publishes were queued under for want of a master (see :meth:`assign`)."""
        return set(self._without_master)

    def assign(self, domain: str, masters: tuple[str, ...]) -> int:
        """``domain``, which had no master, got ``masters`` (a reload): the publishes queued
        under it move to each master's queue (links opened now) and flush there in order once
        it is heard; returns how many moved."""
        if domain not in self._without_master or not masters:
            return 0
        for master in masters:
            self._forwarder(master)
        moved = self.queues.assign(domain, list(masters))
        self._without_master.discard(domain)
        logger.warning(
            "Cluster node %s: domain %s has a master now (%s): its %d queued publishes go there, in order",
            self._node.node_id,
            domain,
            ", ".join(masters),
            moved,
        )
        return moved

    def close(self) -> None:
        """Closes the links to parents (logging the counters)."""
        counters = self.counters()
        if any(counters.values()):
            figures = ", ".join(f"{name} {value}" for name, value in counters.items())
            logger.info("Cluster node %s: publishes forwarded: %s", self._node.node_id, figures)
        for forwarder in self._forwarders.values():
            forwarder.source.close()
