#!/usr/bin/env bash
# Creates .venv and installs the package from this checkout (release build of the Rust extension)
# with the extras named in $1 (default: test,spark,demo). Needs the Rust toolchain, Python >= 3.11
# and a Java 17 JDK (Spark; javac builds the JVM Spark sink, scripts/build-jvm.sh). The first build
# takes about 4 minutes on 2 cores: cargo's progress lines are shown as they come, with the time
# spent every 30 s; pip's full output goes to .venv/setup-build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test,spark,demo}"
# Seconds between two "still working" lines (cargo compiles this crate for minutes in silence).
progress_interval=30
command -v cargo >/dev/null || { echo "setup: cargo (Rust toolchain) is required" >&2; exit 1; }
command -v java >/dev/null || { echo "setup: java (17 or newer) is required by pyspark" >&2; exit 1; }
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  { echo "setup: Python >= 3.11 is required (python3 is $(python3 -V 2>&1))" >&2; exit 1; }
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
# This package was installed as the distribution `affinity` before it was renamed (that name is
# another project's on PyPI): remove such an install so no file belongs to two distributions.
former=$(python -m pip show affinity 2>/dev/null || true)
if [[ $former == *"Summary: Aeron-wire-compatible"* ]]; then
  echo "setup: removing this package's install under its former name 'affinity'"
  python -m pip uninstall -q -y affinity
fi
log=.venv/setup-build.log
echo "setup: building and installing '.[${extras}]' (release build; about 4 min the first time on 2 cores)"
started=$SECONDS
(
  while sleep "$progress_interval"; do
    echo "setup: still working ($((SECONDS - started)) s)"
  done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true' EXIT
set +e
# -v makes pip pass cargo's output through; only pip's and cargo's progress lines reach the terminal.
python -m pip install -v ".[${extras}]" 2>&1 | tee "$log" |
  grep --line-buffered -E '^ *(Collecting|Compiling|Finished|Built wheel|Successfully installed|error)' |
  sed -u -E 's/^ +//; s/^/setup: /'
status=${PIPESTATUS[0]}
set -e
kill "$ticker" 2>/dev/null || true
if [[ $status -ne 0 ]]; then
  echo "setup: pip install failed (exit $status); the end of $log:" >&2
  tail -n 40 "$log" >&2
  exit "$status"
fi
if [[ ,$extras, == *,spark,* ]]; then
  if command -v javac >/dev/null; then
    bash scripts/build-jvm.sh .venv/bin/python
  else
    echo "setup: no javac (JDK 17): the JVM Spark sink is not built; the Python writer is used" >&2
  fi
fi
echo "setup: done in $((SECONDS - started)) s"
