"""Shared fixtures: the configuration files under ``tests/data``."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    """The directory of configuration fixtures copied from the seed."""
    return DATA
