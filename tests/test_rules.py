"""Policy plugins: loading by dotted path and by entry point, and precise load errors."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence

import pytest
from affinity.exceptions import PolicyError
from affinity.rules import (
    BUILTIN_POLICIES,
    ENTRY_POINT_GROUP,
    FunctionPolicy,
    SelectionPolicy,
    available_plugins,
    is_builtin_policy,
    load_policy,
    validate_spec,
)

CANDIDATES = ("peer1", "peer2", "peer3")


def fake_entry_points(
    monkeypatch: pytest.MonkeyPatch, *entries: tuple[str, str], group: str = ENTRY_POINT_GROUP
) -> None:
    """Make ``importlib.metadata.entry_points`` see only ``entries`` (name, value) in ``group``."""
    points = importlib.metadata.EntryPoints(
        importlib.metadata.EntryPoint(name=name, value=value, group=group) for name, value in entries
    )

    def entry_points(*, group: str) -> importlib.metadata.EntryPoints:
        return points.select(group=group)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


# -- built-ins -----------------------------------------------------------------------------------


def test_builtin_names_are_not_plugins() -> None:
    for name in ("workload", "least-assigned", "round-robin"):
        assert is_builtin_policy(name)
        assert name in BUILTIN_POLICIES
        with pytest.raises(PolicyError, match=f"'{name}' is a built-in policy, not a plugin"):
            load_policy(name)
    assert not is_builtin_policy("sample_policies:Crc32")


def test_selection_names_are_neither_policies_nor_plugins() -> None:
    for name in ("modulo", "rendezvous"):
        assert not is_builtin_policy(name)
        with pytest.raises(PolicyError, match=f"'{name}' is a selection function, not a policy"):
            load_policy(name)


def test_builtin_policy_names_come_from_the_rust_registry() -> None:
    import affinity.routing
    from affinity import _affinity
    from affinity.config import syntax

    assert BUILTIN_POLICIES == _affinity.BUILTIN_POLICIES == affinity.routing.BUILTIN_POLICIES
    assert syntax.SELECTIONS == _affinity.SELECTIONS == affinity.routing.SELECTIONS
    for name in BUILTIN_POLICIES:  # every registered name is usable by the routing tables
        affinity.routing.Router().add_source_group("g", [["m"]], policy=name)


# -- dotted paths ----------------------------------------------------------------------------------


def test_class_by_dotted_path_is_instantiated() -> None:
    policy = load_policy("sample_policies:Crc32")
    assert isinstance(policy, SelectionPolicy)
    assert policy.select("k:alice", CANDIDATES) in CANDIDATES
    assert policy.select("k:alice", CANDIDATES) == policy.select("k:alice", CANDIDATES)


def test_instance_by_dotted_path_is_used_as_is() -> None:
    import sample_policies

    assert load_policy("sample_policies:INSTANCE") is sample_policies.INSTANCE


def test_nested_attribute_path() -> None:
    import sample_policies

    assert load_policy("sample_policies:Namespace.inner") is sample_policies.Namespace.inner


def test_two_argument_function_is_wrapped_as_a_policy() -> None:
    policy = load_policy("sample_policies:last_candidate")
    assert isinstance(policy, FunctionPolicy)
    assert policy.select("x", CANDIDATES) == "peer3"


def test_zero_argument_factory_is_called() -> None:
    policy = load_policy("sample_policies:make_first")
    assert policy.select("x", CANDIDATES) == "peer1"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_xyz:Policy", "module 'no_such_module_xyz' not found"),
        ("sample_policies.sub:Policy", "module 'sample_policies.sub' not found"),
        (
            "sample_policies_broken:POLICY",
            "importing module 'sample_policies_broken' failed: it needs module "
            "'affinity_test_missing_dependency', not found",
        ),
        (
            "sample_policies_raising:POLICY",
            "importing module 'sample_policies_raising' failed: RuntimeError: plugin exploded",
        ),
        ("sample_policies:Missing", "'sample_policies' has no attribute 'Missing'"),
        (
            "sample_policies:Namespace.missing",
            "'sample_policies:Namespace' has no attribute 'missing'",
        ),
        ("sample_policies:NOT_A_POLICY", "is a int, not a policy"),
        ("sample_policies:NoSelect", "gave a NoSelect without a callable select method"),
        ("sample_policies:WrongSelect", "select must accept (composite, candidates)"),
        (
            "sample_policies:NeedsArguments",
            "instantiating class of plugin 'sample_policies:NeedsArguments' failed: TypeError",
        ),
        ("sample_policies:three_arguments", "a function taking neither"),
        ("sample policies:X", "malformed plugin path"),
        ("sample_policies:", "malformed plugin path"),
        ("a:b:c", "malformed plugin path"),
    ],
)
def test_load_errors_are_precise(spec: str, message: str) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy(spec)
    assert message in str(caught.value)


# -- entry points ----------------------------------------------------------------------------------


def test_plugin_by_entry_point_name(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("crc", "sample_policies:Crc32"))
    policy = load_policy("crc")
    assert type(policy).__name__ == "Crc32"
    assert available_plugins() == {"crc": "sample_policies:Crc32"}


def test_entry_points_of_other_groups_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("crc", "sample_policies:Crc32"), group="other.group")
    with pytest.raises(PolicyError, match=r"no policy plugin named 'crc'.*none installed"):
        load_policy("crc")


def test_unknown_entry_point_lists_the_installed_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("crc", "sample_policies:Crc32"))
    with pytest.raises(PolicyError, match=r"no policy plugin named 'sticky'.*plugins: crc;"):
        load_policy("sticky")


def test_entry_point_registered_twice_is_ambiguous(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("crc", "sample_policies:Crc32"), ("crc", "sample_policies:FirstCandidate"))
    with pytest.raises(PolicyError, match="registered several times"):
        load_policy("crc")


def test_entry_point_that_fails_to_load(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("gone", "no_such_module_xyz:Policy"))
    with pytest.raises(PolicyError, match=r"loading entry point 'gone' \(no_such_module_xyz"):
        load_policy("gone")


def test_validate_spec_does_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_entry_points(monkeypatch, ("gone", "no_such_module_xyz:Policy"))
    validate_spec("gone")
    validate_spec("no_such_module_xyz:Policy")
    validate_spec("workload")
    with pytest.raises(PolicyError, match="no policy plugin named 'other'"):
        validate_spec("other")


# -- the protocol ----------------------------------------------------------------------------------


def test_protocol_is_runtime_checkable() -> None:
    class Mine:
        def select(self, composite: str, candidates: Sequence[str]) -> str:
            return candidates[0]

    assert isinstance(Mine(), SelectionPolicy)
    assert not isinstance(object(), SelectionPolicy)
