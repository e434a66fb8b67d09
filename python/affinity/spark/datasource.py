"""The PySpark Python Data Source ``affinity``: sink writers (batch, streaming) and the stream reader."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from affinity.spark.clients import check_driver
from affinity.spark.envelope import NIL_QUERY, Kind
from affinity.spark.errors import SparkOptionError, SparkTaskError
from affinity.spark.options import SinkOptions, parse_sink_options, parse_source_options
from affinity.spark.sink import TaskResult, check_group, publish_markers, transport_for, validate_schema, write_task
from affinity.spark.source import GROUP_SOURCE_BINARY_SCHEMA, SOURCE_BINARY_SCHEMA, GroupStreamSource, StreamSource

__all__ = ["FORMAT_NAME", "AffinityCommitMessage", "AffinityDataSource"]

#: The name given to ``format(...)``.
FORMAT_NAME: Final = "affinity"
#: Time zone of ``TimestampType`` in the Arrow schema checked on the driver. PySpark's own data source
#: read path does the same (``to_arrow_schema(..., timezone="UTC")`` in
#: ``pyspark/sql/worker/plan_data_source_read.py``): the planning worker has no session to ask. The
#: batches a task receives carry the session time zone; the instants are UTC either way.
ARROW_SCHEMA_TIMEZONE: Final = "UTC"
#: Task-local properties Spark sets on every task of a streaming query's micro-batch.
QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"


@dataclass
class AffinityCommitMessage(WriterCommitMessage):
    """What one write task sent (returned to the driver's commit/abort)."""

    query_id: str
    batch_id: int
    partition: int
    rows: int
    messages: int
    last_sequences: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def of(result: TaskResult) -> AffinityCommitMessage:
        """From the task's result."""
        return AffinityCommitMessage(
            str(result.query_id),
            result.batch_id,
            result.partition,
            result.rows,
            result.messages,
            dict(result.last_sequences),
        )

    def result(self) -> TaskResult:
        """Back to a task result."""
        return TaskResult(
            uuid.UUID(self.query_id),
            self.batch_id,
            self.partition,
            self.rows,
            self.messages,
            dict(self.last_sequences),
        )


def _spark_schema_check(schema: StructType, options: SinkOptions) -> None:
    try:
        arrow_schema = to_arrow_schema(schema, timezone=ARROW_SCHEMA_TIMEZONE)
    except Exception as error:  # pyspark raises its own errors for unsupported types
        raise SparkOptionError(f"the DataFrame's schema cannot be written as Arrow: {error!r}") from None
    validate_schema(arrow_schema, options)
    if options.group is not None:
        check_group(options)
    check_driver(options.driver_dir)


def _task_partition() -> tuple[int, dict[str, str | None]]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise SparkTaskError("the affinity sink's write() runs only inside a Spark task")
    properties = {name: context.getLocalProperty(name) for name in (QUERY_ID_PROPERTY, BATCH_ID_PROPERTY)}
    return context.partitionId(), properties


def _results(messages: list[WriterCommitMessage | None]) -> list[TaskResult]:
    return [m.result() for m in messages if isinstance(m, AffinityCommitMessage)]


class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("affinity")``: one query id per ``save()``, batch id 0."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.query_id = uuid.uuid4()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AffinityCommitMessage:
        """Send this partition's rows; returns once they are all acknowledged."""
        partition, _ = _task_partition()
        transport = transport_for(self.options)
        return AffinityCommitMessage.of(write_task(iterator, self.options, transport, self.query_id, 0, partition))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit markers to every queue."""
        transport = transport_for(self.options)
        publish_markers(transport, Kind.COMMIT, self.query_id, 0, _results(messages), self.options.ack_timeout)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Abort markers to every queue: consumers drop the rows of this write."""
        transport = transport_for(self.options)
        publish_markers(transport, Kind.ABORT, self.query_id, 0, [], self.options.ack_timeout)


class StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("affinity")``: the query's id and the micro-batch id on every message."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AffinityCommitMessage:
        """Send this partition's rows of the micro-batch; returns once they are all acknowledged."""
        partition, properties = _task_partition()
        raw_query, raw_batch = properties[QUERY_ID_PROPERTY], properties[BATCH_ID_PROPERTY]
        if raw_query is None or raw_batch is None:
            raise SparkTaskError(
                f"Spark did not set {QUERY_ID_PROPERTY!r}/{BATCH_ID_PROPERTY!r} on this streaming task "
                "(micro-batch triggers only; continuous processing is not supported)"
            )
        transport = transport_for(self.options)
        result = write_task(iterator, self.options, transport, uuid.UUID(raw_query), int(raw_batch), partition)
        return AffinityCommitMessage.of(result)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Commit markers for ``batchId`` to every queue."""
        results = _results(messages)
        if not results:
            return  # no task ran: nothing was sent, nothing to commit
        transport = transport_for(self.options)
        publish_markers(transport, Kind.COMMIT, results[0].query_id, batchId, results, self.options.ack_timeout)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Abort markers for ``batchId`` (query id unknown when every task failed: the nil id, meaning any)."""
        results = _results(messages)
        query_id = results[0].query_id if results else NIL_QUERY
        transport = transport_for(self.options)
        publish_markers(transport, Kind.ABORT, query_id, batchId, [], self.options.ack_timeout)


class AffinityDataSource(DataSource):
    """The ``affinity`` format: a sink into a consumer group or a channel, and a stream source."""

    @classmethod
    def name(cls) -> str:
        """``affinity``."""
        return FORMAT_NAME

    def schema(self) -> str:
        """The source's schema without a user schema: binary ``value`` plus metadata columns."""
        source = parse_source_options(self.options)
        if source.value.value != "binary":
            raise SparkOptionError(
                "option value='arrow' on the source needs the rows' schema: spark.readStream.schema(...)"
            )
        return GROUP_SOURCE_BINARY_SCHEMA if source.group is not None else SOURCE_BINARY_SCHEMA

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        """The batch writer (options and schema checked here, on the driver)."""
        options = parse_sink_options(self.options)
        _spark_schema_check(schema, options)
        return BatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        """The streaming writer (options and schema checked here, on the driver)."""
        options = parse_sink_options(self.options)
        _spark_schema_check(schema, options)
        return StreamWriter(options)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        """The stream reader; it runs on the driver and keeps a replay window of what it read."""
        options = parse_source_options(self.options)
        check_driver(options.driver_dir)
        if options.group is not None:
            return GroupStreamSource(options, to_arrow_schema(schema, timezone=ARROW_SCHEMA_TIMEZONE))
        return StreamSource(options, to_arrow_schema(schema, timezone=ARROW_SCHEMA_TIMEZONE))
