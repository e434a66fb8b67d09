#!/usr/bin/env bash
# Interleaved A/B(/C...) of `aeron:ipc` through the standalone driver: builds named LABEL=DIR
# (each DIR holding that build's affinity-driver and affinity-ipc) run one run each per case,
# in an order that rotates every round, so that every build sees the same minutes of a shared
# machine. Each run is one `bench_standalone_ipc.py --runs 1` line (rates, CPU per side, the
# driver's CPU-seconds, load before and after) appended to OUT.
#   usage: benches/ab_standalone_ipc.sh LABEL=DIR LABEL=DIR [...]
#   env:   OUT (default /tmp/standalone_ipc_ab.jsonl), ROUNDS (6), SIZE (32),
#          COUNT (50000000; 1 KiB runs take a fifth), CASES ("rust-batch rust-offer")
# An A/B that docs/benchmarks.md shows as a table keeps its raw lines in benches/results/ (one
# file per table, replaced when re-measured); others are quoted in the commit they measure.
# Example (the ipctrip A/B): base built with CARGO_TARGET_DIR=/tmp/ipc-base-target in a worktree
# of 9f7070c, then
#   benches/ab_standalone_ipc.sh base-9f7070c=/tmp/ipc-base-target/release trip=target/release
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/standalone_ipc_ab.jsonl}
ROUNDS=${ROUNDS:-6}
SIZE=${SIZE:-32}
COUNT=${COUNT:-50000000}
CASES=${CASES:-rust-batch rust-offer}
if (($# < 2)); then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
variants=("$@")
runlog=$(mktemp)
trap 'rm -f "$runlog"' EXIT
n=${#variants[@]}
for round in $(seq 0 $((ROUNDS - 1))); do
    for case in $CASES; do
        for k in $(seq 0 $((n - 1))); do
            variant=${variants[$(((round + k) % n))]}
            label=${variant%%=*}
            dir=${variant#*=}
            # A failed run (a driver starved past its timeout on a loaded machine) is recorded as
            # a line of its own and the rounds go on: it is never dropped.
            if ! python3 benches/bench_standalone_ipc.py --binaries "$dir" --subscriber-ipc "$dir/affinity-ipc" \
                --runs 1 --count "$COUNT" --sizes "$SIZE" --cases "$case" --label "$label" --out "$OUT" \
                >"$runlog" 2>&1; then
                failed=$(printf '{"label": "%s", "case": "%s", "size": %s, "failed": true, "round": %s, "load": %s}' \
                    "$label" "$case" "$SIZE" "$round" "$(cut -d' ' -f1 /proc/loadavg)")
                echo "$failed" >>"$OUT"
                tail -1 "$runlog" >&2
            fi
            grep "^{" "$runlog" || true
        done
    done
done
