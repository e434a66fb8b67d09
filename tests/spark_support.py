"""Shared helpers of the Spark tests: the session (one per test process) and bounded waits."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

#: Set (as CI does) to fail instead of skipping when PySpark or Java is missing.
REQUIRE_ENV = "AFFINITY_REQUIRE_SPARK"


def spark_session() -> Any:
    """A ``local[2]`` session (4 attempts per task, UI off, ERROR logging), created once per process."""
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("affinity-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "20s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    import affinity.spark

    affinity.spark.register(spark)
    return spark


def wait_for(condition: Callable[[], bool], timeout: float, what: str, step: float = 0.01) -> None:
    """Poll ``condition`` until true or ``timeout`` seconds pass (then fail naming ``what``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)
