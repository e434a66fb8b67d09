"""Wrong-typed arguments raise ``ArgumentTypeError`` (an ``AffinityError`` and a ``TypeError``)
naming the parameter and the type received, whatever the entry point: the compiled module's
classes and functions, and the Python wrappers in front of them (groups, routing, subjects,
driver). Values of the right type that cannot be used (a NaN duration) raise an
``AffinityError`` that is also a ``ValueError``. Nothing else escapes: no plain ``TypeError``,
no ``OverflowError``, no ``PanicException``.

The table below lists every public callable and, for each parameter, a valid value and the kind
of value it takes; each kind has its wrong values (``WRONG``), and every parameter is called with
each of them, the other arguments valid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import affinity
import affinity._affinity as compiled
import affinity.groups
import pytest
from affinity.config.faucet import parse_router_file
from affinity.routing import PosixRegex, Router, affinity_hash, select_member
from affinity.subjects import Source, SubjectRouter, Subscriber
from affinity.testing import LossyRelay, loopback_channel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NAN = float("nan")
DATA = Path(__file__).parent / "data"
FAST = {"heartbeat_interval": 0.05, "liveness_timeout": 1.0}


class Opaque:
    """An object of a type no parameter takes (and no iterable, buffer, path, number or callable)."""

    def __repr__(self) -> str:
        return "Opaque()"


#: Values of the wrong type for each kind of parameter.
WRONG: dict[str, list[object]] = {
    "str": [None, Opaque(), b"bytes", 7],
    "optional str": [Opaque(), b"bytes", 7],
    "int": [None, Opaque(), "1", 1.5, b"1"],
    "optional int": [Opaque(), "1", 1.5],
    # a driver setting: an int or its text (``"64k"``), never another type
    "optional setting": [Opaque(), 1.5, b"1"],
    "float": [None, Opaque(), "1.0", b"1"],
    "optional float": [Opaque(), "1.0"],
    "bool": [None, Opaque(), "yes"],
    "bytes": [None, Opaque(), "text", 5],
    "key": [None, Opaque(), 5, 1.5],
    "optional key": [Opaque(), 5, 1.5],
    "callable": [None, Opaque(), "f"],
    "optional callable": [Opaque(), "f", 5],
    "policy": [None, Opaque(), 5],
    "client": [None, Opaque(), "client"],
    "path": [Opaque(), 5],
    "optional path": [Opaque(), 5],
    "str list": [None, Opaque(), 5, [None], [b"x"]],
    "str lists": [None, Opaque(), 5, [None], [[None]]],
    "str pairs": [None, Opaque(), 5, [None], [("a", None)]],
    "bytes list": [None, Opaque(), 5, [None], ["text"]],
    "key list": [None, Opaque(), 5, [None], [5]],
    "argv": [None, Opaque(), 5, [None], [5]],
    "message": [None, Opaque(), "m"],
    "config": [None, Opaque(), 5],
    "optional str list": [Opaque(), 5, [None], [b"x"]],
}

#: Values of the right type that no parameter of the kind can use (raise an AffinityError that
#: is a ValueError).
UNUSABLE: dict[str, list[object]] = {
    "float": [NAN, math.inf, -1.0],
    "optional float": [NAN, math.inf, -1.0],
}


@dataclass
class Param:
    """One parameter: its name, its kind (a key of ``WRONG``), a valid value, how it is passed."""

    name: str
    kind: str
    valid: object = None
    keyword: bool = False


@dataclass
class Entry:
    """A public callable (made from the fixtures' objects) and its parameters."""

    name: str
    target: Callable[[Objects], Callable[..., object]]
    params: list[Param] = field(default_factory=list)


class Objects:
    """The objects whose methods are called, made on first use and closed at the end."""

    def __init__(self, stack: ExitStack, registry: Path) -> None:
        self._stack = stack
        self.registry = registry
        self._made: dict[str, Any] = {}

    def _once(self, name: str, make: Callable[[], Any]) -> Any:
        if name not in self._made:
            self._made[name] = make()
        return self._made[name]

    @property
    def client(self) -> affinity.Client:
        return self._once("client", lambda: self._stack.enter_context(affinity.Client()))

    @property
    def publication(self) -> affinity.Publication:
        return self._once("publication", lambda: self._stack.enter_context(self.client.add_publication("aeron:ipc", 7)))

    @property
    def subscription(self) -> affinity.Subscription:
        return self._once(
            "subscription", lambda: self._stack.enter_context(self.client.add_subscription("aeron:ipc", 7))
        )

    @property
    def group(self) -> str:
        def make() -> str:
            affinity.create_group("orders", "HP", 16, 4, 1024, self.registry)
            return "orders"

        return self._once("group", make)

    @property
    def publisher(self) -> affinity.GroupPublisher:
        return self._once(
            "publisher",
            lambda: self._stack.enter_context(
                affinity.GroupPublisher(self.client, self.group, registry=self.registry, **FAST)
            ),
        )

    @property
    def consumer(self) -> affinity.GroupConsumer:
        return self._once(
            "consumer",
            lambda: self._stack.enter_context(
                affinity.GroupConsumer(self.client, self.group, 0, 1, registry=self.registry, **FAST)
            ),
        )

    @property
    def router(self) -> Router:
        def make() -> Router:
            router = Router()
            router.add_data_service("trades", ["^/"])
            router.add_source_group("adapters", [["a1", "a2"]], [("user", "^/PRIVATE/([^/]+)/")])
            router.subscribe("/PRIVATE/alice/X")
            return router

        return self._once("router", make)

    @property
    def listen(self) -> str:
        return self._once("listen", loopback_channel)

    @property
    def subscriber(self) -> Subscriber:
        return self._once(
            "subscriber", lambda: self._stack.enter_context(Subscriber(self.client, self.listen, name="s", **FAST))
        )

    @property
    def source(self) -> Source:
        return self._once("source", lambda: self._stack.enter_context(Source(self.client, self.listen, "S", **FAST)))


ENTRIES: list[Entry] = [
    # ---- transport ------------------------------------------------------------------------
    Entry(
        "Client",
        lambda o: affinity.Client,
        [
            Param("dir", "optional path", None, keyword=True),
            Param("driver_timeout_ms", "optional int", None, keyword=True),
            Param("threading", "optional str", None, keyword=True),
            Param("idle", "optional str", None, keyword=True),
            Param("term_length", "optional setting", None, keyword=True),
            Param("mtu", "optional setting", None, keyword=True),
            Param("receiver_window", "optional setting", None, keyword=True),
            Param("socket_receive_buffer", "optional setting", None, keyword=True),
            Param("flow_control", "optional str", None, keyword=True),
            Param("receiver_timeout_ms", "optional setting", None, keyword=True),
            Param("command_timeout_ms", "optional setting", None, keyword=True),
            Param("client_timeout_ms", "optional setting", None, keyword=True),
            Param("max_clients", "optional setting", None, keyword=True),
            Param("yield_when_idle", "bool", True, keyword=True),
        ],
    ),
    Entry(
        "Client.add_publication",
        lambda o: o.client.add_publication,
        [Param("channel", "str", "aeron:ipc"), Param("stream_id", "int", 1)],
    ),
    Entry(
        "Client.add_subscription",
        lambda o: o.client.add_subscription,
        [Param("channel", "str", "aeron:ipc"), Param("stream_id", "int", 1)],
    ),
    Entry("Publication.offer", lambda o: o.publication.offer, [Param("data", "bytes", b"x")]),
    Entry("Publication.offer_batch", lambda o: o.publication.offer_batch, [Param("messages", "bytes list", [b"x"])]),
    Entry(
        "Subscription.poll",
        lambda o: o.subscription.poll,
        [Param("handler", "callable", lambda data, header: None), Param("fragment_limit", "optional int", None)],
    ),
    Entry(
        "Subscription.poll_batch",
        lambda o: o.subscription.poll_batch,
        [Param("fragment_limit", "optional int", None), Param("as_arrow", "bool", False, keyword=True)],
    ),
    Entry(
        "LossyRelay",
        lambda o: LossyRelay,
        [
            Param("target", "str", "127.0.0.1:9"),
            Param("loss", "float", 0.0, keyword=True),
            Param("duplicate", "float", 0.0, keyword=True),
            Param("reorder", "float", 0.0, keyword=True),
            Param("seed", "int", 1, keyword=True),
        ],
    ),
    # ---- driver ---------------------------------------------------------------------------
    Entry("driver_stat", lambda o: affinity.driver_stat, [Param("directory", "optional path", None)]),
    Entry(
        "run_driver",
        lambda o: affinity.run_driver,
        [Param("argv", "argv", ["--help"]), Param("companion", "optional callable", keyword=True)],
    ),
    # ---- groups ---------------------------------------------------------------------------
    Entry("group_bucket", lambda o: affinity.group_bucket, [Param("key", "key", b"k"), Param("hash_count", "int", 8)]),
    Entry(
        "group_queue",
        lambda o: affinity.group_queue,
        [Param("key", "key", b"k"), Param("hash_count", "int", 8), Param("queue_count", "int", 2)],
    ),
    Entry(
        "group_queues",
        lambda o: affinity.group_queues,
        [Param("keys", "key list", [b"k"]), Param("hash_count", "int", 8), Param("queue_count", "int", 2)],
    ),
    Entry(
        "GroupPublisher",
        lambda o: affinity.GroupPublisher,
        [
            Param("client", "client", "<client>"),
            Param("group", "str", "<group>"),
            Param("registry", "optional path", "<registry>", keyword=True),
            Param("name", "optional str", None, keyword=True),
            Param("host", "optional str", None, keyword=True),
            Param("control", "optional str", None, keyword=True),
            Param("liveness_timeout", "optional float", None, keyword=True),
            Param("heartbeat_interval", "optional float", None, keyword=True),
            Param("resend_timeout", "optional float", None, keyword=True),
        ],
    ),
    Entry(
        "GroupPublisher.publish",
        lambda o: o.publisher.publish,
        [Param("key", "key", b"k"), Param("payload", "bytes", b"p"), Param("subject", "optional str", None)],
    ),
    Entry(
        "GroupPublisher.publish_batch",
        lambda o: o.publisher.publish_batch,
        [Param("keys", "key list", [b"k"]), Param("payloads", "bytes list", [b"p"])],
    ),
    Entry(
        "GroupPublisher.publish_to_queue",
        lambda o: o.publisher.publish_to_queue,
        [Param("queue", "int", 0), Param("payload", "bytes", b"p"), Param("key", "optional key", None)],
    ),
    Entry("GroupPublisher.flush", lambda o: o.publisher.flush, [Param("timeout", "float", 0.0)]),
    Entry(
        "GroupConsumer",
        lambda o: affinity.GroupConsumer,
        [
            Param("client", "client", "<client>"),
            Param("group", "str", "<group>"),
            Param("index", "int", 0),
            Param("count", "int", 1),
            Param("auto_ack", "bool", False),
            Param("registry", "optional path", "<registry>", keyword=True),
            Param("name", "optional str", None, keyword=True),
            Param("host", "optional str", None, keyword=True),
            Param("control", "optional str", None, keyword=True),
            Param("cycle", "optional float", None, keyword=True),
            Param("liveness_timeout", "optional float", None, keyword=True),
            Param("heartbeat_interval", "optional float", None, keyword=True),
        ],
    ),
    Entry(
        "GroupConsumer.poll",
        lambda o: o.consumer.poll,
        [Param("max_messages", "int", 10), Param("timeout", "float", 0.0)],
    ),
    Entry("GroupConsumer.ack", lambda o: o.consumer.ack, [Param("message", "message", None)]),
    Entry(
        "GroupObserver",
        lambda o: affinity.GroupObserver,
        [
            Param("client", "client", "<client>"),
            Param("group", "str", "<group>"),
            Param("registry", "optional path", "<registry>", keyword=True),
            Param("host", "optional str", None, keyword=True),
            Param("control", "optional str", None, keyword=True),
            Param("liveness_timeout", "optional float", None, keyword=True),
            Param("heartbeat_interval", "optional float", None, keyword=True),
        ],
    ),
    Entry(
        "GroupObserverCore",
        lambda o: compiled.GroupObserverCore,
        [
            Param("client", "client", "<client>"),
            Param("group", "str", "g"),
            Param("hash_prefix", "str", "G"),
            Param("hash_count", "int", 8),
            Param("queue_count", "int", 2),
            Param("queue_size", "int", 1024),
            Param("registry_dir", "str", "<registry text>", keyword=True),
            Param("host", "str", "127.0.0.1", keyword=True),
            Param("control", "optional str", None, keyword=True),
            Param("liveness_timeout_ms", "int", 2000, keyword=True),
            Param("heartbeat_interval_ms", "int", 100, keyword=True),
        ],
    ),
    Entry(
        "create_group",
        lambda o: affinity.create_group,
        [
            Param("name", "str", "g"),
            Param("hash_prefix", "str", "G"),
            Param("hash_count", "int", 8),
            Param("queue_count", "int", 2),
            Param("queue_size", "int", 1024),
            Param("registry", "optional path", "<registry>"),
        ],
    ),
    Entry(
        "load_group",
        lambda o: affinity.load_group,
        [Param("name", "str", "<group>"), Param("registry", "optional path", "<registry>")],
    ),
    Entry("list_groups", lambda o: affinity.list_groups, [Param("registry", "optional path", "<registry>")]),
    Entry(
        "delete_group",
        lambda o: affinity.delete_group,
        [Param("name", "str", "nope"), Param("registry", "optional path", "<registry>")],
    ),
    # ---- routing --------------------------------------------------------------------------
    Entry("affinity_hash", lambda o: affinity_hash, [Param("composite", "str", "k:v")]),
    Entry(
        "select_member",
        lambda o: select_member,
        [Param("composite", "str", "k:v"), Param("members", "str list", ["a"]), Param("selection", "str", "modulo")],
    ),
    Entry("PosixRegex", lambda o: PosixRegex, [Param("pattern", "str", "^a")]),
    Entry("PosixRegex.capture", lambda o: PosixRegex("^(a)").capture, [Param("subject", "str", "a")]),
    Entry("PosixRegex.is_match", lambda o: PosixRegex("^a").is_match, [Param("subject", "str", "a")]),
    Entry("Router", lambda o: Router, [Param("max_events", "int", 10, keyword=True)]),
    Entry(
        "Router.add_data_service",
        lambda o: Router().add_data_service,
        [Param("name", "str", "s"), Param("include_patterns", "str list", ["^/"])],
    ),
    Entry(
        "Router.add_source_group",
        lambda o: Router().add_source_group,
        [
            Param("name", "str", "g"),
            Param("priority_groups", "str lists", [["a"]]),
            Param("rules", "str pairs", [("k", "^/(.*)")]),
            Param("policy", "policy", "workload"),
            Param("selection", "str", "modulo"),
            Param("service", "optional str", None, keyword=True),
        ],
    ),
    Entry(
        "Router.set_member_up",
        lambda o: o.router.set_member_up,
        [Param("label", "str", "a1"), Param("up", "bool", True)],
    ),
    Entry("Router.subscribe", lambda o: o.router.subscribe, [Param("subject", "str", "/x")]),
    Entry("Router.unsubscribe", lambda o: o.router.unsubscribe, [Param("subject", "str", "/PRIVATE/alice/X")]),
    Entry("Router.route", lambda o: o.router.route, [Param("subject", "str", "/x")]),
    Entry("Router.route_members", lambda o: o.router.route_members, [Param("subjects", "str list", ["/x"])]),
    Entry("Router.subscribe_members", lambda o: o.router.subscribe_members, [Param("subjects", "str list", ["/x"])]),
    Entry("Router.explain", lambda o: o.router.explain, [Param("subject", "str", "/x")]),
    Entry(
        "Router.report_nodata",
        lambda o: o.router.report_nodata,
        [Param("subject", "str", "/PRIVATE/alice/X"), Param("status", "str", "other")],
    ),
    Entry("Router.affinity", lambda o: o.router.affinity, [Param("composite", "str", "user:alice")]),
    Entry(
        "Router.from_config",
        lambda o: Router.from_config,
        [Param("config", "config", "<routing>"), Param("resolve_policy", "optional callable", None, keyword=True)],
    ),
    Entry("Router.on_event", lambda o: o.router.on_event, [Param("callback", "callable", print)]),
    # ---- subjects -------------------------------------------------------------------------
    Entry(
        "Subscriber",
        lambda o: Subscriber,
        [
            Param("client", "client", "<client>"),
            Param("router", "optional str", "<listen>"),
            Param("routers", "optional str list", None, keyword=True),
            Param("name", "optional str", None, keyword=True),
            Param("host", "str", "127.0.0.1", keyword=True),
            Param("heartbeat_interval", "float", 0.05, keyword=True),
            Param("liveness_timeout", "float", 1.0, keyword=True),
        ],
    ),
    Entry(
        "Subscriber.subscribe",
        lambda o: o.subscriber.subscribe,
        [Param("subject", "str", "/x"), Param("callback", "callable", print)],
    ),
    Entry("Subscriber.unsubscribe", lambda o: o.subscriber.unsubscribe, [Param("subject", "str", "/not-subscribed")]),
    Entry("Subscriber.poll", lambda o: o.subscriber.poll, [Param("limit", "int", 10)]),
    Entry(
        "Source",
        lambda o: Source,
        [
            Param("client", "client", "<client>"),
            Param("router", "optional str", "<listen>"),
            Param("label", "str", "S2"),
            Param("routers", "optional str list", None, keyword=True),
            Param("coverage", "optional str list", None, keyword=True),
            Param("faucet", "optional str", None, keyword=True),
            Param("host", "str", "127.0.0.1", keyword=True),
            Param("heartbeat_interval", "float", 0.05, keyword=True),
            Param("liveness_timeout", "float", 1.0, keyword=True),
        ],
    ),
    Entry("Source.on_request", lambda o: o.source.on_request, [Param("callback", "callable", print)]),
    Entry("Source.on_discard", lambda o: o.source.on_discard, [Param("callback", "callable", print)]),
    Entry(
        "Source.publish",
        lambda o: o.source.publish,
        [Param("subject", "str", "/x"), Param("payload", "bytes", b"p"), Param("image", "bool", False, keyword=True)],
    ),
    Entry(
        "Source.nodata",
        lambda o: o.source.nodata,
        [Param("subject", "str", "/x"), Param("status", "str", "notfound")],
    ),
    Entry("Source.poll", lambda o: o.source.poll, [Param("limit", "int", 10)]),
    Entry(
        "SubjectRouter",
        lambda o: SubjectRouter,
        [
            Param("client", "client", "<client>"),
            Param("config", "config", "<config>"),
            Param("listen", "str", "<listen>", keyword=True),
            Param("control", "optional str", None, keyword=True),
            Param("liveness_timeout", "float", 1.0, keyword=True),
            Param("heartbeat_interval", "float", 0.05, keyword=True),
        ],
    ),
]


def _cases() -> Iterator[Any]:
    for entry in ENTRIES:
        for param in entry.params:
            for index, value in enumerate(WRONG[param.kind]):
                yield pytest.param(entry, param, value, True, id=f"{entry.name}-{param.name}-{index}")
            for index, value in enumerate(UNUSABLE.get(param.kind, [])):
                yield pytest.param(entry, param, value, False, id=f"{entry.name}-{param.name}-unusable{index}")


def _resolve(objects: Objects, value: object) -> object:
    """The valid value a placeholder names (objects made from the fixtures)."""
    if value == "<client>":
        return objects.client
    if value == "<group>":
        return objects.group
    if value == "<registry>":
        return objects.registry
    if value == "<registry text>":
        return str(objects.registry)
    if value == "<listen>":
        return objects.listen
    if value == "<config>":
        return DATA / "worked_example_transformer.conf"
    if value == "<routing>":
        return parse_router_file(DATA / "worked_example_transformer.conf").routing
    return value


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[Objects]:
    with ExitStack() as stack:
        yield Objects(stack, tmp_path / "registry")


def _type_names(value: object) -> set[str]:
    """The type of ``value`` and of the items it holds (a message may name the item at fault)."""
    names = {type(value).__name__}
    if isinstance(value, list | tuple):
        for item in value:
            names |= _type_names(item)
    return names


def check_raises_affinity_error(call: Callable[[], object], param: str, value: object, *, type_error: bool) -> None:
    """``call()`` raises an AffinityError (a TypeError for a wrong type, a ValueError for an
    unusable value) whose message names ``param``."""
    try:
        result = call()
    except affinity.AffinityError as error:
        assert param in str(error), f"the message does not name {param!r}: {error}"
        expected = TypeError if type_error else ValueError
        assert isinstance(error, expected), f"{type(error).__name__} is not a {expected.__name__}: {error}"
        if type_error:
            shown = _type_names(value)
            assert any(name in str(error) for name in shown), f"the message names none of {shown}: {error}"
    except BaseException as error:
        pytest.fail(f"{type(error).__module__}.{type(error).__name__} is not an AffinityError: {error}")
    else:
        if isinstance(result, affinity.Client):
            result.close()
        pytest.fail(f"{param}={value!r} was accepted (returned {result!r})")


@pytest.mark.parametrize(("entry", "param", "value", "type_error"), list(_cases()))
def test_a_wrong_argument_raises_an_affinity_error_naming_it(
    objects: Objects, entry: Entry, param: Param, value: object, type_error: bool
) -> None:
    target = entry.target(objects)
    args: list[object] = []
    kwargs: dict[str, object] = {}
    for each in entry.params:
        argument = value if each is param else _resolve(objects, each.valid)
        if each.keyword:
            kwargs[each.name] = argument
        else:
            args.append(argument)
    check_raises_affinity_error(lambda: target(*args, **kwargs), param.name, value, type_error=type_error)


# ---- arbitrary values ------------------------------------------------------------------------

#: Any Python value a caller might pass: scalars, text, bytes, containers of them, objects.
ANY_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats()
    | st.text()
    | st.binary(max_size=64)
    | st.builds(bytearray, st.binary(max_size=16))
    | st.builds(Opaque)
    | st.just(object())
    | st.sampled_from(["aeron:ipc", "aeron:udp?endpoint=127.0.0.1:9", "\ud800", "shared", "backoff", "max"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=8,
)

SETTINGS = [
    "threading",
    "idle",
    "term_length",
    "mtu",
    "receiver_window",
    "socket_receive_buffer",
    "flow_control",
    "receiver_timeout_ms",
    "command_timeout_ms",
    "yield_when_idle",
    "driver_timeout_ms",
]

HYPOTHESIS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def only_affinity_errors(call: Callable[[], object]) -> object:
    """``call()``'s result, or None when it raised an AffinityError; fails on any other exception."""
    try:
        return call()
    except affinity.AffinityError:
        return None
    except BaseException as error:
        pytest.fail(f"{type(error).__module__}.{type(error).__name__} is not an AffinityError: {error}")


@HYPOTHESIS
@given(setting=st.sampled_from(SETTINGS), value=ANY_VALUE)
def test_client_settings_of_any_value_raise_only_affinity_errors(setting: str, value: object) -> None:
    client = only_affinity_errors(lambda: affinity.Client(**{setting: value}))
    if isinstance(client, affinity.Client):
        client.close()


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[affinity.Client, affinity.Publication, affinity.Subscription]]:
    with (
        affinity.Client() as client,
        client.add_publication("aeron:ipc", 9) as publication,
        client.add_subscription("aeron:ipc", 9) as subscription,
    ):
        yield client, publication, subscription


@HYPOTHESIS
@given(channel=ANY_VALUE, stream_id=ANY_VALUE, subscribe=st.booleans())
def test_add_publication_and_subscription_of_any_values_raise_only_affinity_errors(
    shared: tuple[affinity.Client, affinity.Publication, affinity.Subscription],
    channel: object,
    stream_id: object,
    subscribe: bool,
) -> None:
    client = shared[0]
    add = client.add_subscription if subscribe else client.add_publication
    handle = only_affinity_errors(lambda: add(channel, stream_id))  # type: ignore[arg-type]
    if handle is not None:
        handle.close()  # type: ignore[attr-defined]


@HYPOTHESIS
@given(data=ANY_VALUE, batch=st.booleans())
def test_offer_and_offer_batch_of_any_value_raise_only_affinity_errors(
    shared: tuple[affinity.Client, affinity.Publication, affinity.Subscription], data: object, batch: bool
) -> None:
    publication = shared[1]
    offer = publication.offer_batch if batch else publication.offer
    only_affinity_errors(lambda: offer(data))  # type: ignore[arg-type]
    shared[2].poll_batch(1000)


@HYPOTHESIS
@given(first=ANY_VALUE, second=ANY_VALUE, batch=st.booleans())
def test_poll_and_poll_batch_of_any_values_raise_only_affinity_errors(
    shared: tuple[affinity.Client, affinity.Publication, affinity.Subscription],
    first: object,
    second: object,
    batch: bool,
) -> None:
    _, publication, subscription = shared
    publication.offer(b"message")
    if batch:
        only_affinity_errors(lambda: subscription.poll_batch(first, as_arrow=second))  # type: ignore[arg-type, call-overload]
    else:
        only_affinity_errors(lambda: subscription.poll(first, second))  # type: ignore[arg-type]
    subscription.poll_batch(1000)
