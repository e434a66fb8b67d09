"""Rows/s through the ``affinity`` sink's two writers against Spark's ``noop`` sink, same query, same run.

``python benches/bench_spark.py [--mode group|channel] [--rows 1000000] [--runs 3] [--consumers 2] [--driver]
[--all-on-driver] [--sinks noop,affinity_jvm] [--kinds batch,stream] [--threads] [--warmup 1] [--count-only]``

With ``--driver`` an ``affinity driver`` process is started too and a fourth sink,
``affinity_driver``, writes the same rows with ``driverDir`` (every Python worker attached to that
driver) beside ``affinity`` (an embedded driver per Python worker), alternated in the same run. With
``--all-on-driver`` the driver is started and ``$AFFINITY_DIR`` names it for the Spark JVM and the
consumers: the JVM writer then publishes through it (compare with a run without the flag).
Each figure is printed with the CPU seconds the Spark JVM (and its Python workers) and the
consumers spent in the run: on a shared machine the steadier measure.

The DataFrame: ``rows`` rows of 5 columns (string key ``acct-<id % 10000>`` + 4 numeric values),
in ``local[2]``. Batch: ``spark.range`` → ``write.save()``. Streaming: the same rows as 10 Parquet
files read by ``readStream`` (one micro-batch per file, ``availableNow``). Each figure is the median
of ``runs``; ``noop`` is the ceiling (the cost of producing the rows), ``python_noop`` a Python data
source that only iterates its Arrow batches (the ceiling of any Python sink), ``affinity_python``
and ``affinity_jvm`` the sink with ``writer=python`` / ``writer=jvm`` (group mode; the JVM writer
needs its jar, ``scripts/build-jvm.sh``, and is left out with a note without it). Consumers are separate
processes (``SinkConsumer`` in group mode, a subscriber in channel mode) that decode every Arrow
body (in group mode with ``--count-only``: only read each envelope's row count) and report rows and
busy time; rows/s per consumer is rows over the time from its first to
its last message.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

#: A consumer process exits once it has been idle this long after its first message: longer than
#: the runs of the other sinks in between (on a loaded 2-core machine a streaming run of each takes
#: tens of seconds), else the affinity sinks would find no consumer.
CONSUMER_IDLE_EXIT_S = 240
#: Seconds the consumers get after the last run before they are stopped and their counts read.
CONSUMER_DRAIN_S = 5

CONSUMER = textwrap.dedent(
    """
    import json, sys, time
    mode, target, index, count, registry, out = sys.argv[1:7]
    rows = 0
    busy = 0.0
    first = last = None
    stop_after = float(sys.argv[7])
    decode = sys.argv[8] == "decode"
    if mode == "group":
        from affinity.spark import SinkConsumer, DataItem
        consumer = SinkConsumer(target, int(index), int(count), registry=registry)
        poll = lambda: [i.envelope.rows for i in consumer.poll(1000, 0.05) if isinstance(i, DataItem)
                        and (not decode or i.batch().num_rows >= 0)]
    else:
        import affinity
        from affinity.spark import decode_message, DataItem
        client = affinity.Client()
        channel, stream = target.rsplit("#", 1)
        sub = client.add_subscription(channel, int(stream))
        def poll():
            counts = []
            for raw in sub.poll_batch(1000):
                item = decode_message(raw)
                if isinstance(item, DataItem):
                    counts.append(item.batch().num_rows)
            if not counts:
                time.sleep(0.005)
            return counts
    print("ready", flush=True)
    idle_since = time.monotonic()
    while True:
        counts = poll()
        now = time.monotonic()
        if counts:
            rows += sum(counts)
            if last is not None and now - last < 0.5:
                busy += now - last
            first = first if first is not None else now
            last = now
            idle_since = now
            with open(out, "w") as f:
                json.dump({"rows": rows, "busy": busy}, f)
        elif first is not None and now - idle_since > stop_after:
            break
    """
)


def session() -> Any:
    import affinity.spark
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        affinity.spark.configure(SparkSession.builder)
        .master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    affinity.spark.register(spark)
    spark.dataSource.register(_python_noop())
    return spark


def _python_noop() -> Any:
    """A Python Arrow data source that only counts rows: the ceiling of any Python sink."""
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )

    class Writer(DataSourceArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class StreamWriter(DataSourceStreamArrowWriter):
        def write(self, iterator: Any) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class PythonNoop(DataSource):
        @classmethod
        def name(cls) -> str:
            return "python_noop"

        def writer(self, schema: Any, overwrite: bool) -> Writer:
            return Writer()

        def streamWriter(self, schema: Any, overwrite: bool) -> StreamWriter:
            return StreamWriter()

    return PythonNoop


def frame(spark: Any, rows: int) -> Any:
    return spark.range(0, rows, numPartitions=2).selectExpr(
        "concat('acct-', cast(id % 10000 AS string)) AS k",
        "id AS a",
        "id * 2 AS b",
        "cast(id AS double) AS c",
        "id % 97 AS d",
    )


class _CountingTransport:
    """A transport that only counts: the sink's own Python work, without the network."""

    queue_count = 8
    hash_count = 64

    def __init__(self) -> None:
        self.messages = 0

    def queues_of(self, keys: Any) -> list[int]:
        from affinity.groups import group_queues

        return group_queues(keys, self.hash_count, self.queue_count)

    def send(self, queue: int, payload: bytes, deadline: float) -> None:
        self.messages += 1

    def flush(self, deadline: float) -> None:
        pass

    def close(self) -> None:
        pass


