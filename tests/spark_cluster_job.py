"""The driver program of ``spark_cluster_hosts.py``: writes into the group through ``bootstrap``,
with a classic session on the standalone master or a Spark Connect session (``remote``).

    usage: spark_cluster_job.py CONFIG     (a JSON file)

The configuration names the session (``master`` and ``host``, or ``remote``), the group's options
(``group``, ``registry``, ``bootstrap``, ``piece``) and the steps, in order:

- ``batches``: batch writes ``{"first", "rows", "partitions", "keys", "prefix", "delay"}``: rows
  ``n`` of ``first .. first + rows``, keyed ``<prefix><n // (rows / partitions)>-<n % keys>`` (each
  key in one partition), each row slowed by ``delay`` seconds (a Python UDF) and carrying the
  executor's host (column ``h``);
- ``stream``: a Structured Streaming write of a parquet file source (``maxFilesPerTrigger`` =
  ``files``): for each of ``delays`` one round of ``files`` files of ``rows`` rows each, then
  ``processAllAvailable``; file ``j`` of round ``b`` holds ``n`` of ``first + (b * files + j) * rows``
  onwards, keyed ``<prefix><j>-<n % keys>``, slowed by that round's delay;
- ``bad``: writes that must fail: ``[name, registry, bootstrap]`` each (the error is reported).

Prints one ``STEP <json>`` line per step done (``JOB-END`` last); the caller reads them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def say(step: str, **fields: Any) -> None:
    print("STEP " + json.dumps({"step": step, **fields}), flush=True)


def session(config: dict[str, Any]) -> Any:
    from pyspark.sql import SparkSession

    if "remote" in config:  # a Spark Connect client (this process runs no JVM)
        return SparkSession.builder.remote(config["remote"]).getOrCreate()
    host = config["host"]
    builder = SparkSession.builder.master(config["master"]).appName("affinity-cluster-hosts")
    if config.get("jar"):  # the JVM writer's jar, shipped to the executors by Spark (spark.jars)
        import affinity.spark

        builder = affinity.spark.configure(builder)
    for name, value in {
        "spark.ui.enabled": "false",
        "spark.driver.host": host,
        "spark.driver.bindAddress": host,
        "spark.executor.memory": "512m",
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        "spark.sql.streaming.stopTimeout": "20s",
    }.items():
        builder = builder.config(name, value)
    return builder.getOrCreate()


def main() -> None:
    from pyspark.sql.functions import col, udf

    config = json.loads(Path(sys.argv[1]).read_text())
    spark = session(config)
    # Rows per Arrow batch and per message: a partition arrives in several pieces, so a kill lands
    # after some of a task's rows were delivered (its retry sends them again).
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(config["piece"]))

    @udf("long")
    def slowly(n: int, delay: float) -> int:
        time.sleep(delay)
        return n

    @udf("string")
    def where(n: int) -> str:  # the executor's host, so the test knows whose rows arrive
        return os.environ.get("SPARK_LOCAL_IP", "")

    def sink(writer: Any, which: str, registry: str | None = None, bootstrap: str | None = None) -> Any:
        return (
            writer.format("affinity")
            .option("group", config["group"])
            .option("registry", registry or config["registry"])
            .option("key", "k")
            .option("bootstrap", bootstrap or config["bootstrap"])
            .option("maxBatchRows", str(config["piece"]))
            .option("writer", which)
        )

    for batch in config.get("batches", []):
        first, rows, keys, prefix = batch["first"], batch["rows"], batch["keys"], batch["prefix"]
        per = rows // batch["partitions"]
        df = spark.range(first, first + rows, numPartitions=batch["partitions"])
        key = f"concat('{prefix}', cast(floor(id / {per}) AS string), '-', cast(id % {keys} AS string)) AS k"
        df = df.selectExpr(key, "id", f"cast({batch['delay']} AS double) AS d")
        df = df.select("k", slowly("id", "d").alias("n"), where("id").alias("h"))
        sink(df.write, batch.get("writer", "auto")).mode("append").save()
        say("batch", first=first, clients={d: _clients(d) for d in config.get("driver_dirs", [])})

    stream = config.get("stream")
    if stream is not None:
        source = Path(stream["dir"])
        source.mkdir()
        files, rows, keys, prefix = stream["files"], stream["rows"], stream["keys"], stream["prefix"]
        df = spark.readStream.schema("k string, n long, d double").option("maxFilesPerTrigger", files)
        df = df.parquet(str(source)).select("k", slowly(col("n"), col("d")).alias("n"), where("n").alias("h"))
        query = sink(df.writeStream, stream.get("writer", "auto")).option("checkpointLocation", stream["checkpoint"])
        query = query.start()
        try:
            for round_, delay in enumerate(stream["delays"]):
                for j in range(files):
                    first = stream["first"] + (round_ * files + j) * rows
                    numbers = list(range(first, first + rows))
                    table = pa.table({"k": [f"{prefix}{j}-{n % keys}" for n in numbers], "n": numbers})
                    table = table.append_column("d", pa.array([float(delay)] * rows))
                    hidden = source / f".{round_:03d}-{j}.parquet"  # the file source skips dot files
                    pq.write_table(table, hidden)
                    os.replace(hidden, source / f"{round_:03d}-{j}.parquet")
                query.processAllAvailable()
                progress = query.lastProgress
                say("round", round=round_, batch=None if progress is None else progress["batchId"])
            error = query.exception()
            say("stream", exception=None if error is None else str(error))
        finally:
            query.stop()

    for name, which, registry, bootstrap in config.get("bad", []):
        df = spark.range(0, 10).selectExpr("'bad' AS k", "id AS n")
        started = time.monotonic()
        try:
            sink(df.write, which, registry, bootstrap).mode("append").save()
        except Exception as error:  # the test reads the type and the message
            get_message = getattr(error, "getMessage", None)
            text = (str(get_message()) if callable(get_message) else "") or str(error)
            seconds = round(time.monotonic() - started, 1)
            say("bad", case=name, error=type(error).__name__, message=text, seconds=seconds)
        else:
            say("bad", case=name, error=None)
    print("JOB-END", flush=True)
    spark.stop()


def _clients(driver_dir: str) -> int:
    import affinity

    return int(affinity.driver_stat(driver_dir).counter("Clients"))


if __name__ == "__main__":
    main()
