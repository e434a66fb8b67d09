"""The data source's options: names, defaults and docs defined once, parsed and validated once.

Spark hands options over as a case-insensitive ``str -> str`` map; every parser here names the
option (as documented, camelCase) and the offending value in its :class:`SparkOptionError`. The
parsers run on the Spark driver when a query is planned (``writer``/``streamWriter``/``schema``/
``simpleStreamReader``), so a malformed option, a channel URI that does not parse included, fails
the ``save()``/``start()`` call and never a task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from affinity import _affinity
from affinity.exceptions import ChannelUriError, ConfigError
from affinity.spark.errors import SparkOptionError
from affinity.units import parse_duration

__all__ = [
    "OPTIONS",
    "SPARK_INJECTED_OPTIONS",
    "WRITERS",
    "OptionSpec",
    "SinkOptions",
    "SourceOptions",
    "ValueFormat",
    "parse_sink_options",
    "parse_source_options",
]

#: Largest message body the sink builds by default (the UDP transport's largest message is 2 MiB).
DEFAULT_MAX_BATCH_BYTES: Final = 1024 * 1024
#: Upper bound of ``maxBatchBytes``: a message must fit the transport's largest message.
MAX_BATCH_BYTES_LIMIT: Final = 2 * 1024 * 1024 - 4096
#: Lower bound of ``maxBatchBytes``.
MIN_BATCH_BYTES: Final = 1024
#: Default of ``maxBatchRows`` (Spark's Arrow batches hold at most 10,000 rows by default).
DEFAULT_MAX_BATCH_ROWS: Final = 10_000
#: Upper bound of ``maxBatchRows``.
MAX_BATCH_ROWS_LIMIT: Final = 10_000_000
#: Default of ``ackTimeout`` in seconds.
DEFAULT_ACK_TIMEOUT: Final = 60.0
#: Upper bound of ``ackTimeout`` in seconds (one day).
MAX_ACK_TIMEOUT: Final = 86_400.0
#: Options Spark itself may add to the map; accepted and ignored.
SPARK_INJECTED_OPTIONS: Final = frozenset({"path", "checkpointlocation", "queryname"})


#: Values of the ``writer`` option (the first is the default).
WRITERS: Final = ("auto", "jvm", "python")


class ValueFormat(Enum):
    """How the rows of a message body are encoded (the ``value`` option)."""

    #: Arrow IPC stream (schema + one record batch) of the row group.
    ARROW = "arrow"
    #: JSON Lines: one JSON object per row (orjson), newline separated.
    JSON = "json"
    #: One binary column: each value as a 4-byte little-endian length then the bytes.
    BINARY = "binary"


@dataclass(frozen=True)
class OptionSpec:
    """One documented option."""

    name: str
    default: str | None
    sink: bool
    source: bool
    doc: str


#: Every option the data source accepts (docs/spark.md shows this table).
OPTIONS: Final[tuple[OptionSpec, ...]] = (
    OptionSpec("group", None, True, True, "consumer group name: rows are keyed into its queues"),
    OptionSpec("channel", None, True, True, "aeron:udp channel URI for a plain publication/subscription"),
    OptionSpec("streamId", None, True, True, "stream id with `channel` (32-bit integer)"),
    OptionSpec("key", None, True, False, "key column(s), comma separated (group mode, required)"),
    OptionSpec("value", "arrow", True, True, "sink: arrow | json | binary; source: binary (default) | arrow"),
    OptionSpec(
        "driverDir",
        None,
        True,
        True,
        "directory of the standalone `affinity driver` on every host (default: $AFFINITY_DIR, else embedded)",
    ),
    OptionSpec("maxBatchRows", str(DEFAULT_MAX_BATCH_ROWS), True, False, "most rows in one message"),
    OptionSpec("maxBatchBytes", str(DEFAULT_MAX_BATCH_BYTES), True, False, "most body bytes in one message"),
    OptionSpec("ackTimeout", "60s", True, False, "how long a task waits for acks/back-pressure, then fails"),
    OptionSpec("registry", None, True, True, "group registry directory (default: $AFFINITY_REGISTRY, ...)"),
    OptionSpec("host", None, True, True, "address group members advertise (default: $SPARK_LOCAL_IP, else 127.0.0.1)"),
    OptionSpec("control", None, True, True, "extra channel for the group's heartbeats (e.g. aeron:udp multicast)"),
    OptionSpec(
        "bootstrap",
        None,
        True,
        True,
        "host:port,... of live group members that answer with the group's definition (no registry entry needed)",
    ),
    OptionSpec("index", None, False, True, "consumer index in the group (source, group mode)"),
    OptionSpec("count", None, False, True, "consumer count of the group (source, group mode)"),
    OptionSpec("failOnDataLoss", "true", False, True, "fail when asked to replay what is no longer retained"),
    OptionSpec("writer", "auto", True, False, "auto | jvm | python: which writer (docs/spark.md, Two writers)"),
)

_BY_LOWER: Final = {spec.name.lower(): spec for spec in OPTIONS}
_MAX_STREAM_ID: Final = 2**31 - 1
_MIN_STREAM_ID: Final = -(2**31)
_MAX_CONSUMERS: Final = 65_536


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options: exactly one of ``group`` or ``channel`` + ``stream_id``."""

    group: str | None
    channel: str | None
    stream_id: int | None
    key: tuple[str, ...]
    value: ValueFormat
    max_batch_rows: int
    max_batch_bytes: int
    ack_timeout: float
    registry: str | None
    #: Standalone driver directory (None: ``$AFFINITY_DIR``, else an embedded driver per worker).
    driver_dir: str | None = None
    #: Address the group member advertises (None: ``$SPARK_LOCAL_IP``, else the group's default).
    host: str | None = None
    #: Extra heartbeat channel of the group (None: none).
    control: str | None = None
    #: ``host:port,...`` of live members that answer with the group's definition (None: the registry).
    bootstrap: str | None = None


