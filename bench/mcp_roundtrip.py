"""MCP round trips on a raw JSON-RPC client: `toolbox mcp` against its peers, interleaved.

Usage: python mcp_roundtrip.py TOOLBOX [ROUNDS]

The client is deliberately bare (one line written, the reply line read, no SDK), so what is
measured is the server's serving path: process, transport, parsing, dispatch, serialisation.
Both sides of a comparison run side by side and are measured in one run, so both see the same
machine. On a small VM the side started second often runs faster, whichever it is, so every
comparison runs twice, in both start orders, with fresh processes (a fresh kernel) each time
(bench/fair.py). In each order, after a warm-up, three schedules:

- alternating: A, B, A, B, ... Each call comes right after a call to the other side, which
  has just filled the caches and CPUs with its own work; this favours the slower side, which
  is measured after only a short break.
- in runs of 50: 50 calls to one side back to back, then 50 to the other, and so on: both
  warm, as in a burst of calls.
- after 2 ms idle: 2 ms of sleep before every call, then alternating: both measured cold, as
  calls from an agent waiting on a model arrive.

Each schedule takes ROUNDS (default 300) calls per side per order, or what fits in LIMIT_S
(60 s) of it per order. With PIN=1 in the environment, the client runs on CPU 0 and every
server and kernel on CPU 1.

Prints figures only:

- session start: spawn to the `initialize` reply, for toolbox mcp and the Python MCP SDK
  server, one process at a time, which one goes first alternating from round to round;
- a trivial Read tool: toolbox's file_manager__read of a 6-byte file against the SDK server's
  echo tool;
- run_python_code `x = 1` through toolbox mcp against the same cell in an ipykernel through
  jupyter_client;
- the floor: the trivial Read tool against a bare line-echo server (a dozen lines of Python
  that answer every request with an empty result), and that server against the same in C:
  what is left of a round trip with no tool layer at all (the client's pipe, the wake-ups,
  the interpreter's loop);
- for reference, the same cell in a bare line server: a dozen lines of Python on one
  thread that compile and run the cell and answer, with none of what a tool layer does
  (no permission gate, no trajectory, no output capture, no timeout, no tracebacks). It
  shows the least that compiling and running a cell costs on this machine in each
  schedule, against the same ipykernel;
- the idle reader: run_python_code `x = 1` through toolbox mcp with the embedded Python
  thread that reads stdin while idle (the default) and without it;
- throughput with 1, 8 and 64 fast calls in flight on one connection;
- peak RSS of toolbox mcp while 64 calls each return 1 MB (spooled as usual).

For each comparison and schedule: per start order, each side's median, p90 and p99 in µs;
then B's median over A's per order, and the geometric mean of the two orders' ratios (above
1: A took less time).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

import fair
from mcp_stdio import Client

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 300
TOOLBOX = sys.argv[1]
LIMIT_S = 60  # per schedule per order

SDK_SERVER = textwrap.dedent(
    """
    from mcp.server.mcpserver import MCPServer
    mcp = MCPServer("peer")
    @mcp.tool()
    def echo(text: str) -> str:
        return text
    mcp.run()
    """
)


class Server(Client):
    """A stdio JSON-RPC server (toolbox or a peer) on the raw line client; on CPU 1 with PIN."""

    def __init__(self, argv, cwd, env=None):
        super().__init__(fair.server_argv(argv), cwd, env)

    def call(self, name, arguments):
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        assert "result" in reply and not reply["result"].get("isError"), reply
        return reply

    def many(self, name, arguments, n):
        """n calls in flight at once; returns when every reply is in."""
        ids = set()
        for _ in range(n):
            rid = self.next_id
            self.next_id += 1
            ids.add(rid)
            self.send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "method": "tools/call",
                    "params": {"name": name, "arguments": arguments},
                }
            )
        while ids:
            reply = self.read()
            ids.discard(reply.get("id"))


def stats(samples):
    s = sorted(samples)
    pick = lambda q: s[min(len(s) - 1, int(len(s) * q))]
    return statistics.median(s) * 1e6, pick(0.90) * 1e6, pick(0.99) * 1e6


def row(name, samples):
    med, p90, p99 = stats(samples)
    print(f"  {name:<44} median {med:9.1f} µs   p90 {p90:9.1f} µs   p99 {p99:9.1f} µs")
    return med


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# The reference: what is left of an in-process Python tool server without a tool layer.
BARE_SERVER = textwrap.dedent(
    """
    import json, sys
    out = sys.stdout.buffer
    ns = {}
    for line in sys.stdin.buffer:
        m = json.loads(line)
        if "id" not in m:
            continue
        if m.get("method") == "tools/call":
            exec(compile(m["params"]["arguments"]["code"], "<cell>", "exec"), ns)
        r = {"jsonrpc": "2.0", "id": m["id"], "result": {"content": [], "isError": False}}
        out.write(json.dumps(r).encode() + b"\\n")
        out.flush()
    """
)


class Kernel:
    """An ipykernel started by jupyter_client's start_new_kernel; on CPU 1 with PIN."""

    def __init__(self):
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3")
        fair.pin_server(self.km.provisioner.pid)

    def run(self, code):
        reply = self.kc.execute_interactive(code, timeout=30, output_hook=lambda m: None)
        assert reply["content"]["status"] == "ok", reply

    def close(self):
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def schedules(a_call, b_call, rounds):
    """The three schedules on two started, warm sides; {schedule: (a times, b times)}."""
    run = 50
    out = {}
    for schedule in ("alternating", "in runs of 50", "after 2 ms idle"):
        a_times, b_times = [], []
        deadline = time.time() + LIMIT_S
        if schedule == "alternating":
            while len(a_times) < rounds and time.time() < deadline:
                a_times.append(timed(a_call))
                b_times.append(timed(b_call))
        elif schedule == "in runs of 50":
            while len(a_times) < rounds and time.time() < deadline:
                a_times += [timed(a_call) for _ in range(min(run, rounds - len(a_times)))]
                b_times += [timed(b_call) for _ in range(min(run, rounds - len(b_times)))]
        else:
            while len(a_times) < rounds and time.time() < deadline:
                time.sleep(0.002)
                a_times.append(timed(a_call))
                time.sleep(0.002)
                b_times.append(timed(b_call))
        out[schedule] = (a_times, b_times)
    return out


