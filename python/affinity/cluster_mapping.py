"""Which domain a message belongs to: the cluster's ``master-mapper`` plugin (xmlBlaster's
``I_MapMsgToMasterId``; ``docs/cluster.md``, "Master mapper").

A node's router sends every subject matching a domain's ``include-pattern`` that this node is a
slave of to the node (the first matching domain: the *pattern domain*). The node asks the
mapper which domain the message really belongs to; the domain's parents (its masters, chosen
among by the ``load-balancer``, or the node's ``upstream``) are where a subscription goes and
where a publish or an erase is forwarded. The default mapper, ``domain`` (xmlBlaster's
``DomainToMaster``), answers the pattern domain; a subject matching no domain's pattern never
reaches a node: its router handles it locally (the default master).

A plugin is loaded through the routing policies' mechanism (:func:`affinity.rules.resolve_plugin`,
``docs/policies.md``): a ``package.module:attribute`` path or the name of an entry point in the
group :data:`MAPPER_ENTRY_POINT_GROUP`. The object there may be a :class:`MasterMapper` (an object
with ``map_message(subject, domain)``, or a module with it), a class (instantiated without
arguments), a function ``(subject, domain)`` or a factory of no arguments returning a mapper.

What the node does with each answer (:meth:`Mapping.domain_for`):

* a domain this node is a slave of: that domain's parents;
* a name no ``add-domain`` defines: the master is unknown (a publish is queued under that name,
  warned and bounded; a subscription is answered NODATA unavailable); at most
  :data:`MAX_UNKNOWN_DOMAINS` such names, a further one is handled as a failure (below);
* ``None`` (no domain), a domain this node serves itself, a value that is not a domain name, or
  an exception: the subject cannot be served here from the node's own sources, since the router
  sent it to the cluster by its pattern; it is handled as the default would (its pattern
  domain), and the reason is logged with the subject (once per subject and reason, at most
  :data:`MAPPER_LOGGED_SUBJECTS` subjects).
"""

from __future__ import annotations

import inspect
import logging
from collections import OrderedDict
from typing import Final, Protocol, runtime_checkable

from affinity.config.cluster import DEFAULT_MASTER_MAPPER, MAPPER_ENTRY_POINT_GROUP, ClusterConfig
from affinity.exceptions import PolicyError
from affinity.rules import resolve_plugin

__all__ = [
    "MAPPER_ENTRY_POINT_GROUP",
    "MAPPER_LOGGED_SUBJECTS",
    "MAX_UNKNOWN_DOMAINS",
    "DomainMapper",
    "FunctionMapper",
    "Mapping",
    "MasterMapper",
    "load_mapper",
]

logger = logging.getLogger("affinity.cluster")

#: Subjects whose mapping failure is remembered so it is logged once (a bound on that memory).
MAPPER_LOGGED_SUBJECTS: Final[int] = 4096
#: Most names no ``add-domain`` defines a mapper may answer at one node (each gets a forward
#: queue of its own, bounded by ``forward-queue``); a further one is handled as a failure.
MAX_UNKNOWN_DOMAINS: Final[int] = 64


@runtime_checkable
class MasterMapper(Protocol):
    """Maps a message to the domain whose masters handle it (xmlBlaster's ``I_MapMsgToMasterId``).

    Called by a cluster node on its own thread for every subscription (once per subject, when
    the router first requests it) and every publish or erase of a domain the node is a slave
    of; it should be quick and must not block.
    """

    def map_message(self, subject: str, domain: str) -> str | None:
        """The name of the domain ``subject`` belongs to, or ``None`` for no domain.

        ``domain`` is the first domain whose ``include-pattern`` matches ``subject`` (what the
        default mapper answers). Answering another configured domain sends the message to that
        domain's masters; a name no ``add-domain`` defines makes its master unknown (publishes
        queued). See the module documentation for what ``None`` and failures do.
        """
        ...


class DomainMapper:
    """The default mapper, ``domain`` (xmlBlaster's ``DomainToMaster``): the pattern domain."""

    def map_message(self, subject: str, domain: str) -> str | None:
        """``domain``: the first domain whose include-pattern matches ``subject``."""
        return domain


class FunctionMapper:
    """A plain function ``(subject, domain) -> domain or None`` used as a mapper."""

    def __init__(self, function: object) -> None:
        self.function = function

    def map_message(self, subject: str, domain: str) -> str | None:
        """Call the wrapped function."""
        answer: str | None = self.function(subject, domain)  # type: ignore[operator]
        return answer