@dataclass(frozen=True)
class SourceOptions:
    """Validated source options: ``group`` + ``index`` + ``count``, or ``channel`` + ``stream_id``."""

    group: str | None
    index: int | None
    count: int | None
    channel: str | None
    stream_id: int | None
    value: ValueFormat
    registry: str | None
    fail_on_data_loss: bool
    #: Standalone driver directory (None: ``$AFFINITY_DIR``, else an embedded driver).
    driver_dir: str | None = None
    #: Address the group member advertises (None: ``$SPARK_LOCAL_IP``, else the group's default).
    host: str | None = None
    #: Extra heartbeat channel of the group (None: none).
    control: str | None = None
    #: ``host:port,...`` of live members that answer with the group's definition (None: the registry).
    bootstrap: str | None = None


def _normalise(options: Mapping[str, str], *, sink: bool) -> dict[str, str]:
    """Lower-cased keys, unknown options refused, Spark's own options dropped."""
    role = "sink" if sink else "source"
    result: dict[str, str] = {}
    for raw_key, raw_value in options.items():
        lower = str(raw_key).lower()
        if lower in SPARK_INJECTED_OPTIONS:
            continue
        spec = _BY_LOWER.get(lower)
        if spec is None:
            known = ", ".join(s.name for s in OPTIONS if (s.sink if sink else s.source))
            raise SparkOptionError(f"unknown {role} option {raw_key}={raw_value!r} (known: {known})")
        if not (spec.sink if sink else spec.source):
            raise SparkOptionError(f"option {spec.name}={raw_value!r} does not apply to the {role}")
        if raw_value is None:
            raise SparkOptionError(f"option {spec.name} has no value")
        result[lower] = str(raw_value)
    return result


def _int(values: dict[str, str], name: str, low: int, high: int, unit: str = "") -> int | None:
    """The integer option ``name`` in ``[low, high]`` (``unit`` follows the range in the error)."""
    raw = values.get(name.lower())
    if raw is None:
        return None
    try:
        number = int(raw.strip())
    except ValueError:
        raise SparkOptionError(f"option {name}={raw!r} is not an integer") from None
    if not low <= number <= high:
        raise SparkOptionError(f"option {name}={raw!r} is out of range [{low}, {high}]{unit}")
    return number


def _duration(values: dict[str, str], name: str, default: float) -> float:
    raw = values.get(name.lower())
    if raw is None:
        return default
    try:
        seconds = parse_duration(raw.strip(), "s")
    except ConfigError:
        raise SparkOptionError(f"option {name}={raw!r} is not a duration (examples: 30, 30s, 500ms, 2m)") from None
    if not 0.0 < seconds <= MAX_ACK_TIMEOUT:
        raise SparkOptionError(
            f"option {name}={raw!r} must be more than 0s and at most {MAX_ACK_TIMEOUT:.0f}s (one day)"
        )
    return seconds


def _bool(values: dict[str, str], name: str, default: bool) -> bool:
    raw = values.get(name.lower())
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise SparkOptionError(f"option {name}={raw!r} is not a boolean (true or false)")


def _text(values: dict[str, str], name: str) -> str | None:
    raw = values.get(name.lower())
    if raw is None:
        return None
    if not raw.strip():
        raise SparkOptionError(f"option {name}={raw!r} is empty")
    return raw.strip()


def _value(values: dict[str, str], allowed: tuple[ValueFormat, ...]) -> ValueFormat:
    raw = values.get("value", allowed[0].value)
    for fmt in allowed:
        if raw.strip().lower() == fmt.value:
            return fmt
    names = " | ".join(fmt.value for fmt in allowed)
    raise SparkOptionError(f"option value={raw!r} is not one of {names}")


def _writer(values: dict[str, str]) -> str:
    """The ``writer`` option; ``jvm`` is refused here: this is the Python writer, so the jar is not loaded."""
    raw = values.get("writer", WRITERS[0])
    writer = raw.strip().lower()
    if writer not in WRITERS:
        raise SparkOptionError(f"option writer={raw!r} is not one of {' | '.join(WRITERS)}")
    if writer == "jvm":
        raise SparkOptionError(
            "option writer='jvm': the JVM writer is not on this session's classpath "
            "(scripts/build-jvm.sh builds it, affinity.spark.configure(builder) adds it)"
        )
    return writer


