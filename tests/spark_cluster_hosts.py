"""A Spark standalone cluster on network-namespace hosts, writing into a group found through
``bootstrap``, classic and through Spark Connect. Run inside a private network namespace
(``unshare -n``); never touches a real interface.

Makes a bridge ``br0`` (BRIDGE_IP) in the namespace it runs in, and one namespace per host linked to
it by a veth pair:

- this namespace (the bridge address): the group's registry and CONSUMERS consumer processes
  (``spark_group_consumer.py``), each with its inbox at a fixed address (``listen``): the only
  addresses the writers are told (``bootstrap``);
- MASTER: ``spark-class ...deploy.master.Master``;
- each of WORKERS: an ``affinity driver`` and ``spark-class ...deploy.worker.Worker`` (1 core, 1 GiB)
  started with ``AFFINITY_DIR`` naming that driver and ``SPARK_LOCAL_IP`` its own address;
- PROGRAM: the driver program (``spark_cluster_job.py``, a registry directory that stays empty,
  the JVM writer's jar on its session): two batch writes of ROWS rows (the Python writer, then
  KILLED_BATCH_WRITER), a Structured Streaming write of STREAM_DELAYS rounds, then three writes
  with a bad bootstrap list that must fail; afterwards, on the same host, the Spark Connect
  client, which writes a batch and a stream through
- CONNECT: a Spark Connect server (``SparkConnectServer`` through ``spark-submit``) on the same
  master (the program's application has ended, so the workers' cores are free).

Meanwhile this process SIGKILLs: the first worker's executor JVM once the second batch write's rows
from it arrive; consumer VICTIM once the stream's round 1 rows arrive there; and the executor JVM
whose rows of the stream's round 2 arrive first.

Writes ``WORKDIR/result.json``: each consumer's lines (``spark_group_consumer.py``'s format), the
steps each driver program reported, the kills, the phases' durations, and whether the empty registry
stayed empty. The processes' logs are ``WORKDIR/*.log``.

    usage: spark_cluster_hosts.py WORKDIR
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from affinity.groups import create_group

HERE = Path(__file__).parent
#: The bridge's network, and this process's address on it (the consumers' host).
NETWORK = "10.9.2"
BRIDGE_IP = f"{NETWORK}.1"
#: Host numbers on the bridge (address NETWORK.<number>).
MASTER = 2
WORKERS = (3, 4)
PROGRAM = 5
CONNECT = 6
MASTER_PORT = 7077
CONNECT_PORT = 15002
#: What the connect server logs once it listens.
CONNECT_READY = "Spark Connect server started at"
GROUP = "clusterhosts"
HASH_COUNT = 16
QUEUE_COUNT = 6
#: Consumers (two queues each: what ``spark_group_consumer.py`` waits for before ``ready``).
CONSUMERS = 3
#: The consumer killed mid-stream.
VICTIM = 2
#: The consumers' liveness timeout (the documented default): how long a killed one holds its queues.
LIVENESS_S = 2.0
#: The consumers' fixed inboxes: the bootstrap list.
INBOXES = [f"{BRIDGE_IP}:{41001 + index}" for index in range(CONSUMERS)]
#: A bootstrap address on the bridge where nothing listens.
NOBODY = f"{BRIDGE_IP}:41099"
#: The group's definition in another registry: same name, another queue count.
OTHER_QUEUE_COUNT = 2
ROWS = 4000
PARTITIONS = 8
#: Keys per partition: each key's rows come from one partition (one task), so their order is defined.
KEYS = 5
#: Seconds the second batch write spends per row (a Python UDF), so an executor can be killed mid-write.
ROW_DELAY_S = 0.003
#: The writer of the second batch write, during which an executor JVM is killed (the JVM writer's
#: publisher lives in that JVM); the first batch write, the stream and the bad writes take the
#: Python writer, the Spark Connect ones the server's (no jar there: Python).
KILLED_BATCH_WRITER = "jvm"
#: Rows per Arrow batch and per message: a partition arrives in several pieces, so a kill lands
#: after some of a task's rows were delivered (its retry sends them again).
PIECE_ROWS = 50
#: The stream: files per round (one task each), rows per file, keys per file, and each round's
#: delay per row: round 1 loses consumer VICTIM, round 2 an executor (its tasks take 5 s, so the
#: kill at its first row that arrives lands mid-task even when the consumers were starved for
#: seconds on a loaded machine), round 3 runs after both.
STREAM_FILES = 2
STREAM_ROWS = 500
STREAM_KEYS = 10
STREAM_DELAYS = (0.0, 0.004, 0.010, 0.0)
STREAM_FIRST = 2 * ROWS
#: Numbers of the Spark Connect client's batch and stream (two rounds).
CONNECT_FIRST = 100_000
CONNECT_STREAM_FIRST = 200_000
CONNECT_STREAM_DELAYS = (0.0, 0.0)
#: Seconds for a JVM to start, the consumers to settle, a driver program to run, the rows to arrive.
START_TIMEOUT_S = 120.0
JOB_TIMEOUT_S = 240.0
ARRIVAL_TIMEOUT_S = 30.0


def stream_round(first: int, round_: int) -> range:
    """The numbers ``n`` of a stream round (``spark_cluster_job.py``'s layout)."""
    start = first + round_ * STREAM_FILES * STREAM_ROWS
    return range(start, start + STREAM_FILES * STREAM_ROWS)


def expected_rows() -> dict[str, set[tuple[str, int]]]:
    """Every row each write sends, ``(k, n)``, by write."""
    per = ROWS // PARTITIONS

    def batch(first: int, prefix: str) -> set[tuple[str, int]]:
        return {(f"{prefix}{n // per}-{n % KEYS}", n) for n in range(first, first + ROWS)}

    def stream(first: int, prefix: str, rounds: int) -> set[tuple[str, int]]:
        rows = set()
        for n in range(first, first + rounds * STREAM_FILES * STREAM_ROWS):
            rows.add((f"{prefix}{(n - first) // STREAM_ROWS % STREAM_FILES}-{n % STREAM_KEYS}", n))
        return rows

    return {
        "batch": batch(0, "p") | batch(ROWS, "p"),
        "stream": stream(STREAM_FIRST, "s", len(STREAM_DELAYS)),
        "connect": batch(CONNECT_FIRST, "c") | stream(CONNECT_STREAM_FIRST, "t", len(CONNECT_STREAM_DELAYS)),
    }


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


class Tail:
    """The complete JSON lines a consumer process wrote so far (read on from where it stopped)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[dict[str, Any]] = []
        self._offset = 0

    def read(self) -> list[dict[str, Any]]:
        """The lines added since the last call."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as file:
            file.seek(self._offset)
            chunk = file.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        new = [json.loads(line) for line in complete.splitlines()]
        self.lines.extend(new)
        return new


def steps(log: Path) -> list[dict[str, Any]]:
    """The ``STEP`` lines a driver program printed."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [json.loads(line.removeprefix("STEP ")) for line in lines if line.startswith("STEP ")]


class Killer:
    """Watches the consumers' lines and SIGKILLs, once each: the first worker's executor during the
    second batch write, consumer VICTIM during stream round 1, an executor during stream round 2."""

    def __init__(self, tails: list[Tail], consumers: list[subprocess.Popen[str]]) -> None:
        self.tails, self.consumers = tails, consumers
        self.kills: dict[str, Any] = {}
        self._second = range(ROWS, 2 * ROWS)
        self._round1, self._round2 = stream_round(STREAM_FIRST, 1), stream_round(STREAM_FIRST, 2)
        self._seen: dict[str, int] = {"second": 0, "round2": 0}

    def step(self) -> None:
        for index, tail in enumerate(self.tails):
            for line in tail.read():
                if line["t"] != "data":
                    continue
                numbers = [n for _, n in line["rows"]]
                hosts = line.get("hosts", [""] * len(numbers))
                for n, host in zip(numbers, hosts, strict=True):
                    self._row(index, n, host)

    def _row(self, index: int, n: int, host: str) -> None:
        if n in self._second:
            self._seen["second"] += 1
            if "batch_executor" not in self.kills and host == f"{NETWORK}.{WORKERS[0]}":
                self._kill_executor("batch_executor", host, self._seen["second"])
        elif n in self._round1 and index == VICTIM and "consumer" not in self.kills:
            self.consumers[VICTIM].kill()
            self.consumers[VICTIM].wait(10)
            self.kills["consumer"] = {"index": VICTIM, "at": time.time()}
        elif n in self._round2:
            self._seen["round2"] += 1
            if "stream_executor" not in self.kills:
                self._kill_executor("stream_executor", host, self._seen["round2"])

    def _kill_executor(self, what: str, host: str, rows_before: int) -> None:
        pid = executor_pid(host)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            self.kills[what] = {"pid": pid, "host": host, "rows_before": rows_before, "at": time.time()}


def main() -> int:
    import pyspark

    workdir = Path(sys.argv[1])
    bin_dir = Path(pyspark.__file__).parent / "bin"
    sh(f"ip link set lo up && ip link add br0 type bridge && ip addr add {BRIDGE_IP}/24 dev br0 && ip link set br0 up")
    registry, other, empty = workdir / "registry", workdir / "other-registry", workdir / "empty-registry"
    create_group(GROUP, f"__{GROUP}__", HASH_COUNT, QUEUE_COUNT, 8 << 20, str(registry))
    create_group(GROUP, f"__{GROUP}__", HASH_COUNT, OTHER_QUEUE_COUNT, 8 << 20, str(other))
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "AFFINITY_DIR"}
    env.update({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"})
    hosts: list[subprocess.Popen[str]] = []
    consumers: list[subprocess.Popen[str]] = []
    tails = [Tail(workdir / f"consumer-{index}.jsonl") for index in range(CONSUMERS)]
    killer = Killer(tails, consumers)
    timings: dict[str, float] = {}
    connect_error: str | None = None
    started = time.monotonic()
    try:
        for index in range(CONSUMERS):
            command = [sys.executable, str(HERE / "spark_group_consumer.py"), str(registry), GROUP, str(index)]
            command += [str(CONSUMERS), str(tails[index].path), str(LIVENESS_S), INBOXES[index], BRIDGE_IP]
            consumers.append(subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env))
        for consumer in consumers:  # started together: each claims its primary queues, then says ready
            assert consumer.stdout is not None and consumer.stdout.readline().strip() == "ready"
        master_ip = f"{NETWORK}.{MASTER}"
        master_url = f"spark://{master_ip}:{MASTER_PORT}"
        log = workdir / "master.log"
        command = f"SPARK_LOCAL_IP={master_ip} exec {bin_dir / 'spark-class'} org.apache.spark.deploy.master.Master "
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
                f"AFFINITY_DIR={driver_dir} SPARK_LOCAL_IP={ip} exec {bin_dir / 'spark-class'} "
                f"org.apache.spark.deploy.worker.Worker {master_url} --cores 1 --memory 1g --host {ip} "
                f"--webui-port 8081 --work-dir {workdir / f'work-{number}'}"
            )
            hosts.append(spawn_host(number, script, workdir / f"worker-{number}.log", env))
        for number, host in zip(WORKERS, hosts[1:], strict=True):
            wait_for_line(workdir / f"worker-{number}.log", "Successfully registered with master", host, "a worker")
        timings["cluster_start"] = time.monotonic() - started

        # The driver program, then (same host, once the connect server runs) the Spark Connect client.
        ip = f"{NETWORK}.{PROGRAM}"
        common = {"group": GROUP, "registry": str(empty), "bootstrap": ",".join(INBOXES), "piece": PIECE_ROWS}
        batch = {"rows": ROWS, "partitions": PARTITIONS, "keys": KEYS}
        stream = {"files": STREAM_FILES, "rows": STREAM_ROWS, "keys": STREAM_KEYS}
        classic = {
            **common,
            "master": master_url,
            "host": ip,
            "driver_dirs": driver_dirs,
            "jar": True,
            "batches": [
                {**batch, "first": 0, "prefix": "p", "delay": 0.0, "writer": "python"},
                {**batch, "first": ROWS, "prefix": "p", "delay": ROW_DELAY_S, "writer": KILLED_BATCH_WRITER},
            ],
            "stream": {
                **stream,
                "writer": "python",
                "first": STREAM_FIRST,
                "prefix": "s",
                "delays": STREAM_DELAYS,
                "dir": str(workdir / "stream-in"),
                "checkpoint": str(workdir / "stream-checkpoint"),
            },
            "bad": [
                ["unreachable", "python", str(empty), NOBODY],
                ["another definition", "python", str(other), ",".join(INBOXES)],
                ["unreachable, JVM writer", "jvm", str(empty), NOBODY],
            ],
        }
        connect = {
            **common,
            "remote": f"sc://{NETWORK}.{CONNECT}:{CONNECT_PORT}",
            "batches": [{**batch, "first": CONNECT_FIRST, "prefix": "c", "delay": 0.0}],
            "stream": {
                **stream,
                "first": CONNECT_STREAM_FIRST,
                "prefix": "t",
                "delays": CONNECT_STREAM_DELAYS,
                "dir": str(workdir / "connect-in"),
                "checkpoint": str(workdir / "connect-checkpoint"),
            },
        }
        job = HERE / "spark_cluster_job.py"
        paths = {name: workdir / f"{name}.json" for name in ("classic", "connect")}
        for name, config in (("classic", classic), ("connect", connect)):
            paths[name].write_text(json.dumps(config))
        program_log, client_log, go = workdir / "program.log", workdir / "connect-client.log", workdir / "connect.go"
        server_log = workdir / "connect-server.log"
        script = (
            f"SPARK_LOCAL_IP={ip} {sys.executable} {job} {paths['classic']} > {program_log} 2>&1; "
            f"echo $? > {workdir / 'program.exit'}; "
            f"t=$((SECONDS + {int(START_TIMEOUT_S)})); until [ -e {go} ]; do "
            f"[ $SECONDS -lt $t ] || exit 1; sleep 0.2; done; "
            f"exec {sys.executable} {job} {paths['connect']} > {client_log} 2>&1"
        )
        program = spawn_host(PROGRAM, script, workdir / "program-host.log", env)
        hosts.append(program)
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not (workdir / "program.exit").exists() and program.poll() is None and time.monotonic() < deadline:
            killer.step()
            time.sleep(0.01)
        killer.step()
        status = (workdir / "program.exit").read_text().strip() if (workdir / "program.exit").exists() else None
        if status != "0" or "JOB-END" not in program_log.read_text(errors="replace"):
            raise SystemExit(f"the driver program failed or did not finish (status {status}); see {program_log}")
        timings["driver_program"] = time.monotonic() - started - timings["cluster_start"]

        # Spark Connect: the server is the Spark driver of the next application on the same master.
        # A failure here fails the Connect test only (with the logs), not the module's others.
        try:
            mark = time.monotonic()
            connect_ip = f"{NETWORK}.{CONNECT}"
            settings = {
                "spark.connect.grpc.binding.address": connect_ip,
                "spark.connect.grpc.binding.port": str(CONNECT_PORT),
                "spark.ui.enabled": "false",
                "spark.driver.host": connect_ip,
                "spark.driver.bindAddress": connect_ip,
                "spark.executor.memory": "512m",
                "spark.sql.streaming.stopTimeout": "20s",
            }
            command = f"SPARK_LOCAL_IP={connect_ip} exec {bin_dir / 'spark-submit'} --master {master_url} "
            command += "--class org.apache.spark.sql.connect.service.SparkConnectServer "
            command += " ".join(f"--conf {name}={value}" for name, value in settings.items()) + " spark-internal"
            hosts.append(spawn_host(CONNECT, command, server_log, env))
            wait_for_line(server_log, CONNECT_READY, hosts[-1], "the Spark Connect server")
            go.touch()
            deadline = time.monotonic() + JOB_TIMEOUT_S
            while program.poll() is None and time.monotonic() < deadline:
                killer.step()
                time.sleep(0.05)
            if program.poll() != 0 or "JOB-END" not in client_log.read_text(errors="replace"):
                raise SystemExit(f"the Spark Connect client failed (status {program.poll()}); see {client_log}")
            timings["connect"] = time.monotonic() - mark
        except SystemExit as error:
            tails_of_logs = "".join(
                f"\n--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
                for log in (server_log, client_log)
                if log.exists()
            )
            connect_error = f"{error}{tails_of_logs}"

        # Everything sent is acknowledged by now; wait for the last commit markers, then stop.
        expected = {n for rows in expected_rows().values() for _, n in rows}
        deadline = time.monotonic() + ARRIVAL_TIMEOUT_S
        while time.monotonic() < deadline:
            killer.step()
            if expected <= {n for tail in tails for line in tail.lines for _, n in line.get("rows", [])}:
                break
            time.sleep(0.05)
        time.sleep(1.0)  # anything duplicated, and the last commits, would arrive now
    finally:
        for process in [*reversed(hosts), *consumers]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*hosts, *consumers]:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
            if process.stdout is not None:
                process.stdout.close()
    killer.step()
    result = {
        "consumers": [tail.lines for tail in tails],
        "kills": killer.kills,
        "program": steps(program_log),
        "connect": steps(client_log),
        "connect_error": connect_error,
        "timings": {name: round(seconds, 1) for name, seconds in timings.items()},
        "empty_registry": sorted(os.listdir(empty)),
    }
    (workdir / "result.json").write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
