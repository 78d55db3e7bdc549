"""Instruction counts on the hot paths, under callgrind: a figure that load and noise cannot
move, and a guard against a path growing unnoticed (issue 45). bench/BASELINE.md explains
the method, the threshold and every change of the baseline.

    python3 bench/callgrind.py [--profile debug|release] [--check] [--update]
                               [--toolbox PATH] [--calls PATH] [--keep DIR]

Paths, each counted per call:
- mcp_sleep0:   `toolbox mcp`, one `tools/call` of `sleep {"seconds": 0}`, the most
                trivial tool there is (transport, parsing, dispatch, the executor, the reply);
- mcp_python:   `toolbox mcp`, `run_python_code` `x = 1` on the embedded backend;
- mcp_shell:    `toolbox mcp`, `shell` `true` (toolbox's side: the child itself runs outside
                valgrind);
- executor:     the executor alone: `executor/examples/calls.rs`, a trivial tool through the
                whole pipeline with no transport.

Method: each path runs twice under valgrind, with LOW and HIGH calls in one process, and the
difference of the two totals divided by HIGH - LOW is the cost of one call. Start-up, the
interpreter's first import and exit cancel out. The counts are of the whole process (every
thread), so work moved to another thread still counts.

Without a path given, it builds what it counts (debug: `cargo build --workspace --bins
--examples`, what `cargo test --workspace` builds; release: the two targets), so that the
binaries are built as the baseline's were. It prints a
table of counts. With --check it compares them with bench/callgrind-baseline.json and exits
1 if any path grew by more than the threshold there. With --update it writes the counts as
the new baseline for the profile (then add a line to bench/BASELINE.md saying why).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from mcp_stdio import Server  # noqa: E402

BASELINE = os.path.join(HERE, "callgrind-baseline.json")
MCP_PATHS = {
    "mcp_sleep0": ("sleep", {"seconds": 0}),
    "mcp_python": ("run_python_code", {"code": "x = 1"}),
    "mcp_shell": ("shell", {"command": "true"}),
}
MCP_CALLS = (20, 120)
PAUSE_S = 0.005
# A child process (shell) or the interpreter's hash seed (python) still moves a single
# estimate by up to 10%: the median of three is what is compared.
MCP_REPEATS = 3
EXECUTOR_CALLS = (100, 1100)
ORDER = ["mcp_sleep0", "mcp_python", "mcp_shell", "executor"]


def clean_environ(home):
    """This process's environment without what would change what toolbox does: its own
    settings, tracing and log filters, an active venv, and the user's config files."""
    drop_prefixes = ("TOOLBOX_", "OTEL_", "PYTHON")
    drop = {"TRACEPARENT", "TRACESTATE", "RUST_LOG", "VIRTUAL_ENV"}
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(drop_prefixes) and k not in drop
    }
    env["XDG_CONFIG_HOME"] = home
    return env


def total(path):
    """The instruction total callgrind wrote to `path`."""
    with open(path) as f:
        for line in f:
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError(f"{path}: no totals line")


def valgrind(out_file):
    return ["valgrind", "--tool=callgrind", "--quiet", f"--callgrind-out-file={out_file}"]


def count_mcp(toolbox, name, calls, keep, environ):
    tool, args = MCP_PATHS[name]
    out_file = os.path.join(keep, f"{name}.{calls}.out")
    with tempfile.TemporaryDirectory(prefix="callgrind-ws-") as ws:
        server = Server(toolbox, ws, wrap=valgrind(out_file), environ=environ)
        for _ in range(calls):
            server.call(tool, args)
            # Each call meets an idle server, as an agent's calls do: one that came while the
            # server still finished the last (its trajectory line, re-arming its input) would
            # take another path, and how often that happens depends on the machine's load.
            time.sleep(PAUSE_S)
        stderr, _ = server.close()
    if server.proc.returncode != 0:
        raise RuntimeError(f"{name}: toolbox mcp exited with {server.proc.returncode}:\n{stderr}")
    return total(out_file)


