"""The standalone-driver fixture of conftest.py stops its driver with SIGTERM and fails the
tests unless the driver exits cleanly: shown here on a live driver and on one killed with
SIGKILL (a real process each)."""

from __future__ import annotations

from pathlib import Path

import affinity
import pytest
from conftest import start_standalone_driver, stop_standalone_driver


def test_stopping_a_live_driver_passes_and_leaves_no_cnc_file(tmp_path: Path) -> None:
    driver = start_standalone_driver(tmp_path / "driver")
    with driver.client() as client:
        assert client.threading == "standalone"
    assert (driver.dir / "cnc.dat").exists()
    stop_standalone_driver(driver)
    assert driver.process.returncode == 0
    assert not (driver.dir / "cnc.dat").exists()


def test_stopping_a_driver_that_died_fails_and_names_its_status(tmp_path: Path) -> None:
    driver = start_standalone_driver(tmp_path / "driver")
    driver.process.kill()
    driver.process.wait(timeout=30)
    with pytest.raises(pytest.fail.Exception, match=r"died during the tests \(status -9\)"):
        stop_standalone_driver(driver)


def test_after_a_clean_stop_no_client_can_attach(tmp_path: Path) -> None:
    driver = start_standalone_driver(tmp_path / "driver")
    stop_standalone_driver(driver)
    with pytest.raises(affinity.DriverTimeoutError, match="no driver is running"):
        driver.client()
