"""lsp__references against file_manager__grep on a real project, through `toolbox mcp`, for
each language server given.

    python bench/lsp_vs_grep.py TOOLBOX SERVERS [SOURCE_DIR] [SYMBOLS]

SERVERS is a path to pylsp (as before), or a comma-separated list of NAME=COMMAND (words
split on spaces), e.g.
`pylsp=target/test-venv/bin/pylsp,basedpyright=target/test-venv/bin/basedpyright-langserver --stdio`.
Every figure below is printed per server. A server named `clangd` works on C: the `.c` and
`.h` files, and by default zstd's `lib/` (the C sources the zstd-sys crate ships, in cargo's
registry); the others on `.py` files.

SOURCE_DIR (default: the `requests` package of the Python running this script) is copied
into a fresh workspace. SYMBOLS (default 30) names are taken from the files' outlines
(`lsp__symbols`): functions, classes and methods, distinct names, spread over the files.
For each, `lsp__references` (the server's answer, taken as the truth) and
`file_manager__grep` for the name as a whole word (`\\bNAME\\b`, *.py) are compared line by
line: grep's precision (its lines that are real references) and recall (real references
it finds). Then the warm latency of `lsp__references` (3 more rounds over all symbols) and
the cold start: a fresh `toolbox mcp` until its first `lsp__references` answer, and whether
that cold answer was complete (the same lines as the warm one) or said it may not be.

Prints figures, no verdict. The client is bare JSON-RPC over stdio (no SDK).
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


class Mcp:
    def __init__(self, toolbox, ws, config):
        cfg = os.path.join(ws, ".operator.toml")
        with open(cfg, "w") as f:
            f.write(config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBOX_")}
        env["TOOLBOX_CONFIG"] = cfg
        env["XDG_CONFIG_HOME"] = os.path.join(ws, ".no-user-config")
        self.p = subprocess.Popen(
            [toolbox, "mcp", "--mode", "full", "--workspace", ws],
            cwd=ws, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, bufsize=1,
        )
        self.n = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()

    def request(self, method, params):
        self.n += 1
        self.send({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError("toolbox mcp exited")
            msg = json.loads(line)
            if msg.get("id") == self.n:
                return msg

    def call(self, tool, args):
        r = self.request("tools/call", {"name": tool, "arguments": args})
        res = r["result"]
        return res.get("isError", False), res["content"][0]["text"]

    def close(self):
        self.p.kill()
        self.p.wait()


def lsp_lines(text):
    """(file, line) pairs from an lsp__references result."""
    out, current = set(), None
    for line in text.splitlines()[1:]:
        if line.startswith("note:") or line.startswith("…"):
            continue
        m = re.match(r"  (\d+):\d+: ", line)
        if m and current:
            out.add((current, int(m.group(1))))
        elif not line.startswith(" "):
            current = line.strip()
    return out


def grep_lines(text):
    out = set()
    for line in text.splitlines():
        m = re.match(r"(.+?):(\d+):", line)
        if m:
            out.add((m.group(1), int(m.group(2))))
    return out


def servers(arg):
    """(name, command words) for each server SERVERS names."""
    if "=" not in arg:
        return [("pylsp", [arg])]
    out = []
    for item in arg.split(","):
        name, command = item.split("=", 1)
        out.append((name.strip(), command.split()))
    return out


def default_source(language):
    if language == "c":
        import glob
        found = sorted(glob.glob(os.path.expanduser(
            "~/.cargo/registry/src/*/zstd-sys-*/zstd/lib")))
        if not found:
            sys.exit("no C project found: give SOURCE_DIR (zstd-sys's lib/ is the default)")
        return found[-1]
    import requests
    return os.path.dirname(requests.__file__)


def main():
    toolbox = sys.argv[1]
    count = int(sys.argv[4]) if len(sys.argv) > 4 else 30
    for name, command in servers(sys.argv[2]):
        language = "c" if name == "clangd" else "py"
        source = sys.argv[3] if len(sys.argv) > 3 else default_source(language)
        print(f"=== {name}: {' '.join(command)}")
        run_server(toolbox, name, command, source, count, language)


def run_server(toolbox, server, command, source, count, language):
    exts = ["c", "h"] if language == "c" else ["py"]
    glob_pattern = "*.[ch]" if language == "c" else "*.py"
    config = (f"[lsp]\nbuiltin_servers = false\nrequest_timeout_s = 120\n"
              f"[lsp.servers.{server}]\ncommand = {json.dumps(command)}\n"
              f"extensions = {json.dumps(exts)}\n")
    tmp = tempfile.mkdtemp()
    ws = os.path.join(tmp, "ws")
    shutil.copytree(source, os.path.join(ws, os.path.basename(source)),
                    ignore=shutil.ignore_patterns("__pycache__"))
    files = sorted(
        os.path.relpath(os.path.join(d, f), ws)
        for d, _, fs in os.walk(ws) for f in fs
        if any(f.endswith("." + e) for e in exts)
    )
    print(f"project: {source} ({len(files)} {'/'.join('.' + e for e in exts)} files)")

    # Cold start: a fresh toolbox mcp until its first lsp__references answer.
    mcp = Mcp(toolbox, ws, config)
    started = time.perf_counter()
    err, text = mcp.call("lsp__symbols", {"path": files[0]})
    cold_symbols = time.perf_counter() - started
    assert not err, text

    # Symbols: every outline, then `count` distinct names spread over the files.
    candidates = []
    for f in files:
        err, text = mcp.call("lsp__symbols", {"path": f, "max_results": 5000})
        if err:
            continue
        for line in text.splitlines()[1:]:
            m = re.match(r"( *)(function|class|method|struct) (\w+)  lines (\d+)-", line)
            if m and not m.group(3).startswith("__"):
                candidates.append((f, m.group(3), int(m.group(4))))
    seen, picked = set(), []
    step = max(1, len(candidates) // count)
    for f, name, line in candidates[::step] + candidates:
        if name not in seen and len(picked) < count:
            seen.add(name)
            picked.append((f, name, line))
    print(f"symbols: {len(picked)} of {len(candidates)} in the outlines")

    tp = fp = fn = 0
    per = []
    first_times = []
    warm_truth = {}
    for f, name, line in picked:
        t0 = time.perf_counter()
        err, text = mcp.call("lsp__references",
                             {"path": f, "symbol": name, "line": line, "max_results": 1000})
        first_times.append(time.perf_counter() - t0)
        if err:
            print(f"  {name}: lsp error: {text[:200]}")
            continue
        # Only workspace files: grep searches nothing else (the server also finds uses in
        # the standard library, shown with absolute paths).
        truth = {(f, n) for (f, n) in lsp_lines(text) if not f.startswith("/")}
        warm_truth[name] = truth
        err, gtext = mcp.call("file_manager__grep",
                              {"pattern": rf"\b{name}\b", "glob": glob_pattern, "max_results": 5000})
        found = grep_lines(gtext) if not err else set()
        hit = len(truth & found)
        tp += hit
        fp += len(found - truth)
        fn += len(truth - found)
        per.append((name, len(truth), len(found), hit))
    for name, t, g, h in per:
        print(f"  {name:30} lsp {t:4}  grep {g:4}  both {h:4}")
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    print(f"grep against the server's references (lines): precision {precision:.3f}, "
          f"recall {recall:.3f} ({tp} shared, {fp} grep-only, {fn} lsp-only)")

    warm = []
    for _ in range(3):
        for f, name, line in picked:
            t0 = time.perf_counter()
            mcp.call("lsp__references",
                     {"path": f, "symbol": name, "line": line, "max_results": 1000})
            warm.append((time.perf_counter() - t0) * 1000)
    outline_times = []
    for f, name, line in picked:
        t0 = time.perf_counter()
        mcp.call("lsp__hover", {"path": f, "symbol": name, "line": line})
        outline_times.append((time.perf_counter() - t0) * 1000)
    grep_times = []
    for f, name, line in picked:
        t0 = time.perf_counter()
        mcp.call("file_manager__grep", {"pattern": rf"\b{name}\b", "glob": glob_pattern})
        grep_times.append((time.perf_counter() - t0) * 1000)
    mcp.close()
    q = statistics.quantiles(warm, n=20)
    print(f"lsp__references warm over MCP: median {statistics.median(warm):.1f} ms, "
          f"p95 {q[18]:.1f} ms, max {max(warm):.1f} ms ({len(warm)} calls)")
    print(f"lsp__references first call per symbol: median "
          f"{statistics.median(first_times) * 1000:.1f} ms")
    print(f"file_manager__grep over MCP: median {statistics.median(grep_times):.1f} ms")
    print(f"lsp__hover warm over MCP (same addressing, cheaper request): median "
          f"{statistics.median(outline_times):.1f} ms")

    # Cold start until the first lsp__references answer, fresh toolbox and server, and
    # whether that answer was the warm one (complete) or said it may not be.
    colds, verdicts = [], []
    f, name, line = max(picked, key=lambda p: len(warm_truth.get(p[1], ())))
    for _ in range(3):
        mcp = Mcp(toolbox, ws, config)
        t0 = time.perf_counter()
        err, text = mcp.call("lsp__references",
                             {"path": f, "symbol": name, "line": line, "max_results": 1000})
        colds.append(time.perf_counter() - t0)
        got = {(g, n) for (g, n) in lsp_lines(text) if not g.startswith("/")}
        want = warm_truth.get(name, set())
        if "may be incomplete" in text:
            verdicts.append("said it may be incomplete")
        elif got == want:
            verdicts.append(f"complete ({len(got)} lines)")
        else:
            verdicts.append(f"{len(got & want)} of {len(want)} lines, silently")
        mcp.close()
    print(f"cold start to the first lsp__references answer ({name}): "
          f"{', '.join(f'{c * 1000:.0f} ms' for c in colds)} (first lsp__symbols: "
          f"{cold_symbols * 1000:.0f} ms); the cold answers: {'; '.join(verdicts)}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
