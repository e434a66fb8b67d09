"""``GroupPublisher``, ``GroupConsumer`` and ``GroupObserver``: the registry in front of the Rust cores.

Each reads its group's definition by name from the registry (or, given ``bootstrap=`` and no
registry entry, from the first member listed there that answers), checks what depends on the
definition (a consumer's ``count`` against the queue count) and hands everything to the core,
which runs the control plane (heartbeats, claims, epochs) and the data path. Times are given in
seconds here and passed to the cores in milliseconds; options left at ``None`` take the core's
defaults (liveness timeout 2 s, heartbeats every 100 ms, cycle 30 s, resend after 1 s).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from affinity._affinity import (
    Client,
    ConsumerCounters,
    ConsumerStatus,
    GroupConsumerCore,
    GroupMessage,
    GroupObserverCore,
    GroupPublisherCore,
    GroupStatus,
    PublisherCounters,
    PublisherStatus,
    group_bootstrap,
)
from affinity._arguments import expect_int, expect_str, milliseconds
from affinity._arrow import ArrowBinaryArray, ArrowRecordBatch
from affinity.defaults import GROUP_BOOTSTRAP_TIMEOUT_MS, GROUP_LIVENESS_TIMEOUT_MS
from affinity.exceptions import ConfigError
from affinity.groups.registry import GroupDefinition, group_file, load_group, registry_dir
from affinity.groups.secret import resolve_secret

__all__ = ["GroupConsumer", "GroupObserver", "GroupPublisher", "learn_definition"]

#: A registry location as the functions of :mod:`affinity.groups.registry` accept it.
Registry = str | os.PathLike[str] | None
#: A group secret as members accept it: its bytes, a path to a secret file, or ``None`` (look it up:
#: ``$AFFINITY_GROUP_SECRET``, ``$AFFINITY_GROUP_SECRET_FILE``, the registry; see :mod:`affinity.groups.secret`).
Secret = bytes | os.PathLike[str] | None


#: Seconds a member given ``bootstrap=`` waits for the first answer (``bootstrap_timeout=``).
DEFAULT_BOOTSTRAP_TIMEOUT = GROUP_BOOTSTRAP_TIMEOUT_MS / 1000


def _definition(
    client: Client,
    group: str,
    registry: Registry,
    bootstrap: str | None,
    host: str | None,
    secret: Secret,
    timeout: float | None,
) -> tuple[GroupDefinition, bytes | None, str]:
    """The group's definition and secret: from the registry, or (``bootstrap`` given and no registry
    entry) from the first member listed in ``bootstrap`` that answers."""
    name = expect_str("group", group)
    key, source = resolve_secret(name, registry, secret)
    if bootstrap is None or group_file(name, registry).is_file():
        return load_group(name, registry), key, source
    seconds = DEFAULT_BOOTSTRAP_TIMEOUT if timeout is None else timeout
    learned = group_bootstrap(
        client,
        name,
        expect_str("bootstrap", bootstrap),
        host="127.0.0.1" if host is None else expect_str("host", host),
        secret=key,
        timeout_ms=milliseconds("bootstrap_timeout", seconds),
    )
    assert learned is not None, "group_bootstrap answers None only to a caller holding a definition"
    return GroupDefinition(*learned), key, source


def _common_options(
    registry: Registry,
    name: str | None,
    host: str | None,
    control: str | None,
    timings: dict[str, float | None],
    secret: bytes | None = None,
    listen: str | None = None,
    bootstrap: str | None = None,
) -> dict[str, Any]:
    options: dict[str, Any] = {"registry_dir": str(registry_dir(registry)), "secret": secret}
    for key, value in (
        ("name", name),
        ("host", host),
        ("control", control),
        ("listen", listen),
        ("bootstrap", bootstrap),
    ):
        if value is not None:
            options[key] = value
    for option, seconds in timings.items():
        if seconds is not None:
            options[f"{option}_ms"] = milliseconds(option, seconds)
    return options


def learn_definition(
    client: Client,
    group: str,
    *,
    bootstrap: str | None = None,
    registry: Registry = None,
    host: str | None = None,
    secret: Secret = None,
    bootstrap_timeout: float | None = None,
) -> GroupDefinition:
    """The definition a member of ``group`` would use: the registry's, or (``bootstrap`` given and
    no registry entry) the first answer of a member listed in ``bootstrap`` — without joining the
    group. Raises what a member's constructor raises (``ConfigError`` naming the addresses asked,
    or both fingerprints when an answer holds another definition).

    With both a registry entry and ``bootstrap``, the listed members are asked as a member's
    constructor asks them (for at most the liveness timeout, 2 s, or ``bootstrap_timeout`` if
    shorter): an answer holding another definition than the registry's is refused at once, naming
    both fingerprints; no answer leaves the registry's (this member would be the first)."""
    definition, key, _source = _definition(client, group, registry, bootstrap, host, secret, bootstrap_timeout)
    if bootstrap is not None and group_file(definition.name, registry).is_file():
        seconds = DEFAULT_BOOTSTRAP_TIMEOUT if bootstrap_timeout is None else bootstrap_timeout
        group_bootstrap(
            client,
            definition.name,
            expect_str("bootstrap", bootstrap),
            host="127.0.0.1" if host is None else expect_str("host", host),
            secret=key,
            timeout_ms=min(milliseconds("bootstrap_timeout", seconds), GROUP_LIVENESS_TIMEOUT_MS),
            held=(
                definition.name,
                definition.hash_prefix,
                definition.hash_count,
                definition.queue_count,
                definition.queue_size,
            ),
        )
    return definition


