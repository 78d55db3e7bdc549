"""What OpenTelemetry export costs a call, and what a slow or dead collector costs it: one
`toolbox` binary over MCP stdio, with export off and with export on to each collector below,
the same calls alternating between the two servers on one raw line client, in both start
orders (the server started second often runs faster on a small VM), and the geometric mean
of the two orders' ratios.

    python3 bench/otel_overhead.py TOOLBOX [ROUNDS]

Collectors, all on 127.0.0.1:
- live: a stub that reads each export and answers 200 (the export's own cost);
- gone: nothing listens on the port (connection refused);
- hole: accepts connections and never answers (a hung collector; exports time out).

With PIN=1, the client runs on CPU 0 and both servers on CPU 1 (`taskset`). Calls:
`file_manager__read` of a small file and `run_python_code` `x = 1`. Prints medians in
microseconds, the on/off ratio per order and their geometric mean, and the drop count each
exporting server printed at exit. Figures only, no verdict. Bounded: ROUNDS (default 1000)
calls per tool per order, 120 s per order at most.
"""

import http.server
import math
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

from mcp_stdio import Server

BINARY = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
LIMIT_S = 120
CALLS = [
    ("file_manager__read", {"path": "small.txt"}),
    ("run_python_code", {"code": "x = 1"}),
]


def start(ws, env):
    return Server(BINARY, ws, env)


class Stub(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def live_collector():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def gone_collector():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def hole_collector():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1024)
    held = []

    def accept():
        while True:
            conn, _ = s.accept()
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{s.getsockname()[1]}"


def one_order(first, second, ws):
    """Starts `first` then `second` ((label, env) each) and alternates the same calls."""
    servers = {label: start(ws, env) for label, env in (first, second)}
    labels = [first[0], second[0]]
    times = {(label, name): [] for label in labels for name, _ in CALLS}
    for server in servers.values():  # warm up: the interpreter, the caches
        for name, args in CALLS:
            for _ in range(50):
                server.call(name, args)
    deadline = time.time() + LIMIT_S
    for i in range(ROUNDS):
        if time.time() > deadline:
            break
        order = labels if i % 2 == 0 else labels[::-1]
        for name, args in CALLS:
            for label in order:
                times[(label, name)].append(servers[label].call(name, args))
    exits = {}
    for label, server in servers.items():
        stderr, took = server.close()
        exits[label] = ([l for l in stderr.splitlines() if "OpenTelemetry" in l], took)
    return {key: statistics.median(v) * 1e6 for key, v in times.items()}, exits


def main():
    if os.environ.get("PIN"):
        os.sched_setaffinity(0, {0})
    ws = tempfile.mkdtemp(prefix="otel-bench-")
    with open(os.path.join(ws, "small.txt"), "w") as f:
        f.write("hello\n" * 20)
    print(f"binary: {BINARY}\nrounds: {ROUNDS} per tool per order; load: {os.getloadavg()}")
    off = ("off", {})
    for kind, url in (("live", live_collector()), ("gone", gone_collector()), ("hole", hole_collector())):
        on = (
            kind,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": url,
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_EXPORTER_OTLP_TIMEOUT": "2000",
            },
        )
        ratios = {name: [] for name, _ in CALLS}
        print(f"== export on, collector {kind} ({url}) against export off")
        for label, (first, second) in (("off started first", (off, on)), (f"{kind} started first", (on, off))):
            medians, exits = one_order(first, second, ws)
            for name, _ in CALLS:
                a, b = medians[("off", name)], medians[(kind, name)]
                ratios[name].append(b / a)
                print(f"  {label:20} {name:20} off {a:7.1f} us   {kind} {b:7.1f} us   {kind}/off {b / a:.3f}")
            said, took = exits[kind]
            print(f"  {label:20} exit of the exporting server: {took * 1000:.0f} ms; {said or 'nothing lost'}")
        for name, r in ratios.items():
            print(f"  geometric mean {kind}/off  {name:20} {math.sqrt(r[0] * r[1]):.3f}")


if __name__ == "__main__":
    main()