def _target(values: dict[str, str]) -> tuple[str | None, str | None, int | None]:
    """``group`` or ``channel`` + ``streamId``, exactly one of them."""
    group = _text(values, "group")
    channel = _text(values, "channel")
    stream_id = _int(values, "streamId", _MIN_STREAM_ID, _MAX_STREAM_ID)
    if group is not None and (channel is not None or stream_id is not None):
        other = f"channel={channel!r}" if channel is not None else f"streamId={stream_id}"
        raise SparkOptionError(f"option group={group!r} cannot be combined with {other}: give one target")
    if group is None:
        if channel is None and stream_id is None:
            raise SparkOptionError("no target: give option group, or options channel and streamId")
        if channel is None:
            raise SparkOptionError(f"option streamId={stream_id} needs option channel")
        if stream_id is None:
            raise SparkOptionError(f"option channel={channel!r} needs option streamId")
        if not channel.startswith("aeron:"):
            raise SparkOptionError(f"option channel={channel!r} is not an aeron channel URI (aeron:udp?...)")
        try:
            _affinity.check_channel(channel)  # here, on the driver: a malformed URI never reaches a task
        except ChannelUriError as error:
            raise SparkOptionError(f"option channel={channel!r}: {error}") from None
    return group, channel, stream_id


def _placement(values: dict[str, str], group: str | None) -> tuple[str | None, str | None, str | None, str | None]:
    """``driverDir``, and the group member's ``host``, ``control`` and ``bootstrap`` (group mode only)."""
    host = _text(values, "host")
    control = _text(values, "control")
    bootstrap = _text(values, "bootstrap")
    if group is None:
        for name, raw in (("host", host), ("control", control), ("bootstrap", bootstrap)):
            if raw is not None:
                raise SparkOptionError(
                    f"option {name}={raw!r} applies only with option group (a channel has no members)"
                )
    if control is not None:
        try:
            _affinity.check_channel(control)
        except ChannelUriError as error:
            raise SparkOptionError(f"option control={control!r}: {error}") from None
    return _text(values, "driverDir"), host, control, bootstrap


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Validate the sink's options; raises :class:`SparkOptionError` naming the option and value."""
    values = _normalise(options, sink=True)
    group, channel, stream_id = _target(values)
    driver_dir, host, control, bootstrap = _placement(values, group)
    key_raw = values.get("key")
    key: tuple[str, ...] = ()
    if key_raw is not None:
        key = tuple(part.strip() for part in key_raw.split(","))
        if any(not part for part in key):
            raise SparkOptionError(f"option key={key_raw!r} has an empty column name")
        if len(set(key)) != len(key):
            raise SparkOptionError(f"option key={key_raw!r} names a column twice")
    if group is not None and not key:
        raise SparkOptionError(f"option group={group!r} needs option key (the column(s) rows are routed by)")
    if group is None and key:
        raise SparkOptionError(f"option key={key_raw!r} applies only with option group (a channel has no keys)")
    _writer(values)
    rows = _int(values, "maxBatchRows", 1, MAX_BATCH_ROWS_LIMIT, " rows")
    size = _int(
        values, "maxBatchBytes", MIN_BATCH_BYTES, MAX_BATCH_BYTES_LIMIT, " bytes (a message must fit the transport's)"
    )
    return SinkOptions(
        group=group,
        channel=channel,
        stream_id=stream_id,
        key=key,
        value=_value(values, (ValueFormat.ARROW, ValueFormat.JSON, ValueFormat.BINARY)),
        max_batch_rows=DEFAULT_MAX_BATCH_ROWS if rows is None else rows,
        max_batch_bytes=DEFAULT_MAX_BATCH_BYTES if size is None else size,
        ack_timeout=_duration(values, "ackTimeout", DEFAULT_ACK_TIMEOUT),
        registry=_text(values, "registry"),
        driver_dir=driver_dir,
        host=host,
        control=control,
        bootstrap=bootstrap,
    )


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate the source's options; raises :class:`SparkOptionError` naming the option and value."""
    values = _normalise(options, sink=False)
    group, channel, stream_id = _target(values)
    driver_dir, host, control, bootstrap = _placement(values, group)
    index = _int(values, "index", 0, _MAX_CONSUMERS - 1)
    count = _int(values, "count", 1, _MAX_CONSUMERS)
    if group is not None:
        if index is None or count is None:
            raise SparkOptionError(f"option group={group!r} needs options index and count (this consumer's place)")
        if index >= count:
            raise SparkOptionError(f"option index={index} must be less than count={count}")
    elif index is not None or count is not None:
        raise SparkOptionError("options index and count apply only with option group")
    return SourceOptions(
        group=group,
        index=index,
        count=count,
        channel=channel,
        stream_id=stream_id,
        value=_value(values, (ValueFormat.BINARY, ValueFormat.ARROW)),
        registry=_text(values, "registry"),
        fail_on_data_loss=_bool(values, "failOnDataLoss", True),
        driver_dir=driver_dir,
        host=host,
        control=control,
        bootstrap=bootstrap,
    )
