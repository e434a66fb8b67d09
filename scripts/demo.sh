#!/usr/bin/env bash
# Fresh machine: set up, then run the main job: the Spark pipeline demo (a Structured Streaming
# query writes keyed events into a consumer group; three consumer processes, one killed midway,
# one joining later; a validator proves per-key order with nothing lost or duplicated).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh spark,demo
. .venv/bin/activate
affinity demo "$@"
