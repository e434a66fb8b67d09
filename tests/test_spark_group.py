"""The ``affinity`` sink into a consumer group: keyed, ordered, exactly once per committed batch.

Every sink test runs against both writers (``writer`` option: the Python data source's and the JVM
one's, docs/spark.md "Two writers"). Consumers are :class:`affinity.spark.SinkConsumer` instances
polled on threads of the test process, or consumer processes (``spark_group_consumer.py``) where one
is killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import affinity
import pyarrow as pa
import pytest
from affinity.groups import create_group, group_queue
from affinity.spark import AbortItem, CommitItem, DataItem, SinkConsumer, consume
from spark_support import (
    WRITERS,
    assert_exit_removes_driver_dirs,
    new_worker_driver_dirs,
    spark_session,
    wait_for,
    worker_driver_dirs,
    write_parquet_files_in_order,
    writer_param,
)

pytestmark = pytest.mark.spark

HASH_COUNT = 32
QUEUE_COUNT = 6
HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@dataclass
class Group:
    name: str
    registry: str
    #: The sink's ``writer`` option.
    writer: str = "python"

    def option(self, writer: Any) -> Any:
        return (
            writer.format("affinity")
            .option("group", self.name)
            .option("registry", self.registry)
            .option("writer", self.writer)
        )


_GROUPS = iter(range(1_000_000))


def new_group(tmp_path: Path, writer: str = "python", queue_size: int = 8 << 20) -> Group:
    name = f"spark{next(_GROUPS)}"
    registry = tmp_path / f"registry-{name}"
    create_group(name, f"__{name}__", HASH_COUNT, QUEUE_COUNT, queue_size, registry)
    return Group(name, str(registry), writer)


@pytest.fixture(params=[writer_param(w) for w in WRITERS])
def group(tmp_path: Path, request: pytest.FixtureRequest) -> Group:
    """A new group, written by the writer of the test's parameter."""
    return new_group(tmp_path, request.param)


@dataclass
class Received:
    """What one consumer saw, in arrival order."""

    index: int
    rows: list[tuple[int, str, int]] = field(default_factory=list)  # (queue, key, n)
    commits: list[CommitItem] = field(default_factory=list)
    aborts: list[AbortItem] = field(default_factory=list)
    owned: set[int] = field(default_factory=set)


class Consumers:
    """``count`` sink consumers polled on threads until stopped."""

    def __init__(self, client: affinity.Client, group: Group, count: int) -> None:
        self.consumers = [
            SinkConsumer(group.name, i, count, client=client, registry=group.registry, liveness_timeout=1.0, cycle=1.0)
            for i in range(count)
        ]
        self.received = [Received(i) for i in range(count)]
        self._stop = threading.Event()
        #: While set, the consumers do not poll (so nothing is delivered or acknowledged).
        self.paused = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(count)]
        for thread in self._threads:
            thread.start()
        wait_for(self.all_queues_owned, 30, "every queue to have an owner")

    def all_queues_owned(self) -> bool:
        with self._lock:
            owned = [set(r.owned) for r in self.received]
        return set().union(*owned) == set(range(QUEUE_COUNT)) and sum(len(o) for o in owned) == QUEUE_COUNT

    def _run(self, index: int) -> None:
        consumer, received = self.consumers[index], self.received[index]
        while not self._stop.is_set():
            if self.paused.is_set():
                time.sleep(0.02)
                continue
            items = consumer.poll(1000, 0.05)
            owned = set(consumer.owned_queues())
            with self._lock:
                received.owned = owned
                for item in items:
                    if isinstance(item, DataItem):
                        batch = item.batch()
                        keys, numbers = batch.column("k").to_pylist(), batch.column("n").to_pylist()
                        received.rows.extend((item.queue, k, n) for k, n in zip(keys, numbers, strict=True))
                    elif isinstance(item, CommitItem):
                        received.commits.append(item)
                    else:
                        received.aborts.append(item)

    def commits_of(self, batch_id: int) -> int:
        with self._lock:
            return sum(1 for r in self.received for c in r.commits if c.batch_id == batch_id)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        for consumer in self.consumers:
            consumer.close()


