"""Summarises ``benches/ab_router.sh`` output: per figure and variant, the median [min-max] over
the rounds, and the load averages seen before the runs.

    python3 benches/ab_router.py /tmp/router_ab.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def main(path: str) -> None:
    """Prints one markdown row per measurement with a column per variant."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    variants: list[str] = []
    loads: list[float] = []
    failed: dict[str, int] = defaultdict(int)
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            record = json.loads(line)
            variant = record["variant"]
            if variant not in variants:
                variants.append(variant)
            loads.append(record["load_before"])
            if record["value"] is None:
                failed[variant] += 1
                continue
            values[f"{record['measurement']} ({record['unit']})"][variant].append(record["value"])
    print("| measurement | " + " | ".join(variants) + " |")
    print("|---" * (len(variants) + 1) + "|")
    for measurement, by_variant in values.items():
        cells = []
        for variant in variants:
            runs = by_variant.get(variant, [])
            if runs:
                cells.append(f"{statistics.median(runs):,.0f} [{min(runs):,.0f}-{max(runs):,.0f}] n={len(runs)}")
            else:
                cells.append("-")
        print(f"| {measurement} | " + " | ".join(cells) + " |")
    print(f"\nload average before runs: {min(loads):.1f}-{max(loads):.1f}; failed runs: {dict(failed) or 'none'}")


if __name__ == "__main__":
    main(sys.argv[1])
