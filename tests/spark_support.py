"""Shared helpers of the Spark tests: the session (one per test process) and bounded waits."""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

#: Set (as CI does) to fail instead of skipping when PySpark or Java is missing.
REQUIRE_ENV = "AFFINITY_REQUIRE_SPARK"
#: An embedded driver's private directory, ``<root>-embedded/<pid>-<n>``, in a line of /proc/<pid>/maps.
_EMBEDDED_DIR = re.compile(r"(/\S*-embedded/\d+-\d+)/")


def spark_session() -> Any:
    """A ``local[2]`` session (4 attempts per task, UI off, ERROR logging), created once per process."""
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import affinity.spark

    if affinity.spark.jar_path() is None and os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail("the JVM writer's jar is not built (scripts/build-jvm.sh): the Spark tests run both writers")
    builder = affinity.spark.configure(SparkSession.builder)
    spark = (
        builder.master("local[2,4]")
        .appName("affinity-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "20s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    affinity.spark.register(spark)
    return spark


#: The sink's writers the tests run against (docs/spark.md "Two writers").
WRITERS = ("python", "jvm")


def writer_param(writer: str) -> Any:
    """``writer`` as a pytest parameter: the JVM one skips, saying why, where its jar is not built
    (never under ``AFFINITY_REQUIRE_SPARK=1``, where :func:`spark_session` fails instead)."""
    import affinity.spark

    if writer == "jvm" and affinity.spark.jar_path() is None and os.environ.get(REQUIRE_ENV) != "1":
        return pytest.param(writer, marks=pytest.mark.skip(reason="the JVM writer's jar is not built"))
    return pytest.param(writer)


def wait_for(condition: Callable[[], bool], timeout: float, what: str, step: float = 0.01) -> None:
    """Poll ``condition`` until true or ``timeout`` seconds pass (then fail naming ``what``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def _descendants(root: int) -> set[int]:
    """The live processes under ``root`` (its Spark JVM and that JVM's Python workers)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def driver_dirs(pid: int) -> set[Path]:
    """The embedded driver directories process ``pid`` has mapped (none once it is gone)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {Path(match) for match in _EMBEDDED_DIR.findall(maps)}


def worker_driver_dirs() -> dict[int, set[Path]]:
    """The embedded driver directories each process under this one has mapped, by pid."""
    held = {pid: driver_dirs(pid) for pid in _descendants(os.getpid())}
    return {pid: dirs for pid, dirs in held.items() if dirs}


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def new_worker_driver_dirs(before: dict[int, set[Path]]) -> dict[int, set[Path]]:
    """:func:`worker_driver_dirs` of the processes that were not in ``before``."""
    return {pid: dirs for pid, dirs in worker_driver_dirs().items() if pid not in before}


def assert_exit_removes_driver_dirs(
    held: dict[int, set[Path]], timeout: float = 30.0, *, swept_after_kill: bool = False
) -> None:
    """Waits for the processes of ``held`` to exit, then fails if any of their directories is left.

    ``swept_after_kill``: for a streaming source stopped mid-read. Spark SIGKILLs a Python worker
    whose interrupted task outlives ``spark.python.task.killTimeout`` (pyspark's daemon), so its
    exit handlers may never run; then the next embedded driver started on the host must sweep
    the dead process's directory, and that is what is checked."""
    assert held, "no Spark worker holds an embedded driver directory"
    wait_for(lambda: not any(is_alive(pid) for pid in held), timeout, f"processes {sorted(held)} to exit", step=0.05)
    left = sorted(str(path) for dirs in held.values() for path in dirs if path.exists())
    if left and swept_after_kill:
        import affinity

        affinity.Client().close()  # an embedded driver's start sweeps the directories of dead processes
        left = [path for path in left if Path(path).exists()]
        assert not left, f"processes {sorted(held)} died leaving {left}, and the next embedded driver kept them"
    assert not left, f"processes {sorted(held)} exited leaving {left}"


class Collected:
    """One sink consumer of every queue of a group, polled on a thread: rows ``(k, n)`` and the
    commit markers, in arrival order."""

    def __init__(self, client: Any, group: str, registry: str, **group_options: Any) -> None:
        from affinity.spark import SinkConsumer

        self.consumer = SinkConsumer(group, 0, 1, client=client, registry=registry, **group_options)
        self.rows: list[tuple[str, int]] = []
        self.commits: list[Any] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from affinity.spark import CommitItem, DataItem

        while not self._stop.is_set():
            for item in self.consumer.poll(1000, 0.05):
                with self._lock:
                    if isinstance(item, DataItem):
                        batch = item.batch()
                        self.rows.extend(zip(batch.column("k").to_pylist(), batch.column("n").to_pylist(), strict=True))
                    elif isinstance(item, CommitItem):
                        self.commits.append(item)

    def commit_count(self) -> int:
        """Commit markers received so far (one per queue and committed batch)."""
        with self._lock:
            return len(self.commits)

    def stop(self) -> None:
        """Stops polling and leaves the group."""
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()


def full_text(error: BaseException) -> str:
    """The whole message of a Spark error (its ``str`` cuts the Python traceback short; a JVM
    ``IllegalArgumentException`` has its message in ``str`` only)."""
    get_message = getattr(error, "getMessage", None)
    message = str(get_message()) if callable(get_message) else ""
    return message or str(error)


def check_once_and_in_order(rows: list[tuple[str, int]], expected: set[tuple[str, int]]) -> None:
    """Every expected row arrived once, and each key's numbers in increasing order."""
    assert len(rows) == len(expected), f"{len(rows) - len(expected)} rows more than sent (duplicates)"
    assert set(rows) == expected
    last: dict[str, int] = {}
    for key, n in rows:
        assert n > last.get(key, -1), f"key {key!r}: {n} arrived after {last[key]}"
        last[key] = n


def write_parquet_files_in_order(directory: Path, tables: list[Any]) -> None:
    """Writes ``tables`` as ``00.parquet``, ``01.parquet``, ... with modification times one second apart.

    Spark's file source takes the oldest files first, by modification time in milliseconds, and
    files written within one millisecond come in the directory's order, which is not their
    names' order. A test that expects micro-batch ``i`` to hold file ``i`` needs distinct times.
    """
    start = time.time() - len(tables)
    for index, table in enumerate(tables):
        path = directory / f"{index:02d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (start + index, start + index))


def publish_and_read_back(spark: Any, client: Any, group: str, registry: str, table: str, timeout: float) -> None:
    """Publishes 20 messages into ``group`` and checks that the memory table ``table`` (fed by an
    ``affinity`` stream source of the group) holds exactly them, in order."""
    from affinity.groups import GroupPublisher

    with GroupPublisher(client, group, registry=registry) as publisher:
        sent = [f"m{i}".encode() for i in range(20)]
        for payload in sent:
            wait_for(lambda p=payload: publisher.publish(b"key", p) > 0, timeout, "the source joining the group")
        rows: list[Any] = []

        def read_all() -> bool:
            rows[:] = spark.sql(f"SELECT value FROM {table}").collect()
            return len(rows) >= len(sent)

        wait_for(read_all, timeout, "every message in the memory table", step=0.2)
    assert [bytes(r.value) for r in rows] == sent


def free_tcp_port() -> int:
    """A TCP port on loopback that nothing listens on now (for Spark's master, UIs and servers)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


_GROUP_NUMBERS = iter(range(1_000_000))


def new_group(registry: str, prefix: str, hash_count: int, queue_count: int) -> str:
    """Creates a group of a fresh name (``prefix`` + a number) in ``registry``; returns the name."""
    from affinity.groups import create_group

    name = f"{prefix}{next(_GROUP_NUMBERS)}"
    create_group(name, f"__{name}__", hash_count, queue_count, 8 << 20, registry)
    return name