@pytest.fixture
def consumers(client: affinity.Client, group: Group) -> Iterator[Any]:
    started: list[Consumers] = []

    def start(count: int) -> Consumers:
        started.append(Consumers(client, group, count))
        return started[-1]

    yield start
    for c in started:
        c.stop()


def check_exactly_once_at_the_owner(received: list[Received], expected: set[tuple[str, int]]) -> None:
    seen = [(r.index, q, k, n) for r in received for q, k, n in r.rows]
    assert len(seen) == len(expected), f"{len(seen) - len(expected)} rows more than sent (duplicates)"
    assert {(k, n) for _, _, k, n in seen} == expected
    owner_of_key: dict[str, int] = {}
    for index, queue, key, _ in seen:
        assert queue == group_queue(key, HASH_COUNT, QUEUE_COUNT), f"key {key!r} arrived on queue {queue}"
        assert owner_of_key.setdefault(key, index) == index, f"key {key!r} reached two consumers"


def check_order_per_key(received: list[Received]) -> None:
    for r in received:
        last: dict[str, int] = {}
        for _, key, n in r.rows:
            assert n > last.get(key, -1), f"key {key!r}: {n} arrived after {last[key]}"
            last[key] = n


def keyed_rows(spark: Any, rows: int, partitions: int, keys: int) -> Any:
    """Rows ``n`` with key ``p<partition>-<n % keys>``: every key lives in one partition, interleaved."""
    per = rows // partitions
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        f"concat('p', cast(floor(id / {per}) AS string), '-', cast(id % {keys} AS string)) AS k",
        "id AS n",
        "id * 3 AS a",
        "cast(id AS double) AS b",
    )


def test_batch_write_delivers_every_row_once_to_the_consumer_owning_its_key(
    spark: Any, group: Group, consumers: Any
) -> None:
    running = consumers(3)
    df = keyed_rows(spark, 20_000, 4, 50)
    group.option(df.write).option("key", "k").option("maxBatchRows", "700").mode("append").save()
    wait_for(lambda: running.commits_of(0) == QUEUE_COUNT, 60, "a commit on every queue")
    expected = {(r.k, r.n) for r in df.select("k", "n").collect()}
    check_exactly_once_at_the_owner(running.received, expected)
    check_order_per_key(running.received)
    assert all(c.complete for r in running.received for c in r.commits)


