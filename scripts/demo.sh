#!/usr/bin/env bash
# Fresh machine: set up, then run the end-to-end demo (publisher and subscriber in two processes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
affinity demo --count 2000000 --size 32
affinity demo --count 200000 --size 1024
