#!/usr/bin/env bash
# run_python_code with `x = 1` through the executor (embedded and isolated backends, criterion)
# next to the same cell executed in an ipykernel through jupyter_client, on this machine.
#
#   bash bench/python_vs_ipykernel.sh
#
# Creates target/bench-venv (ipykernel + jupyter_client) from the same python3 the build
# uses, times kernel round trips, runs the criterion bench, and prints the three medians and
# the ratio (target: embedded at least 20x faster than the kernel round trip).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=${CARGO_TARGET_DIR:-target}
VENV=${BENCH_VENV:-target/bench-venv}
PY=${PYTHON:-python3}
ROUNDS=${ROUNDS:-300}

if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
  ipykernel==7.4.0 jupyter_client==8.10.0

echo "== ipykernel through jupyter_client ($ROUNDS round trips)"
KERNEL=$("$VENV/bin/python" bench/python_ipykernel.py "$ROUNDS")
echo "$KERNEL"

echo "== toolbox run_python_code through the executor (criterion)"
cargo bench -p toolbox-python --bench run_python_code -- --warm-up-time 1 --measurement-time 4

"$PY" - "$TARGET" "$KERNEL" <<'PY'
import json, sys
target, kernel = sys.argv[1], json.loads(sys.argv[2])
def median_us(backend):
    with open(f"{target}/criterion/run_python_code/{backend}/new/estimates.json") as f:
        return json.load(f)["median"]["point_estimate"] / 1000
embedded, isolated = median_us("embedded"), median_us("isolated")
k = kernel["median_us"]
print()
print(f"{'x = 1, median':<40} {'µs':>10} {'vs ipykernel':>14}")
print(f"{'ipykernel via jupyter_client':<40} {k:>10.1f} {'1.0x':>14}")
print(f"{'run_python_code, embedded (executor)':<40} {embedded:>10.1f} {k / embedded:>13.1f}x")
print(f"{'run_python_code, isolated (executor)':<40} {isolated:>10.1f} {k / isolated:>13.1f}x")
PY
