#!/usr/bin/env bash
# run_python_code with `x = 1` through the executor on the jupyter backend, next to
# jupyter_client's own round trip to the same kernel, on this machine.
#
#   bash bench/jupyter_backend.sh
#
# Starts one ipykernel (from target/bench-venv: ipykernel + jupyter_client, made from the
# same python3 the build uses), then runs ROUNDS rounds; each round runs CALLS calls of
# toolbox (providers/python/benches/jupyter_roundtrip.rs, attached to the kernel) and CALLS
# calls of jupyter_client, in alternating order, so both see the same machine load. Prints
# both medians over all calls and the ratio (target: toolbox at most 1.1x jupyter_client).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${BENCH_VENV:-target/bench-venv}
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-10}
CALLS=${CALLS:-200}

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  ipykernel==7.4.0 jupyter_client==8.10.0

echo "== building the toolbox side (release)"
cargo bench -p toolbox-python --bench jupyter_roundtrip --no-run 2>&1 | tail -1
BIN=$(cargo bench -p toolbox-python --bench jupyter_roundtrip --no-run --message-format=json 2>/dev/null \
  | "$PY" -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "jupyter_roundtrip" and m.get("executable"):
        print(m["executable"])')

WORK=$(mktemp -d)
KERNEL_PID=
cleanup() {
  [ -n "$KERNEL_PID" ] && kill "$KERNEL_PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
CONN="$WORK/kernel.json"
"$VENV/bin/python" -m ipykernel_launcher -f "$CONN" >"$WORK/kernel.log" 2>&1 &
KERNEL_PID=$!
for _ in $(seq 1 600); do
  [ -s "$CONN" ] && "$PY" -c 'import json, sys; json.load(open(sys.argv[1]))["hb_port"]' "$CONN" 2>/dev/null && break
  sleep 0.1
done

echo "== $ROUNDS rounds of $CALLS calls each, interleaved, against one kernel"
: >"$WORK/toolbox.jsonl"
: >"$WORK/jupyter_client.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 2 )); then
    "$BIN" "$CONN" "$CALLS" >>"$WORK/toolbox.jsonl"
    "$VENV/bin/python" bench/jupyter_client_roundtrip.py "$CONN" "$CALLS" >>"$WORK/jupyter_client.jsonl"
  else
    "$VENV/bin/python" bench/jupyter_client_roundtrip.py "$CONN" "$CALLS" >>"$WORK/jupyter_client.jsonl"
    "$BIN" "$CONN" "$CALLS" >>"$WORK/toolbox.jsonl"
  fi
done

"$PY" - "$WORK/toolbox.jsonl" "$WORK/jupyter_client.jsonl" <<'PY'
import json, statistics, sys
def load(path):
    times = []
    with open(path) as f:
        for line in f:
            times += json.loads(line)["times_us"]
    return times
toolbox, client = load(sys.argv[1]), load(sys.argv[2])
t, c = statistics.median(toolbox), statistics.median(client)
print()
print(f"{'x = 1 on one ipykernel, median':<46} {'µs':>9} {'calls':>7}")
print(f"{'jupyter_client execute_interactive':<46} {c:>9.1f} {len(client):>7}")
print(f"{'run_python_code, jupyter backend (executor)':<46} {t:>9.1f} {len(toolbox):>7}")
print(f"ratio toolbox / jupyter_client: {t / c:.3f} (target: at most 1.1)")
PY
