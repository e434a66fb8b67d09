"""A Spark standalone cluster across network-namespace hosts (``spark_cluster_hosts.py``, run once
for the module): master, two workers each with its own ``affinity driver`` (``AFFINITY_DIR``,
``SPARK_LOCAL_IP``), the driver program on a further host writing into a group whose three consumer
processes run on yet another host, reached only through ``bootstrap`` (every writer's registry is
empty).

- Two batch writes, the first by the Python writer, the second by the JVM writer (its publisher
  lives in the executor JVM, attached to the host's driver); during the second, the first worker's
  executor JVM is SIGKILLed: Spark runs the lost tasks again and the consumers discard what the
  retries send twice.
- A Structured Streaming write (parquet files, four micro-batch rounds): one consumer is SIGKILLed
  during round 1 (the survivors take its queues), an executor JVM during round 2; the query goes on.
  Every row arrives, exactly once per committed batch except the documented at-least-once window
  (docs/groups.md): what the killed consumer had delivered but not yet acknowledged.
- The same batch and stream through a Spark Connect server on that master, its client on the
  driver program's host.
- Bad input: an unreachable bootstrap list (both writers), a bootstrap list whose members hold
  another definition of the group than the writer's registry: each refused when planned, each
  error naming the cause, and nothing of any of them is delivered.

Rows arrive in order per key, each key at one consumer at a time."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import spark_cluster_hosts as hosts
from spark_support import REQUIRE_ENV, check_once_and_in_order

pytestmark = pytest.mark.spark

CLUSTER_HOSTS = Path(__file__).parent / "spark_cluster_hosts.py"
#: Seconds the whole run may take (four JVMs to start, two applications on a loaded 2-core machine).
RUN_TIMEOUT_S = 600.0

Row = tuple[str, int]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The cluster's run: ``result.json`` of ``spark_cluster_hosts.py`` (the module fails with the
    logs if it did not finish)."""
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
        pytest.importorskip("grpc", reason="pyspark[connect] is not installed (the spark extra installs it)")
    if os.geteuid() != 0:
        pytest.skip("the cluster test needs root to create network namespaces and veth pairs")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("the cluster test needs iproute2 (ip) and util-linux (unshare)")
    workdir = tmp_path_factory.mktemp("cluster")
    env = {key: value for key, value in os.environ.items() if key not in ("AFFINITY_DIR", "AFFINITY_REGISTRY")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(CLUSTER_HOSTS.parent), env.get("PYTHONPATH")]))
    process = subprocess.Popen(
        ["unshare", "-n", sys.executable, str(CLUSTER_HOSTS), str(workdir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        output = f"(cut after {RUN_TIMEOUT_S}s)"
    finally:
        # Every host process is in this session: none outlives the test.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    if process.returncode != 0 or not (workdir / "result.json").exists():
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(workdir.glob("*.log"))
        )
        pytest.fail(f"the cluster run failed (status {process.returncode}):\n{output}\n{logs}")
    result: dict[str, Any] = json.loads((workdir / "result.json").read_text())
    return result


def rows_of(run: dict[str, Any], expected: set[Row]) -> list[list[Row]]:
    """Each consumer's rows among ``expected`` (and any of its keys), in arrival order."""
    keys = {key for key, _ in expected}
    return [
        [(k, n) for line in lines if line["t"] == "data" for k, n in line["rows"] if k in keys]
        for lines in run["consumers"]
    ]


def window(run: dict[str, Any]) -> set[Row]:
    """The killed consumer's at-least-once window (docs/groups.md): the rows of its last poll, which
    the next poll would have acknowledged, and of the one before (acknowledged at most one poll
    before the kill, so the acknowledgement may not have left the process)."""
    lines = run["consumers"][hosts.VICTIM]
    last = max(line["poll"] for line in lines if "poll" in line)
    return {(k, n) for line in lines if line["t"] == "data" and line["poll"] >= last - 1 for k, n in line["rows"]}


def check_delivery(run: dict[str, Any], expected: set[Row]) -> list[list[Row]]:
    """Every expected row arrived, in order per key at each consumer, each key at one live consumer
    (and before that possibly at the killed one); a row arrived twice only if it is in the killed
    consumer's window, once there and once at a survivor. Returns each consumer's rows."""
    per_consumer = rows_of(run, expected)
    for rows in per_consumer:
        check_once_and_in_order(rows, set(rows))  # once and in order per key at each consumer
    counts = Counter(row for rows in per_consumer for row in rows)
    assert set(counts) == expected, f"{len(expected - set(counts))} rows lost, {len(set(counts) - expected)} foreign"
    twice = {row for row, count in counts.items() if count > 1}
    assert all(counts[row] == 2 for row in twice), "a row arrived more than twice"
    outside = twice - (window(run) if "consumer" in run["kills"] else set())
    assert not outside, f"{len(outside)} rows arrived twice outside the killed consumer's window: {sorted(outside)[:5]}"
    consumers_of: dict[str, set[int]] = defaultdict(set)
    for index, rows in enumerate(per_consumer):
        for key, _ in rows:
            consumers_of[key].add(index)
    for key, found in consumers_of.items():
        live = found - {hosts.VICTIM} if "consumer" in run["kills"] else found
        assert len(live) <= 1 and (live or found == {hosts.VICTIM}), f"key {key!r} at consumers {sorted(found)}"
    return per_consumer


def commits(run: dict[str, Any]) -> dict[tuple[str, int], Counter[int]]:
    """The commit markers received: per (query id, batch id), how often each queue's."""
    found: dict[tuple[str, int], Counter[int]] = defaultdict(Counter)
    for lines in run["consumers"]:
        for line in lines:
            if line["t"] == "commit":
                found[(line["query"], line["batch"])][line["q"]] += 1
    return found


def check_committed(run: dict[str, Any], batches: int) -> None:
    """``batches`` (query, batch) pairs committed on every queue, each marker once (the killed
    consumer's window aside), and no abort. A marker is incomplete (``CommitItem.complete``) only
    where the killed consumer had delivered part of that batch: on its queues, at a survivor, for
    the batch during which it died."""
    found = commits(run)
    assert len(found) == batches, sorted(found)
    victim = run["consumers"][hosts.VICTIM]
    last_poll = max(line["poll"] for line in victim if "poll" in line)
    in_window = {
        (line["query"], line["batch"], line["q"])
        for line in victim
        if line["t"] == "commit" and line["poll"] >= last_poll - 1 and "consumer" in run["kills"]
    }
    for batch, queues in found.items():
        assert set(queues) == set(range(hosts.QUEUE_COUNT)), (batch, queues)
        twice = {queue for queue, count in queues.items() if count > 1}
        assert all(queues[queue] == 2 and (*batch, queue) in in_window for queue in twice), (batch, queues)
    assert not [line for lines in run["consumers"] for line in lines if line["t"] == "abort"]
    incomplete = [
        (index, line) for index, lines in enumerate(run["consumers"]) for line in lines if line.get("complete") is False
    ]
    if incomplete:
        victim = run["consumers"][hosts.VICTIM]
        last = next(line for line in reversed(victim) if line["t"] == "data")
        mid = {line["q"] for line in victim if line["t"] == "data" and line["batch"] == last["batch"]}
        for index, line in incomplete:
            assert index != hosts.VICTIM and line["q"] in mid and line["batch"] == last["batch"], line


def discarded(run: dict[str, Any], before: float) -> int:
    """Duplicates the consumers discarded (``stats.duplicates_discarded``) up to time ``before``."""
    return sum(
        max((line["duplicates_discarded"] for line in lines if line["t"] == "stats" and line["ts"] < before), default=0)
        for lines in run["consumers"]
    )


def test_batch_writes_arrive_once_in_order_despite_a_killed_executor(run: dict[str, Any]) -> None:
    expected = hosts.expected_rows()["batch"]
    per_consumer = check_delivery(run, expected)
    # Before the consumer kill: not one row twice, and every consumer served keys.
    assert sum(map(len, per_consumer)) == len(expected)
    assert all(per_consumer), [len(rows) for rows in per_consumer]
    killed = run["kills"].get("batch_executor")
    assert killed and killed["rows_before"] < hosts.ROWS, f"no executor killed mid-write: {killed}"
    # The killed executor had delivered part of a task: its retry sent those rows again, discarded
    # (before the stream started).
    stream_started = min((kill["at"] for kill in run["kills"].values() if kill is not killed), default=float("inf"))
    assert discarded(run, stream_started) > 0, run["kills"]
    assert run["empty_registry"] == [], "a writer given a bootstrap list wrote into its registry"
    # Each worker host's executor attached to that host's affinity driver (AFFINITY_DIR, no option).
    first = next(step for step in run["program"] if step["step"] == "batch")
    clients = first["clients"]
    assert len(clients) == len(hosts.WORKERS) and all(count >= 1 for count in clients.values()), clients


def test_a_stream_goes_on_through_a_killed_consumer_and_a_killed_executor(run: dict[str, Any]) -> None:
    expected = hosts.expected_rows()["stream"]
    per_consumer = check_delivery(run, expected)
    kills = run["kills"]
    # The consumer died during round 1; its queues' later rows went to the survivors.
    assert "consumer" in kills, f"consumer {hosts.VICTIM} was not killed: {kills}"
    victim = run["consumers"][hosts.VICTIM]
    queues = {line["q"] for line in victim if line["t"] == "data"}
    round1, later = hosts.stream_round(hosts.STREAM_FIRST, 1), hosts.stream_round(hosts.STREAM_FIRST, 3)
    taken = {
        line["q"]
        for index, lines in enumerate(run["consumers"])
        if index != hosts.VICTIM
        for line in lines
        if line["t"] == "data" and line["rows"][0][1] in later
    }
    assert queues and queues <= taken, (queues, taken)
    assert not any(n in later for _, n in per_consumer[hosts.VICTIM])
    # It died mid-batch: a survivor delivered the rest of that micro-batch on its queues.
    died_in = next(line for line in reversed(victim) if line["t"] == "data")["batch"]
    rest = [
        line
        for index, lines in enumerate(run["consumers"])
        if index != hosts.VICTIM
        for line in lines
        if line["t"] == "data" and line["batch"] == died_in and line["q"] in queues and line["rows"][0][1] in round1
    ]
    assert rest, f"no survivor delivered the rest of micro-batch {died_in} on queues {sorted(queues)}"
    # An executor died during round 2, after some of its rows arrived: Spark ran its task again.
    killed = kills.get("stream_executor")
    size = hosts.STREAM_FILES * hosts.STREAM_ROWS
    assert killed and killed["rows_before"] < size, f"no executor killed mid-stream: {killed}"
    # Its task ran again and sent again what it had delivered: the consumers discarded that.
    assert discarded(run, float("inf")) > discarded(run, killed["at"]), killed
    rounds = [step for step in run["program"] if step["step"] == "round"]
    assert [step["round"] for step in rounds] == list(range(len(hosts.STREAM_DELAYS))), rounds
    assert [step for step in run["program"] if step["step"] == "stream"] == [{"step": "stream", "exception": None}]


def test_every_batch_and_micro_batch_is_committed_on_every_queue(run: dict[str, Any]) -> None:
    # Micro-batches of a stream: every one up to the last round's (a round's files may take two).
    micro_batches = [
        1 + max(step["batch"] for step in steps if step["step"] == "round")
        for steps in (run["program"], run["connect"])
    ]
    assert micro_batches[0] >= len(hosts.STREAM_DELAYS), run["program"]
    # The classic batch writes (two), the Connect one, and every micro-batch of both streams.
    check_committed(run, 2 + 1 + sum(micro_batches))


def test_the_same_writes_through_spark_connect(run: dict[str, Any]) -> None:
    assert run["connect_error"] is None, run["connect_error"]
    per_consumer = check_delivery(run, hosts.expected_rows()["connect"])
    assert not per_consumer[hosts.VICTIM], "rows reached the killed consumer"
    rounds = [step["round"] for step in run["connect"] if step["step"] == "round"]
    assert rounds == list(range(len(hosts.CONNECT_STREAM_DELAYS))), run["connect"]
    assert {"step": "stream", "exception": None} in run["connect"]


def test_a_bad_bootstrap_fails_naming_the_cause_and_delivers_nothing(run: dict[str, Any]) -> None:
    bad = {step["case"]: step for step in run["program"] if step["step"] == "bad"}
    # Nobody answers: refused when planned (AnalysisException), naming the option and the address.
    unreachable = bad["unreachable"]
    assert unreachable["error"] == "AnalysisException", unreachable
    message = unreachable["message"]
    assert f"option group={hosts.GROUP!r}" in message and f"bootstrap={hosts.NOBODY!r}" in message, message
    assert "no bootstrap member answered" in message, message
    # The members answer with another definition than the writer's registry holds: refused when
    # planned too (the check asks the list as a member would), naming the member and both definitions.
    other = bad["another definition"]
    assert other["error"] == "AnalysisException", other
    message = other["message"]
    assert f"option group={hosts.GROUP!r}" in message and "holds another definition" in message, message
    assert any(f"bootstrap member {inbox} " in message for inbox in hosts.INBOXES), message
    assert len(set(re.findall(r"fingerprint ([0-9a-f]{16})", message))) == 2, message
    assert f"QC={hosts.QUEUE_COUNT}" in message and f"QC={hosts.OTHER_QUEUE_COUNT}" in message, message
    # The JVM writer refuses the unreachable list when planned too (IllegalArgumentException).
    jvm = bad["unreachable, JVM writer"]
    assert jvm["error"] == "IllegalArgumentException", jvm
    message = jvm["message"]
    assert f"option group={hosts.GROUP!r}" in message and f"bootstrap={hosts.NOBODY!r}" in message, message
    assert "no bootstrap member answered" in message, message
    # Nothing of any of them was delivered (nor committed: test_every_batch_... counts the commits).
    assert not [k for lines in run["consumers"] for line in lines for k, _ in line.get("rows", []) if k == "bad"]
