#!/usr/bin/env bash
# Round trips (32 B ping-pong, two processes each with its embedded driver) of several builds of
# affinity-bench, interleaved in each round (A B C, A B C, ...) so they share the machine's state.
# One JSON line per run on stdout ({"build","round","mode","load","result"}, the rtt.jsonl
# format); medians [min-max] of p50 / p99 / p99.9 per build and mode on stderr at the end.
#   usage: benches/ab_rtt.sh ROUNDS MODES NAME=BIN [NAME=BIN...]
#   e.g.   benches/ab_rtt.sh 5 invoker,shared base=/tmp/base/affinity-bench head=target/release/affinity-bench
# COUNT (default 50000) round trips per run. Each round also measures the machine's floor under
# the tail with the first build's `affinity-bench stalls --seconds 2` (a row with "build":"stalls":
# how often, and for how long, a spinning thread loses its core), summarised on stderr.
set -euo pipefail
ROUNDS=$1
IFS=, read -r -a MODES <<< "$2"
shift 2
COUNT=${COUNT:-50000}
OUT=$(mktemp)
FIRST_BIN=${1#*=}
for round in $(seq "$ROUNDS"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  result=$(timeout 60 "$FIRST_BIN" stalls --seconds 2 || echo '{"failed":true}')
  echo "{\"build\":\"stalls\",\"round\":$round,\"mode\":\"-\",\"load\":\"$load\",\"result\":$result}" | tee -a "$OUT"
  for mode in "${MODES[@]}"; do
    for build in "$@"; do
      name=${build%%=*} bin=${build#*=}
      load=$(cut -d' ' -f1 /proc/loadavg)
      result=$(timeout 120 "$bin" run-pingpong --mode "$mode" --count "$COUNT" --size 32 || echo '{"failed":true}')
      echo "{\"build\":\"$name\",\"round\":$round,\"mode\":\"$mode\",\"load\":\"$load\",\"result\":$result}" | tee -a "$OUT"
    done
  done
done
python3 - "$OUT" >&2 <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
stalls = [r["result"] for r in rows if r["build"] == "stalls" and "median_us" in r["result"]]
rows = [r for r in rows if r["build"] != "stalls"]
keys = sorted({(r["mode"], r["build"]) for r in rows}, key=lambda k: (k[0], [r["build"] for r in rows].index(k[1])))
loads = [float(r["load"]) for r in rows]
print(f"load average {min(loads):.2f}-{max(loads):.2f}")
if stalls:
    def floor(key):
        values = [s[key] for s in stalls]
        return f"{statistics.median(values):g} [{min(values):g}-{max(values):g}]"
    print(f"stalls   n={len(stalls)} per core per s {floor('per_core_per_s')}  median {floor('median_us')} us"
          f"  p90 {floor('p90_us')} us  lost {floor('lost_share')}")
for mode, build in keys:
    runs = [r["result"] for r in rows if (r["mode"], r["build"]) == (mode, build) and "p50_us" in r["result"]]
    def cell(key):
        values = [r[key] for r in runs]
        return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]" if values else "-"
    print(f"{mode:8} {build:10} n={len(runs)} p50 {cell('p50_us')}  p99 {cell('p99_us')}  p99.9 {cell('p99_9_us')}")
EOF
rm -f "$OUT"
