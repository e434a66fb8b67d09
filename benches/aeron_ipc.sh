#!/usr/bin/env bash
# IPC, one message per offer, against the peer: Aeron C's own driver and samples (`aeronmd` in
# SHARED mode, `streaming_publisher` -> `rate_subscriber` over `aeron:ipc`) and this package's
# `affinity-driver --threading shared` with `affinity-ipc` (one message per `offer`, and
# `offer_batch` of BATCH, into a shared or an exclusive publication), interleaved: every round
# runs each case once, in an order that rotates every round, so that every case sees the same
# minutes of a shared machine. Aeron's exclusive publication too when the build has it. Each run is one
# `bench_standalone_ipc.py --runs 1` JSON line appended to OUT; at the end, medians with min/max
# per case and the ratios to Aeron (`bench_standalone_ipc.py --summarize`).
#   usage: AERON_BUILD=/path/to/aeron-build benches/aeron_ipc.sh [LABEL=DIR ...]
#          (each DIR holds one build's affinity-driver and affinity-ipc; default head=target/release)
#   env:   AERON_BUILD (required: without it the script says so and exits 0, running nothing),
#          OUT (default /tmp/aeron_ipc.jsonl; appends), ROUNDS (3), SIZE (32), COUNT (20000000),
#          BATCH (64), CASES ("rust-offer rust-exclusive rust-batch rust-exclusive-batch"),
#          AERON_CASES ("aeron-offer", and "aeron-exclusive" when the build has
#          streaming_exclusive_publisher)
# Aeron is never downloaded or built here. To build it (C only: no Java, tests or docs; CMake
# >= 3.26, which Debian 12's cmake is not, so CMake from PyPI in a venv of its own):
#   git clone https://github.com/real-logic/aeron /tmp/aeron-src    # or a snapshot of it
#   python3 -m venv /tmp/cmake-venv && /tmp/cmake-venv/bin/pip install cmake
#   /tmp/cmake-venv/bin/cmake -S /tmp/aeron-src -B /work/aeron-build -DCMAKE_BUILD_TYPE=Release \
#       -DAERON_TESTS=OFF -DAERON_UNIT_TESTS=OFF -DAERON_SYSTEM_TESTS=OFF -DAERON_BUILD_SAMPLES=ON \
#       -DAERON_BUILD_DOCUMENTATION=OFF -DBUILD_AERON_ARCHIVE_API=OFF -DAERON_INSTALL_TARGETS=OFF
#   /tmp/cmake-venv/bin/cmake --build /work/aeron-build -j2 \
#       --target aeronmd streaming_publisher rate_subscriber
# Aeron's exclusive publication: its samples have no option for it, so `streaming_publisher.c`
# with the publication calls renamed to their exclusive twins, linked like the sample:
#   S=/tmp/aeron-src/aeron-samples/src/main/c
#   sed -e 's/aeron_async_add_publication/aeron_async_add_exclusive_publication/g' \
#       -e 's/aeron_publication_/aeron_exclusive_publication_/g' $S/streaming_publisher.c \
#       >/tmp/streaming_exclusive_publisher.c
#   cc -O3 -DNDEBUG -DDISABLE_BOUNDS_CHECKS -std=c11 -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 \
#       -I$S -I/tmp/aeron-src/aeron-client/src/main/c /tmp/streaming_exclusive_publisher.c \
#       $S/sample_util.c /work/aeron-build/lib/libaeron_static.a -ldl -lm -lpthread \
#       -o /work/aeron-build/binaries/streaming_exclusive_publisher
# and this package's binaries:
#   cargo build --release --no-default-features --bin affinity-driver --bin affinity-ipc
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${AERON_BUILD:-}" ]]; then
    echo "aeron_ipc.sh: skipped: AERON_BUILD is not set (an Aeron C build directory; see the header of $0)" >&2
    exit 0
fi
OUT=${OUT:-/tmp/aeron_ipc.jsonl}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-32}
COUNT=${COUNT:-20000000}
BATCH=${BATCH:-64}
CASES=${CASES:-rust-offer rust-exclusive rust-batch rust-exclusive-batch}
if [[ -x "$AERON_BUILD/binaries/streaming_exclusive_publisher" ]]; then
    AERON_CASES=${AERON_CASES:-aeron-offer aeron-exclusive}
else
    AERON_CASES=${AERON_CASES:-aeron-offer}
fi
variants=("$@")
if ((${#variants[@]} == 0)); then variants=("head=target/release"); fi
# Every run of a round: each Aeron case once, then each case of each of our builds.
runs=()
for case in $AERON_CASES; do runs+=("aeron=$case="); done
for variant in "${variants[@]}"; do
    for case in $CASES; do runs+=("${variant%%=*}=$case=${variant#*=}"); done
done
runlog=$(mktemp)
trap 'rm -f "$runlog"' EXIT
n=${#runs[@]}
touch "$OUT"
start_line=$(($(wc -l <"$OUT") + 1))
for round in $(seq 0 $((ROUNDS - 1))); do
    for k in $(seq 0 $((n - 1))); do
        run=${runs[$(((round + k) % n))]}
        label=${run%%=*}
        rest=${run#*=}
        case=${rest%%=*}
        dir=${rest#*=}
        binaries=()
        if [[ -n "$dir" ]]; then binaries=(--binaries "$dir" --subscriber-ipc "$dir/affinity-ipc"); fi
        # A failed run (a driver starved past its timeout on a loaded machine) is recorded as a
        # line of its own and the rounds go on: it is never dropped.
        if ! python3 benches/bench_standalone_ipc.py "${binaries[@]}" --aeron-build "$AERON_BUILD" \
            --runs 1 --count "$COUNT" --sizes "$SIZE" --cases "$case" --batch "$BATCH" --label "$label" \
            --out "$OUT" >"$runlog" 2>&1; then
            printf '{"label": "%s", "case": "%s", "size": %s, "failed": true, "round": %s, "load": %s}\n' \
                "$label" "$case" "$SIZE" "$round" "$(cut -d' ' -f1 /proc/loadavg)" >>"$OUT"
            tail -1 "$runlog" >&2
        fi
        grep "^{" "$runlog" || true
    done
done
tail -n "+$start_line" "$OUT" | python3 benches/bench_standalone_ipc.py --summarize -
