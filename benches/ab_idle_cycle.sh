#!/usr/bin/env bash
# The cost of an idle invoker duty cycle (`affinity-bench idle-cycle`: one network publication
# and its image served, nothing offered) of several builds, interleaved in each round (A B C, A B
# C, ...). One JSON line per run on stdout; the median [min-max] over the rounds of each build's
# ns per cycle on stderr at the end.
#   usage: benches/ab_idle_cycle.sh ROUNDS NAME=BIN [NAME=BIN...]
# CYCLES (default 1000000) duty cycles per run.
set -euo pipefail
ROUNDS=$1
shift
CYCLES=${CYCLES:-1000000}
OUT=$(mktemp)
for round in $(seq "$ROUNDS"); do
  for build in "$@"; do
    name=${build%%=*} bin=${build#*=}
    load=$(cut -d' ' -f1 /proc/loadavg)
    result=$(timeout 120 "$bin" idle-cycle --cycles "$CYCLES" || echo '{"failed":true}')
    echo "{\"build\":\"$name\",\"round\":$round,\"load\":\"$load\",\"result\":$result}" | tee -a "$OUT"
  done
done
python3 - "$OUT" "$@" >&2 <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
loads = [float(r["load"]) for r in rows]
print(f"load average {min(loads):.2f}-{max(loads):.2f}")
for build in (b.split("=", 1)[0] for b in sys.argv[2:]):
    values = [r["result"]["ns_per_cycle"] for r in rows if r["build"] == build and "ns_per_cycle" in r["result"]]
    if values:
        print(f"{build:10} n={len(values)} ns per idle cycle {statistics.median(values):.0f} [{min(values):.0f}-{max(values):.0f}]")
PY
rm -f "$OUT"
