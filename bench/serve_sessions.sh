#!/usr/bin/env bash
# `toolbox serve` throughput: N sessions (default 50) each run one turn at the same time
# against the scripted LLM (a loopback server streaming OpenAI-style answers, a few ms per
# reply). Each turn is two model requests and one file_manager__read; every session has its
# own SSE client. This is the load test in toolbox/tests/serve_faults.rs, which checks every
# event as it goes; this script only runs it with another N and prints its figure: total
# time, turns per second, median and slowest turn. The machine's load skews every figure:
# note `uptime` with them.
#
#   bash bench/serve_sessions.sh [N]          # debug build, as the tests run
#   RELEASE=1 bash bench/serve_sessions.sh [N] # optimised build (slow to build)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-50}
PROFILE=()
if [ "${RELEASE:-0}" = 1 ]; then PROFILE=(--release); fi

echo "== building the test (${PROFILE[*]:-debug})"
cargo test --quiet ${PROFILE[@]+"${PROFILE[@]}"} -p toolbox --test serve_faults --no-run
echo "== load: $(uptime)"
status=0
out=$(TOOLBOX_SERVE_SESSIONS=$N cargo test --quiet ${PROFILE[@]+"${PROFILE[@]}"} -p toolbox \
  --test serve_faults concurrent_sessions_each_run_a_turn -- --nocapture 2>&1) || status=$?
grep -E '^serve throughput' <<<"$out" || true
if [ "$status" -ne 0 ]; then
  echo "$out" | tail -40
  exit "$status"
fi
