"""A plugin module whose import raises."""

from __future__ import annotations

raise RuntimeError("plugin exploded on import")
