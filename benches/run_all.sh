#!/usr/bin/env bash
# Reproduces every table of docs/benchmarks.md in one command.
#
#   bash benches/run_all.sh                          # every table but Spark, n=3 (5 for headline rows)
#   bash benches/run_all.sh --only transport,routing # some tables
#   bash benches/run_all.sh --quick                  # n=1, shorter counts: a smoke run
#   bash benches/run_all.sh --runs 5 --headline-runs 7 --spark --wait-quiet 30
#
# Tables: routing transport multicast ipc groups router udp (spark with --spark: slow).
# It builds the release binaries and the release extension itself (`maturin develop --release`
# into the active virtualenv, or ./.venv) and refuses to run on a debug or stale build of the
# extension. Every measurement runs under benches/harness.py: bounded by a timeout, with the
# load average before, sampled during (and the CPU other processes used while it ran), one JSON
# line per result in benches/results/<table>.jsonl, rendered to benches/results/<table>.md by
# benches/transport_table.py. /proc/loadavg is also logged every 5 s to benches/results/load.log.
# Runs of different configurations are interleaved (run 1 of everything, then run 2, ...), so a
# burst of load hits one run of each rather than every run of one.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

RUNS=3
HEADLINE_RUNS=5
QUICK=0
SPARK=0
WAIT_QUIET=${WAIT_QUIET:-5}
ONLY=""
ALL_TABLES=(routing transport multicast ipc groups router udp)
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1 ;;
    --only) ONLY=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --headline-runs) HEADLINE_RUNS=$2; shift ;;
    --spark) SPARK=1 ;;
    --wait-quiet) WAIT_QUIET=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_all.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
if [[ $QUICK == 1 ]]; then RUNS=1; HEADLINE_RUNS=1; WAIT_QUIET=0; fi
TABLES=("${ALL_TABLES[@]}")
[[ $SPARK == 1 ]] && TABLES+=(spark)
if [[ -n $ONLY ]]; then IFS=, read -r -a TABLES <<< "$ONLY"; fi
for table in "${TABLES[@]}"; do
  case $table in routing|transport|multicast|ipc|groups|router|udp|spark) ;; *)
    echo "run_all.sh: unknown table $table (one of: ${ALL_TABLES[*]} spark)" >&2; exit 2 ;;
  esac
done
wanted() { local t; for t in "${TABLES[@]}"; do [[ $t == "$1" ]] && return 0; done; return 1; }

OUT=benches/results
mkdir -p "$OUT"
COMMAND="bash benches/run_all.sh $*"
[[ $QUICK == 1 ]] && COMMAND+=" (quick)"

# --- build -----------------------------------------------------------------------------------
if [[ -z ${VIRTUAL_ENV:-} ]]; then
  if [[ -f .venv/bin/activate ]]; then
    # shellcheck disable=SC1091
    . .venv/bin/activate
  else
    echo "run_all.sh: no virtualenv active and no ./.venv (python3 -m venv .venv; pip install maturin pyarrow)" >&2
    exit 1
  fi
fi
echo "== building release binaries and the release extension"
cargo build --release --manifest-path rust/Cargo.toml \
  --bin affinity-bench --bin loopback-ceiling --bin affinity-driver --bin affinity-ipc \
  --example multicast_bench --example router_bench
if wanted routing; then cargo bench --manifest-path rust/Cargo.toml --bench routing --no-run; fi
# Its own target directory, so the extension build (feature "python") and the binaries above do
# not rebuild each other every run.
maturin develop --release -q --target-dir target/bench-extension
python benches/harness.py check-extension
BIN=$ROOT/target/release

# --- load log ----------------------------------------------------------------------------------
( while true; do echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg)"; sleep 5; done ) >> "$OUT/load.log" &
LOAD_LOGGER=$!
trap 'kill $LOAD_LOGGER 2>/dev/null || true' EXIT
echo "== $(date -u '+%F %T UTC') start; load: $(cat /proc/loadavg)" | tee -a "$OUT/load.log"

