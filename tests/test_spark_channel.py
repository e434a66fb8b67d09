"""The ``affinity`` data source on a plain channel: sink (batch, streaming) and the stream source."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import affinity
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from affinity.spark.encoding import decode_arrow, decode_binary, decode_json, encode_body
from affinity.spark.envelope import Envelope, Kind, decode, decode_commit_body, encode
from affinity.spark.options import ValueFormat
from affinity.testing import loopback_channel
from spark_support import (
    assert_exit_removes_driver_dirs,
    new_worker_driver_dirs,
    spark_session,
    wait_for,
    worker_driver_dirs,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture
def subscribed(client: affinity.Client) -> Iterator[tuple[str, affinity.Subscription]]:
    channel = loopback_channel()
    with client.add_subscription(channel, 11) as sub:
        yield channel, sub


def collect(sub: affinity.Subscription, done: Any, timeout: float = 30.0) -> list[tuple[Envelope, bytes]]:
    """Messages until ``done(messages)``, decoded."""
    got: list[tuple[Envelope, bytes]] = []

    def poll() -> bool:
        for raw in sub.poll_batch(1000):
            envelope, body = decode(raw)
            got.append((envelope, bytes(body)))
        return bool(done(got))

    wait_for(poll, timeout, "the sink's messages")
    return got


def commits(messages: list[tuple[Envelope, bytes]]) -> list[Envelope]:
    return [e for e, _ in messages if e.kind is Kind.COMMIT]


def test_batch_write_sends_every_row_as_arrow_row_groups_then_a_commit(
    spark: Any, subscribed: tuple[str, affinity.Subscription]
) -> None:
    channel, sub = subscribed
    df = spark.range(0, 3000, numPartitions=3).selectExpr("id", "concat('k', id % 7) AS k", "id * 2 AS v")
    df.write.format("affinity").option("channel", channel).option("streamId", "11").option("maxBatchRows", "400").mode(
        "append"
    ).save()
    messages = collect(sub, lambda m: len(commits(m)) == 1)
    data = [(e, decode_arrow(b)) for e, b in messages if e.kind is Kind.DATA]
    assert sorted(i for _, batch in data for i in batch.column("id").to_pylist()) == list(range(3000))
    assert {e.query_id for e, _ in messages} == {commits(messages)[0].query_id}
    for partition in range(3):
        mine = [(e, batch) for e, batch in data if e.partition == partition]
        assert [e.sequence for e, _ in mine] == list(range(1, len(mine) + 1))
        assert all(batch.num_rows <= 400 and e.rows == batch.num_rows for e, batch in mine)
        ids = [i for _, batch in mine for i in batch.column("id").to_pylist()]
        assert ids == sorted(ids), "rows keep their order within a partition"
    last = decode_commit_body(next(b for e, b in messages if e.kind is Kind.COMMIT))
    assert last == {p: max(e.sequence for e, _ in data if e.partition == p) for p in range(3)}


@pytest.mark.parametrize("fmt", ["json", "binary"])
def test_json_and_binary_values(spark: Any, subscribed: tuple[str, affinity.Subscription], fmt: str) -> None:
    channel, sub = subscribed
    df = spark.range(0, 500, numPartitions=2).selectExpr("id", "cast(concat('v', id) AS binary) AS payload")
    writer = df.write.format("affinity").option("channel", channel).option("streamId", "11").option("value", fmt)
    writer.mode("append").save()
    messages = collect(sub, lambda m: len(commits(m)) == 1)
    bodies = [b for e, b in messages if e.kind is Kind.DATA]
    assert all(e.format is ValueFormat(fmt) for e, _ in messages if e.kind is Kind.DATA)
    if fmt == "json":
        rows = [row for body in bodies for row in decode_json(body)]
        assert sorted(row["id"] for row in rows) == list(range(500))
    else:
        values = [v for body in bodies for v in decode_binary(body)]
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(500))


def test_streaming_write_stamps_the_query_id_and_each_micro_batch(
    spark: Any, subscribed: tuple[str, affinity.Subscription], tmp_path: Path
) -> None:
    channel, sub = subscribed
    source = tmp_path / "in"
    source.mkdir()
    for batch in range(3):
        pq.write_table(pa.table({"n": [batch * 10 + i for i in range(10)]}), source / f"{batch}.parquet")
    stream = spark.readStream.schema("n long").option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (
        stream.writeStream.format("affinity")
        .option("channel", channel)
        .option("streamId", "11")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    messages = collect(sub, lambda m: len(commits(m)) == 3)
    assert {e.query_id for e, _ in messages} == {uuid.UUID(query.id)}
    assert sorted(e.batch_id for e in commits(messages)) == [0, 1, 2]
    # maxFilesPerTrigger=1: each micro-batch carries exactly one file's rows. Which file goes
    # first is Spark's choice (modification time, equal for files written in the same instant).
    files = {tuple(batch * 10 + i for i in range(10)) for batch in range(3)}
    per_batch = set()
    for batch in range(3):
        rows = [
            n
            for e, b in messages
            if e.kind is Kind.DATA and e.batch_id == batch
            for n in decode_arrow(b)["n"].to_pylist()
        ]
        per_batch.add(tuple(sorted(rows)))
    assert per_batch == files


def test_bad_options_fail_the_write_with_the_option_named(spark: Any) -> None:
    from pyspark.errors import AnalysisException

    df = spark.range(3)
    with pytest.raises(AnalysisException, match=r"SparkOptionError: option maxBatchRows='lots' is not an integer"):
        df.write.format("affinity").option("channel", "aeron:ipc").option("streamId", "1").option(
            "maxBatchRows", "lots"
        ).mode("append").save()
    with pytest.raises(AnalysisException, match=r"SparkOptionError: option value='binary' needs exactly one binary"):
        df.write.format("affinity").option("channel", "aeron:ipc").option("streamId", "1").option(
            "value", "binary"
        ).mode("append").save()
    with pytest.raises(AnalysisException, match=r"SparkOptionError: option driverDir='/tmp/driver'"):
        df.write.format("affinity").option("channel", "aeron:ipc").option("streamId", "1").option(
            "driverDir", "/tmp/driver"
        ).mode("append").save()


def _memory_query(reader: Any, name: str, checkpoint: Path) -> Any:
    return (
        reader.load().writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint)).start()
    )


def test_the_source_reads_raw_messages_as_binary_rows(spark: Any, client: affinity.Client, tmp_path: Path) -> None:
    channel = loopback_channel()
    reader = spark.readStream.format("affinity").option("channel", channel).option("streamId", "12")
    query = _memory_query(reader, "raw_rows", tmp_path / "checkpoint")
    with contextlib.ExitStack() as stack:
        stack.callback(query.stop)
        pub = stack.enter_context(client.add_publication(channel, 12))
        wait_for(lambda: pub.is_connected, 60, "the source to subscribe")
        for i in range(20):
            assert pub.offer(f"raw-{i}".encode()) > 0

        def arrived() -> bool:
            query.processAllAvailable()
            return bool(spark.sql("SELECT count(*) AS n FROM raw_rows").collect()[0].n >= 20)

        wait_for(arrived, 60, "20 rows in the memory sink", step=0.2)
        rows = spark.sql("SELECT value, session_id, position, kind FROM raw_rows ORDER BY position").collect()
        assert [bytes(r.value) for r in rows] == [f"raw-{i}".encode() for i in range(20)]
        assert {r.session_id for r in rows} == {pub.session_id} and all(r.kind is None for r in rows)
        assert [r.position for r in rows] == sorted({r.position for r in rows})


def test_the_source_decodes_arrow_columns_the_sender_wrote(spark: Any, client: affinity.Client, tmp_path: Path) -> None:
    channel = loopback_channel()
    reader = (
        spark.readStream.format("affinity")
        .schema("account STRING, amount BIGINT")
        .option("channel", channel)
        .option("streamId", "13")
        .option("value", "arrow")
    )
    query = _memory_query(reader, "arrow_rows", tmp_path / "checkpoint")
    with contextlib.ExitStack() as stack:
        stack.callback(query.stop)
        pub = stack.enter_context(client.add_publication(channel, 13))
        wait_for(lambda: pub.is_connected, 60, "the source to subscribe")
        query_id = uuid.uuid4()
        for seq in range(1, 4):
            batch = pa.RecordBatch.from_pydict(
                {"amount": [seq * 100 + i for i in range(5)], "account": [f"a{i}" for i in range(5)]}
            )
            envelope = Envelope(Kind.DATA, ValueFormat.ARROW, query_id, 0, 0, 5, seq)
            assert pub.offer(encode(envelope, encode_body(batch, ValueFormat.ARROW))) > 0

        def arrived() -> bool:
            query.processAllAvailable()
            return bool(spark.sql("SELECT count(*) AS n FROM arrow_rows").collect()[0].n >= 15)

        wait_for(arrived, 60, "15 rows in the memory sink", step=0.2)
        rows = spark.sql("SELECT account, amount FROM arrow_rows ORDER BY amount").collect()
        assert [(r.account, r.amount) for r in rows] == [
            (f"a{i}", seq * 100 + i) for seq in range(1, 4) for i in range(5)
        ]


def test_a_stopped_source_closes_its_client_and_leaves_no_driver_directory(
    spark: Any, client: affinity.Client, tmp_path: Path
) -> None:
    # Spark ends the source's Python worker with SIGTERM when the query stops.
    channel = loopback_channel()
    before = worker_driver_dirs()
    reader = spark.readStream.format("affinity").option("channel", channel).option("streamId", "14")
    query = _memory_query(reader, "stopped_rows", tmp_path / "checkpoint")
    try:
        with client.add_publication(channel, 14) as pub:
            wait_for(lambda: pub.is_connected, 60, "the source to subscribe")
            source = new_worker_driver_dirs(before)
    finally:
        query.stop()
    assert_exit_removes_driver_dirs(source)


def test_the_source_refuses_arrow_without_a_schema(spark: Any) -> None:
    from pyspark.errors import AnalysisException

    reader = spark.readStream.format("affinity").option("channel", "aeron:ipc").option("streamId", "1")
    with pytest.raises(AnalysisException, match="needs the rows' schema"):
        reader.option("value", "arrow").load()
