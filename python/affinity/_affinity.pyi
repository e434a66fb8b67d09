"""Typed stubs of the compiled module ``affinity._affinity`` (checked with ``mypy.stubtest``).

Errors: every exception raised here is a class of :mod:`affinity.exceptions` (all derive from
``AffinityError``); hot-path outcomes of ``offer`` are negative return codes, not exceptions.
An argument of the wrong type raises ``ArgumentTypeError`` (also a ``TypeError``) naming the
argument and the type received (``channel: expected a str, got NoneType``); an integer out of
its range, or a string that is not valid Unicode, ``InvalidArgumentError``.

Records (counters, images, driver events, routing answers, subject deliveries) are read-only
classes declared once in Rust (``rust/src/py/records.rs``, ``record!``); ``tests/test_records.py``
checks that each class here has exactly the attributes of the compiled one.
"""

import os
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Final, Literal, final, overload

from affinity._arrow import ArrowBinaryArray, ArrowRecordBatch, LargeBinaryArray

__version__: str
__all__ = [
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "BOOTSTRAP_RESPONDER_OPTIONS",
    "BUILTIN_POLICIES",
    "CLOSED",
    "CLUSTER_CONNECTION_STATES",
    "CLUSTER_MIRROR_SOURCE_LABEL",
    "CLUSTER_NODE_INFO_SUBJECT_PREFIX",
    "CLUSTER_NODE_INFO_SUBJECT_SUFFIX",
    "CLUSTER_NODE_NAME_PREFIX",
    "CLUSTER_NODE_WATCH_PREFIX",
    "CLUSTER_PTP_LINK_PREFIX",
    "CLUSTER_SOURCE_PREFIX",
    "DEFAULT_CLIENT_TIMEOUT_MS",
    "DEFAULT_COMMAND_TIMEOUT_MS",
    "DEFAULT_DRIVER_TIMEOUT_MS",
    "DEFAULT_GROUP_BOOTSTRAP_TIMEOUT_MS",
    "DEFAULT_GROUP_CYCLE_MS",
    "DEFAULT_GROUP_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_GROUP_LIVENESS_TIMEOUT_MS",
    "DEFAULT_GROUP_RESEND_TIMEOUT_MS",
    "DEFAULT_LINGER_MS",
    "DEFAULT_MTU",
    "DEFAULT_RECEIVER_TIMEOUT_MS",
    "DEFAULT_RECEIVER_WINDOW",
    "DEFAULT_SOCKET_RECEIVE_BUFFER",
    "DEFAULT_TERM_LENGTH_IPC",
    "DEFAULT_TERM_LENGTH_UDP",
    "DRIVER_SETTINGS",
    "DRIVER_USAGE",
    "FORWARD_CLEARED",
    "FORWARD_RESYNC",
    "FORWARD_WARNING",
    "GROUP_CONTROL_STREAM_ID",
    "GROUP_DATA_STREAM_ID",
    "HASH_VERSION",
    "MAX_PATTERN_POSITIONS",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "ROUTER_BACKLOG_BUDGET",
    "ROUTER_MIN_BACKLOG_BUDGET",
    "SELECTIONS",
    "SUBJECT_FLAG_DOMAIN",
    "SUBJECT_FLAG_ERASE",
    "SUBJECT_FLAG_IMAGE",
    "SUBJECT_FLAG_NODATA_NOTFOUND",
    "SUBJECT_FLAG_NODATA_UNAVAILABLE",
    "SUBJECT_FLAG_PUBLISH",
    "SUBJECT_FLAG_REFUSED",
    "SUBJECT_FLAG_STATUS",
    "SUBJECT_FLAG_UPDATE",
    "SUBJECT_KIND_DATA",
    "SUBJECT_KIND_DISCARD",
    "SUBJECT_KIND_REQUEST",
    "SUBJECT_ORIGIN_LENGTH",
    "BootstrapResponderCore",
    "Client",
    "ClusterForwardQueues",
    "ClusterSlaveCache",
    "ConsumerCounters",
    "ConsumerStatus",
    "CounterValueInfo",
    "DriverCounters",
    "DriverErrorInfo",
    "DriverEventInfo",
    "DriverStatInfo",
    "ExplanationInfo",
    "FaucetLogInfo",
    "GroupConsumerCore",
    "GroupMessage",
    "GroupObserverCore",
    "GroupPublisherCore",
    "GroupStatus",
    "Header",
    "ImageInfo",
    "LegInfo",
    "LossyRelay",
    "MemberStatus",
    "PosixRegex",
    "Publication",
    "PublicationCounters",
    "PublisherCounters",
    "PublisherStatus",
    "QueueSendStatus",
    "QueueStatus",
    "ReceiverInfo",
    "RelayStats",
    "RouterStatusInfo",
    "RoutingEventInfo",
    "RoutingTable",
    "SourceStateInfo",
    "SubjectDelivery",
    "SubjectPeerCounters",
    "SubjectRouterCore",
    "SubjectSourceCore",
    "SubjectSubscriberCore",
    "SubscriberEvictedInfo",
    "Subscription",
    "__version__",
    "affinity_hash",
    "check_channel",
    "default_driver_dir",
    "driver_stat",
    "free_udp_port",
    "group_bootstrap",
    "group_bucket",
    "group_queue",
    "group_queues",
    "parse_duration_ns",
    "parse_size",
    "run_driver",
    "select_member",
    "subject_domain",
    "subject_with_domain",
]

#: Every driver setting (``affinity driver --NAME``, ``Client(NAME=...)``), in usage order.
DRIVER_SETTINGS: Final[list[str]]
#: Defaults of the driver and of consumer groups (``affinity.defaults`` documents each); the
#: group and subject cores' ``heartbeat_interval_ms``, ``liveness_timeout_ms``,
#: ``resend_timeout_ms`` and ``cycle_ms`` default to the ``DEFAULT_GROUP_*`` ones.
DEFAULT_CLIENT_TIMEOUT_MS: Final[int]
DEFAULT_COMMAND_TIMEOUT_MS: Final[int]
DEFAULT_DRIVER_TIMEOUT_MS: Final[int]
DEFAULT_GROUP_BOOTSTRAP_TIMEOUT_MS: Final[int]
DEFAULT_GROUP_CYCLE_MS: Final[int]
DEFAULT_GROUP_HEARTBEAT_INTERVAL_MS: Final[int]
DEFAULT_GROUP_LIVENESS_TIMEOUT_MS: Final[int]
DEFAULT_GROUP_RESEND_TIMEOUT_MS: Final[int]
DEFAULT_LINGER_MS: Final[int]
DEFAULT_MTU: Final[int]
DEFAULT_RECEIVER_TIMEOUT_MS: Final[int]
DEFAULT_RECEIVER_WINDOW: Final[int]
DEFAULT_SOCKET_RECEIVE_BUFFER: Final[int]
DEFAULT_TERM_LENGTH_IPC: Final[int]
DEFAULT_TERM_LENGTH_UDP: Final[int]

