#!/usr/bin/env python3
"""The warm pod's gate: checks assignments with the pool token, hands them to the boot program.

A session server pod has two containers. The `host` container runs toolbox-k8s-boot and
then, once assigned, `toolbox serve` and the model code its tools run. This program runs in
the other one, the only place the pool token is mounted:

  POST /assign   {"sid": "...", "token": "..."} with Authorization: Bearer <pool token>
                 -> the session, and this container's AWS_* variables as "env" (the state
                 store's settings and credentials, from the toolbox-store Secret), go to
                 the boot program's abstract Unix socket (`--handoff-socket @NAME`, in the
                 pod's network namespace), without the pool token; its answer comes back:
                 202, 400, 409; 503 + Retry-After when no boot program waits (the session server
                 serves, or is starting)

It hands an assignment over only while a waiting boot program answers on the session
server's port (127.0.0.1:--host-port, GET /api/health -> 503 {"status": "waiting"}). After
the exec model code runs in the pod and could bind the hand-off name itself; it cannot take
the session server's port from a serving session server, so whatever holds the name then
gets nothing.

Why a second container: model code runs as the `host` container's user, and could read any
file or environment variable of that container, PID 1's included (/proc/1/environ): so no
Secret is given to that container, neither the pool token nor the store's credentials. A
container has its own mount and PID namespaces (the pod does not share process namespaces),
and this one runs as another user and shares no volume with the `host` container, so nothing
of the pool token is in reach of model code; and it outlives restarts of the `host`
container, whose boot program then waits again.
Standard library only.
"""

from __future__ import annotations

import argparse
import hmac
import http.client
import ipaddress
import json
import os
import re
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 16 * 1024
_HANDOFF = re.compile(r"@[A-Za-z0-9._/-]{1,100}")
# The variables passed to toolbox serve: the S3 client's (region, endpoint, credentials).
STORE_ENV_PREFIX = "AWS_"
# Seconds a caller may take to send its request, and the boot program to answer.
CLIENT_TIMEOUT = 10
HANDOFF_TIMEOUT = 10
RETRY_AFTER = 1


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket ("\\0NAME" for an abstract one)."""

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
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._send(400, {"error": "the body is not JSON"})
        # The session's fields only (the boot program checks them); what goes into the
        # session server's environment is this container's, never the caller's.
        if not isinstance(body, dict) or not set(body) <= {"sid", "token"}:
            return self._send(400, {"error": "the body must be {\"sid\": ..., \"token\": ...}"})
        body["env"] = self.server.store_env
        status, answer = self._hand_off(json.dumps(body).encode())
        if status is None:
            return self._send(503, {"error": "the `host` container is not waiting for a session "
                                             "(it serves one, or is starting)"}, RETRY_AFTER)
        self._send(status, answer)

    def _boot_waits(self) -> bool:
        """Whether the session server's port is answered by a boot program waiting for a
        session."""
        conn = http.client.HTTPConnection("127.0.0.1", self.server.host_port,
                                          timeout=HANDOFF_TIMEOUT)
        try:
            conn.request("GET", "/api/health")
            resp = conn.getresponse()
            body = json.loads(resp.read(64 * 1024))
        except (OSError, ValueError, http.client.HTTPException):
            return False
        finally:
            conn.close()
        return resp.status == 503 and isinstance(body, dict) and body.get("status") == "waiting"

    def _hand_off(self, raw: bytes) -> tuple[int | None, dict]:
        if not self._boot_waits():
            return None, {}
        conn = UnixHTTPConnection(self.server.handoff, HANDOFF_TIMEOUT)
        try:
            conn.request("POST", "/assign", body=raw,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read(64 * 1024)
        except (OSError, http.client.HTTPException):
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
                   help="@NAME: the boot program's abstract Unix socket")
    p.add_argument("--host-port", type=int, default=7878,
                   help="the session server's port, where a waiting boot program answers on "
                        "127.0.0.1")
    a = p.parse_args(argv)

    host, port = parse_listen(a.listen)
    try:
        read_token(a.pool_token_file, "--pool-token-file")  # fail at start, not on first call
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if not 0 < a.host_port < 65536:
        raise SystemExit(f"--host-port {a.host_port}: must be 1-65535")
    if not _HANDOFF.fullmatch(a.handoff_socket):
        raise SystemExit(f"--handoff-socket {a.handoff_socket!r}: expected @NAME, an abstract "
                         "socket (1-100 of A-Z a-z 0-9 . _ / -)")

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("GateServer", (ThreadingHTTPServer,),
                        {"address_family": family, "daemon_threads": True})
    server = server_class((host, port), Handler)
    server.pool_token_file = a.pool_token_file
    server.handoff = "\0" + a.handoff_socket[1:]
    server.host_port = a.host_port
    server.store_env = {k: v for k, v in os.environ.items() if k.startswith(STORE_ENV_PREFIX)}
    shown = f"[{host}]" if ":" in host else host
    names = ", ".join(sorted(server.store_env)) or "none"
    print(f"toolbox-k8s-gate: listening on http://{shown}:{server.server_address[1]} "
          f"(hands assignments to {a.handoff_socket}, with the store variables {names})",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
