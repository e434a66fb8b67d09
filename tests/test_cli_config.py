"""``affinity check`` and ``affinity route``: output lines and exit status."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from affinity.cli import main
from affinity.config.parser import analyse_file
from affinity.routing import Decision, Router

DATA = Path(__file__).parent / "data"
WORKED = DATA / "worked_example_transformer.conf"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """Run the CLI; return (exit status, stdout lines, stderr)."""
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


# -- check ---------------------------------------------------------------------------------------


def test_check_valid_config_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "check", str(WORKED))
    assert status == 0
    assert out == [f"{WORKED}: ok (3 data services, 4 source groups)"]


def test_check_warnings_only_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "two_legs.conf"
    status, out, _ = run(capsys, "check", str(path))
    assert status == 0
    assert out[0].startswith(f"{path}:20:26: warning: do not use THIS_LEG/OTHER_LEG")
    assert out[-1] == f"{path}: 0 errors, 2 warnings"


def test_check_errors_exit_1_with_file_line_column(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "worked_example_mismatched.conf"
    status, out, _ = run(capsys, "check", str(path))
    assert status == 1
    assert out[0].startswith(f"{path}:20:9: error: source groups sharing affinity key")
    assert f"the one at {path}:6:5" in out[0]
    assert out[-1] == f"{path}: 1 error, 0 warnings"


def test_check_unreadable_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, err = run(capsys, "check", str(tmp_path / "missing.conf"))
    assert status == 2
    assert out == []
    assert "cannot read" in err and "missing.conf" in err


def test_check_loads_plugins_unless_told_not_to(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "plugin.conf"
    path.write_text(
        "add-data-service service-name s include-pattern ^/\n"
        "add-source-group policy sample_policies:Missing\n"
        "add-priority label a end-priority end-source-group end-data-service\n"
    )
    status, out, _ = run(capsys, "check", str(path))
    assert status == 1
    assert out[0].startswith(f"{path}:2:25: error: policy 'sample_policies:Missing'")
    status, out, _ = run(capsys, "check", "--no-plugins", str(path))
    assert status == 0


# -- route without the routing tables (configuration and argument errors) ------------------------


def test_route_config_errors_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "worked_example_mismatched.conf"
    status, _, err = run(capsys, "route", str(path), "/PRIVATE/alice-0/FXTRADE")
    assert status == 1
    assert f"{path}:20:9: error:" in err


def test_route_unreadable_file_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, "route", str(tmp_path / "missing.conf"), "/x")
    assert status == 2
    assert "cannot read" in err


def test_route_unknown_down_label_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "route", str(WORKED), "/x", "--down", "NoSuchAdapter")
    assert status == 1
    assert "unknown peer label(s) NoSuchAdapter" in err
    assert "TradeAdapterA" in err


# -- route: the CLI prints what the routing tables decide ------------------------------------------


def worked_decision(subject: str, *down: str) -> Decision:
    """What the routing tables decide for ``subject`` in the worked example (the CLI's source)."""
    router = Router.from_config(analyse_file(WORKED).config)
    for label in down:
        router.set_member_up(label, False)
    return router.route(subject)


def test_route_prints_member_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    decision = worked_decision("/PRIVATE/alice-0/FXTRADE")
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice-0/FXTRADE")
    assert status == 0
    assert out == [
        f"/PRIVATE/alice-0/FXTRADE -> {decision.member} (peer {decision.peer_index}; "
        "service trade-messaging-channel; affinity trading-adapters:alice (affinity rule 0); reason hashed)"
    ]


def test_route_marks_down_labels_before_routing(capsys: pytest.CaptureFixture[str]) -> None:
    first = worked_decision("/PRIVATE/bob-1/FXTRADE").member
    assert first is not None
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/bob-1/FXTRADE", "--down", first)
    assert status == 0
    assert f" -> {worked_decision('/PRIVATE/bob-1/FXTRADE', first).member} " in out[0]
    assert f" -> {first} " not in out[0]


def test_route_json_lists_decision_fields(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/a-0/FXTRADE", "/OTHER", "--json")
    assert status == 3
    decisions = json.loads("\n".join(out))
    decision = worked_decision("/PRIVATE/a-0/FXTRADE")
    assert decisions[0] == {
        "subject": "/PRIVATE/a-0/FXTRADE",
        "service": "trade-messaging-channel",
        "source_group": "trade-messaging-channel#1",
        "member": decision.member,
        "peer_index": decision.peer_index,
        "priority_group": 0,
        "composite": "trading-adapters:a",
        "reason": "hashed",
        "rule_index": 0,
    }
    assert decisions[1] == {
        "subject": "/OTHER",
        "member": None,
        "error": 'no data service has an include-pattern matching "/OTHER"',
    }


def test_route_shows_the_other_source_groups_of_a_service(capsys: pytest.CaptureFixture[str]) -> None:
    subject = "/PRIVATE/alice/BLOTTER/TRADE"
    decision = worked_decision(subject)
    (other,) = decision.additional
    status, out, _ = run(capsys, "route", str(WORKED), subject)
    assert status == 0
    assert out == [
        f"{subject} -> {decision.member} (peer {decision.peer_index}; service trade-blotter-container; "
        f"affinity trading-adapters:alice (affinity rule 0); reason hashed); also: "
        f"{other.member} (peer {other.peer_index}; service trade-blotter-container; reason {other.reason})"
    ]
    status, out, _ = run(capsys, "route", str(WORKED), subject, "--json")
    (printed,) = json.loads("\n".join(out))
    assert printed["source_group"] == decision.source_group
    assert printed["additional"][0]["member"] == other.member


def test_route_unrouted_subject_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/OTHER")
    assert status == 3
    assert out == ['/OTHER -> not routed: no data service has an include-pattern matching "/OTHER"']


def test_channel_and_blotter_of_a_user_go_to_the_same_adapter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    subjects = [f"/PRIVATE/{user}-0/FXTRADE" for user in ("alice", "bob", "carol", "dave")]
    subjects += [f"/PRIVATE/{user}/BLOTTER/TRADE" for user in ("alice", "bob", "carol", "dave")]
    status, out, _ = run(capsys, "route", str(WORKED), *subjects, "--json")
    assert status == 0
    decisions = json.loads("\n".join(out))
    members = [decision["member"] for decision in decisions]
    assert members[:4] == members[4:]
    assert decisions[0]["composite"] == "trading-adapters:alice"
    assert decisions[4]["composite"] == "trading-adapters:alice"
    assert set(members) <= {"TradeAdapterA", "TradeAdapterB"}


def test_down_adapter_is_avoided(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice-0/FXTRADE", "--json")
    assert status == 0
    first = json.loads("\n".join(out))[0]["member"]
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice-0/FXTRADE", "--json", "--down", first)
    assert status == 0
    assert json.loads("\n".join(out))[0]["member"] not in (first, None)


@pytest.mark.parametrize("pattern", ["a{1,1000}{1,1000}", "a{1,32767}{1,32767}"])
def test_check_reports_a_pattern_over_the_compile_budget_at_file_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, pattern: str
) -> None:
    path = tmp_path / "blowup.conf"
    path.write_text(
        "add-data-service service-name s\n"
        f"    include-pattern {pattern}\n"
        "    add-source-group add-priority label A end-priority end-source-group\n"
        "end-data-service\n"
    )
    started = time.monotonic()
    status, out, _ = run(capsys, "check", str(path))
    assert time.monotonic() - started < 5
    assert status == 1
    assert out[0].startswith(f"{path}:2:21: error: include-pattern: invalid POSIX extended regular expression")
    assert "more than the limit of 1000:" in out[0]
