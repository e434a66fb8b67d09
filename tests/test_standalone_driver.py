"""The standalone driver as a process (``affinity driver``) and ``affinity stat`` reading it:
clean SIGTERM shutdown, a second driver refused by pid, permissions, corrupt and truncated cnc
files, and the typed snapshot API. Every wait is bounded."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat as stat_module
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import affinity
import pytest
from affinity.exceptions import DriverError
from affinity.testing import free_udp_port

CLI = [sys.executable, "-m", "affinity.cli"]
START_TIMEOUT_S = 20.0


def start_driver(directory: Path, *options: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*CLI, "driver", "--dir", str(directory), "--term-length", "1m", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "ready in" in line, f"driver did not start: {line!r} {process.stderr.read() if process.stderr else ''}"
    return process


def finish(process: subprocess.Popen[str]) -> int:
    """Waits for ``process`` (bounded), closes its pipes, returns its exit status."""
    process.communicate(timeout=10)
    return process.returncode


@pytest.fixture
def driver_dir(tmp_path: Path) -> Path:
    return tmp_path / "driver"


@pytest.fixture
def driver(driver_dir: Path) -> Iterator[subprocess.Popen[str]]:
    process = start_driver(driver_dir)
    yield process
    if process.poll() is None:
        process.kill()
    finish(process)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False)


def test_stat_json_lists_the_system_counters_of_a_running_driver(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    result = run_cli("stat", "--dir", str(driver_dir), "--json", "--watch", "100ms", "--count", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    snapshot = json.loads(lines[-1])
    assert snapshot["pid"] == driver.pid
    labels = {counter["label"]: counter["value"] for counter in snapshot["counters"]}
    assert labels["Clients"] == 0 and labels["Client timeouts"] == 0
    assert snapshot["heartbeat_age_ms"] < 5_000


def test_stat_table_and_errors_render(driver: subprocess.Popen[str], driver_dir: Path) -> None:
    table = run_cli("stat", "--dir", str(driver_dir))
    assert table.returncode == 0
    assert f"driver pid {driver.pid}" in table.stdout and "Commands received" in table.stdout
    errors = run_cli("stat", "--dir", str(driver_dir), "--errors")
    assert errors.returncode == 0 and "0 distinct errors" in errors.stdout


def test_refused_commands_land_in_the_error_log_with_count_and_first_and_last_time(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    # Parses, and only the driver refuses it (clients refuse what they can tell alone, such as
    # tags on aeron:udp, before a command is sent: those never reach the error log).
    channel = "aeron:ipc?session-id=5"
    with affinity.Client(dir=str(driver_dir)) as client:
        for _ in range(3):
            with pytest.raises(affinity.AffinityError, match=r"session-id is not supported on aeron:ipc"):
                client.add_publication(channel, 7)
            time.sleep(0.01)  # distinct first and last times (the log keeps milliseconds)
    stat = affinity.driver_stat(str(driver_dir))
    assert stat.counter("Errors") == 3
    [entry] = [e for e in stat.errors if "session-id" in e.message]
    assert entry.count == 3 and entry.first_ms < entry.last_ms
    printed = run_cli("stat", "--dir", str(driver_dir), "--errors")
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert lines[-1].startswith(f"{len(stat.errors)} distinct errors in ")
    assert any(line.startswith("3 observations from ") and "session-id" in line for line in lines), printed.stdout


def sockets_of(pid: int) -> list[str]:
    """The sockets a process holds (its file descriptors that are sockets)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed between the listing and the read
            continue
        if target.startswith("socket:"):
            found.append(target)
    return found


