"""Spark integration: the ``affinity`` PySpark data source (sink and stream source) and Arrow consumers.

>>> import affinity.spark
>>> spark = affinity.spark.configure(SparkSession.builder).getOrCreate()  # doctest: +SKIP
>>> affinity.spark.register(spark)                                   # doctest: +SKIP
>>> df.write.format("affinity").option("group", "orders").option("key", "account").save()  # doctest: +SKIP
>>> for item in affinity.spark.consume("orders", index=0, count=2):  # doctest: +SKIP
...     ...

Importing this package does not import PySpark; :func:`register` does.
"""

from __future__ import annotations

from affinity.spark.configure import configure, jar_path
from affinity.spark.consume import (
    AbortItem,
    CommitItem,
    ConsumerStats,
    DataItem,
    Item,
    SinkConsumer,
    consume,
    decode_message,
)
from affinity.spark.envelope import Envelope, Kind
from affinity.spark.errors import AckTimeoutError, EnvelopeError, RetentionError, SparkOptionError, SparkTaskError
from affinity.spark.options import OPTIONS, ValueFormat
from affinity.spark.registration import register

__all__ = [
    "OPTIONS",
    "AbortItem",
    "AckTimeoutError",
    "CommitItem",
    "ConsumerStats",
    "DataItem",
    "Envelope",
    "EnvelopeError",
    "Item",
    "Kind",
    "RetentionError",
    "SinkConsumer",
    "SparkOptionError",
    "SparkTaskError",
    "ValueFormat",
    "configure",
    "consume",
    "decode_message",
    "jar_path",
    "register",
]
