"""The ``affinity`` sink and source on a standalone ``affinity driver`` (``driverDir``): every Spark
process that writes (a Python worker, or the JVM for the JVM writer) attaches to it (none starts
an embedded driver), one client per process across tasks and micro-batches, and a directory with
no driver or another user's driver fails the write or the read when it is planned, saying how to
start one."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import affinity
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from affinity.spark import SparkOptionError
from affinity.spark.clients import DRIVER_DIR_ENV, SPARK_LOCAL_IP_ENV, check_driver
from conftest import StandaloneDriver
from spark_support import (
    WRITERS,
    Collected,
    check_once_and_in_order,
    full_text,
    new_group,
    new_worker_driver_dirs,
    publish_and_read_back,
    spark_session,
    wait_for,
    worker_driver_dirs,
    writer_param,
)

pytestmark = pytest.mark.spark

QUEUE_COUNT = 4
HASH_COUNT = 16
#: Seconds a Spark write, a consumer or a driver start may take on a loaded machine (a bound on a hang).
WAIT_S = 90.0


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture
def registry(tmp_path: Path) -> str:
    return str(tmp_path / "registry")


@pytest.fixture
def group(registry: str) -> str:
    return new_group(registry, "drv", HASH_COUNT, QUEUE_COUNT)


def driver_clients(driver: StandaloneDriver) -> int:
    clients = affinity.driver_stat(str(driver.dir)).counter("Clients")
    assert clients is not None, "the driver has no Clients counter"
    return clients


def no_new_driver_dirs(before: dict[int, set[Path]]) -> dict[int, set[Path]]:
    """The embedded driver directories processes under this one mapped since ``before`` (new
    processes' and, for the JVM that lives through the module, new ones of old processes)."""
    now = worker_driver_dirs()
    return {pid: dirs - before.get(pid, set()) for pid, dirs in now.items() if dirs - before.get(pid, set())}


@pytest.mark.parametrize("writer", [writer_param(w) for w in WRITERS])
def test_the_sink_attaches_every_worker_to_the_standalone_driver_one_client_per_worker(
    spark: Any, standalone_driver: StandaloneDriver, group: str, registry: str, tmp_path: Path, writer: str
) -> None:
    before = worker_driver_dirs()
    with standalone_driver.client() as client:
        collected = Collected(client, group, registry)
        try:
            wait_for(lambda: len(collected.consumer.owned_queues()) == QUEUE_COUNT, WAIT_S, "the consumer's queues")
            clients_before = driver_clients(standalone_driver)
            # Every key lives in one partition (order per key holds within a partition).
            df = spark.range(0, 4000, numPartitions=2).selectExpr(
                "concat('p', cast(floor(id / 2000) AS string), '-', cast(id % 20 AS string)) AS k", "id AS n"
            )
            (
                df.write.format("affinity")
                .option("group", group)
                .option("registry", registry)
                .option("key", "k")
                .option("driverDir", str(standalone_driver.dir))
                .option("writer", writer)
                .mode("append")
                .save()
            )
            wait_for(lambda: collected.commit_count() == QUEUE_COUNT, WAIT_S, "the batch's commit on every queue")
            expected = {(f"p{i // 2000}-{i % 20}", i) for i in range(4000)}
            # The stream: three micro-batches, each from its own file.
            source = tmp_path / "in"
            source.mkdir()
            query = (
                spark.readStream.schema("k string, n long")
                .option("maxFilesPerTrigger", "1")
                .parquet(str(source))
                .writeStream.format("affinity")
                .option("group", group)
                .option("registry", registry)
                .option("key", "k")
                .option("driverDir", str(standalone_driver.dir))
                .option("writer", writer)
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .start()
            )
            clients_per_batch = []
            try:
                for batch in range(3):
                    numbers = [10_000 * (batch + 1) + i for i in range(500)]
                    keys = [f"k{i % 40}" for i in range(500)]
                    expected.update(zip(keys, numbers, strict=True))
                    pq.write_table(pa.table({"k": keys, "n": numbers}), source / f"{batch}.parquet")
                    commits = QUEUE_COUNT * (batch + 2)  # the batch write's and each micro-batch's, on every queue
                    wait_for(lambda c=commits: collected.commit_count() == c, WAIT_S, f"micro-batch {batch}'s commits")
                    clients_per_batch.append(driver_clients(standalone_driver))
                assert query.exception() is None
            finally:
                query.stop()
            wait_for(lambda: len(collected.rows) >= len(expected), WAIT_S, "every row")
            check_once_and_in_order(collected.rows, expected)
        finally:
            collected.stop()
    # No Spark process started an embedded driver: every writer used the standalone driver ...
    assert no_new_driver_dirs(before) == {}
    assert clients_per_batch[0] > clients_before, "no Spark process attached to the standalone driver"
    # ... with one client per process, kept across micro-batches (Spark reuses its Python workers;
    # the JVM writer's one client serves the driver side's markers and every task).
    assert clients_per_batch[1:] == clients_per_batch[:-1], clients_per_batch


def test_the_group_source_reads_through_the_standalone_driver(
    spark: Any, standalone_driver: StandaloneDriver, group: str, registry: str, tmp_path: Path
) -> None:
    before = worker_driver_dirs()
    query = (
        spark.readStream.format("affinity")
        .option("group", group)
        .option("registry", registry)
        .option("index", "0")
        .option("count", "1")
        .option("driverDir", str(standalone_driver.dir))
        .load()
        .writeStream.format("memory")
        .queryName("driver_dir_source")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        with standalone_driver.client() as client:
            publish_and_read_back(spark, client, group, registry, "driver_dir_source", WAIT_S)
        assert query.exception() is None
        assert new_worker_driver_dirs(before) == {}, "the source's worker started an embedded driver"
    finally:
        query.stop()


@pytest.mark.parametrize("writer", [writer_param(w) for w in WRITERS])
def test_a_driver_dir_with_no_driver_fails_the_write_and_the_read_when_planned(
    spark: Any, group: str, registry: str, tmp_path: Path, writer: str
) -> None:
    from pyspark.errors import AnalysisException, IllegalArgumentException

    empty = tmp_path / "nothing"
    fragment = f"option driverDir='{empty}': "
    hint = f"no driver is running in {empty} (no cnc.dat). Start the driver on every host of the cluster"
    hint += f" as the user Spark runs as (affinity driver --dir {empty})"
    df = spark.range(3).selectExpr("cast(id AS string) AS k")
    # The Python writer's refusal reaches Spark as an AnalysisException, the JVM writer's as an
    # IllegalArgumentException (its SparkOptionException's base).
    with pytest.raises((AnalysisException, IllegalArgumentException)) as raised:
        df.write.format("affinity").option("group", group).option("registry", registry).option("key", "k").option(
            "driverDir", str(empty)
        ).option("writer", writer).mode("append").save()
    assert fragment in full_text(raised.value) and hint in full_text(raised.value), full_text(raised.value)
    reader = (
        spark.readStream.format("affinity")
        .option("group", group)
        .option("registry", registry)
        .option("index", "0")
        .option("count", "1")
        .option("driverDir", str(empty))
    )
    with pytest.raises(Exception) as failed:
        query = reader.load().writeStream.format("memory").queryName("no_driver").start()
        try:
            query.awaitTermination(WAIT_S)
        finally:
            query.stop()
    assert fragment in full_text(failed.value) and hint in full_text(failed.value), full_text(failed.value)


def test_affinity_dir_without_a_driver_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DRIVER_DIR_ENV, str(tmp_path / "gone"))
    with pytest.raises(SparkOptionError) as raised:
        check_driver(None)
    text = str(raised.value)
    assert f"${DRIVER_DIR_ENV}='{tmp_path / 'gone'}' in this Spark worker's environment" in text
    assert f"affinity driver --dir {tmp_path / 'gone'}" in text and f"unset {DRIVER_DIR_ENV}" in text
    monkeypatch.delenv(DRIVER_DIR_ENV)
    check_driver(None)  # embedded drivers: nothing to check


@pytest.fixture
def foreign_driver() -> Iterator[Path]:
    """An ``affinity driver`` run by ``nobody`` in a folder every user may traverse (forked and
    switched, as tests/test_standalone_driver.py does: the interpreter may be unreadable to nobody)."""
    if os.geteuid() != 0:
        pytest.skip("running a driver as another user needs root (CI runs as root)")
    parent = Path(tempfile.mkdtemp(prefix="affinity-foreign-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    parent.chmod(0o777)
    directory = parent / "driver"
    nobody = pwd.getpwnam("nobody")
    pid = os.fork()
    if pid == 0:  # the child: become nobody, run the driver until SIGTERM, leave without pytest's handlers
        code = 1
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            affinity.run_driver(["--dir", str(directory), "--term-length", "64k"])
            code = 0
        finally:
            os._exit(code)
    try:
        wait_for(lambda: (directory / "cnc.dat").exists(), WAIT_S, "nobody's driver to start", step=0.05)
        assert directory.stat().st_uid == nobody.pw_uid
        yield directory
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + WAIT_S
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                break
            time.sleep(0.05)
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.parametrize("writer", [writer_param(w) for w in WRITERS])
def test_another_users_driver_directory_fails_the_write_naming_the_owner(
    spark: Any, group: str, registry: str, foreign_driver: Path, writer: str
) -> None:
    from pyspark.errors import AnalysisException, IllegalArgumentException

    df = spark.range(3).selectExpr("cast(id AS string) AS k")
    with pytest.raises((AnalysisException, IllegalArgumentException)) as raised:
        df.write.format("affinity").option("group", group).option("registry", registry).option("key", "k").option(
            "driverDir", str(foreign_driver)
        ).option("writer", writer).mode("append").save()
    text = full_text(raised.value)
    owner = pwd.getpwnam("nobody").pw_uid
    assert f"option driverDir='{foreign_driver}'" in text, text
    assert f"is owned by uid {owner}, not by this user (uid {os.geteuid()}): refused" in text, text
    assert "as the user Spark runs as" in text


def test_a_group_member_on_a_worker_advertises_spark_local_ip_unless_host_is_given(
    monkeypatch: pytest.MonkeyPatch, group: str, registry: str
) -> None:
    from affinity.spark.options import parse_sink_options
    from affinity.spark.sink import GroupTransport

    def advertised(options: dict[str, str]) -> str:
        with affinity.Client() as client:
            transport = GroupTransport(client, parse_sink_options({"group": group, "key": "k", **options}))
            try:
                return "\n".join(path.read_text() for path in Path(registry).rglob("*") if path.is_file())
            finally:
                transport.close()

    monkeypatch.setenv(SPARK_LOCAL_IP_ENV, "127.0.0.2")
    assert "127.0.0.2" in advertised({"registry": registry})
    assert "127.0.0.3" in advertised({"registry": registry, "host": "127.0.0.3"})
    monkeypatch.delenv(SPARK_LOCAL_IP_ENV)
    text = advertised({"registry": registry})
    assert "127.0.0.2" not in text and "127.0.0.3" not in text


def test_consume_passes_host_to_the_group_member(group: str, registry: str) -> None:
    import threading

    from affinity.spark import consume

    def files() -> str:
        return "\n".join(path.read_text() for path in Path(registry).rglob("*") if path.is_file())

    stop = threading.Event()
    with affinity.Client() as client:
        items = consume(group, 0, 1, client=client, registry=registry, host="127.0.0.4", stop=stop, poll_timeout=0.01)
        thread = threading.Thread(target=lambda: list(items), daemon=True)
        thread.start()
        try:
            wait_for(lambda: "127.0.0.4" in files(), WAIT_S, "the consumer to advertise 127.0.0.4")
        finally:
            stop.set()
            thread.join(WAIT_S)


@pytest.mark.parametrize("writer", [writer_param(w) for w in WRITERS])
def test_the_sink_finds_the_group_through_bootstrap_without_a_registry_entry(
    spark: Any, group: str, registry: str, tmp_path: Path, writer: str
) -> None:
    from affinity.testing import free_udp_port
    from pyspark.errors import AnalysisException, IllegalArgumentException

    listen = f"127.0.0.1:{free_udp_port()}"
    empty = tmp_path / "empty-registry"
    empty.mkdir()
    df = spark.range(0, 2000, numPartitions=2).selectExpr(
        "concat('p', cast(floor(id / 1000) AS string), '-', cast(id % 20 AS string)) AS k", "id AS n"
    )
    with affinity.Client() as client:
        # The consumer's inbox is at a fixed address; the writers know only that address (their
        # registry is empty): they learn the definition and the members from the consumer.
        collected = Collected(client, group, registry, listen=listen)
        try:
            wait_for(lambda: len(collected.consumer.owned_queues()) == QUEUE_COUNT, WAIT_S, "the consumer's queues")
            (
                df.write.format("affinity")
                .option("group", group)
                .option("registry", str(empty))
                .option("key", "k")
                .option("bootstrap", listen)
                .option("writer", writer)
                .mode("append")
                .save()
            )
            wait_for(lambda: collected.commit_count() == QUEUE_COUNT, WAIT_S, "the batch's commit on every queue")
            expected = {(f"p{i // 1000}-{i % 20}", i) for i in range(2000)}
            wait_for(lambda: len(collected.rows) >= len(expected), WAIT_S, "every row")
            check_once_and_in_order(collected.rows, expected)
        finally:
            collected.stop()
    assert not any(empty.iterdir()), "a member given a bootstrap list wrote into its registry"
    # Nobody at the listed address: the write fails when planned, naming the option and the address.
    nobody = f"127.0.0.1:{free_udp_port()}"
    with pytest.raises((AnalysisException, IllegalArgumentException)) as raised:
        df.write.format("affinity").option("group", group).option("registry", str(empty)).option("key", "k").option(
            "bootstrap", nobody
        ).option("writer", writer).mode("append").save()
    text = full_text(raised.value)
    assert f"option group={group!r}" in text and f"bootstrap={nobody!r}" in text, text
    assert "no bootstrap member answered" in text and nobody in text, text


@pytest.mark.parametrize("writer", [writer_param(w) for w in WRITERS])
def test_a_sink_whose_registry_holds_another_definition_than_its_bootstrap_member_is_refused_when_planned(
    spark: Any, registry: str, tmp_path: Path, writer: str
) -> None:
    """The consumer (its own process, its own registry: QC 4) answers the sink's bootstrap request
    with another definition than the sink's registry holds (QC 2): ``save()`` fails when planned,
    naming both fingerprints, before any task runs; the consumer receives nothing and keeps running."""
    import re
    import subprocess
    import sys

    from affinity.groups import create_group, learn_definition
    from affinity.testing import free_udp_port
    from pyspark.errors import AnalysisException, IllegalArgumentException

    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    create_group("ledger", "__ledger__", HASH_COUNT, QUEUE_COUNT, 8 << 20, theirs)
    create_group("ledger", "__ledger__", HASH_COUNT, 2, 8 << 20, ours)
    inbox = f"127.0.0.1:{free_udp_port()}"
    env = dict(os.environ, AFFINITY_REGISTRY=str(theirs), PYTHONUNBUFFERED="1")
    env.pop("AFFINITY_GROUP_SECRET", None)  # neither registry holds a secret: unauthenticated both ways
    env.pop("AFFINITY_GROUP_SECRET_FILE", None)
    command = [sys.executable, "-m", "affinity.cli", "group", "consume", "ledger", "--index", "0", "--count", "1"]
    consumer = subprocess.Popen(
        [*command, "--listen", inbox], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        with affinity.Client() as client:
            deadline = time.monotonic() + WAIT_S
            while True:  # until the consumer answers (a registry without the group: nothing held)
                assert consumer.poll() is None, consumer.communicate()[0]
                try:
                    learned = learn_definition(client, "ledger", bootstrap=inbox, registry=tmp_path / "none")
                    break
                except affinity.ConfigError as error:
                    assert "no bootstrap member answered" in str(error) and time.monotonic() < deadline, error
        assert learned.queue_count == QUEUE_COUNT
        df = spark.range(0, 100, numPartitions=2).selectExpr("cast(id % 7 AS string) AS k", "id AS n")
        with pytest.raises((AnalysisException, IllegalArgumentException)) as raised:
            (
                df.write.format("affinity")
                .option("group", "ledger")
                .option("registry", str(ours))
                .option("key", "k")
                .option("bootstrap", inbox)
                .option("writer", writer)
                .mode("append")
                .save()
            )
        text = full_text(raised.value)
        assert "option group='ledger'" in text and "holds another definition" in text and inbox in text, text
        assert len(set(re.findall(r"fingerprint ([0-9a-f]{16})", text))) == 2, text
        assert f"QC={QUEUE_COUNT}" in text and "QC=2" in text, text
        assert consumer.poll() is None, "the answering consumer keeps running"
    finally:
        consumer.terminate()
        consumer.communicate(timeout=WAIT_S)  # reaps it and closes its pipe
