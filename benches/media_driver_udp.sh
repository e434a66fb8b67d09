#!/usr/bin/env bash
# UDP throughput through the standalone media driver (driver, publisher and subscriber in three
# processes) against the embedded driver (publisher and subscriber processes, each with its
# own driver), alternated in the same minutes. Prints one JSON line per run with the load
# average before it; standalone rows also carry the CPU seconds the driver process used
# (`driver_cpu_seconds`, from /proc, start-up included) and the subscriber's own.
#   usage: benches/media_driver_udp.sh [ROUNDS] [COUNT_32B] [COUNT_1K]
# BASE_BIN=DIR adds a standalone row run with the binaries in DIR ("standalone-shared-base"),
# an A/B of a driver change in the same minutes. OLD_EMBEDDED_BIN=DIR adds embedded rows run with
# the affinity-bench in DIR ("embedded-<mode>-old"), e.g. a build of an older commit.
# PUBLISH_BATCH=M adds a standalone row whose publisher appends with offer_batch of M messages
# per call ("...-batchM"; the other rows offer one message per call).
# FAILED_DIR=DIR keeps, for each failed standalone run, the clients' output and the driver's
# counters and errors (`affinity stat`, when it is on PATH) in DIR.
# PIN=1 (with THREADING=dedicated, 2 CPUs or more) adds rows with the driver's sender pinned to
# CPU 0 and its receiver to CPU 1 (--sender-cpu-affinity, --receiver-cpu-affinity), the publisher
# beside the sender and the subscriber beside the receiver (taskset): "...-pinned", with its ratio
# to the unpinned row per round. IPC_LIMIT=1 adds the same clients over aeron:ipc through the same
# driver ("standalone-shared-ipc"): what publisher and subscriber reach with no network between.
# OFFLOAD_AB=1 adds rows with the drivers' UDP GSO/GRO off ("...-offload-off"), same binaries.
# Each round also measures the loopback ceiling with offload on (loopback-ceiling --offload on,
# the driver's datagrams at MTU 1408; CEILING=0 leaves it out) and EMBEDDED=0 leaves the embedded
# rows out. CHANNEL_PARAMS="rcv-wnd=1m|..." appends URI parameters to the standalone rows'
# channel. Every row carries its "round"; at the end the share of the ceiling per round
# (python benches/transport_table.py udp-share) is printed to stderr, so stdout stays JSON lines.
# Standalone rows also carry where the CPU went while the clients ran: "driver_threads" (user and
# system seconds of each driver thread, by thread name, from /proc), the publisher's own record
# ("publisher": its hot thread's CPU) and "cpus"; `transport_table.py udp-cpu RAW` turns them into
# CPU-seconds per GB against what half the ceiling allows on the machine's cores.
# Needs: cargo build --release --no-default-features --bin affinity-driver --bin affinity-ipc --bin affinity-bench \
#   --bin loopback-ceiling
set -euo pipefail
ROUNDS=${1:-3}
COUNT32=${2:-3000000}
COUNT1K=${3:-500000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/target/release}
# The MTU of the driver's default datagrams, which the ceiling sends too.
MTU=1408
# Seconds one client process may run (RUN_TIMEOUT=...): a run that hangs is ended and recorded as failed.
RUN_TIMEOUT=${RUN_TIMEOUT:-300}
port() { python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
load() { cut -d' ' -f1 /proc/loadavg; }
# "NAME USER-TICKS SYSTEM-TICKS" for each thread of process $1.
thread_ticks() { for task in /proc/"$1"/task/*; do echo "$(tr ' ' _ < "$task/comm") $(cut -d')' -f2 "$task/stat" | awk '{print $12, $13}')"; done; }
# {"NAME":{"user":S,"system":S},...}: the CPU each thread name used between two thread_ticks files.
thread_cpu() {
  awk -v hz="$(getconf CLK_TCK)" 'NR == FNR { u[$1] -= $2; s[$1] -= $3; next } { u[$1] += $2; s[$1] += $3 }
    END { out = ""; for (n in u) out = out sprintf("%s\"%s\":{\"user\":%.2f,\"system\":%.2f}", out == "" ? "" : ",", n, u[n] / hz, s[n] / hz); print "{" out "}" }' "$1" "$2"
}

standalone() { # SIZE COUNT THREADING [BIN [LABEL-SUFFIX [DRIVER-ARGS...]]]; PUBLISH_ARGS: the publisher's
  # extra arguments; CLIENT_CPUS="P S": the CPUs of publisher and subscriber; CHANNEL: the channel
  local BIN=${4:-$BIN} suffix=${5:-}
  local extra=("${@:6}") publish_args pub_cpu=() sub_cpu=()
  read -r -a publish_args <<< "${PUBLISH_ARGS:-}"
  if [[ -n ${CLIENT_CPUS:-} ]]; then
    read -r p s <<< "$CLIENT_CPUS"; pub_cpu=(taskset -c "$p"); sub_cpu=(taskset -c "$s")
  fi
  local dir; dir=$(mktemp -d /dev/shm/affinity-bench-XXXX)
  local channel=${CHANNEL:-"aeron:udp?endpoint=127.0.0.1:$(port)${CHANNEL_PARAMS:+|$CHANNEL_PARAMS}"}
  local before; before=$(load)
  "$BIN/affinity-driver" --dir "$dir/d" --threading "$3" "${extra[@]}" > "$dir/driver.out" &
  local driver=$!
  for _ in $(seq 100); do grep -q "ready in" "$dir/driver.out" 2>/dev/null && break; sleep 0.05; done
  timeout "$RUN_TIMEOUT" "${sub_cpu[@]}" "$BIN/affinity-ipc" subscribe --dir "$dir/d" --channel "$channel" --count "$2" --size "$1" > "$dir/sub.out" &
  local sub=$!
  for _ in $(seq 100); do grep -q "ready" "$dir/sub.out" 2>/dev/null && break; sleep 0.05; done
  thread_ticks "$driver" > "$dir/threads.before"
  timeout "$RUN_TIMEOUT" "${pub_cpu[@]}" "$BIN/affinity-ipc" publish --dir "$dir/d" --channel "$channel" --count "$2" --size "$1" "${publish_args[@]}" > "$dir/pub.out" &
  local pub=$! failed=""
  # A subscriber that fails (e.g. a driver timeout on a loaded machine) ends the publisher too,
  # which would otherwise wait for a receiver until its timeout.
  wait "$sub" || { failed="subscriber exited with status $?"; kill "$pub" 2>/dev/null || true; }
  wait "$pub" || failed=${failed:-"publisher exited with status $?"}
  if [[ -n $failed && -n ${FAILED_DIR:-} ]]; then
    # What the driver saw of a failed run (counters, errors, the clients' last words), kept
    # while the driver still runs: FAILED_DIR/<driver>-<size>-<round>/.
    local keep="$FAILED_DIR/standalone-$3$suffix-$1-$round"
    mkdir -p "$keep" && cp "$dir"/*.out "$keep"/ 2>/dev/null || true
    if command -v affinity > /dev/null; then
      affinity stat --dir "$dir/d" > "$keep/stat.txt" 2>&1 || true
      affinity stat --dir "$dir/d" --errors > "$keep/errors.txt" 2>&1 || true
    fi
  fi
  thread_ticks "$driver" > "$dir/threads.after"
  local ticks; ticks=$(awk '{print $14 + $15}' "/proc/$driver/stat")
  kill -TERM "$driver"; wait "$driver" || true
  local cpu; cpu=$(awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }')
  if [[ -n $failed ]]; then
    # A failed run is recorded, not dropped (transport_table.py lists it under the table).
    echo "{\"driver\":\"standalone-$3$suffix\",\"size\":$1,\"round\":$round,\"load\":$before,\"failed\":true,\"status\":\"failed\",\"error\":\"standalone-$3$suffix $1 B, round $round: $failed\"}"
  else
    echo "{\"driver\":\"standalone-$3$suffix\",\"size\":$1,\"round\":$round,\"load\":$before,\"driver_cpu_seconds\":$cpu,\"cpus\":$(nproc),\"driver_threads\":$(thread_cpu "$dir/threads.before" "$dir/threads.after"),\"publisher\":$(grep role "$dir/pub.out"),\"result\":$(grep role "$dir/sub.out")}"
  fi
  rm -rf "$dir"
}

embedded() { # SIZE COUNT MODE [BIN [LABEL-SUFFIX [BENCH-ARGS...]]]
  local BIN=${4:-$BIN} suffix=${5:-}
  local extra=("${@:6}")
  local before; before=$(load)
  echo "{\"driver\":\"embedded-$3$suffix\",\"size\":$1,\"round\":$round,\"load\":$before,\"result\":$("$BIN/affinity-bench" run-throughput --size "$1" --count "$2" --mode "$3" "${extra[@]}")}"
}

ceiling() { # SIZE
  local before; before=$(load)
  echo "{\"driver\":\"ceiling-offload\",\"size\":$1,\"round\":$round,\"load\":$before,\"result\":$("$BIN/loopback-ceiling" run --payload "$1" --mtu "$MTU" --seconds 1 --offload on)}"
}

if [[ -n ${PIN:-} && ( ${THREADING:-shared} != dedicated || $(nproc) -lt 2 ) ]]; then
  echo "PIN=1 needs THREADING=dedicated and 2 CPUs or more (here $(nproc))" >&2; exit 2
fi

rounds() {
for round in $(seq "$ROUNDS"); do
  for size in 32 1024; do
    count=$COUNT32; [[ $size == 1024 ]] && count=$COUNT1K
    if [[ ${CEILING:-1} != 0 ]]; then ceiling "$size"; fi
    standalone "$size" "$count" "${THREADING:-shared}"
    if [[ -n ${BASE_BIN:-} ]]; then standalone "$size" "$count" "${THREADING:-shared}" "$BASE_BIN" -base; fi
    if [[ -n ${PIN:-} ]]; then
      CLIENT_CPUS="0 1" standalone "$size" "$count" dedicated "$BIN" -pinned --sender-cpu-affinity 0 \
        --receiver-cpu-affinity 1
    fi
    if [[ -n ${IPC_LIMIT:-} ]]; then CHANNEL=aeron:ipc standalone "$size" "$count" shared "$BIN" -ipc; fi
    if [[ -n ${PUBLISH_BATCH:-} ]]; then
      PUBLISH_ARGS="--batch $PUBLISH_BATCH" standalone "$size" "$count" "${THREADING:-shared}" "$BIN" "-batch$PUBLISH_BATCH"
    fi
    if [[ ${EMBEDDED:-1} != 0 ]]; then
      embedded "$size" "$count" shared
      embedded "$size" "$count" invoker
    fi
    if [[ -n ${OFFLOAD_AB:-} ]]; then
      standalone "$size" "$count" "${THREADING:-shared}" "$BIN" -offload-off --udp-offload off
      if [[ ${EMBEDDED:-1} != 0 ]]; then
        embedded "$size" "$count" shared "$BIN" -offload-off --udp-offload off
        embedded "$size" "$count" invoker "$BIN" -offload-off --udp-offload off
      fi
    fi
    if [[ -n ${OLD_EMBEDDED_BIN:-} ]]; then
      embedded "$size" "$count" shared "$OLD_EMBEDDED_BIN" -old
      embedded "$size" "$count" invoker "$OLD_EMBEDDED_BIN" -old
    fi
  done
done
}

RAW=$(mktemp /tmp/media-driver-udp-XXXX.jsonl)
trap 'rm -f "$RAW"' EXIT
rounds | tee "$RAW"
python3 "$ROOT/benches/transport_table.py" udp-share "$RAW" >&2
