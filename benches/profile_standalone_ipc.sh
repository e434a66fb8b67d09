#!/usr/bin/env bash
# Profiles one `aeron:ipc` run through the standalone driver with `perf record`: a fresh
# `affinity-driver --threading shared`, `affinity-ipc subscribe`, and `affinity-ipc publish`
# (one message per `offer` unless BATCH is set), each process sampled on its own. Needs `perf`
# (Debian: linux-perf); nothing in CI runs it.
#   usage: benches/profile_standalone_ipc.sh [BINDIR]   (default target/release)
#   env:   OUT (default /tmp/ipc-profile), COUNT (50000000), SIZE (32), BATCH (unset: offer)
#   then:  perf report -i OUT/pub.data --no-children --sort symbol   (also sub.data, driver.data)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
OUT=${OUT:-/tmp/ipc-profile}
COUNT=${COUNT:-50000000}
SIZE=${SIZE:-32}
batch=()
if [[ -n "${BATCH:-}" ]]; then batch=(--batch "$BATCH"); fi
mkdir -p "$OUT"
tmp=$(mktemp -d /dev/shm/ipc-profile.XXXXXX)
dir=$tmp/driver
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
"$BIN/affinity-driver" --dir "$dir" --threading shared >"$OUT/driver.out" 2>&1 &
driver=$!
pids+=("$driver")
for _ in $(seq 100); do grep -q ready "$OUT/driver.out" && break; sleep 0.05; done
"$BIN/affinity-ipc" subscribe --dir "$dir" --count "$COUNT" --size "$SIZE" >"$OUT/sub.out" &
subscriber=$!
pids+=("$subscriber")
for _ in $(seq 100); do grep -q ready "$OUT/sub.out" && break; sleep 0.05; done
perf record -F 1999 -o "$OUT/driver.data" -p "$driver" 2>/dev/null &
perfs=($!)
perf record -F 1999 -o "$OUT/sub.data" -p "$subscriber" 2>/dev/null &
perfs+=($!)
perf record -F 1999 -o "$OUT/pub.data" -- "$BIN/affinity-ipc" publish --dir "$dir" --count "$COUNT" \
    --size "$SIZE" "${batch[@]}" >"$OUT/pub.out"
wait "$subscriber"
kill -INT "${perfs[@]}" 2>/dev/null || true
wait "${perfs[@]}" || true
cat "$OUT/pub.out" "$OUT/sub.out"
cat /proc/loadavg
