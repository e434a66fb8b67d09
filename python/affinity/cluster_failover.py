"""Master failover by ``backup-node`` and the reload of the cluster block (``docs/cluster.md``,
"Master failover and reload").

A node's links to a parent node (its slave subscriptions and its forwarder) name the parent and
then the parent's ``backup-node`` list (:func:`link_routers`), so when the parent is silent past
the liveness timeout they move to the next one, as any subscriber or source moves between the
routers of its list: the subscriptions are sent again, a STATUS and a fresh image follow, and
queued publishes flush there once it answered.

A node named in a master's ``backup-node`` list watches the nodes ahead of it in that order
(the master, then the backups before it): its router serves the domain from the node's
``cluster.<DOMAIN>`` source first and from its own data service for the domain next
(:func:`with_takeover_fallback`); when every node ahead has been silent past the liveness
timeout the node *takes over* the domain (:class:`Failover`): it closes that source, and its
router moves the domain's subjects to its own sources (a STATUS, then a fresh image, for every
subscriber, nodes included). A domain taken over stays at the backup (no move back when the
master returns) until the configuration is reloaded. A master with a ``backup-node`` order
that starts while a backup serves its domain defers to that backup (:class:`_Deferral`: it
serves its subscribers through the backup as a slave) until a reload, so one node serves the
domain at a time. A slave balancing over mirrored masters watches them: a dead one is no longer
picked and its subjects move to a live one (:meth:`Failover._mirror_changed`).

:meth:`Failover.reload` applies a re-read cluster block (SIGHUP to ``affinity router``): new
nodes can be linked to (and the router lets them in), a domain whose parent changed moves its
subscriptions to the new parent, a domain this node becomes master of is taken over when its
router can serve it (an own data service for the domain, behind the node's source), a domain it
is master of no more goes to the new master (:meth:`Failover._give_up`: new subscriptions go
there), and links not at the first node of their order move back there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from affinity import _affinity
from affinity._polling import POLL_FRAGMENTS
from affinity.cluster_balance import parents_of
from affinity.cluster_cache import pass_on
from affinity.cluster_info import NODE_INFO_INTERVAL, ROLES, ForgedNodeInfo, node_info_subject, parse_node_info
from affinity.config.cluster import ClusterConfig
from affinity.config.model import DataService, PeerLabel, PriorityGroup
from affinity.subjects import Flags, Source, Subscriber

if TYPE_CHECKING:
    from affinity.cluster_node import ClusterNode

__all__ = [
    "WATCH_LABEL_PREFIX",
    "Failover",
    "deferral_domains",
    "deferral_services",
    "failover_order",
    "fallback_domains",
    "link_order",
    "link_routers",
    "mirrored_domains",
    "read_reload",
    "takeover_domains",
    "with_takeover_fallback",
]

logger = logging.getLogger("affinity.cluster")

MASTER, SLAVE = ROLES
#: The source label a node watches another node's liveness under (``node-watch:<this node>``).
WATCH_LABEL_PREFIX: Final[str] = _affinity.CLUSTER_NODE_WATCH_PREFIX
#: Node info intervals (``NODE_INFO_INTERVAL``) without a backup's info after which a deferring
#: master takes it for silent (at least its liveness timeout; the info comes every interval).
DEFERRAL_INFO_INTERVALS: Final[int] = 3


def failover_order(cluster: ClusterConfig, node_id: str) -> tuple[str, ...]:
    """``node_id`` then its ``backup-node`` list: who serves what it serves, in order."""
    node = cluster.node(node_id)
    return (node_id, *node.backup_nodes) if node is not None else (node_id,)


def link_order(cluster: ClusterConfig, node_id: str, parent: str) -> tuple[str, ...]:
    """The nodes ``node_id``'s link to ``parent`` uses, in order: :func:`failover_order` of the
    parent, cut before ``node_id`` itself (a backup never links to itself: it takes over)."""
    order = failover_order(cluster, parent)
    return order[: order.index(node_id)] if node_id in order else order


def link_routers(cluster: ClusterConfig, node_id: str, parent: str) -> list[str]:
    """The addresses of :func:`link_order` (a link's ``routers=`` list)."""
    addresses = []
    for other in link_order(cluster, node_id, parent):
        spec = cluster.node(other)
        if spec is not None:
            addresses.append(spec.address)
    return addresses


def takeover_domains(cluster: ClusterConfig, node_id: str) -> dict[str, tuple[str, ...]]:
    """Per domain ``node_id`` may take over: the nodes ahead of it (the domain's master it asks,
    then that master's backups before ``node_id``). Only a master's backups take over; a node
    that asks an ``upstream`` node for the domain follows that node's backups instead."""
    found: dict[str, tuple[str, ...]] = {}
    for domain in cluster.domains:
        parent = cluster.parent(node_id, domain.name)
        if parent is None or parent not in cluster.masters(domain.name):
            continue
        order = failover_order(cluster, parent)
        if node_id in order:
            found[domain.name] = order[: order.index(node_id)]
    return found


def mirrored_domains(cluster: ClusterConfig, node_id: str) -> dict[str, tuple[str, ...]]:
    """Per domain ``node_id`` asks several mirrored masters for directly (no ``upstream``):
    those masters. The node watches them: a dead one is not picked and its subjects move."""
    found: dict[str, tuple[str, ...]] = {}
    for domain in cluster.domains:
        parents = parents_of(cluster, node_id, domain.name)
        if len(parents) > 1:
            found[domain.name] = parents
    return found


def _own_service(services: tuple[DataService, ...], patterns: tuple[str, ...]) -> DataService | None:
    """The first of ``services`` (the configuration's own) sharing an include pattern with a
    domain, with one source group (a backup serves the domain from it)."""
    for service in services:
        if set(service.include_patterns) & set(patterns) and len(service.source_groups) == 1:
            return service
    return None


def with_takeover_fallback(
    services: tuple[DataService, ...], own: tuple[DataService, ...], cluster: ClusterConfig, node_id: str
) -> tuple[DataService, ...]:
    """``services`` (the node's ``cluster-<DOMAIN>`` ones) where, for every domain one of its
    own data services serves (:func:`_own_service` of ``own``), the node's source comes first
    and the priority groups of that service next: with the node's source closed, the router
    serves the domain itself. A node takes a domain over so: as a master's backup
    (:func:`takeover_domains`), or when a reload makes it the domain's master (its first, or
    in place of another)."""
    domains = {domain.name: domain for domain in cluster.domains}
    result = []
    for service in services:
        name = service.name.removeprefix("cluster-")
        local = _own_service(own, domains[name].include_patterns)
        if local is not None:
            first = service.source_groups[0]
            group = local.source_groups[0]
            merged = replace(group, priority_groups=first.priority_groups + group.priority_groups)
            service = replace(service, source_groups=(merged,))
        result.append(service)
    return tuple(result)


def deferral_domains(cluster: ClusterConfig, node_id: str) -> dict[str, tuple[str, ...]]:
    """Per domain ``node_id`` is master of, when it has a ``backup-node`` order: the backups it
    defers to at its start when one of them serves the domain (took it over while it was down)."""
    node = cluster.node(node_id)
    if node is None or not node.backup_nodes:
        return {}
    return {domain: tuple(node.backup_nodes) for domain in node.master_of}


def deferral_services(own: tuple[DataService, ...], cluster: ClusterConfig, node_id: str) -> tuple[DataService, ...]:
    """A ``cluster-<DOMAIN>`` data service for every domain ``node_id`` is master of that one of
    ``own`` (the configuration's services) serves: the node's ``cluster.<DOMAIN>`` source
    first, the priority groups of its own service next. The source is open only while the
    node serves the domain from another node: deferring to a backup (:func:`deferral_domains`),
    or master no more after a reload; otherwise the router serves the domain itself."""
    from affinity.cluster_node import slave_label

    services = []
    for domain in cluster.domains:
        if node_id not in cluster.masters(domain.name):
            continue
        local = _own_service(own, domain.include_patterns)
        if local is None:
            continue
        label = PeerLabel(slave_label(domain.name), True, domain.location)
        group = local.source_groups[0]
        first = PriorityGroup((label,), domain.location)
        merged = replace(group, priority_groups=(first, *group.priority_groups))
        services.append(DataService(f"cluster-{domain.name}", domain.include_patterns, (merged,), domain.location))
    return tuple(services)


def fallback_domains(services: tuple[DataService, ...]) -> set[str]:
    """The domains whose ``cluster-<DOMAIN>`` service in ``services`` has a fallback."""
    return {
        service.name.removeprefix("cluster-")
        for service in services
        if service.name.startswith("cluster-") and len(service.source_groups[0].priority_groups) > 1
    }


class _Watch:
    """Another node's liveness: a source labelled :data:`WATCH_LABEL_PREFIX` there."""

    def __init__(self, node: ClusterNode, address: str) -> None:
        self.address = address
        self.source = Source(
            node._client,
            address,
            f"{WATCH_LABEL_PREFIX}{node.node_id}",
            host=node._host,
            heartbeat_interval=node._heartbeat_interval,
            liveness_timeout=node._liveness_timeout,
            secret=node._secret,
        )
        self.created = time.monotonic()
        #: Whether the node was heard since the watch opened.
        self.heard = False


class Failover:
    """The node's failover: watches the nodes ahead of it in the ``backup-node`` orders,
    takes over their domains when they are all silent, and applies reloads. Runs on the
    node's thread (:meth:`service`); :meth:`reload` may be called from any thread."""

    def __init__(self, node: ClusterNode, fallbacks: set[str]) -> None:
        self._node = node
        #: Domains the router can serve itself (built with a fallback at start).
        self._fallbacks = fallbacks
        self._watches: dict[str, _Watch] = {}
        #: Domains taken over: since when.
        self.taken: dict[str, float] = {}
        self._pending: ClusterConfig | None = None
        self._pending_lock = threading.Lock()
        self._ahead: dict[str, tuple[str, ...]] = {}
        #: Per domain with mirrored masters this node asks directly: the masters.
        self._mirrors: dict[str, tuple[str, ...]] = {}
        #: Mirrored masters found silent (not picked; their subjects moved to a live one).
        self.mirrors_down: set[str] = set()
        self._configure(node._cluster)
        #: Domains this (restarted) master may defer to a backup serving them.
        self.deferrals: dict[str, _Deferral] = {
            domain: _Deferral(self, domain, backups)
            for domain, backups in deferral_domains(node._cluster, node.node_id).items()
            if domain in fallbacks
        }
        for domain, ahead in self._ahead.items():
            if domain not in fallbacks:
                logger.warning(
                    "Cluster node %s: backup of %s for %s, but none of its data services serves the domain: "
                    "it cannot take the domain over",
                    node.node_id,
                    ahead[0],
                    domain,
                )

    def _configure(self, cluster: ClusterConfig) -> None:
        self._ahead = {d: ahead for d, ahead in takeover_domains(cluster, self._node.node_id).items()}
        self._mirrors = mirrored_domains(cluster, self._node.node_id)
        wanted = {other for ahead in self._ahead.values() for other in ahead}
        wanted |= {master for masters in self._mirrors.values() for master in masters}
        # A reload made the balancers again (every master up in them): judge them afresh.
        self.mirrors_down.clear()
        for other in list(self._watches):
            spec = cluster.node(other)
            if other not in wanted or spec is None or spec.address != self._watches[other].address:
                self._watches.pop(other).source.close()
        for other in wanted:
            spec = cluster.node(other)
            if other not in self._watches and spec is not None:
                self._watches[other] = _Watch(self._node, spec.address)

    def _silent(self, other: str, now: float) -> bool:
        """Whether ``other`` is silent: its router not heard within the liveness timeout (the
        watch's own judgement), or never heard a liveness timeout after the watch opened."""
        watch = self._watches.get(other)
        if watch is None:
            return True
        if watch.source.router_live:
            return False
        return watch.heard or now - watch.created > self._node._liveness_timeout

    def service(self) -> int:
        """Polls the watches, takes over domains whose nodes ahead are all silent, applies a
        pending reload; returns the work done."""
        work = 0
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._apply(pending)
            work += 1
        now = time.monotonic()
        for watch in self._watches.values():
            watch.source.poll(16)
            watch.heard = watch.heard or watch.source.router_live
        for domain, ahead in self._ahead.items():
            if domain in self.taken or domain not in self._fallbacks:
                continue
            if all(self._silent(other, now) for other in ahead):
                self._take_over(domain, f"{', '.join(ahead)} silent for {self._node._liveness_timeout:g} s")
                work += 1
        for deferral in list(self.deferrals.values()):
            work += deferral.service(now)
        for master in sorted({master for masters in self._mirrors.values() for master in masters}):
            # Marked down only while another master of its domains is live: with none live the
            # subjects have nowhere to go, and new ones still go to a master (queued there).
            others = {m for masters in self._mirrors.values() if master in masters for m in masters} - {master}
            silent = self._silent(master, now) and any(not self._silent(m, now) for m in others)
            if silent != (master in self.mirrors_down):
                self._mirror_changed(master, up=not silent)
                work += 1
        return work

    def _mirror_changed(self, master: str, *, up: bool) -> None:
        """A mirrored master went silent (``up`` False: the load balancer no longer picks it and
        its subjects move to a live master) or was heard again (picked again for new subjects)."""
        node = self._node
        if up:
            self.mirrors_down.discard(master)
            logger.warning(
                "Cluster node %s: mirrored master %s live again: picked for new subjects", node.node_id, master
            )
        else:
            self.mirrors_down.add(master)
            why = f"silent for {node._liveness_timeout:g} s"
            logger.warning("Cluster node %s: mirrored master %s %s: its subjects move", node.node_id, master, why)
        for domain, masters in self._mirrors.items():
            balancer = node.subscriptions.balancers.get(domain)
            if master not in masters or balancer is None:
                continue
            for subject, parent in balancer.set_up(master, up):
                if parent is not None:
                    self._move_subject(domain, subject, parent, f"{master} {'live again' if up else 'silent'}")

    def _move_subject(self, domain: str, subject: str, to: str, why: str) -> None:
        """Moves ``subject`` from the parent it is subscribed at to ``to``: unsubscribed at the
        old link; if a local subscriber holds it, its subscribers get a STATUS, then ``to``'s
        fresh image and updates (the cache relays only what ``to`` sends)."""
        node = self._node
        was = node.subscriptions.cache.parent(subject)
        if was is None or was == to or domain not in node._slave_domains:
            return
        with node._lock:
            old = node._parents.get(was)
        if old is not None:
            while subject in old.subscriber.subjects():
                old.subscriber.unsubscribe(subject)
        if not node.subscriptions.move(subject, to):
            logger.info("Cluster node %s: idle %s forgotten (%s)", node.node_id, subject, why)
            return
        # The source the router serves the subject from: its pattern domain's (a master-mapper
        # may have balanced it among another domain's masters).
        served = _domain_of(node._cluster, subject)
        source = node._sources[node._slave_domains.index(served if served in node._slave_domains else domain)]
        text = f"{subject} moved from node {was} to node {to}: {why}"
        source._core.send_data(subject, int(Flags.STATUS), text.encode())
        with node._lock:
            new = node._parent(to)
        new.subscriber.subscribe(subject, node._relay(source, to, new))
        logger.warning("Cluster node %s: %s", node.node_id, text)

    def parents(self, domain: str) -> tuple[str, ...]:
        """Where publishes of ``domain`` at this node go: the backup this master defers to, else
        :func:`~affinity.cluster_balance.parents_of` (none while it decides: queued)."""
        deferral = self.deferrals.get(domain)
        if deferral is not None and domain not in self.taken:
            return () if deferral.target is None else (deferral.target,)
        return parents_of(self._node._cluster, self._node.node_id, domain)

    def _take_over(self, domain: str, why: str) -> None:
        """Serves ``domain`` here: the node's source for it closes (the router moves its subjects
        to its own sources) and its subscriptions at other nodes are dropped. A master that
        deferred to a backup serves its own domain again (not recorded as taken over)."""
        node = self._node
        deferral = self.deferrals.pop(domain, None)
        if deferral is not None:
            deferral.close()
            logger.warning("Cluster node %s: serves domain %s (%s)", node.node_id, domain, why)
        else:
            logger.warning("Cluster node %s: takes over domain %s (%s)", node.node_id, domain, why)
            self.taken[domain] = time.monotonic()
        if domain in node._slave_domains:
            index = node._slave_domains.index(domain)
            node._slave_domains.pop(index)
            node._sources.pop(index).close()
        self._drop_domain_links(domain)

    def _hand_back(self, domain: str, parent: str) -> None:
        """Serves ``domain`` from ``parent`` again (a reload, the master live): the node's source
        for it opens again, so the router sends new subscriptions there; the subjects the router
        serves from its own sources stay there until their last subscriber leaves (the routing
        tables never move a subject back to a member that comes up)."""
        node = self._node
        del self.taken[domain]
        node._open_slave_source(domain)
        logger.warning(
            "Cluster node %s: hands domain %s back to %s (configuration reloaded)", node.node_id, domain, parent
        )

    def _give_up(self, domain: str, parent: str | None) -> None:
        """No longer master of ``domain`` after a reload: its subscriptions go to ``parent`` (the
        node's source for it opens, as a slave's), when the router was built to (an own data
        service for the domain) and the domain has a master."""
        node = self._node
        deferral = self.deferrals.pop(domain, None)
        if deferral is not None:  # its source goes: the slave source below takes its subjects
            deferral.close()
            index = node._slave_domains.index(domain)
            node._slave_domains.pop(index)
            node._sources.pop(index).close()
        if parent is None or domain not in self._fallbacks:
            logger.warning(
                "Cluster node %s: no longer master of %s after the reload; its router keeps serving it "
                "from its own sources until it is restarted (%s)",
                node.node_id,
                domain,
                "the domain has no master now" if parent is None else "no own data service serves it",
            )
            return
        node._open_slave_source(domain)
        logger.warning(
            "Cluster node %s: hands domain %s to %s (configuration reloaded): new subscriptions go there; "
            "subjects its own sources serve stay there until their last subscriber leaves",
            node.node_id,
            domain,
            parent,
        )

    def _drop_domain_links(self, domain: str) -> None:
        """Unsubscribes ``domain``'s subjects at every parent link (a DISCARD will not come: the
        source that would hear it is gone)."""
        node = self._node
        with node._lock:
            parents = list(node._parents.values())
        for parent in parents:
            for subject in parent.subscriber.subjects():
                if _domain_of(node._cluster, subject) == domain:
                    while subject in parent.subscriber.subjects():
                        parent.subscriber.unsubscribe(subject)

    def roles(self) -> dict[str, tuple[str, int | None, str | None]]:
        """Per domain ``(role, stratum, parent)`` now (node info's ``domains``): a domain this
        node's router serves itself (no node source for it: configured master at start, or taken
        over) as master, stratum 0; the others as slave of the parent in use."""
        node = self._node
        cluster = node._cluster
        found: dict[str, tuple[str, int | None, str | None]] = {}
        for domain in cluster.domains:
            name = domain.name
            deferral = self.deferrals.get(name)
            if name not in node._slave_domains:
                found[name] = (MASTER, 0, None)
            elif deferral is not None:
                found[name] = (SLAVE, None if deferral.target is None else 1, deferral.target)
            else:
                found[name] = (SLAVE, cluster.stratum(node.node_id, name), node._parent_of.get(name))
        return found

    def reload(self, cluster: ClusterConfig) -> None:
        """Applies ``cluster`` (a re-read, checked configuration) on the node's thread."""
        with self._pending_lock:
            self._pending = cluster

    def _apply(self, cluster: ClusterConfig) -> None:
        node = self._node
        old = node._cluster
        node._cluster = cluster
        node.subscriptions.reconfigure(cluster)
        node.mapping.reconfigure(cluster)
        node.mirror.reconfigure(cluster)
        self._configure(cluster)
        moment = time.monotonic()
        for domain in cluster.domains:
            name = domain.name
            was, now = old.parent(node.node_id, name), cluster.parent(node.node_id, name)
            ahead = self._ahead.get(name, ())
            if name in self.taken and node.node_id not in cluster.masters(name) and now is not None:
                if ahead and all(self._silent(other, moment) for other in ahead):
                    continue  # still nobody ahead: the domain stays here
                self._hand_back(name, now)
            elif node.node_id in cluster.masters(name) and name not in self.taken and name in node._slave_domains:
                if name in self._fallbacks:
                    self._take_over(name, "the reloaded configuration makes this node its master")
                else:
                    logger.warning(
                        "Cluster node %s: master of %s after the reload, but none of its data services serves "
                        "the domain: its subjects are still asked of the old parent",
                        node.node_id,
                        name,
                    )
            elif node.node_id in old.masters(name) and node.node_id not in cluster.masters(name):
                self._give_up(name, now)
            elif was != now and now is not None and name in node._slave_domains:
                self._move_domain(name, was, now)
        # A domain that had no master and has one now: its queued publishes go to the master(s).
        for waiting in sorted(node.forwarding.domains_without_master()):
            masters = self.parents(waiting)
            if node.node_id in cluster.masters(waiting) and waiting not in node._slave_domains:
                # This node serves it now: its own router takes the queue, as every master does.
                masters = cluster.masters(waiting)
            node.forwarding.assign(waiting, masters)
        # Links whose order changed, or that sit at a backup, go to the first node of their order.
        with node._lock:
            parents = dict(node._parents)
        for parent_id, parent in parents.items():
            routers = link_routers(cluster, node.node_id, parent_id)
            if routers and (routers != parent.routers or parent.subscriber.router != routers[0]):
                self._relink(parent_id, parent, routers, "configuration reloaded")
        forwarding = node.forwarding
        for parent_id, forwarder in list(forwarding._forwarders.items()):
            routers = link_routers(cluster, node.node_id, parent_id)
            if routers and forwarder.source.router != routers[0]:
                # Publishes queue for the parent until the new link is heard, then flush there.
                del forwarding._forwarders[parent_id]
                forwarder.source.close()
                forwarding._forwarder(parent_id)
        logger.info("Cluster node %s: cluster configuration reloaded", node.node_id)

    def _move_domain(self, domain: str, was: str | None, now: str) -> None:
        """Moves ``domain``'s subscriptions from the link to ``was`` to the link to ``now``."""
        node = self._node
        text = f"domain {domain} moved from node {was} to node {now}: configuration reloaded".encode()
        with node._lock:
            old = node._parents.get(was) if was is not None else None
            new = node._parent(now)
        moved = 0
        if old is not None:
            for subject in old.subscriber.subjects():
                if _domain_of(node._cluster, subject) != domain:
                    continue
                callbacks = list(old.subscriber._callbacks.get(subject, ()))
                for callback in callbacks:
                    old.subscriber.unsubscribe(subject)
                    callback(subject, Flags.STATUS, text)
                    new.subscriber.subscribe(subject, callback)
                moved += 1
        node._parent_of[domain] = now
        logger.warning("Cluster node %s: %s (%d subjects)", node.node_id, text.decode(), moved)

    def _relink(self, parent_id: str, parent: object, routers: list[str], why: str) -> None:
        """Replaces a parent link's subscriber by one over ``routers`` (every subscription sent
        again there; its callbacks hear a STATUS first, then the fresh image)."""
        from affinity.cluster_node import _Parent

        assert isinstance(parent, _Parent)
        node = self._node
        old = parent.subscriber
        fresh = node._subscriber(routers)
        text = f"link to node {parent_id} opened again at {routers[0]}: {why}".encode()
        for subject in old.subjects():
            for callback in list(old._callbacks.get(subject, ())):
                callback(subject, Flags.STATUS, text)
                fresh.subscribe(subject, callback)
        with node._lock:
            parent.subscriber, parent.routers = fresh, routers
        old.close()
        logger.info("Cluster node %s: link to %s now at %s (%s)", node.node_id, parent_id, routers[0], why)

    def close(self) -> None:
        """Closes the watches and the deferrals' info subscriptions."""
        for watch in self._watches.values():
            watch.source.close()
        for deferral in self.deferrals.values():
            deferral.close()


class _Deferral:
    """A master with a ``backup-node`` order, just started: does a backup serve its domain?

    Its router serves the domain from the node's ``cluster.<DOMAIN>`` source first
    (:func:`deferral_services`). The node reads each backup's node info at the backup; while
    none has answered or been silent a liveness timeout, requests wait. A backup whose info
    says it is master of the domain (it took it over; a configured master of the domain does not
    count) is deferred to: the domain's subjects are subscribed there and relayed (STATUS,
    image, updates, as a slave), and publishes here go there. Else, or once that backup no
    longer serves it (silent, handed back), or at a reload that keeps this node master, the
    node serves the domain itself (:meth:`Failover._take_over`)."""

    def __init__(self, failover: Failover, domain: str, backups: tuple[str, ...]) -> None:
        node = failover._node
        self._failover, self.domain, self.backups = failover, domain, backups
        #: The backup deferred to (``None``: not decided).
        self.target: str | None = None
        self._pending: set[str] = set()
        #: Per backup heard: whether its last node info says it serves the domain.
        self._serves: dict[str, bool] = {}
        #: Per backup heard: when its last node info came (monotonic seconds).
        self._heard: dict[str, float] = {}
        self._started = time.monotonic()
        #: Seconds without a backup's info after which it counts as silent.
        self.silence = max(node._liveness_timeout, DEFERRAL_INFO_INTERVALS * NODE_INFO_INTERVAL)
        self._infos: dict[str, Subscriber] = {}
        for backup in backups:
            spec = node._cluster.node(backup)
            if spec is None:
                continue
            subscriber = node._subscriber([spec.address])
            subscriber.subscribe(node_info_subject(backup), self._on_info(backup))
            self._infos[backup] = subscriber
        from affinity.cluster_node import slave_label

        self.source = Source(
            node._client,
            node._listen,
            slave_label(domain),
            host=node._host,
            heartbeat_interval=node._heartbeat_interval,
            liveness_timeout=node._liveness_timeout,
            secret=node._secret,
        )
        self.source.on_request(self._request)
        self.source.on_discard(self._discard)
        self.source.on_publish(node.forwarding.on_publish(self.source, domain))
        node._sources.append(self.source)
        node._slave_domains.append(domain)
        node._parent_of[domain] = None

    def _on_info(self, backup: str) -> Callable[[str, Flags, bytes], None]:
        def info(subject: str, flags: Flags, payload: bytes) -> None:
            if not flags & (Flags.IMAGE | Flags.UPDATE):
                return
            cluster = self._failover._node._cluster
            try:
                parsed = parse_node_info(subject, payload, cluster)
            except ForgedNodeInfo as exc:
                logger.warning("Cluster node %s: %s", self._failover._node.node_id, exc)
                return
            serves = any(name == self.domain and role == MASTER for name, role, _, _ in parsed.domains)
            self._serves[backup] = serves and backup not in cluster.masters(self.domain)
            self._heard[backup] = time.monotonic()

        return info

    def service(self, now: float) -> int:
        """Reads the backups' info; defers, or serves the domain here; returns the work done."""
        work = 0
        for subscriber in list(self._infos.values()):
            work += subscriber.poll(POLL_FRAGMENTS)
        failover = self._failover

        def silent(backup: str) -> bool:
            return now - self._heard.get(backup, self._started) > self.silence

        serving = [b for b in self.backups if self._serves.get(b) and not silent(b)]
        if self.target is None and serving:
            self._defer(serving[0])
            return work + 1
        if self.target is None and all(b in self._serves or silent(b) for b in self.backups):
            failover._take_over(self.domain, "no backup of it serves the domain")
            return work + 1
        if self.target is not None and self.target not in serving:
            failover._take_over(self.domain, f"{self.target} no longer serves it")
            return work + 1
        return work

    def _defer(self, backup: str) -> None:
        node = self._failover._node
        self.target = backup
        node._parent_of[self.domain] = backup
        logger.warning(
            "Cluster node %s: defers domain %s to %s (it serves the domain; a reload hands it back)",
            node.node_id,
            self.domain,
            backup,
        )
        for subject in sorted(self._pending):
            self._subscribe(subject)
        self._pending.clear()

    def _subscribe(self, subject: str) -> None:
        node = self._failover._node
        assert self.target is not None
        with node._lock:
            link = node._parent(self.target)
        link.subscriber.subscribe(subject, self._relay)

    def _request(self, subject: str) -> None:
        if self.target is None:
            self._pending.add(subject)
        else:
            self._subscribe(subject)

    def _discard(self, subject: str) -> None:
        self._pending.discard(subject)
        node = self._failover._node
        with node._lock:
            link = node._parents.get(self.target) if self.target is not None else None
        if link is not None:
            while subject in link.subscriber.subjects():
                link.subscriber.unsubscribe(subject)

    def _relay(self, subject: str, flags: Flags, payload: bytes) -> None:
        if flags & Flags.REFUSED:
            self.source.nodata(subject, "unavailable")
        else:
            pass_on(self.source, subject, flags, payload)

    def close(self) -> None:
        """Closes the info subscriptions (the source is the node's: closed by a takeover)."""
        for subscriber in self._infos.values():
            subscriber.close()
        self._infos.clear()


def _domain_of(cluster: ClusterConfig, subject: str) -> str | None:
    """The first domain whose include pattern matches ``subject`` (the mapping's rule)."""
    for domain in cluster.domains:
        if any(_affinity.PosixRegex(pattern).is_match(subject) for pattern in domain.include_patterns):
            return domain.name
    return None


def read_reload(path: str, node_id: str) -> ClusterConfig | None:
    """The cluster block of ``path`` re-read for a reload (SIGHUP), or ``None`` when it cannot
    be used: unreadable, any error (each logged as ``file:line:column: error: ...``), no
    cluster block, or ``node_id`` no longer one of its nodes. ``None`` keeps the old configuration."""
    from affinity.config.faucet import analyse_router_text

    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        logger.error("Cluster node %s: reload: cannot read %s (%s); keeping the old configuration", node_id, path, exc)
        return None
    analysis = analyse_router_text(text, path)
    for diagnostic in analysis.diagnostics:
        (logger.error if diagnostic.is_error else logger.warning)("Cluster node %s: reload: %s", node_id, diagnostic)
    cluster = analysis.config.cluster if not analysis.errors else None
    if analysis.errors:
        logger.error("Cluster node %s: reload of %s refused; keeping the old configuration", node_id, path)
    elif cluster is None or cluster.node(node_id) is None:
        logger.error(
            "Cluster node %s: reload: %s does not configure node %s; keeping the old configuration",
            node_id,
            path,
            node_id,
        )
        cluster = None
    return cluster
