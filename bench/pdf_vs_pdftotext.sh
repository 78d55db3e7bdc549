#!/usr/bin/env bash
# pdf__read over a generated 100-page PDF, compared with poppler's pdftotext on the same file.
#
#   bash bench/pdf_vs_pdftotext.sh [PAGES] [RUNS]
#
# Installs what it needs: poppler-utils (apt) when pdftotext is missing, and fpdf2 in a venv
# under target/bench-venv. Builds a release `toolbox` with only the pdf provider. Prints
# figures; asserts nothing about speed. Both sides are whole processes writing their text
# somewhere: pdftotext to /dev/null, toolbox to its spool file (the result is larger than
# 16 KiB) and stdout. Runs are interleaved by bench/fair.py: rounds 1, 3, ... run pdftotext,
# pdf__read, pdf__info in that order, rounds 2, 4, ... the reverse (RUNS rounds in all, best
# even); it prints medians per order, each toolbox tool's time over pdftotext's per order
# and their geometric mean.
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

echo "== timings (pdf__info: parse only)"
python3 bench/fair.py --runs "$RUNS" --warmup 2 \
  pdftotext "$(printf '%q ' "${PDFTOTEXT[@]}")" \
  pdf__read "$(printf '%q ' "${READ[@]}")" \
  pdf__info "$(printf '%q ' "${INFO[@]}")"
