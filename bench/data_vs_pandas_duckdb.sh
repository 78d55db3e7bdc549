#!/usr/bin/env bash
# The data provider (data__convert, data__validate, data__inspect) against pandas, DuckDB
# and Python's jsonschema, on data generated here (bench/data_bench.py), interleaved in one
# run, toolbox first in rounds 1, 3, ... and last in rounds 2, 4, ...: medians per order,
# ratios per order and their geometric mean, and peak RSS.
#
#   bash bench/data_vs_pandas_duckdb.sh [SIZE_MB] [RECORDS] [ROUNDS]
#
# Defaults: a 1024 MiB CSV, 1,000,000 records to validate, 4 rounds (keep it even). Installs
# pandas, pyarrow, duckdb and jsonschema in a venv of its own (target/bench-data-venv) and
# builds a release `toolbox` with only the data provider. Prints figures; asserts nothing about speed.
# DATA_BENCH_TASKS picks tasks (e.g. "csv -> jsonl,jsonl -> parquet") and
# DATA_BENCH_PANDAS_CHUNKED=1 runs pandas in chunks (see bench/data_bench.py).
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB=${1:-1024}
RECORDS=${2:-1000000}
ROUNDS=${3:-4}
TARGET=${CARGO_TARGET_DIR:-target}

VENV=target/bench-data-venv
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p target
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -c "import pandas, pyarrow, duckdb, jsonschema" 2>/dev/null ||
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    pandas==3.1.1 pyarrow==26.0.1 duckdb==2.0.1 jsonschema==4.26.0

echo "== building toolbox (release, data provider only)"
cargo build --quiet --release -p toolbox --no-default-features --features data
TOOLBOX="$TARGET/release/toolbox"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "== versions: $("$VENV/bin/python" -c 'from importlib.metadata import version as v; print(*(p + " " + v(p) for p in ("pandas", "pyarrow", "duckdb", "jsonschema")))')"
"$VENV/bin/python" bench/data_bench.py "$TOOLBOX" "$WORK" "$SIZE_MB" "$RECORDS" "$ROUNDS"
