"""A Spark standalone cluster across network-namespace hosts (``spark_cluster_hosts.py``): master,
two workers each with its own ``affinity driver`` (``AFFINITY_DIR``, ``SPARK_LOCAL_IP``), the driver
program on a further host writing into a group whose consumers run on yet another host, reached only
through ``bootstrap`` (every writer's registry is empty). Rows arrive once, in order per key, each
key at one consumer, and the executors on both workers attached to their host's driver. A second
write loses its first worker's executor JVM (SIGKILL) once its rows start arriving: Spark runs the
lost tasks again, and the consumers still deliver every row once (the retries' duplicates are
discarded by the consumer API)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from spark_support import REQUIRE_ENV, check_once_and_in_order

pytestmark = pytest.mark.spark

CLUSTER_HOSTS = Path(__file__).parent / "spark_cluster_hosts.py"
#: Seconds the whole run may take (JVM starts and the job on a loaded 2-core machine).
RUN_TIMEOUT_S = 170.0


def test_a_cluster_on_separate_hosts_writes_through_bootstrap_once_and_in_order(tmp_path: Path) -> None:
    if os.environ.get(REQUIRE_ENV) != "1":
        pytest.importorskip("pyspark", reason=f"pyspark is not installed (set {REQUIRE_ENV}=1 to fail instead)")
    if os.geteuid() != 0:
        pytest.skip("the cluster test needs root to create network namespaces and veth pairs")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("the cluster test needs iproute2 (ip) and util-linux (unshare)")
    import spark_cluster_hosts as hosts

    env = {key: value for key, value in os.environ.items() if key not in ("AFFINITY_DIR", "AFFINITY_REGISTRY")}
    run = subprocess.Popen(
        ["unshare", "-n", sys.executable, str(CLUSTER_HOSTS), str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = run.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        output = f"(cut after {RUN_TIMEOUT_S}s)"
    finally:
        # Every host process is in this session: none outlives the test.
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        run.wait()
    logs = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in sorted(tmp_path.glob("*.log")))
    assert run.returncode == 0 and (tmp_path / "result.json").exists(), f"{output}\n{logs}"
    result = json.loads((tmp_path / "result.json").read_text())
    rows = result["rows"]
    per = hosts.ROWS // hosts.PARTITIONS
    # Both writes, the second despite its killed executor: nothing lost, nothing delivered twice.
    expected = {(f"p{n // per}-{n % hosts.KEYS}", n) for n in range(2 * hosts.ROWS)}
    check_once_and_in_order([(row[2], row[3]) for row in rows], expected)
    consumers_of: dict[str, set[int]] = defaultdict(set)
    for consumer, _, key, *_ in rows:
        consumers_of[key].add(consumer)
    assert all(len(found) == 1 for found in consumers_of.values()), dict(consumers_of)
    assert {c for found in consumers_of.values() for c in found} == set(range(hosts.CONSUMERS)), dict(consumers_of)
    committed = sorted(queue for _, queue, _, complete in result["commits"] if complete)
    assert committed == sorted(list(range(hosts.QUEUE_COUNT)) * 2), result["commits"]
    killed = result.get("killed")
    assert killed and killed["second_write_rows_before"] < hosts.ROWS, f"no executor killed mid-write: {killed}"
    # The killed executor had delivered part of a task: its retry sent those rows again.
    assert result["duplicates_discarded"] > 0, result["duplicates_discarded"]
    assert result["empty_registry"] == [], "a writer given a bootstrap list wrote into its registry"
    # Each worker host's executor attached to that host's affinity driver (AFFINITY_DIR, no option).
    clients = result["job"]["clients"]
    assert len(clients) == len(hosts.WORKERS) and all(count >= 1 for count in clients.values()), clients
