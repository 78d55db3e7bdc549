"""MCP round trips on a raw JSON-RPC client: `toolbox mcp` against its peers, interleaved.

Usage: python mcp_roundtrip.py TOOLBOX [ROUNDS]

The client is deliberately bare (one line written, the reply line read, no SDK), so what is
measured is the server's serving path: process, transport, parsing, dispatch, serialisation.
Both servers run side by side and are measured in one run, so both see the same machine, in
three schedules:

- alternating: toolbox, peer, toolbox, peer, ... Each call comes right after a call to the
  other server, which has just filled the caches and CPUs with its own work; this favours
  the slower server, which is measured after only a short break.
- in runs: 50 calls to one server back to back, then 50 to the other, and so on: both warm,
  as in a burst of calls.
- after idle: 2 ms of sleep before every call, then alternating: both measured cold, as
  calls from an agent waiting on a model arrive.

Prints figures only:

- session start: spawn to the `initialize` reply, for toolbox mcp and the Python MCP SDK
  server;
- a trivial Read tool: toolbox's file_manager__read of a 6-byte file against the SDK server's
  echo tool;
- run_python_code `x = 1` through toolbox mcp against the same cell in an ipykernel through
  jupyter_client;
- for reference, the same cell in a bare line server: a dozen lines of Python on one
  thread that compile and run the cell and answer, with none of what a tool layer does
  (no permission gate, no trajectory, no output capture, no timeout, no tracebacks). It
  shows the least that compiling and running a cell costs on this machine in each
  schedule, against the same ipykernel;
- throughput with 1, 8 and 64 fast calls in flight on one connection;
- peak RSS of toolbox mcp while 64 calls each return 1 MB (spooled as usual).
"""

import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 300
TOOLBOX = sys.argv[1]

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


class Server:
    """A stdio JSON-RPC server with a raw line client."""

    def __init__(self, argv, cwd, env=None):
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
        )
        # Buffered: readline() on the raw pipe would read one byte per system call and
        # measure the client rather than the server.
        self.out = io.BufferedReader(self.proc.stdout, 1 << 16)
        self.next_id = 1
        reply = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        self.start_s = time.perf_counter() - self.started
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    def read(self):
        line = self.out.readline()
        if not line:
            raise RuntimeError("server closed stdout")
        return json.loads(line)

    def request(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            reply = self.read()
            if reply.get("id") == rid:
                return reply

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

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


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


def compare(title, first, second, rounds, who="toolbox"):
    """Runs the three schedules for two (name, call) pairs and prints medians and ratios."""
    (a_name, a_call), (b_name, b_call) = first, second
    run = 50
    print(f"\n== {title}, {rounds} round trips each")
    for schedule in ("alternating", "in runs of 50", "after 2 ms idle"):
        a_times, b_times = [], []
        if schedule == "alternating":
            for _ in range(rounds):
                a_times.append(timed(a_call))
                b_times.append(timed(b_call))
        elif schedule == "in runs of 50":
            while len(a_times) < rounds:
                a_times += [timed(a_call) for _ in range(min(run, rounds - len(a_times)))]
                b_times += [timed(b_call) for _ in range(min(run, rounds - len(b_times)))]
        else:
            for _ in range(rounds):
                time.sleep(0.002)
                a_times.append(timed(a_call))
                time.sleep(0.002)
                b_times.append(timed(b_call))
        print(f"  {schedule}:")
        a = row(a_name, a_times)
        b = row(b_name, b_times)
        print(f"  ratio: {who} is {b / a:.1f}x faster")


def toolbox_server(ws, **extra_env):
    env = dict(os.environ, TOOLBOX_MODE="full", **extra_env)
    return Server([TOOLBOX, "mcp", "--workspace", ws], ws, env)


def main():
    ws = tempfile.mkdtemp(prefix="mcp-bench-")
    with open(os.path.join(ws, "six.txt"), "w") as f:
        f.write("hello\n")
    with open(os.path.join(ws, "peer.py"), "w") as f:
        f.write(SDK_SERVER)
    peer_argv = [sys.executable, os.path.join(ws, "peer.py")]

    print("== session start (spawn to the initialize reply), interleaved")
    tb_start, peer_start = [], []
    for _ in range(10):
        s = toolbox_server(ws)
        tb_start.append(s.start_s)
        s.close()
        s = Server(peer_argv, ws)
        peer_start.append(s.start_s)
        s.close()
    a = row("toolbox mcp", tb_start)
    b = row("Python MCP SDK server (MCPServer, stdio)", peer_start)
    print(f"  ratio: toolbox is {b / a:.1f}x faster")

    tb = toolbox_server(ws)
    peer = Server(peer_argv, ws)
    read_args = {"path": "six.txt"}
    for _ in range(50):
        tb.call("file_manager__read", read_args)
        peer.call("echo", {"text": "hello"})
    compare(
        "trivial Read tool",
        ("toolbox mcp, file_manager__read (6 bytes)", lambda: tb.call("file_manager__read", read_args)),
        ("Python MCP SDK server, echo", lambda: peer.call("echo", {"text": "hello"})),
        ROUNDS,
    )
    peer.close()

    kernel = None
    try:
        from jupyter_client.manager import start_new_kernel

        km, kc = start_new_kernel(kernel_name="python3")
        kernel = (km, kc)
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"  (no ipykernel: {e})")
    code = {"code": "x = 1"}
    for _ in range(30):
        tb.call("run_python_code", code)
        if kernel:
            kernel[1].execute_interactive("x = 1", timeout=30, output_hook=lambda m: None)
    if kernel:
        ipykernel = (
            "ipykernel via jupyter_client",
            lambda: kernel[1].execute_interactive("x = 1", timeout=30, output_hook=lambda m: None),
        )
        compare(
            "run_python_code x = 1",
            ("toolbox mcp, run_python_code (embedded)", lambda: tb.call("run_python_code", code)),
            ipykernel,
            ROUNDS,
        )
        with open(os.path.join(ws, "bare.py"), "w") as f:
            f.write(BARE_SERVER)
        bare = Server([sys.executable, "-S", os.path.join(ws, "bare.py")], ws)
        for _ in range(30):
            bare.call("run_python_code", code)
        compare(
            "reference: x = 1 in a bare line server (no tool layer)",
            ("bare Python line server", lambda: bare.call("run_python_code", code)),
            ipykernel,
            ROUNDS,
            who="the bare server",
        )
        bare.close()
        kernel[1].stop_channels()
        kernel[0].shutdown_kernel(now=True)
    else:
        print(f"\n== run_python_code x = 1, {ROUNDS} round trips")
        row(
            "toolbox mcp, run_python_code (embedded)",
            [timed(lambda: tb.call("run_python_code", code)) for _ in range(ROUNDS)],
        )

    # What the embedded Python thread reading stdin while idle is worth: the same binary with
    # it (the default) and without it (TOOLBOX_MCP_IDLE_READER=0), interleaved.
    plain = toolbox_server(ws, TOOLBOX_MCP_IDLE_READER="0")
    for _ in range(30):
        tb.call("run_python_code", code)
        plain.call("run_python_code", code)
    compare(
        "the idle reader: run_python_code x = 1 with it and without it",
        ("toolbox mcp, idle reader on (default)", lambda: tb.call("run_python_code", code)),
        ("toolbox mcp, TOOLBOX_MCP_IDLE_READER=0", lambda: plain.call("run_python_code", code)),
        ROUNDS,
        who="the idle reader",
    )
    plain.close()

    print("\n== throughput, file_manager__read, calls in flight on one connection")
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
