"""The parser: every syntax form of the seed, and precise syntax errors (all of them, at once)."""

from __future__ import annotations

from pathlib import Path

import pytest
from affinity.config import (
    Location,
    RoutingConfig,
    analyse_text,
    parse_file,
    parse_syntax,
    parse_text,
)
from affinity.config.tokenizer import tokenize
from affinity.exceptions import ConfigError
from hypothesis import given, settings
from hypothesis import strategies as st

DATA = Path(__file__).parent / "data"


def shape(config: RoutingConfig) -> list[object]:
    """The configuration without locations, to compare two spellings of the same thing."""
    return [
        (
            service.name,
            service.include_patterns,
            [
                (
                    [(rule.key, rule.pattern) for rule in group.affinity_rules],
                    [[(label.name, label.remote) for label in p.labels] for p in group.priority_groups],
                    group.policy,
                    group.selection,
                )
                for group in service.source_groups
            ],
        )
        for service in config.data_services
    ]


def errors_of(text: str) -> list[str]:
    """The error lines for ``text`` (file ``t.conf``)."""
    return [str(item) for item in analyse_text(text, "t.conf").errors]


# -- the seed's forms ----------------------------------------------------------------------------


def test_worked_example_transformer_config_parses_to_the_model() -> None:
    config = parse_file(DATA / "worked_example_transformer.conf")
    names = [service.name for service in config.data_services]
    assert names == ["trade-messaging-channel", "trade-blotter-container", "trade-blotter-items"]
    channel, container, items = config.data_services
    assert channel.include_patterns == ("^/PRIVATE/([^/]+)/FXTRADE",)
    (group,) = channel.source_groups
    (rule,) = group.affinity_rules
    assert (rule.key, rule.pattern) == ("trading-adapters", "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE")
    assert rule.location == Location(str(DATA / "worked_example_transformer.conf"), 8, 9)
    assert rule.pattern_location is not None and rule.pattern_location.column == 36
    assert group.priority_groups[0].names == ("TradeAdapterA", "TradeAdapterB")
    assert all(label.remote for label in group.priority_groups[0].labels)
    assert (group.policy, group.selection) == ("workload", "modulo")
    assert len(container.source_groups) == 2
    assert container.source_groups[1].affinity_rules == ()
    assert container.source_groups[1].priority_groups[0].names == ("HistoricalAdapter",)
    assert items.source_groups[0].priority_groups[0].names == ("HistoricalAdapter",)
    assert config.warnings == ()


def test_one_line_blocks_parse_like_multi_line_blocks() -> None:
    one_line = parse_text(
        'add-data-service service-name s include-pattern "^/P/([^/]+)" add-source-group '
        'affinity k "^/P/([^/]+)" add-priority remote-label A remote-label B end-priority '
        "end-source-group end-data-service"
    )
    multi_line = parse_text(
        """
        add-data-service
            service-name s
            include-pattern "^/P/([^/]+)"
            add-source-group
                affinity k "^/P/([^/]+)"
                add-priority
                    remote-label A
                    remote-label B
                end-priority
            end-source-group
        end-data-service
        """
    )
    assert shape(one_line) == shape(multi_line)


def test_seed_liberator_one_line_config_parses() -> None:
    config = parse_file(DATA / "worked_example_liberator.conf")
    assert [service.name for service in config.data_services] == [
        "trade-blotter-container",
        "trade-blotter-items",
    ]
    assert config.data_services[0].source_groups[0].priority_groups[0].names == ("Transformer",)


def test_seed_standard_example_parses() -> None:
    config = parse_file(DATA / "standard_example.conf")
    channel = config.data_services[2]
    assert channel.source_groups[0].priority_groups[0].names == ("TradeAdapterA", "TradeAdapterB")
    assert channel.source_groups[0].affinity_rules == ()


def test_several_affinity_options_keep_their_order() -> None:
    config = parse_file(DATA / "alternatives_one_line.conf")
    rules = config.data_services[0].source_groups[0].affinity_rules
    assert [rule.pattern for rule in rules] == [
        "^/PRIVATE/([^/]+)/BLOTTER/TRADE",
        "^/PRIVATE/([^/]+)/BLOTTER/EXECUTION",
    ]


def test_failover_example_has_two_priority_groups_in_order() -> None:
    config = parse_file(DATA / "failover_example.conf")
    groups = config.data_services[1].source_groups[0].priority_groups
    assert [group.names for group in groups] == [
        ("FooAdapter1", "FooAdapter2"),
        ("FooAdapter3", "FooAdapter4"),
    ]
    assert not groups[0].labels[0].remote


