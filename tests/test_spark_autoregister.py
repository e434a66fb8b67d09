"""``format("affinity")`` without ``affinity.spark.register``: PySpark finds ``pyspark_affinity.DefaultSource``.

The check runs in a fresh interpreter with its own SparkSession: the module-shared session of the
other Spark tests has the source registered by hand, which would hide a broken auto-registration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import affinity
import pytest
from affinity.spark.encoding import decode_arrow
from affinity.spark.envelope import Kind, decode
from affinity.testing import loopback_channel
from spark_support import REQUIRE_ENV, wait_for

pytestmark = pytest.mark.spark

STREAM_ID = 13
ROWS = 50
CHILD_TIMEOUT = 240.0

#: The fresh session: writes ``ROWS`` rows and resolves the stream source's schema, never registering by hand.
CHILD = """
import json, sys
from pyspark.sql import SparkSession

channel, stream_id, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = (
    SparkSession.builder.master("local[2]").appName("affinity-autoregister")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
try:
    spark.range(rows).write.format("affinity").option("channel", channel).option("streamId", stream_id).mode(
        "append"
    ).save()
    stream = spark.readStream.format("affinity").option("channel", channel).option("streamId", stream_id)
    columns = stream.load().columns
    print(json.dumps({"registered_by_hand": "affinity.spark.registration" in sys.modules, "columns": columns}))
finally:
    spark.stop()
"""

#: A fresh session that calls ``affinity.spark.register`` (twice) with Spark's warnings shown, then writes.
REGISTER_CHILD = """
import sys
import affinity.spark
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[1]").appName("affinity-register")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("WARN")
try:
    affinity.spark.register(spark)
    affinity.spark.register(spark)
    spark.range(3).write.format("affinity").option("channel", sys.argv[1]).option("streamId", "13").mode(
        "append"
    ).save()
    print("written", flush=True)
finally:
    spark.stop()
"""


@pytest.fixture
def subscribed(client: affinity.Client) -> Iterator[tuple[str, affinity.Subscription]]:
    channel = loopback_channel()
    with client.add_subscription(channel, STREAM_ID) as sub:
        yield channel, sub


def test_a_fresh_session_finds_the_affinity_format_without_register(
    subscribed: tuple[str, affinity.Subscription],
) -> None:
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
    import pyspark_affinity
    from affinity.spark.datasource import AffinityDataSource

    assert pyspark_affinity.DefaultSource is AffinityDataSource
    channel, sub = subscribed
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    ids: list[int] = []
    committed = False

    def poll() -> bool:
        nonlocal committed
        for raw in sub.poll_batch(1000):
            envelope, body = decode(raw)
            if envelope.kind is Kind.DATA:
                ids.extend(decode_arrow(body).column("id").to_pylist())
            committed = committed or envelope.kind is Kind.COMMIT
        return committed or child.poll() is not None

    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, channel, str(STREAM_ID), str(ROWS)],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            text=True,
        )
        try:
            wait_for(poll, CHILD_TIMEOUT, "the fresh session's rows and commit", step=0.05)
            out, _ = child.communicate(timeout=CHILD_TIMEOUT)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(10)
        err.seek(0)
        assert child.returncode == 0, f"the fresh session failed:\n{err.read()[-4000:]}"
    poll()
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert report["registered_by_hand"] is False
    assert "value" in report["columns"] and "position" in report["columns"]
    assert committed, "the batch write's commit marker arrived"
    assert sorted(ids) == list(range(ROWS))


def test_register_on_a_session_that_found_the_format_makes_spark_warn_of_nothing(
    subscribed: tuple[str, affinity.Subscription],
) -> None:
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
    channel, _ = subscribed
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = subprocess.run(
        [sys.executable, "-c", REGISTER_CHILD, channel],
        capture_output=True,
        text=True,
        env=env,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "written" in result.stdout
    assert "DataSourceManager" not in result.stderr, result.stderr[-4000:]
    assert "replaced a statically registered data source" not in result.stderr
