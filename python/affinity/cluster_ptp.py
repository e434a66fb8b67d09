"""Point-to-point (PtP) addresses in a cluster of routers (``docs/cluster.md``, "PtP addresses").

A client logs in under a name at a node with :class:`PtpClient`: it subscribes to its
addresses there, the absolute ``/node/<node>/client/<login>`` and the relative
``client/<login>``. A message to an address is a publish of that subject (the subject codec and
control plane every source uses; no second codec):

* an absolute address is served at every node by the node's PtP source (:data:`PTP_LABEL`, a
  data service in front of all others): the message is delivered at once when it names this
  node and the client is logged in, queued for the client when it is not, forwarded over a PtP
  link (a source labelled ``ptp-link:<this>`` at the next node) when it names another
  configured node (the next hop is the one node info takes, :func:`affinity.cluster_info.info_hop`:
  the node itself, or a parent towards it), and refused when it names a node the cluster does
  not configure;
* a relative address is a subject of the domain mapping (the first domain whose include-pattern
  matches it): at a slave of its domain the node forwards it over a PtP link to its parent for
  the domain, and a login there subscribes once at the parent (as a slave subscription does); at
  the master, or when no domain (or no master) is found, this node is the client's (xmlBlaster's
  default master) and delivers or queues it.

A client's queue is bounded by the cluster's ``ptp-queue`` bytes; a message past it is refused
and its sender told (a ``PTP_REFUSED`` status, :attr:`PtpClient.refusals`), through every hop it
took (what a dead node held is lost: ``docs/cluster.md``). When the client logs in, its queue is
delivered in order.
"""

from __future__ import annotations

import logging
import re
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final

from affinity import _affinity
from affinity._arguments import expect_bytes, expect_callable, expect_str
from affinity.cluster_info import info_hop
from affinity.config.cluster import NODE_ID_PATTERN, ClusterConfig
from affinity.config.model import DataService, PeerLabel, PriorityGroup, SourceGroup
from affinity.exceptions import ConfigError
from affinity.secret import SecretArgument
from affinity.subjects import PTP_STATUS_PREFIX, Flags, Source, Subscriber

__all__ = [
    "PTP_LABEL",
    "PTP_REFUSED",
    "PtpAddress",
    "PtpClient",
    "PtpNode",
    "PtpRefusal",
    "parse_ptp_address",
    "ptp_services",
]

logger = logging.getLogger("affinity.cluster")

#: The label of a node's PtP source at its own router (a cluster source: the router hands it
#: the publishes of the subjects it serves, and passes its statuses on to their senders).
PTP_LABEL: Final[str] = f"{_affinity.CLUSTER_SOURCE_PREFIX}node-ptp"
#: The label prefix of a node's PtP link at another node (``ptp-link:<this node>``).
PTP_LINK_PREFIX: Final[str] = _affinity.CLUSTER_PTP_LINK_PREFIX
#: The name and label prefix of a :class:`PtpClient`'s subscriber and source (``ptp-client:<login>``).
PTP_CLIENT_PREFIX: Final[str] = "ptp-client:"
#: An absolute address: ``/node/<node-id>/client/<login>``.
NODE_ADDRESS_PREFIX: Final[str] = "/node/"
#: A relative address: ``client/<login>``.
CLIENT_ADDRESS_PREFIX: Final[str] = "client/"
#: The status a sender gets for a message refused (``PTP_REFUSED #<n>: <reason>``; ``n``
#: counts the sender's messages at the node that tells it, so a node can relay a refusal
#: heard on a PtP link to the message's own sender).
PTP_REFUSED: Final[str] = f"{PTP_STATUS_PREFIX}REFUSED"
#: Addresses a node queues messages for at once; a message for one more is refused.
MAX_PTP_MAILBOXES: Final[int] = 4096
#: Messages sent on one PtP link whose sender a refusal can still be relayed to.
MAX_LINK_IN_FLIGHT: Final[int] = 65536
#: Senders a node counts messages of (the least recently heard is forgotten past it).
MAX_COUNTED_SENDERS: Final[int] = 65536
#: Heartbeat intervals a PtP link must have heard the next node before it sends on it.
LINK_SETTLE_HEARTBEATS: Final[int] = 3
#: The counters of :meth:`PtpNode.counters`.
PTP_COUNTERS: Final[tuple[str, ...]] = (
    "delivered",
    "queued",
    "flushed",
    "forwarded",
    "refused",
    "relayed_refusals",
    "unmatched_statuses",
)

