"""The router's figures (docs/scale-out.md, "Router and placement"): run by bench/router_overhead.sh.

Usage: python3 router_overhead.py TOOLBOX_BINARY [CALLS]

Starts a small placement adapter (this file: it starts `toolbox serve --session` session
servers as local processes, as the test's fake adapter does), `toolbox router` in front of
it, then:

- overhead: CALLS trivial tool calls (`file_manager__read` of a 6-byte file), direct to the
  session's server and through the router, interleaved one for one, each side on its own
  keep-alive connection; the pair's order alternates (direct first in pairs 1, 3, ..., router
  first in pairs 2, 4, ...), since on a small VM the one called second can come out faster.
  p50 and p99 of each, and of the difference, over all pairs; then per order the medians
  (p90, p99), the router/direct ratio of medians and the geometric mean of the two orders'
  ratios;
- placing: the first call through the router for each of several new sessions (the adapter
  starts a session server and waits for its listening line; the router then sends the call);
- memory: the RSS of one idle session server (and of the router).

Prints figures, not verdicts.
"""

import http.client
import http.server
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import fair

BIN = sys.argv[1]
CALLS = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
TOP = tempfile.mkdtemp(prefix="router-bench-")
STORE = os.path.join(TOP, "store")
START_LIMIT = 60


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBOX_") and k != "RUST_LOG"}
    env["XDG_CONFIG_HOME"] = os.path.join(TOP, "no-config")
    return env