class GroupPublisher:
    """Publishes keyed messages to a consumer group: ``key`` → bucket → queue → the queue's owner.

    Every message is retained until the queue's owner acknowledges it (at most the group's queue
    size per queue); ``publish`` returns the message's sequence number (> 0) or
    ``affinity.NOT_CONNECTED`` (no live consumer), ``affinity.BACK_PRESSURED`` (retention full)
    or ``affinity.CLOSED``. Nothing is dropped: a message refused is not sent.

    ``secret``: the group secret (bytes, or a path to a secret file); ``None`` looks it up
    (``$AFFINITY_GROUP_SECRET``, ``$AFFINITY_GROUP_SECRET_FILE``, the registry's ``<name>.secret``,
    :mod:`affinity.groups.secret`). With a secret every message is authenticated; without one the
    member is unauthenticated (``status().authenticated``). Every member of a group must agree.

    Across hosts without a shared registry: ``listen="host:port"`` puts this member's inbox at a
    fixed address (else a port the OS picks on ``host``), ``host`` is the address it advertises,
    and ``bootstrap="host:port,..."`` lists members to ask for the group's definition (when the
    registry has none) and its members; a member holding another definition is refused, naming
    both fingerprints, and none answering within ``bootstrap_timeout`` seconds is an error naming
    the addresses (the same arguments on every member class).
    """

    def __init__(
        self,
        client: Client,
        group: str,
        *,
        registry: Registry = None,
        name: str | None = None,
        host: str | None = None,
        control: str | None = None,
        secret: Secret = None,
        liveness_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        resend_timeout: float | None = None,
        listen: str | None = None,
        bootstrap: str | None = None,
        bootstrap_timeout: float | None = None,
    ) -> None:
        definition, key, source = _definition(client, group, registry, bootstrap, host, secret, bootstrap_timeout)
        #: The group's definition as read from the registry (or learned through ``bootstrap``).
        self.definition: GroupDefinition = definition
        #: Where the group secret came from (``"argument"``, ``"$AFFINITY_GROUP_SECRET"``,
        #: ``"file <path>"``), or ``"none"``: the member is unauthenticated.
        self.secret_source: str = source
        options = _common_options(
            registry,
            name,
            host,
            control,
            {
                "liveness_timeout": liveness_timeout,
                "heartbeat_interval": heartbeat_interval,
                "resend_timeout": resend_timeout,
                "bootstrap_timeout": bootstrap_timeout,
            },
            key,
            listen,
            bootstrap,
        )
        self._core = GroupPublisherCore(
            client,
            definition.name,
            definition.hash_prefix,
            definition.hash_count,
            definition.queue_count,
            definition.queue_size,
            **options,
        )

    @property
    def producer_id(self) -> int:
        """This publisher's producer id (consumers keep sequence numbers per producer and queue)."""
        return self._core.producer_id

    def publish(self, key: bytes | str, payload: bytes, subject: str | None = None) -> int:
        """Sends one message; ``subject`` (``topic``) travels as ``HP/bucket/topic``."""
        return self._core.publish(key, payload, subject)

    def publish_batch(
        self, keys: Iterable[bytes | str] | ArrowBinaryArray, payloads: Iterable[bytes] | ArrowBinaryArray
    ) -> int:
        """Sends messages in order (lists or pyarrow arrays); returns how many were taken."""
        return self._core.publish_batch(keys, payloads)

    def publish_to_queue(self, queue: int, payload: bytes, key: bytes | str | None = None) -> int:
        """Sends one message to one queue, whatever its key hashes to (same return codes)."""
        return self._core.publish_to_queue(queue, payload, key)

    def flush(self, timeout: float = 5.0) -> bool:
        """Waits up to ``timeout`` seconds; True once everything published is acknowledged."""
        return self._core.flush(timeout)

    def status(self) -> PublisherStatus:
        """Per queue: owner, epoch, sent and acknowledged sequence numbers, retained bytes."""
        return self._core.status()

    def counters(self) -> PublisherCounters:
        """What this publisher ignored or repeated (malformed control messages, resends, ...)."""
        return self._core.counters()

    def close(self) -> None:
        """Leaves the group (unacknowledged messages are not sent any more)."""
        self._core.close()

    def __enter__(self) -> GroupPublisher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class GroupConsumer:
    """Consumer ``index`` of ``count`` in a group: primary of queues ``q`` with ``q % count == index``.

    It serves its primary queues, takes over queues whose owner is gone (after the liveness
    timeout, from the last acknowledged position) and, every ``cycle`` seconds, hands the queues
    it holds for an absent primary back once that primary is live (drain, acknowledge, then the
    primary starts: no duplicate, no reordering). Messages arrive in order per key, once.
    """

    def __init__(
        self,
        client: Client,
        group: str,
        index: int,
        count: int,
        auto_ack: bool = False,
        *,
        registry: Registry = None,
        name: str | None = None,
        host: str | None = None,
        control: str | None = None,
        secret: Secret = None,
        cycle: float | None = None,
        liveness_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        listen: str | None = None,
        bootstrap: str | None = None,
        bootstrap_timeout: float | None = None,
    ) -> None:
        definition, key, source = _definition(client, group, registry, bootstrap, host, secret, bootstrap_timeout)
        #: The group's definition as read from the registry (or learned through ``bootstrap``).
        self.definition: GroupDefinition = definition
        #: Where the group secret came from (``"argument"``, ``"$AFFINITY_GROUP_SECRET"``,
        #: ``"file <path>"``), or ``"none"``: the member is unauthenticated.
        self.secret_source: str = source
        expect_int("index", index)
        expect_int("count", count)
        if not 1 <= count <= definition.queue_count:
            raise ConfigError(
                f"consumer count {count} is out of range for group {definition.name!r}: expected 1 to its "
                f"queue count (QC) {definition.queue_count} (a consumer beyond QC would never own a queue)"
            )
        if not 0 <= index < count:
            raise ConfigError(f"consumer index {index} is out of range: expected 0 to count - 1 = {count - 1}")
        options = _common_options(
            registry,
            name,
            host,
            control,
            {
                "cycle": cycle,
                "liveness_timeout": liveness_timeout,
                "heartbeat_interval": heartbeat_interval,
                "bootstrap_timeout": bootstrap_timeout,
            },
            key,
            listen,
            bootstrap,
        )
        self._core = GroupConsumerCore(
            client,
            definition.name,
            definition.hash_prefix,
            definition.hash_count,
            definition.queue_count,
            definition.queue_size,
            index,
            count,
            auto_ack=auto_ack,
            **options,
        )

    @property
    def member_id(self) -> int:
        """This consumer's member id in the control plane."""
        return self._core.member_id

    def poll(self, max_messages: int = 1000, timeout: float = 0.0) -> list[GroupMessage]:
        """Up to ``max_messages`` messages of the queues this consumer owns, waiting up to ``timeout`` s."""
        return self._core.poll(max_messages, timeout)

    def poll_batch(self, max_messages: int = 1000, timeout: float = 0.0) -> ArrowRecordBatch:
        """The messages ``poll`` would return, as one ``pyarrow.RecordBatch`` (needs pyarrow): columns
        ``key``, ``payload`` (``large_binary``), ``queue``, ``bucket`` (``uint32``), ``producer``,
        ``sequence``, ``epoch`` (``uint64``), ``subject`` (``large_string``, null without one).
        No Python object per message; acknowledge a row with :meth:`ack_record` (or ``auto_ack``)."""
        return self._core.poll_batch(max_messages, timeout)

    def ack(self, message: GroupMessage) -> None:
        """Acknowledges ``message`` and everything delivered before it from its producer and queue."""
        self._core.ack(message)

    def ack_record(self, queue: int, producer: int, sequence: int, epoch: int) -> None:
        """Acknowledges the message (``queue``, ``producer``, ``sequence``) received in ``epoch`` (a row of
        :meth:`poll_batch`) and everything delivered before it from its producer and queue."""
        self._core.ack_record(queue, producer, sequence, epoch)

    def owned_queues(self) -> list[int]:
        """The queues this consumer delivers now (active claims)."""
        return self._core.owned_queues()

    def status(self) -> ConsumerStatus:
        """Index, count, owned queues, messages delivered and duplicates dropped."""
        return self._core.status()

    def counters(self) -> ConsumerCounters:
        """What this consumer dropped or ignored (duplicates, malformed messages, ...)."""
        return self._core.counters()

    def close(self, timeout: float = 5.0) -> None:
        """Clean leave: hands every owned queue over (drain, acknowledge, release), then leaves."""
        self._core.close(timeout)

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class GroupObserver:
    """Watches a group's control plane without owning anything (``affinity group status``)."""

    def __init__(
        self,
        client: Client,
        group: str,
        *,
        registry: Registry = None,
        host: str | None = None,
        control: str | None = None,
        secret: Secret = None,
        liveness_timeout: float | None = None,
        heartbeat_interval: float | None = None,
        listen: str | None = None,
        bootstrap: str | None = None,
        bootstrap_timeout: float | None = None,
    ) -> None:
        definition, key, source = _definition(client, group, registry, bootstrap, host, secret, bootstrap_timeout)
        #: The group's definition as read from the registry (or learned through ``bootstrap``).
        self.definition: GroupDefinition = definition
        #: Where the group secret came from (``"argument"``, ``"$AFFINITY_GROUP_SECRET"``,
        #: ``"file <path>"``), or ``"none"``: the member is unauthenticated.
        self.secret_source: str = source
        options = _common_options(
            registry,
            None,
            host,
            control,
            {
                "liveness_timeout": liveness_timeout,
                "heartbeat_interval": heartbeat_interval,
                "bootstrap_timeout": bootstrap_timeout,
            },
            key,
            listen,
            bootstrap,
        )
        self._core = GroupObserverCore(
            client,
            definition.name,
            definition.hash_prefix,
            definition.hash_count,
            definition.queue_count,
            definition.queue_size,
            **options,
        )

    def status(self) -> GroupStatus:
        """Live members, and per queue: owner, epoch, state, acknowledged and sent positions, lag."""
        return self._core.status()

    def close(self) -> None:
        """Leaves the control plane."""
        self._core.close()

    def __enter__(self) -> GroupObserver:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
