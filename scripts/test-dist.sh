#!/usr/bin/env bash
# The packaging check (issue 42): `cargo xtask dist --profile dev`, then what a user does with
# what it made. A debug build, so after scripts/test.sh (as in CI) only the wheel, the archives
# and the checks cost time. It installs its own tools (maturin, auditwheel, uv and the MCP SDK,
# pinned below) into target/dist-venv (and the SDK 1.x into target/dist-venv-mcp1), and leaves
# everything else under target/dist-test.
#
# - SHA256SUMS lists every artifact and matches it;
# - the tarball unpacked into an empty prefix: <prefix>/bin/toolbox --version and tools;
# - the image's build context holds its Dockerfile, the binary and every file it copies;
# - the wheel pip-installed into a fresh venv of another interpreter than the build's
#   (Debian's /usr/bin/python3): `toolbox` is on the venv's PATH and `toolbox mcp` answers
#   initialize, tools/list and a file_manager__list call (a stdlib JSON-RPC client), and so
#   does the Python SDK's stdio example of docs/clients.md, on the SDK 2.x and 1.x;
# - `uvx --from <wheel> toolbox mcp` and `uv tool install <wheel>` (offline);
# - the wheel tells the truth: tagged py3-none-manylinux_2_N (it links no libpython),
#   auditwheel finds it consistent with that tag, it bundles no library, and the binary
#   needs no libpython.
# It runs every check and ends with "dist: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."

MATURIN_VERSION=1.15.0
AUDITWHEEL_VERSION=6.8.2
UV_VERSION=0.13.9
# The SDK versions the main suite uses, 2.x and 1.x.
MCP_PIN=$(grep -E '^mcp==' tests/requirements.txt)
MCP1_PIN=$(grep -E '^mcp==' tests/requirements-mcp1.txt)

PY=${PYTHON:-python3}
# The interpreter the wheel is installed with: another one than the build's.
INSTALL_PY=${TOOLBOX_DIST_INSTALL_PYTHON:-/usr/bin/python3}
TOOLS=$PWD/target/dist-venv
TOOLS_MCP1=$PWD/target/dist-venv-mcp1
WORK=$PWD/target/dist-test
OUT=$WORK/out

step() { printf '\n== %s\n' "$*"; }
PASSED=0
FAILED=()
pass() { PASSED=$((PASSED + 1)); echo "ok: $*"; }
fail() { FAILED+=("$*"); echo "FAILED: $*" >&2; }
# check "what" command…: runs the command; its success or failure is one check.
check() {
  local what=$1
  shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}

step "tools (target/dist-venv): maturin $MATURIN_VERSION, auditwheel $AUDITWHEEL_VERSION, uv $UV_VERSION, $MCP_PIN; $MCP1_PIN (target/dist-venv-mcp1)"
[ -x "$TOOLS/bin/python" ] || "$PY" -m venv "$TOOLS"
"$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check \
  "maturin==$MATURIN_VERSION" "auditwheel==$AUDITWHEEL_VERSION" "uv==$UV_VERSION" "$MCP_PIN"
[ -x "$TOOLS_MCP1/bin/python" ] || "$PY" -m venv "$TOOLS_MCP1"
"$TOOLS_MCP1/bin/python" -m pip install --quiet --disable-pip-version-check "$MCP1_PIN"
if ! "$INSTALL_PY" -c 'import ensurepip, venv' 2>/dev/null; then
  # Debian splits venv (and ensurepip) out of python3.
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q python3 python3-venv >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q python3 python3-venv >/dev/null
  fi
fi
echo "build interpreter: $(realpath "$(command -v "$PY")"); install interpreter: $(realpath "$INSTALL_PY")"
if [ "$(realpath "$TOOLS/bin/python")" = "$(realpath "$INSTALL_PY")" ]; then
  echo "TOOLBOX_DIST_INSTALL_PYTHON ($INSTALL_PY) is the build's interpreter; name another" >&2
  exit 1
fi

rm -rf "$WORK"
mkdir -p "$WORK"

# A JSON-RPC client on the standard library: initialize, tools/list, a file_manager__list
# call, over the command's stdin and stdout, one JSON object a line.
cat >"$WORK/mcp_roundtrip.py" <<'PY'
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time

command = sys.argv[1:]
deadline = time.monotonic() + float(os.environ.get("ROUNDTRIP_TIMEOUT", "180"))
errlog = tempfile.TemporaryFile()
proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog)
lines = queue.Queue()


def pump():
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


threading.Thread(target=pump, daemon=True).start()