TABLE=""
# h LABEL RUN TIMEOUT COMMAND... : one bounded, recorded run (a failure is recorded, not fatal);
# PARSE=routing-text for the Rust routing bench's text output.
h() {
  local label=$1 run=$2 timeout=$3
  shift 3
  python benches/harness.py run --table "$TABLE" --label "$label" --run "$run" --timeout "$timeout" \
    --wait-quiet "$WAIT_QUIET" --parse "${PARSE:-json}" -- "$@" || true
}
start_table() {
  TABLE=$1
  python benches/harness.py meta --table "$TABLE" --runs "$RUNS" --headline-runs "$HEADLINE_RUNS" --command "$COMMAND"
  echo "== table $TABLE ($(date -u +%T), load $(cut -d' ' -f1-4 /proc/loadavg))"
}
finish_table() {
  python benches/transport_table.py "$TABLE" "$OUT/$TABLE.jsonl" > "$OUT/$TABLE.md"
  cat "$OUT/$TABLE.md"
}

# --- routing -------------------------------------------------------------------------------------
if wanted routing; then
  start_table routing
  for run in $(seq "$RUNS"); do
    PARSE=routing-text h rust "$run" 300 cargo bench --manifest-path rust/Cargo.toml --bench routing
    h python "$run" 300 python benches/bench_routing.py --json
  done
  finish_table
fi

# --- transport + loopback ceiling ----------------------------------------------------------------
if wanted transport; then
  start_table transport
  declare -A SETUP_ARGS=(
    [invoker]="--mode invoker"
    [shared-spin]="--mode shared --idle backoff --app-idle spin"
    [shared-yield]="--mode shared --idle backoff --app-idle yield"
  )
  # Message counts per run: each measurement stays well under 5 s on a quiet machine.
  count() { # setup lang size
    local scale=1
    [[ $QUICK == 1 ]] && scale=3
    if [[ $1 == shared-spin ]]; then
      [[ $3 == 32 ]] && echo $((300000 / scale)) || echo $((60000 / scale))
    elif [[ $2 == rust ]]; then
      [[ $3 == 32 ]] && echo $((3000000 / scale)) || echo $((300000 / scale))
    else
      [[ $3 == 32 ]] && echo $((1500000 / scale)) || echo $((300000 / scale))
    fi
  }
  PY="python benches/bench_transport.py"
  for run in $(seq "$HEADLINE_RUNS"); do
    headline_only=0
    (( run > RUNS )) && headline_only=1
    # The loopback ceiling, in the same run as the UDP rows it is compared with.
    for mtu in 1408 65504; do
      for size in 32 1024; do
        h ceiling "$run" 30 "$BIN/loopback-ceiling" run --payload "$size" --mtu "$mtu" --seconds 1
      done
    done
    for setup in invoker shared-yield shared-spin; do
      # shellcheck disable=SC2086
      set -- ${SETUP_ARGS[$setup]}
      for size in 32 1024; do
        headline=0
        [[ $setup == invoker && $size == 32 ]] && headline=1
        (( headline_only == 1 && headline == 0 )) && continue
        rc=$(count "$setup" rust "$size")
        pc=$(count "$setup" python "$size")
        h "$setup" "$run" 60 "$BIN/affinity-bench" run-throughput --size "$size" --count "$rc" "$@"
        h "$setup" "$run" 60 "$BIN/affinity-bench" run-throughput --size "$size" --count "$rc" --batch 256 "$@"
        h "$setup" "$run" 60 $PY throughput --api offer --size "$size" --count "$pc" "$@"
        h "$setup" "$run" 60 $PY throughput --api batch --size "$size" --count "$pc" "$@"
        h "$setup" "$run" 60 $PY throughput --api arrow --size "$size" --count "$pc" "$@"
        # The Python publisher against the Rust subscriber: what the publishing side can do.
        h "$setup" "$run" 60 $PY throughput --api batch --size "$size" --count "$pc" --sub-exe "$BIN/affinity-bench" "$@"
        if [[ $setup == invoker ]]; then
          # The same rows at the largest MTU (the ceiling above has its figures too).
          h "$setup" "$run" 60 "$BIN/affinity-bench" run-throughput --size "$size" --count "$rc" --params mtu=65504 "$@"
          h "$setup" "$run" 60 "$BIN/affinity-bench" run-throughput --size "$size" --count "$rc" --batch 256 --params mtu=65504 "$@"
          h "$setup" "$run" 60 $PY throughput --api offer --size "$size" --count "$pc" --params mtu=65504 "$@"
          h "$setup" "$run" 60 $PY throughput --api batch --size "$size" --count "$pc" --params mtu=65504 "$@"
        fi
      done
      if [[ $setup == invoker || $headline_only == 0 ]]; then
        h "$setup" "$run" 60 "$BIN/affinity-bench" run-pingpong --size 32 --count 50000 --warmup 1000 --budget-ms 3000 "$@"
        h "$setup" "$run" 60 $PY pingpong --size 32 --count 50000 --warmup 1000 --budget-ms 3000 "$@"
      fi
    done
  done
  finish_table
