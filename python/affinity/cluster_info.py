"""Node info as messages (``docs/cluster.md``, "Node info"): each cluster node publishes its state
on the system subject ``__sys__cluster.node.info[<node-id>]`` (xmlBlaster's name;
:func:`node_info_subject`, the prefix from the Rust core).

The subject is an ordinary one: the node's router serves it from a source of its own
(:data:`NODE_INFO_LABEL`), so any subscriber at that router follows it and, at any other node,
the subscription cascades like any other subject: a node asked for another node's info
(:data:`NODE_INFO_RELAY_LABEL`) subscribes once at the next hop towards it (:func:`info_hop`:
its parent in a domain whose chain of parents reaches that node, else the node itself) as
``node:<this>``, and republishes what it gets to its own router, which caches it and serves
later subscribers from the cache.

Every node info a node reads on the wire is checked (:func:`parse_node_info`): malformed JSON,
an unknown version, a node id other than the subject's, an unknown node or an address that is
not the node's configured one is *forged*: counted (``forged_node_info`` in the reading node's
own info), logged and never relayed.

The payload is one JSON object, every publication the whole state (published as an image, so
the router's cached image is always the latest)::

    {"version": 3, "node": "avalon", "address": "aeron:udp?endpoint=10.9.0.4:40500",
     "state": "running", "seq": 7, "time": 1780000000.25,
     "domains": [{"name": "STOCK_EXCHANGE", "role": "slave", "stratum": 1, "parent": "golan"}],
     "connections": {"golan": "logged-in"},
     "load": {"subjects": 3, "subscribers": 2, "not_allowed": 0},
     "queues": {"golan": {"messages": 12, "bytes": 4810}},
     "queues_without_master": {"RADAR": {"messages": 0, "bytes": 0}},
     "forwarded": {"golan": {"sent": 90, "queued": 12, "flushed": 0, "refused": 0, "dropped": 0}},
     "stale_masters": [],
     "ptp_queues": {"/node/avalon/client/joe": {"messages": 2, "bytes": 96}},
     "ptp_queued": {"clients": 1, "messages": 2, "bytes": 96},
     "forged_node_info": 0}

``queues`` (the forward queue per parent node the node forwards publishes to: publishes and
bytes queued now) and ``queues_without_master`` (per domain whose publishes wait for a master),
``forwarded`` (per master: the :data:`FORWARD_COUNTERS` since start) and ``stale_masters``
(mirrored masters whose queue was dropped, not reachable since)
are there when the node is given a way to read them, and ``ptp_queues`` /
``ptp_queued`` (the PtP queues per client not logged in, the :data:`NODE_INFO_MAX_PTP_QUEUES`
deepest by bytes, and the totals over all of them) likewise (``affinity router --node`` passes
both).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from affinity import _affinity, _network_json
from affinity._polling import POLL_FRAGMENTS, poll_until_stopped
from affinity.config.cluster import ClusterConfig
from affinity.config.model import DataService, PeerLabel, PriorityGroup, SourceGroup
from affinity.exceptions import ConfigError
from affinity.secret import SecretArgument
from affinity.subjects import Flags, RouterStatus, Source, Subscriber

__all__ = [
    "FORWARD_COUNTERS",
    "NODE_INFO_INTERVAL",
    "NODE_INFO_LABEL",
    "NODE_INFO_MAX_BYTES",
    "NODE_INFO_MAX_PTP_QUEUES",
    "NODE_INFO_RELAY_LABEL",
    "NODE_INFO_SUBJECT_PREFIX",
    "NODE_INFO_SUBJECT_SUFFIX",
    "NODE_INFO_VERSION",
    "NODE_STATES",
    "ForgedNodeInfo",
    "NodeInfo",
    "NodeInfoService",
    "info_hop",
    "node_info_node",
    "node_info_services",
    "node_info_subject",
    "parse_node_info",
]

logger = logging.getLogger("affinity.cluster")

#: A node's info subject is this prefix, the node id and :data:`NODE_INFO_SUBJECT_SUFFIX` (the core's).
NODE_INFO_SUBJECT_PREFIX: Final[str] = _affinity.CLUSTER_NODE_INFO_SUBJECT_PREFIX
#: The end of a node info subject.
NODE_INFO_SUBJECT_SUFFIX: Final[str] = _affinity.CLUSTER_NODE_INFO_SUBJECT_SUFFIX
#: The payload version this code writes and the only one it reads.
NODE_INFO_VERSION: Final[int] = 3
#: The forward counters per master in node info's ``forwarded`` (the core's ``ForwardCounters``).
FORWARD_COUNTERS: Final[tuple[str, ...]] = ("sent", "queued", "flushed", "refused", "dropped")
#: Largest node info payload read (a bigger one is forged); far above what a node writes.
NODE_INFO_MAX_BYTES: Final[int] = 64 * 1024
#: Most PtP queues (clients not logged in) listed one by one in ``ptp_queues``, the deepest by
#: bytes (``ptp_queued`` totals all of them): keeps the info far below :data:`NODE_INFO_MAX_BYTES`.
NODE_INFO_MAX_PTP_QUEUES: Final[int] = 64
#: The counts of one queue in node info: publishes (or messages) and bytes queued now.
QUEUE_DEPTH_FIELDS: Final[tuple[str, str]] = ("messages", "bytes")
#: The totals over every PtP queue of a node (``ptp_queued``).
PTP_TOTAL_FIELDS: Final[tuple[str, str, str]] = ("clients", "messages", "bytes")
#: Seconds between two publications of an unchanged node info (a change is published at once).
NODE_INFO_INTERVAL: Final[float] = 1.0
#: Seconds between two looks for a change of the node's state.
NODE_INFO_CHECK_INTERVAL: Final[float] = 0.1
#: The source label a node serves its own info under at its router.
NODE_INFO_LABEL: Final[str] = "cluster.node-info"
#: The source label a node serves other nodes' info under at its router (relayed from them).
NODE_INFO_RELAY_LABEL: Final[str] = "cluster.node-info-relay"
#: A node's own state in its info: serving, or stopped cleanly (its last info, published as it
#: closes; a node killed publishes none: its silence is what others see).
NODE_STATES: Final[tuple[str, str]] = ("running", "stopping")
#: Seconds a closing node waits after publishing its ``stopping`` info, so its router relays it
#: before it closes too.
NODE_INFO_STOP_GRACE: Final[float] = 0.2
#: Roles a node has in a domain.
ROLES: Final[tuple[str, str]] = ("master", "slave")
#: Connection states (the core's), strongest first when two links reach one node.
_STATES: Final[tuple[str, ...]] = tuple(_affinity.CLUSTER_CONNECTION_STATES)
LOGGED_IN, POLLING, NOT_ALLOWED = _STATES
_STRENGTH: Final[dict[str, int]] = {NOT_ALLOWED: 2, LOGGED_IN: 1, POLLING: 0}


def node_info_subject(node_id: str) -> str:
    """The info subject of ``node_id`` (``__sys__cluster.node.info[node_id]``)."""
    return f"{NODE_INFO_SUBJECT_PREFIX}{node_id}{NODE_INFO_SUBJECT_SUFFIX}"


def node_info_node(subject: str) -> str | None:
    """The node id an info subject names; ``None`` for any other subject."""
    if not (subject.startswith(NODE_INFO_SUBJECT_PREFIX) and subject.endswith(NODE_INFO_SUBJECT_SUFFIX)):
        return None
    node = subject[len(NODE_INFO_SUBJECT_PREFIX) : len(subject) - len(NODE_INFO_SUBJECT_SUFFIX)]
    return node or None


#: Characters special in a POSIX ERE (escaped by :func:`_ere_literal`).
_ERE_SPECIALS: Final[str] = ".[]()*+?{}|^$\\"


def _ere_literal(text: str) -> str:
    """``text`` as a POSIX ERE matching itself."""
    return "".join(f"\\{c}" if c in _ERE_SPECIALS else c for c in text)


def node_info_services(cluster: ClusterConfig, node_id: str) -> tuple[DataService, ...]:
    """The data services a node's router serves node info with: its own info from
    :data:`NODE_INFO_LABEL`, every other node's from :data:`NODE_INFO_RELAY_LABEL`."""
    node = cluster.node(node_id)
    if node is None:
        raise ConfigError(f"node {node_id!r}: not a node-id of the configuration's cluster")
    prefix = "^" + _ere_literal(NODE_INFO_SUBJECT_PREFIX)
    own = (f"{prefix}{_ere_literal(node_id)}{_ere_literal(NODE_INFO_SUBJECT_SUFFIX)}$",)
    services = []
    for name, patterns, label in (
        ("cluster-node-info", own, NODE_INFO_LABEL),
        ("cluster-node-info-relay", (prefix,), NODE_INFO_RELAY_LABEL),
    ):
        peer = PeerLabel(label, True, node.location)
        group = SourceGroup((PriorityGroup((peer,), node.location),), (), node.location)
        services.append(DataService(name, patterns, (group,), node.location))
    return tuple(services)


