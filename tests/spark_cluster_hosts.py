"""A Spark standalone cluster on network-namespace hosts, writing into a group found through
``bootstrap``. Run inside a private network namespace (``unshare -n``); never touches a real interface.

Makes a bridge ``br0`` (BRIDGE_IP) in the namespace it runs in, and one namespace per host linked to
it by a veth pair:

- this process (the bridge address): the group's registry and CONSUMERS sink consumers, each with
  its inbox at a fixed address (``listen``): the only addresses the writers are told (``bootstrap``);
- MASTER: ``spark-class ...deploy.master.Master``;
- each of WORKERS: an ``affinity driver`` and ``spark-class ...deploy.worker.Worker`` (1 core, 1 GiB)
  started with ``AFFINITY_DIR`` naming that driver and ``SPARK_LOCAL_IP`` its own address;
- PROGRAM: the driver program (``JOB``), which writes ROWS rows with ``bootstrap`` and a registry
  directory that stays empty, then a second, slowed write of ROWS more rows, during which this
  process SIGKILLs the first worker's executor JVM once that write's rows start arriving.

Writes ``WORKDIR/result.json``: what each consumer received (``[consumer, queue, key, n, host]`` in
arrival order), the commit markers, the job's output, the kill, the duplicates the consumers
discarded, and whether the empty registry stayed empty.
The processes' logs are ``WORKDIR/<host>.log``.

    usage: spark_cluster_hosts.py WORKDIR
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import affinity
from affinity.groups import create_group
from affinity.spark import CommitItem, DataItem, SinkConsumer

#: The bridge's network, and this process's address on it (the consumers' host).
NETWORK = "10.9.2"
BRIDGE_IP = f"{NETWORK}.1"
#: Host numbers on the bridge (address NETWORK.<number>).
MASTER = 2
WORKERS = (3, 4)
PROGRAM = 5
MASTER_PORT = 7077
GROUP = "clusterhosts"
QUEUE_COUNT = 4
CONSUMERS = 2
#: The consumers' fixed inboxes: the bootstrap list.
INBOXES = [f"{BRIDGE_IP}:{41001 + index}" for index in range(CONSUMERS)]
ROWS = 4000
PARTITIONS = 8
#: Keys per partition: each key's rows come from one partition (one task), so their order is defined.
KEYS = 5
#: Seconds for a JVM to start, the consumers to settle, the job to run, the rows to arrive.
START_TIMEOUT_S = 90.0
SETTLE_TIMEOUT_S = 30.0
JOB_TIMEOUT_S = 120.0
ARRIVAL_TIMEOUT_S = 30.0
#: Seconds the second write spends per row (a Python UDF), so an executor can be killed mid-write.
ROW_DELAY_S = 0.003
#: Rows per Arrow batch and per message in the second write: a partition arrives in several pieces,
#: so the kill lands after some of a task's rows were delivered (its retry sends them again).
PIECE_ROWS = 50
#: The driver program: the batch write, the client count of each worker host's driver, then a
#: second, slowed batch write (ROWS more rows, during which the test SIGKILLs an executor JVM).
JOB = textwrap.dedent(
    """
    import json, os, sys, time
    import affinity
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf
    master, host, group, registry, bootstrap, rows, partitions, keys, delay, piece, *driver_dirs = sys.argv[1:]
    spark = (SparkSession.builder.master(master).appName("affinity-cluster-hosts")
             .config("spark.ui.enabled", "false").config("spark.driver.host", host)
             .config("spark.driver.bindAddress", host).config("spark.executor.memory", "512m")
             .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
             .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "60s").getOrCreate())
    rows, partitions = int(rows), int(partitions)
    per = rows // partitions

    def write(df, *extra):
        key = f"concat('p', cast(floor(id / {per}) AS string), '-', cast(id % {keys} AS string)) AS k"
        (df.selectExpr(key, "id AS n", *extra).write.format("affinity").option("group", group)
         .option("registry", registry).option("key", "k").option("bootstrap", bootstrap)
         .option("maxBatchRows", piece).mode("append").save())

    write(spark.range(0, rows, numPartitions=partitions))
    clients = {d: affinity.driver_stat(d).counter("Clients") for d in driver_dirs}
    print("JOB " + json.dumps({"clients": clients}), flush=True)

    @udf("long")
    def slowly(n):
        time.sleep(float(delay))
        return n

    @udf("string")
    def where(n):  # the executor's host, so the test knows whose rows arrive
        return os.environ.get("SPARK_LOCAL_IP", "")

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", piece)
    slow = spark.range(rows, 2 * rows, numPartitions=partitions).select(slowly("id").alias("id"))
    write(slow.select("id", where("id").alias("h")), "h")
    print("JOB2", flush=True)
    spark.stop()
    """
)


def executor_pid(ip: str) -> int | None:
    """The executor JVM (``CoarseGrainedExecutorBackend``) of the worker host at ``ip``, if any."""
    for entry in Path("/proc").iterdir():
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and b"--hostname" in args:
            if args[args.index(b"--hostname") + 1] == ip.encode():
                return int(entry.name)
    return None


def sh(command: str) -> None:
    subprocess.run(["bash", "-c", command], check=True, timeout=30)


def spawn_host(number: int, script: str, log: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """Runs the bash ``script`` (output to ``log``) in a new network namespace whose ``eth0`` is
    NETWORK.NUMBER on the bridge, once that address is up."""
    setup = (
        "echo ready; while ! ip link show eth0 >/dev/null 2>&1; do sleep 0.02; done; ip link set lo up && "
        f'ip addr add {NETWORK}.{number}/24 dev eth0 && ip link set eth0 up && exec bash -c "$1" > "$2" 2>&1'
    )
    child = subprocess.Popen(
        ["unshare", "-n", "bash", "-c", setup, "host", script, str(log)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    sh(
        f"ip link add vh{number} type veth peer name eth0 netns {child.pid} && "
        f"ip link set vh{number} master br0 && ip link set vh{number} up"
    )
    return child


def wait_for_line(log: Path, text: str, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while text not in (log.read_text(errors="replace") if log.exists() else ""):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start (status {process.poll()}); see {log}")
        time.sleep(0.2)


class Consumers:
    """CONSUMERS sink consumers polled on one thread each: ``[index, queue, k, n, host]`` (the
    executor's host in the second write, else empty) and the commits."""

    def __init__(self, client: affinity.Client, registry: str) -> None:
        self.consumers = [
            SinkConsumer(
                GROUP, index, CONSUMERS, client=client, registry=registry, listen=INBOXES[index], host=BRIDGE_IP
            )
            for index in range(CONSUMERS)
        ]
        self.rows: list[list[Any]] = []
        self.commits: list[list[Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CONSUMERS)]
        for thread in self._threads:
            thread.start()

    def _run(self, index: int) -> None:
        consumer = self.consumers[index]
        while not self._stop.is_set():
            for item in consumer.poll(1000, 0.05):
                with self._lock:
                    if isinstance(item, DataItem):
                        batch = item.batch()
                        keys, numbers = batch.column("k").to_pylist(), batch.column("n").to_pylist()
                        where = batch.column("h").to_pylist() if "h" in batch.schema.names else [""] * len(keys)
                        self.rows.extend(
                            [index, item.queue, k, n, h] for k, n, h in zip(keys, numbers, where, strict=True)
                        )
                    elif isinstance(item, CommitItem):
                        self.commits.append([index, item.queue, item.batch_id, item.complete])

    def settled(self) -> bool:
        owned = [sorted(consumer.owned_queues()) for consumer in self.consumers]
        return all(len(queues) == QUEUE_COUNT // CONSUMERS for queues in owned)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)
        for consumer in self.consumers:
            consumer.close()


def main() -> int:
    import pyspark

    workdir = Path(sys.argv[1])
    spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    sh(f"ip link set lo up && ip link add br0 type bridge && ip addr add {BRIDGE_IP}/24 dev br0 && ip link set br0 up")
    registry = workdir / "registry"
    create_group(GROUP, f"__{GROUP}__", 16, QUEUE_COUNT, 8 << 20, str(registry))
    empty = workdir / "empty-registry"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "AFFINITY_DIR"}
    env.update({"PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"})
    hosts: list[subprocess.Popen[str]] = []
    result: dict[str, Any] = {}
    with affinity.Client() as client:
        consumers = Consumers(client, str(registry))
        try:
            master_ip = f"{NETWORK}.{MASTER}"
            master_url = f"spark://{master_ip}:{MASTER_PORT}"
            log = workdir / "master.log"
            command = f"SPARK_LOCAL_IP={master_ip} exec {spark_class} org.apache.spark.deploy.master.Master "
            command += f"--host {master_ip} --port {MASTER_PORT} --webui-port 8080"
            hosts.append(spawn_host(MASTER, command, log, env))
            wait_for_line(log, "I have been elected leader", hosts[-1], "the master")
            driver_dirs = []
            for number in WORKERS:
                ip = f"{NETWORK}.{number}"
                driver_dir = workdir / f"driver-{number}"
                driver_dirs.append(str(driver_dir))
                driver_log = workdir / f"driver-{number}.log"
                script = (
                    f"{sys.executable} -m affinity.cli driver --dir {driver_dir} > {driver_log} 2>&1 & "
                    f"t=$((SECONDS + 30)); until grep -q 'ready in' {driver_log}; do "
                    f"[ $SECONDS -lt $t ] || {{ echo 'affinity driver did not start'; exit 1; }}; sleep 0.1; done; "
                    f"AFFINITY_DIR={driver_dir} SPARK_LOCAL_IP={ip} exec {spark_class} "
                    f"org.apache.spark.deploy.worker.Worker {master_url} --cores 1 --memory 1g --host {ip} "
                    f"--webui-port 8081 --work-dir {workdir / f'work-{number}'}"
                )
                log = workdir / f"worker-{number}.log"
                hosts.append(spawn_host(number, script, log, env))
            for number, host in zip(WORKERS, hosts[1:], strict=True):
                wait_for_line(workdir / f"worker-{number}.log", "Successfully registered with master", host, "a worker")
            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while not consumers.settled():
                if time.monotonic() > deadline:
                    raise SystemExit("the consumers did not settle on their queues")
                time.sleep(0.05)
            job = workdir / "job.py"
            job.write_text(JOB)
            ip = f"{NETWORK}.{PROGRAM}"
            args = [master_url, ip, GROUP, str(empty), ",".join(INBOXES), str(ROWS), str(PARTITIONS), str(KEYS)]
            args += [str(ROW_DELAY_S), str(PIECE_ROWS)]
            command = f"SPARK_LOCAL_IP={ip} exec {sys.executable} {job} {' '.join([*args, *driver_dirs])}"
            program_log = workdir / "program.log"
            program = spawn_host(PROGRAM, command, program_log, env)
            hosts.append(program)
            # Once the second write's first rows from the first worker arrive, SIGKILL its executor JVM.
            victim = f"{NETWORK}.{WORKERS[0]}"
            deadline = time.monotonic() + JOB_TIMEOUT_S
            while program.poll() is None and time.monotonic() < deadline:
                if "killed" not in result and any(row[4] == victim for row in list(consumers.rows)):
                    pid = executor_pid(victim)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                        second = sum(1 for row in list(consumers.rows) if row[3] >= ROWS)
                        result["killed"] = {"pid": pid, "host": victim, "second_write_rows_before": second}
                time.sleep(0.01)
            if program.poll() is None:
                raise SystemExit(f"the driver program did not finish in {JOB_TIMEOUT_S}s; see {program_log}")
            lines = program_log.read_text().splitlines()
            job_lines = [line for line in lines if line.startswith("JOB ")]
            if program.returncode != 0 or not job_lines or "JOB2" not in lines:
                raise SystemExit(f"the driver program failed (status {program.returncode}); see {program_log}")
            result["job"] = json.loads(job_lines[-1].removeprefix("JOB "))
            deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
            while len(consumers.commits) < 2 * QUEUE_COUNT or len(consumers.rows) < 2 * ROWS:
                if time.monotonic() > deadline:
                    break  # the test reports what is missing
                time.sleep(0.05)
            time.sleep(0.5)  # anything duplicated would arrive now
        finally:
            consumers.stop()
            for host in reversed(hosts):
                if host.poll() is None:
                    host.send_signal(signal.SIGTERM)
            for host in hosts:
                try:
                    host.wait(20)
                except subprocess.TimeoutExpired:
                    host.kill()
    discarded = sum(consumer.stats.duplicates_discarded for consumer in consumers.consumers)
    result.update(rows=consumers.rows, commits=consumers.commits, duplicates_discarded=discarded)
    result["empty_registry"] = sorted(os.listdir(empty))
    (workdir / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