# The floor: a line-echo server answering each request with an empty result, nothing
# parsed but the id. What is left is the client's pipe, the two wake-ups of a round trip and
# the interpreter's loop; in C, without the interpreter.
ECHO_PY = textwrap.dedent(
    """
    import re, sys
    out = sys.stdout.buffer
    id_re = re.compile(rb'"id":\\s*(\\d+)')
    for line in sys.stdin.buffer:
        m = id_re.search(line)
        if m:
            out.write(b'{"jsonrpc":"2.0","id":' + m.group(1) + b',"result":{"content":[],"isError":false}}\\n')
            out.flush()
    """
)
ECHO_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    char *line = NULL; size_t cap = 0;
    while (getline(&line, &cap, stdin) > 0) {
        char *id = strstr(line, "\"id\":");
        if (!id) continue;
        printf("{\"jsonrpc\":\"2.0\",\"id\":%ld,\"result\":{\"content\":[],\"isError\":false}}\n",
               strtol(id + 5, NULL, 10));
        fflush(stdout);
    }
    return 0;
}
"""


def compare(title, a, b, warm_up):
    """a and b: (short name, long name, start, call); start() returns a side with close(),
    call(side) makes one round trip. Runs the three schedules in both start orders, fresh
    sides each order, and prints each order's figures and the geometric mean of the ratios."""
    (a_short, a_name, a_start, a_call), (b_short, b_name, b_start, b_call) = a, b

    def measure(sa, sb):
        for _ in range(warm_up):
            a_call(sa)
            b_call(sb)
        return schedules(lambda: a_call(sa), lambda: b_call(sb), ROUNDS)

    orders = fair.both_orders((a_short, a_start), (b_short, b_start), measure)
    print(f"\n== {title}; up to {ROUNDS} round trips per side per schedule per order "
          f"([X first]: X started first)")
    for schedule in orders[0][1]:
        print(f"  {schedule}:")
        fair.report(
            [(a_short, a_name), (b_short, b_name)],
            [(label, list(result[schedule])) for label, result in orders],
            indent="    ",
        )


def toolbox_server(ws, **extra_env):
    env = dict(os.environ, TOOLBOX_MODE="full", **extra_env)
    return Server([TOOLBOX, "mcp", "--workspace", ws], ws, env)


