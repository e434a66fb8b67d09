"""Status lines the demo's child processes print on stdout (one JSON object per line) for the orchestrator."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from affinity.exceptions import AffinityError


class ProtocolError(AffinityError, ValueError):
    """A child process printed a status line the orchestrator cannot read; the message quotes it."""


@dataclass(frozen=True)
class ConsumerStatus:
    """A consumer's state: the queues it owns and how many events it processed."""

    ordinal: int
    owned: list[int]
    processed: int


@dataclass(frozen=True)
class GeneratorProgress:
    """The generator's state: when generation started and how many events are committed to the group."""

    start_ns: int
    generated: int
    done: bool
    #: Spark only, on the last line: how long each micro-batch after the warm-up took, start to
    #: commit (``triggerExecution``), in ms ...
    batch_ms: list[int] = field(default_factory=list)
    #: ... and how much of it the tasks (source read, sink write) and the commit took (``addBatch``), in ms.
    sink_ms: list[int] = field(default_factory=list)


Status = ConsumerStatus | GeneratorProgress
_KINDS: dict[str, type[ConsumerStatus] | type[GeneratorProgress]] = {
    "consumer": ConsumerStatus,
    "generator": GeneratorProgress,
}
_KIND_OF = {cls: kind for kind, cls in _KINDS.items()}


def encode(status: Status) -> str:
    """One status line (no newline)."""
    return json.dumps({"kind": _KIND_OF[type(status)], **asdict(status)}, separators=(",", ":"))


def decode(line: str) -> Status | None:
    """The status on a line, or None for a line that is not a status line (a child's log output)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        fields = json.loads(text)
        kind = _KINDS[fields.pop("kind")]
        return kind(**fields)
    except (ValueError, KeyError, TypeError) as error:
        raise ProtocolError(f"unreadable status line {text[:200]!r}: {error}") from error
