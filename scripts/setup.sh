#!/usr/bin/env bash
# Creates .venv and installs the package (release build of the Rust extension) with the extras
# named in $1 (default: test,spark,demo). Needs the Rust toolchain, Python 3.11 and Java 17.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-test,spark,demo}"
command -v cargo >/dev/null || { echo "setup: cargo (Rust toolchain) is required" >&2; exit 1; }
command -v java >/dev/null || { echo "setup: java (17 or newer) is required by pyspark" >&2; exit 1; }
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q ".[${extras}]"
