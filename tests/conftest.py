"""Shared fixtures for the pytest suite.

End-to-end modules run each test twice, once per driver kind: ``pytestmark =
pytest.mark.both_drivers`` in the module parametrizes ``driver_kind`` with ``"embedded"``
(``affinity.Client()`` runs the media driver in this process) and ``"standalone"`` (clients
attach with ``dir=`` to one ``affinity driver`` process the module starts). A test whose
``driver_kind`` cannot be ``"standalone"`` says why with ``@pytest.mark.embedded_only(reason)``:
its standalone case is reported as skipped with that reason, never dropped silently.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import affinity
import pytest
from affinity.testing import loopback_channel

DRIVER_KINDS = ("embedded", "standalone")
DRIVER_START_TIMEOUT_S = 30.0
DRIVER_STOP_TIMEOUT_S = 30.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_drivers: run each test against an embedded and a standalone driver")
    config.addinivalue_line(
        "markers", "embedded_only(reason): the standalone case of a both_drivers test does not apply, and why"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes ``driver_kind`` for tests of ``both_drivers`` modules (or tests)."""
    if "driver_kind" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("both_drivers") is None:
        return
    only = metafunc.definition.get_closest_marker("embedded_only")
    params: list[object] = ["embedded"]
    if only is None:
        params.append("standalone")
    else:
        reason = only.args[0] if only.args else only.kwargs.get("reason")
        if not reason:
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: embedded_only needs a reason")
        params.append(pytest.param("standalone", marks=pytest.mark.skip(reason=f"standalone: {reason}")))
    metafunc.parametrize("driver_kind", params)


@dataclass
class StandaloneDriver:
    """An ``affinity driver`` process and its directory."""

    dir: Path
    process: subprocess.Popen[str]
    options: tuple[str, ...] = ()

    def client(self, **settings: object) -> affinity.Client:
        """A client attached to this driver."""
        return affinity.Client(dir=str(self.dir), **settings)  # type: ignore[arg-type]


def start_standalone_driver(directory: Path, *options: str) -> StandaloneDriver:
    """Starts ``affinity driver --dir directory *options`` and waits (bounded) for "ready"."""
    process = subprocess.Popen(
        [sys.executable, "-m", "affinity.cli", "driver", "--dir", str(directory), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        line = process.stdout.readline()
    except BaseException:
        process.kill()
        raise
    if "ready in" not in line:
        process.kill()
        _, err = process.communicate(timeout=DRIVER_START_TIMEOUT_S)
        pytest.fail(f"affinity driver {' '.join(options)} did not start: {line!r} {err}")
    return StandaloneDriver(directory, process, options)


def stop_standalone_driver(driver: StandaloneDriver) -> None:
    """SIGTERM, then fails unless the driver exited cleanly (status 0) within the timeout."""
    process = driver.process
    if process.poll() is not None:
        _, err = process.communicate(timeout=DRIVER_STOP_TIMEOUT_S)
        pytest.fail(f"the standalone driver in {driver.dir} died during the tests (status {process.returncode}): {err}")
    process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=DRIVER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"the standalone driver in {driver.dir} ignored SIGTERM for {DRIVER_STOP_TIMEOUT_S} s: {err}")
    assert process.returncode == 0, f"the standalone driver exited with status {process.returncode} on SIGTERM: {err}"
    assert not (driver.dir / "cnc.dat").exists(), f"the standalone driver left {driver.dir / 'cnc.dat'} behind"


@pytest.fixture(scope="module")
def standalone_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneDriver]:
    """One ``affinity driver`` process (default settings) for the whole module, stopped with
    SIGTERM at the end; the module's last test fails if the driver did not exit cleanly."""
    driver = start_standalone_driver(tmp_path_factory.mktemp("standalone") / "driver")
    try:
        yield driver
    finally:
        stop_standalone_driver(driver)


@pytest.fixture
def driver_kind() -> str:
    """``"embedded"`` unless the test's module is marked ``both_drivers`` (then parametrized)."""
    return "embedded"


ClientFactory = Callable[[], affinity.Client]


@pytest.fixture
def new_client(
    driver_kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ClientFactory]:
    """Makes clients of ``driver_kind`` (each ``new_client()`` is a client of its own); any left
    open are closed after the test."""
    made: list[affinity.Client] = []
    standalone: StandaloneDriver | None = None
    if driver_kind == "standalone":
        standalone = request.getfixturevalue("standalone_driver")
    elif driver_kind == "embedded":
        # A $AFFINITY_DIR of the caller's would make Client() attach instead.
        monkeypatch.delenv("AFFINITY_DIR", raising=False)
    else:
        raise pytest.UsageError(f"driver_kind={driver_kind!r}: must be one of {DRIVER_KINDS}")

    def make() -> affinity.Client:
        client = affinity.Client() if standalone is None else standalone.client()
        made.append(client)
        assert (client.threading == "standalone") == (standalone is not None), client.threading
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def client(new_client: ClientFactory) -> affinity.Client:
    """A client of ``driver_kind`` (embedded unless parametrized), closed after the test."""
    return new_client()


@pytest.fixture
def client_env(driver_kind: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """The environment a child process needs so that its ``affinity.Client()`` is of
    ``driver_kind``: ``AFFINITY_DIR`` names the standalone driver, or is removed."""
    env = {key: value for key, value in os.environ.items() if key != "AFFINITY_DIR"}
    if driver_kind == "standalone":
        driver: StandaloneDriver = request.getfixturevalue("standalone_driver")
        env["AFFINITY_DIR"] = str(driver.dir)
    return env


@pytest.fixture
def channel() -> str:
    """A unicast loopback channel on a free port."""
    return loopback_channel()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """With AFFINITY_REQUIRE_SPARK=1 (set by scripts/test.sh), a skipped `spark` test fails.

    CI must run the Spark tests; a missing pyspark or Java must show up red, not as a skip.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("AFFINITY_REQUIRE_SPARK") == "1" and item.get_closest_marker("spark"):
        report.outcome = "failed"
        report.longrepr = f"spark test skipped while AFFINITY_REQUIRE_SPARK=1: {report.longrepr}"


class Stoppable(Protocol):
    """A process a test started (``stop()`` ends it)."""

    def stop(self) -> None: ...


@pytest.fixture
def processes() -> Iterator[list[Stoppable]]:
    """The processes a test starts (appended by the test); each is stopped when the test ends."""
    started: list[Stoppable] = []
    yield started
    for process in started:
        process.stop()