def parse_size(text: str) -> int:
    """Bytes in ``text`` (``65536``, ``64k``, ``16m``, ``1g``); ``ConfigError`` otherwise."""

def parse_duration_ns(text: str, bare_unit: str | None = None) -> int:
    """Nanoseconds in ``text`` (``500ms``, ``1.5s``, ``2m``); a bare number is in ``bare_unit``
    (``ns``, ``us``, ``ms``, ``s``, ``m``, ``h``), refused without one unless 0; ``ConfigError``
    otherwise."""

#: Usage text of ``affinity driver`` / ``affinity-driver``.
DRIVER_USAGE: Final[str]

def run_driver(argv: Iterable[str], companion: Callable[[str], object] | None = None) -> None:
    """Run the standalone driver in the foreground until SIGINT/SIGTERM (ConfigError: bad option;
    DriverError: cannot start, e.g. a live driver holds the directory). ``companion`` is called
    with the driver's directory once it is ready; what it returns is closed before the driver
    closes; an exception it raises stops the driver (DriverError)."""

def check_channel(channel: str) -> None:
    """Raise ``ChannelUriError`` (naming the key and value) unless ``channel`` is a well-formed
    channel URI the driver carries (an ``aeron:udp`` one asking for spy, control, tags, cc=cubic,
    ... is refused as the driver would); needs no driver (the Spark data source checks its
    options with it)."""

def free_udp_port() -> int:
    """A UDP port outside the ephemeral range no socket held when probed, each once per process
    (``affinity.testing.free_udp_port``); ``AffinityOSError`` (``EADDRINUSE``) when used up."""

def default_driver_dir() -> str:
    """``$AFFINITY_DIR``, else a per-user folder under /dev/shm (or the temp dir)."""

def driver_stat(directory: str | os.PathLike[str]) -> DriverStatInfo:
    """Read-only snapshot of a driver directory (cnc header, counters, error log). ``problem``
    says what is wrong with a corrupt counter or error record and where (None when it is whole);
    ``dead`` why the driver is dead (None while it is alive). DriverError when there is no
    readable cnc file."""

@final
class CounterValueInfo:
    """One allocated counter of the driver's counters file (``DriverStatInfo.counters``)."""

    @property
    def id(self) -> int: ...
    @property
    def type_id(self) -> int: ...
    @property
    def label(self) -> str: ...
    @property
    def value(self) -> int: ...
    @property
    def registration_id(self) -> int: ...
    @property
    def owner_id(self) -> int: ...
    @property
    def problem(self) -> str | None: ...

@final
class DriverErrorInfo:
    """One distinct error of the driver's error log (``DriverStatInfo.errors``); a corrupt record has ``problem`` set
    and the other fields 0 and empty.
    """

    @property
    def count(self) -> int: ...
    @property
    def first_ms(self) -> int: ...
    @property
    def last_ms(self) -> int: ...
    @property
    def message(self) -> str: ...
    @property
    def problem(self) -> str | None: ...