def _accepts(function: object, count: int) -> bool:
    try:
        inspect.signature(function).bind(*(["x"] * count))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def load_mapper(spec: str) -> MasterMapper:
    """The mapper ``spec`` names: ``domain`` (the default), a ``package.module:attribute`` path
    or an entry point of :data:`MAPPER_ENTRY_POINT_GROUP`. Raises :class:`PolicyError` saying
    what is wrong (as for a routing policy plugin)."""
    if spec == DEFAULT_MASTER_MAPPER:
        return DomainMapper()
    target = resolve_plugin(spec, MAPPER_ENTRY_POINT_GROUP)
    if inspect.isclass(target) or (
        not callable(getattr(target, "map_message", None)) and callable(target) and _accepts(target, 0)
    ):
        try:
            target = target()
        except Exception as exc:
            raise PolicyError(f"making master mapper {spec!r} failed: {type(exc).__name__}: {exc}") from exc
    method = getattr(target, "map_message", None)
    if callable(method):
        if not _accepts(method, 2):
            raise PolicyError(f"master mapper {spec!r}: map_message must accept (subject, domain)")
        assert isinstance(target, MasterMapper)
        return target
    if callable(target) and _accepts(target, 2):
        return FunctionMapper(target)
    raise PolicyError(
        f"master mapper {spec!r} is a {type(target).__name__}: expected an object with "
        "map_message(subject, domain), a class, a function (subject, domain) or a factory"
    )


class Mapping:
    """One node's use of the cluster's mapper: :meth:`domain_for` is the guarded call."""

    def __init__(self, cluster: ClusterConfig, node_id: str, mapper: MasterMapper | None = None) -> None:
        """Raises :class:`PolicyError` when the ``master-mapper`` cannot be loaded."""
        self.spec = cluster.settings.master_mapper
        self.mapper = mapper if mapper is not None else load_mapper(self.spec)
        self._cluster, self._node_id = cluster, node_id
        self._logged: OrderedDict[tuple[str, str], None] = OrderedDict()
        #: Names answered that no add-domain defines (master unknown), at most MAX_UNKNOWN_DOMAINS.
        self.unknown_domains: set[str] = set()
        #: Answers that could not be acted on (each handled as the default would).
        self.failures = 0

    def reconfigure(self, cluster: ClusterConfig) -> None:
        """A reloaded configuration (the mapper itself is the one loaded at start)."""
        self._cluster = cluster

    def domain_for(self, subject: str, domain: str) -> str:
        """The domain ``subject`` (routed to the node for its pattern domain ``domain``) is
        handled as: the mapper's answer when the node can act on it, else ``domain``."""
        if isinstance(self.mapper, DomainMapper):
            return domain
        try:
            answer = self.mapper.map_message(subject, domain)
        except Exception as exc:
            return self._fallback(subject, domain, f"it raised {type(exc).__name__}: {exc}")
        if answer == domain:
            return domain
        if answer is None:
            return self._fallback(subject, domain, "it answered no domain, but the router sent the subject here")
        if not isinstance(answer, str) or not answer:
            return self._fallback(subject, domain, f"it answered {answer!r}, not a domain name")
        defined = any(known.name == answer for known in self._cluster.domains)
        if defined and self._node_id in self._cluster.masters(answer):
            return self._fallback(
                subject, domain, f"it answered {answer}, which this node serves from its own sources only"
            )
        if not defined and answer not in self.unknown_domains:
            if len(self.unknown_domains) >= MAX_UNKNOWN_DOMAINS:
                why = f"it answered {answer!r}, past {MAX_UNKNOWN_DOMAINS} domains no add-domain defines"
                return self._fallback(subject, domain, why)
            self.unknown_domains.add(answer)
        return answer

    def _fallback(self, subject: str, domain: str, why: str) -> str:
        self.failures += 1
        key = (subject, why)
        if key not in self._logged:
            self._logged[key] = None
            if len(self._logged) > MAPPER_LOGGED_SUBJECTS:
                self._logged.popitem(last=False)
            logger.error(
                "Cluster node %s: master-mapper %s on %s: %s; handled as domain %s (the default mapping)",
                self._node_id,
                self.spec,
                subject,
                why,
                domain,
            )
        return domain
