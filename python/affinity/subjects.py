"""Subjects on the wire: subscribe through a router, serve subjects as a source.

The router (``affinity router --config services.conf``, or :class:`SubjectRouter` in process)
routes each new subject to a peer with the affinity routing tables, forwards the request, and
relays the peer's updates to every subscriber; faucet topics go to enlisted publishers. The data
path is Rust (:mod:`affinity._affinity`); this module configures it and wraps the handles.

>>> sub = Subscriber(client, router="aeron:udp?endpoint=127.0.0.1:40500")  # doctest: +SKIP
>>> sub.subscribe("/PRIVATE/alice-0/FXTRADE", print)                      # doctest: +SKIP
>>> sub.poll(100)                                                          # doctest: +SKIP

**Router failure.** The router sends every subscriber and source an ALIVE record every heartbeat
interval. Given ``routers=[...]`` (or one ``router=``), a member that hears nothing from the
router in use for ``liveness_timeout`` (checked by :meth:`Subscriber.poll` / :meth:`Source.poll`)
moves to the next router of its list (with one router: the same one again), and one that sees
the router restarted (a new router id) stays; either way it sends every subscription and faucet
enlistment again by itself. A subscriber's callbacks get ``Flags.STATUS`` naming the move, then
a fresh image. A router stopped cleanly tells its members, with ``forward=``, where to go.

**Authentication.** With a router secret, the router and every subscriber and source seal and
verify every message they exchange with the control plane's one mechanism (``docs/subjects.md``,
"Authentication"); unauthenticated, badly tagged or replayed messages are counted and dropped.
Each of :class:`SubjectRouter`, :class:`Subscriber` and :class:`Source` finds its secret, the
first that is set (:func:`resolve_router_secret`):

1. its ``secret=`` argument: the secret's bytes, or a path (``os.PathLike``) to a secret file;
2. ``$AFFINITY_ROUTER_SECRET``: the secret as hex text;
3. ``$AFFINITY_ROUTER_SECRET_FILE``: the path of a secret file (hex text, read as
   :func:`affinity.secret.read_secret_file` says: no link, regular, owner-only, size-capped).

None of them: the router (or member) is *unauthenticated*, as before (fine on one host among
trusted users; anyone who can reach its channels can then forge subscriptions and data).
"""

from __future__ import annotations

import enum
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType

from affinity import _affinity, _network_json
from affinity._arguments import (
    expect_bool,
    expect_bytes,
    expect_callable,
    expect_str,
    expect_strs,
    milliseconds,
    wrong_type,
)
from affinity.config.faucet import RouterConfig, parse_router_file
from affinity.exceptions import ClosedError, ConfigError
from affinity.records import (
    FaucetLogInfo,
    RoutingEventInfo,
    SourceStateInfo,
    SubjectPeerCounters,
    SubscriberEvictedInfo,
)
from affinity.routing import Router, RoutingEvent
from affinity.secret import SecretArgument, resolve

__all__ = [
    "ANY_CONTROL_TOPIC",
    "DEFAULT_BACKLOG_BUDGET",
    "MIN_BACKLOG_BUDGET",
    "NO_SECRET",
    "PTP_STATUS_PREFIX",
    "ROUTER_SECRET_ENV",
    "ROUTER_SECRET_FILE_ENV",
    "FaucetEvent",
    "Flags",
    "RouterStatus",
    "Source",
    "SourceStatus",
    "SubjectRouter",
    "Subscriber",
    "resolve_router_secret",
]

logger = logging.getLogger("affinity.router")

