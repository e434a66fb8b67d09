"""``affinity check`` and ``affinity route``: output lines and exit status."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from affinity.cli import main
from affinity.exceptions import RoutingError

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


# -- route against a stand-in Router that follows the routing engineer's contract ----------------


@dataclass
class FakeDecision:
    subject: str
    service: str
    member: str
    peer_index: int
    composite: str | None
    reason: str
    rule_index: int | None


@dataclass
class FakeDecisionWithGroups(FakeDecision):
    source_group: str = ""
    additional: tuple[FakeDecision, ...] = ()


class FakeRouter:
    """Routes ``/PRIVATE/<user>...`` to the first up adapter; records what it is told."""

    instances: list[FakeRouter] = []  # noqa: RUF012 - test bookkeeping

    def __init__(self) -> None:
        self.down: list[str] = []
        FakeRouter.instances.append(self)

    @classmethod
    def from_config(cls, config: object) -> FakeRouter:
        return cls()

    def set_member_up(self, label: str, up: bool) -> None:
        assert up is False
        self.down.append(label)

    def route(self, subject: str) -> FakeDecision:
        if not subject.startswith("/PRIVATE/"):
            raise RoutingError(f"no data service matches {subject}")
        member = next(m for m in ("TradeAdapterA", "TradeAdapterB") if m not in self.down)
        user = subject.split("/")[2].split("-")[0]
        return FakeDecision(subject, "trade-messaging-channel", member, 0, f"trading-adapters:{user}", "affinity", 0)


@pytest.fixture
def fake_routing(monkeypatch: pytest.MonkeyPatch) -> Iterator[type[FakeRouter]]:
    module = types.ModuleType("affinity.routing")
    module.Router = FakeRouter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "affinity.routing", module)
    FakeRouter.instances.clear()
    yield FakeRouter


def test_route_prints_member_and_why(capsys: pytest.CaptureFixture[str], fake_routing: type[FakeRouter]) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice-0/FXTRADE")
    assert status == 0
    assert out == [
        "/PRIVATE/alice-0/FXTRADE -> TradeAdapterA (peer 0; service trade-messaging-channel; "
        "affinity trading-adapters:alice (affinity rule 0); reason affinity)"
    ]


def test_route_marks_down_labels_before_routing(
    capsys: pytest.CaptureFixture[str], fake_routing: type[FakeRouter]
) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/bob-1/FXTRADE", "--down", "TradeAdapterA")
    assert status == 0
    assert fake_routing.instances[0].down == ["TradeAdapterA"]
    assert " -> TradeAdapterB " in out[0]


def test_route_json_lists_decision_fields(capsys: pytest.CaptureFixture[str], fake_routing: type[FakeRouter]) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/a-0/FXTRADE", "/OTHER", "--json")
    assert status == 3
    decisions = json.loads("\n".join(out))
    assert decisions[0] == {
        "subject": "/PRIVATE/a-0/FXTRADE",
        "service": "trade-messaging-channel",
        "member": "TradeAdapterA",
        "peer_index": 0,
        "composite": "trading-adapters:a",
        "reason": "affinity",
        "rule_index": 0,
    }
    assert decisions[1] == {
        "subject": "/OTHER",
        "member": None,
        "error": "no data service matches /OTHER",
    }


def test_route_shows_the_other_source_groups_of_a_service(
    capsys: pytest.CaptureFixture[str],
    fake_routing: type[FakeRouter],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def route(self: FakeRouter, subject: str) -> FakeDecisionWithGroups:
        historical = FakeDecisionWithGroups(
            subject, "trade-blotter-container", "HistoricalAdapter", 2, None, "workload", None
        )
        return FakeDecisionWithGroups(
            subject,
            "trade-blotter-container",
            "TradeAdapterA",
            0,
            "trading-adapters:alice",
            "hashed",
            0,
            source_group="trade-blotter-container#1",
            additional=(historical,),
        )

    monkeypatch.setattr(FakeRouter, "route", route)
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice/BLOTTER/TRADE")
    assert status == 0
    assert out == [
        "/PRIVATE/alice/BLOTTER/TRADE -> TradeAdapterA (peer 0; service trade-blotter-container; "
        "affinity trading-adapters:alice (affinity rule 0); reason hashed); also: "
        "HistoricalAdapter (peer 2; service trade-blotter-container; reason workload)"
    ]
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice/BLOTTER/TRADE", "--json")
    (decision,) = json.loads("\n".join(out))
    assert decision["source_group"] == "trade-blotter-container#1"
    assert decision["additional"][0]["member"] == "HistoricalAdapter"


def test_route_unrouted_subject_exits_3(capsys: pytest.CaptureFixture[str], fake_routing: type[FakeRouter]) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/OTHER")
    assert status == 3
    assert out == ["/OTHER -> not routed: no data service matches /OTHER"]


# -- route with the real routing tables (after the routing branch is merged and built) -----------


@pytest.fixture
def real_routing() -> None:
    pytest.importorskip("affinity.routing", exc_type=ImportError)


@pytest.mark.usefixtures("real_routing")
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


@pytest.mark.usefixtures("real_routing")
def test_down_adapter_is_avoided(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice-0/FXTRADE", "--json")
    assert status == 0
    first = json.loads("\n".join(out))[0]["member"]
    status, out, _ = run(capsys, "route", str(WORKED), "/PRIVATE/alice-0/FXTRADE", "--json", "--down", first)
    assert status == 0
    assert json.loads("\n".join(out))[0]["member"] not in (first, None)