def info_hop(cluster: ClusterConfig, this: str, target: str) -> str:
    """The node ``this`` asks for ``target``'s info: its parent in the first domain (configuration
    order) whose chain of parents from ``this`` reaches ``target`` (so the subscription cascades
    through the same nodes as the domain's subjects), else ``target`` itself."""
    for domain in cluster.domains:
        current: str | None = this
        for _ in range(len(cluster.nodes)):
            current = cluster.parent(current, domain.name) if current is not None else None
            if current is None:
                break
            if current == target:
                parent = cluster.parent(this, domain.name)
                assert parent is not None
                return parent
    return target


class ForgedNodeInfo(ValueError):
    """A node info payload that is malformed or not from the node its subject names."""


@dataclass(frozen=True)
class NodeInfo:
    """One node info message, checked (:func:`parse_node_info`)."""

    node: str
    address: str
    #: One of :data:`NODE_STATES`.
    state: str
    seq: int
    time: float
    #: Per domain: (name, role, stratum or None, parent or None).
    domains: tuple[tuple[str, str, int | None, str | None], ...]
    #: Per other node linked so far: its connection state.
    connections: dict[str, str]
    load: dict[str, int]
    forged_node_info: int
    #: Per parent node publishes are forwarded to: ``(publishes, bytes)`` queued now.
    queues: dict[str, tuple[int, int]] | None = None
    #: Per domain without a master: ``(publishes, bytes)`` queued until one appears.
    queues_without_master: dict[str, tuple[int, int]] | None = None
    #: Per PtP address whose client is not logged in (the deepest): ``(messages, bytes)``.
    ptp_queues: dict[str, tuple[int, int]] | None = None
    #: Over every PtP queue: ``{"clients", "messages", "bytes"}``.
    ptp_queued: dict[str, int] | None = None
    #: Per master publishes are forwarded to: the :data:`FORWARD_COUNTERS` since start.
    forwarded: dict[str, dict[str, int]] | None = None
    #: Mirrored masters whose forward queue was dropped (not reachable since).
    stale_masters: tuple[str, ...] | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def stratum(self, domain: str) -> int | None:
        """This node's stratum in ``domain`` (``None``: no master reachable, or not listed)."""
        return next((s for name, _, s, _ in self.domains if name == domain), None)


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ForgedNodeInfo(f"{where}: field {name!r} is {value!r}, not a {getattr(kind, '__name__', kind)}")
    return value


