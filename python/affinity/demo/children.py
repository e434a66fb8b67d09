"""The demo's child processes: started with their stderr in a log file, stdout status lines read on a thread."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from affinity.demo import protocol


@dataclass
class ConsumerState:
    """What the orchestrator knows about one consumer process."""

    ordinal: int
    index: int
    started_at: float
    status: protocol.ConsumerStatus | None = None
    killed_at: float | None = None

    @property
    def label(self) -> str:
        """``c<ordinal>`` (the ordinal is unique; a replacement reuses the index, not the label)."""
        return f"c{self.ordinal}"


@dataclass
class GeneratorState:
    """What the orchestrator knows about the generator process."""

    progress: protocol.GeneratorProgress | None = None
    #: (seconds since start, events generated) samples, for the chart.
    samples: list[tuple[float, int]] = field(default_factory=list)


#: Seconds between checks that a process group is empty.
_GROUP_POLL_INTERVAL = 0.05


class Child:
    """One child process; :attr:`latest` is its last status line (read on a thread).

    With ``own_group`` it leads a process group of its own, which its children (a JVM) join, so
    that :meth:`wait_group` can tell when they are gone too.
    """

    def __init__(
        self, name: str, command: Sequence[str], log_dir: Path, env: dict[str, str], own_group: bool = False
    ) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        self.process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=own_group,
        )
        self._own_group = own_group
        self._lock = threading.Lock()
        self._updates: list[protocol.Status] = []
        self._failure: protocol.ProtocolError | None = None
        self._thread = threading.Thread(target=self._read, name=f"affinity-demo-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        stream = self.process.stdout
        if stream is None:
            return
        for line in stream:
            try:
                status = protocol.decode(line)
            except protocol.ProtocolError as error:
                with self._lock:
                    self._failure = error
                continue
            if status is not None:
                with self._lock:
                    self._updates.append(status)

    def updates(self) -> list[protocol.Status]:
        """Status lines received since the last call, oldest first; raises on an unreadable line."""
        with self._lock:
            if self._failure is not None:
                raise self._failure
            updates, self._updates = self._updates, []
        return updates

    @property
    def alive(self) -> bool:
        """The process is still running."""
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL."""
        if self.alive:
            self.process.send_signal(signal.SIGKILL)

    def terminate(self, timeout: float) -> int:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL; returns the exit code."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._thread.join(timeout=1.0)
        self._log.close()
        return code

    def wait_group(self, timeout: float) -> bool:
        """Once the child is reaped: waits up to ``timeout`` s for the rest of its process group
        (``own_group`` only) to exit; whether it did."""
        if not self._own_group:
            return True
        deadline = time.monotonic() + timeout
        while True:
            try:
                os.killpg(self.process.pid, 0)
            except ProcessLookupError:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(_GROUP_POLL_INTERVAL)

    def signal_all(self, signum: int) -> None:
        """Sends ``signum`` to the child, and with ``own_group`` to its whole process group."""
        try:
            if self._own_group:
                os.killpg(self.process.pid, signum)
            elif self.alive:
                self.process.send_signal(signum)
        except ProcessLookupError:
            pass

    def log_tail(self, lines: int = 15) -> str:
        """The end of the child's stderr log."""
        self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def stop_all(children: Sequence[Child], timeout: float) -> None:
    """SIGTERM to every child (and the process groups of those that lead one) at once, then waits
    up to ``timeout`` s in all for them to close cleanly; SIGKILL to whatever is left."""
    for child in children:
        child.signal_all(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()
        if not child.wait_group(max(deadline - time.monotonic(), 0.0)):
            child.signal_all(signal.SIGKILL)


def python_module_command(module: str, *args: str) -> list[str]:
    """``python -m module args...`` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def child_environment(registry: Path) -> dict[str, str]:
    """The environment of every child: unbuffered output and the demo's registry."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["AFFINITY_REGISTRY"] = str(registry)
    return env
