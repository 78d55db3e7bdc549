#!/usr/bin/env bash
# The whole test suite, runnable on a clean machine: it installs what the tests need
# (a Python venv with the MCP client), then runs fmt, clippy, every test, and the xtask checks.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# A CI run builds from nothing once: incremental caches would only cost disk and time.
if [ "${CI:-}" = "true" ]; then
  export CARGO_INCREMENTAL=0
fi

step "system packages the tests use"
# ripgrep: a test checks that file_manager__grep searches exactly the files rg searches.
if ! command -v rg >/dev/null; then
  if ! apt-get install -y -q ripgrep >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q ripgrep >/dev/null
  fi
fi
rg --version | sed -n 1p  # sed reads it all: head could make rg die of SIGPIPE under pipefail
# chromium and chromium-driver: toolbox/tests/console_browser.rs drives the web console in a
# headless browser (through the Python selenium package of tests/requirements.txt).
if ! command -v chromium >/dev/null || [ ! -x /usr/bin/chromedriver ]; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q chromium chromium-driver >/dev/null
  fi
fi
chromedriver --version | sed -n 1p

step "python test environment (target/test-venv)"
PY=${PYTHON:-python3}
VENV=target/test-venv
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p target
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
export TOOLBOX_TEST_PYTHON="$PWD/$VENV/bin/python"

step "system tools the tests need"
# toolbox/tests/cli.rs runs the binary under `script` to give it a terminal.
if [ ! -x /usr/bin/script ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
    $SUDO apt-get install -y --no-install-recommends bsdutils
  else
    echo "the tests need \`script\` (util-linux); install it" >&2
    exit 1
  fi
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "cargo test"
cargo test --workspace

step "tool schemas are current"
cargo xtask schema --check

step "bundles list exactly their providers' tools"
cargo xtask bundles

step "all checks passed"
