"""``configure(builder)``: puts the JVM writer's jar on a Spark session's classpath.

``scripts/build-jvm.sh`` (run by ``scripts/setup.sh``) builds ``affinity-spark.jar`` (the JVM data
source ``affinity`` and its native library) and installs it as ``<sys.prefix>/share/affinity/
affinity-spark.jar``; ``$AFFINITY_SPARK_JAR`` names another file. Without the jar the session uses the
Python data source, as before (docs/spark.md "Two writers").
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JAR_ENV", "JAR_NAME", "configure", "jar_path"]

#: Environment variable naming the jar (instead of the installed one).
JAR_ENV: Final = "AFFINITY_SPARK_JAR"
#: File name of the jar.
JAR_NAME: Final = "affinity-spark.jar"
#: Where ``scripts/build-jvm.sh`` installs it, under ``sys.prefix``.
JAR_DIR: Final = Path("share") / "affinity"
_JARS: Final = "spark.jars"


def jar_path() -> Path | None:
    """The JVM writer's jar: ``$AFFINITY_SPARK_JAR``, else the installed one; ``None`` when absent."""
    named = os.environ.get(JAR_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            from affinity.spark.errors import SparkOptionError

            raise SparkOptionError(f"${JAR_ENV}={named!r} is not a file")
        return path
    installed = Path(sys.prefix) / JAR_DIR / JAR_NAME
    return installed if installed.is_file() else None


def configure(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Adds the JVM writer's jar to ``spark.jars`` of ``builder`` (kept with any jars already there).

    Returns the builder, as ``delta-spark``'s ``configure_spark_with_delta_pip`` does::

        spark = affinity.spark.configure(SparkSession.builder.master("local[2]")).getOrCreate()

    Without a built jar nothing is added: ``format("affinity")`` is then the Python data source.
    Call it before ``getOrCreate()``: a running JVM does not take new jars.
    """
    jar = jar_path()
    if jar is None:
        return builder
    options: dict[str, str] = getattr(builder, "_options", {})
    current = [j for j in options.get(_JARS, "").split(",") if j]
    if str(jar) not in current:
        current.append(str(jar))
    return builder.config(_JARS, ",".join(current))
