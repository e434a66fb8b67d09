"""The network-namespace "hosts" every multi-host cluster test shares (``docs/cluster.md``):
the scripts (``cluster_hosts.py``, ``cluster_ptp_hosts.py``, ``cluster_failover_hosts.py``,
``cluster_forward_hosts.py``, ``cluster_mirror_hosts.py``, ``cluster_defer_hosts.py``) run inside
a private network namespace (``unshare -n``, made by :func:`run_hosts`), make a bridge ``br0``
(10.9.0.1/24, :func:`make_bridge`) and, in :func:`running_cluster`, start each node as
``affinity router --node NODE`` in a host namespace of its own, linked to the bridge by a veth
pair (``groups_two_hosts.spawn_host``) and listening on 10.9.0.N (:data:`HOSTS`). The script
itself is the clients' host (10.9.0.1). No packet reaches a real interface.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

import affinity
import cluster_conf as conf
from groups_two_hosts import sh, spawn_host

#: Host number (10.9.0.N) of each node; the clients' host is 1 (the bridge).
HOSTS = {"heron": 2, "golan": 3, "avalon": 4, "bilbo": 5, "frodo": 6, "hobbit": 7}
#: The clients' address (the bridge).
CLIENT_HOST = "10.9.0.1"
#: The port every node listens on (on its own host).
PORT = 40500
#: The routers' liveness timeout, seconds (``--liveness-timeout``), unless a script gives one.
LIVENESS = "1.0"
#: Seconds any one step may take (a run stays within a few tens of seconds).
STEP_TIMEOUT = 30.0
#: Seconds a whole script may take before :func:`run_hosts` kills it.
RUN_TIMEOUT = 150


def address(node: str) -> str:
    """The node's address on its host."""
    return f"aeron:udp?endpoint=10.9.0.{HOSTS[node]}:{PORT}"


def node_block(node: str, *lines: str) -> str:
    """The node's ``add-cluster-node`` block at :func:`address`."""
    return conf.node(node, address(node), *lines)


def make_bridge() -> None:
    """The bridge the hosts' veth pairs join, in the script's own namespace."""
    sh("ip link set lo up && ip link add br0 type bridge && ip addr add 10.9.0.1/24 dev br0 && ip link set br0 up")


class Router:
    """One ``affinity router --node`` on its host; its output is kept and copied to
    ``WORKDIR/<node>.log`` (appended to across restarts)."""

    def __init__(self, workdir: Path, node: str, config: Path, liveness: str = LIVENESS) -> None:
        command = [sys.executable, "-m", "affinity.cli", "router", "--config", str(config), "--node", node]
        command += ["--listen", address(node), "--liveness-timeout", liveness]
        self.node, self.lines, self.log = node, list[str](), (workdir / f"{node}.log").open("a")
        self.process = spawn_host(HOSTS[node], command)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            self.log.write(line)
            self.log.flush()

    def wait_listening(self, deadline: float) -> None:
        self.wait_for("listening on", deadline)

    def wait_for(self, text: str, deadline: float | None = None) -> None:
        """Until a line of its output holds ``text`` (exits the script past the step's timeout)."""
        deadline = time.monotonic() + STEP_TIMEOUT if deadline is None else deadline
        while not any(text in line for line in self.lines):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"{self.node}: no {text!r}: {''.join(self.lines[-20:])}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL (the router process itself: its host's shell exec'd it)."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_routers(workdir: Path, configs: dict[str, Path], liveness: str = LIVENESS) -> dict[str, Router]:
    """The bridge, then one router per node (``configs``: node -> its configuration file), each
    listening before this returns."""
    make_bridge()
    routers = {node: Router(workdir, node, config, liveness) for node, config in configs.items()}
    deadline = time.monotonic() + STEP_TIMEOUT
    for router in routers.values():
        router.wait_listening(deadline)
    return routers


@contextlib.contextmanager
def running_cluster(
    workdir: Path, configs: dict[str, Path], liveness: str = LIVENESS
) -> Iterator[tuple[dict[str, Router], affinity.Client]]:
    """:func:`start_routers`, and the clients' :class:`affinity.Client`; on leaving, the client is
    closed and every router in the dict (those started again since included) is stopped."""
    routers = start_routers(workdir, configs, liveness)
    client = affinity.Client()
    try:
        yield routers, client
    finally:
        client.close()
        for router in routers.values():
            router.stop()


class Polled(Protocol):
    def poll(self, limit: int, /) -> object: ...


def until(what: str, predicate: Callable[[], bool], *polled: Polled) -> None:
    """Polls ``polled`` (sources, subscribers) until ``predicate()`` or the step's timeout."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        for peer in polled:
            peer.poll(256)
        time.sleep(0.001)


def drain(seconds: float, polled: Iterable[Polled]) -> None:
    """Polls ``polled`` for ``seconds`` (late duplicates would show)."""
    peers = list(polled)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for peer in peers:
            peer.poll(256)
        time.sleep(0.005)


def print_result(result: dict[str, Any]) -> None:
    """The ``RESULT <json>`` line :func:`run_hosts` reads."""
    print("RESULT", json.dumps(result), flush=True)


def run_hosts(tmp_path: Path, script: Path) -> dict[str, Any]:
    """Runs ``script WORKDIR`` in a network namespace of its own; its ``RESULT`` line. Skips
    (saying why) without root or iproute2/util-linux."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("the cluster hosts tests need root to create network namespaces and veth pairs")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("the cluster hosts tests need iproute2 (ip) and util-linux (unshare)")
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
