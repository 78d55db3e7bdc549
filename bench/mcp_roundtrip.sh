#!/usr/bin/env bash
# MCP round trips on a raw JSON-RPC client: `toolbox mcp` against the Python MCP SDK's stdio
# server and against an ipykernel round trip, side by side in three schedules (alternating
# calls, runs of 50, after 2 ms idle; see mcp_roundtrip.py), each comparison in both start
# orders with fresh processes (the side started second often runs faster on a small VM):
# both orders' figures and the geometric mean of their ratios. Plus session start,
# throughput with 1/8/64 calls in flight, and peak RSS under 64 concurrent 1 MB results. The
# machine's load skews every figure: note `uptime` with them.
#
#   bash bench/mcp_roundtrip.sh [ROUNDS]       # ROUNDS per side, schedule and order (300)
#   PIN=1 bash bench/mcp_roundtrip.sh          # client on CPU 0, servers and kernels on CPU 1
#
# Installs its Python peers itself, outside the repository, in
# ${XDG_CACHE_HOME:-~/.cache}/toolbox-bench/venv (mcp, ipykernel, jupyter_client). Builds a
# release `toolbox`. Prints figures only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-300}
TARGET=${CARGO_TARGET_DIR:-target}
case $TARGET in /*) ;; *) TARGET=$PWD/$TARGET ;; esac
VENV=${BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/toolbox-bench/venv}

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  mcp==2.3.0 ipykernel==7.4.0 jupyter_client==8.10.0

echo "== building toolbox (release)"
cargo build --quiet --release -p toolbox
echo "== load: $(uptime)"
"$VENV/bin/python" bench/mcp_roundtrip.py "$TARGET/release/toolbox" "$ROUNDS"
