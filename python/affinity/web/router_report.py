"""A router's status as a message: what ``affinity router --status CHANNEL`` publishes every
:data:`REPORT_INTERVAL` seconds and ``affinity web --router CHANNEL`` shows.

The router's counters live in its own process (``SubjectRouter.status()``), so a router that
should be watched says them on a channel of its choosing, stream :data:`REPORT_STREAM_ID`: one
UTF-8 JSON object per message, at most :data:`MAX_REPORT_BYTES`::

    {"version": 1, "node": "<listen channel>", "time": <epoch s>, "status": {<RouterStatus fields>},
     "peers": [[label, up], ...], "moves": <moves since start>, "events": [[time, kind, text], ...],
     "faucet": [[topic, action, detail], ...]}

``events`` are the router's latest log lines (moves with their reason, peers up and down, faucet
actions), the newest last; ``faucet`` the latest action per faucet topic. Lists are cut to fixed
lengths before encoding. The reader (:func:`decode_report`) treats every byte as hostile: a
message that is not such an object raises ``ValueError`` saying what is wrong. Times are finite
numbers and counts integers, both within ``0..``:data:`MAX_REPORT_NUMBER` (so that the page's JSON
and ``/metrics`` can always write them: JSON's ``NaN``, ``1e999`` or a 400-digit integer cannot).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass
from typing import Any

from affinity import _network_json

#: Stream id of router status reports on the report channel.
REPORT_STREAM_ID = 4343
#: Version of the report layout.
REPORT_VERSION = 1
#: Seconds between two reports.
REPORT_INTERVAL = 1.0
#: Largest report, in bytes (encoder and decoder).
MAX_REPORT_BYTES = 64 * 1024
#: Log lines kept and sent per report.
MAX_REPORT_EVENTS = 64
#: Peers sent per report.
MAX_REPORT_PEERS = 512
#: Faucet topics kept and sent per report.
MAX_REPORT_FAUCET = 256
#: Longest text of one event or faucet detail, in characters.
MAX_EVENT_TEXT = 300
#: Largest time or count a report may carry (a signed 64-bit counter's range).
MAX_REPORT_NUMBER = 2**63 - 1
#: The logger the router writes its events to (``affinity.subjects``).
ROUTER_LOGGER = "affinity.router"


@dataclass(frozen=True)
class RouterReport:
    """A decoded report."""

    node: str
    time: float
    status: dict[str, int | bool]
    peers: tuple[tuple[str, bool], ...]
    moves: int
    events: tuple[tuple[float, str, str], ...]
    faucet: tuple[tuple[str, str, str], ...]


def _kind(message: str) -> str:
    """An event's kind from the router's log line (the formats of ``affinity.routing``)."""
    if " moved from " in message:
        return "move"
    if message.startswith("Faucet "):
        return "faucet"
    if message.startswith(("Peer ", "Source ")) and message.endswith((" is up", " is down")):
        return "peer"
    return "other"


class RouterEventLog(logging.Handler):
    """Keeps the router's latest log lines (a ``logging`` handler on :data:`ROUTER_LOGGER`)."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.events: deque[tuple[float, str, str]] = deque(maxlen=MAX_REPORT_EVENTS)
        self.faucet: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self.moves = 0

    def emit(self, record: logging.LogRecord) -> None:
        """Keeps one log line (never raises: the router's log must not fail because of it)."""
        try:
            message = record.getMessage()[:MAX_EVENT_TEXT]
        except Exception:
            return
        kind = _kind(message)
        self.events.append((record.created, kind, message))
        if kind == "move":
            self.moves += 1
        elif kind == "faucet" and record.args and len(record.args) == 3:
            action, topic, detail = (str(arg) for arg in record.args)
            self.faucet.pop(topic, None)
            self.faucet[topic] = (action, detail[:MAX_EVENT_TEXT])
            while len(self.faucet) > MAX_REPORT_FAUCET:
                self.faucet.popitem(last=False)


