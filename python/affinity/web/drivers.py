"""What the page and ``/metrics`` show of a standalone driver: its ``affinity stat`` snapshot,
read-only from ``cnc.dat``, split into system counters, per-stream counters and clients.

The per-stream counters are recognised by their type id and their label as the driver writes
it (``docs/driver-protocol.md``): ``pub-pos: SESSION STREAM CHANNEL`` for a publication,
``rcv-pos: REGISTRATION SESSION STREAM SOURCE`` for an image, ``sub-pos: SUBSCRIPTION SESSION
STREAM SOURCE @JOIN`` for a subscriber. A label that does not parse is kept as it is (no
session or stream), never dropped.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from affinity.driver import CounterValue, DriverStat, driver_stat
from affinity.exceptions import AffinityError

#: Type ids of the driver's counters (``rust/crates/shm/src/shm/counters.rs``, ``type_id``).
SYSTEM_TYPE_ID = 0
#: Type id of a client's heartbeat counter (its value: the client's last keepalive, epoch ms).
CLIENT_HEARTBEAT_TYPE_ID = 11

#: ``NAME: SESSION STREAM CHANNEL`` (publication counters).
_PUBLICATION_LABEL = re.compile(r"(pub-lmt|pub-pos|snd-pos|snd-lmt|fc-receivers): (-?\d+) (-?\d+) (.*)")
#: ``NAME: REGISTRATION SESSION STREAM SOURCE`` (image counters).
_IMAGE_LABEL = re.compile(r"(rcv-pos|rcv-hwm): -?\d+ (-?\d+) (-?\d+) (.*)")
#: ``sub-pos: SUBSCRIPTION SESSION STREAM SOURCE @JOIN``.
_SUBSCRIBER_LABEL = re.compile(r"(sub-pos): -?\d+ (-?\d+) (-?\d+) (.*?)(?: @-?\d+)?")
#: ``client-heartbeat: CLIENT``.
_CLIENT_LABEL = re.compile(r"client-heartbeat: (-?\d+)")
#: The system counter holding the conductor's longest duty cycle (ns).
DUTY_CYCLE_LABEL = "Conductor duty cycle max time (ns)"


@dataclass(frozen=True)
class StreamCounter:
    """One per-stream counter: ``name`` (``pub-pos``, ``rcv-hwm``, ...), where it belongs, its value."""

    id: int
    name: str
    session: int | None
    stream: int | None
    channel: str
    value: int


@dataclass(frozen=True)
class ClientRow:
    """A client attached to the driver and how long ago it last sent a keepalive."""

    client_id: int
    heartbeat_age_ms: int


@dataclass(frozen=True)
class DriverView:
    """One look at a driver directory: ``problem`` says why nothing (or not everything) could be read."""

    dir: str
    stat: DriverStat | None
    problem: str | None
    system: tuple[CounterValue, ...] = ()
    streams: tuple[StreamCounter, ...] = ()
    clients: tuple[ClientRow, ...] = ()

    @property
    def up(self) -> bool:
        """A readable snapshot of a live driver."""
        return self.stat is not None and self.stat.dead is None

    def system_value(self, label: str) -> int | None:
        """The value of the system counter labelled ``label``."""
        return next((c.value for c in self.system if c.label == label), None)


def parse_stream_counter(counter: CounterValue) -> StreamCounter | None:
    """``counter`` as a per-stream counter, or None when its label is none of the known forms."""
    for pattern in (_PUBLICATION_LABEL, _IMAGE_LABEL, _SUBSCRIBER_LABEL):
        match = pattern.fullmatch(counter.label)
        if match is not None:
            name, session, stream, channel = match.groups()
            return StreamCounter(counter.id, name, int(session), int(stream), channel, counter.value)
    return None


def split(stat: DriverStat, wall_ms: int | None = None) -> DriverView:
    """Sorts a snapshot's counters into system counters, per-stream counters and clients
    (``wall_ms``: now, epoch ms, against which a client's last keepalive is aged)."""
    now_ms = int(time.time() * 1000) if wall_ms is None else wall_ms
    system: list[CounterValue] = []
    streams: list[StreamCounter] = []
    clients: list[ClientRow] = []
    for counter in stat.counters:
        if counter.problem is not None:
            continue
        if counter.type_id == SYSTEM_TYPE_ID:
            system.append(counter)
            continue
        client = _CLIENT_LABEL.fullmatch(counter.label) if counter.type_id == CLIENT_HEARTBEAT_TYPE_ID else None
        if client is not None:
            clients.append(ClientRow(int(client.group(1)), max(0, now_ms - counter.value)))
            continue
        parsed = parse_stream_counter(counter)
        streams.append(
            parsed if parsed is not None else StreamCounter(counter.id, counter.label, None, None, "", counter.value)
        )
    corrupt = [c.problem for c in stat.counters if c.problem is not None]
    corrupt += [e.problem for e in stat.errors if e.problem is not None]
    problem = None
    if stat.dead is not None:
        problem = f"the driver is dead: {stat.dead}"
    elif corrupt:
        problem = f"{len(corrupt)} corrupt record(s), the first: {corrupt[0]}"
    return DriverView(stat.dir, stat, problem, tuple(system), tuple(streams), tuple(clients))


def read_driver(directory: str) -> DriverView:
    """One read-only look at ``directory``; a missing or corrupt ``cnc.dat`` is a ``problem``."""
    try:
        stat = driver_stat(directory)
    except AffinityError as error:
        return DriverView(directory, None, str(error))
    return split(stat)


#: The driver rates charted: (series name, system counter label), per second.
RATE_COUNTERS = (
    ("bytes_sent", "Bytes sent"),
    ("bytes_received", "Bytes received"),
    ("datagrams_sent", "Datagrams sent"),
    ("datagrams_received", "Datagrams received"),
    ("commands", "Commands received"),
    ("naks_sent", "NAKs sent"),
    ("retransmits", "Retransmits sent"),
)