def test_streaming_keeps_order_per_key_across_five_micro_batches(
    spark: Any, group: Group, consumers: Any, tmp_path: Path
) -> None:
    running = consumers(2)
    source = tmp_path / "in"
    source.mkdir()
    expected: set[tuple[str, int]] = set()
    tables = []
    for batch in range(5):
        keys = [f"acct-{i % 300}" for i in range(1500)]
        numbers = [batch * 10_000 + i for i in range(1500)]
        expected.update(zip(keys, numbers, strict=True))
        tables.append(pa.table({"k": keys, "n": numbers}))
    write_parquet_files_in_order(source, tables)  # micro-batch i reads file i
    stream = spark.readStream.schema("k string, n long").option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (
        group.option(stream.writeStream)
        .option("key", "k")
        .option("maxBatchRows", "200")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    wait_for(lambda: running.commits_of(4) == QUEUE_COUNT, 60, "batch 4's commit on every queue")
    for batch in range(5):
        assert running.commits_of(batch) == QUEUE_COUNT
    check_exactly_once_at_the_owner(running.received, expected)
    check_order_per_key(running.received)


def _publisher_pids(group: Group) -> set[int]:
    members = Path(group.registry) / "members" / group.name
    pids = set()
    for path in members.glob("*.json") if members.exists() else []:
        try:
            member = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # being written
        if member.get("role") == "publisher" and member.get("pid") != os.getpid():
            pids.add(int(member["pid"]))
    return pids


def test_a_retried_task_sends_no_duplicate_to_consumers(spark: Any, client: affinity.Client, tmp_path: Path) -> None:
    # Python writer only: its tasks publish from Python workers, one of which is killed here (the
    # JVM writer publishes from the executor JVM: see the next test).
    # A small queue size (QS) and paused consumers hold both write tasks inside write(), each after
    # sending part of its rows; one task's Python worker is then killed, and Spark retries it.
    name = "spark-retry"
    registry = tmp_path / "retry-registry"
    create_group(name, f"__{name}__", HASH_COUNT, QUEUE_COUNT, 65536, registry)
    small = Group(name, str(registry))
    running = Consumers(client, small, 2)
    running.paused.set()
    df = keyed_rows(spark, 8_000, 2, 40).selectExpr("*", "repeat('x', 300) AS pad")
    killed: list[int] = []

    def kill_one_writer() -> None:  # on a thread: Spark writes from the thread that registered the source
        try:
            deadline = time.monotonic() + 120
            while len(_publisher_pids(small)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(2.0)  # both are back-pressured now: nothing is acknowledged while consumers pause
            pids = _publisher_pids(small)
            if len(pids) >= 2:
                killed.append(min(pids))
                os.kill(killed[0], signal.SIGKILL)
        finally:
            running.paused.clear()

    killer = threading.Thread(target=kill_one_writer, daemon=True)
    try:
        killer.start()
        small.option(df.write).option("key", "k").option("maxBatchRows", "50").mode("append").save()
        killer.join(10)
        assert killed, "the two write tasks never joined the group"
        wait_for(lambda: running.commits_of(0) == QUEUE_COUNT, 60, "a commit on every queue")
        assert sum(c.stats.duplicates_discarded for c in running.consumers) > 0, "the retry replayed nothing"
        expected = {(r.k, r.n) for r in df.select("k", "n").collect()}
        check_exactly_once_at_the_owner(running.received, expected)
        check_order_per_key(running.received)
    finally:
        running.stop()


def test_a_task_failing_mid_write_is_retried_and_delivers_each_row_once(
    spark: Any, client: affinity.Client, tmp_path: Path
) -> None:
    # JVM writer: a task's first attempt fails (a UDF raises) after it has published and had
    # acknowledged part of its rows; Spark retries it, the retry replays the same envelope ids and
    # the consumers discard what they already delivered.
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import LongType

    marker = tmp_path / "failed-once"
    jvm = new_group(tmp_path, "jvm")
    running = Consumers(client, jvm, 2)

    @udf(returnType=LongType(), useArrow=False)  # type: ignore[untyped-decorator]
    def fail_once(n: int) -> int:
        if n == 3500 and not marker.exists():  # late in partition 0 (rows 0..3999)
            marker.write_text("x")
            raise RuntimeError("injected failure of the first attempt")
        return n

    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "200")  # route (and send) every 200 rows
    try:
        df = keyed_rows(spark, 8_000, 2, 40)
        jvm.option(df.withColumn("n", fail_once(col("n"))).write).option("key", "k").option("maxBatchRows", "50").mode(
            "append"
        ).save()
        assert marker.exists(), "the injected failure never ran"
        wait_for(lambda: running.commits_of(0) == QUEUE_COUNT, 60, "a commit on every queue")
        assert sum(c.stats.duplicates_discarded for c in running.consumers) > 0, "the retry replayed nothing"
        expected = {(r.k, r.n) for r in df.select("k", "n").collect()}
        check_exactly_once_at_the_owner(running.received, expected)
        check_order_per_key(running.received)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
        running.stop()


def test_consume_yields_json_records_and_binary_values(spark: Any, group: Group, client: affinity.Client) -> None:
    items: list[Any] = []
    stop = threading.Event()

    def run() -> None:
        for item in consume(group.name, 0, 1, client=client, registry=group.registry, stop=stop, cycle=1.0):
            items.append(item)

    def commits(batch_query: set[Any]) -> int:
        return sum(1 for i in list(items) if isinstance(i, CommitItem) and i.query_id not in batch_query)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        df = keyed_rows(spark, 1000, 2, 10).selectExpr("k", "n", "cast(concat('v', n) AS binary) AS payload")
        # The JVM writer leaves value=json to the Python one: writer=auto picks it.
        json_writer = "auto" if group.writer == "jvm" else group.writer
        group.option(df.write).option("key", "k, n").option("value", "json").option("writer", json_writer).mode(
            "append"
        ).save()
        wait_for(lambda: commits(set()) == QUEUE_COUNT, 60, "the json write's commit on every queue")
        first = {i.query_id for i in list(items) if isinstance(i, CommitItem)}
        group.option(df.write).option("key", "k").option("value", "binary").mode("append").save()
        wait_for(lambda: commits(first) == QUEUE_COUNT, 60, "the binary write's commit on every queue")
    finally:
        stop.set()
        thread.join(30)
    data = [i for i in items if isinstance(i, DataItem)]
    records = [r for i in data if i.format.value == "json" for r in i.records()]
    assert sorted(r["n"] for r in records) == list(range(1000))
    assert {r["payload"] for r in records} >= {"djA="}  # base64 of b"v0"
    values = [v for i in data if i.format.value == "binary" for v in i.values()]
    assert sorted(values) == sorted(f"v{n}".encode() for n in range(1000))


def test_a_failed_write_sends_abort_markers_to_every_queue(spark: Any, group: Group, consumers: Any) -> None:
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import LongType

    running = consumers(2)

    @udf(returnType=LongType(), useArrow=False)  # type: ignore[untyped-decorator]
    def always_fail(n: int) -> int:
        if n == 1500:
            raise RuntimeError("injected permanent failure")
        return n

    df = keyed_rows(spark, 2000, 2, 10)
    with pytest.raises(Exception, match="injected permanent failure"):
        group.option(df.withColumn("n", always_fail(col("n"))).write).option("key", "k").mode("append").save()

    def aborts() -> int:
        return sum(len(r.aborts) for r in running.received)

    wait_for(lambda: aborts() == QUEUE_COUNT, 60, "an abort marker on every queue")
    assert {a.queue for r in running.received for a in r.aborts} == set(range(QUEUE_COUNT))
    assert running.commits_of(0) == 0


def test_group_options_are_checked_against_the_registry_and_schema(spark: Any, group: Group) -> None:
    from pyspark.errors import AnalysisException, IllegalArgumentException

    # The Python writer's errors come wrapped in AnalysisException, the JVM writer's as Java's
    # IllegalArgumentException; both messages carry the same "SparkOptionError: ..." text.
    refused = (AnalysisException, IllegalArgumentException)
    df = spark.range(3).selectExpr("id AS n", "cast(id AS double) AS x")
    with pytest.raises(refused, match=r"SparkOptionError: option key='missing': column 'missing'"):
        group.option(df.write).option("key", "missing").mode("append").save()
    with pytest.raises(refused, match=r"SparkOptionError: option key='x': column 'x' has type double"):
        group.option(df.write).option("key", "x").mode("append").save()
    with pytest.raises(refused, match=r"SparkOptionError: option group='nosuchgroup'"):
        df.write.format("affinity").option("group", "nosuchgroup").option("registry", group.registry).option(
            "key", "n"
        ).option("writer", group.writer).mode("append").save()


def _start_consumer(group: Group, index: int, count: int, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(HERE / "spark_group_consumer.py"),
            group.registry,
            group.name,
            str(index),
            str(count),
            str(out),
            "1.0",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_a_consumer_killed_mid_stream_loses_nothing(spark: Any, group: Group, tmp_path: Path) -> None:
    outputs = [tmp_path / f"consumer{i}.jsonl" for i in range(3)]
    processes = [_start_consumer(group, i, 3, outputs[i]) for i in range(3)]
    try:
        for process in processes:  # started together: each claims its primary queues
            assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        source = tmp_path / "in"
        source.mkdir()
        expected: set[tuple[str, int]] = set()
        files = 6
        tables = []
        for batch in range(files):
            keys = [f"acct-{i % 200}" for i in range(2000)]
            numbers = [batch * 10_000 + i for i in range(2000)]
            expected.update(zip(keys, numbers, strict=True))
            tables.append(pa.table({"k": keys, "n": numbers}))
        write_parquet_files_in_order(source, tables)  # micro-batch i reads file i
        stream = spark.readStream.schema("k string, n long").option("maxFilesPerTrigger", 1).parquet(str(source))
        query = (
            group.option(stream.writeStream)
            .option("key", "k")
            .option("maxBatchRows", "250")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        wait_for(lambda: any(line["t"] == "commit" for line in _lines(outputs[1])), 120, "consumer 1's first commit")
        processes[1].send_signal(signal.SIGKILL)
        processes[1].wait(10)
        assert query.awaitTermination(180)
        last = files - 1

        def survivors_committed_everything() -> bool:
            commits = {
                line["q"]
                for o in (outputs[0], outputs[2])
                for line in _lines(o)
                if line["t"] == "commit" and line["batch"] == last
            }
            return commits == set(range(QUEUE_COUNT))

        wait_for(survivors_committed_everything, 60, "the last batch's commit on every queue at the survivors")
        delivered = [(k, n) for o in outputs for line in _lines(o) if line["t"] == "data" for k, n in line["rows"]]
        assert set(delivered) == expected, f"{len(expected - set(delivered))} rows lost"
        for o in outputs:
            last_n: dict[str, int] = defaultdict(lambda: -1)
            for line in _lines(o):
                for k, n in line.get("rows", []):
                    assert n > last_n[k], f"{o.name}: key {k} out of order"
                    last_n[k] = n
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait(15)
            if process.stdout is not None:
                process.stdout.close()


def test_the_group_source_reads_what_a_group_publisher_sends(
    spark: Any, client: affinity.Client, tmp_path: Path
) -> None:
    from affinity.groups import GroupPublisher

    group = new_group(tmp_path)  # the source: no writer involved
    reader = (
        spark.readStream.format("affinity")
        .option("group", group.name)
        .option("index", "0")
        .option("count", "1")
        .option("registry", group.registry)
    )
    before = worker_driver_dirs()
    query = (
        reader.load()
        .writeStream.format("memory")
        .queryName("group_rows")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    publisher = GroupPublisher(client, group.name, registry=group.registry)

    def send(first: int, last: int) -> None:
        number = first
        deadline = time.monotonic() + 60
        while number < last and time.monotonic() < deadline:
            if publisher.publish(f"key-{number % 8}", f"payload-{number}".encode()) > 0:
                number += 1
            else:
                time.sleep(0.05)
        assert number == last, "the source's consumer never owned the queues"

    def rows_in_table(count: int) -> bool:
        query.processAllAvailable()
        return bool(spark.sql("SELECT count(*) AS n FROM group_rows").collect()[0].n >= count)

    def acknowledged() -> int:
        return sum(q.acked_sequence for q in publisher.status().queues)

    try:
        send(0, 40)
        wait_for(lambda: rows_in_table(40), 60, "40 rows in the memory sink", step=0.2)
        source = new_worker_driver_dirs(before)
        # Spark tells a source a batch committed when it plans the next one: more data acks the first.
        send(40, 48)
        wait_for(lambda: rows_in_table(48), 60, "48 rows in the memory sink", step=0.2)
        wait_for(lambda: acknowledged() >= 40, 30, "the first 40 messages to be acknowledged", step=0.1)
        rows = spark.sql("SELECT key, value, queue FROM group_rows").collect()
        assert sorted(bytes(r.value) for r in rows) == sorted(f"payload-{i}".encode() for i in range(48))
        for r in rows:
            assert r.queue == group_queue(bytes(r.key), HASH_COUNT, QUEUE_COUNT)
    finally:
        publisher.close()
        query.stop()
    assert_exit_removes_driver_dirs(source, swept_after_kill=True)
