#!/usr/bin/env bash
# The router's figures: overhead of a trivial call through `toolbox router` against the same
# call direct to the session's server (p50/p99, interleaved, keep-alive), the time to place
# a new session through a local placement adapter, and the RSS of one idle session server. See
# bench/router_overhead.py; the figures are in docs/scale-out.md. The machine's load skews
# every figure: note `uptime` with them.
#
#   bash bench/router_overhead.sh [CALLS]              # release build (fat LTO: slow to build)
#   TOOLBOX_BIN=target/debug/toolbox bash bench/router_overhead.sh   # any binary
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${1:-2000}
if [ -z "${TOOLBOX_BIN:-}" ]; then
  echo "== building toolbox (release)"
  cargo build --quiet --release --bin toolbox
  TOOLBOX_BIN="${CARGO_TARGET_DIR:-target}/release/toolbox"
fi
echo "== $TOOLBOX_BIN; load: $(uptime)"
python3 bench/router_overhead.py "$TOOLBOX_BIN" "$CALLS"
