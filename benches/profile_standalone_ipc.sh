#!/usr/bin/env bash
# Profiles one run through the standalone driver with `perf record` (`aeron:ipc`, or UDP over
# 127.0.0.1 with CHANNEL=udp): a fresh
# `affinity-driver --threading shared`, `affinity-ipc subscribe`, and `affinity-ipc publish`
# (one message per `offer` unless BATCH is set), each process sampled on its own. Needs `perf`
# (Debian: linux-perf); nothing in CI runs it.
#   usage: benches/profile_standalone_ipc.sh [BINDIR]   (default target/release)
#   env:   OUT (default /tmp/ipc-profile), COUNT (50000000), SIZE (32), BATCH (unset: offer),
#          CHANNEL (ipc | udp: aeron:udp?endpoint=127.0.0.1:<free port>),
#          CALL_GRAPH (unset: flat; set: call graphs, `perf record --call-graph dwarf`)
#   then:  perf report -i OUT/pub.data --no-children --sort symbol   (also sub.data, driver.data)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
OUT=${OUT:-/tmp/ipc-profile}
COUNT=${COUNT:-50000000}
SIZE=${SIZE:-32}
batch=()
if [[ -n "${BATCH:-}" ]]; then batch=(--batch "$BATCH"); fi
channel=()
case ${CHANNEL:-ipc} in
  ipc) ;;
  udp)
    port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    channel=(--channel "aeron:udp?endpoint=127.0.0.1:$port") ;;
  *) echo "profile_standalone_ipc.sh: CHANNEL must be ipc or udp, not ${CHANNEL}" >&2; exit 2 ;;
esac
# Sampling: 1999 Hz flat, or 499 Hz with DWARF call graphs (release builds keep no frame pointers).
record=(-F 1999)
if [[ -n "${CALL_GRAPH:-}" ]]; then record=(-F 499 --call-graph dwarf,16384); fi
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
"$BIN/affinity-ipc" subscribe --dir "$dir" "${channel[@]}" --count "$COUNT" --size "$SIZE" >"$OUT/sub.out" &
subscriber=$!
pids+=("$subscriber")
for _ in $(seq 100); do grep -q ready "$OUT/sub.out" && break; sleep 0.05; done
perf record "${record[@]}" -o "$OUT/driver.data" -p "$driver" 2>/dev/null &
perfs=($!)
perf record "${record[@]}" -o "$OUT/sub.data" -p "$subscriber" 2>/dev/null &
perfs+=($!)
perf record "${record[@]}" -o "$OUT/pub.data" -- "$BIN/affinity-ipc" publish --dir "$dir" "${channel[@]}" --count "$COUNT" \
    --size "$SIZE" "${batch[@]}" >"$OUT/pub.out"
wait "$subscriber"
kill -INT "${perfs[@]}" 2>/dev/null || true
wait "${perfs[@]}" || true
cat "$OUT/pub.out" "$OUT/sub.out"
cat /proc/loadavg
