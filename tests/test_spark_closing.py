"""``affinity.spark.closing``: what a stream source holds is closed on release, SIGTERM or exit.

No Spark here: the processes are plain Python ones, SIGTERM'd as Spark ends a source's worker.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from affinity.spark import closing
from spark_support import assert_exit_removes_driver_dirs, driver_dirs

#: A child that holds an embedded client's close (and a marker file's write), says "ready", then
#: waits to be ended; ``exit`` as its argument makes it return at once instead.
_CHILD = """
import sys, time
from pathlib import Path
import affinity
from affinity.spark.closing import hold

client = affinity.Client()
hold(client.close)
hold(lambda: Path(sys.argv[1]).write_text("closed"))
print("ready", flush=True)
if sys.argv[2] != "exit":
    time.sleep(60)
"""
CHILD_TIMEOUT_S = 30.0


@pytest.fixture
def default_sigterm() -> Iterator[None]:
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("the test runner handles SIGTERM itself")
    yield
    closing.close_all()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start_child(marker: Path, mode: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(marker), mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        pytest.fail(f"the child did not start: {line!r} {child.communicate(timeout=CHILD_TIMEOUT_S)[1]}")
    return child


def test_sigterm_closes_what_is_held_then_still_ends_the_process_by_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "closed"
    child = _start_child(marker, "wait")
    try:
        held = {child.pid: driver_dirs(child.pid)}
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == -signal.SIGTERM, err
    assert marker.read_text() == "closed"
    assert_exit_removes_driver_dirs(held)


def test_exit_closes_what_is_held(tmp_path: Path) -> None:
    marker = tmp_path / "closed"
    child = _start_child(marker, "exit")
    _, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, err
    assert marker.read_text() == "closed"


def test_a_release_closes_once_and_gives_sigterm_back_to_the_default(default_sigterm: None) -> None:
    closed: list[str] = []
    first = closing.hold(lambda: closed.append("first"))
    second = closing.hold(lambda: closed.append("second"))
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    first()
    first()
    assert closed == ["first"]
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, "released while something is still held"
    second()
    assert closed == ["first", "second"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_sigterm_handler_of_the_application_is_left_alone(default_sigterm: None) -> None:
    def handler(signum: int, frame: object) -> None:
        """The application's own."""

    signal.signal(signal.SIGTERM, handler)
    release = closing.hold(lambda: None)
    assert signal.getsignal(signal.SIGTERM) is handler
    release()
    assert signal.getsignal(signal.SIGTERM) is handler


def test_a_failing_close_does_not_stop_the_others(default_sigterm: None, caplog: pytest.LogCaptureFixture) -> None:
    closed: list[str] = []

    def fails() -> None:
        raise OSError("gone")

    closing.hold(lambda: closed.append("older"))
    closing.hold(fails)
    closing.close_all()
    assert closed == ["older"]
    assert "closing a stream source's transport failed" in caplog.text