def count_executor(calls_bin, calls, keep, environ):
    out_file = os.path.join(keep, f"executor.{calls}.out")
    done = subprocess.run(
        valgrind(out_file) + [calls_bin, str(calls)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"executor: {calls_bin} exited with {done.returncode}:\n{done.stderr}")
    return total(out_file)


def per_call(count, low, high, repeats=1):
    """The median, over `repeats` pairs of runs, of (count(high) - count(low)) / (high - low),
    and the spread of the estimates (max - min, relative to the median)."""
    estimates = sorted((count(high) - count(low)) / (high - low) for _ in range(repeats))
    median = estimates[len(estimates) // 2]
    return round(median), (estimates[-1] - estimates[0]) / median


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="debug", choices=["debug", "release"])
    parser.add_argument("--check", action="store_true", help="fail past the baseline's threshold")
    parser.add_argument("--update", action="store_true", help="write these counts as the baseline")
    parser.add_argument("--toolbox", help="the toolbox binary (default: built, in target/PROFILE)")
    parser.add_argument("--calls", help="the executor's `calls` example (default: built)")
    parser.add_argument("--keep", help="folder for callgrind's files (default: target/callgrind)")
    opts = parser.parse_args()

    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    target = os.path.join(ROOT, target) if not os.path.isabs(target) else target
    if not (opts.toolbox and opts.calls):
        if opts.profile == "release":
            # The binary as `cargo build --release -p toolbox` builds it for users, and the
            # example on its own (built together, their features would be unified).
            builds = [["-p", "toolbox", "--bin", "toolbox"],
                      ["-p", "toolbox-executor", "--example", "calls"]]
            builds = [["--release"] + b for b in builds]
        else:
            # What `cargo test --workspace` built (the same features): a no-op after it.
            builds = [["--workspace", "--bins", "--examples"]]
        for build in builds:
            subprocess.run(["cargo", "build", "--quiet"] + build, cwd=ROOT, check=True)
    toolbox = opts.toolbox or os.path.join(target, opts.profile, "toolbox")
    calls_bin = opts.calls or os.path.join(target, opts.profile, "examples", "calls")
    keep = opts.keep or os.path.join(target, "callgrind", opts.profile)
    os.makedirs(keep, exist_ok=True)

    with open(BASELINE) as f:
        baseline = json.load(f)
    threshold = baseline["threshold"]
    base = baseline["counts"].get(opts.profile, {})

    with tempfile.TemporaryDirectory(prefix="callgrind-home-") as home:
        environ = clean_environ(home)
        counts, spreads = {}, {}
        for name in ORDER:
            if name == "executor":
                low, high = EXECUTOR_CALLS
                counts[name], spreads[name] = per_call(
                    lambda n: count_executor(calls_bin, n, keep, environ), low, high
                )
            else:
                low, high = MCP_CALLS
                counts[name], spreads[name] = per_call(
                    lambda n: count_mcp(toolbox, name, n, keep, environ), low, high, MCP_REPEATS
                )

    print(f"instructions per call ({opts.profile} build; callgrind's files in {keep})")
    print(f"  {'path':<12} {'now':>12} {'baseline':>12} {'change':>8} {'spread':>8}")
    grown = []
    for name in ORDER:
        now, then = counts[name], base.get(name)
        if then:
            change = now / then - 1
            mark = "  GREW past the threshold" if change > threshold else ""
            print(f"  {name:<12} {now:>12,} {then:>12,} {change:>+7.1%} {spreads[name]:>8.1%}{mark}")
            if change > threshold:
                grown.append(name)
            elif change < -threshold:
                print(f"  {'':<12} fell by more than {threshold:.0%}: update the baseline")
        else:
            print(f"  {name:<12} {now:>12,} {'(none)':>12} {'':>8} {spreads[name]:>8.1%}")

    if opts.update:
        baseline["counts"][opts.profile] = counts
        with open(BASELINE, "w") as f:
            json.dump(baseline, f, indent=2)
            f.write("\n")
        print(f"wrote the {opts.profile} baseline to {BASELINE}; say why in bench/BASELINE.md")
    if opts.check:
        missing = [n for n in ORDER if n not in base]
        if missing:
            print(f"no {opts.profile} baseline for {', '.join(missing)} in {BASELINE}")
            sys.exit(1)
        if grown:
            print(
                f"{', '.join(grown)} grew by more than {threshold:.0%}. If the cost is meant, "
                f"run `python3 bench/callgrind.py --profile {opts.profile} --update` and add "
                "a line to bench/BASELINE.md saying why; if not, `callgrind_annotate` on the "
                f"files in {keep} shows where the instructions went."
            )
            sys.exit(1)


if __name__ == "__main__":
    main()
