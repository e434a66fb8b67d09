"""The batching and back-pressure options: every malformed value is refused with the option and value named."""

from __future__ import annotations

from typing import Any

import affinity
import pytest
from affinity.spark.errors import SparkOptionError
from affinity.spark.options import (
    DEFAULT_ACK_TIMEOUT,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_BATCH_ROWS,
    MAX_BATCH_BYTES_LIMIT,
    MAX_BATCH_ROWS_LIMIT,
    MIN_BATCH_BYTES,
    parse_sink_options,
)
from spark_support import spark_session

GROUP = {"group": "g", "key": "k"}
BYTES_RANGE = f"[{MIN_BATCH_BYTES}, {MAX_BATCH_BYTES_LIMIT}] bytes (a message must fit the transport's)"
ROWS_RANGE = f"[1, {MAX_BATCH_ROWS_LIMIT}] rows"
NOT_A_DURATION = "is not a duration (examples: 30, 30s, 500ms, 2m)"
DURATION_RANGE = "must be more than 0s and at most 86400s (one day)"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("maxBatchBytes", "1k", "option maxBatchBytes='1k' is not an integer"),
        ("maxBatchBytes", "", "option maxBatchBytes='' is not an integer"),
        ("maxBatchBytes", "100", f"option maxBatchBytes='100' is out of range {BYTES_RANGE}"),
        ("maxBatchBytes", "4194304", f"option maxBatchBytes='4194304' is out of range {BYTES_RANGE}"),
        ("maxBatchRows", "10.5", "option maxBatchRows='10.5' is not an integer"),
        ("maxBatchRows", "-1", f"option maxBatchRows='-1' is out of range {ROWS_RANGE}"),
        ("maxBatchRows", "99999999", f"option maxBatchRows='99999999' is out of range {ROWS_RANGE}"),
        ("ackTimeout", "soon", f"option ackTimeout='soon' {NOT_A_DURATION}"),
        ("ackTimeout", "-5s", f"option ackTimeout='-5s' {NOT_A_DURATION}"),
        ("ackTimeout", "2d", f"option ackTimeout='2d' {NOT_A_DURATION}"),
        ("ackTimeout", "0ms", f"option ackTimeout='0ms' {DURATION_RANGE}"),
        ("ackTimeout", "90000s", f"option ackTimeout='90000s' {DURATION_RANGE}"),
        ("ACKTIMEOUT", "1h", f"option ackTimeout='1h' {NOT_A_DURATION}"),
    ],
)
def test_malformed_batching_options_name_the_option_the_value_and_the_bound(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(SparkOptionError) as raised:
        parse_sink_options({**GROUP, name: value})
    assert str(raised.value) == message
    assert isinstance(raised.value, affinity.AffinityError)


def test_batching_options_accept_their_bounds_and_default_when_absent() -> None:
    low = parse_sink_options({**GROUP, "maxBatchBytes": str(MIN_BATCH_BYTES), "maxBatchRows": "1", "ackTimeout": "1ms"})
    assert (low.max_batch_bytes, low.max_batch_rows, low.ack_timeout) == (MIN_BATCH_BYTES, 1, 0.001)
    high = parse_sink_options(
        {
            **GROUP,
            "maxBatchBytes": str(MAX_BATCH_BYTES_LIMIT),
            "maxBatchRows": str(MAX_BATCH_ROWS_LIMIT),
            "ackTimeout": "1440m",
        }
    )
    assert (high.max_batch_bytes, high.max_batch_rows, high.ack_timeout) == (
        MAX_BATCH_BYTES_LIMIT,
        MAX_BATCH_ROWS_LIMIT,
        86_400.0,
    )
    default = parse_sink_options(GROUP)
    assert (default.max_batch_bytes, default.max_batch_rows, default.ack_timeout) == (
        DEFAULT_MAX_BATCH_BYTES,
        DEFAULT_MAX_BATCH_ROWS,
        DEFAULT_ACK_TIMEOUT,
    )


@pytest.mark.spark
@pytest.mark.parametrize(
    ("name", "value"), [("maxBatchBytes", "100"), ("maxBatchRows", "many"), ("ackTimeout", "forever")]
)
def test_a_spark_write_with_a_malformed_batching_option_fails_naming_it(name: str, value: str) -> None:
    from pyspark.errors import AnalysisException

    spark: Any = spark_session()
    writer = spark.range(3).write.format("affinity").option("channel", "aeron:ipc").option("streamId", "1")
    with pytest.raises(AnalysisException, match=rf"SparkOptionError: option {name}='{value}'"):
        writer.option(name, value).mode("append").save()