def sink_work_only(rows: int) -> float:
    """Rows/s of ``write_task`` (key encoding, queues, split, Arrow IPC, envelopes) on one core."""
    import uuid

    import pyarrow as pa
    import pyarrow.compute as pc
    from affinity.spark.options import parse_sink_options
    from affinity.spark.sink import write_task

    ids = pa.array(range(rows), pa.int64())
    keys = pc.binary_join_element_wise("acct-", pc.cast(ids, pa.string()), "")
    table = pa.table({"k": keys, "a": ids, "b": ids, "c": pc.cast(ids, pa.float64()), "d": ids})
    options = parse_sink_options({"group": "bench", "key": "k"})
    return rows / timed(
        lambda: write_task(iter(table.to_batches(10_000)), options, _CountingTransport(), uuid.uuid4(), 0, 0)
    )


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants (the Spark JVM and its Python workers)."""
    stats = {int(p.name): _stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    children: dict[int, list[int]] = {}
    for pid, stat in stats.items():
        if stat is not None:
            children.setdefault(stat[0], []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        stat = stats.get(pid)
        total += stat[1] if stat else 0.0
        todo.extend(children.get(pid, []))
    return total


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of a process's live threads, summed per thread name (``/proc/<pid>/task``)."""
    by_name: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        by_name[name] = by_name.get(name, 0.0) + seconds
    return by_name


