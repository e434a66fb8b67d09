"""``register(spark)``: makes ``format("affinity")`` available; PySpark is imported only here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Register the ``affinity`` data source with ``spark`` (``spark.dataSource.register``).

    Where Spark already knows the source (the installed ``pyspark_affinity`` module registers
    it statically, the usual case, or an earlier call did), nothing is done: registering again
    would replace it and make Spark log a warning about it.
    """
    from affinity.spark.datasource import AffinityDataSource

    if _registered(spark, AffinityDataSource.name()):
        return
    spark.dataSource.register(AffinityDataSource)


def _registered(spark: SparkSession, name: str) -> bool:
    """Whether ``spark`` already has a Python data source called ``name`` (False when it cannot
    tell, e.g. under Spark Connect, which has no handle on the JVM session: then it registers)."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(name))
    except Exception:  # any Py4J or attribute error means "cannot tell"
        return False
