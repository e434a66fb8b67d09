"""The Spark generator of the demo: a Structured Streaming query writing account events with ``format("affinity")``.

Run by the orchestrator as ``python -m affinity.demo.spark_job ...``. A local session
(``local[2]``, UI off, log level ERROR) reads the demo's streaming source
(:class:`AccountEventsSource`: event ``v`` is account ``v % accounts``, sequence number
``v // accounts + 1``, due at ``start + v / rate``) and writes it into the consumer group::

    spark.readStream.format("affinity_demo_events").load()
         .writeStream.format("affinity").option("group", ...).option("key", "account").start()

The query's checkpoint and start file go in ``--work-dir``, which the orchestrator makes and
removes (it SIGKILLs the job when the demo fails, so the job cannot be trusted to clean up);
run by hand without it, the job uses a temporary folder of its own.

Each micro-batch has one partition per core; partition ``p`` holds the accounts with
``account % partitions == p`` in increasing ``v``, so every account's events are in one partition
and in order, and the sink keeps that order into the group. Once every event is committed the
query stops and a final progress line says ``done``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from affinity.demo import protocol
from affinity.demo.settings import (
    FLUSH_TIMEOUT,
    SPARK_MASTER,
    SPARK_PARTITIONS,
    SPARK_SOURCE_NAME,
    SPARK_STARTUP_TIMEOUT,
    SPARK_WORK_PREFIX,
    STATUS_INTERVAL,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.sql import SparkSession

#: Schema of the generated events: the event time is a Spark ``TimestampType`` (an instant, in
#: microseconds), carried end to end: the source yields it as an Arrow ``timestamp[us, UTC]``
#: column, the sink writes it into the group as an Arrow timestamp column of the session's time
#: zone, and the consumers read the instant back (:func:`affinity.demo.records.event_times_ns`).
EVENT_SCHEMA = "account long, seq long, event_time timestamp"
#: File (in the query's work folder) where the source writes when the clock started (ns since the epoch).
START_FILE = "generation-start-ns"
#: Seconds of events in the warm-up batch (see :class:`AccountEventsReader`).
WARMUP_SECONDS = 1


def warmup_events(rate: int, total: int) -> int:
    """Events of the warm-up batch."""
    return min(total, rate * WARMUP_SECONDS)


def start_clock(start_file: Path) -> int:
    """Writes now (ns since the epoch) to ``start_file`` atomically and returns it."""
    # Whole microseconds: event times travel as microseconds, and event ``warmup`` is due exactly then.
    origin = time.time_ns() // 1000 * 1000
    partial = start_file.with_suffix(".partial")
    partial.write_text(str(origin))
    partial.replace(start_file)  # the reader never sees half a number
    return origin


@dataclass(frozen=True)
class AccountRange(InputPartition):
    """Events ``start <= v < end`` of the accounts with ``account % partitions == partition``.

    It carries everything :meth:`AccountEventsReader.read` needs: Spark may build a new reader in
    the worker that reads a partition, so the reader's own state is not used there.
    """

    partition: int
    partitions: int
    start: int
    end: int
    accounts: int
    rate: int
    warmup: int
    #: When the warm-up events were generated.
    warmup_ns: int
    #: When event ``warmup`` was due (the clock of the steady stream); 0 while warming up.
    origin_ns: int

    def due_us(self, values: Any) -> Any:
        """When each event was due, in microseconds since the epoch (numpy arrays in and out)."""
        import numpy as np

        steady = self.origin_ns + (values - self.warmup) * 1_000_000_000 // self.rate
        return np.where(values < self.warmup, self.warmup_ns, steady) // 1000


class AccountEventsReader(DataSourceStreamReader):
    """Offsets are event counts (``{"value": n}``); the latest is how many are due by now.

    The first micro-batch of a query is slow (Python workers start, the sink joins the group), so
    the source warms up: it offers one second of events at once and starts its clock only once
    that batch is committed. The job (which sees the query's progress) then writes the time to
    the ``startFile`` option's path, the demo's t = 0; from then on events are due at ``rate``
    per second. (``commit`` cannot be the signal: Spark calls it only when it plans the next
    batch, and there is none before the clock starts.)
    """

    def __init__(self, options: dict[str, str]) -> None:
        self.accounts = int(options["accounts"])
        self.rate = int(options["rate"])
        self.total = int(options["total"])
        self.start_file = Path(options["startfile"])
        self.warmup = warmup_events(self.rate, self.total)
        self.warmup_ns = 0
        self.origin_ns = 0

    def initialOffset(self) -> dict[str, int]:
        """Nothing generated yet."""
        return {"value": 0}

    # The no-argument form: PySpark 4.0 and 4.1 call it so, and later versions still accept it.
    def latestOffset(self) -> dict[str, int]:  # type: ignore[override]
        """Events due by now, at most ``total`` (the warm-up events until the clock starts)."""
        if not self.origin_ns:
            self.warmup_ns = self.warmup_ns or time.time_ns()
            if not self.start_file.exists():
                return {"value": self.warmup}
            self.origin_ns = int(self.start_file.read_text())
        due = self.warmup + (time.time_ns() - self.origin_ns) * self.rate // 1_000_000_000
        return {"value": min(self.total, due)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[AccountRange]:
        """One range per partition (empty when nothing new is due)."""
        if end["value"] <= start["value"]:
            return []
        return [
            AccountRange(
                p,
                SPARK_PARTITIONS,
                start["value"],
                end["value"],
                self.accounts,
                self.rate,
                self.warmup,
                self.warmup_ns,
                self.origin_ns,
            )
            for p in range(SPARK_PARTITIONS)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's events as one Arrow batch."""
        import numpy as np
        import pyarrow as pa

        if not isinstance(partition, AccountRange):
            raise TypeError(f"not a partition of the demo source: {partition!r}")
        values = np.arange(partition.start, partition.end, dtype=np.int64)
        values = values[(values % partition.accounts) % partition.partitions == partition.partition]
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(values % partition.accounts),
                pa.array(values // partition.accounts + 1),
                pa.array(partition.due_us(values), type=pa.timestamp("us", tz="UTC")),
            ],
            names=["account", "seq", "event_time"],
        )

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release."""


class AccountEventsSource(DataSource):
    """The demo's event generator as a streaming source (options ``accounts``, ``rate``, ``total``, ``startFile``)."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return SPARK_SOURCE_NAME

    def schema(self) -> str:
        """account, seq, event_time (a timestamp)."""
        return EVENT_SCHEMA

    def streamReader(self, schema: Any) -> AccountEventsReader:
        """The reader."""
        return AccountEventsReader(dict(self.options))