def timed(action: Any) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["group", "channel"], default="group")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument(
        "--warmup", type=int, default=1, help="unmeasured batch writes of each sink first (JIT, workers, transport)"
    )
    parser.add_argument("--driver", action="store_true", help="also the sink on a standalone affinity driver")
    parser.add_argument(
        "--all-on-driver",
        action="store_true",
        help="start an affinity driver and set $AFFINITY_DIR for the Spark JVM and the consumers "
        "(the JVM writer's publisher then uses that driver instead of an embedded one)",
    )
    parser.add_argument("--sinks", help="comma-separated subset of the sinks to run (default: all)")
    parser.add_argument(
        "--threads",
        action="store_true",
        help="print the Spark JVM's busiest threads: CPU seconds per thread name, median per run of each sink",
    )
    parser.add_argument("--kinds", default="batch,stream", help="batch, stream or both (comma-separated)")
    parser.add_argument(
        "--count-only",
        action="store_true",
        help="group mode: the consumers count each message's rows from its envelope without decoding the Arrow body",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    driver_dir = work / "driver"
    driver = (
        subprocess.Popen(
            [sys.executable, "-m", "affinity.cli", "driver", "--dir", str(driver_dir)], stdout=subprocess.PIPE
        )
        if args.driver or args.all_on_driver
        else None
    )
    if driver is not None:
        assert driver.stdout is not None and b"ready in" in driver.stdout.readline(), "affinity driver did not start"
    if args.all_on_driver:
        os.environ["AFFINITY_DIR"] = str(driver_dir)  # inherited by the consumers and the Spark JVM
    registry = work / "registry"
    from affinity.testing import loopback_channel

    if args.mode == "group":
        from affinity.groups import create_group

        create_group("bench", "bench", 64, 8, 64 << 20, registry)
        target = "bench"
        options = {"group": "bench", "key": "k", "registry": str(registry)}
    else:
        channel = loopback_channel()
        target = f"{channel}#21"
        options = {"channel": channel, "streamId": "21"}
    count = args.consumers if args.mode == "group" else 1
    outputs = [work / f"consumer{i}.json" for i in range(count)]
    script = work / "consumer.py"
    script.write_text(CONSUMER)
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                args.mode,
                target,
                str(i),
                str(count),
                str(registry),
                str(out),
                str(CONSUMER_IDLE_EXIT_S),
                "count" if args.count_only else "decode",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i, out in enumerate(outputs)
    ]
    for process in processes:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    spark = session()
    df = frame(spark, args.rows)
    files = work / "parquet"
    df.repartition(10).write.parquet(str(files))
    schema = "k string, a long, b long, c double, d long"

    def sink(writer: Any, name: str) -> Any:
        """The affinity sink that ``name`` names: ``affinity_<writer>``, or ``affinity_driver`` (the
        Python writer on the standalone driver)."""
        writer = writer.format("affinity")
        for key, value in options.items():
            writer = writer.option(key, value)
        if name == "affinity_driver":
            return writer.option("writer", "python").option("driverDir", str(driver_dir))
        return writer.option("writer", name.removeprefix("affinity_"))

    def stream(fmt: str, run: int) -> None:
        reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(files))
        writer = reader.writeStream.option("checkpointLocation", str(work / f"ckpt-{fmt}-{run}"))
        writer = sink(writer, fmt) if fmt.startswith("affinity") else writer.format(fmt)
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()

    import affinity.spark

    writers = ["python"]
    if args.mode == "group" and affinity.spark.jar_path() is not None:
        writers.append("jvm")
    else:
        print("affinity_jvm: left out (channel mode, or the jar is not built: scripts/build-jvm.sh)")
    on_driver = ("affinity_driver",) if args.driver else ()
    sinks: tuple[str, ...] = ("noop", "python_noop", *(f"affinity_{w}" for w in writers), *on_driver)
    if args.sinks:
        unknown = set(args.sinks.split(",")) - set(sinks)
        assert not unknown, f"--sinks: {sorted(unknown)} not among {list(sinks)}"
        sinks = tuple(s for s in sinks if s in args.sinks.split(","))
    kinds = [k for k in ("batch", "stream") if k in args.kinds.split(",")]
    results: dict[str, list[float]] = {f"{kind} {name}": [] for kind in kinds for name in sinks}

    def batch(name: str) -> None:
        writer = sink(df.write, name) if name.startswith("affinity") else df.write.format(name)
        writer.mode("append" if name.startswith("affinity") else "overwrite").save()

    for _ in range(args.warmup):  # warm-up: JIT, Python workers, the sink's transport
        for name in sinks:
            batch(name)
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    # CPU seconds per run (the Spark JVM with its Python workers; the consumer processes): on a
    # shared machine the steadier measure of what a sink costs.
    cpu: dict[str, list[tuple[float, float, float]]] = {name: [] for name in results}
    # With --threads: per sink, per thread name of the Spark JVM, CPU seconds of each run.
    threads: dict[str, dict[str, list[float]]] = {name: {} for name in results}

    def cpu_now() -> tuple[float, float, float]:
        on_driver = tree_cpu(driver.pid) if driver is not None else 0.0
        return tree_cpu(jvm), sum(tree_cpu(p.pid) for p in processes), on_driver

    def measured(name: str, action: Any) -> None:
        before_threads = thread_cpu(jvm) if args.threads else {}
        before = cpu_now()
        results[name].append(args.rows / timed(action))
        after = cpu_now()
        cpu[name].append((after[0] - before[0], after[1] - before[1], after[2] - before[2]))
        if args.threads:
            for thread, seconds in thread_cpu(jvm).items():
                spent = seconds - before_threads.get(thread, 0.0)
                threads[name].setdefault(thread, []).append(spent)

    for run in range(args.runs):
        for name in sinks if "batch" in kinds else ():
            measured(f"batch {name}", lambda n=name: batch(n))
        for name in sinks if "stream" in kinds else ():
            measured(f"stream {name}", lambda n=name, r=run: stream(n, r))
    time.sleep(CONSUMER_DRAIN_S)  # the last acknowledged messages are decoded and counted
    for process in processes:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
    print(f"mode {args.mode}, {args.rows} rows x 5 columns, {args.runs} runs, local[2], {os.cpu_count()} cores")
    for name, values in results.items():
        for value in values:  # one JSON line per run, for benches/harness.py
            print(json.dumps({"measurement": name, "value": round(value), "unit": "rows/s"}), flush=True)
        runs = ", ".join(f"{v:,.0f}" for v in values)
        spark_cpu = statistics.median(c[0] for c in cpu[name])
        consumer_cpu = statistics.median(c[1] for c in cpu[name])
        driver_cpu = f", driver {statistics.median(c[2] for c in cpu[name]):.2f}" if driver is not None else ""
        print(
            f"{name:<22} median {statistics.median(values):>12,.0f} rows/s   runs [{runs}]   "
            f"CPU s median: Spark {spark_cpu:.2f}, consumers {consumer_cpu:.2f}{driver_cpu}"
        )
    for kind in kinds:
        for writer in writers:
            if f"{kind} affinity_{writer}" not in results or f"{kind} noop" not in results:
                continue
            affinity_rate = statistics.median(results[f"{kind} affinity_{writer}"])
            ratio = affinity_rate / statistics.median(results[f"{kind} noop"])
            line = f"{kind}: affinity_{writer} / noop = {ratio:.0%}"
            if f"{kind} python_noop" in results:
                line += f", / python_noop = {affinity_rate / statistics.median(results[f'{kind} python_noop']):.0%}"
            print(line)
        if driver is not None and {f"{kind} affinity_python", f"{kind} affinity_driver"} <= results.keys():
            embedded = statistics.median(results[f"{kind} affinity_python"])
            standalone = statistics.median(results[f"{kind} affinity_driver"]) / embedded
            print(f"{kind}: affinity_driver (driverDir) / affinity_python (embedded) = {standalone:.0%}")
    print(f"sink work alone (no transport, one core): {sink_work_only(args.rows):,.0f} rows/s")
    for index, out in enumerate(outputs):
        report = json.loads(out.read_text()) if out.exists() else {"rows": 0, "busy": 0.0}
        rate = report["rows"] / report["busy"] if report["busy"] else 0.0
        print(f"consumer {index}: {report['rows']:,} rows, {rate:,.0f} rows/s while receiving (gaps < 0.5 s)")
    if args.threads:
        for name, by_thread in threads.items():
            # Median over the runs (a thread absent from a run spent 0 there).
            medians = {t: statistics.median(v + [0.0] * (args.runs - len(v))) for t, v in by_thread.items()}
            top = sorted(medians.items(), key=lambda item: -item[1])[:10]
            print(f"{name}: Spark JVM CPU s per run by thread name: " + ", ".join(f"{t} {s:.3f}" for t, s in top))
    spark.stop()
    if driver is not None:
        driver.terminate()
        driver.wait(30)
    shutil.rmtree(work, ignore_errors=True)  # the Parquet copy and checkpoints: tens of MB per run


if __name__ == "__main__":
    main()