_REFUSAL = re.compile(rf"{PTP_REFUSED} #(\d+): (.*)", re.DOTALL)


@dataclass(frozen=True)
class PtpAddress:
    """A PtP address: ``node`` is None for a relative one."""

    login: str
    node: str | None = None

    def __str__(self) -> str:
        relative = f"{CLIENT_ADDRESS_PREFIX}{self.login}"
        return relative if self.node is None else f"{NODE_ADDRESS_PREFIX}{self.node}/{relative}"


def _name(kind: str, value: str, address: str) -> str:
    if not NODE_ID_PATTERN.fullmatch(value):
        raise ConfigError(f"PtP address {address!r}: {kind} {value!r} is not 1..64 of [A-Za-z0-9_.-]")
    return value


def parse_ptp_address(address: str) -> PtpAddress:
    """``/node/<node-id>/client/<login>`` or ``client/<login>``; :class:`ConfigError` naming
    what is wrong otherwise."""
    expect_str("address", address)
    if address.startswith(CLIENT_ADDRESS_PREFIX):
        return PtpAddress(_name("login", address[len(CLIENT_ADDRESS_PREFIX) :], address))
    if address.startswith(NODE_ADDRESS_PREFIX):
        node, slash, rest = address[len(NODE_ADDRESS_PREFIX) :].partition("/")
        if slash and rest.startswith(CLIENT_ADDRESS_PREFIX):
            login = rest[len(CLIENT_ADDRESS_PREFIX) :]
            return PtpAddress(_name("login", login, address), _name("node", node, address))
    raise ConfigError(
        f"PtP address {address!r}: expected {NODE_ADDRESS_PREFIX}<node-id>/{CLIENT_ADDRESS_PREFIX}<login> "
        f"or {CLIENT_ADDRESS_PREFIX}<login>"
    )


def ptp_services(cluster: ClusterConfig, node_id: str) -> tuple[DataService, ...]:
    """The data service a node's router serves PtP addresses with (absolute and relative), from
    :data:`PTP_LABEL`; it goes in front of every other service."""
    node = cluster.node(node_id)
    if node is None:
        raise ConfigError(f"node {node_id!r}: not a node-id of the configuration's cluster")
    peer = PeerLabel(PTP_LABEL, True, node.location)
    group = SourceGroup((PriorityGroup((peer,), node.location),), (), node.location)
    patterns = (f"^{NODE_ADDRESS_PREFIX}", f"^{CLIENT_ADDRESS_PREFIX}")
    return (DataService("cluster-ptp", patterns, (group,), node.location),)


@dataclass(frozen=True)
class PtpRefusal:
    """A message a node refused: the address it was sent to and the node's reason."""

    address: str
    reason: str


def _refusal_text(count: int, reason: str) -> str:
    return f"{PTP_REFUSED} #{count}: {reason}"


@dataclass
class _Mailbox:
    """Messages queued at this node for one address whose client is not logged in."""

    messages: deque[bytes] = field(default_factory=deque)
    size: int = 0


