"""Automatic registration of the ``affinity`` PySpark data source.

PySpark (4.x) looks, on the first data source lookup of a session, through every installed top-level
module whose name starts with ``pyspark_`` and registers its ``DefaultSource`` under
``DefaultSource.name()`` (``pyspark/sql/worker/lookup_data_sources.py``). This package is that
module for ``affinity``: with the package installed, ``format("affinity")`` works in any session
without calling :func:`affinity.spark.register`.
"""

from __future__ import annotations

from affinity.spark.datasource import AffinityDataSource as DefaultSource

__all__ = ["DefaultSource"]
