#!/usr/bin/env bash
# Fresh machine: set up, then run every check and test (what CI runs). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# A test that cannot set up what it exists to test (e.g. no sch_netem for random loss) says
# "SKIPPED: <test>: <reason>" and appends that line here (rust/tests/support/netns.rs, `skip`);
# the summary at the end counts them.
export AFFINITY_SKIPPED_TESTS="$PWD/target/skipped-tests.txt"
mkdir -p target && rm -f "$AFFINITY_SKIPPED_TESTS"
echo "== rust: format, lints, tests (core without Python)"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features python -- -D warnings
RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps --quiet   # doc links resolve
cargo test --no-default-features
echo "== python: lint, types, tests"
ruff check python tests benches examples
ruff format --check python tests benches examples
mypy python/affinity python/pyspark_affinity examples
python -m mypy.stubtest affinity._affinity
set +e
# Spark tests must run here, never skip (conftest turns a skipped `spark` test into a failure).
AFFINITY_REQUIRE_SPARK=1 python -m pytest tests benches/test_harness.py -q
status=$?
set -e
if [[ -s $AFFINITY_SKIPPED_TESTS ]]; then
  echo "== $(wc -l <"$AFFINITY_SKIPPED_TESTS") Rust test(s) SKIPPED (could not set up what they test):"
  sed 's/^/  SKIPPED: /' "$AFFINITY_SKIPPED_TESTS"
fi
if [[ $status -eq 5 ]]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit $status
