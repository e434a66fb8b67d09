"""A small system for the tests of ``affinity web``, as real processes: a standalone driver, a
consumer group with two consumers attached to it, a subject router publishing its reports, and
the ``affinity web`` server watching all three. Every wait is bounded by time; every process is
stopped (or killed) at the end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from affinity.groups import create_group
from affinity.testing import free_udp_port
from conftest import StandaloneDriver, start_standalone_driver, stop_standalone_driver

CLI = [sys.executable, "-m", "affinity.cli"]
#: The group every test watches.
GROUP = "orders"
#: Its queue count (each consumer is primary of half of them).
QUEUE_COUNT = 8
#: Seconds any one wait may take (process start, ownership settling).
WAIT_S = 60.0
#: Seconds given to a process to stop on SIGTERM before it is killed.
STOP_S = 15.0
#: The router's routing tables (one service, two peers); the test only watches its reports.
ROUTER_CONFIG = """\
add-data-service
    service-name prices
    include-pattern "^/PRICES/"
    add-source-group
        add-priority
            remote-label PriceSourceA
            remote-label PriceSourceB
        end-priority
    end-source-group
end-data-service
"""
#: The line `affinity web` prints once it serves, with the page's address.
SERVING = re.compile(r"serving (http://\S+/)")


@dataclass
class System:
    """What the tests look at."""

    driver: StandaloneDriver
    registry: Path
    router_channel: str
    router_listen: str
    url: str
    web: subprocess.Popen[str]
    consumers: dict[str, subprocess.Popen[str]]
    router: subprocess.Popen[str] | None
    env: dict[str, str]
    logs: Path
    extra: list[subprocess.Popen[str]] = field(default_factory=list)

    def get(self, path: str) -> bytes:
        """The body of ``GET path`` (fails the test on an HTTP error)."""
        with urllib.request.urlopen(self.url + path.lstrip("/"), timeout=30) as response:
            body: bytes = response.read()
            return body

    def snapshot(self) -> dict[str, Any]:
        """``/api/snapshot``."""
        data: dict[str, Any] = json.loads(self.get("/api/snapshot"))
        return data

    def cli_json(self, *args: str) -> dict[str, Any]:
        """The JSON an ``affinity`` command prints (the last line)."""
        result = subprocess.run(
            [*CLI, *args], capture_output=True, text=True, timeout=WAIT_S, env=self.env, check=False
        )
        assert result.stdout.strip(), f"affinity {' '.join(args)} printed nothing: {result.stderr}"
        data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        return data


def wait_for(what: str, done: Callable[[], object], timeout: float = WAIT_S) -> Any:
    """Polls ``done`` until it returns something true (returned) or fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = done()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s")
        time.sleep(0.1)


def group_of(snapshot: dict[str, Any], name: str = GROUP) -> dict[str, Any] | None:
    """The group ``name`` in a page snapshot."""
    return next((g for g in snapshot["groups"] if g["name"] == name), None)


def owners(snapshot: dict[str, Any]) -> dict[int, str]:
    """Queue -> owner name of the test group, from a page snapshot."""
    group = group_of(snapshot)
    if group is None:
        return {}
    return {row[0]: row[1] for row in group["queues"]["rows"] if row[1]}


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    handle = log.open("w")
    try:
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, text=True, env=env)
    finally:
        handle.close()


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running_system(tmp_path: Path, *extra_web_args: str, with_router: bool = True) -> Iterator[System]:
    """Starts everything (the web server last, on a free loopback port) and stops it all after."""
    logs = tmp_path / "logs"
    logs.mkdir()
    driver = start_standalone_driver(tmp_path / "driver", "--term-length", "1m")
    registry = tmp_path / "registry"
    create_group(GROUP, GROUP, 4 * QUEUE_COUNT, QUEUE_COUNT, 1 << 20, registry)
    env = {**os.environ, "AFFINITY_DIR": str(driver.dir), "AFFINITY_REGISTRY": str(registry)}
    processes: list[subprocess.Popen[str]] = []
    consumers: dict[str, subprocess.Popen[str]] = {}
    try:
        for index in range(2):
            name = f"consumer-{index}"
            consumers[name] = _start(
                [*CLI, "group", "consume", GROUP, "--index", str(index), "--count", "2", "--member-name", name],
                env,
                logs / f"{name}.log",
            )
            processes.append(consumers[name])
        router_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
        listen = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
        router = None
        if with_router:
            config = tmp_path / "router.conf"
            config.write_text(ROUTER_CONFIG)
            router = _start(
                [*CLI, "router", "--config", str(config), "--listen", listen, "--status", router_channel],
                env,
                logs / "router.log",
            )
            processes.append(router)
        with (logs / "web.log").open("w") as web_log:
            web = subprocess.Popen(
                [
                    *CLI,
                    "web",
                    "--listen",
                    "127.0.0.1:0",
                    "--dir",
                    str(driver.dir),
                    "--registry",
                    str(registry),
                    "--router",
                    router_channel,
                    *extra_web_args,
                ],
                stdout=subprocess.PIPE,
                stderr=web_log,
                text=True,
                env=env,
            )
        processes.append(web)
        assert web.stdout is not None
        line = web.stdout.readline()
        match = SERVING.search(line)
        assert match is not None, f"affinity web did not start: {line!r}; {(logs / 'web.log').read_text()}"
        system = System(driver, registry, router_channel, listen, match.group(1), web, consumers, router, env, logs)
        yield system
        processes.extend(system.extra)
        _stop(web)
        log = (logs / "web.log").read_text()
        assert web.returncode == 0, f"affinity web exited with status {web.returncode} on SIGTERM: {log}"
        assert "ERROR" not in log and "Traceback" not in log, f"affinity web logged an error: {log}"
    finally:
        for process in reversed(processes):
            _stop(process)
            if process.stdout is not None:
                process.stdout.close()
        stop_standalone_driver(driver)