class _Link:
    """A PtP link to the next node: a source labelled ``ptp-link:<this>`` there."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.live_since: float | None = None
        #: Messages waiting for the link to be live: (sender, its count, address, payload).
        self.pending: deque[tuple[int, int, str, bytes]] = deque()
        self.pending_size = 0
        #: Messages sent on the link since it (re)started: this count -> (sender, its count, address).
        self.sent = 0
        self.in_flight: OrderedDict[int, tuple[int, int, str]] = OrderedDict()
        self.switches = 0


class PtpNode:
    """A node's side of PtP addresses (module docstring), driven by :meth:`poll` on the
    cluster node's thread: its PtP source at the local router and its links to other nodes."""

    def __init__(
        self,
        client: _affinity.Client,
        cluster: ClusterConfig,
        node_id: str,
        *,
        listen: str,
        listen_host: str,
        link_host: str,
        heartbeat_interval: float,
        liveness_timeout: float,
        secret: SecretArgument = None,
    ) -> None:
        self.node_id = node_id
        self._client, self._cluster = client, cluster
        self._link_host = link_host
        self._heartbeat_interval, self._liveness_timeout, self._secret = heartbeat_interval, liveness_timeout, secret
        self._bound = cluster.settings.ptp_queue
        self._source = Source(
            client,
            listen,
            PTP_LABEL,
            host=listen_host,
            heartbeat_interval=heartbeat_interval,
            liveness_timeout=liveness_timeout,
            secret=secret,
        )
        self._source.on_request(self._login)
        self._source.on_discard(self._logout)
        self._source.on_publish(self._message)
        self._logged_in: set[str] = set()
        self._mailboxes: dict[str, _Mailbox] = {}
        self._links: dict[str, _Link] = {}
        #: Per parent node: the subscriber relative logins at this node are passed on with.
        self._upstream: dict[str, Subscriber] = {}
        self._domains = [
            (domain.name, [_affinity.PosixRegex(pattern) for pattern in domain.include_patterns])
            for domain in cluster.domains
        ]
        self._senders: OrderedDict[int, int] = OrderedDict()
        self._counters = dict.fromkeys(PTP_COUNTERS, 0)

    def _relative_hop(self, subject: str) -> str | None:
        """The parent a relative address goes to (its domain's, xmlBlaster's mapping); None when
        this node is the client's: no domain matches, this node is its master, it has none."""
        for name, patterns in self._domains:
            if any(pattern.is_match(subject) for pattern in patterns):
                return self._cluster.parent(self.node_id, name)
        return None

    # ---- the local router -------------------------------------------------------------------

    def _login(self, subject: str) -> None:
        try:
            address = parse_ptp_address(subject)
        except ConfigError as exc:
            logger.warning("Cluster node %s: %s", self.node_id, exc)
            self._source.nodata(subject, "notfound")
            return
        if address.node is not None and address.node != self.node_id:
            logger.warning("Cluster node %s: a login to %s, an address of another node", self.node_id, subject)
            self._source.nodata(subject, "notfound")
            return
        hop = self._relative_hop(subject) if address.node is None else None
        if hop is not None:
            self._upstream_link(hop).subscribe(subject, self._relay_login(hop))
            return
        self._logged_in.add(subject)
        # The login's answer: an empty image, then what was queued, in order.
        self._source.publish(subject, b"", image=True)
        mailbox = self._mailboxes.pop(subject, None)
        if mailbox is not None:
            for payload in mailbox.messages:
                self._source.publish(subject, payload)
            self._counters["flushed"] += len(mailbox.messages)
            queued = len(mailbox.messages)
            logger.info("Cluster node %s: %s logged in: %d queued messages delivered", self.node_id, subject, queued)

    def _logout(self, subject: str) -> None:
        self._logged_in.discard(subject)
        for upstream in self._upstream.values():
            if subject in upstream.subjects():
                upstream.unsubscribe(subject)

    def _upstream_link(self, node_id: str) -> Subscriber:
        subscriber = self._upstream.get(node_id)
        if subscriber is None:
            spec = self._cluster.node(node_id)
            assert spec is not None  # parents come from the checked configuration
            subscriber = self._upstream[node_id] = Subscriber(
                self._client,
                spec.address,
                name=f"{_affinity.CLUSTER_NODE_NAME_PREFIX}{self.node_id}",
                host=self._link_host,
                heartbeat_interval=self._heartbeat_interval,
                liveness_timeout=self._liveness_timeout,
                secret=self._secret,
            )
        return subscriber

    def _relay_login(self, hop: str) -> Callable[[str, Flags, bytes], None]:
        """What the parent answers a relative login passed on to it with, relayed to the client."""

        def relay(subject: str, flags: Flags, payload: bytes) -> None:
            if flags & Flags.REFUSED:
                logger.warning("Cluster node %s: %s refused the login %s: %s", self.node_id, hop, subject, payload)
                self._source.nodata(subject, "unavailable")
            elif flags & Flags.STATUS:
                return  # the parent moved or restarted: its fresh answer follows
            elif flags & Flags.NODATA_NOTFOUND:
                self._source.nodata(subject, "notfound")
            elif flags & Flags.NODATA_UNAVAILABLE:
                self._source.nodata(subject, "unavailable")
            else:
                self._source.publish(subject, payload, image=bool(flags & Flags.IMAGE))

        return relay

    def _count(self, sender: int) -> int:
        count = self._senders.pop(sender, 0) + 1
        self._senders[sender] = count
        if len(self._senders) > MAX_COUNTED_SENDERS:
            self._senders.popitem(last=False)
        return count

    def _message(self, subject: str, flags: Flags, payload: bytes) -> None:
        if len(payload) < _affinity.SUBJECT_ORIGIN_LENGTH:
            logger.warning("Cluster node %s: a PtP message to %s without its sender", self.node_id, subject)
            return
        sender = int.from_bytes(payload[: _affinity.SUBJECT_ORIGIN_LENGTH], "little")
        body = payload[_affinity.SUBJECT_ORIGIN_LENGTH :]
        count = self._count(sender)
        if flags & Flags.ERASE:
            self._refuse(sender, count, subject, "a PtP message cannot be erased")
            return
        try:
            address = parse_ptp_address(subject)
        except ConfigError as exc:
            self._refuse(sender, count, subject, str(exc))
            return
        hop = self._relative_hop(subject) if address.node is None else None
        if hop is not None:
            self._forward(hop, sender, count, subject, body)
        elif address.node is None or address.node == self.node_id:
            self._deliver(sender, count, subject, body)
        elif self._cluster.node(address.node) is None:
            nodes = ", ".join(node.node_id for node in self._cluster.nodes)
            reason = f"node {address.node!r} is not a node of this cluster (nodes: {nodes})"
            self._refuse(sender, count, subject, reason)
        else:
            self._forward(info_hop(self._cluster, self.node_id, address.node), sender, count, subject, body)

    def _deliver(self, sender: int, count: int, subject: str, body: bytes) -> None:
        if subject in self._logged_in:
            self._source.publish(subject, body)
            self._counters["delivered"] += 1
            return
        mailbox = self._mailboxes.get(subject)
        if mailbox is None and len(self._mailboxes) >= MAX_PTP_MAILBOXES:
            reason = f"node {self.node_id} queues messages for {MAX_PTP_MAILBOXES} clients already"
            self._refuse(sender, count, subject, reason)
            return
        if mailbox is None:
            mailbox = self._mailboxes[subject] = _Mailbox()
        if mailbox.size + len(body) > self._bound:
            reason = (
                f"the queue for {subject} at node {self.node_id} is full (ptp-queue {self._bound} bytes); not logged in"
            )
            self._refuse(sender, count, subject, reason)
            if not mailbox.messages:
                del self._mailboxes[subject]
            return
        mailbox.messages.append(body)
        mailbox.size += len(body)
        self._counters["queued"] += 1

    def _refuse(self, sender: int, count: int, subject: str, reason: str) -> None:
        """Tells ``sender`` (through the local router) that its ``count``-th message was refused."""
        self._counters["refused"] += 1
        logger.info("Cluster node %s: PtP message to %s refused: %s", self.node_id, subject, reason)
        text = _refusal_text(count, reason).encode()
        flags = Flags.STATUS | Flags.REFUSED | Flags.PUBLISH
        origin = sender.to_bytes(_affinity.SUBJECT_ORIGIN_LENGTH, "little")
        self._source._core.send_data(subject, int(flags), origin + text)

    # ---- links to other nodes ---------------------------------------------------------------

    def _link(self, node_id: str) -> _Link:
        link = self._links.get(node_id)
        if link is None:
            spec = self._cluster.node(node_id)
            assert spec is not None  # checked by the caller
            source = Source(
                self._client,
                spec.address,
                f"{PTP_LINK_PREFIX}{self.node_id}",
                host=self._link_host,
                heartbeat_interval=self._heartbeat_interval,
                liveness_timeout=self._liveness_timeout,
                secret=self._secret,
            )
            link = self._links[node_id] = _Link(source)
            source.on_ptp_status(self._link_status(node_id, link))
            logger.info("Cluster node %s: PtP link to %s at %s", self.node_id, node_id, spec.address)
        return link

    def _forward(self, hop: str, sender: int, count: int, subject: str, body: bytes) -> None:
        link = self._link(hop)
        if not link.pending and self._settled(link) and self._send(link, sender, count, subject, body):
            return
        if link.pending_size + len(body) > self._bound:
            reason = f"the queue for node {hop} at node {self.node_id} is full (ptp-queue {self._bound} bytes)"
            self._refuse(sender, count, subject, reason)
            return
        link.pending.append((sender, count, subject, body))
        link.pending_size += len(body)

    def _send(self, link: _Link, sender: int, count: int, subject: str, body: bytes) -> bool:
        if not link.source.publish(subject, body):
            return False
        link.sent += 1
        link.in_flight[link.sent] = (sender, count, subject)
        if len(link.in_flight) > MAX_LINK_IN_FLIGHT:
            link.in_flight.popitem(last=False)
        self._counters["forwarded"] += 1
        return True

    def _settled(self, link: _Link) -> bool:
        if not link.source.router_live:
            link.live_since = None
            return False
        now = time.monotonic()
        if link.live_since is None:
            link.live_since = now
        return now - link.live_since >= LINK_SETTLE_HEARTBEATS * self._heartbeat_interval

    def _link_status(self, hop: str, link: _Link) -> Callable[[str, Flags, str], None]:
        def status(subject: str, flags: Flags, text: str) -> None:
            matched = _REFUSAL.fullmatch(text)
            entry = link.in_flight.pop(int(matched.group(1)), None) if matched else None
            if matched is None or entry is None or entry[2] != subject:
                self._counters["unmatched_statuses"] += 1
                node = self.node_id
                logger.warning("Cluster node %s: a PtP status from %s matches no message sent: %s", node, hop, text)
                return
            self._counters["relayed_refusals"] += 1
            self._refuse(entry[0], entry[1], subject, matched.group(2))
            self._counters["refused"] -= 1  # counted where it was refused

        return status

    # ---- driving ------------------------------------------------------------------------------

    def poll(self, limit: int) -> int:
        """Polls the PtP source and links, sends what waited for a link; returns the work done."""
        work = len(self._source.poll(limit))
        for upstream in self._upstream.values():
            work += upstream.poll(limit)
        for link in self._links.values():
            work += len(link.source.poll(limit))
            switches = link.source.counters().router_switches
            if switches != link.switches:
                # The next node restarted or moved: it counts this link's messages from 1 again.
                link.switches, link.sent = switches, 0
                link.in_flight.clear()
            while link.pending and self._settled(link):
                sender, count, subject, body = link.pending[0]
                if not self._send(link, sender, count, subject, body):
                    break
                link.pending.popleft()
                link.pending_size -= len(body)
                work += 1
        return work

    def counters(self) -> dict[str, int]:
        """(A copy.) Messages ``delivered`` at once, ``queued`` for a client not logged in, ``flushed`` at
        its login, ``forwarded`` to another node, ``refused`` here, refusals of other nodes
        ``relayed_refusals`` to their senders, and ``unmatched_statuses`` (statuses on a link
        that name no message sent on it)."""
        return dict(self._counters)

    def queue_depths(self) -> dict[str, tuple[int, int]]:
        """``(messages, bytes)`` queued now per address whose client is not logged in (node
        info's ``ptp_queues``; a copy, safe to call from another thread than the node's)."""
        return {address: (len(mailbox.messages), mailbox.size) for address, mailbox in list(self._mailboxes.items())}

    def close(self) -> None:
        """Closes the PtP source and links (logging the counters)."""
        if any(self._counters.values()):
            figures = ", ".join(f"{name} {value}" for name, value in self._counters.items())
            logger.info("Cluster node %s: PtP messages: %s", self.node_id, figures)
        self._source.close()
        for link in self._links.values():
            link.source.close()
        for upstream in self._upstream.values():
            upstream.close()


