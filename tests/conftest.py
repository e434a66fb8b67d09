"""Shared fixtures for the pytest suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import affinity
import pytest
from affinity.testing import loopback_channel


@pytest.fixture
def client() -> Iterator[affinity.Client]:
    """An embedded-driver client, closed after the test."""
    with affinity.Client() as c:
        yield c


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
