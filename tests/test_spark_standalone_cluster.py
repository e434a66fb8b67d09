"""A Spark standalone cluster from the pip package (``spark-class ...deploy.master.Master`` and
``...deploy.worker.Worker``, 1 core and 1 GiB), on loopback: the worker is started with
``AFFINITY_DIR`` naming a standalone ``affinity driver``, and its executor's Python workers attach
to that driver without any option, while the driver program (which publishes the commit markers)
has no ``AFFINITY_DIR`` and uses an embedded driver. Rows and commits arrive once, in order per key.

Loopback only: separate hosts (network namespaces) are not built here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import affinity
import pytest
from affinity.driver import DRIVER_DIR_ENV
from affinity.groups import create_group
from conftest import StandaloneDriver
from spark_support import REQUIRE_ENV, Collected, check_once_and_in_order, free_tcp_port, wait_for

pytestmark = pytest.mark.spark

#: Seconds a master or worker may take to start, and a job to run, on a loaded machine.
START_TIMEOUT_S = 240.0
QUEUE_COUNT = 4
ROWS = 2000
#: The driver program: writes ROWS rows into the group, then prints how many clients the standalone
#: driver had (the executor's Python workers, still alive until the application ends).
JOB = textwrap.dedent(
    """
    import json, sys
    import affinity
    from pyspark.sql import SparkSession
    master, group, registry, driver_dir, rows = sys.argv[1:6]
    spark = (SparkSession.builder.master(master).appName("affinity-cluster-test")
             .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.executor.memory", "512m")
             .config("spark.cores.max", "1").getOrCreate())
    half = int(rows) // 2
    df = spark.range(0, int(rows), numPartitions=2).selectExpr(
        f"concat('p', cast(floor(id / {half}) AS string), '-', cast(id % 20 AS string)) AS k", "id AS n")
    df.write.format("affinity").option("group", group).option("registry", registry).option("key", "k") \\
        .mode("append").save()
    clients = affinity.driver_stat(driver_dir).counter("Clients")
    print(json.dumps({"clients": clients}), flush=True)
    spark.stop()
    """
)


def _spark_class() -> Path:
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _start(command: list[str], log: Path, env: dict[str, str], ready: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while ready not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            _stop(process)
            pytest.fail(f"{command[1]} did not start (status {process.poll()}); its log:\n{log.read_text()}")
        time.sleep(0.2)
    return process


def _stop(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


@pytest.fixture
def cluster(tmp_path: Path, standalone_driver: StandaloneDriver) -> Iterator[str]:
    """Master and one worker (AFFINITY_DIR = the standalone driver) on 127.0.0.1; yields the master URL."""
    spark_class = _spark_class()
    env = {key: value for key, value in os.environ.items() if key != DRIVER_DIR_ENV}
    env.update({"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable})
    port = free_tcp_port()
    master_command = [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master_command += ["--port", str(port), "--webui-port", str(free_tcp_port())]
    master = _start(
        master_command,
        tmp_path / "master.log",
        env,
        "I have been elected leader",
    )
    url = f"spark://127.0.0.1:{port}"
    try:
        worker_env = {**env, DRIVER_DIR_ENV: str(standalone_driver.dir)}
        worker_command = [str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--cores", "1"]
        worker_command += ["--memory", "1g", "--host", "127.0.0.1", "--webui-port", str(free_tcp_port())]
        worker_command += ["--work-dir", str(tmp_path / "work")]
        worker = _start(
            worker_command,
            tmp_path / "worker.log",
            worker_env,
            "Successfully registered with master",
        )
        try:
            yield url
        finally:
            _stop(worker)
    finally:
        _stop(master)


def test_executors_of_a_worker_started_with_affinity_dir_attach_to_its_driver(
    cluster: str, standalone_driver: StandaloneDriver, tmp_path: Path
) -> None:
    registry = str(tmp_path / "registry")
    create_group("cluster", "__cluster__", 16, QUEUE_COUNT, 8 << 20, registry)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {key: value for key, value in os.environ.items() if key != DRIVER_DIR_ENV}
    env["PYSPARK_PYTHON"] = sys.executable
    with affinity.Client() as client:
        collected = Collected(client, "cluster", registry)
        try:
            wait_for(lambda: len(collected.consumer.owned_queues()) == QUEUE_COUNT, 60, "the consumer's queues")
            result = subprocess.run(
                [sys.executable, str(job), cluster, "cluster", registry, str(standalone_driver.dir), str(ROWS)],
                capture_output=True,
                text=True,
                env=env,
                timeout=START_TIMEOUT_S * 2,
                check=False,
            )
            assert result.returncode == 0, result.stderr[-4000:]
            wait_for(lambda: collected.commit_count() == QUEUE_COUNT, 60, "the commit on every queue")
            wait_for(lambda: len(collected.rows) >= ROWS, 60, "every row")
            check_once_and_in_order(collected.rows, {(f"p{i // (ROWS // 2)}-{i % 20}", i) for i in range(ROWS)})
        finally:
            collected.stop()
    clients = json.loads(result.stdout.strip().splitlines()[-1])["clients"]
    # Nothing else attaches to this module's driver: the clients are the executor's Python workers.
    assert clients >= 1, f"no executor attached to the standalone driver (clients {clients})"