def _counts(value: Any, name: str, where: str) -> dict[str, int]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in value.items()
    ):
        raise ForgedNodeInfo(f"{where}: field {name!r} is not an object of counts")
    return dict(value)


def _depths(value: Any, name: str, where: str) -> dict[str, tuple[int, int]]:
    if not isinstance(value, dict):
        raise ForgedNodeInfo(f"{where}: field {name!r} is not an object of queue depths")
    depths = {}
    for key, depth in value.items():
        counts = _counts(depth, f"{name}.{key}", where)
        if set(counts) != set(QUEUE_DEPTH_FIELDS):
            raise ForgedNodeInfo(f"{where}: field {name}.{key} must hold exactly {', '.join(QUEUE_DEPTH_FIELDS)}")
        depths[key] = (counts["messages"], counts["bytes"])
    return depths


def _finite_time(value: float) -> bool:
    """Whether a decoded time is a finite float (an integer of 400 digits is too big for one)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def parse_node_info(subject: str, payload: bytes, cluster: ClusterConfig) -> NodeInfo:
    """Checks a node info message read on ``subject``; raises :class:`ForgedNodeInfo` saying what is
    wrong when it is malformed or not from the node the subject names (node id, configured
    address)."""
    target = node_info_node(subject)
    where = f"node info on {subject!r}"
    if target is None:
        raise ForgedNodeInfo(f"{where}: not a node info subject")
    if len(payload) > NODE_INFO_MAX_BYTES:
        raise ForgedNodeInfo(f"{where}: {len(payload)} bytes, more than {NODE_INFO_MAX_BYTES}")
    try:
        data = _network_json.loads(payload)
    except ValueError as exc:
        raise ForgedNodeInfo(f"{where}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ForgedNodeInfo(f"{where}: not a JSON object")
    version = data.get("version")
    if version != NODE_INFO_VERSION or isinstance(version, bool):
        raise ForgedNodeInfo(f"{where}: version {version!r}, expected {NODE_INFO_VERSION}")
    node = _field(data, "node", str, where)
    if node != target:
        raise ForgedNodeInfo(f"{where}: says it is from node {node!r}")
    spec = cluster.node(node)
    if spec is None:
        raise ForgedNodeInfo(f"{where}: node {node!r} is not a configured node")
    address = _field(data, "address", str, where)
    if address != spec.address:
        raise ForgedNodeInfo(f"{where}: address {address!r} is not {node}'s configured {spec.address!r}")
    state = data.get("state")
    if state not in NODE_STATES:
        raise ForgedNodeInfo(f"{where}: state {state!r} is not one of {', '.join(NODE_STATES)}")
    seq = _field(data, "seq", int, where)
    stamp = _field(data, "time", (int, float), where)
    if seq < 0 or not _finite_time(stamp):
        raise ForgedNodeInfo(f"{where}: seq {seq} or time {stamp} out of range")
    domains = []
    for entry in _field(data, "domains", list, where):
        if not isinstance(entry, dict):
            raise ForgedNodeInfo(f"{where}: a domain entry is not an object")
        name = _field(entry, "name", str, where)
        role = entry.get("role")
        stratum, parent = entry.get("stratum"), entry.get("parent")
        if (
            role not in ROLES
            or not (stratum is None or (isinstance(stratum, int) and not isinstance(stratum, bool) and stratum >= 0))
            or not (parent is None or isinstance(parent, str))
        ):
            raise ForgedNodeInfo(f"{where}: domain {name!r}: bad role, stratum or parent")
        domains.append((name, role, stratum, parent))
    connections = _field(data, "connections", dict, where)
    if not all(isinstance(k, str) and v in _STATES for k, v in connections.items()):
        raise ForgedNodeInfo(f"{where}: field 'connections' holds a state that is not one of {_STATES}")
    queues = _depths(data["queues"], "queues", where) if "queues" in data else None
    ptp_queues = _depths(data["ptp_queues"], "ptp_queues", where) if "ptp_queues" in data else None
    unassigned = data.get("queues_without_master")
    without_master = None if unassigned is None else _depths(unassigned, "queues_without_master", where)
    ptp_queued = _counts(data["ptp_queued"], "ptp_queued", where) if "ptp_queued" in data else None
    if ptp_queued is not None and set(ptp_queued) != set(PTP_TOTAL_FIELDS):
        raise ForgedNodeInfo(f"{where}: field ptp_queued must hold exactly {', '.join(PTP_TOTAL_FIELDS)}")
    forwarded = None
    if "forwarded" in data:
        if not isinstance(data["forwarded"], dict):
            raise ForgedNodeInfo(f"{where}: field 'forwarded' is not an object of counters")
        forwarded = {}
        for master, counts in data["forwarded"].items():
            checked = _counts(counts, f"forwarded.{master}", where)
            if set(checked) != set(FORWARD_COUNTERS):
                names = ", ".join(FORWARD_COUNTERS)
                raise ForgedNodeInfo(f"{where}: field forwarded.{master} must hold exactly {names}")
            forwarded[master] = checked
    stale = data.get("stale_masters")
    if stale is not None and not (isinstance(stale, list) and all(isinstance(m, str) for m in stale)):
        raise ForgedNodeInfo(f"{where}: field 'stale_masters' is not a list of node ids")
    forged = _field(data, "forged_node_info", int, where)
    return NodeInfo(
        node,
        address,
        state,
        seq,
        float(stamp),
        tuple(domains),
        dict(connections),
        _counts(data.get("load"), "load", where),
        forged,
        queues,
        without_master,
        ptp_queues,
        ptp_queued,
        forwarded,
        None if stale is None else tuple(stale),
        data,
    )


def _depth(messages: int, size: int) -> dict[str, int]:
    return dict(zip(QUEUE_DEPTH_FIELDS, (messages, size), strict=True))


def merge_connections(*links: Mapping[str, str]) -> dict[str, str]:
    """One state per node from several links to it: ``not-allowed`` over ``logged-in`` over ``polling``."""
    merged: dict[str, str] = {}
    for states in links:
        for node, state in states.items():
            if node not in merged or _STRENGTH[state] > _STRENGTH[merged[node]]:
                merged[node] = state
    return merged


class NodeInfoService:
    """Publishes ``node_id``'s info at its router (listening on ``listen``) and relays other
    nodes' info on request, on a thread of its own.

    ``router_status`` (the router's counters: load), ``connections`` (the state of the node's
    other links, e.g. :meth:`affinity.cluster_node.ClusterNode.connections`), ``queues``
    (``(publishes, bytes)`` queued per parent node) and ``ptp_queues`` (``(messages, bytes)``
    queued per PtP address) are read at every look for a change; the info is published when
    it changed, and at least every ``interval`` seconds.
    """

    def __init__(
        self,
        client: _affinity.Client,
        cluster: ClusterConfig,
        node_id: str,
        *,
        listen: str,
        host: str = "127.0.0.1",
        router_status: Callable[[], RouterStatus] | None = None,
        connections: Callable[[], Mapping[str, str]] | None = None,
        queues: Callable[[], Mapping[str, tuple[int, int]]] | None = None,
        queues_without_master: Callable[[], Mapping[str, tuple[int, int]]] | None = None,
        forwarded: Callable[[], Mapping[str, Mapping[str, int]]] | None = None,
        stale_masters: Callable[[], list[str]] | None = None,
        ptp_queues: Callable[[], Mapping[str, tuple[int, int]]] | None = None,
        roles: Callable[[], Mapping[str, tuple[str, int | None, str | None]]] | None = None,
        interval: float = NODE_INFO_INTERVAL,
        heartbeat_interval: float = 0.1,
        liveness_timeout: float = 2.0,
        secret: SecretArgument = None,
    ) -> None:
        spec = cluster.node(node_id)
        if spec is None:
            raise ConfigError(f"node {node_id!r}: not a node-id of the cluster")
        self.node_id, self._cluster, self._client, self._address = node_id, cluster, client, spec.address
        self._host, self._secret = host, secret
        self._heartbeat_interval, self._liveness_timeout = heartbeat_interval, liveness_timeout
        self._router_status, self._connections, self._queues = router_status, connections, queues
        self._ptp_queues = ptp_queues
        self._without_master = queues_without_master
        self._forwarded, self._stale_masters = forwarded, stale_masters
        #: Per domain ``(role, stratum, parent)`` now, where it differs from the configuration's
        #: (a domain taken over, a reload: ``cluster_failover.Failover.roles``).
        self._roles = roles
        self._interval = interval
        self._lock = threading.Lock()
        self._forged = 0
        self._seq = 0
        self._requested = False
        self._state = NODE_STATES[0]
        self._last: dict[str, Any] | None = None
        self._last_sent = 0.0
        self._links: dict[str, tuple[Subscriber, list[str]]] = {}
        #: The hop each relayed subject was asked at (its discard goes there, whatever a reload
        #: made the next hop since).
        self._hops: dict[str, str] = {}
        self._own, self._relay = (
            Source(
                client,
                listen,
                label,
                host=host,
                heartbeat_interval=heartbeat_interval,
                liveness_timeout=liveness_timeout,
                secret=secret,
            )
            for label in (NODE_INFO_LABEL, NODE_INFO_RELAY_LABEL)
        )
        self._own.on_request(self._on_own_request)
        self._own.on_discard(self._on_own_discard)
        self._relay.on_request(self._on_relay_request)
        self._relay.on_discard(self._on_relay_discard)
        #: When the thread next looks whether the info changed (monotonic seconds).
        self._next_check = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"affinity-node-info-{node_id}", daemon=True)
        self._thread.start()

    def reconfigure(self, cluster: ClusterConfig) -> None:
        """Applies a reloaded cluster block (SIGHUP): the nodes it adds are asked for and their
        info accepted, the next hops follow its parents, this node's domains are its. Links
        already open stay (a subject relayed stays at the hop it was asked at until discarded).
        Safe from any thread: the configuration is immutable and swapped whole."""
        self._cluster = cluster

    @property
    def forged(self) -> int:
        """Node info messages read from other nodes that were malformed or forged (ignored)."""
        with self._lock:
            return self._forged

    def connections(self) -> dict[str, str]:
        """Per other node linked so far (by this service or the ``connections`` given): its state."""
        with self._lock:
            own = {node: states[0] for node, (_, states) in self._links.items()}
        others = dict(self._connections()) if self._connections is not None else {}
        return merge_connections(others, own)

    def info(self) -> dict[str, Any]:
        """This node's info now (without ``seq`` and ``time``)."""
        domains = []
        overrides = dict(self._roles()) if self._roles is not None else {}
        for domain in self._cluster.domains:
            master = self.node_id in self._cluster.masters(domain.name)
            role, stratum, parent = overrides.get(
                domain.name,
                (
                    ROLES[0] if master else ROLES[1],
                    self._cluster.stratum(self.node_id, domain.name),
                    self._cluster.parent(self.node_id, domain.name),
                ),
            )
            domains.append({"name": domain.name, "role": role, "stratum": stratum, "parent": parent})
        load: dict[str, int] = {}
        if self._router_status is not None:
            status = self._router_status()
            load = {
                "subjects": status.subjects,
                "subscribers": status.subscribers,
                "not_allowed": status.not_allowed,
            }
        info: dict[str, Any] = {
            "version": NODE_INFO_VERSION,
            "node": self.node_id,
            "address": self._address,
            "state": self._state,
            "domains": domains,
            "connections": dict(sorted(self.connections().items())),
            "load": load,
            "forged_node_info": self.forged,
        }
        if self._queues is not None:
            info["queues"] = {node: _depth(*depth) for node, depth in sorted(self._queues().items())}
        if self._without_master is not None:
            waiting = sorted(self._without_master().items())
            info["queues_without_master"] = {domain: _depth(*depth) for domain, depth in waiting}
        if self._forwarded is not None:
            counted = sorted(self._forwarded().items())
            info["forwarded"] = {master: {n: counts[n] for n in FORWARD_COUNTERS} for master, counts in counted}
        if self._stale_masters is not None:
            info["stale_masters"] = sorted(self._stale_masters())
        if self._ptp_queues is not None:
            ptp = self._ptp_queues()
            deepest = sorted(ptp.items(), key=lambda item: (-item[1][1], item[0]))[:NODE_INFO_MAX_PTP_QUEUES]
            info["ptp_queues"] = {address: _depth(*depth) for address, depth in deepest}
            info["ptp_queued"] = {
                "clients": len(ptp),
                "messages": sum(messages for messages, _ in ptp.values()),
                "bytes": sum(size for _, size in ptp.values()),
            }
        return info

    def _publish(self, info: dict[str, Any], now: float) -> None:
        self._seq += 1
        payload = json.dumps({**info, "seq": self._seq, "time": round(time.time(), 3)}, separators=(",", ":"))
        self._own.publish(node_info_subject(self.node_id), payload.encode(), image=True)
        self._last, self._last_sent = info, now

    def _on_own_request(self, subject: str) -> None:
        if subject != node_info_subject(self.node_id):
            self._own.nodata(subject, "notfound")
            return
        self._requested = True
        self._publish(self.info(), time.monotonic())

    def _on_own_discard(self, subject: str) -> None:
        if subject == node_info_subject(self.node_id):
            self._requested = False

    def _on_relay_request(self, subject: str) -> None:
        target = node_info_node(subject)
        if target is None or target == self.node_id or self._cluster.node(target) is None:
            self._relay.nodata(subject, "notfound")
            return
        cluster = self._cluster
        hop = info_hop(cluster, self.node_id, target)
        with self._lock:
            self._hops[subject] = hop
            link = self._links.get(hop)
            if link is None:
                spec = cluster.node(hop)
                assert spec is not None
                subscriber = Subscriber(
                    self._client,
                    spec.address,
                    name=f"{_affinity.CLUSTER_NODE_NAME_PREFIX}{self.node_id}",
                    host=self._host,
                    heartbeat_interval=self._heartbeat_interval,
                    liveness_timeout=self._liveness_timeout,
                    secret=self._secret,
                )
                link = self._links[hop] = (subscriber, [POLLING])
                logger.info("Cluster node %s: node info of %s via %s at %s", self.node_id, target, hop, spec.address)
        link[0].subscribe(subject, self._relayed(hop, link[1]))

    def _on_relay_discard(self, subject: str) -> None:
        with self._lock:
            hop = self._hops.pop(subject, None)
            link = None if hop is None else self._links.get(hop)
        if link is not None:
            try:
                link[0].unsubscribe(subject)
            except ConfigError:
                pass  # refused and forgotten already

    def _relayed(self, hop: str, state: list[str]) -> Callable[[str, Flags, bytes], None]:
        def relay(subject: str, flags: Flags, payload: bytes) -> None:
            if flags & Flags.REFUSED:
                reason = payload.decode("utf-8", "replace")
                with self._lock:
                    if reason.startswith(NOT_ALLOWED):
                        state[0] = NOT_ALLOWED
                logger.warning("Cluster node %s: %s refused %s: %s", self.node_id, hop, subject, reason)
                self._relay.nodata(subject, "unavailable")
                return
            with self._lock:
                if flags & Flags.STATUS:
                    state[0] = POLLING  # the hop was lost or restarted: polling until heard again
                    return
                if state[0] == POLLING:
                    state[0] = LOGGED_IN
            if flags & (Flags.NODATA_NOTFOUND | Flags.NODATA_UNAVAILABLE):
                self._relay.nodata(subject, "notfound" if flags & Flags.NODATA_NOTFOUND else "unavailable")
                return
            try:
                parse_node_info(subject, payload, self._cluster)
            except ForgedNodeInfo as exc:
                with self._lock:
                    self._forged += 1
                logger.warning("Cluster node %s: ignored: %s", self.node_id, exc)
                return
            self._relay.publish(subject, payload, image=True)

        return relay

    def _run(self) -> None:
        poll_until_stopped(
            self._stop, self._step, f"Cluster node {self.node_id}: node info", logger, self._client.wait_for_data
        )

    def _step(self) -> int:
        """One iteration of the service's thread: its sources and links, then the info when
        requested and changed (looked at every :data:`NODE_INFO_CHECK_INTERVAL`) or due."""
        self._own.poll(POLL_FRAGMENTS)  # requests and discards run the callbacks
        self._relay.poll(POLL_FRAGMENTS)
        with self._lock:
            links = [subscriber for subscriber, _ in self._links.values()]
        work = sum(subscriber.poll(POLL_FRAGMENTS) for subscriber in links)
        now = time.monotonic()
        if self._requested and now >= self._next_check:
            self._next_check = now + NODE_INFO_CHECK_INTERVAL
            info = self.info()
            if info != self._last or now - self._last_sent >= self._interval:
                self._publish(info, now)
        return work

    def close(self) -> None:
        """Stops the thread, publishes the ``stopping`` info when anyone follows it (waiting
        :data:`NODE_INFO_STOP_GRACE` for the router to relay it) and closes the sources and links."""
        self._stop.set()
        self._thread.join()
        if self._requested:
            self._state = NODE_STATES[1]
            self._publish(self.info(), time.monotonic())
            time.sleep(NODE_INFO_STOP_GRACE)
        self._own.close()
        self._relay.close()
        for subscriber, _ in self._links.values():
            subscriber.close()