def test_quotes_comments_and_hash_inside_words() -> None:
    config = parse_file(DATA / "quoting.conf")
    (service,) = config.data_services
    assert service.name == "single quoted name"
    assert service.include_patterns == ("^/A[#]B/\\.dot",)
    (rule,) = service.source_groups[0].affinity_rules
    assert (rule.key, rule.pattern) == ("key with spaces", "^/A#B/([^/]+)\\.x")
    labels = service.source_groups[0].priority_groups[0].labels
    assert [(label.name, label.remote) for label in labels] == [
        ("end-priority", False),
        ("peer#2", True),
    ]


def test_extensions_policy_and_selection() -> None:
    config = parse_file(DATA / "extensions.conf")
    first, second = config.data_services[0].source_groups
    assert (first.policy, first.selection) == ("least-assigned", "rendezvous")
    assert first.policy_location is not None and first.policy_location.line == 7
    assert (second.policy, second.selection) == ("round-robin", "modulo")
    assert second.selection_location is None


def test_comment_runs_to_the_end_of_the_line() -> None:
    # The seed's web page flattens a commented block onto one line; in a file the comment then
    # swallows everything after it, so the block is never closed.
    with pytest.raises(ConfigError) as caught:
        parse_file(DATA / "flattened_comment.conf")
    assert "flattened_comment.conf:1:1: error: add-data-service is not closed" in str(caught.value)


def test_tokens_keep_line_and_column() -> None:
    tokens, diagnostics = tokenize("a  'b c'\n\t# x\n  \"d\" e#f", "f")
    assert diagnostics == []
    assert [(t.value, t.location.line, t.location.column, t.quoted) for t in tokens] == [
        ("a", 1, 1, False),
        ("b c", 1, 4, True),
        ("d", 3, 3, True),
        ("e#f", 3, 7, False),
    ]
    assert tokens[1].value_location.column == 5


def test_crlf_line_endings_are_accepted() -> None:
    text = "add-data-service\r\nservice-name s\r\ninclude-pattern ^/x\r\nadd-source-group\r\n"
    text += "add-priority\r\nlabel a\r\nend-priority\r\nend-source-group\r\nend-data-service\r\n"
    assert parse_text(text).data_services[0].name == "s"


# -- syntax errors, with exact locations ---------------------------------------------------------

VALID_GROUP = "add-source-group add-priority label a end-priority end-source-group"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            f"add-data-service service-name s\n  frobnicate 3\n  {VALID_GROUP}\nend-data-service",
            "t.conf:2:3: error: unknown keyword 'frobnicate' in add-data-service",
        ),
        (
            f"add-data-service service-name s {VALID_GROUP}",
            "t.conf:1:1: error: add-data-service is not closed: expected end-data-service before the end of the file",
        ),
        (
            "add-data-service service-name s\nadd-source-group add-priority label a end-priority\nend-data-service",
            "t.conf:2:1: error: add-source-group is not closed: expected end-source-group before "
            "end-data-service at t.conf:3:1",
        ),
        (
            "add-data-service service-name s add-source-group\n  add-priority label a\n"
            "end-source-group end-data-service",
            "t.conf:2:3: error: add-priority is not closed: expected end-priority before "
            "end-source-group at t.conf:3:1",
        ),
        (
            f"add-data-service service-name s {VALID_GROUP} end-data-service\nend-priority",
            "t.conf:2:1: error: end-priority without a matching add-priority",
        ),
        (
            f"add-data-service service-name 's {VALID_GROUP} end-data-service",
            "t.conf:1:31: error: unterminated quote: ' is not closed on this line",
        ),
        (
            f'add-data-service service-name "s"x {VALID_GROUP} end-data-service',
            't.conf:1:34: error: expected a blank after the closing quote "',
        ),
        (
            "add-data-service service-name s add-source-group add-priority label",
            "t.conf:1:63: error: label expects a peer label, found the end of the file",
        ),
        (
            "add-data-service service-name s add-source-group\n  affinity k end-source-group",
            "t.conf:2:3: error: affinity expects a regular expression, found keyword "
            "end-source-group (quote the value if it is meant literally)",
        ),
        (
            f"add-data-service service-name s\n  label x\n  {VALID_GROUP} end-data-service",
            "t.conf:2:3: error: label is not allowed in add-data-service; it belongs inside add-priority",
        ),
        (
            f"{VALID_GROUP}",
            "t.conf:1:1: error: add-source-group is not allowed in the top level; it belongs inside add-data-service",
        ),
        (
            f"add-data-service service-name s\n service-name t {VALID_GROUP} end-data-service",
            "t.conf:2:2: error: service-name given twice (first at t.conf:1:31)",
        ),
        (
            "add-data-service service-name s add-source-group policy a:b\n policy c:d "
            "add-priority label a end-priority end-source-group end-data-service",
            "t.conf:2:2: error: policy given twice (first at t.conf:1:57)",
        ),
        (
            f"add-data-service service-name s {VALID_GROUP} 'oops' end-data-service",
            "t.conf:1:101: error: expected a keyword in add-data-service, found quoted text",
        ),
    ],
)
def test_syntax_error_is_reported_at_its_location(text: str, expected: str) -> None:
    assert expected in errors_of(text)


