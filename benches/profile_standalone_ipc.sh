#!/usr/bin/env bash
# Profiles one run through the standalone driver (`aeron:ipc`, or UDP over 127.0.0.1 with
# CHANNEL=udp): a fresh `affinity-driver --threading shared`, `affinity-ipc subscribe`, and
# `affinity-ipc publish` (one message per `offer` unless BATCH is set; into an exclusive
# publication with EXCLUSIVE=1), each process sampled on
# its own. With AERON_BUILD set (an Aeron C build directory, see benches/aeron_ipc.sh), the same
# for the peer instead: `aeronmd` (SHARED), `rate_subscriber` and `streaming_publisher` over
# `aeron:ipc`. Needs `perf` (Debian: linux-perf); nothing in CI runs it.
#   usage: benches/profile_standalone_ipc.sh [BINDIR]   (default target/release)
#   env:   OUT (default /tmp/ipc-profile), COUNT (50000000), SIZE (32), BATCH (unset: offer),
#          EXCLUSIVE (unset: a shared publication; 1: `publish --exclusive 1`),
#          CHANNEL (ipc | udp: aeron:udp?endpoint=127.0.0.1:<free port>),
#          CALL_GRAPH (unset: flat; set: call graphs, `perf record --call-graph dwarf`),
#          STAT (unset: `perf record`; set: `perf stat` of each process instead, into
#          OUT/{driver,sub,pub}.stat: task clock, context switches, page faults, and cycles and
#          instructions where the machine exposes them),
#          AERON_BUILD (unset: this package's programs; set: Aeron's, IPC only)
#   then:  perf report -i OUT/pub.data --no-children --sort symbol   (also sub.data, driver.data)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release}
OUT=${OUT:-/tmp/ipc-profile}
COUNT=${COUNT:-50000000}
SIZE=${SIZE:-32}
STREAM=1001
batch=()
if [[ -n "${BATCH:-}" ]]; then batch=(--batch "$BATCH"); fi
if [[ -n "${EXCLUSIVE:-}" ]]; then batch+=(--exclusive "$EXCLUSIVE"); fi
channel=()
case ${CHANNEL:-ipc} in
  ipc) ;;
  udp)
    if [[ -n "${AERON_BUILD:-}" ]]; then echo "profile_standalone_ipc.sh: AERON_BUILD profiles IPC only" >&2; exit 2; fi
    port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    channel=(--channel "aeron:udp?endpoint=127.0.0.1:$port") ;;
  *) echo "profile_standalone_ipc.sh: CHANNEL must be ipc or udp, not ${CHANNEL}" >&2; exit 2 ;;
esac
# Sampling: 1999 Hz flat, or 499 Hz with DWARF call graphs (release builds keep no frame pointers).
record=(-F 1999)
if [[ -n "${CALL_GRAPH:-}" ]]; then record=(-F 499 --call-graph dwarf,16384); fi
# One perf session per process: `perf record` into NAME.data, or `perf stat` into NAME.stat.
# In a background subshell perf replaces it (exec), so that its pid is `$!` and SIGINT stops it.
perf_of() {
    local name=$1
    shift
    local run=()
    if [[ $BASHPID != "$$" ]]; then run=(exec); fi
    if [[ -n "${STAT:-}" ]]; then
        "${run[@]}" perf stat -e task-clock,context-switches,page-faults,cycles,instructions -o "$OUT/$name.stat" "$@"
    else
        "${run[@]}" perf record "${record[@]}" -o "$OUT/$name.data" "$@" 2>/dev/null
    fi
}
mkdir -p "$OUT"
tmp=$(mktemp -d /dev/shm/ipc-profile.XXXXXX)
dir=$tmp/driver
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
    sleep 0.2
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
if [[ -n "${AERON_BUILD:-}" ]]; then
    aeron=$AERON_BUILD/binaries
    "$aeron/aeronmd" "-Daeron.dir=$dir" -Daeron.threading.mode=SHARED >"$OUT/driver.out" 2>&1 &
    driver=$!
    pids+=("$driver")
    for _ in $(seq 100); do [[ -e "$dir/cnc.dat" ]] && break; sleep 0.05; done
    stdbuf -oL "$aeron/rate_subscriber" -p "$dir" -c aeron:ipc -s "$STREAM" >"$OUT/sub.out" &
    subscriber=$!
    pids+=("$subscriber")
    for _ in $(seq 100); do grep -q "Subscription channel status" "$OUT/sub.out" && break; sleep 0.05; done
    publish=("$aeron/streaming_publisher" -p "$dir" -c aeron:ipc -s "$STREAM" -m "$COUNT" -L "$SIZE")
else
    "$BIN/affinity-driver" --dir "$dir" --threading shared >"$OUT/driver.out" 2>&1 &
    driver=$!
    pids+=("$driver")
    for _ in $(seq 100); do grep -q ready "$OUT/driver.out" && break; sleep 0.05; done
    "$BIN/affinity-ipc" subscribe --dir "$dir" "${channel[@]}" --count "$COUNT" --size "$SIZE" >"$OUT/sub.out" &
    subscriber=$!
    pids+=("$subscriber")
    for _ in $(seq 100); do grep -q ready "$OUT/sub.out" && break; sleep 0.05; done
    publish=("$BIN/affinity-ipc" publish --dir "$dir" "${channel[@]}" --count "$COUNT" --size "$SIZE" "${batch[@]}")
fi
perf_of driver -p "$driver" &
perfs=($!)
perf_of sub -p "$subscriber" &
perfs+=($!)
perf_of pub -- "${publish[@]}" >"$OUT/pub.out"
# rate_subscriber never exits (and spins while idle): its samples stop with the publisher's last
# offer (it is at most a term window behind); its once-a-second report follows.
if [[ -z "${AERON_BUILD:-}" ]]; then wait "$subscriber"; fi
kill -INT "${perfs[@]}" 2>/dev/null || true
wait "${perfs[@]}" || true
if [[ -n "${AERON_BUILD:-}" ]]; then sleep 1.5; fi
cat "$OUT/pub.out" "$OUT/sub.out"
cat /proc/loadavg
