"""Runs ``affinity group`` role processes for the consumer-group tests and watches their output.

Every role is a real process (``python -m affinity.cli group ...``) with the test's own registry
(``AFFINITY_REGISTRY``); a reader thread timestamps each stdout line as it arrives, so tests can
wait for "consumer 0 owns queues [...]" and measure when it happened. Every wait is bounded.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import ctypes.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: How long a role may take to start (import, bind, first heartbeat) on a loaded 2-core machine.
START_TIMEOUT = 30.0
#: How long the output of an exited role may take to be read to its end (a loaded machine).
READER_DRAIN_TIMEOUT = 30.0
#: A consumer role's "owns queues" report.
OWNS_LINE = re.compile(r"^(?P<time>\S+Z) consumer (?P<index>\d+) owns queues (?P<queues>\[[^\]]*\])")


#: ``prctl(PR_SET_PDEATHSIG, ...)`` (Linux): the signal a child gets when its parent dies.
_PR_SET_PDEATHSIG = 1


#: The C library, loaded once here: the child only calls into it between fork and exec.
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """Runs in the child before ``exec``: SIGKILL when the test process dies (killed by a timeout,
    or crashed), so no role outlives the test even when its teardown never runs."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def group_command(*args: str) -> list[str]:
    """The command line of ``affinity group ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "affinity.cli", "group", *args]


def role_env(registry: Path) -> dict[str, str]:
    """The environment of a role process: the test's registry, unbuffered output."""
    env = dict(os.environ)
    env["AFFINITY_REGISTRY"] = str(registry)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_group(registry: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Runs ``affinity group ARGS`` to completion."""
    return subprocess.run(
        group_command(*args), env=role_env(registry), capture_output=True, text=True, timeout=timeout, check=False
    )


@dataclass
class Role:
    """One running role process and the lines it printed, with their arrival times."""

    name: str
    process: subprocess.Popen[str]
    lines: list[tuple[float, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self.lines.append((time.time(), line.rstrip("\n")))

    def output(self) -> list[str]:
        """Every line printed so far."""
        with self._lock:
            return [line for _, line in self.lines]

    def wait_line(self, pattern: str, timeout: float, after: float = 0.0) -> tuple[float, re.Match[str]]:
        """The first line at or after ``after`` matching ``pattern``, with its time; fails after ``timeout``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        exited_seen = False
        while True:
            with self._lock:
                for stamp, line in self.lines:
                    match = regex.search(line)
                    if stamp >= after and match is not None:
                        return stamp, match
            if exited_seen:
                raise AssertionError(f"{self.name} exited ({self.process.returncode}):\n{self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no line matching {pattern!r} within {timeout}s:\n{self.describe()}")
            exited_seen = self.process.poll() is not None  # one more look once the reader has drained
            time.sleep(0.2 if exited_seen else 0.02)

    def owned(self) -> tuple[float, set[int]] | None:
        """The latest "owns queues" report (the time the consumer printed, the queues)."""
        with self._lock:
            for _, line in reversed(self.lines):
                match = OWNS_LINE.match(line)
                if match is not None:
                    return datetime.fromisoformat(match["time"]).timestamp(), set(ast.literal_eval(match["queues"]))
        return None

    def wait_owned(self, queues: set[int], timeout: float) -> float:
        """Waits until the consumer reports owning exactly ``queues``; returns when it printed that."""
        deadline = time.monotonic() + timeout
        while True:
            latest = self.owned()
            if latest is not None and latest[1] == queues:
                return latest[0]
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise AssertionError(
                    f"{self.name}: does not own {sorted(queues)} after {timeout}s (last: {latest}):\n{self.describe()}"
                )
            time.sleep(0.02)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM (clean leave), then the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> float:
        """SIGKILL; returns the time it was sent."""
        stamp = time.time()
        self.process.kill()
        self.process.wait(timeout=10)
        return stamp

    def json_result(self, timeout: float = 30.0) -> Any:
        """Waits for the exit and returns the last stdout line parsed as JSON."""
        self.process.wait(timeout=timeout)
        # The reader thread may not have read the last line yet (a loaded machine): wait for EOF.
        self._reader.join(timeout=READER_DRAIN_TIMEOUT)
        for line in reversed(self.output()):
            if line.startswith("{"):
                return json.loads(line)
        raise AssertionError(f"{self.name}: no JSON result:\n{self.describe()}")

    def finish(self) -> None:
        """Once the process has exited: waits for the reader and closes the pipes."""
        self._reader.join(timeout=5)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()

    def describe(self) -> str:
        """The last lines of output, for failure messages."""
        tail = "\n".join(self.output()[-40:])
        stderr = ""
        if self.process.poll() is not None and self.process.stderr is not None:
            stderr = self.process.stderr.read()[-4000:]
        return f"--- {self.name} stdout (tail)\n{tail}\n--- stderr\n{stderr}"


class Roles:
    """Starts role processes and makes sure none outlives the test."""

    def __init__(self, registry: Path) -> None:
        self.registry = registry
        self.started: list[Role] = []

    def start(self, name: str, *args: str, command: list[str] | None = None) -> Role:
        """Starts ``affinity group ARGS`` (or ``command``) as role ``name``."""
        process = subprocess.Popen(
            command or group_command(*args),
            env=role_env(self.registry),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,
        )
        role = Role(name, process)
        self.started.append(role)
        return role

    def close(self) -> None:
        """Kills whatever is still running, then waits for each and closes every pipe: every role
        is killed before anything is waited for, so one that will not die cannot keep the others
        running."""
        for role in self.started:
            if role.process.poll() is None:
                with contextlib.suppress(OSError):
                    role.process.kill()
        for role in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                role.process.wait(timeout=10)
            role.finish()


def roles_fixture(tmp_path: Path) -> Iterator[Roles]:
    """Body of the ``roles`` fixture: a ``Roles`` on a fresh registry, cleaned up afterwards."""
    roles = Roles(tmp_path / "registry")
    try:
        yield roles
    finally:
        roles.close()


def wait_until(what: str, predicate: Callable[[], bool], timeout: float) -> None:
    """Polls ``predicate`` until true; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


#: The script that runs a publisher, two consumers and a validator on two network-namespace hosts.
TWO_HOSTS = Path(__file__).parent / "groups_two_hosts.py"


def run_two_hosts(tmp_path: Path, registry: Path, *mode: str) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """Runs ``groups_two_hosts.py`` (in its own network namespace, ``mode`` its extra arguments)
    and returns what the publisher printed, the validator's last report and the member files the
    run saw (its ``MEMBERS`` line); skips saying why
    when this machine cannot make the hosts. The run must exit 0, every message acknowledged and
    validated (nothing lost or out of order), and both consumers used."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("two-host test needs root to create network namespaces and veth pairs")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("two-host test needs iproute2 (ip) and util-linux (unshare)")
    env = dict(os.environ, AFFINITY_REGISTRY=str(registry), PYTHONUNBUFFERED="1")
    result = subprocess.run(
        ["unshare", "-n", sys.executable, str(TWO_HOSTS), str(tmp_path), *mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    logs = "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(tmp_path.glob("*.log")))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{logs}"
    publisher_line = next(line for line in result.stdout.splitlines() if line.startswith("PUBLISHER"))
    published = json.loads(publisher_line.removeprefix("PUBLISHER "))
    assert published["acknowledged"] and published["sent"] == 4000
    report = json.loads((tmp_path / "validator.json").read_text().strip().splitlines()[-1])
    assert report["ok"] and report["lost"] == 0 and report["out_of_order"] == 0, report
    assert [report["highest"][str(k)] for k in range(100)] == published["per_key_last"]
    assert set(report["per_client"]) == {"0", "1"}
    members_line = next(line for line in result.stdout.splitlines() if line.startswith("MEMBERS"))
    return published, report, json.loads(members_line.removeprefix("MEMBERS "))
