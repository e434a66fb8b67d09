#!/usr/bin/env bash
# Creates .venv and installs the package (release build of the Rust extension) with test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "setup: cargo (Rust toolchain) is required" >&2; exit 1; }
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q ".[test]"
