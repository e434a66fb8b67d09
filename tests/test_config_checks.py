"""The configuration checklist: each check, with its exact ``file:line:column``."""

from __future__ import annotations

from pathlib import Path

import pytest
from affinity.config import analyse_file, analyse_text, parse_file

DATA = Path(__file__).parent / "data"


def diagnostics_of(text: str) -> list[str]:
    """Every diagnostic line for ``text`` (file ``t.conf``)."""
    return [str(item) for item in analyse_text(text, "t.conf").diagnostics]


def service(rules: str, labels: str = "label a label b", name: str = "s") -> str:
    """One data service, one source group: ``rules`` on line 3, labels on line 4."""
    return (
        f"add-data-service service-name {name} include-pattern ^/\n"
        "add-source-group\n"
        f"{rules}\n"
        f"add-priority {labels} end-priority\n"
        "end-source-group end-data-service\n"
    )


# -- valid configurations ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "worked_example_transformer.conf",
        "worked_example_liberator.conf",
        "standard_example.conf",
        "alternatives_one_line.conf",
        "failover_example.conf",
        "extensions.conf",
        "quoting.conf",
    ],
)
def test_seed_examples_pass_every_check(name: str) -> None:
    assert analyse_file(DATA / name, load_plugins=True).diagnostics == ()


def test_worked_example_shares_the_affinity_key_with_identical_priority_groups() -> None:
    config = parse_file(DATA / "worked_example_transformer.conf")
    channel = config.data_services[0].source_groups[0]
    container = config.data_services[1].source_groups[0]
    assert channel.affinity_rules[0].key == container.affinity_rules[0].key == "trading-adapters"
    assert [p.names for p in channel.priority_groups] == [p.names for p in container.priority_groups]


# -- shared affinity keys ------------------------------------------------------------------------


def test_mismatched_priority_groups_name_both_locations() -> None:
    path = DATA / "worked_example_mismatched.conf"
    (error,) = analyse_file(path).diagnostics
    assert str(error) == (
        f"{path}:20:9: error: source groups sharing affinity key 'trading-adapters' must have "
        "identical priority groups (same labels, same order): this one has "
        f"(TradeAdapterB, TradeAdapterA), the one at {path}:6:5 has (TradeAdapterA, TradeAdapterB)"
    )


def test_shared_key_with_an_extra_priority_group_is_an_error() -> None:
    text = service("affinity k ^/([^/]+)", name="one") + service(
        "affinity k ^/([^/]+)",
        labels="label a label b end-priority add-priority label c",
        name="two",
    )
    assert diagnostics_of(text) == [
        "t.conf:9:43: error: source groups sharing affinity key 'k' must have identical priority "
        "groups (same labels, same order): this one has (a, b) then (c), the one at t.conf:2:1 "
        "has (a, b)"
    ]


def test_shared_key_with_another_selection_is_an_error() -> None:
    text = service("affinity k ^/([^/]+)", name="one") + service(
        "affinity k ^/([^/]+) selection rendezvous", name="two"
    )
    assert diagnostics_of(text) == [
        "t.conf:8:32: error: source groups sharing affinity key 'k' must use the same selection: "
        "rendezvous here, modulo at t.conf:2:1"
    ]


def test_key_reused_for_another_shape_of_value_is_a_warning() -> None:
    text = service("affinity k ^/U/([^/]+)\naffinity k ^/N/([0-9]+)")
    assert diagnostics_of(text) == [
        "t.conf:4:16: warning: affinity key 'k' captures ([0-9]+) here but ([^/]+) at t.conf:3:1: "
        "rules sharing an affinity key should extract the same kind of value (usually a username)",
    ]


def test_session_name_and_username_rules_capture_the_same_shape() -> None:
    # The seed's pair: one subject has a session name, the other a username; both capture [^/]+.
    text = service("affinity k ^/PRIVATE/([^/]+)-[0-9]+/FXTRADE affinity k ^/PRIVATE/([^/]+)/X")
    assert diagnostics_of(text) == []


def test_several_keys_in_one_source_group_is_a_warning() -> None:
    assert diagnostics_of(service("affinity k ^/([^/]+) affinity j ^/x/([^/]+)")) == [
        "t.conf:3:1: warning: source group uses several affinity keys (k, j): an affinity key "
        "names the peers of one source group"
    ]


# -- affinity regular expressions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (
            "affinity k '^/(a)|^/(b)'",
            [
                "t.conf:3:18: error: do not use | alternation in an affinity regular expression: "
                "write one affinity option per alternative (they are tried in order)",
                "t.conf:3:21: error: the regular expression has 2 capture groups: an affinity "
                "regular expression needs exactly one",
            ],
        ),
        (
            "affinity k ^/(a|b)",
            [
                "t.conf:3:16: error: do not use | alternation in an affinity regular expression: "
                "write one affinity option per alternative (they are tried in order)",
            ],
        ),
        (
            "affinity k ^/PRIVATE/[^/]+",
            [
                "t.conf:3:12: error: the regular expression has no capture group: add exactly "
                "one ( ) around the value to extract",
            ],
        ),
        (
            'affinity k "^/([^/]+)/([^/]+)"',
            [
                "t.conf:3:23: error: the regular expression has 2 capture groups: an affinity "
                "regular expression needs exactly one",
            ],
        ),
        (
            "affinity k '/^\\/PRIVATE\\/([^\\/]+)\\/FOO$/'",
            [
                "t.conf:3:13: error: do not wrap the regular expression in /.../ delimiters: "
                "write it bare, as sed -r takes it",
            ],
        ),
        (
            "affinity k ^\\/PRIVATE/([^/]+)",
            ["t.conf:3:13: warning: do not escape forward slashes: write / instead of \\/"],
        ),
        (
            "affinity k ^/PRIVATE/([^/]+",
            ["t.conf:3:12: error: invalid POSIX extended regular expression: Unmatched ( or \\("],
        ),
        ("affinity k '^/[|(]([^|/]+)\\|'", []),
        ("affinity k /PRIVATE/([^/]+)-[0-9]+/FOO", []),
    ],
)
def test_affinity_regex_checks(rule: str, expected: list[str]) -> None:
    assert diagnostics_of(service(rule)) == expected