#: ENLIST subject meaning "the router's faucet control topic, whatever its name".
ANY_CONTROL_TOPIC = "*"
#: NODATA statuses a source may answer.
NODATA_STATUSES = ("unavailable", "notfound")
#: Environment variable holding the router secret as hex text.
ROUTER_SECRET_ENV = "AFFINITY_ROUTER_SECRET"
#: Environment variable naming a router secret file.
ROUTER_SECRET_FILE_ENV = "AFFINITY_ROUTER_SECRET_FILE"
#: ``RouterStatus.secret`` / ``secret_source`` of a router or member without a secret.
NO_SECRET = "none"
#: Least seconds between two warnings about refused (not authentic) messages.
AUTH_LOG_INTERVAL = 1.0
#: The reason a subscriber reports for a SUBSCRIBE its own link to the router could not take.
LINK_FULL_REASON = b"subscribe refused: the link to the router is full (the router does not read); not sent"


class Flags(enum.IntFlag):
    """Flags of a subject message."""

    IMAGE = _affinity.SUBJECT_FLAG_IMAGE
    UPDATE = _affinity.SUBJECT_FLAG_UPDATE
    NODATA_UNAVAILABLE = _affinity.SUBJECT_FLAG_NODATA_UNAVAILABLE
    NODATA_NOTFOUND = _affinity.SUBJECT_FLAG_NODATA_NOTFOUND
    STATUS = _affinity.SUBJECT_FLAG_STATUS
    #: With STATUS: the router refused the subscription (the payload says which bound); it is
    #: not held, and the subscriber forgets its callbacks for the subject.
    REFUSED = _affinity.SUBJECT_FLAG_REFUSED
    #: A publish of a subject not requested from its source (xmlBlaster's publish); subscribers
    #: never see it (the router strips it when relaying).
    PUBLISH = _affinity.SUBJECT_FLAG_PUBLISH
    #: The subject was erased: its image is gone, the subscription stays.
    ERASE = _affinity.SUBJECT_FLAG_ERASE
    #: With PUBLISH: the publish names its message domain (``Source.publish(domain=...)``);
    #: subscribers never see it (routers strip it with the domain when relaying).
    DOMAIN = _affinity.SUBJECT_FLAG_DOMAIN


#: Bytes a router's backlogs may hold together by default (``backlog_budget``).
DEFAULT_BACKLOG_BUDGET: int = _affinity.ROUTER_BACKLOG_BUDGET
#: Smallest ``backlog_budget`` a router accepts.
MIN_BACKLOG_BUDGET: int = _affinity.ROUTER_MIN_BACKLOG_BUDGET


def resolve_router_secret(secret: SecretArgument = None) -> tuple[bytes | None, str]:
    """The router secret and where it came from (module docstring); ``(None, "none")`` if unset."""
    found = resolve(secret, ROUTER_SECRET_ENV, ROUTER_SECRET_FILE_ENV, "router secret")
    return found if found is not None else (None, NO_SECRET)


def _router_list(router: object, routers: object) -> list[str]:
    """The routers of a member: ``router`` (one channel) or ``routers`` (a non-empty list)."""
    channels = None
    if routers is not None:
        if isinstance(routers, str):
            raise ConfigError("routers must be a sequence of channels, not one string (or use router=)")
        channels = expect_strs("routers", routers)
        if not channels:
            raise ConfigError("routers: at least one channel")
    if router is not None:
        expect_str("router", router)
    if (router is None) == (channels is None):
        raise ConfigError("give the router's channel as router=CHANNEL or a list as routers=[CHANNEL, ...], not both")
    return [router] if isinstance(router, str) else channels or []


class _Member:
    """What :class:`Subscriber` and :class:`Source` share: authentication state and counters."""

    _core: _affinity.SubjectSubscriberCore | _affinity.SubjectSourceCore
    #: Where the router secret came from (``"none"``: unauthenticated).
    secret_source: str

    @property
    def connection_id(self) -> int:
        """This member's connection id (its member id)."""
        return self._core.id

    @property
    def authenticated(self) -> bool:
        """Whether it holds a router secret (seals and verifies every message)."""
        return self._core.authenticated

    @property
    def endpoint(self) -> str:
        """Its inbox endpoint (``host:port``), where the router sends to it."""
        return self._core.endpoint

    @property
    def router(self) -> str:
        """The channel of the router in use (another of ``routers`` after a move)."""
        return self._core.router

    def counters(self) -> SubjectPeerCounters:
        """``malformed``, ``received``, ``dropped_records``, ``router_switches`` (moves to another
        router, or restores at a restarted one) and the inbox messages refused before decoding:
        ``auth_unauthenticated``, ``auth_unverifiable``, ``auth_bad_tag``, ``auth_replayed``
        (attributes of a read-only record; they were dict keys before)."""
        return self._core.counters()


