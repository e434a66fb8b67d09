"""affinity.routing: worked example, failover, recovery, NODATA, plugins, events, logs."""

from __future__ import annotations

import logging

import pytest
from affinity.config.model import (
    AffinityRule,
    DataService,
    Location,
    PeerLabel,
    PriorityGroup,
    RoutingConfig,
    SourceGroup,
)
from affinity.exceptions import ConfigError, PolicyError, RoutingError
from affinity.routing import ABOVE_INFO_KINDS, Decision, Explanation, PosixRegex, Router, RoutingEvent

HERE = Location("test.conf", 1, 1)
ADAPTERS = ("TradeAdapterA", "TradeAdapterB")
CHANNEL_RULE = ("trading-adapters", "^/PRIVATE/([^/]+)-[0-9]+/FXTRADE")
BLOTTER_RULE = ("trading-adapters", "^/PRIVATE/([^/]+)/BLOTTER/TRADE")


def group(labels: tuple[str, ...], rules: tuple[tuple[str, str], ...] = ()) -> SourceGroup:
    return SourceGroup(
        priority_groups=(PriorityGroup(tuple(PeerLabel(name, True, HERE) for name in labels), HERE),),
        affinity_rules=tuple(AffinityRule(key, pattern, HERE) for key, pattern in rules),
        location=HERE,
    )


def service(name: str, pattern: str, *groups: SourceGroup) -> DataService:
    return DataService(name, (pattern,), tuple(groups), HERE)


def liberator() -> Router:
    """Liberator's configuration in the seed's worked example (with source affinity)."""
    return Router.from_config(
        RoutingConfig(
            (
                service(
                    "trade-blotter-container",
                    "^/PRIVATE/([^/]+)/BLOTTER/TRADE",
                    group(("Transformer",)),
                ),
                service("trade-blotter-items", "^/PRIVATE/([^/]+)/ITEM", group(("Transformer",))),
                service(
                    "trade-messaging-channel",
                    "^/PRIVATE/([^/]+)/FXTRADE",
                    group(ADAPTERS, (CHANNEL_RULE,)),
                ),
            ),
            "liberator.conf",
        )
    )


def transformer() -> Router:
    """Transformer's configuration in the seed's worked example (with source affinity)."""
    return Router.from_config(
        RoutingConfig(
            (
                service(
                    "trade-blotter-container",
                    "^/PRIVATE/([^/]+)/BLOTTER/TRADE",
                    group(ADAPTERS, (BLOTTER_RULE,)),
                    group(("HistoricalAdapter",)),
                ),
                service("trade-blotter-items", "^/PRIVATE/([^/]+)/ITEM", group(("HistoricalAdapter",))),
            ),
            "transformer.conf",
        )
    )


USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]


def test_worked_example_channel_and_blotter_reach_the_same_adapter_in_two_processes() -> None:
    lib, trans = liberator(), transformer()
    placements = set()
    for user in USERS:
        channel = lib.subscribe(f"/PRIVATE/{user}-0/FXTRADE")
        blotter = trans.subscribe(f"/PRIVATE/{user}/BLOTTER/TRADE")
        assert channel.composite == blotter.composite == f"trading-adapters:{user}"
        assert channel.member == blotter.member
        assert channel.service == "trade-messaging-channel"
        assert blotter.service == "trade-blotter-container"
        assert [d.member for d in blotter.additional] == ["HistoricalAdapter"]
        placements.add(channel.member)
    assert placements == set(ADAPTERS)


def test_worked_example_in_one_process_shares_affinity_across_services() -> None:
    router = Router()
    router.add_data_service("trade-messaging-channel", ["^/PRIVATE/([^/]+)/FXTRADE"])
    router.add_source_group("channel", [list(ADAPTERS)], [CHANNEL_RULE])
    router.add_data_service("trade-blotter-container", ["^/PRIVATE/([^/]+)/BLOTTER/TRADE"])
    router.add_source_group("blotter", [list(ADAPTERS)], [BLOTTER_RULE])
    router.add_source_group("history", [["HistoricalAdapter"]])
    first = router.subscribe("/PRIVATE/alice-0/FXTRADE")
    # Alice's adapter fails: her affinity moves; the blotter follows the moved affinity.
    router.set_member_up(first.member or "", False)
    blotter = router.subscribe("/PRIVATE/alice/BLOTTER/TRADE")
    assert blotter.member != first.member
    assert router.route("/PRIVATE/alice-0/FXTRADE").member == blotter.member
    assert blotter.reason == "sticky"


def test_log_lines_have_the_datasource_format(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="affinity.routing")
    lib = liberator()
    decision = lib.subscribe("/PRIVATE/alice-0/FXTRADE")
    assert decision.peer_index == ADAPTERS.index(decision.member or "") + 2  # Transformer is 1
    assert caplog.messages == [
        "Object </PRIVATE/alice-0/FXTRADE> is bound to affinity <trading-adapters:alice>",
        f"We can request object </PRIVATE/alice-0/FXTRADE> from peer {decision.peer_index} ({decision.member})",
    ]
    assert decision.member == "TradeAdapterB"  # pinned by the hash vectors (version 1)


