#!/usr/bin/env bash
# run_python_code with `x = 1` through the executor on the jupyter backend, next to
# jupyter_client's own round trip to the same kernel, on this machine.
#
#   bash bench/jupyter_backend.sh
#
# Starts one ipykernel (from target/bench-venv: ipykernel + jupyter_client, made from the
# same python3 the build uses), then runs ROUNDS rounds; each round runs CALLS calls of
# toolbox (providers/python/benches/jupyter_roundtrip.rs, attached to the kernel) and CALLS
# calls of jupyter_client, so both see the same machine load; odd rounds run toolbox first,
# even rounds jupyter_client first (the one run second can come out faster). Prints, per
# order, both medians and the ratio toolbox / jupyter_client; the geometric mean of the two
# orders' ratios (target: toolbox at most 1.1x jupyter_client); and both medians over all
# calls. Keep ROUNDS (default 10) even, so each order gets half of them.
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
# One file per order and side: $WORK/<order>.<side>.jsonl, one JSON line per round.
for order in toolbox-first jupyter_client-first; do
  : >"$WORK/$order.toolbox.jsonl"
  : >"$WORK/$order.jupyter_client.jsonl"
done
for round in $(seq 1 "$ROUNDS"); do
  if (( round % 2 )); then
    "$BIN" "$CONN" "$CALLS" >>"$WORK/toolbox-first.toolbox.jsonl"
    "$VENV/bin/python" bench/jupyter_client_roundtrip.py "$CONN" "$CALLS" >>"$WORK/toolbox-first.jupyter_client.jsonl"
  else
    "$VENV/bin/python" bench/jupyter_client_roundtrip.py "$CONN" "$CALLS" >>"$WORK/jupyter_client-first.jupyter_client.jsonl"
    "$BIN" "$CONN" "$CALLS" >>"$WORK/jupyter_client-first.toolbox.jsonl"
  fi
done

"$PY" - "$WORK" <<'PY'
import json, math, os, statistics, sys
def load(order, side):
    times = []
    with open(os.path.join(sys.argv[1], f"{order}.{side}.jsonl")) as f:
        for line in f:
            times += json.loads(line)["times_us"]
    return times
ORDERS = ("toolbox-first", "jupyter_client-first")
times = {(o, s): load(o, s) for o in ORDERS for s in ("toolbox", "jupyter_client")}
median = lambda xs: statistics.median(xs) if xs else float("nan")
rows = [(o, times[(o, "jupyter_client")], times[(o, "toolbox")]) for o in ORDERS]
rows.append(("all rounds", rows[0][1] + rows[1][1], rows[0][2] + rows[1][2]))
print()
print(f"{'x = 1 on one ipykernel, median':<46} {'rounds':<21} {'µs':>9} {'calls':>7}")
for o, client, toolbox in rows:
    print(f"{'jupyter_client execute_interactive':<46} {o:<21} {median(client):>9.1f} {len(client):>7}")
    print(f"{'run_python_code, jupyter backend (executor)':<46} {o:<21} {median(toolbox):>9.1f} {len(toolbox):>7}")
ratios = []
for o, client, toolbox in rows[:2]:
    if client and toolbox:
        ratios.append(median(toolbox) / median(client))
        print(f"ratio toolbox / jupyter_client, {o}: {ratios[-1]:.3f}")
    else:
        print(f"ratio toolbox / jupyter_client, {o}: - (no round in this order)")
if ratios:
    gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"geometric mean of the orders' ratios toolbox / jupyter_client: {gm:.3f} (target: at most 1.1)")
PY
