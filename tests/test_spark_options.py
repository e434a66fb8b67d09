"""The batching and back-pressure options: every malformed value is refused with the option and value named."""

from __future__ import annotations

import re
import tempfile
import uuid
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
    parse_source_options,
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
        ("ACKTIMEOUT", "1d", f"option ackTimeout='1d' {NOT_A_DURATION}"),
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


#: Bound of the wait for a streaming query with a malformed option to fail.
STREAM_FAILURE_TIMEOUT_S = 120

#: Channel URIs that start like one but do not parse: each names the key and the value at fault.
MALFORMED_CHANNELS = [
    ("aeron:udp?endpoint=127.0.0.1:99999", "endpoint"),
    ("aeron:udp?endpoint=127.0.0.1:40123|term-length=1000", "term-length"),
    ("aeron:udp?endpoint=127.0.0.1:40123|no-such-key=1", "no-such-key"),
    ("aeron:udp?term-length=65536", "needs endpoint"),
    # Parses, but the driver would refuse it inside a task.
    ("aeron:udp?endpoint=127.0.0.1:40123|cc=cubic", "cc=cubic .* is not supported"),
    ("aeron:udp?control=127.0.0.1:40124", "control-mode .* is not supported"),
]


@pytest.mark.parametrize(("channel", "key"), MALFORMED_CHANNELS)
def test_a_malformed_channel_uri_is_refused_by_the_option_parsers(channel: str, key: str) -> None:
    for parse in (parse_sink_options, parse_source_options):
        with pytest.raises(SparkOptionError, match=rf"^option channel='{re.escape(channel)}': .*{key}") as raised:
            parse({"channel": channel, "streamId": "1"})
        assert isinstance(raised.value, affinity.ConfigError)


def _jobs_of(spark: Any, group: str) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


@pytest.mark.spark
@pytest.mark.parametrize(("channel", "key"), MALFORMED_CHANNELS[:1])
def test_a_spark_write_with_a_malformed_channel_fails_at_plan_time_before_any_task(channel: str, key: str) -> None:
    from pyspark.errors import AnalysisException

    spark: Any = spark_session()
    group = f"malformed-channel-write-{uuid.uuid4()}"
    spark.sparkContext.setJobGroup(group, "a write whose channel does not parse")
    try:
        writer = spark.range(3).write.format("affinity").option("channel", channel).option("streamId", "1")
        with pytest.raises(AnalysisException, match=rf"SparkOptionError: option channel='{re.escape(channel)}'"):
            writer.mode("append").save()
        assert _jobs_of(spark, group) == [], "the write ran a job: the URI was found malformed inside a task"
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)


@pytest.mark.spark
def test_a_spark_stream_with_a_malformed_channel_fails_when_it_is_planned() -> None:
    from pyspark.errors import AnalysisException, StreamingQueryException

    spark: Any = spark_session()
    channel, key = MALFORMED_CHANNELS[0]
    source = spark.readStream.format("affinity").option("channel", channel).option("streamId", "1")
    with pytest.raises(AnalysisException, match=rf"SparkOptionError: option channel='{re.escape(channel)}': .*{key}"):
        source.load()
    sink = spark.readStream.format("rate").load().writeStream.format("affinity")
    sink = sink.option("channel", channel).option("streamId", "1")
    with tempfile.TemporaryDirectory() as checkpoint:
        query = sink.option("checkpointLocation", checkpoint).start()
        try:
            # Spark plans a streaming write on its query thread: the query fails there, on the driver.
            with pytest.raises(StreamingQueryException) as raised:
                query.awaitTermination(STREAM_FAILURE_TIMEOUT_S)
        finally:
            query.stop()
    message = str(raised.value)
    assert f"SparkOptionError: option channel='{channel}'" in message, message
    assert "stage failure" not in message, f"the sink failed inside a task: {message}"


@pytest.mark.parametrize(("text", "seconds"), [("30", 30.0), ("1.5s", 1.5), ("24h", 86_400.0), (" 2m ", 120.0)])
def test_ack_timeout_is_read_with_the_one_duration_grammar_a_bare_number_in_seconds(text: str, seconds: float) -> None:
    assert parse_sink_options({**GROUP, "ackTimeout": text}).ack_timeout == seconds
