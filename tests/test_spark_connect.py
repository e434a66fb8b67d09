"""The ``affinity`` sink and source from a Spark Connect client: the connect server the pip package
ships (``SparkConnectServer`` through ``spark-submit``, ``local[2]``) runs on loopback at a free
port; the client is ``SparkSession.builder.remote("sc://127.0.0.1:PORT")`` (Connect's own class,
which works beside the classic session other modules run in this process). The data source runs
on the server (found there through ``pyspark_affinity``, or sent by ``affinity.spark.register``),
so the client needs no JVM of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import affinity
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_support import (
    REQUIRE_ENV,
    Collected,
    check_once_and_in_order,
    free_tcp_port,
    new_group,
    publish_and_read_back,
    wait_for,
)

pytestmark = pytest.mark.spark

#: The connect server's main class (in ``pyspark/jars/spark-connect_*.jar``).
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: What the server logs once it listens.
READY_LINE = "Spark Connect server started at"
#: Seconds the server may take to start on a loaded machine (a bound on a hang, not a speed).
START_TIMEOUT_S = 240.0
#: Seconds a write, a micro-batch or the consumer may take.
WAIT_S = 120.0
QUEUE_COUNT = 4
HASH_COUNT = 16


def _require_connect() -> None:
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
        pytest.importorskip("grpc", reason="pyspark[connect] is not installed (the spark extra installs it)")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark Connect server on 127.0.0.1 (its Python workers run this interpreter); yields its
    ``sc://`` address and stops it (SIGTERM, then SIGKILL) at the end of the module."""
    _require_connect()
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    port = free_tcp_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("SPARK_REMOTE", None)
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.stopTimeout": "20s",
    }
    command = [str(submit), "--class", CONNECT_SERVER_CLASS, "--master", "local[2,4]"]
    for name, value in settings.items():
        command += ["--conf", f"{name}={value}"]
    command.append("spark-internal")
    with log.open("wb") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while READY_LINE not in log.read_text(errors="replace"):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the connect server did not start (status {server.poll()}); its log:\n{log.read_text()}")
            time.sleep(0.2)
        yield f"sc://127.0.0.1:{port}"
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def remote(connect_server: str) -> Iterator[Any]:
    # The Connect session class itself: pyspark.sql.SparkSession.builder refuses a remote session
    # in a process that already runs a classic one (the other Spark test modules' session).
    from pyspark.sql.connect.session import SparkSession

    spark = SparkSession.builder.remote(connect_server).getOrCreate()
    assert type(spark).__module__ == "pyspark.sql.connect.session", type(spark)
    yield spark
    spark.stop()


@pytest.fixture
def registry(tmp_path: Path) -> str:
    return str(tmp_path / "registry")


@pytest.fixture
def group(registry: str) -> str:
    return new_group(registry, "connect", HASH_COUNT, QUEUE_COUNT)


def test_a_batch_and_a_stream_through_spark_connect_arrive_once_in_order_per_key(
    remote: Any, group: str, registry: str, tmp_path: Path
) -> None:
    import affinity.spark

    with affinity.Client() as client:
        collected = Collected(client, group, registry)
        try:
            wait_for(lambda: len(collected.consumer.owned_queues()) == QUEUE_COUNT, WAIT_S, "the consumer's queues")
            # First without register(): the server finds the source through pyspark_affinity.
            df = remote.range(0, 3000, numPartitions=2).selectExpr(
                "concat('p', cast(floor(id / 1500) AS string), '-', cast(id % 30 AS string)) AS k", "id AS n"
            )
            df.write.format("affinity").option("group", group).option("registry", registry).option("key", "k").mode(
                "append"
            ).save()
            wait_for(lambda: collected.commit_count() == QUEUE_COUNT, WAIT_S, "the batch's commit on every queue")
            expected = {(f"p{i // 1500}-{i % 30}", i) for i in range(3000)}
            # register() under Connect sends the class to the server; the stream uses it.
            affinity.spark.register(remote)
            source = tmp_path / "in"
            source.mkdir()
            query = (
                remote.readStream.schema("k string, n long")
                .option("maxFilesPerTrigger", "1")
                .parquet(str(source))
                .writeStream.format("affinity")
                .option("group", group)
                .option("registry", registry)
                .option("key", "k")
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .start()
            )
            try:
                for batch in range(3):
                    keys = [f"s{i % 25}" for i in range(400)]
                    numbers = [10_000 * (batch + 1) + i for i in range(400)]
                    expected.update(zip(keys, numbers, strict=True))
                    pq.write_table(pa.table({"k": keys, "n": numbers}), source / f"{batch}.parquet")
                    commits = QUEUE_COUNT * (batch + 2)  # the batch write's and each micro-batch's
                    wait_for(lambda c=commits: collected.commit_count() == c, WAIT_S, f"micro-batch {batch}'s commits")
                assert query.exception() is None
            finally:
                query.stop()
            wait_for(lambda: len(collected.rows) >= len(expected), WAIT_S, "every row")
            check_once_and_in_order(collected.rows, expected)
            # Every committed batch: a commit on every queue, once.
            per_batch = sorted((str(c.query_id), c.batch_id, c.queue) for c in collected.commits)
            assert len(per_batch) == len(set(per_batch)) == 4 * QUEUE_COUNT
        finally:
            collected.stop()


def test_the_group_source_reads_through_spark_connect(remote: Any, group: str, registry: str, tmp_path: Path) -> None:
    query = (
        remote.readStream.format("affinity")
        .option("group", group)
        .option("registry", registry)
        .option("index", "0")
        .option("count", "1")
        .load()
        .writeStream.format("memory")
        .queryName("connect_source")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with affinity.Client() as client:
            publish_and_read_back(remote, client, group, registry, "connect_source", WAIT_S)
        assert query.exception() is None
    finally:
        query.stop()
