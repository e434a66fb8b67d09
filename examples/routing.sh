#!/usr/bin/env bash
# The README's configuration commands: check examples/services.conf and explain it, then ask where
# alice's subjects go while TradeAdapterB is down (both to TradeAdapterA: they share an affinity key).
set -euo pipefail
cd "$(dirname "$0")/.."
affinity check examples/services.conf
affinity route examples/services.conf /PRIVATE/alice/BLOTTER/TRADE /PRIVATE/alice/FXTRADE --down TradeAdapterB