def session() -> SparkSession:
    """A local session: ``local[2]``, UI off, log level ERROR, the sink's JVM writer when its jar is built."""
    from pyspark.sql import SparkSession

    import affinity.spark

    spark = (
        affinity.spark.configure(SparkSession.builder)
        .master(SPARK_MASTER)
        .appName("affinity-pipeline-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(SPARK_PARTITIONS))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def committed_events(query: Any) -> int:
    """Events the query has committed (end offset of its last completed batch)."""
    progress = query.lastProgress
    if progress is None or not progress["sources"]:
        return 0
    end = progress["sources"][0]["endOffset"]
    if end is None:
        return 0
    value = json.loads(end) if isinstance(end, str) else end
    return int(value["value"])


#: Phases of a micro-batch that Spark times (``durationMs`` of the query's progress), in the order
#: they run; logged per batch so the log shows where a batch's time went.
PROGRESS_PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")


def progress_line(progress: dict[str, Any]) -> str:
    """One micro-batch's timings: ``batch 12: 4,000 rows, latestOffset 3 ms, ..., triggerExecution 410 ms``."""
    durations = progress.get("durationMs") or {}
    phases = ", ".join(f"{name} {durations[name]} ms" for name in PROGRESS_PHASES if name in durations)
    return f"batch {progress.get('batchId')}: {progress.get('numInputRows', 0):,} rows, {phases}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m affinity.demo.spark_job``."""
    parser = argparse.ArgumentParser(prog="python -m affinity.demo.spark_job", description=__doc__)
    parser.add_argument("--group", required=True)
    parser.add_argument("--registry", required=True)
    parser.add_argument("--accounts", type=int, required=True)
    parser.add_argument("--rate", type=int, required=True)
    parser.add_argument("--total", type=int, required=True)
    parser.add_argument("--driver-dir", help="the standalone driver every Spark writer attaches to (driverDir)")
    parser.add_argument(
        "--work-dir", type=Path, help="folder for the checkpoint and start file, made and removed by the caller"
    )
    args = parser.parse_args(argv)
    if args.work_dir is not None:
        return run_query(args, args.work_dir)
    with tempfile.TemporaryDirectory(prefix=SPARK_WORK_PREFIX) as work:
        return run_query(args, Path(work))


def run_query(args: argparse.Namespace, work: Path) -> int:
    """Runs the query with its files in ``work``; the exit status of :func:`main`."""
    import affinity.spark

    spark = session()
    affinity.spark.register(spark)
    spark.dataSource.register(AccountEventsSource)
    start_file = work / START_FILE
    events = (
        spark.readStream.format(SPARK_SOURCE_NAME)
        .option("accounts", str(args.accounts))
        .option("rate", str(args.rate))
        .option("total", str(args.total))
        .option("startFile", str(start_file))
        .load()
    )
    writer = (
        events.writeStream.format("affinity")
        .option("group", args.group)
        .option("key", "account")
        .option("registry", args.registry)
        .option("checkpointLocation", str(work / "checkpoint"))
        .queryName("affinity_pipeline_demo")
    )
    if args.driver_dir is not None:
        writer = writer.option("driverDir", args.driver_dir)
    query = writer.start()
    deadline = time.monotonic() + SPARK_STARTUP_TIMEOUT
    while committed_events(query) < warmup_events(args.rate, args.total):
        if query.exception() is not None or time.monotonic() > deadline:
            print(f"spark_job: the warm-up batch was not committed: {query.exception()}", file=sys.stderr)
            return 1
        time.sleep(0.05)
    start_ns = start_clock(start_file)
    generation_end = time.monotonic() + args.total / args.rate + FLUSH_TIMEOUT
    committed = 0
    # The warm-up batch is logged but not timed (Python workers start, the sink joins the group).
    logged = -1
    for progress in query.recentProgress:
        print(f"spark_job: warm-up {progress_line(progress)}", file=sys.stderr, flush=True)
        logged = max(logged, progress["batchId"])
    batch_ms: list[int] = []
    sink_ms: list[int] = []
    while committed < args.total:
        failure = query.exception()
        if failure is not None:
            print(f"spark_job: the query failed: {failure}", file=sys.stderr)
            return 1
        if time.monotonic() > generation_end:
            print(f"spark_job: only {committed} of {args.total} events committed in time", file=sys.stderr)
            return 1
        committed = committed_events(query)
        for progress in query.recentProgress:
            if progress["batchId"] > logged:
                print(f"spark_job: {progress_line(progress)}", file=sys.stderr, flush=True)
                logged = progress["batchId"]
                durations = progress.get("durationMs") or {}
                if progress.get("numInputRows") and "triggerExecution" in durations:
                    batch_ms.append(int(durations["triggerExecution"]))
                    sink_ms.append(int(durations.get("addBatch", 0)))
        print(protocol.encode(protocol.GeneratorProgress(start_ns, committed, False)), flush=True)
        time.sleep(STATUS_INTERVAL)
    query.stop()
    print(protocol.encode(protocol.GeneratorProgress(start_ns, committed, True, batch_ms, sink_ms)), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