def main():
    fair.pin_client()
    ws = tempfile.mkdtemp(prefix="mcp-bench-")
    with open(os.path.join(ws, "six.txt"), "w") as f:
        f.write("hello\n")
    with open(os.path.join(ws, "peer.py"), "w") as f:
        f.write(SDK_SERVER)
    with open(os.path.join(ws, "bare.py"), "w") as f:
        f.write(BARE_SERVER)
    peer_argv = [sys.executable, os.path.join(ws, "peer.py")]
    bare_argv = [sys.executable, "-S", os.path.join(ws, "bare.py")]
    print(f"toolbox: {TOOLBOX}; PIN: {'on' if fair.PIN else 'off'}; load: {os.getloadavg()}")

    print("\n== session start (spawn to the initialize reply), interleaved, first one alternating")
    tb_start, peer_start = [], []
    for i in range(10):
        starts = [(tb_start, lambda: toolbox_server(ws)), (peer_start, lambda: Server(peer_argv, ws))]
        for times, start in starts if i % 2 == 0 else starts[::-1]:
            s = start()
            times.append(s.start_s)
            s.close()
    a = row("toolbox mcp", tb_start)
    b = row("Python MCP SDK server (MCPServer, stdio)", peer_start)
    print(f"  SDK/toolbox median: {b / a:.2f}")

    read_args = {"path": "six.txt"}
    code = {"code": "x = 1"}
    toolbox_read = lambda s: s.call("file_manager__read", read_args)
    toolbox_python = lambda s: s.call("run_python_code", code)
    compare(
        "trivial Read tool",
        ("toolbox", "toolbox mcp, file_manager__read (6 bytes)", lambda: toolbox_server(ws), toolbox_read),
        ("sdk", "Python MCP SDK server, echo", lambda: Server(peer_argv, ws),
         lambda s: s.call("echo", {"text": "hello"})),
        50,
    )

    with open(os.path.join(ws, "echo.py"), "w") as f:
        f.write(ECHO_PY)
    echo_py = ("echo", "bare line-echo server (Python -S)",
               lambda: Server([sys.executable, "-S", os.path.join(ws, "echo.py")], ws),
               lambda s: s.call("echo", {}))
    compare("the floor: the trivial Read tool against a bare line-echo server", 
            ("toolbox", "toolbox mcp, file_manager__read (6 bytes)", lambda: toolbox_server(ws), toolbox_read),
            echo_py, 50)
    with open(os.path.join(ws, "echo.c"), "w") as f:
        f.write(ECHO_C)
    cc = subprocess.run(["cc", "-O2", "-o", os.path.join(ws, "echo"), os.path.join(ws, "echo.c")],
                        capture_output=True, text=True)
    if cc.returncode == 0:
        compare("the floor without an interpreter: a line-echo server in C and in Python",
                ("c", "bare line-echo server (C)", lambda: Server([os.path.join(ws, "echo")], ws),
                 lambda s: s.call("echo", {})),
                echo_py, 50)
    else:
        print(f"\n  (no C compiler for the C echo server: {cc.stderr.strip()[:200]})")

    try:
        import jupyter_client.manager  # noqa: F401

        have_kernel = True
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"\n  (no jupyter_client: {e})")
        have_kernel = False
    if have_kernel:
        ipykernel = ("ipykernel", "ipykernel via jupyter_client", Kernel, lambda k: k.run("x = 1"))
        compare(
            "run_python_code x = 1",
            ("toolbox", "toolbox mcp, run_python_code (embedded)", lambda: toolbox_server(ws), toolbox_python),
            ipykernel,
            30,
        )
        compare(
            "reference: x = 1 in a bare line server (no tool layer)",
            ("bare", "bare Python line server", lambda: Server(bare_argv, ws),
             lambda s: s.call("run_python_code", code)),
            ipykernel,
            30,
        )
    else:
        print(f"\n== run_python_code x = 1, {ROUNDS} round trips")
        tb = toolbox_server(ws)
        for _ in range(30):
            toolbox_python(tb)
        row("toolbox mcp, run_python_code (embedded)", [timed(lambda: toolbox_python(tb)) for _ in range(ROUNDS)])
        tb.close()

    # What the embedded Python thread reading stdin while idle is worth: the same binary with
    # it (the default) and without it (TOOLBOX_MCP_IDLE_READER=0), interleaved.
    compare(
        "the idle reader: run_python_code x = 1 with it and without it",
        ("on", "toolbox mcp, idle reader on (default)", lambda: toolbox_server(ws), toolbox_python),
        ("off", "toolbox mcp, TOOLBOX_MCP_IDLE_READER=0",
         lambda: toolbox_server(ws, TOOLBOX_MCP_IDLE_READER="0"), toolbox_python),
        30,
    )

    print("\n== throughput, file_manager__read, calls in flight on one connection")
    tb = toolbox_server(ws)
    for _ in range(200):
        toolbox_read(tb)
    for n in (1, 8, 64):
        total = max(n * 20, 200)
        batches = total // n
        t = time.perf_counter()
        for _ in range(batches):
            tb.many("file_manager__read", read_args, n)
        elapsed = time.perf_counter() - t
        print(f"  {n:>3} in flight: {batches * n / elapsed:10.0f} calls/s")
    tb.close()

    print("\n== memory: 64 calls in flight, each returning 1 MB")
    tb = toolbox_server(ws)
    big = {"command": "head -c 1000000 /dev/zero | tr '\\0' 'x'"}
    tb.many("shell", big, 64)
    with open(f"/proc/{tb.proc.pid}/status") as f:
        peak = next(l for l in f if l.startswith("VmHWM"))
    spooled = len(os.listdir(os.path.join(ws, ".toolbox", "tool_outputs")))
    print(f"  toolbox mcp peak RSS: {peak.split()[1]} kB ({spooled} results spooled)")
    tb.close()


if __name__ == "__main__":
    main()