def test_invalid_include_pattern_is_an_error_at_the_pattern() -> None:
    text = "add-data-service service-name s include-pattern '^/(x'\n"
    text += "add-source-group add-priority label a end-priority end-source-group end-data-service"
    assert diagnostics_of(text) == [
        "t.conf:1:50: error: include-pattern: invalid POSIX extended regular expression: Unmatched ( or \\("
    ]


# -- two-leg labels ------------------------------------------------------------------------------


def test_leg_variables_in_labels_under_affinity_are_warnings() -> None:
    path = DATA / "two_legs.conf"
    message = (
        "warning: do not use THIS_LEG/OTHER_LEG in peer labels under source affinity: the label "
        "order must be identical on both legs; use literal labels"
    )
    assert [str(item) for item in analyse_file(path).diagnostics] == [
        f"{path}:20:26: {message}",
        f"{path}:21:26: {message}",
    ]


def test_leg_variables_without_affinity_are_fine() -> None:
    assert diagnostics_of(service("", labels="label a${THIS_LEG} label a${OTHER_LEG}")) == []


# -- structure -----------------------------------------------------------------------------------


def test_missing_service_name_is_an_error() -> None:
    path = DATA / "refiner_example.conf"
    assert [str(item) for item in analyse_file(path).diagnostics] == [
        f"{path}:2:1: error: add-data-service has no service-name"
    ]


def test_empty_service_name_is_an_error() -> None:
    assert diagnostics_of(service("", name="''")) == ["t.conf:1:32: error: service-name is empty"]


def test_duplicate_service_names_name_both_locations() -> None:
    text = service("", name="dup") + service("", name="dup")
    assert diagnostics_of(text) == ["t.conf:6:31: error: duplicate service name 'dup' (first defined at t.conf:1:31)"]


def test_source_group_without_priority_group_is_an_error() -> None:
    text = "add-data-service service-name s include-pattern ^/\n"
    text += "  add-source-group affinity k ^/([^/]+) end-source-group\nend-data-service"
    assert diagnostics_of(text) == ["t.conf:2:3: error: add-source-group has no add-priority block: it has no peers"]


def test_empty_priority_group_is_an_error() -> None:
    assert diagnostics_of(service("", labels="")) == [
        "t.conf:4:1: error: empty add-priority block: list at least one label"
    ]


def test_data_service_without_source_group_is_an_error() -> None:
    assert diagnostics_of("add-data-service service-name s include-pattern ^/ end-data-service") == [
        "t.conf:1:1: error: data service 's' has no add-source-group: it cannot route"
    ]


def test_data_service_without_include_pattern_is_a_warning() -> None:
    text = "add-data-service service-name s\n"
    text += "add-source-group add-priority label a end-priority end-source-group end-data-service"
    assert diagnostics_of(text) == [
        "t.conf:1:1: warning: data service 's' has no include-pattern: it serves no subject"
    ]


def test_peer_listed_twice_in_a_source_group_is_a_warning() -> None:
    assert diagnostics_of(service("", labels="label a label a")) == [
        "t.conf:4:28: warning: peer 'a' is listed twice in this source group (first at t.conf:4:20)"
    ]


def test_unknown_selection_is_an_error() -> None:
    assert diagnostics_of(service("selection random")) == [
        "t.conf:3:11: error: unknown selection 'random': expected modulo or rendezvous"
    ]


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("not a:path", "policy 'not a:path': malformed plugin path"),
        ("no-such-plugin", "policy 'no-such-plugin': no policy plugin named 'no-such-plugin'"),
        ("bad/name", "policy 'bad/name': 'bad/name' is neither a built-in policy"),
    ],
)
def test_bad_policy_spelling_is_an_error(policy: str, message: str) -> None:
    (diagnostic,) = diagnostics_of(service(f"policy '{policy}'"))
    assert diagnostic.startswith(f"t.conf:3:9: error: {message}")


def test_builtin_fallback_policies_are_accepted() -> None:
    for name in ("workload", "least-assigned", "round-robin"):
        assert diagnostics_of(service(f"policy {name}")) == []


def test_selection_name_as_policy_is_an_error() -> None:
    assert diagnostics_of(service("policy rendezvous")) == [
        "t.conf:3:8: error: 'rendezvous' is a selection function, not a fallback policy: write "
        "selection rendezvous (fallback policies: workload, least-assigned, round-robin)"
    ]


def test_plugin_is_imported_only_when_asked() -> None:
    text = service("policy sample_policies:Missing")
    assert analyse_text(text, "t.conf").diagnostics == ()
    (diagnostic,) = analyse_text(text, "t.conf", load_plugins=True).diagnostics
    assert str(diagnostic).startswith(
        "t.conf:3:8: error: policy 'sample_policies:Missing': 'sample_policies' has no attribute 'Missing'"
    )


def test_loadable_plugin_passes() -> None:
    text = service("policy sample_policies:FirstCandidate")
    assert analyse_text(text, "t.conf", load_plugins=True).diagnostics == ()


def test_warnings_are_kept_on_the_parsed_config() -> None:
    config = parse_file(DATA / "two_legs.conf")
    assert len(config.warnings) == 2
    assert all(": warning: do not use THIS_LEG" in item for item in config.warnings)
