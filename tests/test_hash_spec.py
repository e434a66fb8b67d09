"""A pure-Python reference of docs/hash-spec.md reproduces tests/vectors/affinity_hash.json.

The reference below is written from the spec alone (no import of the compiled module), so the
vectors pin the algorithm independently of the Rust code, which checks the same file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors" / "affinity_hash.json"
MASK = (1 << 64) - 1
FNV_OFFSET_BASIS = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(data: bytes, start: int = FNV_OFFSET_BASIS) -> int:
    """FNV-1a 64 over ``data``, continuing from ``start``."""
    value = start
    for byte in data:
        value ^= byte
        value = (value * FNV_PRIME) & MASK
    return value


def fmix64(value: int) -> int:
    """MurmurHash3's 64-bit finaliser."""
    value ^= value >> 33
    value = (value * 0xFF51AFD7ED558CCD) & MASK
    value ^= value >> 33
    value = (value * 0xC4CEB9FE1A85EC53) & MASK
    value ^= value >> 33
    return value


def affinity_hash(composite: str) -> int:
    """Version 1 composite hash."""
    return fmix64(fnv1a64(composite.encode("utf-8")))


def rendezvous_score(label: str, composite: str) -> int:
    """Version 1 rendezvous score of ``label`` for ``composite``."""
    return fmix64(fnv1a64(label.encode("utf-8") + b"\xff" + composite.encode("utf-8")))


def select_modulo(composite: str, members: list[str]) -> str:
    """``affinity_hash mod n`` over the up members in label order."""
    return members[affinity_hash(composite) % len(members)]


def select_rendezvous(composite: str, members: list[str]) -> str:
    """Highest score; the first in label order on a tie."""
    best = members[0]
    best_score = rendezvous_score(best, composite)
    for label in members[1:]:
        score = rendezvous_score(label, composite)
        if score > best_score:
            best, best_score = label, score
    return best


def make_vectors() -> dict[str, Any]:
    """The vector file's content (used to generate it once; the file is then authoritative)."""
    inputs: list[tuple[str, list[str]]] = [
        ("", ["a"]),
        (":", ["a", "b"]),
        ("trading-adapters:alice", ["TradeAdapterA", "TradeAdapterB"]),
        ("trading-adapters:bob", ["TradeAdapterA", "TradeAdapterB"]),
        ("trading-adapters:carol", ["TradeAdapterA", "TradeAdapterB"]),
        ("trading-adapters:dave", ["TradeAdapterA", "TradeAdapterB"]),
        ("foo-adapters:alice", ["FooAdapter1", "FooAdapter2"]),
        ("foo-adapters:alice", ["FooAdapter2"]),
        ("foo-adapters:bob", ["FooAdapter1", "FooAdapter2", "FooAdapter3", "FooAdapter4"]),
        ("foo-adapters:bob", ["FooAdapter3", "FooAdapter4"]),
        ("transformers:alice", ["transformer1", "transformer2"]),
        ("transformers:zoë", ["transformer1", "transformer2", "transformer3"]),
        ("k:ユーザー", ["m1", "m2", "m3", "m4", "m5"]),
        ("k:emoji-🚀", ["m1", "m2", "m3"]),
        ("order-adapters:EURUSD", ["o1", "o2", "o3", "o4", "o5", "o6", "o7"]),
        ("order-adapters:GBPUSD", ["o1", "o2", "o3", "o4", "o5", "o6", "o7"]),
        ("a" * 200 + ":x", ["p", "q"]),
        ("key:with spaces and\ttab", ["x", "y", "z"]),
        ("k:user0", ["member1", "member2", "member3", "member4"]),
        ("k:user1", ["member1", "member2", "member3", "member4"]),
        ("k:user2", ["member1", "member2", "member3", "member4"]),
        ("k:user3", ["member1", "member2", "member3"]),
    ]
    cases = [
        {
            "composite": composite,
            "hash": f"{affinity_hash(composite):016x}",
            "members": members,
            "modulo": select_modulo(composite, members),
            "rendezvous": select_rendezvous(composite, members),
            "scores": [{"label": label, "score": f"{rendezvous_score(label, composite):016x}"} for label in members],
        }
        for composite, members in inputs
    ]
    return {
        "version": 1,
        "algorithm": "fmix64(fnv1a64(utf8(composite))); see docs/hash-spec.md",
        "cases": cases,
    }


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(VECTORS.read_text(encoding="utf-8"))
    return data


def test_fnv1a64_published_values() -> None:
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


def test_vector_file_is_version_1() -> None:
    assert load()["version"] == 1


@pytest.mark.parametrize("case", load()["cases"], ids=lambda case: repr(case["composite"])[:40])
def test_reference_reproduces_vector(case: dict[str, Any]) -> None:
    composite = case["composite"]
    members = case["members"]
    assert f"{affinity_hash(composite):016x}" == case["hash"]
    assert select_modulo(composite, members) == case["modulo"]
    assert select_rendezvous(composite, members) == case["rendezvous"]
    for score in case["scores"]:
        assert f"{rendezvous_score(score['label'], composite):016x}" == score["score"]


def test_vector_file_matches_generator() -> None:
    assert load() == make_vectors()


def test_compiled_module_agrees_with_reference() -> None:
    native = pytest.importorskip("affinity._affinity")
    assert native.HASH_VERSION == 1
    for case in load()["cases"]:
        composite = case["composite"]
        assert native.affinity_hash(composite) == int(case["hash"], 16)
        assert native.select_member(composite, case["members"], "modulo") == case["modulo"]
        assert native.select_member(composite, case["members"], "rendezvous") == case["rendezvous"]
