"""A ``cnc.dat`` that is a FIFO or a symbolic link: a client attaching and ``affinity stat`` get
a quick, precise error instead of blocking in ``open`` for ever (the old code opened the cnc
file plainly: a FIFO with no writer never returns). Each run is a process bounded in time. And
the driver's ``publications/`` folder is ``0700`` (it was made with the umask's mode)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import start_standalone_driver, stop_standalone_driver

#: Longest a refusal may take (it is at once; this only bounds a hang).
REFUSAL_TIMEOUT_S = 20.0


def run(*args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args)} hung")


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_cnc_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    directory = tmp_path / "driver"
    directory.mkdir(mode=0o700)
    cnc = directory / "cnc.dat"
    if kind == "fifo":
        os.mkfifo(cnc, 0o600)
        expected = f"invalid cnc file {cnc}: is not a regular file: refused"
    else:
        (tmp_path / "elsewhere").write_bytes(b"\0" * 4096)
        os.symlink(tmp_path / "elsewhere", cnc)
        expected = f"invalid cnc file {cnc}: is a symbolic link: refused"
    client = run("-c", f"import affinity\naffinity.Client(dir={str(directory)!r})")
    assert client.returncode != 0 and expected in client.stderr, client.stderr
    stat_run = run("-m", "affinity.cli", "stat", "--dir", str(directory))
    assert stat_run.returncode != 0 and expected in stat_run.stderr, stat_run.stderr


def test_the_publications_folder_is_private(tmp_path: Path) -> None:
    driver = start_standalone_driver(tmp_path / "driver")
    try:
        assert stat.S_IMODE((driver.dir / "publications").stat().st_mode) == 0o700
    finally:
        stop_standalone_driver(driver)
