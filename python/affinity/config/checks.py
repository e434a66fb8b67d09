"""The configuration checklist, as checks over a parsed :class:`RoutingConfig`.

From the "Configuration checklist" and syntax notes of Caplin-style source affinity:

* an affinity regular expression is a POSIX ERE with exactly one capture group, written without
  ``/.../`` delimiters, without escaped slashes, and without ``|`` (write several ``affinity``
  options instead);
* source groups that share an affinity key have identical priority groups (same labels, same
  order) — and, with our ``selection`` extension, the same selection function;
* labels under source affinity should not use ``THIS_LEG`` / ``OTHER_LEG`` (warning);
* rules sharing an affinity key should extract the same kind of value (warning; heuristic:
  their capture groups' sub-patterns should be the same text).

Plus the structure: a named data service (names unique), a source group with at least one
priority group, no empty priority group, valid ``include-pattern``, ``selection`` and
``policy`` values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from affinity._affinity import PosixRegex
from affinity.config import ere
from affinity.config.diagnostics import Diagnostic, error, warning
from affinity.config.model import AffinityRule, DataService, Location, RoutingConfig, SourceGroup
from affinity.config.syntax import SELECTIONS
from affinity.exceptions import PolicyError
from affinity.rules import discovery

__all__ = ["check", "check_affinity_pattern"]

#: Two-leg variables that must not appear in peer labels under source affinity.
LEG_VARIABLES = ("THIS_LEG", "OTHER_LEG")


def check(config: RoutingConfig, *, load_plugins: bool = False) -> list[Diagnostic]:
    """Every checklist diagnostic for ``config`` (the syntax ones come from the parser).

    With ``load_plugins``, each ``policy`` plugin is imported and validated; otherwise only its
    spelling (and, for an entry-point name, its registration) is checked.
    """
    diagnostics: list[Diagnostic] = []
    diagnostics.extend(_check_service_names(config))
    for service in config.data_services:
        diagnostics.extend(_check_service(service))
        for group in service.source_groups:
            diagnostics.extend(_check_source_group(group, load_plugins=load_plugins))
    diagnostics.extend(_check_shared_keys(config))
    return diagnostics


def check_affinity_pattern(rule: AffinityRule) -> list[Diagnostic]:
    """The checks on one ``affinity`` regular expression."""
    diagnostics: list[Diagnostic] = []
    pattern = rule.pattern
    scan = ere.scan(pattern)
    if ere.delimited(pattern):
        diagnostics.append(
            error(
                _at(rule, 0),
                "do not wrap the regular expression in /.../ delimiters: write it bare, as sed -r takes it",
            )
        )
    else:
        for index in scan.escaped_slashes:
            diagnostics.append(warning(_at(rule, index), "do not escape forward slashes: write / instead of \\/"))
    for index in scan.alternations:
        diagnostics.append(
            error(
                _at(rule, index),
                "do not use | alternation in an affinity regular expression: "
                "write one affinity option per alternative (they are tried in order)",
            )
        )
    try:
        count = PosixRegex(pattern).group_count
    except ValueError as exc:
        diagnostics.append(error(_at(rule, 0), str(exc)))
        return diagnostics
    if count == 0:
        diagnostics.append(
            error(
                _at(rule, 0),
                "the regular expression has no capture group: add exactly one ( ) around the value to extract",
            )
        )
    elif count > 1:
        second = scan.groups[1][0] if len(scan.groups) > 1 else 0
        diagnostics.append(
            error(
                _at(rule, second),
                f"the regular expression has {count} capture groups: an affinity regular expression needs exactly one",
            )
        )
    return diagnostics


# -- data services -----------------------------------------------------------------------------


def _check_service_names(config: RoutingConfig) -> Iterator[Diagnostic]:
    first: dict[str, DataService] = {}
    for service in config.data_services:
        if service.name_location is None:
            yield error(service.location, "add-data-service has no service-name")
            continue
        if not service.name:
            yield error(service.name_location, "service-name is empty")
            continue
        if service.name in first:
            yield error(
                service.name_location,
                f"duplicate service name {service.name!r} (first defined at {first[service.name].name_location})",
            )
        else:
            first[service.name] = service


def _check_service(service: DataService) -> Iterator[Diagnostic]:
    label = f"data service {service.name!r}" if service.name else "data service"
    if not service.include_patterns:
        yield warning(service.location, f"{label} has no include-pattern: it serves no subject")
    for pattern, location in zip(service.include_patterns, _pattern_locations(service), strict=True):
        try:
            PosixRegex(pattern)
        except ValueError as exc:
            yield error(location, f"include-pattern: {exc}")
    if not service.source_groups:
        yield error(service.location, f"{label} has no add-source-group: it cannot route")


def _pattern_locations(service: DataService) -> tuple[Location, ...]:
    locations = service.include_pattern_locations
    if len(locations) == len(service.include_patterns):
        return locations
    return (service.location,) * len(service.include_patterns)


# -- source groups -----------------------------------------------------------------------------


def _check_source_group(group: SourceGroup, *, load_plugins: bool) -> Iterator[Diagnostic]:
    if not group.priority_groups:
        yield error(group.location, "add-source-group has no add-priority block: it has no peers")
    seen: dict[str, Location] = {}
    for priority in group.priority_groups:
        if not priority.labels:
            yield error(priority.location, "empty add-priority block: list at least one label")
        for label in priority.labels:
            if label.name in seen:
                yield warning(
                    label.location,
                    f"peer {label.name!r} is listed twice in this source group (first at {seen[label.name]})",
                )
            else:
                seen[label.name] = label.location
            if group.affinity_rules and any(var in label.name for var in LEG_VARIABLES):
                yield warning(
                    label.location,
                    "do not use THIS_LEG/OTHER_LEG in peer labels under source affinity: "
                    "the label order must be identical on both legs; use literal labels",
                )
    for rule in group.affinity_rules:
        yield from check_affinity_pattern(rule)
    keys = list(dict.fromkeys(rule.key for rule in group.affinity_rules))
    if len(keys) > 1:
        yield warning(
            group.affinity_rules[0].location,
            f"source group uses several affinity keys ({', '.join(keys)}): an affinity key names "
            "the peers of one source group",
        )
    if group.selection not in SELECTIONS:
        yield error(
            group.selection_location or group.location,
            f"unknown selection {group.selection!r}: expected {' or '.join(SELECTIONS)}",
        )
    yield from _check_policy(group, load_plugins=load_plugins)


def _check_policy(group: SourceGroup, *, load_plugins: bool) -> Iterator[Diagnostic]:
    name = group.policy
    location = group.policy_location or group.location
    if name in SELECTIONS:
        # Built in, but a hash selection function: the routing tables take it from `selection`.
        yield error(
            location,
            f"{name!r} is a selection function, not a fallback policy: write selection {name} "
            f"(fallback policies: {', '.join(discovery.BUILTIN_POLICIES)})",
        )
        return
    if discovery.is_builtin_policy(name):
        return
    try:
        if load_plugins:
            discovery.load_policy(name)
        else:
            discovery.validate_spec(name)
    except PolicyError as exc:
        yield error(location, f"policy {name!r}: {exc}")


# -- rules sharing an affinity key ---------------------------------------------------------------


@dataclass(frozen=True)
class _KeyUse:
    """The first source group (and rule) using an affinity key."""

    group: SourceGroup
    rule: AffinityRule


def _check_shared_keys(config: RoutingConfig) -> Iterator[Diagnostic]:
    first_group: dict[str, _KeyUse] = {}
    first_capture: dict[str, tuple[AffinityRule, str]] = {}
    for service in config.data_services:
        for group in service.source_groups:
            for key in dict.fromkeys(rule.key for rule in group.affinity_rules):
                rule = next(rule for rule in group.affinity_rules if rule.key == key)
                if key not in first_group:
                    first_group[key] = _KeyUse(group, rule)
                else:
                    yield from _compare_groups(key, first_group[key], group)
            for rule in group.affinity_rules:
                yield from _compare_capture(rule, first_capture)


def _compare_groups(key: str, first: _KeyUse, group: SourceGroup) -> Iterator[Diagnostic]:
    mine = [priority.names for priority in group.priority_groups]
    theirs = [priority.names for priority in first.group.priority_groups]
    if mine != theirs:
        location = group.location
        for index, names in enumerate(mine):
            if index >= len(theirs) or names != theirs[index]:
                location = group.priority_groups[index].location
                break
        yield error(
            location,
            f"source groups sharing affinity key {key!r} must have identical priority groups "
            f"(same labels, same order): this one has {_describe(mine)}, the one at "
            f"{first.group.location} has {_describe(theirs)}",
        )
    if group.selection != first.group.selection:
        yield error(
            group.selection_location or group.location,
            f"source groups sharing affinity key {key!r} must use the same selection: "
            f"{group.selection} here, {first.group.selection} at {first.group.location}",
        )


def _describe(groups: list[tuple[str, ...]]) -> str:
    if not groups:
        return "no priority group"
    return " then ".join("(" + ", ".join(names) + ")" for names in groups)


def _compare_capture(rule: AffinityRule, first_capture: dict[str, tuple[AffinityRule, str]]) -> Iterator[Diagnostic]:
    scan = ere.scan(rule.pattern)
    if len(scan.groups) != 1 or scan.groups[0][1] < 0:
        return
    body = scan.group_body(rule.pattern, 0)
    if rule.key not in first_capture:
        first_capture[rule.key] = (rule, body)
        return
    first_rule, first_body = first_capture[rule.key]
    if body != first_body:
        yield warning(
            _at(rule, scan.groups[0][0]),
            f"affinity key {rule.key!r} captures ({body}) here but ({first_body}) at "
            f"{first_rule.location}: rules sharing an affinity key should extract the same kind "
            "of value (usually a username)",
        )


def _at(rule: AffinityRule, index: int) -> Location:
    """The location of character ``index`` of the rule's pattern."""
    start = rule.pattern_location
    if start is None:
        return rule.location
    return Location(start.file, start.line, start.column + index)
