#!/usr/bin/env python3
"""The warm pod's gate: checks assignments with the pool token, hands them to the boot program.

A host pod has two containers. The host container runs toolbox-k8s-boot and then, once
assigned, `toolbox serve` and the model code its tools run. This program runs in the other
one, the only place the pool token is mounted:

  POST /assign   {"sid": "...", "token": "..."} with Authorization: Bearer <pool token>
                 -> the body goes, without the pool token, to the boot program's Unix socket
                 (`--handoff-socket`, in a memory-backed folder both containers mount), and
                 its answer comes back: 202, 400, 409; 503 + Retry-After when no boot
                 program waits there (the host serves, or is starting)

Why a second container: model code runs as the host container's user, and could read any
file or environment variable of that container, PID 1's included (/proc/1/environ). A
container has its own mount and PID namespaces (the pod does not share process namespaces),
and this one runs as another user, so nothing of the pool token is in reach of model code;
and it outlives restarts of the host container, whose boot program then waits again.
Standard library only.
"""

from __future__ import annotations

import argparse
import hmac
import http.client
import ipaddress
import json
import os
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 16 * 1024
MAX_SOCKET_PATH = 107
# Seconds a caller may take to send its request, and the boot program to answer.
CLIENT_TIMEOUT = 10
HANDOFF_TIMEOUT = 10
RETRY_AFTER = 1


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket."""

    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def read_token(path: str, flag: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as e:
        raise ValueError(f"{flag} {path}: {e.strerror or e}") from None
    if not token:
        raise ValueError(f"{flag} {path}: the file is empty")
    return token


class Handler(BaseHTTPRequestHandler):
    server_version = "toolbox-k8s-gate"
    timeout = CLIENT_TIMEOUT

    def log_message(self, fmt, *args):  # one line per request, no client data
        sys.stderr.write("toolbox-k8s-gate: %s %s\n" % (self.command, self.path[:100]))

    def _send(self, status: int, body: dict, retry_after: int | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self):  # noqa: N802
        self._send(404, {"error": "POST /assign only"})

    def do_POST(self):  # noqa: N802
        if self.path != "/assign":
            return self._send(404, {"error": "POST /assign only"})
        raw_len = self.headers.get("Content-Length") or "0"
        if not raw_len.isdigit():
            return self._send(400, {"error": "Content-Length is not a number"})
        if int(raw_len) > MAX_BODY:
            if int(raw_len) <= 16 * MAX_BODY:
                # Read it (bounded) so the caller gets the answer, not a reset connection.
                self.rfile.read(int(raw_len))
            return self._send(413, {"error": f"the body must be at most {MAX_BODY} bytes"})
        raw = self.rfile.read(int(raw_len))
        try:
            # Read each time: a rotated Secret is rewritten in the mounted folder.
            pool_token = read_token(self.server.pool_token_file, "--pool-token-file")
        except ValueError as e:
            sys.stderr.write(f"toolbox-k8s-gate: {e}\n")
            return self._send(503, {"error": "the gate cannot read the pool token"},
                              RETRY_AFTER)
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), pool_token.encode()):
            return self._send(401, {"error": "assignments need the pool's bearer token"})
        status, answer = self._hand_off(raw)
        if status is None:
            return self._send(503, {"error": "the host container is not waiting for a session "
                                             "(it serves one, or is starting)"}, RETRY_AFTER)
        self._send(status, answer)

    def _hand_off(self, raw: bytes) -> tuple[int | None, dict]:
        conn = UnixHTTPConnection(self.server.handoff, HANDOFF_TIMEOUT)
        try:
            conn.request("POST", "/assign", body=raw,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read(64 * 1024)
        except OSError:
            return None, {}
        finally:
            conn.close()
        try:
            answer = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            answer = None
        if not isinstance(answer, dict):
            return 502, {"error": "the boot program's answer is not a JSON object"}
        return resp.status, answer


def parse_listen(raw: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise SystemExit(f"--listen {raw!r}: expected IP:PORT")
    host = host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise SystemExit(f"--listen {raw!r}: {host!r} is not an IP address") from None
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toolbox-k8s-gate", description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="0.0.0.0:7879", help="IP:PORT the adapter assigns on")
    p.add_argument("--pool-token-file", required=True,
                   help="the token assignments must carry (read again for each one)")
    p.add_argument("--handoff-socket", required=True,
                   help="the boot program's Unix socket, in the folder both containers mount")
    a = p.parse_args(argv)

    host, port = parse_listen(a.listen)
    try:
        read_token(a.pool_token_file, "--pool-token-file")  # fail at start, not on first call
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if not os.path.isabs(a.handoff_socket):
        raise SystemExit(f"--handoff-socket {a.handoff_socket!r}: must be an absolute path")
    if len(os.fsencode(a.handoff_socket)) > MAX_SOCKET_PATH:
        raise SystemExit(f"--handoff-socket {a.handoff_socket!r}: longer than "
                         f"{MAX_SOCKET_PATH} bytes, which a Unix socket's path may not be")

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("GateServer", (ThreadingHTTPServer,),
                        {"address_family": family, "daemon_threads": True})
    server = server_class((host, port), Handler)
    server.pool_token_file = a.pool_token_file
    server.handoff = a.handoff_socket
    shown = f"[{host}]" if ":" in host else host
    print(f"toolbox-k8s-gate: listening on http://{shown}:{server.server_address[1]} "
          f"(hands assignments to {a.handoff_socket})", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
