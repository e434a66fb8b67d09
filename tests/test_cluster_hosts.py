"""The xmlBlaster cluster picture as router processes on separate network-namespace hosts
(``tests/cluster_hosts.py``): heron master of RUGBY_NEWS, golan master of STOCK_EXCHANGE, avalon
a slave of both, bilbo a slave of avalon (stratum 2). A subscriber at bilbo gets the image and
every update in order through two levels; golan's, avalon's and bilbo's node info are followed
at bilbo with the right roles, strata and connection states; frodo, a node golan does not
configure, is refused ``not-allowed`` across hosts and ``affinity router status`` says so."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from affinity.subjects import Flags

SCRIPT = Path(__file__).parent / "cluster_hosts.py"
#: Seconds the whole run may take (it needs a few tens).
RUN_TIMEOUT = 150


def run_hosts(tmp_path: Path, script: Path = SCRIPT) -> dict[str, Any]:
    """Runs ``script WORKDIR`` in a network namespace of its own; its ``RESULT`` line."""
    if os.geteuid() != 0:
        pytest.skip("the cluster hosts test needs root to create network namespaces and veth pairs")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("the cluster hosts test needs iproute2 (ip) and util-linux (unshare)")
    env = {key: value for key, value in os.environ.items() if key != "AFFINITY_DIR"}
    env["PYTHONUNBUFFERED"] = "1"
    # A process group of its own: on a timeout every router of every host goes with it.
    run = subprocess.Popen(
        ["unshare", "-n", sys.executable, str(script), str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = run.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        stdout, stderr = run.communicate()
        stderr += f"\n(killed after {RUN_TIMEOUT} s)"
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))
    assert run.returncode == 0, f"{stdout}\n{stderr}\n{logs}"
    line = next(line for line in stdout.splitlines() if line.startswith("RESULT "))
    return dict(json.loads(line.removeprefix("RESULT ")))


def test_the_xmlblaster_picture_across_hosts(tmp_path: Path) -> None:
    result = run_hosts(tmp_path)
    # The stratum-2 cascade: golan asked once, bilbo gets the image and every update in order, once.
    assert result["requests"] == ["/STOCK/IBM"]
    assert result["images"] == ["image-0"]
    assert result["updates"] == [f"u{i}" for i in range(200)]
    info = result["info"]
    assert info["golan"]["domains"] == [["RUGBY_NEWS", "slave", 1, "heron"], ["STOCK_EXCHANGE", "master", 0, None]]
    assert info["avalon"]["domains"] == [["RUGBY_NEWS", "slave", 1, "heron"], ["STOCK_EXCHANGE", "slave", 1, "golan"]]
    assert info["bilbo"]["domains"] == [["RUGBY_NEWS", "slave", 2, "avalon"], ["STOCK_EXCHANGE", "slave", 2, "avalon"]]
    assert info["bilbo"]["connections"] == {"avalon": "logged-in"}
    assert info["avalon"]["connections"] == {"golan": "logged-in"}
    assert info["golan"]["load"]["subjects"] >= 1 and info["golan"]["load"]["subscribers"] >= 1
    # frodo is refused by golan across hosts; its subscriber gets NODATA unavailable.
    flags, _ = result["frodo_answer"]
    assert flags & Flags.NODATA_UNAVAILABLE, result["frodo_answer"]
    code, out, err = result["frodo_status"]
    assert code == 0, err
    assert "connection golan: not-allowed" in out, out
    assert "domain STOCK_EXCHANGE: slave of golan, stratum 1" in out, out
    assert result["golan_not_allowed"] >= 1
