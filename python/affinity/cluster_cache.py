"""A slave node's subscriptions at its parents, kept for ``cache-expiry`` after use
(``docs/cluster.md``, "Cache expiry and mirrored masters").

The decisions are the core's slave cache (:class:`affinity._affinity.ClusterSlaveCache`,
``rust/crates/messaging/src/subjects/cluster/cache.rs``): the first request of a subject
subscribes it once at the parent :class:`~affinity.cluster_balance.MasterBalancer` picks; the
parent's last image (or NODATA) is kept; when the router discards the subject (its last local
subscriber left) the entry idles, still subscribed upstream and its image kept current, and
relays nothing; a request within ``cache-expiry`` is answered from the cache without asking
the parent again; past it the entry is dropped and unsubscribed upstream. This module holds
no I/O: :class:`affinity.cluster_node.ClusterNode` acts on what it answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from affinity import _affinity
from affinity.cluster_balance import MasterBalancer
from affinity.config.cluster import ClusterConfig
from affinity.subjects import Flags, Source

__all__ = ["EXPIRY_CHECK_INTERVAL", "Answer", "SlaveSubscriptions", "pass_on"]

#: Seconds between two looks for expired entries (at most; a shorter ``cache-expiry`` looks
#: ten times per expiry).
EXPIRY_CHECK_INTERVAL: Final[float] = 0.1
#: Flags of a cached record that is NODATA rather than an image.
NODATA_FLAGS: Final[Flags] = Flags.NODATA_UNAVAILABLE | Flags.NODATA_NOTFOUND


@dataclass(frozen=True)
class Answer:
    """What to do for a request: subscribe at ``parent``; or answer from the cache (``flags``,
    ``payload``); or, with neither, nothing yet (subscribed, image to come) unless ``refused``
    (the cache is full, or the domain has no parent: answer NODATA unavailable)."""

    parent: str | None = None
    flags: Flags | None = None
    payload: bytes = b""
    refused: bool = False

    @property
    def nodata(self) -> str | None:
        """The NODATA status to answer with (``notfound`` / ``unavailable``), if the cached
        record is one."""
        if self.flags is None or not self.flags & NODATA_FLAGS:
            return None
        return "notfound" if self.flags & Flags.NODATA_NOTFOUND else "unavailable"


class SlaveSubscriptions:
    """Every domain ``node_id`` is a slave of: one balancer each and one cache for all."""

    def __init__(self, cluster: ClusterConfig, node_id: str) -> None:
        self._cluster, self._node_id = cluster, node_id
        self.cache = _affinity.ClusterSlaveCache(cluster.settings.cache_expiry)
        #: Per domain this node is a slave of: its balancer among the parents.
        self.balancers = {
            domain.name: MasterBalancer(cluster, node_id, domain.name)
            for domain in cluster.domains
            if node_id not in cluster.masters(domain.name)
        }
        #: The domain of every cached subject (to release its balancer's choice).
        self._domains: dict[str, str] = {}
        #: Cached subjects no local subscriber holds (discarded by the router, not expired yet).
        self._idle: set[str] = set()
        self._check_every = min(EXPIRY_CHECK_INTERVAL, cluster.settings.cache_expiry / 10)

    def reconfigure(self, cluster: ClusterConfig) -> None:
        """A reloaded configuration: every slave domain's balancer is made again from it (the
        subjects cached stay at the parents they were subscribed at; the old balancers' choices
        go with them)."""
        self._cluster = cluster
        self.balancers = {
            domain.name: MasterBalancer(cluster, self._node_id, domain.name)
            for domain in cluster.domains
            if self._node_id not in cluster.masters(domain.name)
        }
        self._domains = {}
        self._idle = set()

    @property
    def check_every(self) -> float:
        """Seconds between two calls of :meth:`expire` the node makes."""
        return self._check_every

    def request(self, domain: str, subject: str) -> Answer:
        """The router requested ``subject`` of ``domain`` (its first local subscriber)."""
        balancer = self.balancers[domain]
        self._idle.discard(subject)
        parent = self.cache.parent(subject)
        chosen = parent is None
        if chosen:
            parent = balancer.choose(subject)
            if parent is None:
                return Answer(refused=True)
        assert parent is not None
        stratum = self._cluster.stratum(self._node_id, domain) or 0
        action = self.cache.subscribe(subject, parent, stratum)
        if action is None:
            return Answer()
        match action:
            case ("image", int() as flags, bytes() as payload):
                return Answer(flags=Flags(flags), payload=payload)
            case ("subscribe", str() as upstream):
                self._domains[subject] = domain
                return Answer(parent=upstream)
            case _:  # ("refused",): the cache holds its most subjects
                if chosen:
                    balancer.release(subject)
                return Answer(refused=True)

    def discard(self, subject: str) -> None:
        """The router discarded ``subject`` (its last local subscriber left): it idles."""
        self.cache.unsubscribe(subject)
        if self.cache.parent(subject) is not None:
            self._idle.add(subject)

    def move(self, subject: str, parent: str) -> bool:
        """``subject``'s parent failed and the balancer chose ``parent`` for it: True when a
        local subscriber holds it (it is now subscribed at ``parent`` in the cache, its image
        forgotten: subscribe there, the fresh image follows); False when it was idle (it is
        forgotten: the next request asks again) or is not cached."""
        domain = self._domains.get(subject)
        if subject in self._idle or domain is None:
            self.forget(subject)
            return False
        self.cache.forget(subject)
        stratum = self._cluster.stratum(self._node_id, domain) or 0
        self.cache.subscribe(subject, parent, stratum)
        return True

    def on_data(self, parent: str, subject: str, flags: Flags, payload: bytes) -> bool:
        """DATA from ``parent``: whether to relay it to the router (see the core)."""
        return self.cache.on_data(parent, subject, int(flags), payload)

    def forget(self, subject: str) -> str | None:
        """The parent refused ``subject``: forgotten (the next request asks again); returns
        the parent it was subscribed at."""
        parent = self.cache.forget(subject)
        self._idle.discard(subject)
        self._release(subject)
        return parent

    def expire(self) -> list[tuple[str, str]]:
        """Entries idle past ``cache-expiry``, dropped: ``(parent, subject)`` to unsubscribe."""
        expired = self.cache.expire()
        for _, subject in expired:
            self._idle.discard(subject)
            self._release(subject)
        return expired

    def sizes(self) -> tuple[int, int]:
        """``(subjects cached, of which idle)``."""
        cached, idle = self.cache.sizes()
        return cached, idle

    def _release(self, subject: str) -> None:
        domain = self._domains.pop(subject, None)
        if domain is not None:
            self.balancers[domain].release(subject)


def pass_on(source: Source, subject: str, flags: Flags, payload: bytes) -> None:
    """Serves at this node's router, through the node's ``source``, what a parent node answered
    for ``subject``: a STATUS as a STATUS, an erase as an erase, a NODATA as that NODATA, and an
    image or update as itself (REFUSED is the caller's to handle)."""
    if flags & Flags.STATUS:
        source._core.send_data(subject, int(Flags.STATUS), payload)
    elif flags & Flags.ERASE:
        source.erase(subject)
    elif flags & Flags.NODATA_NOTFOUND:
        source.nodata(subject, "notfound")
    elif flags & Flags.NODATA_UNAVAILABLE:
        source.nodata(subject, "unavailable")
    else:
        source.publish(subject, payload, image=bool(flags & Flags.IMAGE))