def test_failover_group_then_recovery_moves_only_new_composites() -> None:
    router = Router()
    router.add_data_service("foo", ["^/PRIVATE/"])
    router.add_source_group(
        "foo",
        [["FooAdapter1", "FooAdapter2"], ["FooAdapter3", "FooAdapter4"]],
        [("foo-adapters", "/PRIVATE/([^/]+)-[0-9]+/FOO")],
    )
    alice = router.subscribe("/PRIVATE/alice-0/FOO")
    assert alice.member in ("FooAdapter1", "FooAdapter2")
    router.set_member_up("FooAdapter1", False)
    events = router.set_member_up("FooAdapter2", False)
    moved = router.route("/PRIVATE/alice-1/FOO")
    assert moved.member in ("FooAdapter3", "FooAdapter4")
    assert any(e.kind == "moved" and e.move_reason == "member-down" for e in events)
    bob = router.subscribe("/PRIVATE/bob-0/FOO")
    assert bob.reason == "failover"
    router.set_member_up("FooAdapter1", True)
    assert router.route("/PRIVATE/alice-2/FOO").member == moved.member
    assert router.route("/PRIVATE/bob-2/FOO").member == bob.member
    carol = router.subscribe("/PRIVATE/carol-0/FOO")
    assert (carol.member, carol.reason) == ("FooAdapter1", "hashed")
    explanation = router.explain("/PRIVATE/bob-7/FOO")
    assert isinstance(explanation, Explanation)
    assert explanation.reason == "sticky" and explanation.bound_reason == "failover"
    assert explanation.composite == "foo-adapters:bob" and explanation.rule_index == 0
    assert "foo-adapters:bob" in str(explanation)


def test_unsubscribing_the_last_subject_forgets_the_affinity() -> None:
    router = liberator()
    router.subscribe("/PRIVATE/alice-0/FXTRADE")
    router.subscribe("/PRIVATE/alice-1/FXTRADE")
    router.unsubscribe("/PRIVATE/alice-0/FXTRADE")
    assert router.affinity("trading-adapters:alice") is not None
    list(router.events())
    router.unsubscribe("/PRIVATE/alice-1/FXTRADE")
    assert router.affinity("trading-adapters:alice") is None
    (event,) = router.events()
    assert (event.kind, event.composite) == ("forgotten", "trading-adapters:alice")
    with pytest.raises(RoutingError):
        router.unsubscribe("/PRIVATE/alice-1/FXTRADE")


def test_nodata_unavailable_is_authoritative_for_affinity_subjects() -> None:
    router = liberator()
    first = router.subscribe("/PRIVATE/alice-0/FXTRADE")
    answer = router.report_nodata("/PRIVATE/alice-0/FXTRADE", "unavailable")
    assert (answer.reason, answer.member) == ("nodata", first.member)
    assert router.route("/PRIVATE/alice-0/FXTRADE").member == first.member
    with pytest.raises(ValueError):
        router.report_nodata("/PRIVATE/alice-0/FXTRADE", "bogus")


def test_nodata_without_affinity_retries_another_member() -> None:
    router = Router()
    router.add_source_group("plain", [["p1", "p2"]])
    first = router.subscribe("/X")
    retried = router.report_nodata("/X", "notfound")
    assert retried.reason == "retry" and retried.member != first.member
    assert router.report_nodata("/X", "notfound").reason == "nodata"


class Raising:
    name = "raising"

    def select(self, composite: str, candidates: list[str]) -> str:
        raise RuntimeError("plugin exploded")


def test_plugin_raising_falls_back_to_workload_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    router = Router()
    router.add_source_group("g", [["a", "b"]], [("k", "^/u/([^/]+)")], policy=Raising())
    decision = router.subscribe("/u/alice")
    assert (decision.member, decision.reason) == ("a", "fallback")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors and "plugin exploded" in errors[0].getMessage()
    assert errors[0].name == "affinity.routing"


def test_plugin_is_asked_once_per_new_composite() -> None:
    calls: list[tuple[str, list[str]]] = []

    def last(composite: str, candidates: list[str]) -> str:
        calls.append((composite, candidates))
        return candidates[-1]

    router = Router()
    router.add_source_group("g", [["a", "b"]], [("k", "^/u/([^/]+)/")], policy=last)
    assert router.subscribe("/u/alice/1").member == "b"
    assert router.subscribe("/u/alice/2").reason == "sticky"
    assert calls == [("k:alice", ["a", "b"])]


def test_plugin_answering_unknown_member_falls_back() -> None:
    router = Router()
    router.add_source_group("g", [["a", "b"]], policy=lambda key, candidates: "zz")
    events: list[RoutingEvent] = []
    router.on_event(events.append)
    assert router.subscribe("/s").reason == "fallback"
    assert events[0].kind == "policy-error" and "zz" in (events[0].message or "")


