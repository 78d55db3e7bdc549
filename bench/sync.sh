#!/usr/bin/env bash
# Figures for the state store (docs/scale-out.md): sync after a one-file change, a quiet sync,
# and a restore, per workspace shape (1 MB, 100 MB, 10,000 small files), local store.
# `bash bench/sync.sh` builds the dev profile; `bash bench/sync.sh --release` the release one.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=()
if [[ "${1:-}" == "--release" ]]; then profile=(--release); fi
cargo run -q "${profile[@]}" -p toolbox-sync --example sync_bench
# Restore to the first answered call, through the binary of the same profile.
dir="${CARGO_TARGET_DIR:-target}/$([[ ${#profile[@]} -gt 0 ]] && echo release || echo debug)"
cargo build -q "${profile[@]}" -p toolbox --bin toolbox
python3 bench/sync_resume.py "$dir/toolbox"