def test_unknown_keyword_arguments_on_its_line_are_not_reported_again() -> None:
    text = "add-data-service service-name s\n  request-timeout 10 20\n"
    text += f"  {VALID_GROUP}\nend-data-service"
    assert errors_of(text) == ["t.conf:2:3: error: unknown keyword 'request-timeout' in add-data-service"]


def test_every_problem_is_reported_not_only_the_first() -> None:
    text = (
        "add-data-service service-name s\n"  # 1
        "  bogus\n"  # 2
        "  add-source-group\n"  # 3
        "    affinity k '^/(x)\n"  # 4: unterminated quote
        "    add-priority end-priority\n"  # 5: empty priority group
        "  end-source-group\n"  # 6
        "end-data-service\n"  # 7
        "end-source-group\n"  # 8
    )
    assert errors_of(text) == [
        "t.conf:2:3: error: unknown keyword 'bogus' in add-data-service",
        "t.conf:4:16: error: unterminated quote: ' is not closed on this line",
        "t.conf:5:5: error: empty add-priority block: list at least one label",
        "t.conf:8:1: error: end-source-group without a matching add-source-group",
    ]


def test_a_new_add_data_service_closes_an_unclosed_one() -> None:
    text = f"add-data-service service-name a {VALID_GROUP}\n"
    text += f"add-data-service service-name b include-pattern x {VALID_GROUP} end-data-service"
    config, diagnostics = parse_syntax(text, "t.conf")
    assert [service.name for service in config.data_services] == ["a", "b"]
    assert [str(item) for item in diagnostics] == [
        "t.conf:1:1: error: add-data-service is not closed: expected end-data-service before "
        "add-data-service at t.conf:2:1"
    ]


def test_parse_text_raises_config_error_listing_every_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_text("bogus\nend-priority", "t.conf")
    assert str(caught.value).splitlines() == [
        "t.conf:1:1: error: unknown keyword 'bogus' in the top level",
        "t.conf:2:1: error: end-priority without a matching add-priority",
    ]


def test_empty_text_is_an_empty_configuration() -> None:
    assert parse_text("# nothing\n").data_services == ()


def test_non_utf8_file_is_a_config_error_with_its_location(tmp_path: Path) -> None:
    path = tmp_path / "bad.conf"
    path.write_bytes(b"add-data-service\n  service-name caf\xe9\n")
    with pytest.raises(ConfigError, match=r"bad.conf:2:19: error: not UTF-8 text \(byte 0xe9\)"):
        parse_file(path)


def test_unreadable_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        parse_file(tmp_path / "missing.conf")


# -- robustness ----------------------------------------------------------------------------------

WORDS = st.sampled_from(
    [
        "add-data-service",
        "end-data-service",
        "service-name",
        "include-pattern",
        "add-source-group",
        "end-source-group",
        "affinity",
        "policy",
        "selection",
        "add-priority",
        "end-priority",
        "label",
        "remote-label",
        "k",
        "'^/(a|b)'",
        '"(x)(y)"',
        "'[a",
        "#",
        "\n",
        "modulo",
        "workload",
        "x:y",
        "THIS_LEG",
        "'/(x)/'",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_arbitrary_text_raises_only_config_error(text: str) -> None:
    try:
        parse_text(text)
    except ConfigError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.lists(WORDS, max_size=40))
def test_arbitrary_keyword_sequences_raise_only_config_error(words: list[str]) -> None:
    try:
        parse_text(" ".join(words))
    except ConfigError:
        pass