def test_policies_and_errors() -> None:
    router = Router()
    router.add_source_group("rr", [["a", "b", "c"]], policy="round-robin")
    assert [router.subscribe(f"/s{i}").member for i in range(4)] == ["a", "b", "c", "a"]
    with pytest.raises(PolicyError):
        router.add_source_group("x", [["a"]], policy="nope")
    with pytest.raises(ConfigError):
        router.add_source_group("x", [["a"]], [("k", "^/(a)(b)")])
    with pytest.raises(ConfigError):
        router.add_source_group("x", [["a"]], [("k", "^/(a")])
    with pytest.raises(RoutingError):
        liberator().route("/PUBLIC/nothing")
    with pytest.raises(RoutingError):
        router.set_member_up("unknown", True)


def test_no_member_available_then_bound_on_recovery() -> None:
    router = Router()
    router.add_source_group("g", [["a"]], [("k", "^/u/([^/]+)")])
    router.set_member_up("a", False)
    waiting = router.subscribe("/u/alice")
    assert (waiting.member, waiting.reason) == (None, "unavailable")
    events = router.set_member_up("a", True)
    assert [e.kind for e in events] == ["member-up", "bound", "bound"]
    assert router.route("/u/alice").member == "a"


def test_reset_forgets_everything() -> None:
    router = liberator()
    router.subscribe("/PRIVATE/alice-0/FXTRADE")
    router.reset()
    assert router.affinity("trading-adapters:alice") is None
    assert [e.kind for e in router.events()][-1] == "reset"


def test_rendezvous_selection_is_configurable() -> None:
    router = Router()
    router.add_source_group("g", [["a", "b", "c"]], [("k", "^/u/([^/]+)")], selection="rendezvous")
    decision = router.route("/u/alice")
    assert isinstance(decision, Decision)
    assert decision.reason == "hashed" and decision.since is None


def test_posix_regex_matches_sed() -> None:
    regex = PosixRegex("/PRIVATE/([^/]+)-[0-9]+/FXTRADE")
    assert regex.group_count == 1
    assert regex.capture("/PRIVATE/alice-0/FXTRADE") == "alice"
    assert regex.capture("/PUBLIC/x") is None
    assert PosixRegex("x(a|ab)").capture("xab") == "ab"  # leftmost-longest
    with pytest.raises(ValueError, match="Unmatched"):
        PosixRegex("(")


EVENT_KINDS = (
    "bound",
    "moved",
    "forgotten",
    "no-member-available",
    "member-up",
    "member-down",
    "nodata",
    "policy-error",
    "reset",
)


def test_exactly_the_above_info_kinds_log_above_info() -> None:
    above = {
        kind
        for kind in EVENT_KINDS
        for subject in ("/u/alice", None)
        if any(
            level > logging.INFO
            for level, _ in RoutingEvent(1, kind, subject=subject, composite="k:alice", member="a").log_lines()
        )
    }
    assert above == ABOVE_INFO_KINDS


def test_batches_keep_the_same_history_and_warnings_whether_or_not_info_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    every: list[RoutingEvent] = []

    def run(level: int, observe: bool = False) -> tuple[list[RoutingEvent], list[tuple[int, str]]]:
        caplog.clear()
        caplog.set_level(level, logger="affinity.routing")
        router = Router(max_events=5)
        if observe:
            router.on_event(every.append)
        router.add_source_group("g", [["a"], ["b"]], [("k", "^/u/([^/]+)")])
        router.subscribe_members([f"/u/user{i}" for i in range(20)])
        router.set_member_up("a", False)
        router.set_member_up("b", False)
        router.subscribe_members([f"/u/late{i}" for i in range(20)])
        router.subscribe_members([f"/u/user{i}" for i in range(3)])
        above_info = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno > logging.INFO]
        return list(router.events()), above_info

    quiet, loud, observed = run(logging.WARNING), run(logging.INFO), run(logging.WARNING, observe=True)
    assert quiet == loud == observed
    history, warnings = quiet
    assert [e.sequence for e in history] == sorted(e.sequence for e in history) and len(history) == 5
    assert history == every[-5:]
    expected = [line for event in every for line in event.log_lines() if line[0] > logging.INFO]
    assert warnings == expected and len(expected) > 20


def test_explain_after_a_peer_went_down_says_the_subject_moved_from_it_and_why() -> None:
    router = Router()
    router.add_data_service("foo", ["^/PRIVATE/"])
    router.add_source_group("foo", [["FooAdapter1", "FooAdapter2"]], [("foo-adapters", "/PRIVATE/([^/]+)-[0-9]+/FOO")])
    subjects = [f"/PRIVATE/user{i}-0/FOO" for i in range(20)]
    first = {subject: router.subscribe(subject).member for subject in subjects}
    assert set(first.values()) == {"FooAdapter1", "FooAdapter2"}
    assert all(router.explain(subject).moved_from is None for subject in subjects)
    router.set_member_up("FooAdapter1", False)
    for subject, was in first.items():
        explanation = router.explain(subject)
        assert explanation.member == "FooAdapter2"
        if was == "FooAdapter1":
            assert (explanation.moved_from, explanation.move_reason) == ("FooAdapter1", "member-down")
            assert "moved from FooAdapter1 (member-down)" in str(explanation)
        else:
            assert explanation.moved_from is None and "moved" not in str(explanation)
