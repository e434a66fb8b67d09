"""A plugin module whose import fails because a dependency is missing."""

from __future__ import annotations

import affinity_test_missing_dependency  # type: ignore[import-not-found]  # noqa: F401

POLICY = None
