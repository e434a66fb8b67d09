"""Finding and loading policy plugins: entry points and ``package.module:attribute`` paths."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

from affinity import _affinity
from affinity.exceptions import PolicyError
from affinity.rules.protocol import SelectionPolicy

__all__ = [
    "BUILTIN_POLICIES",
    "ENTRY_POINT_GROUP",
    "SELECTIONS",
    "FunctionPolicy",
    "available_plugins",
    "is_builtin_policy",
    "load_policy",
    "resolve_plugin",
    "validate_spec",
]

#: Entry point group under which distributions register policy plugins.
ENTRY_POINT_GROUP = "affinity.policies"

#: Policies implemented by the routing tables themselves (never loaded as plugins): the Rust
#: registry, in documentation order.
BUILTIN_POLICIES: tuple[str, ...] = _affinity.BUILTIN_POLICIES
#: Hash selection functions (``selection NAME``): built in too, and not policies.
SELECTIONS: tuple[str, ...] = _affinity.SELECTIONS

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED_PATH = re.compile(
    rf"\A(?P<module>{_IDENTIFIER}(?:\.{_IDENTIFIER})*)"
    rf":(?P<attribute>{_IDENTIFIER}(?:\.{_IDENTIFIER})*)\Z"
)
_ENTRY_POINT_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")


def is_builtin_policy(name: str) -> bool:
    """Whether ``name`` is a policy of the routing tables rather than a plugin."""
    return name in BUILTIN_POLICIES


def available_plugins() -> dict[str, str]:
    """Registered plugin names → their ``module:attribute`` (from installed metadata only)."""
    return {entry.name: entry.value for entry in _entry_points()}


def validate_spec(spec: str, group: str = ENTRY_POINT_GROUP) -> None:
    """Check a plugin spec without importing anything; :class:`PolicyError` if it cannot work.

    A spec with ``:`` must be a well-formed ``package.module:attribute``; any other spec must be
    the name of a registered entry point of ``group`` (the policies' by default; the cluster's
    master mappers use this same mechanism with a group of their own).
    """
    if group == ENTRY_POINT_GROUP:
        if is_builtin_policy(spec):
            return
        _refuse_selection(spec)
    if ":" in spec:
        _split_path(spec)
        return
    _entry_point(spec, group)


def resolve_plugin(spec: str, group: str) -> object:
    """The object ``spec`` names, not yet checked: ``package.module:attribute`` (imported) or the
    name of an entry point of ``group`` (loaded). :func:`load_policy` and the cluster's master
    mappers (:mod:`affinity.cluster_mapping`) both load through it; raises :class:`PolicyError`
    saying what is wrong (bad spec, module not found, import failure, attribute missing, unknown
    or ambiguous entry-point name)."""
    if ":" in spec:
        module_name, attribute = _split_path(spec)
        return _resolve(module_name, attribute, spec)
    entry = _entry_point(spec, group)
    try:
        return entry.load()
    except Exception as exc:
        raise PolicyError(f"loading entry point {spec!r} ({entry.value}) failed: {type(exc).__name__}: {exc}") from exc


def _refuse_selection(spec: str) -> None:
    if spec in SELECTIONS:
        raise PolicyError(
            f"{spec!r} is a selection function, not a policy: write selection {spec} "
            f"(policies: {', '.join(BUILTIN_POLICIES)})"
        )


def load_policy(spec: str) -> SelectionPolicy:
    """Load the plugin named by ``spec`` and return a validated :class:`SelectionPolicy`.

    ``spec`` is ``package.module:attribute`` (the attribute may be dotted) or the name of an
    entry point in :data:`ENTRY_POINT_GROUP`. The loaded object may be:

    * an object with a ``select(composite, candidates)`` method (an instance, or a module);
    * a class: it is instantiated without arguments;
    * a function of two arguments ``(composite, candidates)``: it is the ``select`` itself;
    * a factory of no arguments returning one of the above objects.

    Raises :class:`PolicyError` saying what is wrong: bad spec, built-in name, module not found,
    import failure, attribute missing, not a policy, wrong ``select`` signature.
    """
    if is_builtin_policy(spec):
        raise PolicyError(f"{spec!r} is a built-in policy, not a plugin")
    _refuse_selection(spec)
    return _as_policy(resolve_plugin(spec, ENTRY_POINT_GROUP), spec)


class FunctionPolicy:
    """A plain function ``select(composite, candidates) -> label`` used as a policy."""

    def __init__(self, function: Callable[[str, Sequence[str]], str]) -> None:
        self.function = function

    def select(self, composite: str, candidates: Sequence[str]) -> str:
        """Call the wrapped function."""
        return self.function(composite, candidates)

    def __repr__(self) -> str:
        return f"FunctionPolicy({self.function!r})"


def _split_path(spec: str) -> tuple[str, str]:
    match = _DOTTED_PATH.match(spec)
    if match is None:
        raise PolicyError(
            f"malformed plugin path {spec!r}: expected package.module:attribute "
            "(Python identifiers separated by dots, one colon)"
        )
    return match.group("module"), match.group("attribute")


def _entry_points(group: str = ENTRY_POINT_GROUP) -> list[importlib.metadata.EntryPoint]:
    return list(importlib.metadata.entry_points(group=group))


def _entry_point(name: str, group: str = ENTRY_POINT_GROUP) -> importlib.metadata.EntryPoint:
    policies = group == ENTRY_POINT_GROUP
    kind = "policy plugin" if policies else "plugin"
    builtin = f"; built-in: {', '.join(BUILTIN_POLICIES)}" if policies else ""
    if not _ENTRY_POINT_NAME.match(name):
        what = f"a built-in policy ({', '.join(BUILTIN_POLICIES)}), " if policies else ""
        raise PolicyError(f"{name!r} is neither {what}a plugin name nor a package.module:attribute path")
    entries = _entry_points(group)
    matches = [entry for entry in entries if entry.name == name]
    if not matches:
        known = sorted(entry.name for entry in entries)
        listing = ", ".join(known) if known else "none installed"
        raise PolicyError(
            f"no {kind} named {name!r} in entry point group {group!r} "
            f"(plugins: {listing}{builtin}); "
            "to load by path write package.module:attribute"
        )
    if len({entry.value for entry in matches}) > 1:
        raise PolicyError(
            f"{kind} name {name!r} is registered several times: " + ", ".join(entry.value for entry in matches)
        )
    return matches[0]


def _resolve(module_name: str, attribute: str, spec: str) -> object:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise PolicyError(f"module {module_name!r} not found (plugin {spec!r})") from exc
        raise PolicyError(f"importing module {module_name!r} failed: it needs module {exc.name!r}, not found") from exc
    except Exception as exc:
        raise PolicyError(f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    target: object = module
    walked: list[str] = []
    for part in attribute.split("."):
        if not hasattr(target, part):
            where = f"{module_name}:{'.'.join(walked)}" if walked else module_name
            raise PolicyError(f"{where!r} has no attribute {part!r} (plugin {spec!r})")
        target = getattr(target, part)
        walked.append(part)
    return target


def _as_policy(target: object, spec: str) -> SelectionPolicy:
    if inspect.isclass(target):
        target = _call(target, spec, "instantiating class")
        return _checked(target, spec)
    if callable(getattr(target, "select", None)):
        return _checked(target, spec)
    if callable(target):
        if _accepts(target, 2):
            return FunctionPolicy(target)
        if _accepts(target, 0):
            return _checked(_call(target, spec, "calling factory"), spec)
        raise PolicyError(f"plugin {spec!r} is a function taking neither (composite, candidates) nor nothing")
    raise PolicyError(
        f"plugin {spec!r} is a {type(target).__name__}, not a policy: expected an object with "
        "select(composite, candidates), a class, or a function"
    )


def _call(factory: Callable[[], object], spec: str, what: str) -> object:
    try:
        return factory()
    except Exception as exc:
        raise PolicyError(f"{what} of plugin {spec!r} failed: {type(exc).__name__}: {exc}") from exc


def _checked(target: object, spec: str) -> SelectionPolicy:
    select = getattr(target, "select", None)
    if not callable(select):
        raise PolicyError(f"plugin {spec!r} gave a {type(target).__name__} without a callable select method")
    if not _accepts(select, 2):
        raise PolicyError(
            f"plugin {spec!r}: select must accept (composite, candidates); its signature is {_signature(select)}"
        )
    if not isinstance(target, SelectionPolicy):  # pragma: no cover - guaranteed above
        raise PolicyError(f"plugin {spec!r} is not a SelectionPolicy")
    return target


def _accepts(function: Callable[..., Any], count: int) -> bool:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return count == 2  # builtins without a signature: trust them with the call shape
    try:
        signature.bind(*(["x"] * count))
    except TypeError:
        return False
    return True


def _signature(function: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(function))
    except (TypeError, ValueError):
        return "(unknown)"
