"""Shared fixtures for the pytest suite."""

from __future__ import annotations

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
