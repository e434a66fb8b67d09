"""The interface a routing policy plugin implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class SelectionPolicy(Protocol):
    """Chooses the peer for a subject that no affinity rule pinned (or for every subject).

    The routing tables call :meth:`select` when a routing decision is first made for a
    composite (control plane) and cache the answer; it is never called per message. If it raises
    or returns a label that is not a candidate, the table falls back to its built-in policy.
    """

    def select(self, composite: str, candidates: Sequence[str]) -> str:
        """Return one of ``candidates`` for ``composite``.

        ``composite`` is ``"<affinity key>:<captured value>"`` when an affinity rule matched,
        else the subject; ``candidates`` are the labels of the peers that are up in the first
        priority group with a live peer, in configuration order (never empty). The choice
        should be deterministic: the same inputs give the same label.
        """
        ...
