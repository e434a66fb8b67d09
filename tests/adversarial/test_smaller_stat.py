"""``affinity stat`` against a real standalone driver whose ``cnc.dat`` is corrupted or whose process
died: one corrupt counter label or error record is shown marked (what and where) with everything else,
and a dead driver makes ``stat`` exit non-zero naming its pid. Offsets follow docs/driver-protocol.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from affinity.cli.stat import EXIT_CORRUPT, EXIT_DRIVER_DEAD, EXIT_OK
from conftest import StandaloneDriver, start_standalone_driver, stop_standalone_driver

#: cnc.dat header: where the section lengths are, and how long the header is.
TO_DRIVER_LENGTH, TO_CLIENTS_LENGTH, METADATA_LENGTH, VALUES_LENGTH = 4, 8, 12, 16
HEADER_LENGTH = 128
#: Counters metadata: bytes per record, and where the label length sits in one.
COUNTER_RECORD, LABEL_LENGTH_FIELD = 512, 128
#: Error log: record alignment and header length.
ERROR_ALIGNMENT, ERROR_HEADER = 64, 24
STAT_TIMEOUT_S = 30.0


def stat(directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "affinity.cli", "stat", "--dir", str(directory), *options],
        capture_output=True,
        text=True,
        timeout=STAT_TIMEOUT_S,
    )


def sections(cnc: bytes) -> tuple[int, int]:
    """Offsets of the counters metadata and of the error log in ``cnc``."""
    to_driver, to_clients, metadata, values = (
        struct.unpack_from("<i", cnc, field)[0]
        for field in (TO_DRIVER_LENGTH, TO_CLIENTS_LENGTH, METADATA_LENGTH, VALUES_LENGTH)
    )
    metadata_offset = HEADER_LENGTH + to_driver + to_clients
    return metadata_offset, metadata_offset + metadata + values


def poke(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(data)


def error_record(message: str, count: int = 1, at_ms: int = 1_700_000_000_000) -> bytes:
    body = message.encode()
    header = struct.pack("<iiqq", ERROR_HEADER + len(body), count, at_ms, at_ms)
    length = ERROR_HEADER + len(body)
    return (header + body).ljust((length + ERROR_ALIGNMENT - 1) // ERROR_ALIGNMENT * ERROR_ALIGNMENT, b"\0")


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[StandaloneDriver]:
    running = start_standalone_driver(tmp_path / "driver")
    yield running
    if running.process.poll() is None:
        stop_standalone_driver(running)


def test_a_corrupt_counter_label_is_marked_and_the_other_counters_are_shown(driver: StandaloneDriver) -> None:
    before = stat(driver.dir)
    assert before.returncode == EXIT_OK, before.stderr
    cnc_path = driver.dir / "cnc.dat"
    metadata, _ = sections(cnc_path.read_bytes())
    # Corrupt counter 1's label length in the live driver's file (the driver never reads labels).
    poke(cnc_path, metadata + COUNTER_RECORD + LABEL_LENGTH_FIELD, struct.pack("<i", 100_000))
    after = stat(driver.dir)
    assert after.returncode == EXIT_CORRUPT, after.stderr
    rows, rows_before = after.stdout.splitlines()[2:], before.stdout.splitlines()[2:]
    labels, labels_before = [row.split(" - ", 1)[1] for row in rows], [row.split(" - ", 1)[1] for row in rows_before]
    assert len(rows) == len(rows_before) > 2, after.stdout
    assert labels[1].startswith("CORRUPT corrupt counters metadata at offset"), after.stdout
    assert "counter 1: label length 100000 (at most 380)" in labels[1], after.stdout
    assert labels[:1] + labels[2:] == labels_before[:1] + labels_before[2:], "the other counters keep their labels"
    as_json = stat(driver.dir, "--json")
    assert as_json.returncode == EXIT_CORRUPT
    counters = json.loads(as_json.stdout)["counters"]
    assert counters[1]["label"] == "" and "label length 100000" in counters[1]["problem"]
    assert counters[0]["problem"] is None


def test_a_corrupt_error_record_is_marked_and_the_records_after_it_are_shown(
    driver: StandaloneDriver, tmp_path: Path
) -> None:
    # A copy of the live directory (same pid, fresh heartbeat): its error log gets three records, the
    # second with an impossible length.
    copy = tmp_path / "copy"
    shutil.copytree(driver.dir, copy)
    cnc_path = copy / "cnc.dat"
    _, error_log = sections(cnc_path.read_bytes())
    records = error_record("first error") + error_record("second error") + error_record("third error", count=4)
    poke(cnc_path, error_log, records)
    poke(cnc_path, error_log + ERROR_ALIGNMENT, struct.pack("<i", -7))
    shown = stat(copy, "--errors")
    assert shown.returncode == EXIT_CORRUPT, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 4, shown.stdout
    assert lines[0].endswith(": first error")
    expected = f"CORRUPT record: corrupt error log at offset {ERROR_ALIGNMENT}: record length -7 (must be 24..="
    assert lines[1].startswith(expected), shown.stdout
    assert lines[2].startswith("4 observations") and lines[2].endswith(": third error")
    assert lines[3] == f"2 distinct errors in {copy}, 1 corrupt"


def test_stat_exits_non_zero_naming_the_pid_of_a_driver_killed_with_sigkill(driver: StandaloneDriver) -> None:
    pid = driver.process.pid
    os.kill(pid, signal.SIGKILL)
    driver.process.communicate(timeout=STAT_TIMEOUT_S)  # reaps it and closes its pipes
    assert (driver.dir / "cnc.dat").exists(), "kill -9 leaves the directory behind"
    shown = stat(driver.dir)
    assert shown.returncode == EXIT_DRIVER_DEAD, (shown.stdout, shown.stderr)
    assert f"is dead: driver pid {pid} no longer exists" in shown.stderr
    assert f"driver pid {pid}" in shown.stdout, "the snapshot is still printed"
    watched = stat(driver.dir, "--watch", "10ms", "--count", "50", "--json")
    assert watched.returncode == EXIT_DRIVER_DEAD, "--watch stops at a dead driver"
    assert len(watched.stdout.splitlines()) == 1
    assert json.loads(watched.stdout)["dead"].startswith(f"driver pid {pid} no longer exists")


def test_a_live_driver_is_not_reported_dead(driver: StandaloneDriver) -> None:
    shown = stat(driver.dir, "--json")
    assert shown.returncode == EXIT_OK, shown.stderr
    assert json.loads(shown.stdout)["dead"] is None
