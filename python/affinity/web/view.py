"""The page's data: a :class:`~affinity.web.monitor.Snapshot` as one JSON-ready object, bounded
whatever is watched (queue and stream tables are paginated, lists cut, histories fixed).

``Pages`` carries the page's choices: which page of each group's queue table and of each
driver's stream table to send (indices clamped to what exists).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from affinity.web.drivers import DUTY_CYCLE_LABEL
from affinity.web.groups import LIVENESS_TIMEOUT_MS
from affinity.web.monitor import DriverSnapshot, GroupSnapshot, RouterSnapshot, Snapshot
from affinity.web.routers import STALE_AFTER
from affinity.web.settings import (
    CLIENTS_SHOWN,
    ERRORS_SHOWN,
    MAX_PAGE_INDEX,
    MAX_VIEW_QUERY,
    MOVES_SHOWN,
    PROBLEMS_SHOWN,
    QUEUE_PAGE_SIZE,
    STREAM_PAGE_SIZE,
)


@dataclass(frozen=True)
class Pages:
    """Page index of each group's queue table (by group name) and driver's stream table (by dir)."""

    queues: dict[str, int] = field(default_factory=dict)
    streams: dict[str, int] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str | None) -> Pages:
        """From the page's ``pages`` query parameter (JSON ``{"queues": {...}, "streams": {...}}``);
        anything malformed or too long is ignored (first pages)."""
        if not text or len(text) > MAX_VIEW_QUERY:
            return cls()
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return cls()
        if not isinstance(data, dict):
            return cls()

        def pages(key: str) -> dict[str, int]:
            value = data.get(key)
            if not isinstance(value, dict):
                return {}
            return {
                str(k): min(v, MAX_PAGE_INDEX)
                for k, v in value.items()
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0
            }

        return cls(pages("queues"), pages("streams"))


def _page(total: int, size: int, index: int) -> tuple[int, int]:
    """The clamped page index and its first row."""
    last = max(0, (total - 1) // size)
    index = min(max(0, index), last)
    return index, index * size


def _group(group: GroupSnapshot, pages: Pages) -> dict[str, Any]:
    definition = group.definition
    out: dict[str, Any] = {
        "name": definition.name,
        "definition": {
            "HP": definition.hash_prefix,
            "HC": definition.hash_count,
            "QC": definition.queue_count,
            "QS": definition.queue_size,
        },
        "problem": group.problem,
        "secret": group.secret_source,
        "moves": [
            {
                "at": m.at,
                "queue": m.queue,
                "from": m.source,
                "to": m.target,
                "epoch": m.epoch,
                "cause": m.cause,
                "why": m.why,
            }
            for m in list(group.moves)[-MOVES_SHOWN:][::-1]
        ],
        "move_totals": group.move_totals,
        "rates": group.rates,
    }
    status = group.status
    if status is None:
        out.update(members=[], owners=[], queues={"page": 0, "pages": 0, "total": 0, "rows": []})
        return out
    out["authenticated"] = status.authenticated
    out["members"] = [
        {
            "id": f"{m.member_id:x}",
            "name": m.name,
            "role": m.role,
            "index": m.index,
            "count": m.count,
            "endpoint": m.endpoint,
            "last_heard_ms": m.last_heard_ms,
            "live": m.last_heard_ms < LIVENESS_TIMEOUT_MS,
        }
        for m in status.members
    ]
    owners: dict[str, int] = {}
    for queue in status.queues:
        key = queue.owner_name if queue.owner_id else "(unowned)"
        owners[key] = owners.get(key, 0) + 1
    out["owners"] = [{"owner": name, "queues": count} for name, count in sorted(owners.items())]
    total = len(status.queues)
    index, first = _page(total, QUEUE_PAGE_SIZE, pages.queues.get(definition.name, 0))
    out["queues"] = {
        "page": index,
        "pages": max(1, -(-total // QUEUE_PAGE_SIZE)),
        "total": total,
        "rows": [
            [q.queue, q.owner_name, q.epoch, q.state, q.acked_sequence, q.sent_sequence, q.retained_bytes, q.lag]
            for q in status.queues[first : first + QUEUE_PAGE_SIZE]
        ],
    }
    return out


def _driver(driver: DriverSnapshot, pages: Pages) -> dict[str, Any]:
    view = driver.view
    out: dict[str, Any] = {"dir": view.dir, "problem": view.problem, "rates": driver.rates}
    stat = view.stat
    if stat is None:
        return out
    streams = view.streams
    index, first = _page(len(streams), STREAM_PAGE_SIZE, pages.streams.get(view.dir, 0))
    errors = [e for e in stat.errors]
    out.update(
        pid=stat.pid,
        start_ms=stat.start_ms,
        heartbeat_age_ms=stat.heartbeat_age_ms,
        dead=stat.dead,
        duty_cycle_max_ns=view.system_value(DUTY_CYCLE_LABEL),
        system=[[c.label, c.value] for c in view.system],
        clients={
            "total": len(view.clients),
            "rows": [[c.client_id, c.heartbeat_age_ms] for c in view.clients[:CLIENTS_SHOWN]],
        },
        errors={
            "total": len(errors),
            "rows": [
                [e.count, e.first_ms, e.last_ms, e.message if e.problem is None else f"CORRUPT: {e.problem}"]
                for e in errors[:ERRORS_SHOWN]
            ],
        },
        streams={
            "page": index,
            "pages": max(1, -(-len(streams) // STREAM_PAGE_SIZE)),
            "total": len(streams),
            "rows": [
                [s.name, s.session, s.stream, s.channel, s.value, round(driver.stream_rates.get(s.id, 0.0), 1)]
                for s in streams[first : first + STREAM_PAGE_SIZE]
            ],
        },
    )
    return out


def _router(router: RouterSnapshot, now: float) -> dict[str, Any]:
    nodes = []
    for node in router.nodes:
        report = node.report
        age = max(0.0, now - node.received_at)
        nodes.append(
            {
                "node": report.node,
                "age_s": round(age, 1),
                "problem": None if age < STALE_AFTER else f"the router does not answer: last report {age:.0f} s ago",
                "status": report.status,
                "peers": [[label, up] for label, up in report.peers],
                "moves": report.moves,
                "events": [[t, kind, text] for t, kind, text in report.events][::-1],
                "faucet": [list(entry) for entry in report.faucet],
                "rates": node.rates,
            }
        )
    return {
        "channel": router.channel,
        "problem": router.problem,
        "bad_reports": router.bad_reports,
        "last_error": router.last_error,
        "nodes": nodes,
    }


def page_data(snapshot: Snapshot, pages: Pages) -> dict[str, Any]:
    """What one page update carries."""
    return {
        "time": snapshot.time,
        "sequence": snapshot.sequence,
        "registry": snapshot.registry,
        "registry_problems": list(snapshot.registry_problems[:PROBLEMS_SHOWN]),
        "registry_problem_count": len(snapshot.registry_problems),
        "groups": [_group(group, pages) for group in snapshot.groups],
        "drivers": [_driver(driver, pages) for driver in snapshot.drivers],
        "routers": [_router(router, snapshot.time) for router in snapshot.routers],
    }
