"""Policy plugins used by the tests (loaded by ``sample_policies:NAME`` paths)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence


class FirstCandidate:
    """Always the first live candidate."""

    def select(self, composite: str, candidates: Sequence[str]) -> str:
        return candidates[0]


class Crc32:
    """A deterministic hash of the composite over the candidates."""

    def select(self, composite: str, candidates: Sequence[str]) -> str:
        return candidates[zlib.crc32(composite.encode()) % len(candidates)]


INSTANCE = Crc32()


def last_candidate(composite: str, candidates: Sequence[str]) -> str:
    """A plain function used as a policy."""
    return candidates[-1]


def make_first() -> FirstCandidate:
    """A factory of no arguments."""
    return FirstCandidate()


class NeedsArguments:
    """A class that cannot be built without arguments."""

    def __init__(self, weight: int) -> None:
        self.weight = weight

    def select(self, composite: str, candidates: Sequence[str]) -> str:
        return candidates[0]


class WrongSelect:
    """``select`` with the wrong number of parameters."""

    def select(self, composite: str) -> str:
        return composite


class NoSelect:
    """No ``select`` at all."""


def three_arguments(a: str, b: str, c: str) -> str:
    """A function that is neither a policy nor a factory."""
    return a


NOT_A_POLICY = 42


class Namespace:
    """Holds a policy in a nested attribute."""

    inner = Crc32()
