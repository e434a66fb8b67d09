"""Mirrored masters: which master a slave asks, and which ones its publishes go to
(``docs/cluster.md``, "Mirrored masters").

Several nodes may be ``master-of`` one domain. A slave that asks the masters directly (no
``upstream`` for the domain) subscribes each subject at ONE of them, chosen by the cluster's
``load-balancer`` (xmlBlaster's ``I_LoadBalancer``), and forwards every publish and erase to
EVERY one of them. A slave with an ``upstream`` asks that node only (it balances in turn).

The load balancer is a routing policy, loaded as the routing tables load ``policy``
(``docs/policies.md``): a built-in name (``round-robin`` by default: successive subjects go to
the masters in turn; ``workload``, ``least-assigned``), an entry point of the
``affinity.policies`` group or a ``package.module:attribute`` path. The choice is made by a
routing table of its own (:class:`affinity.routing.Router`: one source group whose members are
the masters), so a plugin is guarded the same way (one that raises or answers a node that is
not a candidate falls back to ``workload`` for that subject) and the choice sticks to the
subject until it is released (the slave unsubscribed upstream).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from affinity.config.cluster import ClusterConfig
from affinity.routing import PolicySpec, Router
from affinity.rules import BUILTIN_POLICIES, load_policy

__all__ = ["BALANCER_EVENTS", "MasterBalancer", "parents_of"]

#: Routing events a balancer keeps for inspection (they are logged on ``affinity.routing`` too).
BALANCER_EVENTS: Final[int] = 256


def parents_of(cluster: ClusterConfig, node_id: str, domain: str) -> tuple[str, ...]:
    """The nodes ``node_id`` may ask for ``domain``: its ``upstream``, else every master in
    configuration order (empty for a master of the domain, or a domain without one)."""
    node = cluster.node(node_id)
    if node is None or domain in node.master_of:
        return ()
    upstream = node.upstream.get(domain)
    return (upstream,) if upstream is not None else cluster.masters(domain)


class MasterBalancer:
    """One domain's parents as seen by one slave node: :meth:`choose` picks the parent a
    subject is subscribed at, :attr:`parents` are where its writes go (all of them)."""

    def __init__(
        self,
        cluster: ClusterConfig,
        node_id: str,
        domain: str,
        *,
        resolve_policy: Callable[[str], PolicySpec] = load_policy,
    ) -> None:
        """Raises :class:`affinity.PolicyError` when the ``load-balancer`` plugin cannot be loaded."""
        self.domain = domain
        #: The nodes this one asks for the domain (see :func:`parents_of`).
        self.parents = parents_of(cluster, node_id, domain)
        spec = cluster.settings.load_balancer
        self.policy = spec
        self._router = Router(max_events=BALANCER_EVENTS)
        if self.parents:
            policy: PolicySpec = spec if spec in BUILTIN_POLICIES else resolve_policy(spec)
            self._router.add_data_service(f"cluster-{domain}", ["^"])
            self._router.add_source_group(f"cluster-{domain}#masters", [list(self.parents)], policy=policy)

    def choose(self, subject: str) -> str | None:
        """The parent ``subject`` is to be subscribed at (bound until :meth:`release`);
        ``None`` when the domain has none."""
        if not self.parents:
            return None
        if len(self.parents) == 1:
            return self.parents[0]
        return self._router.subscribe(subject).member

    def set_up(self, parent: str, up: bool) -> list[tuple[str, str | None]]:
        """Marks ``parent`` live (``up``) or dead for :meth:`choose` (a dead master is never
        picked); returns the subjects whose choice changed, each with the parent chosen now
        (``None``: no master is live, the subject stays where it is subscribed)."""
        if len(self.parents) <= 1 or parent not in self.parents:
            return []
        changed: list[tuple[str, str | None]] = []
        for event in self._router.set_member_up(parent, up):
            if event.subject is None:
                continue
            if event.kind in ("moved", "bound"):
                changed.append((event.subject, event.member))
            elif event.kind == "no-member-available":
                changed.append((event.subject, None))
        return changed

    def release(self, subject: str) -> None:
        """``subject`` is no longer subscribed upstream: its choice is dropped."""
        if len(self.parents) > 1:
            self._router.unsubscribe(subject)
