#!/usr/bin/env bash
# file_manager__grep against ripgrep: a whole-tree scan for a rare word, whole processes both.
#
#   bash bench/grep_vs_rg.sh [TREE] [RUNS]
#
# TREE defaults to a copy of the local cargo registry sources (~/.cargo/registry/src), made in
# a temporary folder so toolbox's own .toolbox/ records never land in the registry. Installs
# ripgrep (apt) when missing. Builds a release `toolbox` with only the file_manager provider.
# ripgrep runs with --no-require-git, because toolbox honours .gitignore outside git
# repositories too; both then search the same files (the matched file sets are printed for
# comparison). Runs are interleaved by bench/fair.py, rg first in half the rounds and
# toolbox first in the other half (RUNS rounds in all, best even): medians per order, the
# toolbox / rg ratio per order and their geometric mean. Prints figures only.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=${1:-$HOME/.cargo/registry/src}
RUNS=${2:-10}
TARGET=${CARGO_TARGET_DIR:-target}
WORD=${WORD:-ZQXJ_RARE_TOKEN}

if ! command -v rg >/dev/null; then
  echo "== installing ripgrep"
  apt-get install -y -q ripgrep >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null && apt-get install -y -q ripgrep >/dev/null; }
fi
FAIR="$PWD/bench/fair.py"

echo "== building toolbox (release, file_manager only)"
cargo build --quiet --release -p toolbox --no-default-features --features file_manager
TOOLBOX="$PWD/$TARGET/release/toolbox"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "== copying $SRC"
cp -r "$SRC" "$WORK/tree"
# A handful of files holding the rare word, so both tools find something.
for i in 1 2 3; do
  find "$WORK/tree" -name '*.rs' -size +2k | sed -n "${i}00p" | while read -r f; do
    printf '\n// %s\n' "$WORD" >>"$f"
  done
done
FILES=$(find "$WORK/tree" -type f | wc -l)
BYTES=$(du -sb "$WORK/tree" | cut -f1)
echo "== tree: $FILES files, $((BYTES / 1024 / 1024)) MiB"

cd "$WORK/tree"
export TOOLBOX_TRAJECTORY=false
ARGS="{\"pattern\": \"$WORD\", \"max_results\": 5000}"
# Warm the page cache for both.
rg -n --no-require-git "$WORD" . >/dev/null || true
"$TOOLBOX" call file_manager__grep "$ARGS" --mode read_only >/dev/null

echo "== matched files"
echo "rg:      $(rg -l --no-require-git "$WORD" . | sed 's|^\./||' | sort | tr '\n' ' ')"
echo "toolbox: $("$TOOLBOX" call file_manager__grep "$ARGS" --mode read_only |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["result"]; print(" ".join(sorted({l.split(":")[0] for l in r.splitlines() if ":" in l})))')"

echo "== timings"
python3 "$FAIR" --runs "$RUNS" --warmup 2 \
  rg "rg -n --no-require-git $WORD ." \
  toolbox "$TOOLBOX call file_manager__grep '$ARGS' --mode read_only"