def encode_report(node: str, status: Any, log: RouterEventLog, now: float | None = None) -> bytes:
    """One report of a router whose ``status()`` is ``status`` (a ``RouterStatus``)."""
    fields = {k: v for k, v in asdict(status).items() if k != "members"}
    payload = {
        "version": REPORT_VERSION,
        "node": node,
        "time": time.time() if now is None else now,
        "status": fields,
        "peers": [[label, bool(up)] for label, up in status.members[:MAX_REPORT_PEERS]],
        "moves": log.moves,
        "events": [list(event) for event in log.events],
        "faucet": [[topic, action, detail] for topic, (action, detail) in log.faucet.items()],
    }
    data = json.dumps(payload, separators=(",", ":")).encode()
    while len(data) > MAX_REPORT_BYTES and (payload["events"] or payload["faucet"] or payload["peers"]):
        for key in ("events", "faucet", "peers"):
            items = payload[key]
            assert isinstance(items, list)
            del items[: max(1, len(items) // 2)]
        data = json.dumps(payload, separators=(",", ":")).encode()
    return data


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(what)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORT_NUMBER


def _is_time(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return _is_count(value)
    return math.isfinite(value) and 0 <= value <= MAX_REPORT_NUMBER


def decode_report(data: bytes) -> RouterReport:
    """A report from untrusted bytes; ``ValueError`` naming what is wrong."""
    _expect(len(data) <= MAX_REPORT_BYTES, f"report of {len(data)} bytes exceeds {MAX_REPORT_BYTES}")
    try:
        payload = _network_json.loads(data.decode("utf-8"))
    except ValueError as error:  # UnicodeDecodeError included
        raise ValueError(f"report is not UTF-8 JSON: {error}") from None
    _expect(isinstance(payload, dict), "report is not a JSON object")
    _expect(
        payload.get("version") == REPORT_VERSION, f"report version {payload.get('version')!r} is not {REPORT_VERSION}"
    )
    node, at, status = payload.get("node"), payload.get("time"), payload.get("status")
    _expect(isinstance(node, str) and 0 < len(node) <= MAX_EVENT_TEXT, "field 'node' is not a short string")
    _expect(_is_time(at), f"field 'time' is not a finite number in 0..{MAX_REPORT_NUMBER}")
    _expect(isinstance(status, dict), "field 'status' is not an object")
    clean_status: dict[str, int | bool] = {}
    for key, value in status.items():
        _expect(
            isinstance(value, bool) or _is_count(value),
            f"status field {str(key)[:64]!r} is not a boolean or an integer in 0..{MAX_REPORT_NUMBER}",
        )
        clean_status[str(key)[:64]] = value
    peers = payload.get("peers", [])
    _expect(isinstance(peers, list) and len(peers) <= MAX_REPORT_PEERS, "field 'peers' is not a short list")
    for peer in peers:
        _expect(
            isinstance(peer, list) and len(peer) == 2 and isinstance(peer[0], str) and isinstance(peer[1], bool),
            "a peer is not [label, up]",
        )
    moves = payload.get("moves", 0)
    _expect(_is_count(moves), f"field 'moves' is not a count in 0..{MAX_REPORT_NUMBER}")
    events = payload.get("events", [])
    _expect(isinstance(events, list) and len(events) <= MAX_REPORT_EVENTS, "field 'events' is not a short list")
    for event in events:
        _expect(
            isinstance(event, list) and len(event) == 3 and isinstance(event[1], str) and isinstance(event[2], str),
            "an event is not [time, kind, text]",
        )
        _expect(_is_time(event[0]), f"an event's time is not a finite number in 0..{MAX_REPORT_NUMBER}")
    faucet = payload.get("faucet", [])
    _expect(isinstance(faucet, list) and len(faucet) <= MAX_REPORT_FAUCET, "field 'faucet' is not a short list")
    for entry in faucet:
        _expect(
            isinstance(entry, list) and len(entry) == 3 and all(isinstance(item, str) for item in entry),
            "a faucet entry is not [topic, action, detail]",
        )
    return RouterReport(
        node=node,
        time=float(at),
        status=clean_status,
        peers=tuple((label, up) for label, up in peers),
        moves=moves,
        events=tuple((float(t), kind[:32], text[:MAX_EVENT_TEXT]) for t, kind, text in events),
        faucet=tuple(
            (topic[:MAX_EVENT_TEXT], action[:32], detail[:MAX_EVENT_TEXT]) for topic, action, detail in faucet
        ),
    )


class RouterReporter:
    """Publishes a router's reports (``affinity router --status CHANNEL``): call :meth:`tick` often."""

    def __init__(self, client: Any, router: Any, channel: str, node: str) -> None:
        self._router = router
        self._node = node
        self._publication = client.add_publication(channel, REPORT_STREAM_ID)
        self._log = RouterEventLog()
        logging.getLogger(ROUTER_LOGGER).addHandler(self._log)
        self._next = 0.0

    def tick(self) -> None:
        """Publishes a report when one is due (a report nobody receives is simply not sent)."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + REPORT_INTERVAL
        self._publication.offer(encode_report(self._node, self._router.status(), self._log))

    def close(self) -> None:
        """Stops keeping the router's log lines and closes the publication."""
        logging.getLogger(ROUTER_LOGGER).removeHandler(self._log)
        self._publication.close()
