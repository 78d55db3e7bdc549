"""toolbox-k8s-gate, the warm pod's second container: the only holder of the pool token. It
checks an assignment's bearer token and hands the assignment to the boot program over the
socket the two containers share."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading

from conftest import GATE, call, drain, free_port, free_ports, stop, wait_for_line


def _start_gate(port: int, pool_file: str, handoff: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, GATE, "--listen", f"127.0.0.1:{port}", "--pool-token-file", pool_file,
         "--handoff-socket", handoff], stderr=subprocess.PIPE, text=True)
    wait_for_line(proc, "listening on")
    drain(proc)
    return proc


class FakeBoot:
    """A boot program's hand-off socket that records what reaches it and answers 202."""

    def __init__(self, path: str):
        self.path = path
        self.received: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
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


def test_the_gate_wants_the_pool_token_and_passes_nothing_else_on(tokens, socket_dir):
    handoff = os.path.join(socket_dir, "boot.sock")
    boot = FakeBoot(handoff)
    port = free_port()
    gate = _start_gate(port, tokens["pool"][0], handoff)
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
        # The boot program gets the body, and never the pool token.
        assert tokens["pool"][1].encode() not in sent
        assert b"authorization" not in sent.lower()
        assert sent.endswith(b'{"sid": "s1", "token": "host-token-abcdefghijklmnop"}')
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


def test_the_gate_answers_503_when_no_boot_program_waits(tokens, socket_dir):
    """After the exec (toolbox serve runs) or before the boot program starts, nothing listens
    on the hand-off socket: the adapter is told to try again, and nothing else happens."""
    port = free_port()
    gate = _start_gate(port, tokens["pool"][0], os.path.join(socket_dir, "none.sock"))
    try:
        status, headers, answer = call(f"http://127.0.0.1:{port}/assign", "POST",
                                       {"sid": "s1", "token": "host-token-abcdefghijklmnop"},
                                       tokens["pool"][1])
        assert status == 503, answer
        assert int(headers["Retry-After"]) >= 1
        assert "not waiting" in answer["error"]
    finally:
        stop(gate)


def test_the_gate_reads_the_pool_token_again_for_each_assignment(tmp_path, socket_dir):
    """A rotated Secret reaches a running gate (the kubelet rewrites the mounted file)."""
    pool_file = tmp_path / "pool"
    pool_file.write_text("pool-token-first-0123456789\n")
    handoff = os.path.join(socket_dir, "boot.sock")
    boot = FakeBoot(handoff)
    port = free_port()
    gate = _start_gate(port, str(pool_file), handoff)
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


def test_bad_arguments_are_named(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    good = tmp_path / "pool"
    good.write_text("pool-token-0123456789\n")
    port, _ = free_ports(2)
    for args, named in [
        (["--listen", "nowhere", "--pool-token-file", str(good),
          "--handoff-socket", "/tmp/x.sock"], "--listen"),
        (["--listen", f"127.0.0.1:{port}", "--pool-token-file", str(empty),
          "--handoff-socket", "/tmp/x.sock"], "--pool-token-file"),
        (["--listen", f"127.0.0.1:{port}", "--pool-token-file", str(tmp_path / "missing"),
          "--handoff-socket", "/tmp/x.sock"], "--pool-token-file"),
        (["--listen", f"127.0.0.1:{port}", "--pool-token-file", str(good),
          "--handoff-socket", "relative.sock"], "--handoff-socket"),
    ]:
        result = subprocess.run([sys.executable, GATE, *args], capture_output=True, text=True,
                                timeout=30)
        assert result.returncode != 0, args
        assert named in result.stderr, (args, result.stderr)
