#!/usr/bin/env bash
# Peak memory of a session server that resumes a session holding large files (issue 37,
# point 4): `toolbox serve --session` syncs FILES files of SIZE_MB each into a file:// store,
# parks, then a second session server restores them into an empty folder under
# /usr/bin/time. Prints the restore's time and the second session server's peak RSS.
# Usage: bench/restore_memory.sh [FILES] [SIZE_MB]
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-3}
SIZE_MB=${2:-400}
BIN=$(realpath "${TOOLBOX_BIN:-target/release/toolbox}")
[ -x "$BIN" ] || cargo build -q --release -p toolbox
top=$(mktemp -d)
trap 'rm -rf "$top"' EXIT
mkdir -p "$top/a" "$top/b" "$top/store"
for i in $(seq 1 "$FILES"); do
  head -c "$((SIZE_MB * 1024 * 1024))" /dev/urandom > "$top/a/big-$i.bin"
done
store="file://$top/store"
export TOOLBOX_CONFIG="$top/config.toml"
printf '[store]\nmax_file_mb = %d\n' "$((SIZE_MB + 1))" > "$TOOLBOX_CONFIG"

listen() { # $1: stderr file; prints the URL once the session server listens (at most 600 s)
  for _ in $(seq 1 6000); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$1" | head -n 1)
    [ -n "$url" ] && { echo "$url"; return; }
    sleep 0.1
  done
  echo "the session server did not listen: $(cat "$1")" >&2; exit 1
}

(cd "$top/a" && exec "$BIN" serve --listen 127.0.0.1:0 --session s --epoch 1 \
  --state-store "$store" --sync-every 1h 2> "$top/a.err") &
first=$!
url=$(listen "$top/a.err")
curl -s -X POST "$url/api/sessions/s/park" -d '{}' > /dev/null
wait "$first" || true

(cd "$top/b" && exec /usr/bin/time -f 'peak_rss_kb %M' "$BIN" serve --listen 127.0.0.1:0 \
  --session s --epoch 2 --state-store "$store" 2> "$top/b.err") &
second=$!
listen "$top/b.err" > /dev/null
kill -TERM "$(pgrep -P "$second" -f 'toolbox serve' || pgrep -f "epoch 2 --state-store $store")" 2>/dev/null || true
wait "$second" || true
restored=$(sed -n 's/.*resumed at epoch 2: \(.*\)/\1/p' "$top/b.err")
peak=$(sed -n 's/^peak_rss_kb \([0-9]*\)/\1/p' "$top/b.err")
echo "files: $FILES x $SIZE_MB MiB"
echo "restore: $restored"
echo "peak RSS of the resuming session server: $((peak / 1024)) MiB"
cmp -s "$top/a/big-1.bin" "$top/b/big-1.bin" && echo "content: identical" || echo "content: DIFFERS"
