"""toolbox-k8s-gate, the warm pod's second container: the only holder of the pool token. It
checks an assignment's bearer token and hands the assignment to the boot program over the
socket the two containers share."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

from conftest import GATE, call, drain, free_ports, handoff_name, stop, wait_for_line


STORE_ENV = {"AWS_REGION": "eu-west-1", "AWS_SECRET_ACCESS_KEY": "store-secret-for-the-gate"}


def _start_gate(port: int, pool_file: str, handoff: str, host_port: int) -> subprocess.Popen:
    # The gate's environment: the test's, without any AWS_* of its own, and the store's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | STORE_ENV
    proc = subprocess.Popen(
        [sys.executable, GATE, "--listen", f"127.0.0.1:{port}", "--pool-token-file", pool_file,
         "--handoff-socket", handoff, "--host-port", str(host_port)],
        stderr=subprocess.PIPE, text=True, env=env)
    wait_for_line(proc, "listening on")
    drain(proc)
    return proc


def unix_post(name: str, body: bytes) -> tuple[int, dict]:
    """POST /assign straight to an abstract hand-off socket (as the gate would)."""
    import http.client
    import json

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(10)
            self.sock.connect("\0" + name[1:])

    conn = Conn("localhost", timeout=10)
    try:
        conn.request("POST", "/assign", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


class Waiting:
    """What answers on the session server's port: a waiting boot program (503 {"status":
    "waiting"}) or, with `serving`, a session server (401 without its token)."""

    def __init__(self, port: int, serving: bool = False):
        import json
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class H(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                status, body = (401, {"error": "token"}) if serving else \
                    (503, {"status": "waiting"})
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", port), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class FakeBoot:
    """A boot program's hand-off socket that records what reaches it and answers 202."""

    def __init__(self, name: str):
        self.received: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind("\0" + name[1:])
        self.sock.listen(4)
        self.sock.settimeout(10)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        for _ in range(20):  # bounded: the tests send a few
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                while len(body) < length:
                    body += conn.recv(4096)
                self.received.append(head + b"\r\n\r\n" + body)
                out = b'{"sid": "s1", "state": "starting"}'
                conn.sendall(b"HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                             % (len(out), out))

    def close(self):
        self.sock.close()


def test_the_gate_wants_the_pool_token_and_passes_nothing_else_on(tokens):
    port, host_port = free_ports(2)
    handoff = handoff_name(port)
    boot = FakeBoot(handoff)
    waiting = Waiting(host_port)
    gate = _start_gate(port, tokens["pool"][0], handoff, host_port)
    url = f"http://127.0.0.1:{port}"
    body = {"sid": "s1", "token": "host-token-abcdefghijklmnop"}
    try:
        for token in [None, "wrong", tokens["pool"][1] + "x", tokens["placement"][1]]:
            status, _, answer = call(f"{url}/assign", "POST", body, token)
            assert status == 401, (token, answer)
        assert boot.received == [], "a refused assignment reached the boot program"
        status, _, answer = call(f"{url}/assign", "POST", body, tokens["pool"][1])
        assert (status, answer) == (202, {"sid": "s1", "state": "starting"})
        (sent,) = boot.received
        # The boot program gets the session, and the gate's store variables (its AWS_*
        # environment); never the pool token.
        assert tokens["pool"][1].encode() not in sent
        assert b"authorization" not in sent.lower()
        head, _, payload = sent.partition(b"\r\n\r\n")
        assert json.loads(payload) == {"sid": "s1", "token": "host-token-abcdefghijklmnop",
                                       "env": STORE_ENV}
        # A caller cannot choose what goes into the session server's environment.
        status, _, answer = call(f"{url}/assign", "POST", body | {"env": {"AWS_X": "y"}},
                                 tokens["pool"][1])
        assert status == 400, answer
        assert len(boot.received) == 1
        for path, method in [("/assign", "GET"), ("/api/health", "GET"), ("/x", "POST")]:
            status, _, answer = call(f"{url}{path}", method, {} if method == "POST" else None,
                                     tokens["pool"][1])
            assert status in (404, 405), (path, method, status)
            assert "error" in answer
        status, _, answer = call(f"{url}/assign", "POST", b"x" * (17 * 1024), tokens["pool"][1])
        assert status == 413, answer
        assert len(boot.received) == 1
    finally:
        stop(gate)
        boot.close()
        waiting.close()


def test_the_gate_answers_503_when_no_boot_program_waits(tokens):
    """After the exec (toolbox serve runs) or before the boot program starts, nothing listens
    on the hand-off socket: the adapter is told to try again, and nothing else happens."""
    port, host_port = free_ports(2)
    waiting = Waiting(host_port)
    gate = _start_gate(port, tokens["pool"][0], handoff_name(port), host_port)
    try:
        status, headers, answer = call(f"http://127.0.0.1:{port}/assign", "POST",
                                       {"sid": "s1", "token": "host-token-abcdefghijklmnop"},
                                       tokens["pool"][1])
        assert status == 503, answer
        assert int(headers["Retry-After"]) >= 1
        assert "not waiting" in answer["error"]
    finally:
        stop(gate)
        waiting.close()


def test_the_gate_reads_the_pool_token_again_for_each_assignment(tmp_path):
    """A rotated Secret reaches a running gate (the kubelet rewrites the mounted file)."""
    pool_file = tmp_path / "pool"
    pool_file.write_text("pool-token-first-0123456789\n")
    port, host_port = free_ports(2)
    handoff = handoff_name(port)
    boot = FakeBoot(handoff)
    waiting = Waiting(host_port)
    gate = _start_gate(port, str(pool_file), handoff, host_port)
    url = f"http://127.0.0.1:{port}/assign"
    body = {"sid": "s1", "token": "host-token-abcdefghijklmnop"}
    try:
        assert call(url, "POST", body, "pool-token-first-0123456789")[0] == 202
        pool_file.write_text("pool-token-second-0123456789\n")
        assert call(url, "POST", body, "pool-token-first-0123456789")[0] == 401
        assert call(url, "POST", body, "pool-token-second-0123456789")[0] == 202
    finally:
        stop(gate)
        boot.close()
        waiting.close()


def test_the_gate_hands_nothing_over_while_a_host_serves(tokens):
    """Once the boot program has exec'd, model code could bind the hand-off name itself and
    wait for an assignment (the session's token). The gate hands one over only while a
    waiting boot program answers on the session server's loopback port, which model code
    cannot take from a serving session server; so even an assignment with the pool token
    reaches nothing."""
    port, host_port = free_ports(2)
    handoff = handoff_name(port)
    impostor = FakeBoot(handoff)  # model code, bound to the name after the exec
    host = Waiting(host_port, serving=True)
    gate = _start_gate(port, tokens["pool"][0], handoff, host_port)
    try:
        status, headers, answer = call(f"http://127.0.0.1:{port}/assign", "POST",
                                       {"sid": "s1", "token": "host-token-abcdefghijklmnop"},
                                       tokens["pool"][1])
        assert status == 503, answer
        assert "not waiting" in answer["error"]
        assert impostor.received == []
        host.close()  # nothing on the session server's port at all: the same
        status, _, answer = call(f"http://127.0.0.1:{port}/assign", "POST",
                                 {"sid": "s1", "token": "host-token-abcdefghijklmnop"},
                                 tokens["pool"][1])
        assert status == 503, answer
        assert impostor.received == []
    finally:
        stop(gate)
        impostor.close()


def test_bad_arguments_are_named(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    good = tmp_path / "pool"
    good.write_text("pool-token-0123456789\n")
    port, _ = free_ports(2)
    for args, named in [
        (["--listen", "nowhere", "--pool-token-file", str(good),
          "--handoff-socket", "@x"], "--listen"),
        (["--listen", f"127.0.0.1:{port}", "--pool-token-file", str(good),
          "--handoff-socket", "@x", "--host-port", "0"], "--host-port"),
        (["--listen", f"127.0.0.1:{port}", "--pool-token-file", str(empty),
          "--handoff-socket", "@x"], "--pool-token-file"),
        (["--listen", f"127.0.0.1:{port}", "--pool-token-file", str(tmp_path / "missing"),
          "--handoff-socket", "@x"], "--pool-token-file"),
        (["--listen", f"127.0.0.1:{port}", "--pool-token-file", str(good),
          "--handoff-socket", "/tmp/boot.sock"], "--handoff-socket"),
    ]:
        result = subprocess.run([sys.executable, GATE, *args], capture_output=True, text=True,
                                timeout=30)
        assert result.returncode != 0, args
        assert named in result.stderr, (args, result.stderr)