def fail(why):
    proc.kill()
    errlog.seek(0)
    tail = errlog.read().decode(errors="replace")[-4000:]
    sys.exit(f"{' '.join(command)}: {why}\nits stderr:\n{tail}")


def send(message):
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def request(id, method, params):
    send({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    while True:
        left = deadline - time.monotonic()
        try:
            line = lines.get(timeout=max(left, 0.01))
        except queue.Empty:
            fail(f"no answer to {method} in time")
        if line is None:
            fail(f"stdout closed before the answer to {method}")
        message = json.loads(line)
        if message.get("id") != id:
            continue  # a notification (a log line, progress)
        if "error" in message:
            fail(f"{method} failed: {message['error']}")
        return message["result"]


init = request(1, "initialize", {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test-dist", "version": "1"},
})
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
names, cursor, id = [], None, 2
while True:
    listed = request(id, "tools/list", {"cursor": cursor} if cursor else {})
    names += [tool["name"] for tool in listed["tools"]]
    cursor, id = listed.get("nextCursor"), id + 1
    if not cursor:
        break
if "file_manager__list" not in names:
    fail(f"tools/list has no file_manager__list: {names}")
called = request(id, "tools/call", {"name": "file_manager__list", "arguments": {"path": "."}})
text = "".join(item.get("text", "") for item in called.get("content", []))
if called.get("isError") or "dist-check.txt" not in text:
    fail(f"file_manager__list did not list dist-check.txt: {called}")
proc.stdin.close()
try:
    proc.wait(timeout=30)
except subprocess.TimeoutExpired:
    fail("did not exit after stdin closed")
server = init["serverInfo"]
print(f"{server['name']} {server.get('version', '')}: protocol {init['protocolVersion']}, "
      f"{len(names)} tools, file_manager__list found dist-check.txt")
PY
roundtrip() { "$INSTALL_PY" "$WORK/mcp_roundtrip.py" "$@"; }
WS=$WORK/workspace
mkdir -p "$WS"
echo "a file for file_manager__list to find" >"$WS/dist-check.txt"

step "cargo xtask dist --profile dev"
start=$SECONDS
PATH="$TOOLS/bin:$PATH" cargo xtask dist --profile dev --out "$OUT"
echo "cargo xtask dist --profile dev took $((SECONDS - start)) s"

WHEEL=$(ls "$OUT"/*.whl)
TARBALL=$(ls "$OUT"/toolbox-[0-9]*.tar.gz)
IMAGE=$(ls "$OUT"/toolbox-image-*.tar.gz)
TAG=$(basename "$WHEEL" .whl | awk -F- '{print $(NF-2) "-" $(NF-1) "-" $NF}')
PLATFORM=${TAG##*-}
echo "wheel tag: $TAG"

step "SHA256SUMS"
sums_match() { (cd "$OUT" && sha256sum --check --strict SHA256SUMS); }
check "SHA256SUMS matches every artifact" sums_match
lists_all() {
  diff <(cd "$OUT" && ls | grep -vx SHA256SUMS | sort) <(awk '{print $2}' "$OUT/SHA256SUMS" | sort)
}
check "SHA256SUMS lists every artifact in the output folder" lists_all

step "the tarball, unpacked into an empty prefix"
PREFIX=$WORK/prefix
mkdir "$PREFIX"
tar -xzf "$TARBALL" -C "$PREFIX" --strip-components=1
version_ok() {
  local said
  said=$("$PREFIX/bin/toolbox" --version) || return 1
  echo "$said"
  grep -qE '^toolbox [0-9]+\.[0-9]+\.[0-9]+$' <<<"$said"
}
check "<prefix>/bin/toolbox --version" version_ok
tools_ok() { (cd "$WS" && "$PREFIX/bin/toolbox" tools) | grep -q '^file_manager__list '; }
check "<prefix>/bin/toolbox tools lists file_manager__list" tools_ok
check "the tarball carries the licences (THIRD-PARTY.md)" \
  test -s "$PREFIX/share/licenses/toolbox/THIRD-PARTY.md"

step "the image's build context"
CONTEXT=$WORK/image-context
mkdir "$CONTEXT"
tar -xzf "$IMAGE" -C "$CONTEXT"
context_ok() {
  local ok=0 src
  cmp -s "$CONTEXT/toolbox" "$PREFIX/bin/toolbox" || { echo "the image's binary is not the tarball's" >&2; ok=1; }
  if grep -q -- '--from=' "$CONTEXT/Dockerfile"; then echo "the Dockerfile still copies from a build stage" >&2; ok=1; fi
  # Every source of every COPY is in the context.
  while read -r src; do
    [ -e "$CONTEXT/$src" ] || { echo "the Dockerfile copies $src, which the context lacks" >&2; ok=1; }
  done < <(awk '$1 == "COPY" { for (i = 2; i < NF; i++) if ($i !~ /^--/) print $i }' "$CONTEXT/Dockerfile")
  return $ok
}
check "the context has its Dockerfile, the same binary and every file it copies" context_ok

step "pip install into a fresh venv of $INSTALL_PY"
VENV=$WORK/venv-pip
"$INSTALL_PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-index "$WHEEL"
on_path() { [ "$(PATH="$VENV/bin:/usr/bin:/bin" command -v toolbox)" = "$VENV/bin/toolbox" ]; }
check "pip install puts toolbox on the venv's PATH" on_path
pip_mcp() { (cd "$WS" && PATH="$VENV/bin:$PATH" roundtrip toolbox mcp --workspace "$WS"); }
check "toolbox mcp from the pip venv: initialize, tools/list, file_manager__list" pip_mcp

# The Python SDK's stdio example of docs/clients.md (the block after `<!-- dist-test: sdk-stdio -->`).
awk '/<!-- dist-test: sdk-stdio -->/ {m = 1; next} m == 1 && /^```/ {m = 2; next} m == 2 && /^```/ {exit} m == 2' \
  docs/clients.md >"$WORK/sdk_stdio.py"
sdk_example() {
  local out
  [ -s "$WORK/sdk_stdio.py" ] || { echo "docs/clients.md has no block marked dist-test: sdk-stdio" >&2; return 1; }
  out=$(cd "$WS" && PATH="$VENV/bin:$PATH" timeout 180 "$1/bin/python" "$WORK/sdk_stdio.py") || return 1
  echo "$out" | tail -c 300
  grep -q file_manager__list <<<"$out" && grep -q dist-check.txt <<<"$out"
}
check "docs/clients.md's Python SDK stdio example ($MCP_PIN) against the installed command" sdk_example "$TOOLS"
check "docs/clients.md's Python SDK stdio example ($MCP1_PIN) against the installed command" sdk_example "$TOOLS_MCP1"

step "uvx and uv tool install (offline, $INSTALL_PY)"
export UV_CACHE_DIR=$WORK/uv-cache UV_PYTHON=$INSTALL_PY UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1
uvx_mcp() { (cd "$WS" && roundtrip "$TOOLS/bin/uvx" --offline --from "$WHEEL" toolbox mcp --workspace "$WS"); }
check "uvx --from <wheel> toolbox mcp: initialize, tools/list, file_manager__list" uvx_mcp
uv_tool() {
  UV_TOOL_DIR=$WORK/uv-tools UV_TOOL_BIN_DIR=$WORK/uv-bin "$TOOLS/bin/uv" tool install --offline "$WHEEL" &&
    "$WORK/uv-bin/toolbox" --version
}
check "uv tool install <wheel> puts toolbox in its bin folder" uv_tool

step "the wheel tells the truth"
py3_none() {
  [[ $TAG =~ ^py3-none-manylinux_2_[0-9]+_x86_64$ ]] ||
    { echo "tag $TAG: a binary that links no libpython is py3-none-manylinux_2_N" >&2; return 1; }
}
check "tagged py3-none-manylinux (the binary links no libpython)" py3_none
auditwheel_agrees() {
  local shown
  shown=$("$TOOLS/bin/auditwheel" show "$WHEEL" 2>&1)
  echo "$shown"
  grep -qF "consistent with the following platform tag: \"$PLATFORM\"" <<<"$(tr '\n' ' ' <<<"$shown" | tr -s ' ')"
}
check "auditwheel show finds the wheel consistent with its tag ($PLATFORM)" auditwheel_agrees
no_libs() {
  "$TOOLS/bin/python" - "$WHEEL" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
libs = [n for n in names if ".libs/" in n or n.endswith(".so") or ".so." in n.rsplit("/", 1)[-1]]
print("bundled:", libs or "nothing")
sys.exit(1 if libs else 0)
PY
}
check "the wheel bundles no shared library" no_libs
no_libpython() {
  local needed
  needed=$(readelf -d "$VENV/bin/toolbox" | grep -E 'NEEDED|RPATH|RUNPATH')
  echo "$needed"
  ! grep -q libpython <<<"$needed"
}
check "the installed binary needs no libpython" no_libpython

step "summary"
echo "dist step took $SECONDS s in all"
for f in "${FAILED[@]}"; do echo "failed: $f"; done
echo "dist: $PASSED passed, ${#FAILED[@]} failed"
[ "${#FAILED[@]}" -eq 0 ]
