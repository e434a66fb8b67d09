#!/usr/bin/env bash
# Interleaved A/B(/C...) of the subject router benchmark (`rust/examples/router_bench.rs`):
# variants named LABEL=BINARY[@MAX_PARK_US] (a router_bench binary, optionally with the drivers'
# longest idle park) run once each per round, in an order that rotates every round, so every
# build sees the same minutes of a shared machine. Each figure is appended to OUT as one JSON
# line with the variant, round, load average before the run and its exit status; a failed or
# timed-out run is a line of its own (never dropped).
#   usage: benches/ab_router.sh LABEL=BINARY[@PARK] LABEL=BINARY[@PARK] [...]
#   env:   OUT (default /tmp/router_ab.jsonl), ROUNDS (5), TIMEOUT (300 s per run)
# Summarise with: python3 benches/ab_router.py OUT
# Example (base = router_bench built at the previous commit, copied aside):
#   benches/ab_router.sh base=/tmp/rb_ab/router_bench_base new=target/release/examples/router_bench
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/router_ab.jsonl}
ROUNDS=${ROUNDS:-5}
TIMEOUT=${TIMEOUT:-300}
if (($# < 2)); then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
variants=("$@")
n=${#variants[@]}
runlog=$(mktemp)
trap 'rm -f "$runlog"' EXIT
for round in $(seq 0 $((ROUNDS - 1))); do
    for k in $(seq 0 $((n - 1))); do
        variant=${variants[$(((round + k) % n))]}
        label=${variant%%=*}
        spec=${variant#*=}
        binary=${spec%@*}
        park=()
        [[ $spec == *@* ]] && park=("${spec#*@}")
        load=$(cut -d' ' -f1 /proc/loadavg)
        status=0
        timeout "$TIMEOUT" "$binary" "${park[@]}" >"$runlog" 2>&1 || status=$?
        python3 - "$OUT" "$label" "$round" "$load" "$status" "$runlog" <<'PY'
import json, sys
out, label, round_, load, status, runlog = sys.argv[1:]
lines = [l for l in open(runlog, encoding="utf-8", errors="replace") if l.startswith("{")]
with open(out, "a", encoding="utf-8") as stream:
    common = {"variant": label, "round": int(round_), "load_before": float(load), "status": int(status)}
    if not lines or status != "0":
        stream.write(json.dumps({**common, "measurement": "run failed", "value": None}) + "\n")
    for line in lines:
        stream.write(json.dumps({**common, **json.loads(line)}) + "\n")
PY
        echo "round $round $label: exit $status, load $load" >&2
    done
done