def test_the_driver_opens_no_socket_but_those_its_udp_channels_ask_for(
    driver: subprocess.Popen[str], driver_dir: Path
) -> None:
    assert sockets_of(driver.pid) == []
    with affinity.Client(dir=str(driver_dir)) as client:
        ipc = [client.add_subscription("aeron:ipc", 5), client.add_publication("aeron:ipc", 5)]
        assert sockets_of(driver.pid) == [], "clients and aeron:ipc use shared memory only"
        port = free_udp_port()
        udp = [client.add_subscription(f"aeron:udp?endpoint=127.0.0.1:{port}", 5)]
        assert len(sockets_of(driver.pid)) == 1
        udp.append(client.add_publication(f"aeron:udp?endpoint=127.0.0.1:{port}|linger=0", 5))
        assert len(sockets_of(driver.pid)) == 2
        for handle in [*udp, *ipc]:
            handle.close()
        deadline = time.monotonic() + 10
        while sockets_of(driver.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sockets_of(driver.pid) == [], "a closed channel's sockets are closed"


def test_typed_snapshot_api(driver: subprocess.Popen[str], driver_dir: Path) -> None:
    snapshot = affinity.driver_stat(str(driver_dir))
    assert snapshot.pid == driver.pid
    assert snapshot.counter("IPC publications") == 0
    assert snapshot.counter("no such counter") is None
    assert all(isinstance(c, affinity.CounterValue) for c in snapshot.counters)


def test_sigterm_shuts_down_cleanly_and_removes_the_files(driver: subprocess.Popen[str], driver_dir: Path) -> None:
    assert (driver_dir / "cnc.dat").exists()
    driver.send_signal(signal.SIGTERM)
    assert finish(driver) == 0
    assert not (driver_dir / "cnc.dat").exists()
    assert not driver_dir.exists(), "the emptied driver directory was left behind"
    gone = run_cli("stat", "--dir", str(driver_dir))
    assert gone.returncode == 1 and "cnc.dat" in gone.stderr


def test_sigint_shuts_down_cleanly(driver: subprocess.Popen[str], driver_dir: Path) -> None:
    driver.send_signal(signal.SIGINT)
    assert finish(driver) == 0
    assert not (driver_dir / "cnc.dat").exists()


def test_a_second_driver_refuses_and_names_the_pid(driver: subprocess.Popen[str], driver_dir: Path) -> None:
    second = run_cli("driver", "--dir", str(driver_dir))
    assert second.returncode == 1
    assert f"pid {driver.pid}" in second.stderr


def test_directory_is_0700_and_cnc_0600(driver: subprocess.Popen[str], driver_dir: Path) -> None:
    assert stat_module.S_IMODE(driver_dir.stat().st_mode) == 0o700
    assert stat_module.S_IMODE((driver_dir / "cnc.dat").stat().st_mode) == 0o600


@pytest.fixture
def shared_parent() -> Iterator[Path]:
    """A folder every user may traverse (``tmp_path`` is private to root), so that only the
    driver directory's own 0700 stands between another user and the driver."""
    parent = Path(tempfile.mkdtemp(prefix="affinity-perm-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    parent.chmod(0o711)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def outcome_as_user(uid: int, attempt: Callable[[], object]) -> str:
    """Runs ``attempt`` in a forked child that has switched to ``uid`` and returns what became of
    it: ``"ok"`` or the exception's class, errno and message. A fork, not a new interpreter: the
    interpreter may live where the other user cannot read it (a pyenv under /root)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running any of pytest's exit handlers
        try:
            os.close(read_end)
            os.setgid(pwd.getpwuid(uid).pw_gid)
            os.setuid(uid)
            try:
                attempt()
                text = "ok"
            except affinity.AffinityError as error:
                text = f"{type(error).__name__} {getattr(error, 'errno', None)} {error}"
            os.write(write_end, text.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        text = reader.read().decode()
    os.waitpid(pid, 0)
    return text


@pytest.mark.skipif(os.geteuid() != 0, reason="running a client as another user needs root (CI runs as root)")
def test_a_client_of_another_user_cannot_attach_and_is_told_why(shared_parent: Path) -> None:
    driver_dir = shared_parent / "driver"
    process = start_driver(driver_dir)
    nobody = pwd.getpwnam("nobody").pw_uid
    try:
        # The driver's own user attaches: what refuses the other user is the permissions alone.
        with affinity.Client(dir=str(driver_dir)):
            pass
        refused = outcome_as_user(nobody, lambda: affinity.Client(dir=str(driver_dir)).close())
        assert refused.startswith("AffinityOSError 13 "), refused
        assert f"cannot attach to the driver in {driver_dir}" in refused and "belongs to uid 0" in refused
        unreadable = outcome_as_user(nobody, lambda: affinity.driver_stat(str(driver_dir)))
        assert unreadable.startswith("DriverError") and "Permission denied" in unreadable, unreadable
        assert affinity.driver_stat(str(driver_dir)).pid == process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        assert finish(process) == 0


def test_a_killed_driver_leaves_a_stale_directory_that_a_new_driver_takes_over(driver_dir: Path) -> None:
    first = start_driver(driver_dir)
    first.kill()
    finish(first)
    second = start_driver(driver_dir)
    try:
        assert affinity.driver_stat(str(driver_dir)).pid == second.pid
    finally:
        second.send_signal(signal.SIGTERM)
        assert finish(second) == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"", "truncated"), (b"x" * 64, "truncated"), (b"\x07" * 4096, "magic")],
)
def test_a_corrupt_or_truncated_cnc_is_a_clear_error(driver_dir: Path, content: bytes, expected: str) -> None:
    driver_dir.mkdir(mode=0o700)
    (driver_dir / "cnc.dat").write_bytes(content)
    with pytest.raises(DriverError, match=expected):
        affinity.driver_stat(str(driver_dir))
    result = run_cli("stat", "--dir", str(driver_dir))
    assert result.returncode == 1 and expected in result.stderr


def test_bad_options_exit_2_with_the_option_named(driver_dir: Path) -> None:
    result = run_cli("driver", "--dir", str(driver_dir), "--term-length", "1000")
    assert result.returncode == 2 and "term_length=1000: must be a power of two" in result.stderr
    result = run_cli("driver", "--flow-control", "most")
    assert result.returncode == 2 and "flow_control=most: unknown flow control strategy" in result.stderr
    result = run_cli("driver", "--receiver-timeout", "0s")
    assert result.returncode == 2 and "receiver_timeout=0s: must be between 1ms and 3600s" in result.stderr
    result = run_cli("driver", "--threading", "many")
    assert result.returncode == 2 and "threading=many: expected one of shared, shared-network" in result.stderr
    assert run_cli("driver", "--help").stdout.startswith("usage: affinity driver")
    assert run_cli("stat", "--watch", "soon").returncode == 2


def test_default_directory_follows_affinity_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AFFINITY_DIR", str(tmp_path / "x"))
    assert affinity.default_driver_dir() == str(tmp_path / "x")
    monkeypatch.delenv("AFFINITY_DIR")
    assert affinity.default_driver_dir().startswith(("/dev/shm/affinity-", os.path.join(os.path.realpath("/tmp"), "")))


def test_driver_start_is_fast(driver_dir: Path) -> None:
    start = time.monotonic()
    process = start_driver(driver_dir)
    elapsed = time.monotonic() - start
    process.send_signal(signal.SIGTERM)
    assert finish(process) == 0
    assert elapsed < START_TIMEOUT_S
