"""The records the compiled module returns: counters, images, driver events, driver snapshots,
routing answers and subject deliveries.

Each is a read-only class of :mod:`affinity._affinity` (attributes, not dict keys: write
``publication.counters().sender_position``), declared once in Rust (``rust/src/py/records.rs``
and beside the routing and subject bindings) and built from the Rust value field by field, so a
field added in Rust must be added to the class; ``python -m mypy.stubtest affinity._affinity``
and ``tests/test_records.py`` fail until ``_affinity.pyi`` lists it too. ``repr()`` shows every
field; :func:`fields` names them and :func:`as_dict` turns a record into the dict it was before.
"""

from __future__ import annotations

import types

from affinity._affinity import (
    CounterValueInfo,
    DriverCounters,
    DriverErrorInfo,
    DriverEventInfo,
    DriverStatInfo,
    ExplanationInfo,
    FaucetLogInfo,
    ImageInfo,
    LegInfo,
    PublicationCounters,
    ReceiverInfo,
    RelayStats,
    RoutingEventInfo,
    SourceStateInfo,
    SubjectDelivery,
    SubjectPeerCounters,
    SubscriberEvictedInfo,
)

__all__ = [
    "CounterValueInfo",
    "DriverCounters",
    "DriverErrorInfo",
    "DriverEventInfo",
    "DriverStatInfo",
    "ExplanationInfo",
    "FaucetLogInfo",
    "ImageInfo",
    "LegInfo",
    "PublicationCounters",
    "ReceiverInfo",
    "RelayStats",
    "RoutingEventInfo",
    "SourceStateInfo",
    "SubjectDelivery",
    "SubjectPeerCounters",
    "SubscriberEvictedInfo",
    "as_dict",
    "fields",
]

#: What PyO3 makes of a record's fields: getters, or plain slots for fields holding Python objects.
_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def fields(record_type: type) -> tuple[str, ...]:
    """The attribute names of a record class, sorted (its read-only data descriptors)."""
    return tuple(
        sorted(
            name
            for name, value in vars(record_type).items()
            if isinstance(value, _DESCRIPTORS) and not name.startswith("_")
        )
    )


def as_dict(record: object) -> dict[str, object]:
    """``{name: value}`` of every attribute of a record (nested records stay records)."""
    return {name: getattr(record, name) for name in fields(type(record))}