#: ``callback(address, payload)`` for a message a :class:`PtpClient` received.
MessageCallback = Callable[[str, bytes], object]


class PtpClient:
    """A client logged in under ``login`` at the router ``node`` runs (``docs/cluster.md``,
    "PtP addresses"): it receives what is sent to ``/node/<node>/client/<login>``
    (:attr:`address`) and to ``client/<login>`` (:attr:`relative_address`), and sends to any
    PtP address with :meth:`send`. :meth:`poll` runs the callbacks.

    ``router`` / ``routers``, ``host``, ``heartbeat_interval``, ``liveness_timeout`` and
    ``secret`` are those of :class:`~affinity.subjects.Subscriber` and
    :class:`~affinity.subjects.Source` (it holds one of each at the router).
    """

    def __init__(
        self,
        client: _affinity.Client,
        router: str | None = None,
        *,
        routers: Sequence[str] | None = None,
        login: str,
        node: str,
        host: str = "127.0.0.1",
        heartbeat_interval: float = 0.1,
        liveness_timeout: float = 2.0,
        secret: SecretArgument = None,
    ) -> None:
        self.address = str(PtpAddress(expect_str("login", login), expect_str("node", node)))
        parse_ptp_address(self.address)
        self.relative_address = str(PtpAddress(login))
        name = f"{PTP_CLIENT_PREFIX}{login}"
        self._inbox = Subscriber(
            client,
            router,
            routers=routers,
            name=name,
            host=host,
            heartbeat_interval=heartbeat_interval,
            liveness_timeout=liveness_timeout,
            secret=secret,
        )
        self._outbox = Source(
            client,
            router,
            name,
            routers=routers,
            host=host,
            heartbeat_interval=heartbeat_interval,
            liveness_timeout=liveness_timeout,
            secret=secret,
        )
        self._outbox.on_ptp_status(self._status)
        self._callbacks: list[MessageCallback] = []
        self._answered: set[str] = set()
        self._refusals: list[PtpRefusal] = []
        self.login_refused: str | None = None
        for address in (self.address, self.relative_address):
            self._inbox.subscribe(address, self._received)

    def on_message(self, callback: MessageCallback) -> None:
        """``callback(address, payload)`` for each message received, in order (from :meth:`poll`)."""
        self._callbacks.append(expect_callable("callback", callback))

    @property
    def logged_in(self) -> bool:
        """Whether the node answered the login at :attr:`address` (queued messages follow)."""
        return self.address in self._answered

    @property
    def answered(self) -> frozenset[str]:
        """The addresses whose login was answered (at a slave of a relative address's domain,
        by the master, through the slave's subscription there)."""
        return frozenset(self._answered)

    @property
    def ready(self) -> bool:
        """Whether the router heard this client's sender (:meth:`send` returns False before)."""
        return self._outbox.router_live

    def send(self, to: str, payload: bytes) -> bool:
        """Sends ``payload`` to the PtP address ``to`` (:func:`parse_ptp_address`; an address
        that does not parse raises :class:`ConfigError`). False, sending nothing, while the
        router has not heard this client yet (:attr:`ready`). A refusal comes back later
        (:attr:`refusals`); send after :attr:`logged_in` (the node's PtP source is up then)."""
        parse_ptp_address(to)
        expect_bytes("payload", payload)
        return self._outbox.publish(to, payload)

    @property
    def refusals(self) -> list[PtpRefusal]:
        """The messages refused so far (a full queue, an unknown node...), in the order told."""
        return list(self._refusals)

    def _status(self, address: str, flags: Flags, text: str) -> None:
        matched = _REFUSAL.fullmatch(text)
        self._refusals.append(PtpRefusal(address, matched.group(2) if matched else text))

    def _received(self, address: str, flags: Flags, payload: bytes) -> None:
        if flags & Flags.IMAGE:
            self._answered.add(address)  # the login's answer
        elif flags & (Flags.NODATA_NOTFOUND | Flags.NODATA_UNAVAILABLE | Flags.REFUSED):
            if address == self.address:
                self.login_refused = payload.decode("utf-8", "replace") or "refused by the node"
        elif flags & Flags.STATUS:
            self._answered.discard(address)  # the router moved or restarted: answered again
        elif flags & Flags.UPDATE:
            for callback in self._callbacks:
                callback(address, payload)

    def poll(self, limit: int = 100) -> int:
        """Receives messages and statuses; returns how many callbacks ran."""
        self._outbox.poll(limit)
        return self._inbox.poll(limit)

    def close(self) -> None:
        """Logs out (later messages are queued for this login again) and leaves the router."""
        self._inbox.close()
        self._outbox.close()

    def __enter__(self) -> PtpClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