def spawn(args, cwd, env):
    """Starts the binary and waits (bounded) for its `listening on http://ADDR` line."""
    proc = subprocess.Popen([BIN, *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found = {}

    def read():
        for line in proc.stderr:
            if "listening on http://" in line and "addr" not in found:
                found["addr"] = line.split("listening on http://")[1].split()[0]
                ready.set()
        ready.set()

    ready = threading.Event()
    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(START_LIMIT) or "addr" not in found:
        proc.kill()
        raise SystemExit(f"{args[0]} did not start")
    return proc, found["addr"]


class Adapter:
    def __init__(self):
        self.lock = threading.Lock()
        self.servers = {}  # sid -> dict(proc, url, token, epoch, node)
        self.nodes = 0

    def ensure(self, sid, stale):
        with self.lock:
            h = self.servers.get(sid)
            if h and h["proc"].poll() is None and stale != h["epoch"]:
                return h
            epoch = (h["epoch"] if h else 0) + 1
            self.nodes += 1
            node = f"node-{self.nodes}"
        ws = os.path.join(TOP, node)
        os.makedirs(ws, exist_ok=True)
        token = "server-" + secrets.token_hex(16)
        env = clean_env()
        env["TOOLBOX_SERVE_TOKEN"] = token
        proc, addr = spawn(["serve", "--listen", "127.0.0.1:0", "--mode", "full", "--session", sid,
                            "--epoch", str(epoch), "--state-store", f"file://{STORE}"], ws, env)
        h = {"proc": proc, "url": f"http://{addr}", "token": token, "epoch": epoch, "node": node,
             "ws": ws, "addr": addr}
        with self.lock:
            self.servers[sid] = h
        return h

    def stop(self):
        for h in self.servers.values():
            h["proc"].kill()
            h["proc"].wait()


ADAPTER = Adapter()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path = self.path
        if path.startswith("/v1/sessions/") and path.endswith(":ensure"):
            sid = path[len("/v1/sessions/"):-len(":ensure")]
            h = ADAPTER.ensure(sid, body.get("stale_epoch"))
            return self.answer(200, {"sid": sid, "url": h["url"], "token": h["token"],
                                     "epoch": h["epoch"], "node": h["node"]})
        self.answer(404, {"error": "not in this bench"})

    def do_GET(self):
        if self.path == "/v1/sessions":
            rows = [{"sid": s, "state": "running", "epoch": h["epoch"], "node": h["node"]}
                    for s, h in ADAPTER.servers.items()]
            return self.answer(200, {"sessions": rows})
        self.answer(404, {"error": "not in this bench"})


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    adapter_url = f"http://127.0.0.1:{server.server_address[1]}"
    router_token = "router-" + secrets.token_hex(16)
    env = clean_env()
    env["TOOLBOX_ROUTER_TOKEN"] = router_token
    rws = os.path.join(TOP, "router")
    os.makedirs(rws)
    router, raddr = spawn(["router", "--listen", "127.0.0.1:0", "--placement", adapter_url], rws, env)
    try:
        run(raddr, router_token, router)
    finally:
        router.kill()
        router.wait()
        ADAPTER.stop()
        server.shutdown()
        shutil.rmtree(TOP, ignore_errors=True)


def run(raddr, router_token, router):
    # Placing: the first call through the router for new sessions.
    place_ms = []
    for i in range(5):
        conn = http.client.HTTPConnection(raddr, timeout=120)
        t = time.perf_counter()
        conn.request("POST", f"/api/sessions/place{i}/tools/file_manager__list", body=b"{}",
                     headers={"Authorization": f"Bearer {router_token}",
                              "Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        place_ms.append((time.perf_counter() - t) * 1000)
        assert r.status == 200, r.status
        conn.close()

    sid = "bench"
    h = ADAPTER.ensure(sid, None)
    with open(os.path.join(h["ws"], "tiny.txt"), "w") as f:
        f.write("tiny!\n")
    body = json.dumps({"path": "tiny.txt"}).encode()
    path = f"/api/sessions/{sid}/tools/file_manager__read"
    direct = http.client.HTTPConnection(h["addr"], timeout=60)
    routed = http.client.HTTPConnection(raddr, timeout=60)
    dh = {"Authorization": f"Bearer {h['token']}", "Content-Type": "application/json"}
    rh = {"Authorization": f"Bearer {router_token}", "Content-Type": "application/json"}

    def once(conn, headers):
        t = time.perf_counter_ns()
        conn.request("POST", path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        took = time.perf_counter_ns() - t
        assert r.status == 200 and b"tiny!" in data, (r.status, data[:200])
        return took / 1000

    for _ in range(200):  # warm-up: connections, caches, the router's placement
        once(direct, dh)
        once(routed, rh)
    d, rt, diff = [], [], []
    by_order = [([], [], []), ([], [], [])]  # direct first, router first: (direct, router, diff)
    for i in range(CALLS):
        if i % 2 == 0:
            a = once(direct, dh)
            b = once(routed, rh)
        else:
            b = once(routed, rh)
            a = once(direct, dh)
        d.append(a)
        rt.append(b)
        diff.append(b - a)
        for xs, x in zip(by_order[i % 2], (a, b, b - a)):
            xs.append(x)

    time.sleep(2)
    server_rss = rss_kib(h["proc"].pid)
    idle_servers = [rss_kib(x["proc"].pid) for s, x in ADAPTER.servers.items() if s.startswith("place")]
    router_rss = rss_kib(router.pid)

    print(f"router overhead, {CALLS} interleaved file_manager__read calls of a 6-byte file, keep-alive:")
    print(f"  direct to the session server   p50 {pct(d, 50):7.0f} us   p99 {pct(d, 99):7.0f} us   mean {statistics.mean(d):7.0f} us")
    print(f"  through the router             p50 {pct(rt, 50):7.0f} us   p99 {pct(rt, 99):7.0f} us   mean {statistics.mean(rt):7.0f} us")
    print(f"  overhead                       p50 {pct(rt, 50) - pct(d, 50):7.0f} us   p99 {pct(rt, 99) - pct(d, 99):7.0f} us"
          f"   (per-pair difference: median {statistics.median(diff):.0f} us)")
    print("  per order of the pair (which connection is called first):")
    orders = [("direct first", list(by_order[0][:2])), ("router first", list(by_order[1][:2]))]
    fair.report([("direct", "direct to the session server"), ("router", "through the router")], orders,
                scale=1, unit="us", indent="    ")
    if by_order[1][2]:
        print(f"    router - direct per pair, median: {statistics.median(by_order[0][2]):.0f} us direct first, "
              f"{statistics.median(by_order[1][2]):.0f} us router first")
    print(f"placing a new session (first call through the router, the adapter starts a session server): "
          f"{', '.join(f'{x:.0f}' for x in place_ms)} ms (median {statistics.median(place_ms):.0f} ms)")
    print(f"RSS: one idle session server (placed, one call served) {statistics.median(idle_servers) / 1024:.1f} MiB "
          f"(of {len(idle_servers)}: {', '.join(f'{x / 1024:.1f}' for x in idle_servers)}); "
          f"the bench's session server after {2 * CALLS + 400} calls {server_rss / 1024:.1f} MiB; "
          f"the router {router_rss / 1024:.1f} MiB")


main()
