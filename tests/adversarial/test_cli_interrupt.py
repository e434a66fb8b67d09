"""Ctrl-C on the long-running commands, with real processes: ``affinity demo`` (SIGINT to its whole
process group, as a terminal sends it) stops every child, removes every embedded driver's folder,
writes a partial report and exits 130; ``affinity stat --watch`` and ``affinity group status
--watch`` exit 130 without a traceback. Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from affinity._affinity import default_driver_dir
from affinity.demo.settings import CHART_PNG, REPORT_JSON, REPORT_TEXT

CLI = [sys.executable, "-m", "affinity.cli"]
#: Exit code after Ctrl-C (128 + SIGINT).
INTERRUPTED = 130
#: Seconds the demo may take to reach event generation (three consumers start first).
DEMO_START_TIMEOUT = 90.0
#: Seconds the demo may take to stop after Ctrl-C (its children get 10 s to close).
DEMO_STOP_TIMEOUT = 60.0
#: Seconds between two looks at the demo's process group.
POLL = 0.1


def embedded_root() -> Path:
    """Where this user's embedded drivers make their folders (``<pid>-<n>`` each)."""
    return Path(default_driver_dir() + "-embedded")


def group_members(pgid: int) -> set[int]:
    """Pids of the live processes in process group ``pgid``."""
    members = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state, ppid, pgrp, ...; a zombie is gone already.
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.add(int(entry.name))
    return members


def folders_of(pids: set[int]) -> list[Path]:
    """Embedded-driver folders made by any of ``pids``."""
    root = embedded_root()
    if not root.exists():
        return []
    return [entry for entry in root.iterdir() if entry.name.split("-", 1)[0] in {str(p) for p in pids}]


def test_ctrl_c_stops_the_demo_and_its_children_and_leaves_a_partial_report_and_no_shm_folder(
    tmp_path: Path,
) -> None:
    # Without --out the report goes under $XDG_DATA_HOME, never into the current directory.
    data, cwd = tmp_path / "data", tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    log = tmp_path / "demo.log"
    command = [*CLI, "demo", "--no-spark", "--no-live", "--duration", "30", "--rate", "500", "--accounts", "300"]
    seen: set[int] = set()
    with log.open("wb") as sink:
        demo = subprocess.Popen(command, stdout=sink, stderr=sink, cwd=cwd, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + DEMO_START_TIMEOUT
            while "generating events" not in log.read_text(errors="replace"):
                assert demo.poll() is None, log.read_text(errors="replace")
                assert time.monotonic() < deadline, "the demo did not start generating"
                seen |= group_members(demo.pid)
                time.sleep(POLL)
            # A few seconds of traffic: the consumers, the generator and the validator all run.
            until = time.monotonic() + 3.0
            while time.monotonic() < until:
                seen |= group_members(demo.pid)
                time.sleep(POLL)
            assert len(seen) >= 5, f"expected the demo, three consumers and the generator, saw {sorted(seen)}"
            assert folders_of(seen), "the demo's processes made no embedded-driver folder to look for"
            os.killpg(demo.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
            code = demo.wait(DEMO_STOP_TIMEOUT)
        finally:
            if demo.poll() is None:
                os.killpg(demo.pid, signal.SIGKILL)
                demo.wait()
    text = log.read_text(errors="replace")
    assert code == INTERRUPTED, text
    assert "Traceback" not in text, text
    assert group_members(demo.pid) == set(), "a child of the demo survived Ctrl-C"
    assert list(cwd.iterdir()) == [], "the demo wrote into the current directory"
    (out,) = (data / "affinity" / "demo").iterdir()
    assert out.name.startswith("affinity-demo-")
    assert folders_of(seen) == [], "Ctrl-C left embedded-driver folders in /dev/shm"
    report = json.loads((out / REPORT_JSON).read_text())
    assert report["interrupted"] is True and report["passed"] is False
    assert report["interrupted_at"] > 0
    assert report["generated"] > 0 and report["validation"]["received"] > 0
    assert "INTERRUPTED" in (out / REPORT_TEXT).read_text()
    assert (out / CHART_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"partial report and chart written to {out}/" in text
    assert f"writing the report, chart and logs to {out}/" in text


def interrupt_after_first_output(command: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Starts ``command``, waits for its first line of output, sends SIGINT; (exit code, stdout, stderr)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first, process.stderr.read() if process.stderr else ""
        time.sleep(0.5)  # into the sleep between two refreshes
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, first + stdout, stderr


@pytest.fixture
def driver_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "driver"
    driver = subprocess.Popen(
        [*CLI, "driver", "--dir", str(directory), "--term-length", "1m"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        assert "ready in" in driver.stdout.readline()
        yield directory
    finally:
        driver.send_signal(signal.SIGTERM)
        driver.communicate(timeout=20)


def test_ctrl_c_ends_stat_watch_with_130_and_no_traceback(driver_dir: Path) -> None:
    code, stdout, stderr = interrupt_after_first_output([*CLI, "stat", "--dir", str(driver_dir), "--watch", "200ms"])
    assert code == INTERRUPTED, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert str(driver_dir) in stdout


def test_ctrl_c_ends_group_status_watch_with_130_and_no_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "AFFINITY_REGISTRY": str(tmp_path / "registry")}
    created = subprocess.run(
        [
            *CLI,
            "group",
            "create",
            "watched",
            "--hash-prefix",
            "w",
            "--hash-count",
            "8",
            "--queue-count",
            "2",
            "--queue-size",
            "1048576",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    command = [*CLI, "group", "status", "watched", "--json", "--settle", "0.2s", "--watch", "200ms"]
    code, stdout, stderr = interrupt_after_first_output(command, env)
    assert code == INTERRUPTED, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert json.loads(stdout.splitlines()[0])["queues"]
