"""``register(spark)``: makes ``format("affinity")`` available; PySpark is imported only here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``affinity`` data source with ``spark`` (``spark.dataSource.register``)."""
    from affinity.spark.datasource import AffinityDataSource

    spark.dataSource.register(AffinityDataSource)
