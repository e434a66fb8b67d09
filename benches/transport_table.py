#!/usr/bin/env python
"""Medians of run_all.sh's raw JSON lines as markdown tables: ``transport_table.py RAW``."""

import json
import statistics
import sys
from collections import defaultdict

throughput = defaultdict(list)
latency = defaultdict(list)
for row in open(sys.argv[1]):
    setup, line = row.rstrip("\n").split("\t", 1)
    data = json.loads(line)
    if data["bench"] == "throughput":
        if data["lang"] == "rust":
            api = "Rust offer" if data["pub_batch"] == 1 else "Rust offer_batch(256)"
        else:
            api = {
                "offer": "Python offer",
                "batch": "Python offer_batch(list of 256)",
                "arrow": "Python offer_batch(pyarrow 256)",
            }[data["api"]]
            if data.get("sub") == "rust":
                api += ", Rust sub"
        throughput[(api, setup, data["size"])].append(data)
    else:
        latency[("Rust" if data["lang"] == "rust" else "Python", setup)].append(data)

setups = ["invoker", "shared-yield", "shared-spin"]
apis = sorted({key[0] for key in throughput}, key=lambda a: (not a.startswith("Rust"), a))
print("| publisher API | size | " + " | ".join(setups) + " |")
print("|---|---|" + "---|" * len(setups))
for api in apis:
    for size in (32, 1024):
        cells = []
        for setup in setups:
            runs = throughput.get((api, setup, size), [])
            if not runs:
                cells.append("—")
                continue
            rate = statistics.median(r["msgs_per_sec"] for r in runs) / 1e6
            mb = statistics.median(r["mb_per_sec"] for r in runs)
            cells.append(f"{rate:.2f} M/s, {mb:.0f} MB/s (n={len(runs)})")
        print(f"| {api} | {size} B | " + " | ".join(cells) + " |")
print()
print("| ping-pong (32 B) | setup | p50 µs | p99 µs | p99.9 µs | samples/run | runs |")
print("|---|---|---|---|---|---|---|")
for lang in ("Rust", "Python"):
    for setup in setups:
        runs = latency.get((lang, setup), [])
        if runs:
            keys = ("p50_us", "p99_us", "p99_9_us")
            med = {k: statistics.median(r[k] for r in runs) for k in keys}
            samples = statistics.median(r["samples"] for r in runs)
            print(
                f"| {lang} | {setup} | {med['p50_us']:.1f} | {med['p99_us']:.1f} | "
                f"{med['p99_9_us']:.1f} | {samples:.0f} | {len(runs)} |"
            )
