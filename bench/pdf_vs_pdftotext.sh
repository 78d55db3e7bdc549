#!/usr/bin/env bash
# pdf__read over a generated 100-page PDF, compared with poppler's pdftotext on the same file.
#
#   bash bench/pdf_vs_pdftotext.sh [PAGES] [RUNS]
#
# Installs what it needs: poppler-utils (apt) when pdftotext is missing, and fpdf2 in a venv
# under target/bench-venv. Builds a release `toolbox` with only the pdf provider. Uses
# hyperfine when it is installed, else a timing loop. Prints figures; asserts nothing about
# speed. Both sides are whole processes writing their text somewhere: pdftotext to
# /dev/null, toolbox to its spool file (the result is larger than 16 KiB) and stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGES=${1:-100}
RUNS=${2:-10}
TARGET=${CARGO_TARGET_DIR:-target}

if ! command -v pdftotext >/dev/null; then
  echo "== installing poppler-utils"
  if ! apt-get install -y -q poppler-utils >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q poppler-utils >/dev/null
  fi
fi

VENV=target/bench-venv
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p target
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -c "import fpdf" 2>/dev/null ||
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check fpdf2==2.8.9

echo "== building toolbox (release, pdf provider only)"
cargo build --quiet --release -p toolbox --no-default-features --features pdf
TOOLBOX="$TARGET/release/toolbox"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" bench/pdf_make.py "$WORK/bench.pdf" "$PAGES"
echo "== $PAGES-page PDF: $(stat -c %s "$WORK/bench.pdf") bytes"

READ=("$TOOLBOX" call -w "$WORK" --mode read_only pdf__read '{"path": "bench.pdf", "max_chars": 5000000}')
INFO=("$TOOLBOX" call -w "$WORK" --mode read_only pdf__info '{"path": "bench.pdf"}')
PDFTOTEXT=(pdftotext "$WORK/bench.pdf" /dev/null)

# Sanity: both extract the whole document.
pdftotext "$WORK/bench.pdf" "$WORK/poppler.txt"
"${READ[@]}" > "$WORK/envelope.json"
SPOOL=$(ls -t "$WORK"/.toolbox/tool_outputs/*.txt | head -1)
echo "pdftotext: $(wc -m < "$WORK/poppler.txt") characters"
echo "pdf__read: $(wc -m < "$SPOOL") characters, $(grep -c -- '^--- page ' "$SPOOL") page markers"

time_loop() { # label, command...
  local label=$1; shift
  local best=999999999999 total=0 t0 t1 dt
  for _ in $(seq "$RUNS"); do
    t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
    dt=$(( (t1 - t0) / 1000 )); total=$(( total + dt ))
    [ "$dt" -lt "$best" ] && best=$dt
  done
  awk -v l="$label" -v t="$total" -v b="$best" -v n="$RUNS" \
    'BEGIN { printf "%-32s mean %8.1f ms   min %8.1f ms   (%d runs)\n", l, t / n / 1000, b / 1000, n }'
}

echo "== timings"
if command -v hyperfine >/dev/null; then
  hyperfine --warmup 2 --runs "$RUNS" -N \
    -n pdftotext "$(printf '%q ' "${PDFTOTEXT[@]}")" \
    -n "toolbox pdf__read" "$(printf '%q ' "${READ[@]}")" \
    -n "toolbox pdf__info" "$(printf '%q ' "${INFO[@]}")"
else
  "${READ[@]}" >/dev/null; pdftotext "$WORK/bench.pdf" /dev/null  # warm caches
  time_loop "pdftotext (poppler)" "${PDFTOTEXT[@]}"
  time_loop "toolbox pdf__read" "${READ[@]}"
  time_loop "toolbox pdf__info (parse only)" "${INFO[@]}"
fi