@final
class DriverStatInfo:
    """``driver_stat``: a read-only snapshot of a driver directory (wrapped by ``affinity.driver.DriverStat``)."""

    @property
    def dir(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def start_ms(self) -> int: ...
    @property
    def heartbeat_age_ms(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def counters(self) -> list[CounterValueInfo]: ...
    @property
    def errors(self) -> list[DriverErrorInfo]: ...
    @property
    def dead(self) -> str | None: ...

NOT_CONNECTED: int
BACK_PRESSURED: int
ADMIN_ACTION: int
CLOSED: int
MAX_POSITION_EXCEEDED: int

@final
class Header:
    """Where a message came from."""

    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def term_id(self) -> int: ...
    @property
    def term_offset(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def reserved_value(self) -> int: ...

@final
class Publication:
    """Sends messages on one channel and stream.

    Close it (``close()`` or ``with``) when done: data already offered is still delivered, then
    the stream ends. A publication collected without ``close()`` is closed then, with a
    ``ResourceWarning``.
    """

    def offer(self, data: bytes | bytearray | memoryview) -> int:
        """Append one message; the new position (> 0) or a negative outcome code.

        Raises ``MessageTooLongError`` for a message longer than ``max_message_length``,
        ``ArgumentTypeError`` for an object that is not bytes-like. Releases the GIL.
        """

    def offer_batch(self, messages: Iterable[bytes | bytearray | memoryview] | ArrowBinaryArray) -> int:
        """Append messages (bytes-like objects, or a pyarrow binary/large_binary array) until
        one is refused; how many were taken.

        An Arrow array is checked whole before anything is sent: nulls, or offsets that are
        negative, decreasing or beyond the data buffer, raise ``InvalidArgumentError``.
        Releases the GIL.
        """

    @property
    def is_connected(self) -> bool: ...
    def wait_connected(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds for enough receivers to connect; whether they did.

        Sleeps without the GIL between checks (no busy loop); Ctrl-C interrupts the wait
        (``KeyboardInterrupt``). A closed publication raises ``ClosedError``; a timeout that is
        negative or not finite raises ``ConfigError``.
        """

    @property
    def is_closed(self) -> bool: ...
    @property
    def position(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def channel(self) -> str: ...
    @property
    def max_message_length(self) -> int: ...
    def counters(self) -> PublicationCounters: ...
    def close(self) -> None: ...
    def __enter__(self) -> Publication: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

@final
class Subscription:
    """Receives messages on one channel and stream.

    The subscription lives as long as this object: when it is collected without ``close()`` it
    closes (its images end and nothing more is received) and a ``ResourceWarning`` is issued.
    Keep a reference: ``client.add_subscription(...)`` without keeping the result subscribes to
    nothing.
    """

    def poll(self, handler: Callable[[bytes, Header], object], fragment_limit: int | None = None) -> int:
        """Call ``handler(data, header)`` for each whole message within ``fragment_limit``
        fragments (default 10, at most 16777216); the number of fragments consumed.
        Non-blocking; the GIL is released while the driver's state is read."""

    @overload
    def poll_batch(self, fragment_limit: int | None = None, *, as_arrow: Literal[False] = False) -> list[bytes]: ...
    @overload
    def poll_batch(self, fragment_limit: int | None = None, *, as_arrow: Literal[True]) -> LargeBinaryArray: ...
    @property
    def is_connected(self) -> bool: ...
    def wait_image(self, timeout: float = 5.0) -> bool:
        """Wait up to ``timeout`` seconds until a publication's image is connected (data from
        it can then be polled); whether one is.

        Sleeps without the GIL between checks (no busy loop); Ctrl-C interrupts the wait
        (``KeyboardInterrupt``). A closed subscription raises ``ClosedError``; a timeout that is
        negative or not finite raises ``ConfigError``.
        """

    @property
    def is_closed(self) -> bool: ...
    @property
    def channel(self) -> str: ...
    @property
    def stream_id(self) -> int: ...
    def images(self) -> list[ImageInfo]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Subscription: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

@final
class Client:
    """A connection to a media driver: embedded in this process (the default) or the
    standalone driver process (``affinity driver``) running in a directory.

    Which one: an explicit ``dir=PATH`` attaches to the standalone driver in ``PATH``; without
    ``dir``, a non-empty ``$AFFINITY_DIR`` attaches to the driver there; otherwise the client
    starts an embedded driver. An attached client carries ``aeron:ipc`` and ``aeron:udp``
    channels (a socket the driver cannot open raises ``AffinityOSError`` with its errno), serves
    consumer groups and the subjects router like an embedded one, takes the driver's settings
    (passing an embedded setting with ``dir`` raises ``ConfigError``), and
    raises ``DriverTimeoutError`` on its next call once the driver has been silent for
    ``driver_timeout_ms`` (default 10000; also raised when no driver runs in the directory).
    ``threading`` is then ``"standalone"``; ``counters()`` reads the driver's system counters
    from its counters file, ``events()`` returns the driver events of this client's own
    publications, ``do_work()`` returns 0 (the driver runs its own threads), and
    ``Publication.counters()`` / ``Subscription.images()`` ask the driver for its status record
    (``DriverError`` when the driver has none, as for ``aeron:ipc`` today). Closing an attached
    client keeps its publications' data: the driver delivers it to their subscribers after the
    process exits.

    Embedded: the same media driver run in this process on a private directory under
    ``/dev/shm``; ``threading`` is ``"shared"`` (one driver thread, the default),
    ``"shared-network"`` (conductor + one network thread), ``"dedicated"`` (a thread per agent)
    or ``"invoker"`` (no driver thread: ``do_work()`` and the client's calls run the duty
    cycle); ``idle`` defaults to ``"backoff"``. With a driver thread, a call that finds
    nothing to do (an empty poll, a refused offer) yields the CPU once so a busy loop does not
    starve the driver on a small machine; ``yield_when_idle=False`` turns that off.
    ``conductor_cpu_affinity``, ``sender_cpu_affinity`` and ``receiver_cpu_affinity`` pin a
    driver thread to one CPU (an ``int``, or ``"none"``, the default): ``shared`` takes the
    conductor's, ``shared-network``'s network thread the sender's; one the mode has no thread
    for, or a CPU this process may not run on, raises ``ConfigError``.
    A setting of the wrong type raises ``ArgumentTypeError`` naming it.
    Every driver setting of ``affinity.defaults.DRIVER_SETTINGS`` but ``dir`` (which here
    attaches to a standalone driver) is a keyword of the embedded client, the same names and
    values as ``affinity driver --NAME VALUE``: an ``int`` (bytes, a count, or for a ``*_ms``
    name milliseconds) or a ``str`` in the one grammar of ``affinity.units``
    (``term_length="64k"``, ``receiver_timeout="2s"``); ``None`` keeps the default. A value out
    of range raises ``ConfigError`` with the message ``affinity driver`` prints for it
    (``mtu=33: must be a multiple of 32 between 64 and 65504``): ``term_length`` a power of two
    in [65536, 1073741824]; ``mtu`` a multiple of 32 in [64, 65504]; ``receiver_window`` in
    [mtu, 536870912]; ``socket_receive_buffer`` in [mtu, 2147483647]; ``receiver_timeout_ms``,
    ``client_timeout_ms`` and ``command_timeout_ms`` (default 10000) in [1, 3600000].

    Close it (``close()`` or ``with``): closing stops the driver after publications drained
    (at most ``close(timeout=...)`` seconds, 2 by default, without the GIL); data the drain did
    not send is dropped, and ``close()`` then returns False and warns with ``DataLossWarning``
    giving the count. A client collected without ``close()`` is closed then, with a
    ``ResourceWarning``.
    """

    def __new__(
        cls,
        *,
        dir: str | os.PathLike[str] | None = None,
        driver_timeout_ms: int | None = None,
        yield_when_idle: bool = True,
        threading: Literal["shared", "invoker", "dedicated", "shared-network"] | None = None,
        idle: Literal["backoff", "yield", "busy-spin"] | None = None,
        conductor_cpu_affinity: int | str | None = None,
        sender_cpu_affinity: int | str | None = None,
        receiver_cpu_affinity: int | str | None = None,
        term_length: int | str | None = None,
        mtu: int | str | None = None,
        receiver_window: int | str | None = None,
        socket_receive_buffer: int | str | None = None,
        flow_control: str | None = None,
        receiver_timeout: str | None = None,
        receiver_timeout_ms: int | str | None = None,
        client_timeout: str | None = None,
        client_timeout_ms: int | str | None = None,
        linger: str | None = None,
        linger_ms: int | str | None = None,
        command_timeout: str | None = None,
        command_timeout_ms: int | str | None = None,
        udp_offload: bool | Literal["on", "off"] | None = None,
        max_clients: int | str | None = None,
        publications_per_client: int | str | None = None,
        subscriptions_per_client: int | str | None = None,
        counters_per_client: int | str | None = None,
        commands_per_cycle_per_client: int | str | None = None,
        queued_commands_per_client: int | str | None = None,
    ) -> Client: ...
    def add_publication(self, channel: str, stream_id: int) -> Publication:
        """Create a publication; waits for the driver (at most ``command_timeout_ms``).

        Either it is returned, or an exception is raised and the driver keeps nothing of it
        (``DriverTimeoutError`` on timeout, ``ChannelUriError``, ``AffinityOSError``).
        """

    def add_subscription(self, channel: str, stream_id: int) -> Subscription:
        """Create a subscription; same guarantees as :meth:`add_publication`."""

    def do_work(self) -> int: ...
    def events(self) -> list[DriverEventInfo]: ...
    def counters(self) -> DriverCounters: ...
    def wait_for_data(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for received data: with an embedded threaded driver,
        until its receiver has written datagrams into any subscription's log (poll to see whether
        some are yours); otherwise sleep ``timeout``. What an idle polling thread calls instead of
        sleeping; the GIL is released meanwhile."""

    @property
    def threading(self) -> str: ...
    @property
    def is_closed(self) -> bool: ...
    def close(self, timeout: float | None = None) -> bool:
        """Close every publication and subscription and stop the embedded driver, which first
        sends what its publications hold for at most ``timeout`` seconds (default 2; a finite
        number >= 0, else ``ConfigError``). Returns whether everything was sent; when not, warns
        with ``DataLossWarning`` giving the messages and bytes dropped. With a standalone driver
        (which keeps serving the publications after the client has gone), and once closed:
        ``True``."""

    def __enter__(self) -> Client: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

@final
class LossyRelay:
    """A loss-injecting UDP relay on loopback, for tests."""

    def __new__(
        cls, target: str, *, loss: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0, seed: int = 1
    ) -> LossyRelay: ...
    @property
    def address(self) -> str: ...
    def stats(self) -> RelayStats: ...
    def close(self) -> None: ...

# ---- records (rust/src/py/records.rs) ----------------------------------------------------------

@final
class DriverCounters:
    """``Client.counters()``: the driver-wide counts (``crate::client::ClientCounters``)."""

    @property
    def invalid_data_frames(self) -> int: ...
    @property
    def duplicate_data_frames(self) -> int: ...
    @property
    def overrun_data_frames(self) -> int: ...
    @property
    def inactive_image_frames(self) -> int: ...
    @property
    def setups_refused(self) -> int: ...
    @property
    def images_refused(self) -> int: ...
    @property
    def images_ended_incomplete(self) -> int: ...
    @property
    def invalid_control_frames(self) -> int: ...
    @property
    def send_errors(self) -> int: ...
    @property
    def dropped_events(self) -> int: ...

@final
class ReceiverInfo:
    """One receiver a publication hears from (``PublicationCounters.receivers`` entries)."""

    @property
    def receiver_id(self) -> int: ...
    @property
    def group_tag(self) -> int | None: ...
    @property
    def position(self) -> int: ...
    @property
    def window(self) -> int: ...

@final
class PublicationCounters:
    """``Publication.counters()``: positions, flow control, receivers and traffic counts."""

    @property
    def session_id(self) -> int: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def sender_position(self) -> int: ...
    @property
    def sender_limit(self) -> int: ...
    @property
    def publisher_limit(self) -> int: ...
    @property
    def connected(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def strategy(self) -> str: ...
    @property
    def group_tag(self) -> int | None: ...
    @property
    def group_min_size(self) -> int: ...
    @property
    def receiver_timeout_ms(self) -> int: ...
    @property
    def receivers(self) -> list[ReceiverInfo]: ...
    @property
    def live_receivers(self) -> list[ReceiverInfo]: ...
    @property
    def status_messages(self) -> int: ...
    @property
    def naks_received(self) -> int: ...
    @property
    def naks_ignored(self) -> int: ...
    @property
    def retransmits_sent(self) -> int: ...
    @property
    def retransmitted_bytes(self) -> int: ...
    @property
    def datagrams_sent(self) -> int: ...
    @property
    def bytes_sent(self) -> int: ...
    @property
    def heartbeats_sent(self) -> int: ...
    @property
    def setups_sent(self) -> int: ...
    @property
    def errors_received(self) -> int: ...
    @property
    def invalid_control_frames(self) -> int: ...

@final
class ImageInfo:
    """``Subscription.images()`` entries: one image (one publication session) each."""

    @property
    def session_id(self) -> int: ...
    @property
    def source(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def rebuild_position(self) -> int: ...
    @property
    def hwm_position(self) -> int: ...
    @property
    def active(self) -> bool: ...
    @property
    def datagrams_received(self) -> int: ...
    @property
    def bytes_received(self) -> int: ...
    @property
    def heartbeats_received(self) -> int: ...
    @property
    def duplicates(self) -> int: ...
    @property
    def overruns(self) -> int: ...
    @property
    def malformed(self) -> int: ...
    @property
    def loss_gaps(self) -> int: ...
    @property
    def loss_bytes(self) -> int: ...
    @property
    def unrecoverable_gaps(self) -> int: ...
    @property
    def unrecoverable_bytes(self) -> int: ...
    @property
    def naks_sent(self) -> int: ...
    @property
    def retransmits_received(self) -> int: ...
    @property
    def status_messages_sent(self) -> int: ...

@final
class DriverEventInfo:
    """``Client.events()`` entries: one driver event of this client's publications. The fields after ``kind`` are set
    for the kinds that carry them and ``None`` otherwise.
    """

    @property
    def time(self) -> float: ...
    @property
    def level(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def stream_id(self) -> int: ...
    @property
    def session_id(self) -> int: ...
    @property
    def kind(self) -> Literal["receiver_joined", "receiver_removed", "connection_changed", "receiver_error"]: ...
    @property
    def message(self) -> str: ...
    @property
    def receiver_id(self) -> int | None: ...
    @property
    def group_tag(self) -> int | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def connected(self) -> bool | None: ...
    @property
    def code(self) -> int | None: ...
    @property
    def error(self) -> str | None: ...

@final
class RelayStats:
    """``LossyRelay.stats()``: datagram counts."""

    @property
    def received(self) -> int: ...
    @property
    def dropped(self) -> int: ...
    @property
    def duplicated(self) -> int: ...
    @property
    def reordered(self) -> int: ...

# ---- routing -----------------------------------------------------------------------------------

HASH_VERSION: Final[int]
BUILTIN_POLICIES: Final[tuple[str, ...]]
SELECTIONS: Final[tuple[str, ...]]
MAX_PATTERN_POSITIONS: Final[int]

def affinity_hash(composite: str) -> int: ...
def select_member(composite: str, members: Iterable[str], selection: str = "modulo") -> str: ...

@final
class PosixRegex:
    """A POSIX ERE compiled by glibc (``sed -r`` semantics); ``ConfigError`` if invalid or if
    its repetitions unroll to more than ``MAX_PATTERN_POSITIONS`` positions."""

    def __new__(cls, pattern: str) -> PosixRegex: ...
    @property
    def pattern(self) -> str: ...
    @property
    def group_count(self) -> int: ...
    def capture(self, subject: str) -> str | None: ...
    def is_match(self, subject: str) -> bool: ...

@final
class RoutingTable:
    def __new__(cls) -> RoutingTable: ...
    def add_service(self, name: str, include_patterns: Iterable[str]) -> int: ...
    def add_source_group(
        self,
        service: int,
        name: str,
        priority_groups: Iterable[Iterable[str]],
        rules: Iterable[tuple[str, str]],
        policy: str | object | Callable[[str, list[str]], str],
        selection: str = "modulo",
    ) -> int: ...
    def members(self) -> list[tuple[str, int, bool]]: ...
    def set_member_up(self, label: str, up: bool) -> None: ...
    def subscribe(self, subject: str) -> list[LegInfo]: ...
    def route(self, subject: str) -> list[LegInfo]: ...
    def route_members(self, subjects: Iterable[str]) -> list[str | None]: ...
    def subscribe_members(self, subjects: Iterable[str]) -> list[str | None]: ...
    def unsubscribe(self, subject: str) -> None: ...
    def report_nodata(self, subject: str, status: str) -> LegInfo: ...
    def explain(self, subject: str) -> ExplanationInfo: ...
    def reset(self) -> None: ...
    def drain_events(self) -> list[RoutingEventInfo]: ...
    def drain_events_tail(self, keep: int, kinds: Iterable[str]) -> list[RoutingEventInfo]: ...
    def affinity(self, composite: str) -> str | None: ...

@final
class LegInfo:
    """One source group's answer for a subject (``RoutingTable.subscribe`` / ``route`` / ``report_nodata``)."""

    @property
    def service(self) -> str: ...
    @property
    def source_group(self) -> str: ...
    @property
    def member(self) -> str | None: ...
    @property
    def peer_index(self) -> int | None: ...
    @property
    def priority_group(self) -> int | None: ...
    @property
    def composite(self) -> str | None: ...
    @property
    def rule_index(self) -> int | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def since(self) -> int | None: ...

@final
class ExplanationInfo:
    """``RoutingTable.explain``: the primary leg (the fields of ``LegInfo``) and why."""

    @property
    def service(self) -> str: ...
    @property
    def source_group(self) -> str: ...
    @property
    def member(self) -> str | None: ...
    @property
    def peer_index(self) -> int | None: ...
    @property
    def priority_group(self) -> int | None: ...
    @property
    def composite(self) -> str | None: ...
    @property
    def rule_index(self) -> int | None: ...
    @property
    def reason(self) -> str: ...
    @property
    def since(self) -> int | None: ...
    @property
    def affinity_key(self) -> str | None: ...
    @property
    def pattern(self) -> str | None: ...
    @property
    def policy(self) -> str: ...
    @property
    def selection(self) -> str: ...
    @property
    def bound_reason(self) -> str | None: ...
    @property
    def subscribed(self) -> bool: ...
    @property
    def references(self) -> int: ...
    @property
    def moved_from(self) -> str | None: ...
    @property
    def move_reason(self) -> str | None: ...

@final
class RoutingEventInfo:
    """One thing the routing tables did (``RoutingTable.drain_events``, and the routing entries of
    ``SubjectRouterCore.drain_log``).
    """

    @property
    def sequence(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def subject(self) -> str | None: ...
    @property
    def composite(self) -> str | None: ...
    @property
    def member(self) -> str | None: ...
    @property
    def peer_index(self) -> int | None: ...
    @property
    def previous(self) -> str | None: ...
    @property
    def previous_peer_index(self) -> int | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def move_reason(self) -> str | None: ...
    @property
    def message(self) -> str | None: ...

# ---- groups (rust/src/py/groups.rs) ------------------------------------------------------------

GROUP_CONTROL_STREAM_ID: Final[int]
GROUP_DATA_STREAM_ID: Final[int]
#: The bootstrap responder's options of ``affinity driver`` and ``affinity router``: (name, value, help).
BOOTSTRAP_RESPONDER_OPTIONS: Final[list[tuple[str, str, str]]]

def group_bucket(key: bytes | str, hash_count: int) -> int: ...
def group_queue(key: bytes | str, hash_count: int, queue_count: int) -> int: ...
def group_queues(keys: Iterable[bytes | str] | ArrowBinaryArray, hash_count: int, queue_count: int) -> list[int]: ...
def group_bootstrap(
    client: Client,
    group: str,
    bootstrap: str,
    *,
    host: str = "127.0.0.1",
    secret: bytes | None = None,
    timeout_ms: int = ...,
    held: tuple[str, str, int, int, int] | None = None,
) -> tuple[str, str, int, int, int] | None: ...

@final
class GroupMessage:
    """A message of a group, as delivered by ``GroupConsumerCore.poll``."""

    @property
    def key(self) -> bytes: ...
    @property
    def payload(self) -> bytes: ...
    @property
    def queue(self) -> int: ...
    @property
    def bucket(self) -> int: ...
    @property
    def producer(self) -> int: ...
    @property
    def sequence(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def subject(self) -> str | None: ...

@final
class QueueSendStatus:
    @property
    def queue(self) -> int: ...
    @property
    def owner_id(self) -> int: ...
    @property
    def owner_name(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def sent_sequence(self) -> int: ...
    @property
    def acked_sequence(self) -> int: ...
    @property
    def retained_bytes(self) -> int: ...
    @property
    def retained_messages(self) -> int: ...

@final
class PublisherStatus:
    @property
    def producer_id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def queues(self) -> list[QueueSendStatus]: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def auth_refused(self) -> int: ...

@final
class ConsumerStatus:
    @property
    def member_id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def owned(self) -> list[int]: ...
    @property
    def delivered(self) -> int: ...
    @property
    def duplicates_dropped(self) -> int: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def auth_refused(self) -> int: ...

@final
class MemberStatus:
    @property
    def member_id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def last_heard_ms(self) -> int: ...

@final
class QueueStatus:
    @property
    def queue(self) -> int: ...
    @property
    def owner_id(self) -> int: ...
    @property
    def owner_name(self) -> str: ...
    @property
    def epoch(self) -> int: ...
    @property
    def state(self) -> str: ...
    @property
    def acked_sequence(self) -> int: ...
    @property
    def sent_sequence(self) -> int: ...
    @property
    def retained_bytes(self) -> int: ...
    @property
    def lag(self) -> int: ...

@final
class GroupStatus:
    @property
    def members(self) -> list[MemberStatus]: ...
    @property
    def queues(self) -> list[QueueStatus]: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def auth_refused(self) -> int: ...

@final
class PublisherCounters:
    """What a publisher ignored or repeated."""

    @property
    def acks_bad_queue(self) -> int: ...
    @property
    def acks_beyond_sent(self) -> int: ...
    @property
    def acks_misaddressed(self) -> int: ...
    @property
    def acks_not_owner(self) -> int: ...
    @property
    def epochs_refused(self) -> int: ...
    @property
    def claims_bad_queue(self) -> int: ...
    @property
    def records_resent(self) -> int: ...
    @property
    def owner_changes(self) -> int: ...
    @property
    def control_malformed(self) -> int: ...
    @property
    def foreign_group(self) -> int: ...
    @property
    def files_invalid(self) -> int: ...
    @property
    def files_removed(self) -> int: ...
    @property
    def peer_errors(self) -> int: ...
    @property
    def control_send_refused(self) -> int: ...
    @property
    def auth_unauthenticated(self) -> int: ...
    @property
    def auth_bad_tag(self) -> int: ...
    @property
    def auth_replayed(self) -> int: ...
    @property
    def auth_unverifiable(self) -> int: ...

@final
class ConsumerCounters:
    """What a consumer dropped or ignored."""

    @property
    def delivered(self) -> int: ...
    @property
    def duplicates_dropped(self) -> int: ...
    @property
    def not_owned_dropped(self) -> int: ...
    @property
    def data_malformed(self) -> int: ...
    @property
    def bad_queue(self) -> int: ...
    @property
    def bad_floor(self) -> int: ...
    @property
    def gaps(self) -> int: ...
    @property
    def stale_acks(self) -> int: ...
    @property
    def ownership_lost(self) -> int: ...
    @property
    def claims(self) -> int: ...
    @property
    def releases(self) -> int: ...
    @property
    def epochs_refused(self) -> int: ...
    @property
    def control_malformed(self) -> int: ...
    @property
    def foreign_group(self) -> int: ...
    @property
    def files_invalid(self) -> int: ...
    @property
    def files_removed(self) -> int: ...
    @property
    def peer_errors(self) -> int: ...
    @property
    def control_send_refused(self) -> int: ...
    @property
    def auth_unauthenticated(self) -> int: ...
    @property
    def auth_bad_tag(self) -> int: ...
    @property
    def auth_replayed(self) -> int: ...
    @property
    def auth_unverifiable(self) -> int: ...

@final
class GroupPublisherCore:
    """Publishes keyed records to a group."""

    def __new__(
        cls,
        client: Client,
        group: str,
        hash_prefix: str,
        hash_count: int,
        queue_count: int,
        queue_size: int,
        *,
        registry_dir: str,
        name: str | None = None,
        host: str = "127.0.0.1",
        control: str | None = None,
        secret: bytes | None = None,
        liveness_timeout_ms: int = ...,
        heartbeat_interval_ms: int = ...,
        resend_timeout_ms: int = ...,
        listen: str | None = None,
        bootstrap: str | None = None,
        bootstrap_timeout_ms: int = ...,
    ) -> GroupPublisherCore: ...
    @property
    def producer_id(self) -> int: ...
    def publish(self, key: bytes | str, payload: bytes, subject: str | None = None) -> int: ...
    def publish_batch(
        self, keys: Iterable[bytes | str] | ArrowBinaryArray, payloads: Iterable[bytes] | ArrowBinaryArray
    ) -> int: ...
    def publish_to_queue(self, queue: int, payload: bytes, key: bytes | str | None = None) -> int: ...
    def flush(self, timeout: float = 5.0) -> bool: ...
    def status(self) -> PublisherStatus: ...
    def counters(self) -> PublisherCounters: ...
    def close(self) -> None: ...
    def __enter__(self) -> GroupPublisherCore: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

@final
class GroupConsumerCore:
    """Consumes the queues this member owns."""

    def __new__(
        cls,
        client: Client,
        group: str,
        hash_prefix: str,
        hash_count: int,
        queue_count: int,
        queue_size: int,
        index: int,
        count: int,
        *,
        registry_dir: str,
        auto_ack: bool = False,
        name: str | None = None,
        host: str = "127.0.0.1",
        control: str | None = None,
        secret: bytes | None = None,
        cycle_ms: int = ...,
        liveness_timeout_ms: int = ...,
        heartbeat_interval_ms: int = ...,
        listen: str | None = None,
        bootstrap: str | None = None,
        bootstrap_timeout_ms: int = ...,
    ) -> GroupConsumerCore: ...
    @property
    def member_id(self) -> int: ...
    def poll(self, max_messages: int = 1000, timeout: float = 0.0) -> list[GroupMessage]: ...
    def poll_batch(self, max_messages: int = 1000, timeout: float = 0.0) -> ArrowRecordBatch: ...
    def ack(self, message: GroupMessage) -> None: ...
    def ack_record(self, queue: int, producer: int, sequence: int, epoch: int) -> None: ...
    def owned_queues(self) -> list[int]: ...
    def status(self) -> ConsumerStatus: ...
    def counters(self) -> ConsumerCounters: ...
    def close(self, timeout: float = 5.0) -> None: ...
    def __enter__(self) -> GroupConsumerCore: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

@final
class GroupObserverCore:
    """Watches a group's control plane; owns nothing."""

    def __new__(
        cls,
        client: Client,
        group: str,
        hash_prefix: str,
        hash_count: int,
        queue_count: int,
        queue_size: int,
        *,
        registry_dir: str,
        host: str = "127.0.0.1",
        control: str | None = None,
        secret: bytes | None = None,
        liveness_timeout_ms: int = ...,
        heartbeat_interval_ms: int = ...,
        listen: str | None = None,
        bootstrap: str | None = None,
        bootstrap_timeout_ms: int = ...,
    ) -> GroupObserverCore: ...
    def status(self) -> GroupStatus: ...
    def close(self) -> None: ...
    def __enter__(self) -> GroupObserverCore: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

@final
class BootstrapResponderCore:
    """Answers BOOTSTRAP for the groups of a registry; no member of them."""

    def __new__(cls, client: Client, listen: str | None, registry: str | None = None) -> BootstrapResponderCore: ...
    @property
    def endpoint(self) -> str: ...
    def counters(self) -> dict[str, int]: ...
    def close(self) -> None: ...

# ---- end groups --------------------------------------------------------------------------------

# ---- subjects ----------------------------------------------------------------------------------

SUBJECT_FLAG_IMAGE: Final[int]
SUBJECT_FLAG_UPDATE: Final[int]
SUBJECT_FLAG_NODATA_UNAVAILABLE: Final[int]
SUBJECT_FLAG_NODATA_NOTFOUND: Final[int]
SUBJECT_FLAG_STATUS: Final[int]
SUBJECT_FLAG_REFUSED: Final[int]
#: DATA flag: a publish of a subject not requested from its source (xmlBlaster's publish).
SUBJECT_FLAG_PUBLISH: Final[int]
#: DATA flag: the subject is erased.
SUBJECT_FLAG_ERASE: Final[int]
#: DATA flag, with PUBLISH: the payload starts with the publish's message domain.
SUBJECT_FLAG_DOMAIN: Final[int]

def subject_with_domain(domain: str, payload: bytes) -> bytes: ...
def subject_domain(payload: bytes) -> tuple[str, bytes] | None: ...

#: Bytes of the origin source id before a publish's payload between a router and its cluster node.
SUBJECT_ORIGIN_LENGTH: Final[int]
#: A source's forward status while its publishes are queued at a slave.
FORWARD_WARNING: Final[str]
#: A source's forward status once its queued publishes were flushed.
FORWARD_CLEARED: Final[str]
#: A source's forward status for one subject asking for a fresh image (a mirror missed it).
FORWARD_RESYNC: Final[str]
#: The source label prefix of a cluster node's sources at its own router (``cluster.<DOMAIN>``).
CLUSTER_SOURCE_PREFIX: Final[str]
#: The label of a master's source its router hands local publishes to, for the other masters.
CLUSTER_MIRROR_SOURCE_LABEL: Final[str]
#: The subscriber name prefix a cluster node uses at another node (``node:<id>``).
CLUSTER_NODE_NAME_PREFIX: Final[str]
CLUSTER_NODE_WATCH_PREFIX: Final[str]
CLUSTER_PTP_LINK_PREFIX: Final[str]
#: A node's info subject is this prefix, the node id and the suffix (``__sys__cluster.node.info[heron]``).
CLUSTER_NODE_INFO_SUBJECT_PREFIX: Final[str]
#: The end of a node info subject (after the node id).
CLUSTER_NODE_INFO_SUBJECT_SUFFIX: Final[str]
#: A cluster node's connection states to another node: ``logged-in``, ``polling``, ``not-allowed``.
CLUSTER_CONNECTION_STATES: Final[list[str]]
ROUTER_BACKLOG_BUDGET: Final[int]
ROUTER_MIN_BACKLOG_BUDGET: Final[int]
SUBJECT_KIND_REQUEST: Final[int]
SUBJECT_KIND_DISCARD: Final[int]
SUBJECT_KIND_DATA: Final[int]

@final
class RouterStatusInfo:
    """A router's counters (hostile input is counted and ignored) and its members (``SubjectRouterCore.status``)."""

    @property
    def malformed(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def stale_data(self) -> int: ...
    @property
    def unknown_unsubscribes(self) -> int: ...
    @property
    def no_service(self) -> int: ...
    @property
    def foreign(self) -> int: ...
    @property
    def log_dropped(self) -> int: ...
    @property
    def relayed(self) -> int: ...
    @property
    def routed(self) -> int: ...
    @property
    def refused_subscribes(self) -> int: ...
    @property
    def duplicate_subscribes(self) -> int: ...
    @property
    def evicted_subscribers(self) -> int: ...
    @property
    def not_allowed(self) -> int: ...
    @property
    def control_malformed(self) -> int: ...
    @property
    def unroutable(self) -> int: ...
    @property
    def dropped_records(self) -> int: ...
    @property
    def messages_sent(self) -> int: ...
    @property
    def backlog_bytes(self) -> int: ...
    @property
    def auth_unauthenticated(self) -> int: ...
    @property
    def auth_unverifiable(self) -> int: ...
    @property
    def auth_bad_tag(self) -> int: ...
    @property
    def auth_replayed(self) -> int: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def subjects(self) -> int: ...
    @property
    def subscribers(self) -> int: ...
    @property
    def affinities(self) -> int: ...
    @property
    def members(self) -> list[tuple[str, bool]]: ...

@final
class FaucetLogInfo:
    """A ``SubjectRouterCore.drain_log`` entry: a faucet announcement (also published on the control topic as
    ``json``).
    """

    @property
    def action(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def client_name(self) -> str | None: ...
    @property
    def connection_name(self) -> str | None: ...
    @property
    def subscriber_client_name(self) -> str | None: ...
    @property
    def subscriber_connection_name(self) -> str | None: ...
    @property
    def json(self) -> str: ...

@final
class SubscriberEvictedInfo:
    """A ``SubjectRouterCore.drain_log`` entry: a subscriber dropped because the router's backlogs reached their budget
    and its backlog was the largest.
    """

    @property
    def name(self) -> str: ...
    @property
    def connection_name(self) -> str: ...
    @property
    def backlog_bytes(self) -> int: ...

@final
class SourceStateInfo:
    """A ``SubjectRouterCore.drain_log`` entry: a source joined (``up``), was lost or left, or was
    not let in (``refused``)."""

    @property
    def label(self) -> str: ...
    @property
    def connection_name(self) -> str: ...
    @property
    def up(self) -> bool: ...
    @property
    def refused(self) -> str | None: ...

@final
class SubjectDelivery:
    """A record a subscriber or source received (``poll``)."""

    @property
    def kind(self) -> int: ...
    @property
    def flags(self) -> int: ...
    @property
    def subject(self) -> str: ...
    @property
    def payload(self) -> bytes: ...

@final
class SubjectPeerCounters:
    """A subscriber's or source's counters (``counters()``)."""

    @property
    def malformed(self) -> int: ...
    @property
    def received(self) -> int: ...
    @property
    def dropped_records(self) -> int: ...
    @property
    def router_switches(self) -> int: ...
    @property
    def auth_unauthenticated(self) -> int: ...
    @property
    def auth_unverifiable(self) -> int: ...
    @property
    def auth_bad_tag(self) -> int: ...
    @property
    def auth_replayed(self) -> int: ...

@final
class SubjectRouterCore:
    def __new__(
        cls,
        client: Client,
        table: RoutingTable,
        listen: str,
        *,
        faucet: tuple[str, str, str, str | None] | None = None,
        control: str | None = None,
        liveness_timeout_ms: int = ...,
        heartbeat_interval_ms: int = ...,
        backlog_budget: int = ...,
        secret: bytes | None = None,
        forward: str | None = None,
        cluster_nodes: list[str] | None = None,
    ) -> SubjectRouterCore: ...
    @property
    def id(self) -> int: ...
    def set_cluster_nodes(self, nodes: list[str]) -> None: ...
    def drain_log(self) -> list[RoutingEventInfo | FaucetLogInfo | SubscriberEvictedInfo | SourceStateInfo]: ...
    def status(self) -> RouterStatusInfo: ...
    def close(self) -> None: ...

@final
class SubjectSubscriberCore:
    def __new__(
        cls,
        client: Client,
        routers: list[str],
        *,
        name: str,
        host: str = "127.0.0.1",
        heartbeat_interval_ms: int = ...,
        liveness_timeout_ms: int = ...,
        secret: bytes | None = None,
    ) -> SubjectSubscriberCore: ...
    @property
    def id(self) -> int: ...
    def subscribe(self, subject: str) -> bool: ...
    def unsubscribe(self, subject: str) -> None: ...
    def poll(self, limit: int) -> list[SubjectDelivery]: ...
    def counters(self) -> SubjectPeerCounters: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def router(self) -> str: ...
    def close(self) -> None: ...

@final
class ClusterForwardQueues:
    def __new__(cls, bound: int) -> ClusterForwardQueues: ...
    def publish(
        self,
        master: str | None,
        domain: str,
        origin: int,
        subject: str,
        flags: int,
        payload: bytes,
        reachable: bool,
        send: Callable[[str, int, bytes], bool] | None = None,
    ) -> str: ...
    def publish_all(
        self,
        targets: list[tuple[str, bool, Callable[[str, int, bytes], bool]]],
        origin: int,
        subject: str,
        flags: int,
        payload: bytes,
        taken_here: bool | None = None,
    ) -> list[str]: ...
    def flush(self, master: str, send: Callable[[str, int, bytes], bool]) -> int: ...
    def notices(self) -> list[tuple[int, str]]: ...
    def queued(self, master: str) -> tuple[int, int]: ...
    def queued_without_master(self, domain: str) -> tuple[int, int]: ...
    def counters(self) -> dict[str, int]: ...
    def counters_for(self, master: str) -> dict[str, int]: ...
    def is_stale(self, master: str) -> bool: ...
    def events(self) -> list[tuple[str, str, int, list[tuple[int, str]], int]]: ...
    def assign(self, domain: str, masters: list[str]) -> int: ...

@final
class ClusterSlaveCache:
    def __new__(cls, expiry: float) -> ClusterSlaveCache: ...
    def subscribe(
        self, subject: str, parent: str, stratum: int
    ) -> tuple[str, str] | tuple[str, int, bytes] | tuple[str] | None: ...
    def on_data(self, parent: str, subject: str, flags: int, payload: bytes) -> bool: ...
    def unsubscribe(self, subject: str) -> None: ...
    def expire(self) -> list[tuple[str, str]]: ...
    def forget(self, subject: str) -> str | None: ...
    def parent(self, subject: str) -> str | None: ...
    def sizes(self) -> tuple[int, int]: ...

@final
class SubjectSourceCore:
    def __new__(
        cls,
        client: Client,
        routers: list[str],
        *,
        label: str,
        host: str = "127.0.0.1",
        heartbeat_interval_ms: int = ...,
        liveness_timeout_ms: int = ...,
        secret: bytes | None = None,
    ) -> SubjectSourceCore: ...
    @property
    def id(self) -> int: ...
    def enlist(self, control_topic: str, coverage: str | None = None) -> None: ...
    def delist(self, control_topic: str) -> None: ...
    def publish(self, subject: str, payload: bytes, image: bool = False) -> None: ...
    def send_data(self, subject: str, flags: int, payload: bytes) -> bool: ...
    @property
    def router_live(self) -> bool: ...
    def nodata(self, subject: str, status: str) -> None: ...
    def poll(self, limit: int) -> list[SubjectDelivery]: ...
    def counters(self) -> SubjectPeerCounters: ...
    @property
    def authenticated(self) -> bool: ...
    @property
    def endpoint(self) -> str: ...
    @property
    def router(self) -> str: ...
    def close(self) -> None: ...

# ---- end subjects ------------------------------------------------------------------------------