#: ``callback(subject, flags, payload)`` for a subscriber.
SubjectCallback = Callable[[str, Flags, bytes], object]
#: ``callback(subject)`` for a source's requests and discards.
RequestCallback = Callable[[str], object]


@dataclass(frozen=True)
class FaucetEvent:
    """One faucet announcement (the seed's variables; ``None`` where the seed omits them)."""

    event: str
    topic: str
    client_name: str | None = None
    connection_name: str | None = None
    subscriber_client_name: str | None = None
    subscriber_connection_name: str | None = None

    @classmethod
    def from_json(cls, payload: bytes) -> FaucetEvent:
        """Decodes the JSON published on the control topic; :class:`ConfigError` if malformed."""
        try:
            data = _network_json.loads(payload)
        except ValueError as exc:
            raise ConfigError(f"faucet event is not JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("event"), str):
            raise ConfigError(f"faucet event without an event field: {payload!r}")
        fields = {name: data.get(name) for name in cls.__dataclass_fields__}
        return cls(**{name: (value if isinstance(value, str) else None) for name, value in fields.items()})  # type: ignore[arg-type]


class Subscriber(_Member):
    """Subscribes to subjects through a router; :meth:`poll` runs the callbacks.

    Several callbacks may subscribe to one subject: the router holds one subscription per
    subscriber and subject (SUBSCRIBE is sent for the first callback, UNSUBSCRIBE after the
    last), and each update runs each callback once. A subscription the router refuses (one of
    its bounds) runs the callbacks with ``Flags.STATUS | Flags.REFUSED`` and the reason as
    payload, then forgets them: subscribe again later to retry. So does a SUBSCRIBE this
    subscriber's own link to the router could not take (64 MiB not accepted yet), at the next
    :meth:`poll`.

    ``router`` (one channel) or ``routers`` (a list): the first is used, the next when it is
    lost; every subscription is then sent again by itself, and the callbacks get
    ``Flags.STATUS`` naming the move, then a fresh image (module docstring, "Router failure").
    ``secret``: the router secret (module docstring); the router must hold the same one.
    """

    _core: _affinity.SubjectSubscriberCore

    def __init__(
        self,
        client: _affinity.Client,
        router: str | None = None,
        *,
        routers: Sequence[str] | None = None,
        name: str | None = None,
        host: str = "127.0.0.1",
        heartbeat_interval: float = 0.1,
        liveness_timeout: float = 2.0,
        secret: SecretArgument = None,
    ) -> None:
        key, self.secret_source = resolve_router_secret(secret)
        self._core = _affinity.SubjectSubscriberCore(
            client,
            _router_list(router, routers),
            name=name if name is not None else f"subscriber-{os.getpid()}",
            host=host,
            heartbeat_interval_ms=milliseconds("heartbeat_interval", heartbeat_interval),
            liveness_timeout_ms=milliseconds("liveness_timeout", liveness_timeout),
            secret=key,
        )
        self._callbacks: dict[str, list[SubjectCallback]] = {}
        #: Subjects whose SUBSCRIBE the link to the router dropped, reported by the next poll.
        self._unsent: list[str] = []

    def subscribe(self, subject: str, callback: SubjectCallback) -> None:
        """Subscribes to ``subject``; ``callback(subject, flags, payload)`` runs from :meth:`poll`."""
        expect_callable("callback", callback)
        if subject not in self._callbacks and not self._core.subscribe(subject):
            self._unsent.append(subject)
        self._callbacks.setdefault(subject, []).append(callback)

    def subjects(self) -> list[str]:
        """The subjects subscribed now (each once, however many callbacks it has)."""
        return list(self._callbacks)

    def unsubscribe(self, subject: str) -> None:
        """Drops the latest subscription to ``subject`` (and its callback)."""
        callbacks = self._callbacks.get(expect_str("subject", subject))
        if not callbacks:
            raise ConfigError(f"unsubscribe: {subject!r} is not subscribed")
        callbacks.pop()
        if not callbacks:
            self._core.unsubscribe(subject)
            del self._callbacks[subject]

    def poll(self, limit: int = 100) -> int:
        """Receives up to ``limit`` fragments' worth and runs the callbacks; returns how many ran."""
        ran = 0
        refused = Flags.STATUS | Flags.REFUSED
        unsent, self._unsent = self._unsent, []
        records = [(int(refused), subject, LINK_FULL_REASON) for subject in unsent]
        records += [(record.flags, record.subject, record.payload) for record in self._core.poll(limit)]
        for flags, subject, payload in records:
            callbacks = self._callbacks.get(subject, ())
            if flags & Flags.REFUSED:
                # The router holds nothing for it: the callbacks hear why, then are forgotten.
                self._callbacks.pop(subject, None)
            for callback in callbacks:
                callback(subject, Flags(flags), payload)
                ran += 1
        return ran

    def close(self) -> None:
        """Says "leaving" to the router (which drops this subscriber's subscriptions)."""
        self._core.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


#: ``callback(subject, flags, payload)`` for a cluster node's source: a publish handed to it.
PublishCallback = Callable[[str, Flags, bytes], object]
#: A forward status (from a cluster node) saying the source's publishes are queued.
FORWARD_WARNING: str = _affinity.FORWARD_WARNING
#: A forward status (from a cluster node) for one subject: a mirrored master that missed this
#: source's publishes of it is back; publish its image again (:meth:`Source.on_forward_resync`).
FORWARD_RESYNC: str = _affinity.FORWARD_RESYNC
#: The text prefix of a point-to-point status from a cluster node (``docs/cluster.md``, "PtP
#: addresses"): passed to :meth:`Source.on_ptp_status`, never taken for a forward status.
PTP_STATUS_PREFIX = "PTP_"
#: ``callback(address, flags, text)`` for a point-to-point status (:data:`PTP_STATUS_PREFIX`).
PtpStatusCallback = Callable[[str, Flags, str], object]


@dataclass(frozen=True)
class SourceStatus:
    """A source's publishes at a cluster node that is a slave of their domain (``docs/cluster.md``).

    ``forward_warning``: some are queued at the node for an unreachable (or unknown) master
    (the node said ``FORWARD_WARNING``); ``back_pressured``: the node refused one (its queue
    bound), so :meth:`Source.publish` returns False until the node makes room;
    ``forward_refused``: publishes the node refused since start (each reported, never dropped
    silently: they are the tail of what was published before ``back_pressured``);
    ``last_forward_status``: the node's latest text.
    """

    forward_warning: bool
    back_pressured: bool
    forward_refused: int
    last_forward_status: str


class Source(_Member):
    """A data source (adapter peer, faucet publisher) of a router.

    ``label`` must match a ``remote-label`` of the router's configuration to be routed to.
    With ``coverage`` (or ``faucet``) the source also enlists as a faucet publisher: one
    enlistment per coverage pattern (their union counts), on the control topic ``faucet``
    (default: the router's own). ``secret``: the router secret (module docstring).
    ``router`` (one channel) or ``routers`` (a list): the first is used, the next when it is
    lost; the source then announces itself and its enlistments again by itself, and the router
    requests its subjects anew (module docstring, "Router failure").
    """

    _core: _affinity.SubjectSourceCore

    def __init__(
        self,
        client: _affinity.Client,
        router: str | None = None,
        label: str | None = None,
        *,
        routers: Sequence[str] | None = None,
        coverage: Sequence[str] | None = None,
        faucet: str | None = None,
        host: str = "127.0.0.1",
        heartbeat_interval: float = 0.1,
        liveness_timeout: float = 2.0,
        secret: SecretArgument = None,
    ) -> None:
        if isinstance(coverage, str):
            raise ConfigError("coverage must be a sequence of patterns, not one string")
        patterns = [] if coverage is None else expect_strs("coverage", coverage)
        if faucet is not None:
            expect_str("faucet", faucet)
        key, self.secret_source = resolve_router_secret(secret)
        if label is None:
            raise wrong_type("label", "a str (a remote-label of the router's configuration)", label)
        self._core = _affinity.SubjectSourceCore(
            client,
            _router_list(router, routers),
            label=label,
            host=host,
            heartbeat_interval_ms=milliseconds("heartbeat_interval", heartbeat_interval),
            liveness_timeout_ms=milliseconds("liveness_timeout", liveness_timeout),
            secret=key,
        )
        self._on_request: list[RequestCallback] = []
        self._on_discard: list[RequestCallback] = []
        self._on_publish: list[PublishCallback] = []
        self._on_ptp_status: list[PtpStatusCallback] = []
        self._on_resync: list[RequestCallback] = []
        #: Subjects the router requested from this source (a publish of any other is FLAG_PUBLISH).
        self._requested: set[str] = set()
        self._forward_warning = False
        self._back_pressured = False
        self._forward_refused = 0
        self._forward_status = ""
        self._closed = False
        self._control = faucet if faucet is not None else ANY_CONTROL_TOPIC
        self.label = label
        if patterns:
            for pattern in patterns:
                self._core.enlist(self._control, pattern)
        elif faucet is not None:
            self._core.enlist(self._control, None)

    def on_request(self, callback: RequestCallback) -> None:
        """``callback(subject)`` when a subject is routed (or a faucet topic assigned) here."""
        self._on_request.append(expect_callable("callback", callback))

    def on_discard(self, callback: RequestCallback) -> None:
        """``callback(subject)`` when a subject is no longer wanted from here."""
        self._on_discard.append(expect_callable("callback", callback))

    def on_publish(self, callback: PublishCallback) -> None:
        """``callback(subject, flags, payload)`` for a publish the router hands this source: only
        a cluster node's own source gets them (``docs/cluster.md``, "Publish at a slave")."""
        self._on_publish.append(expect_callable("callback", callback))

    def on_forward_resync(self, callback: RequestCallback) -> None:
        """``callback(subject)`` when a cluster node asks for a fresh image of ``subject``: a
        mirrored master whose forward queue it dropped (it missed this source's publishes of the
        subject) is reachable again (``docs/cluster.md``, "A dead mirror does not block the
        others"). Publishing the subject's image again repairs that master's copy."""
        self._on_resync.append(expect_callable("callback", callback))

    def on_ptp_status(self, callback: PtpStatusCallback) -> None:
        """``callback(address, flags, text)`` for a cluster node's status about a point-to-point
        message this source sent (a text starting :data:`PTP_STATUS_PREFIX`: it does not
        back-pressure :meth:`publish`; ``docs/cluster.md``, "PtP addresses")."""
        self._on_ptp_status.append(expect_callable("callback", callback))

    @property
    def router_live(self) -> bool:
        """Whether the router in use was heard since the last move, within the liveness timeout."""
        return self._core.router_live

    def publish(self, subject: str, payload: bytes, *, image: bool = False, domain: str | None = None) -> bool:
        """Sends an update (or, with ``image``, a full image) of ``subject`` to the router.

        Any subject may be published, requested from this source or not (xmlBlaster's publish):
        the router relays it to the subject's subscribers, or, at a cluster node that is a slave
        of its domain, the node forwards it to the master (``docs/cluster.md``). ``domain``
        names the message domain explicitly (xmlBlaster's ``<key domain=...>``) instead of the
        one the subject's pattern gives (``ConfigError`` when it is not a domain name); it is
        sent as a publish even when the subject was requested from this source. Returns False,
        sending nothing, while the node back-pressures this source (:meth:`status`), and while
        the router has not heard this source yet (:attr:`router_live`: after its start or a
        move, a router drops data from a source it does not know); publish again later.
        """
        expect_str("subject", subject)
        expect_bytes("payload", payload)
        expect_bool("image", image)
        if subject in self._requested and domain is None:
            self._core.publish(subject, payload, image)
            return True
        flags = (Flags.IMAGE if image else Flags.UPDATE) | Flags.PUBLISH
        if domain is not None:
            payload = _affinity.subject_with_domain(domain, payload)
            flags |= Flags.DOMAIN
        if self._held_back(subject, payload):
            return False
        self._core.send_data(subject, int(flags), payload)
        return True

    def erase(self, subject: str) -> bool:
        """Erases ``subject`` (xmlBlaster's erase): every subscriber gets ``Flags.ERASE`` and
        the routers forget its image; at a slave node it goes to the master, which passes it
        to every slave. Returns False, sending nothing, when :meth:`publish` would."""
        expect_str("subject", subject)
        flags = Flags.ERASE
        if subject not in self._requested:
            if self._held_back(subject, b""):
                return False
            flags |= Flags.PUBLISH
        self._core.send_data(subject, int(flags), b"")
        return True

    def _held_back(self, subject: str, payload: bytes) -> bool:
        """Whether a publish of a subject not requested from this source must wait (back-pressured,
        or the router has not heard it yet); arguments are checked first, as a send would."""
        if self._closed:
            raise ClosedError("publish: the source is closed")
        if not expect_str("subject", subject):
            raise ConfigError("publish: the subject is empty")
        if not isinstance(payload, bytes):
            raise wrong_type("payload", "bytes", payload)
        return self._back_pressured or not self._core.router_live

    def status(self) -> SourceStatus:
        """The state of this source's publishes forwarded by a cluster node (:class:`SourceStatus`)."""
        return SourceStatus(self._forward_warning, self._back_pressured, self._forward_refused, self._forward_status)

    def _forward_notice(self, flags: int, payload: bytes) -> None:
        text = payload.decode("utf-8", "replace")
        self._forward_status = text
        if flags & Flags.REFUSED:
            self._forward_refused += 1
            self._back_pressured = True
            self._forward_warning = True
        elif text.startswith(FORWARD_WARNING):
            self._forward_warning, self._back_pressured = True, False
        else:
            self._forward_warning, self._back_pressured = False, False

    def nodata(self, subject: str, status: str) -> None:
        """Answers NODATA (``unavailable`` or ``notfound``) for ``subject``."""
        if expect_str("status", status) not in NODATA_STATUSES:
            raise ConfigError(f"nodata status {status!r}: must be one of {', '.join(NODATA_STATUSES)}")
        self._core.nodata(subject, status)

    def poll(self, limit: int = 100) -> list[FaucetEvent]:
        """Runs request / discard callbacks; returns the faucet events received."""
        events: list[FaucetEvent] = []
        for record in self._core.poll(limit):
            kind, subject, payload = record.kind, record.subject, record.payload
            if kind == _affinity.SUBJECT_KIND_REQUEST:
                self._requested.add(subject)
                for callback in self._on_request:
                    callback(subject)
            elif kind == _affinity.SUBJECT_KIND_DISCARD:
                self._requested.discard(subject)
                for callback in self._on_discard:
                    callback(subject)
            elif kind == _affinity.SUBJECT_KIND_DATA and record.flags & Flags.PUBLISH:
                if record.flags & Flags.STATUS and payload.startswith(PTP_STATUS_PREFIX.encode()):
                    text = payload.decode("utf-8", "replace")
                    if not self._on_ptp_status:
                        logger.warning("Source %s: a PtP status for %s, no callback: %s", self.label, subject, text)
                    for ptp_status in self._on_ptp_status:
                        ptp_status(subject, Flags(record.flags), text)
                elif record.flags & Flags.STATUS and payload.startswith(FORWARD_RESYNC.encode()):
                    if not self._on_resync:
                        text = payload.decode("utf-8", "replace")
                        logger.info("Source %s: no on_forward_resync callback for %s: %s", self.label, subject, text)
                    for resync in self._on_resync:
                        resync(subject)
                elif record.flags & Flags.STATUS:
                    self._forward_notice(record.flags, payload)
                else:
                    for publish in self._on_publish:
                        publish(subject, Flags(record.flags), payload)
            elif kind == _affinity.SUBJECT_KIND_DATA:
                try:
                    events.append(FaucetEvent.from_json(payload))
                except ConfigError:
                    logger.warning("ignored a malformed faucet event on %s", subject)
        return events

    def close(self) -> None:
        """Says "leaving" to the router: its subjects move to other peers."""
        self._closed = True
        self._core.close()

    def __enter__(self) -> Source:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


@dataclass(frozen=True)
class RouterStatus:
    """A router's counters (hostile input is counted and ignored) and its members.

    ``authenticated``: whether the router holds a secret; ``auth_*``: messages refused before
    decoding (data and heartbeats): version 1 at a router with a secret (``auth_unauthenticated``),
    sealed at one without (``auth_unverifiable``), a tag that does not verify or a truncated
    trailer (``auth_bad_tag``), a replay (``auth_replayed``).
    """

    malformed: int
    refused: int
    stale_data: int
    unknown_unsubscribes: int
    no_service: int
    foreign: int
    log_dropped: int
    relayed: int
    routed: int
    refused_subscribes: int
    duplicate_subscribes: int
    evicted_subscribers: int
    not_allowed: int
    control_malformed: int
    unroutable: int
    dropped_records: int
    messages_sent: int
    backlog_bytes: int
    auth_unauthenticated: int
    auth_unverifiable: int
    auth_bad_tag: int
    auth_replayed: int
    authenticated: bool
    subjects: int
    subscribers: int
    affinities: int
    members: tuple[tuple[str, bool], ...]

    @property
    def auth_refused(self) -> int:
        """Every message refused before decoding."""
        return self.auth_unauthenticated + self.auth_unverifiable + self.auth_bad_tag + self.auth_replayed


#: One entry of the router's log (``SubjectRouterCore.drain_log``).
RouterLogEntry = RoutingEventInfo | FaucetLogInfo | SubscriberEvictedInfo | SourceStateInfo


def _log_entry(entry: RouterLogEntry) -> None:
    if isinstance(entry, FaucetLogInfo):
        logger.info("Faucet %s %s: %s", entry.action, entry.topic, entry.json)
    elif isinstance(entry, SourceStateInfo) and entry.refused is not None:
        logger.warning("Source %s (connection %s) not let in: %s", entry.label, entry.connection_name, entry.refused)
    elif isinstance(entry, SourceStateInfo):
        state = "up" if entry.up else "down"
        logger.info("Source %s (connection %s) is %s", entry.label, entry.connection_name, state)
    elif isinstance(entry, SubscriberEvictedInfo):
        logger.warning(
            "Subscriber %s (connection %s) dropped: its backlog of %d bytes was the largest when the "
            "router's backlogs reached their budget",
            entry.name,
            entry.connection_name,
            entry.backlog_bytes,
        )
    else:
        for level, line in RoutingEvent.from_record(entry).log_lines():
            logger.log(level, line)


class SubjectRouter:
    """A router running in this process (what ``affinity router`` runs).

    Its routing-table events are logged on the ``affinity.router`` logger in the seed's
    formats by :meth:`flush_log` (``Object <s> is bound to affinity <k:v>``, ``We can request
    object <s> from peer N (Label)``, one line per move with its reason).

    ``backlog_budget`` bounds the bytes all of the router's backlogs (records queued for peers
    that do not keep up) hold together; past it the subscriber with the largest backlog is
    dropped, counted (``status().evicted_subscribers``) and logged as a warning.

    ``secret``: the router secret (module docstring); :attr:`secret_source` says where it came
    from, ``"none"`` when the router is unauthenticated (``status().authenticated`` is False).

    The router sends every member it hears an ALIVE every ``heartbeat_interval``; on
    :meth:`close` it tells them it stops and, with ``forward`` (another router's channel), where
    to go (module docstring, "Router failure").

    ``cluster_nodes``: as a cluster node (``docs/cluster.md``), the other nodes' ids that may
    subscribe here as ``node:<id>``; any other node id is refused ``not-allowed`` (counted in
    ``status().not_allowed``). ``None``: no cluster node, every node is refused.
    """

    def __init__(
        self,
        client: _affinity.Client,
        config: RouterConfig | str | os.PathLike[str],
        *,
        listen: str,
        control: str | None = None,
        liveness_timeout: float = 2.0,
        heartbeat_interval: float = 0.1,
        backlog_budget: int = DEFAULT_BACKLOG_BUDGET,
        secret: SecretArgument = None,
        forward: str | None = None,
        cluster_nodes: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(config, RouterConfig):
            if not isinstance(config, str | os.PathLike):
                raise wrong_type("config", "a RouterConfig or a str or os.PathLike path", config)
            config = parse_router_file(config)
        key, self.secret_source = resolve_router_secret(secret)
        router = Router.from_config(config.routing)
        faucet = config.faucet
        self._core = _affinity.SubjectRouterCore(
            client,
            router._table,
            listen,
            faucet=None
            if faucet is None
            else (faucet.control_topic, faucet.subscription_topic, faucet.announcements, faucet.coverage_option),
            control=control,
            liveness_timeout_ms=milliseconds("liveness_timeout", liveness_timeout),
            heartbeat_interval_ms=milliseconds("heartbeat_interval", heartbeat_interval),
            backlog_budget=backlog_budget,
            secret=key,
            forward=forward,
            cluster_nodes=None if cluster_nodes is None else list(expect_strs("cluster_nodes", cluster_nodes)),
        )
        self.listen = listen
        self._refusals_logged = 0
        self._refusals_logged_at = -AUTH_LOG_INTERVAL

    def set_cluster_nodes(self, nodes: Sequence[str]) -> None:
        """Replaces ``cluster_nodes`` (a reloaded cluster configuration): from the router's next
        tick, a later subscription from a node id not in ``nodes`` is refused ``not-allowed``."""
        self._core.set_cluster_nodes(list(expect_strs("cluster_nodes", nodes)))

    def flush_log(self) -> int:
        """Logs what the router did since the last call; returns the number of entries.

        Messages refused as not authentic are logged as one warning with the totals, at most
        every :data:`AUTH_LOG_INTERVAL` seconds while their number grows.
        """
        entries = self._core.drain_log()
        for entry in entries:
            _log_entry(entry)
        self._log_refusals(force=False)
        return len(entries)

    def _log_refusals(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._refusals_logged_at < AUTH_LOG_INTERVAL:
            return
        status = self.status()
        if status.auth_refused > self._refusals_logged:
            self._refusals_logged, self._refusals_logged_at = status.auth_refused, now
            logger.warning(
                "Refused %d messages that are not authentic since start (unauthenticated %d, bad tag %d, "
                "replayed %d, unverifiable %d)",
                status.auth_refused,
                status.auth_unauthenticated,
                status.auth_bad_tag,
                status.auth_replayed,
                status.auth_unverifiable,
            )

    def status(self) -> RouterStatus:
        """The latest counters (refreshed every 10 ms)."""
        info = self._core.status()
        fields = {name: getattr(info, name) for name in RouterStatus.__dataclass_fields__}
        fields["members"] = tuple(tuple(member) for member in info.members)
        return RouterStatus(**fields)

    def close(self) -> None:
        """Stops the router thread (after logging what is left)."""
        self.flush_log()
        self._log_refusals(force=True)
        self._core.close()

    def __enter__(self) -> SubjectRouter:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
