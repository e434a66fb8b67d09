#!/usr/bin/env bash
# The experiments behind "Why an independent run measured half the documented Python transport
# figures" (docs/benchmarks.md, Transport). Each variant changes one thing against the current
# release build (invoker setup, Python publisher): the build (an earlier commit, a debug build),
# CPU placement, warm-up and length of the timed window, the subscriber's language, and one
# competing busy process. Variants are interleaved run by run; every run is recorded by
# benches/harness.py (load before/during, the CPU other processes used) in
# benches/results/gap.jsonl and rendered to benches/results/gap.md.
#
#   bash benches/repro_gap.sh [--runs 3] [--old-commit 8756d2e]
#
# Needs the release extension in the active virtualenv (run benches/run_all.sh first) and
# target/release/affinity-bench. Builds the earlier commit (a temporary git worktree) and a
# debug build of the current extension into /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=3
OLD=8756d2e
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) RUNS=$2; shift ;;
    --old-commit) OLD=$2; shift ;;
    *) echo "repro_gap.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z ${VIRTUAL_ENV:-} && -f .venv/bin/activate ]]; then
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi
python benches/harness.py check-extension
WORK=/tmp/affinity-repro-gap
mkdir -p "$WORK"

# The earlier commit's release extension (the one docs/benchmarks.md's figures were measured on).
if [[ ! -f $WORK/old/python/affinity/_affinity.abi3.so ]]; then
  rm -rf "$WORK/old"
  git worktree add --detach "$WORK/old" "$OLD" >/dev/null
  cargo build --release --features python,pyo3/extension-module --lib \
    --manifest-path "$WORK/old/rust/Cargo.toml" --target-dir "$WORK/target-old"
  cp "$WORK/target-old/release/libaffinity.so" "$WORK/old/python/affinity/_affinity.abi3.so"
fi
# A debug build of the current extension (what `maturin develop --profile dev` installs).
if [[ ! -f $WORK/debug/python/affinity/_affinity.abi3.so ]]; then
  rm -rf "$WORK/debug"
  mkdir -p "$WORK/debug"
  cp -r python "$WORK/debug/python"
  cargo build --features python,pyo3/extension-module --lib --manifest-path rust/Cargo.toml \
    --target-dir "$WORK/target-debug"
  cp "$WORK/target-debug/debug/libaffinity.so" "$WORK/debug/python/affinity/_affinity.abi3.so"
fi

python benches/harness.py meta --table gap --runs "$RUNS" --headline-runs "$RUNS" \
  --command "bash benches/repro_gap.sh --runs $RUNS --old-commit $OLD"
BENCH=$ROOT/target/release/affinity-bench
PY=(python benches/bench_transport.py)
# v LABEL RUN [ENV=VALUE...] -- EXTRA OPTIONS : the four figures for one variant.
v() {
  local label=$1 run=$2
  shift 2
  local envs=()
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local h=(python benches/harness.py run --table gap --label "$label" --run "$run" --timeout 60 --wait-quiet 3 --)
  env "${envs[@]}" "${h[@]}" "${PY[@]}" throughput --api offer --size 32 --count 1500000 --mode invoker "$@" || true
  env "${envs[@]}" "${h[@]}" "${PY[@]}" throughput --api batch --size 32 --count 1500000 --mode invoker "$@" || true
  env "${envs[@]}" "${h[@]}" "${PY[@]}" throughput --api offer --size 1024 --count 300000 --mode invoker "$@" || true
  if [[ " $* " != *" --sub-exe "* ]]; then # (the ping-pong has no Rust-subscriber variant)
    env "${envs[@]}" "${h[@]}" "${PY[@]}" pingpong --size 32 --count 50000 --warmup 1000 --budget-ms 3000 --mode invoker "$@" || true
  fi
}
for run in $(seq "$RUNS"); do
  v "release (current)" "$run" --
  v "release, commit $OLD" "$run" PYTHONPATH="$WORK/old/python" --
  v "pub and sub pinned to one CPU" "$run" -- --pub-cpu 0 --sub-cpu 0
  v "pub and sub pinned to two CPUs" "$run" -- --pub-cpu 0 --sub-cpu 1
  v "no warm-up" "$run" -- --warmup 0
  v "Rust subscriber" "$run" -- --sub-exe "$BENCH"
  # One competing busy process for the whole variant (as one other engineer's compiler would be).
  python -c 'import time; end = time.monotonic() + 120
while time.monotonic() < end: pass' &
  burner=$!
  v "one competing busy process" "$run" --
  kill "$burner" 2>/dev/null || true
  wait "$burner" 2>/dev/null || true
  if [[ $run == 1 ]]; then
    # The debug build: one run is enough (and slow); the harness's check would refuse it in run_all.sh.
    env PYTHONPATH="$WORK/debug/python" python benches/harness.py run --table gap --label "debug build (dev profile)" \
      --run 1 --timeout 120 -- "${PY[@]}" throughput --api offer --size 32 --count 300000 --mode invoker --max-seconds 100 || true
  fi
done
python benches/transport_table.py gap benches/results/gap.jsonl > benches/results/gap.md
cat benches/results/gap.md
