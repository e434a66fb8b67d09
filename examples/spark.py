"""The README's Spark example: a batch DataFrame written into a consumer group, read by two consumers.

Needs pyspark (``pip install '.[spark]'``) and Java 17. The consumers run as threads here; in a
real deployment each is a process of its own, on any host. Spark starts in about 10-30 s.
"""

import os
import sys
import tempfile
import threading

import affinity.spark
from affinity.groups import create_group
from affinity.spark import DataItem, consume
from pyspark.sql import SparkSession

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's Python workers need affinity too

with tempfile.TemporaryDirectory(prefix="affinity-example-") as registry:
    create_group("orders", hash_prefix="orders", hash_count=64, queue_count=8, queue_size=64 << 20, registry=registry)
    accounts: list[set[str]] = [set(), set()]
    rows = [0, 0]
    stop = threading.Event()

    def consumer(index: int) -> None:
        for item in consume("orders", index=index, count=2, registry=registry, stop=stop):  # one per process
            if isinstance(item, DataItem):  # also CommitItem (the batch is whole), AbortItem
                batch = item.batch()  # pyarrow.RecordBatch
                rows[index] += batch.num_rows
                accounts[index].update(batch.column("account").to_pylist())

    threads = [threading.Thread(target=consumer, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    spark = affinity.spark.configure(builder).getOrCreate()  # the JVM writer's jar, when built
    try:  # Spark finds the "affinity" format by itself (affinity.spark.register(spark) is optional)
        df = spark.range(1000).selectExpr("concat('account-', id % 10) AS account", "id AS amount")
        # Returns once the group's consumers acknowledged every row.
        df.write.format("affinity").option("group", "orders").option("key", "account").option(
            "registry", registry
        ).mode("append").save()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        spark.stop()
    print("rows delivered:", sum(rows))
    print("every account reached one consumer:", not accounts[0] & accounts[1])
