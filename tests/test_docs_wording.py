"""The user documentation speaks of behaviours ("Caplin-style source affinity", "Solace-style
consumer groups"), not of the internal seed documents they were specified in ("seed 000")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
#: "seed 000", "Seed 001's", "the seed's rules", "as in the seed" (not a random seed, "seed=", "seeded").
SEED_REFERENCE = re.compile(r"\bseed\s+\d{3}\b|\bseed's\b|\bthe seed\b(?!\s*[=(])", re.IGNORECASE)


def test_documents_do_not_refer_to_seed_documents() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)!r}"
        for path in DOCUMENTS
        for text in [path.read_text()]
        for match in SEED_REFERENCE.finditer(text)
    ]
    assert not found, f"say which behaviour is meant instead: {found}"
