#!/usr/bin/env bash
# The whole test suite, runnable on a clean machine: it installs what the tests need
# (Python venvs with the MCP clients, MCP Inspector), then runs fmt, clippy, every test, and the xtask checks.
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
# clangd: tests/tests/lsp.rs drives a real C language server (pylsp comes from
# tests/requirements.txt).
if ! command -v clangd >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q clangd >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q clangd >/dev/null
  fi
fi
clangd --version | sed -n 1p
# tmux: toolbox/tests/chat_cli.rs reads what `toolbox chat` draws on a real terminal
# (capture-pane), Markdown tables' columns included.
if ! command -v tmux >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q tmux >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q tmux >/dev/null
  fi
fi
tmux -V
# valgrind: bench/callgrind.py counts the instructions of the hot paths (a step after the tests).
if ! command -v valgrind >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q valgrind >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q valgrind >/dev/null
  fi
fi
valgrind --version

step "Debian's python3 and its shared libpython"
# toolbox/tests/python_cli.rs embeds Debian's /usr/bin/python3 through its libpython3.X.so
# (the binary links none, and finds its Python at run time), also in a mount namespace that
# hides the tests' own Python; it checks the binary with readelf and runs unshare.
if ! ls /usr/lib/*/libpython3.*.so.1.0 >/dev/null 2>&1 || [ ! -x /usr/bin/python3 ] \
  || ! command -v readelf >/dev/null || ! command -v unshare >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q python3 libpython3-dev binutils util-linux >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q python3 libpython3-dev binutils util-linux >/dev/null
  fi
fi
ls /usr/lib/*/libpython3.*.so.1.0 | sed -n 1p

step "python test environment (target/test-venv)"
PY=${PYTHON:-python3}
VENV=target/test-venv
if [ ! -x "$VENV/bin/python" ]; then
  mkdir -p target
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements.txt
export TOOLBOX_TEST_PYTHON="$PWD/$VENV/bin/python"

step "python test environment with the MCP SDK 1.x (target/test-venv-mcp1)"
# toolbox/tests/mcp_clients.rs runs the client examples of docs/clients.md on the SDK 1.x as
# well: most frameworks pin it (langchain-mcp-adapters: mcp<2), and its transport differs.
VENV1=target/test-venv-mcp1
if [ ! -x "$VENV1/bin/python" ]; then
  mkdir -p target
  "$PY" -m venv "$VENV1"
fi
"$VENV1/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/requirements-mcp1.txt
export TOOLBOX_TEST_PYTHON_MCP1="$PWD/$VENV1/bin/python"

step "MCP Inspector (target/inspector)"
# toolbox/tests/mcp_clients.rs runs the Inspector command of docs/clients.md (its --cli mode).
if ! command -v npm >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q nodejs npm >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q nodejs npm >/dev/null
  fi
fi
INSPECTOR_VERSION=2.12.0
if [ ! -f target/inspector/node_modules/@modelcontextprotocol/inspector/package.json ] \
  || ! grep -q "\"version\": \"$INSPECTOR_VERSION\"" \
    target/inspector/node_modules/@modelcontextprotocol/inspector/package.json; then
  mkdir -p target/inspector
  npm install --prefix target/inspector --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >/dev/null
fi
export TOOLBOX_TEST_INSPECTOR="$PWD/target/inspector"

step "Arize Phoenix, a real OpenTelemetry collector (target/phoenix-venv)"
# toolbox/tests/otel_phoenix.rs exports spans to Phoenix and reads them back. It is large
# (about 140 packages), so it has a venv of its own, kept between runs.
PHOENIX_VERSION=20.26.1
PHX=target/phoenix-venv
if ! "$PHX/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('arize-phoenix') != '$PHOENIX_VERSION')" 2>/dev/null; then
  mkdir -p target
  [ -x "$PHX/bin/python" ] || "$PY" -m venv "$PHX"
  "$PHX/bin/python" -m pip install --quiet --disable-pip-version-check "arize-phoenix==$PHOENIX_VERSION"
fi
export TOOLBOX_TEST_PHOENIX="$PWD/$PHX/bin/phoenix"

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

step "deploy/k8s: manifests validated offline, the placement adapter against a fake API server"
# Core kinds against kubernetes-validate's bundled schemas, agent-sandbox kinds against the
# vendored CRDs; then the adapter, the warm pod's boot program and the real binary (built
# by cargo test above) on 127.0.0.1 (docs/scale-out.md, "Kubernetes").
"$VENV/bin/python" deploy/k8s/tests/validate_manifests.py
TOOLBOX_BIN="${CARGO_TARGET_DIR:-target}/debug/toolbox" "$VENV/bin/python" -m pytest -q -p no:cacheprovider deploy/k8s/tests

step "tool schemas are current"
cargo xtask schema --check

step "bundles list exactly their providers' tools"
cargo xtask bundles

step "instruction counts of the hot paths against bench/callgrind-baseline.json (bench/BASELINE.md)"
# callgrind counts are the same from run to run, whatever the load: a path that grew by more
# than the threshold fails here, with the counts printed.
python3 bench/callgrind.py --profile debug --check

step "Ray placement on a simulated cluster (deploy/ray/tests; with TOOLBOX_SLOW=1 only)"
# Each case starts a Ray cluster of its own (a head and 3 nodes): several minutes in all, too
# long for every CI run. deploy/ray/README.md says so.
if [ "${TOOLBOX_SLOW:-}" = 1 ]; then
  RAYVENV=target/ray-venv
  [ -x "$RAYVENV/bin/python" ] || "$PY" -m venv "$RAYVENV"
  "$RAYVENV/bin/python" -m pip install --quiet --disable-pip-version-check -r deploy/ray/requirements.txt
  cargo build --quiet --bin toolbox
  TOOLBOX_BIN="$PWD/target/debug/toolbox" "$RAYVENV/bin/python" -m pytest deploy/ray/tests -q -p no:cacheprovider
else
  echo "skipped: TOOLBOX_SLOW=1 runs it"
fi

step "all checks passed"
