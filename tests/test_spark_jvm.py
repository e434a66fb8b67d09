"""The JVM writer beside the Python one: which writes, same refusals, the registry read by Rust.

The sink's behaviour (batch, streaming, exactly once, order, failover, aborts) is tested against
both writers in ``test_spark_group.py``; this module covers what only exists because there are two.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import affinity
import affinity.spark
import pytest
from affinity.groups import create_group, create_secret
from affinity.spark import CommitItem, DataItem, SinkConsumer
from spark_support import REQUIRE_ENV, spark_session, wait_for

T = TypeVar("T")


@contextlib.contextmanager
def polled(consumer: SinkConsumer, kind: type[T]) -> Iterator[list[T]]:
    """Polls ``consumer`` on a thread while the block runs: the items of type ``kind`` it
    received, in order. The consumer is closed on leaving."""
    items: list[T] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            items.extend(i for i in consumer.poll(100, 0.05) if isinstance(i, kind))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield items
    finally:
        stop.set()
        thread.join(10)
        consumer.close()


pytestmark = pytest.mark.spark

QUEUE_COUNT = 4


@pytest.fixture(scope="module")
def spark() -> Any:
    if affinity.spark.jar_path() is None and os.environ.get(REQUIRE_ENV) != "1":
        pytest.skip("the JVM writer's jar is not built (scripts/build-jvm.sh)")
    return spark_session()


@pytest.fixture
def registry(tmp_path: Path) -> str:
    create_group("jvm", "__jvm__", 16, QUEUE_COUNT, 8 << 20, tmp_path)
    return str(tmp_path)


def _jvm_pid(spark: Any) -> int:
    pid: int = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    return pid


def _publisher_pids(registry: str, group: str) -> set[int]:
    members = Path(registry) / "members" / group
    pids = set()
    for path in members.glob("*.json") if members.exists() else []:
        try:
            member = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if member.get("role") == "publisher":
            pids.add(int(member["pid"]))
    return pids


def _refusal(spark: Any, options: dict[str, str]) -> str:
    """The ``SparkOptionError: ...`` text a save() with ``options`` fails with."""
    from pyspark.errors import AnalysisException, IllegalArgumentException

    df = spark.range(3).selectExpr("cast(id AS string) AS k", "id AS n", "cast(cast(id AS string) AS binary) AS v")
    writer = df.write.format("affinity")
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises((AnalysisException, IllegalArgumentException)) as caught:
        writer.mode("append").save()
    found = re.search(r"SparkOptionError: ([^\n]*)", str(caught.value))
    assert found, f"no SparkOptionError in {caught.value}"
    return found.group(1).strip()


def test_the_jar_owns_the_format_name_and_hands_the_rest_to_the_python_data_source(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().conf()
    found = jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource("affinity", conf)
    assert found.getName() == "affinity.spark.AffinityProvider"
    # The source is still the Python data source (through the JVM provider).
    schema = (
        spark.readStream.format("affinity")
        .option("channel", "aeron:udp?endpoint=127.0.0.1:40999")
        .option("streamId", "3")
        .load()
        .schema
    )
    assert "value" in schema.fieldNames()


@pytest.mark.parametrize(("writer", "jvm"), [("auto", True), ("jvm", True), ("python", False)])
def test_the_writer_option_chooses_where_rows_are_published(
    spark: Any, registry: str, client: affinity.Client, writer: str, jvm: bool
) -> None:
    consumer = SinkConsumer("jvm", 0, 1, client=client, registry=registry, cycle=1.0)
    rows: list[int] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            rows.extend(i.batch().num_rows for i in consumer.poll(100, 0.05) if isinstance(i, DataItem))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        df = spark.range(0, 500, numPartitions=2).selectExpr("cast(id % 7 AS string) AS k", "id AS n")
        df.write.format("affinity").option("group", "jvm").option("registry", registry).option("key", "k").option(
            "writer", writer
        ).mode("append").save()
        wait_for(lambda: sum(rows) == 500, 60, "500 rows at the consumer")
        publishers = _publisher_pids(registry, "jvm") - {os.getpid()}
        assert publishers, "no publisher joined the group"
        assert (_jvm_pid(spark) in publishers) is jvm, f"publishers {publishers}, JVM {_jvm_pid(spark)}"
    finally:
        stop.set()
        thread.join(10)
        consumer.close()


BAD_OPTIONS = [
    {"group": "jvm", "key": "k", "maxBatchRows": "lots"},
    {"group": "jvm", "key": "k", "maxBatchRows": "0"},
    {"group": "jvm", "key": "k", "maxBatchBytes": "10"},
    {"group": "jvm", "key": "k", "ackTimeout": "soon"},
    {"group": "jvm", "key": "k", "ackTimeout": "0s"},
    {"group": "jvm", "key": "k", "ackTimeout": "2 m"},
    # Valid in the one duration grammar (docs/spark.md): refused for the option after it.
    {"group": "jvm", "key": "k", "ackTimeout": "1.5h", "registry": " "},
    {"group": "jvm", "key": "k", "ackTimeout": "500us", "registry": " "},
    {"group": "jvm", "key": "k", "value": "xml"},
    {"group": "jvm", "key": "k", "bogus": "1"},
    {"group": "jvm", "key": "k", "index": "0"},
    {"group": "jvm", "key": "k,k"},
    {"group": "jvm", "key": "k, "},
    {"group": "jvm"},
    {"group": "jvm", "key": "k", "streamId": "3"},
    {"group": "jvm", "key": "k", "registry": " "},
    {"group": "jvm", "key": "k", "host": " "},
    {"group": "jvm", "key": "k", "bootstrap": ""},
    {"group": "jvm", "key": "k", "driverDir": "/nonexistent/driver"},
    {"group": "jvm", "key": "k", "writer": "rust"},
    {"group": "jvm", "key": "missing"},
    {"group": "jvm", "key": "k", "value": "binary", "extra": "1"},
    {"key": "k"},
]


@pytest.mark.parametrize("options", BAD_OPTIONS, ids=[",".join(o) for o in BAD_OPTIONS])
def test_both_writers_refuse_bad_options_with_the_same_message(
    spark: Any, registry: str, options: dict[str, str]
) -> None:
    with_registry = {"registry": registry, **options}
    python = _refusal(spark, {**with_registry, "writer": with_registry.get("writer", "python")})
    jvm = _refusal(spark, {**with_registry, "writer": with_registry.get("writer", "jvm")})
    assert jvm == python


def test_the_jvm_writer_names_a_bad_control_channel(spark: Any, registry: str) -> None:
    # host, control, bootstrap and driverDir both writers take; a bad one is named when planned.
    control = {"group": "jvm", "registry": registry, "key": "k", "control": "udp:nope", "writer": "jvm"}
    message = _refusal(spark, control)
    assert message.startswith("option control='udp:nope'"), message


def test_the_jvm_writer_refuses_what_only_the_python_writer_writes(spark: Any, registry: str) -> None:
    message = _refusal(spark, {"group": "jvm", "registry": registry, "key": "k", "value": "json", "writer": "jvm"})
    assert "value=json are written by the Python writer" in message
    message = _refusal(
        spark,
        {"channel": "aeron:udp?endpoint=127.0.0.1:40998", "streamId": "1", "writer": "jvm"},
    )
    assert "channel mode" in message


def test_the_jvm_writer_reads_the_group_secret_from_the_registry(
    spark: Any, tmp_path: Path, client: affinity.Client
) -> None:
    # With a secret every control and data message is sealed: a consumer holding the secret
    # acknowledges only a publisher that seals with the same one (else the write times out).
    create_group("sealed", "__sealed__", 16, 2, 8 << 20, tmp_path)
    create_secret("sealed", tmp_path)
    consumer = SinkConsumer("sealed", 0, 1, client=client, registry=str(tmp_path), cycle=1.0)
    assert consumer._consumer.secret_source != "none", "the consumer did not find the group secret"
    with polled(consumer, CommitItem) as commits:
        df = spark.range(0, 100).selectExpr("cast(id AS string) AS k", "id AS n")
        df.write.format("affinity").option("group", "sealed").option("registry", str(tmp_path)).option(
            "key", "k"
        ).option("writer", "jvm").option("ackTimeout", "20s").mode("append").save()
        wait_for(lambda: len(commits) == 2, 30, "a commit on both queues")


def test_the_jvm_writer_fills_each_queues_messages_across_routing_chunks(
    spark: Any, registry: str, client: affinity.Client
) -> None:
    # The JVM writer routes rows in chunks of spark.sql.execution.arrow.maxRecordsPerBatch rows
    # (64 here) but keeps one open row group per queue across chunks: every message but a
    # queue's last holds maxBatchRows rows, not the ~16 rows a chunk has per queue.
    consumer = SinkConsumer("jvm", 0, 1, client=client, registry=registry, cycle=1.0)
    with polled(consumer, DataItem) as items:
        chunk = "spark.sql.execution.arrow.maxRecordsPerBatch"
        before = spark.conf.get(chunk)
        spark.conf.set(chunk, "64")
        try:
            df = spark.range(0, 2000, numPartitions=1).selectExpr("cast(id % 101 AS string) AS k", "id AS n")
            df.write.format("affinity").option("group", "jvm").option("registry", registry).option("key", "k").option(
                "writer", "jvm"
            ).option("maxBatchRows", "100").mode("append").save()
            wait_for(lambda: sum(i.envelope.rows for i in items) == 2000, 60, "2000 rows at the consumer")
        finally:
            spark.conf.set(chunk, before)
    per_queue: dict[int, list[int]] = {}
    for item in sorted(items, key=lambda i: i.envelope.sequence):
        assert item.batch().num_rows == item.envelope.rows
        per_queue.setdefault(item.queue, []).append(item.envelope.rows)
    assert len(per_queue) == QUEUE_COUNT, f"rows reached queues {sorted(per_queue)}"
    for queue, sizes in per_queue.items():
        assert all(size == 100 for size in sizes[:-1]) and 0 < sizes[-1] <= 100, f"queue {queue}: {sizes}"


def test_the_jvm_writer_sends_messages_larger_than_its_first_encoding_buffer(
    spark: Any, registry: str, client: affinity.Client
) -> None:
    # Arrow messages are encoded into one direct buffer per task (256 KiB at first) and published
    # from it in place: messages of about 0.5 MiB make it grow while a message is half written;
    # every row must arrive whole, each key's rows in order.
    consumer = SinkConsumer("jvm", 0, 1, client=client, registry=registry, cycle=1.0)
    with polled(consumer, DataItem) as items:
        rows = 8000
        df = spark.range(0, rows, numPartitions=1).selectExpr(
            "cast(id % 3 AS string) AS k", "id AS n", "repeat(cast(id AS string), 60) AS pad"
        )
        df.write.format("affinity").option("group", "jvm").option("registry", registry).option("key", "k").option(
            "writer", "jvm"
        ).mode("append").save()
        wait_for(lambda: sum(i.envelope.rows for i in items) == rows, 60, f"{rows} rows at the consumer")
    assert max(item.batch().nbytes for item in items) > 256 * 1024, "no message outgrew the first buffer"
    seen: list[tuple[str, int, str]] = []
    for item in sorted(items, key=lambda i: i.envelope.sequence):
        batch = item.batch().to_pydict()
        seen.extend(zip(batch["k"], batch["n"], batch["pad"], strict=True))
    assert sorted(n for _, n, _ in seen) == list(range(rows)), "rows lost or repeated"
    last: dict[str, int] = {}
    for key, n, pad in seen:
        assert key == str(n % 3) and pad == str(n) * 60, f"row {n}: {key!r}, {pad[:20]!r}..."
        assert n > last.get(key, -1), f"key {key!r}: {n} after {last[key]}"
        last[key] = n


def test_the_jvm_writer_cuts_row_groups_per_chunk_for_a_group_of_many_queues(
    spark: Any, tmp_path: Path, client: affinity.Client
) -> None:
    # Above MAX_OPEN_GROUPS (64) queues a task keeps no open row group per queue (each would hold
    # its own Arrow vectors): row groups are cut per routing chunk, in one writer. Every row
    # arrives once, each key's rows in order.
    queues = 100
    create_group("wide", "__wide__", 128, queues, 8 << 20, tmp_path)
    consumer = SinkConsumer("wide", 0, 1, client=client, registry=str(tmp_path), cycle=1.0)
    items: list[DataItem] = []
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            items.extend(i for i in consumer.poll(1000, 0.05) if isinstance(i, DataItem))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    chunk = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(chunk)
    spark.conf.set(chunk, "500")
    try:
        df = spark.range(0, 3000, numPartitions=1).selectExpr("cast(id % 250 AS string) AS k", "id AS n")
        df.write.format("affinity").option("group", "wide").option("registry", str(tmp_path)).option("key", "k").option(
            "writer", "jvm"
        ).mode("append").save()
        wait_for(lambda: sum(i.envelope.rows for i in items) == 3000, 60, "3000 rows at the consumer")
    finally:
        spark.conf.set(chunk, before)
        stop.set()
        thread.join(10)
        consumer.close()
    seen: list[tuple[str, int]] = []
    for item in sorted(items, key=lambda i: i.envelope.sequence):
        batch = item.batch().to_pydict()
        seen.extend(zip(batch["k"], batch["n"], strict=True))
    assert sorted(n for _, n in seen) == list(range(3000)), "rows lost or repeated"
    last: dict[str, int] = {}
    for key, n in seen:
        assert n > last.get(key, -1), f"key {key!r}: {n} after {last[key]}"
        last[key] = n
    # Chunks of 500 rows over 100 queues: a queue's rows arrive in several messages (one per chunk).
    per_queue: dict[int, int] = {}
    for item in items:
        per_queue[item.queue] = per_queue.get(item.queue, 0) + 1
    assert max(per_queue.values()) > 1


def _received(spark: Any, registry: str, client: affinity.Client, df: Any, writer: str, rows: int) -> Any:
    """The rows ``writer`` sends for ``df`` (key ``k``, 7 rows a message), as one Arrow table sorted by ``id``."""
    import pyarrow as pa

    consumer = SinkConsumer("jvm", 0, 1, client=client, registry=registry, cycle=1.0)
    with polled(consumer, DataItem) as items:
        # Routing chunks of 16 rows: the JVM writer's row buffer is reused chunk after chunk.
        chunk = "spark.sql.execution.arrow.maxRecordsPerBatch"
        before = spark.conf.get(chunk)
        spark.conf.set(chunk, "16")
        try:
            df.write.format("affinity").option("group", "jvm").option("registry", registry).option("key", "k").option(
                "writer", writer
            ).option("maxBatchRows", "7").mode("append").save()
            wait_for(lambda: sum(i.envelope.rows for i in items) == rows, 60, f"{rows} rows from the {writer} writer")
        finally:
            spark.conf.set(chunk, before)
    assert all(item.batch().num_rows <= 7 for item in items)
    return pa.Table.from_batches([item.batch() for item in items]).sort_by("id")


#: Every type the JVM writer writes straight into the Arrow vectors, each null on some rows.
DIRECT_COLUMNS = [
    "id",
    "cast(id % 5 AS string) AS k",
    "if(id % 3 = 0, null, id * 1000000007) AS l",
    "if(id % 4 = 1, null, cast(id AS int) - 50) AS i",
    "if(id % 5 = 2, null, cast(id AS smallint)) AS s",
    "if(id % 6 = 3, null, cast(id % 100 AS tinyint)) AS b",
    "if(id % 7 = 4, null, id / 3.0D) AS d",
    "if(id % 8 = 5, null, cast(id / 7.0 AS float)) AS f",
    "if(id % 9 = 6, null, date_add(date'2024-02-28', cast(id AS int))) AS dt",
    "if(id % 10 = 7, null, timestamp_micros(id * 1234567)) AS ts",
    "if(id % 11 = 8, null, cast(timestamp_micros(id * 7654321) AS timestamp_ntz)) AS ntz",
    "if(id % 2 = 0, null, repeat('é', cast(id % 13 AS int))) AS str",
    "if(id % 3 = 1, null, unhex(hex(id * 31))) AS bin",
    # Rows of up to 11 KB: a chunk's rows outgrow the writer's first row buffer (64 KiB).
    "if(id % 4 = 3, null, repeat('x', cast(id * 37 AS int))) AS big",
]
#: A type the JVM writer leaves to Spark's ArrowWriter (decimal): the whole row group goes through it.
SPARK_WRITER_COLUMNS = [
    "id",
    "cast(id % 5 AS string) AS k",
    "if(id % 3 = 0, null, cast(id AS decimal(12, 2))) AS dec",
    "if(id % 2 = 0, null, concat('v', id)) AS str",
]


@pytest.mark.parametrize("columns", [DIRECT_COLUMNS, SPARK_WRITER_COLUMNS], ids=["direct", "spark-writer"])
def test_the_jvm_writer_sends_every_value_and_null_as_the_python_writer_does(
    spark: Any, registry: str, client: affinity.Client, columns: list[str]
) -> None:
    # Messages of 7 rows from one task: each queue's vectors are reused message after message
    # (not zeroed), so a null after a value, or a shorter string after a longer one, shows here.
    rows = 300
    df = spark.range(0, rows, numPartitions=1).selectExpr(*columns)
    jvm = _received(spark, registry, client, df, "jvm", rows)
    python = _received(spark, registry, client, df, "python", rows)
    assert jvm.schema == python.schema
    assert jvm.num_rows == rows
    for name in jvm.column_names:
        assert jvm.column(name).to_pylist() == python.column(name).to_pylist(), f"column {name}"
        assert jvm.column(name).null_count > 0 or name in ("id", "k"), f"column {name} has no null"


def _bodies(
    spark: Any, registry: str, client: affinity.Client, df: Any, fill: str, options: dict[str, str], rows: int
) -> dict[tuple[int, int, int], bytes]:
    """The Arrow bodies the JVM writer sends for ``df`` with ``spark.affinity.jvm.fill=fill``, by
    (queue, partition, sequence); routing chunks of 16 rows."""
    consumer = SinkConsumer("jvm", 0, 1, client=client, registry=registry, cycle=1.0)
    with polled(consumer, DataItem) as items:
        settings = {"spark.sql.execution.arrow.maxRecordsPerBatch": "16", FILL_CONF: fill}
        before = {name: spark.conf.get(name, None) for name in settings}
        for name, value in settings.items():
            spark.conf.set(name, value)
        try:
            writer = df.write.format("affinity").option("group", "jvm").option("registry", registry)
            for name, value in {"key": "k", "writer": "jvm", **options}.items():
                writer = writer.option(name, value)
            writer.mode("append").save()
            wait_for(lambda: sum(i.envelope.rows for i in items) == rows, 60, f"{rows} rows with fill={fill}")
        finally:
            for name, value in before.items():
                if value is None:
                    spark.conf.unset(name)
                else:
                    spark.conf.set(name, value)
    return {(i.queue, i.envelope.partition, i.envelope.sequence): i.body for i in items}


#: The session setting choosing how the JVM writer builds Arrow messages (WriteSpec.FILL_CONF).
FILL_CONF = "spark.affinity.jvm.fill"


@pytest.mark.parametrize(
    "options",
    [{"maxBatchRows": "7"}, {"maxBatchBytes": "16384", "maxBatchRows": "100000"}],
    ids=["cut-by-rows", "cut-by-bytes"],
)
@pytest.mark.parametrize("columns", [DIRECT_COLUMNS, SPARK_WRITER_COLUMNS], ids=["direct", "spark-writer"])
def test_the_jvm_writers_arrow_fills_send_the_same_bytes(
    spark: Any, registry: str, client: affinity.Client, columns: list[str], options: dict[str, str]
) -> None:
    # The column-by-column fill (the default) against the row-by-row one and Spark's ArrowWriter:
    # 16-row routing chunks over 4 queues, so a queue's message takes rows of several chunks and a
    # chunk's run of a queue starts mid-byte of the validity bitmaps; nulls, empty and multi-byte
    # strings, rows larger than the chunk's first row buffer, every type of the direct path.
    import pyarrow as pa

    rows = 300
    df = spark.range(0, rows, numPartitions=2).selectExpr(*columns)
    bodies = {fill: _bodies(spark, registry, client, df, fill, options, rows) for fill in ("columns", "rows", "spark")}
    # Every queue's messages hold rows of several 16-row chunks (4 queues, 150 rows a partition).
    assert len(bodies["columns"]) >= QUEUE_COUNT
    tables = {
        fill: pa.Table.from_batches([pa.ipc.open_stream(b).read_next_batch() for b in sent.values()]).sort_by("id")
        for fill, sent in bodies.items()
    }
    assert tables["columns"].num_rows == rows
    assert tables["columns"].equals(tables["spark"]), "decoded rows differ from Spark's ArrowWriter's"
    # The same rows in the same messages, byte for byte (the size checks of the two direct fills agree).
    assert bodies["columns"].keys() == bodies["rows"].keys()
    for at, body in bodies["columns"].items():
        assert body == bodies["rows"][at], f"message {at}: bytes differ from the row-by-row fill"
    if options.get("maxBatchBytes") is None:  # cut by rows only: Spark's writer makes the same messages
        assert bodies["columns"] == bodies["spark"], "bytes differ from Spark's ArrowWriter's"


def test_the_jvm_writer_refuses_an_unknown_arrow_fill(spark: Any, registry: str) -> None:
    spark.conf.set(FILL_CONF, "vectors")
    try:
        message = _refusal(spark, {"group": "jvm", "key": "k", "registry": registry, "writer": "jvm"})
    finally:
        spark.conf.unset(FILL_CONF)
    assert message == f"{FILL_CONF}='vectors': must be one of ['columns', 'rows', 'spark']"


PROFILED_WRITE = textwrap.dedent(
    """
    import sys, threading
    from affinity.spark import DataItem, SinkConsumer
    from spark_support import spark_session
    registry = sys.argv[1]
    consumer = SinkConsumer("jvm", 0, 1, registry=registry, cycle=1.0)
    stop = threading.Event()
    def run():
        while not stop.is_set():
            consumer.poll(100, 0.05)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    spark = spark_session()
    df = spark.range(0, 1000, numPartitions=1).selectExpr("cast(id % 7 AS string) AS k", "id AS n")
    df.write.format("affinity").option("group", "jvm").option("registry", registry).option("key", "k").option(
        "writer", "jvm"
    ).mode("append").save()
    spark.stop()
    stop.set()
    thread.join(10)
    consumer.close()
    """
)


def test_the_jvm_writer_prints_a_task_profile_when_asked(spark: Any, registry: str) -> None:
    # AFFINITY_SPARK_PROFILE is read when the JVM starts: a session of its own, in a subprocess.
    env = {**os.environ, "AFFINITY_SPARK_PROFILE": "1", "PYTHONPATH": str(Path(__file__).parent)}
    done = subprocess.run(
        [sys.executable, "-c", PROFILED_WRITE, registry], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    phases = " ".join(f"{phase}_ms=\\d+" for phase in ("rows", "route", "fill", "encode", "publish", "flush"))
    task = r"affinity-profile partition=0 batch=0 rows=1000 messages=[1-9]\d* total_ms=\d+ cpu_ms=-?\d+"
    line = rf"{task} {phases} other_ms=-?\d+"
    assert re.search(line, done.stderr), f"no profile line in: {done.stderr[-3000:]}"
    # The driver's commit of the batch: its markers' publish and the wait for their acknowledgements.
    markers = r"affinity-profile commit batch=0 publish_ms=\d+ flush_ms=\d+"
    assert re.search(markers, done.stderr), f"no commit markers line in: {done.stderr[-3000:]}"
