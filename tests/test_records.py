"""The records crossing from Rust into Python are declared once and the stub lists exactly them.

Every class of the compiled module is compared with its class in ``_affinity.pyi``: the
attributes it has at run time (the getters PyO3 makes for ``get_all`` fields and ``#[getter]``
methods, the slots for fields holding Python objects) must be the attributes the stub declares,
both ways. A field added to a Rust record must be added to its ``record!`` class (the binding
destructures the Rust value without ``..``, so it does not compile otherwise), and then this
test fails until the stub lists it.
"""

from __future__ import annotations

import ast
import dataclasses
import types
from pathlib import Path

import affinity
import affinity._affinity as compiled
import affinity.records
import pytest
from affinity.driver import CounterValue, DriverErrorRecord, DriverStat
from affinity.records import as_dict, fields
from affinity.routing import Decision, Explanation, Router, RoutingEvent
from affinity.subjects import RouterStatus
from affinity.testing import LossyRelay

STUB = Path(compiled.__file__).with_name("_affinity.pyi")
if not STUB.exists():  # an install without the stub next to the extension: the source tree's
    STUB = Path(__file__).parents[1] / "python" / "affinity" / "_affinity.pyi"


def stub_attributes(source: str) -> dict[str, set[str]]:
    """Per class of a stub: the attributes it declares (annotated names and properties)."""
    classes: dict[str, set[str]] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        names: set[str] = set()
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.FunctionDef) and any(
                isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list
            ):
                names.add(item.name)
        classes[node.name] = names
    return classes


def runtime_attributes(cls: type) -> set[str]:
    """The attributes a compiled class has: its getters (and the slots of fields holding Python
    objects, such as ``GroupMessage.key``)."""
    return {
        name
        for name, value in vars(cls).items()
        if isinstance(value, types.GetSetDescriptorType | types.MemberDescriptorType)
    }


def mismatches(stub: dict[str, set[str]], module: types.ModuleType) -> list[str]:
    """What differs between the stub's classes and the module's, one line each."""
    problems = []
    for name in module.__all__:
        cls = getattr(module, name)
        if not isinstance(cls, type):
            continue
        if name not in stub:
            problems.append(f"{name}: a compiled class the stub does not declare")
            continue
        runtime = runtime_attributes(cls)
        for missing in sorted(runtime - stub[name]):
            problems.append(f"{name}.{missing}: at run time, not in the stub")
        for extra in sorted(stub[name] - runtime):
            problems.append(f"{name}.{extra}: in the stub, not at run time")
    return problems


def test_every_compiled_class_has_exactly_the_attributes_its_stub_declares() -> None:
    assert mismatches(stub_attributes(STUB.read_text()), compiled) == []


def test_a_record_field_missing_from_the_stub_is_reported() -> None:
    source = STUB.read_text()
    stub = stub_attributes(source)
    # The stub as it would be if the Rust record had gained a field nobody added to it.
    stub["PublicationCounters"].discard("sender_limit")
    stub["SubjectDelivery"].add("topic")
    assert mismatches(stub, compiled) == [
        "PublicationCounters.sender_limit: at run time, not in the stub",
        "SubjectDelivery.topic: in the stub, not at run time",
    ]
    del stub["RelayStats"]
    assert "RelayStats: a compiled class the stub does not declare" in mismatches(stub, compiled)


#: The typed Python classes built from a record, each with the record it is built from.
WRAPPERS = [
    (DriverStat, compiled.DriverStatInfo),
    (CounterValue, compiled.CounterValueInfo),
    (DriverErrorRecord, compiled.DriverErrorInfo),
    (Decision, compiled.LegInfo),
    (Explanation, compiled.ExplanationInfo),
    (RoutingEvent, compiled.RoutingEventInfo),
    (RouterStatus, compiled.RouterStatusInfo),
]


@pytest.mark.parametrize(("wrapper", "record"), WRAPPERS, ids=[w.__name__ for w, _ in WRAPPERS])
def test_every_python_wrapper_carries_every_field_of_its_record(wrapper: type, record: type) -> None:
    assert set(fields(record)) - {field.name for field in dataclasses.fields(wrapper)} == set()


def test_the_record_module_re_exports_every_record_class() -> None:
    for name in affinity.records.__all__:
        value = getattr(affinity.records, name)
        if isinstance(value, type):
            assert getattr(compiled, name) is value, name
            assert fields(value), f"{name} has no fields"


def test_records_are_read_only_and_show_every_field() -> None:
    with affinity.Client(threading="invoker") as client:
        counters = client.counters()
        names = fields(affinity.records.DriverCounters)
        assert len(names) == 10 and set(as_dict(counters)) == set(names)
        assert all(value == 0 for value in as_dict(counters).values()), counters
        with pytest.raises(AttributeError):
            counters.send_errors = 1  # type: ignore[misc]
        text = repr(counters)
        assert text.startswith("DriverCounters(") and all(f"{name}=0" in text for name in names), text
        publication = client.add_publication("aeron:ipc", 7)
        try:
            status = publication.counters()
            assert (status.stream_id, status.strategy, status.receivers) == (7, "min", [])
            assert status.session_id == publication.session_id and status.group_tag is None
            assert "strategy='min'" in repr(status)
        finally:
            publication.close()
    relay = LossyRelay("127.0.0.1:9", loss=0.5)
    try:
        assert as_dict(relay.stats()) == {"received": 0, "dropped": 0, "duplicated": 0, "reordered": 0}
    finally:
        relay.close()


def test_routing_answers_are_records() -> None:
    table = compiled.RoutingTable()
    service = table.add_service("trades", ["^/PRIVATE/"])
    table.add_source_group(service, "adapters", [["a1", "a2"]], [("desk", "^/PRIVATE/([^/]+)/")], "workload")
    (leg,) = table.subscribe("/PRIVATE/alice/BLOTTER")
    assert isinstance(leg, affinity.records.LegInfo)
    assert (leg.service, leg.source_group, leg.composite, leg.rule_index) == ("trades", "adapters", "desk:alice", 0)
    assert leg.member in ("a1", "a2") and leg.peer_index in (0, 1)
    explanation = table.explain("/PRIVATE/alice/BLOTTER")
    assert (explanation.member, explanation.affinity_key, explanation.subscribed) == (leg.member, "desk", True)
    events = table.drain_events()
    assert events and all(isinstance(event, affinity.records.RoutingEventInfo) for event in events)
    assert [event.sequence for event in events] == sorted(event.sequence for event in events)
    router = Router()
    router.add_data_service("trades", ["^/PRIVATE/"])
    router.add_source_group("adapters", [["a1"]], [("desk", "^/PRIVATE/([^/]+)/")])
    assert router.subscribe("/PRIVATE/bob/X").member == "a1"
    kinds = [event.kind for event in router.events()]
    assert "bound" in kinds, kinds
