#!/usr/bin/env bash
# Transport benchmarks: builds the Rust bench, runs every setup several times and writes the
# medians as a markdown table to benches/results/transport.md (raw JSON lines next to it).
#
#   bash benches/run_all.sh            # RUNS=3 (5 for the headline rows)
#   RUNS=5 HEADLINE_RUNS=5 bash benches/run_all.sh
#
# Needs the Python extension installed in the active environment (maturin develop --release).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
HEADLINE_RUNS=${HEADLINE_RUNS:-5}
OUT=benches/results
mkdir -p "$OUT"
RAW="$OUT/transport.jsonl"
: > "$RAW"

cargo build --release --bin affinity-bench --manifest-path rust/Cargo.toml
BENCH="$PWD/target/release/affinity-bench"
PY="python benches/bench_transport.py"

# setup label -> options shared by Rust and Python.
declare -A SETUP_ARGS=(
  [invoker]="--mode invoker"
  [shared-spin]="--mode shared --idle backoff --app-idle spin"
  [shared-yield]="--mode shared --idle backoff --app-idle yield"
)
SETUPS=(invoker shared-yield shared-spin)

# Message counts per run: each measurement stays well under 5 s.
count() { # setup lang size
  if [[ $1 == shared-spin ]]; then
    [[ $3 == 32 ]] && echo 300000 || echo 60000
  elif [[ $2 == rust ]]; then
    [[ $3 == 32 ]] && echo 3000000 || echo 300000
  else
    [[ $3 == 32 ]] && echo 1500000 || echo 300000
  fi
}

runs_for() { # setup size kind -> number of runs
  if [[ $1 == invoker && $2 == 32 ]]; then echo "$HEADLINE_RUNS"; else echo "$RUNS"; fi
}

record() { # label command...
  local label=$1
  shift
  local line
  if line=$(timeout 60 "$@" | tail -n 1); then
    printf '%s\t%s\n' "$label" "$line" >> "$RAW"
    echo "$label $line" | cut -c1-220
  else
    echo "FAILED: $label $*" >&2
  fi
}

for setup in "${SETUPS[@]}"; do
  # shellcheck disable=SC2086
  set -- ${SETUP_ARGS[$setup]}
  for size in 32 1024; do
    n=$(runs_for "$setup" "$size")
    rc=$(count "$setup" rust "$size")
    pc=$(count "$setup" python "$size")
    for _ in $(seq "$n"); do
      record "$setup" "$BENCH" run-throughput --size "$size" --count "$rc" "$@"
      record "$setup" "$BENCH" run-throughput --size "$size" --count "$rc" --batch 256 "$@"
      record "$setup" $PY throughput --api offer --size "$size" --count "$pc" "$@"
      record "$setup" $PY throughput --api batch --size "$size" --count "$pc" "$@"
      record "$setup" $PY throughput --api arrow --size "$size" --count "$pc" "$@"
      # The Python publisher against the Rust subscriber: what the publishing side can do.
      record "$setup" $PY throughput --api batch --size "$size" --count "$pc" --sub-exe "$BENCH" "$@"
    done
  done
  n=$(runs_for "$setup" 32)
  for _ in $(seq "$n"); do
    record "$setup" "$BENCH" run-pingpong --size 32 --count 50000 --warmup 1000 --budget-ms 3000 "$@"
    record "$setup" $PY pingpong --size 32 --count 50000 --warmup 1000 --budget-ms 3000 "$@"
  done
done

python benches/transport_table.py "$RAW" > "$OUT/transport.md"
cat "$OUT/transport.md"