fi

# --- multicast (private network namespace only) ---------------------------------------------------
if wanted multicast; then
  start_table multicast
  if reason=$(rust/tests/support/netns-run true 2>&1); then
    # One invocation runs every configuration RUNS times (one JSON line per run).
    MULTICAST_RUNS=$RUNS h netns 1 900 rust/tests/support/netns-run "$BIN/examples/multicast_bench"
  else
    message="SKIPPED: cannot create a private network namespace here (${reason:-unshare failed}); multicast is never sent outside one"
    echo "run_all.sh: multicast table $message" >&2
    echo "{\"failed\": true, \"label\": \"netns\", \"run\": 0, \"status\": \"skipped\", \"error\": \"$message\"}" >> "$OUT/multicast.jsonl"
  fi
  finish_table
fi

# --- media driver IPC --------------------------------------------------------------------------------
if wanted ipc; then
  start_table ipc
  ipc_count=10000000
  [[ $QUICK == 1 ]] && ipc_count=2000000
  for run in $(seq "$RUNS"); do
    for size in 32 1024; do
      h rust "$run" 180 python benches/bench_ipc_rust.py --bin "$BIN" --count "$ipc_count" --size "$size"
    done
    h python "$run" 300 python benches/bench_standalone_ipc.py --count $((ipc_count / 2)) --size 32 --runs 1
  done
  finish_table
fi

# --- consumer groups ------------------------------------------------------------------------------
if wanted groups; then
  start_table groups
  kills=20
  [[ $QUICK == 1 ]] && kills=3
  for run in $(seq "$RUNS"); do
    BENCH_GROUPS_RAW=/dev/null h throughput "$run" 300 python benches/bench_groups.py throughput --count 2000000
  done
  # Failover: one run of $kills SIGKILLs (p50/p99 over the kills).
  BENCH_GROUPS_RAW=/dev/null h failover 1 600 python benches/bench_groups.py failover --kills "$kills"
  finish_table
fi

# --- subject router ---------------------------------------------------------------------------------
if wanted router; then
  start_table router
  for run in $(seq "$RUNS"); do
    h router "$run" 300 "$BIN/examples/router_bench"
  done
  finish_table
fi

# --- UDP through the standalone driver against the offload loopback ceiling ------------------------
if wanted udp; then
  start_table udp
  udp32=10000000 udp1k=2000000
  [[ $QUICK == 1 ]] && udp32=2000000 udp1k=400000
  for run in $(seq "$RUNS"); do
    # One round per run: the ceiling (offload on), then the standalone driver, at 32 B and 1 KiB.
    EMBEDDED=0 BIN=$BIN h udp "$run" 900 bash benches/media_driver_udp.sh 1 "$udp32" "$udp1k"
  done
  finish_table
fi

# --- Spark sink (optional, slow) -----------------------------------------------------------------
if wanted spark; then
  start_table spark
  h spark 1 1800 python benches/bench_spark.py --mode group --rows 1000000 --runs "$RUNS" --consumers 2
  finish_table
fi

echo "== $(date -u '+%F %T UTC') done; load: $(cat /proc/loadavg)" | tee -a "$OUT/load.log"
