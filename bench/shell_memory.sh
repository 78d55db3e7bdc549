#!/usr/bin/env bash
# Peak memory of `toolbox call shell` (release build) running a command that prints 200 MB.
#
#   bash bench/shell_memory.sh                 # 200 MB, the default build (every provider)
#   BYTES=1000000000 bash bench/shell_memory.sh
#   TOOLBOX_FEATURES=shell bash bench/shell_memory.sh   # a binary with the shell provider only
#
# Uses CARGO_TARGET_DIR (default /tmp/target-shell). The live output stream goes to stderr,
# which is sent to /dev/null here: a terminal printing 200 MB would measure the terminal.
# Prints the peak RSS (from /usr/bin/time -f %M), checks the full output reached the spool
# file byte-exact in size (a run where it did not is reported as invalid).
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/tmp/target-shell}"
BYTES="${BYTES:-200000000}"
LIMIT_KIB=$((64 * 1024))

if [[ -n "${TOOLBOX_FEATURES:-}" ]]; then
  cargo build --release --quiet -p toolbox --no-default-features --features "$TOOLBOX_FEATURES"
else
  cargo build --release --quiet -p toolbox
fi
BIN="$CARGO_TARGET_DIR/release/toolbox"

WS="$(mktemp -d)"
trap 'rm -rf "$WS"' EXIT

ARGS=$(printf '{"command": "head -c %s /dev/zero | tr %s x", "timeout_ms": 600000}' "$BYTES" "'\\\\0'")
START=$(date +%s.%N)
/usr/bin/time -f %M -o "$WS/peak_kib" \
  "$BIN" call --mode full --workspace "$WS" shell "$ARGS" >"$WS/envelope.json" 2>/dev/null || true
END=$(date +%s.%N)

PEAK_KIB=$(tail -1 "$WS/peak_kib")
SPOOL=$(ls "$WS"/.toolbox/tool_outputs/*.txt 2>/dev/null | head -1 || true)
SPOOL_BYTES=$( [[ -n "$SPOOL" ]] && stat -c %s "$SPOOL" || echo 0)
STATUS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$WS/envelope.json")

printf 'output printed:   %s bytes\n' "$BYTES"
printf 'call status:      %s\n' "$STATUS"
printf 'spool file:       %s bytes\n' "$SPOOL_BYTES"
printf 'wall time:        %.2f s\n' "$(echo "$END - $START" | bc)"
printf 'peak RSS:         %s KiB (%.1f MiB); goal: under %s KiB\n' "$PEAK_KIB" "$(echo "$PEAK_KIB / 1024" | bc -l)" "$LIMIT_KIB"

# A figure from a failed run would mean nothing: say so instead of printing a verdict on it.
[[ "$STATUS" == done ]] || { echo "the call did not succeed; the figure above is not valid"; head -c 2000 "$WS/envelope.json"; exit 1; }
[[ "$SPOOL_BYTES" == "$BYTES" ]] || { echo "the spool file does not hold the full output; the figure above is not valid"; exit 1; }
