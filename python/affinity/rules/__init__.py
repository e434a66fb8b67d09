"""Routing policy plugins: the :class:`SelectionPolicy` protocol and how plugins are found.

A plugin is named in the configuration (``policy NAME`` inside ``add-source-group``) either by
the name of an entry point in the ``affinity.policies`` group or by a ``package.module:attribute``
path. :func:`load_policy` loads and validates it; the routing tables call it and guard its calls.
See ``docs/policies.md``.
"""

from __future__ import annotations

from affinity.rules.discovery import (
    BUILTIN_POLICIES,
    ENTRY_POINT_GROUP,
    SELECTIONS,
    FunctionPolicy,
    available_plugins,
    is_builtin_policy,
    load_policy,
    resolve_plugin,
    validate_spec,
)
from affinity.rules.protocol import SelectionPolicy

__all__ = [
    "BUILTIN_POLICIES",
    "ENTRY_POINT_GROUP",
    "SELECTIONS",
    "FunctionPolicy",
    "SelectionPolicy",
    "available_plugins",
    "is_builtin_policy",
    "load_policy",
    "resolve_plugin",
    "validate_spec",
]
