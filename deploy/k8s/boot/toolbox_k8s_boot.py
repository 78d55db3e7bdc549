#!/usr/bin/env python3
"""The warm pool's host program: wait for a session, then become its `toolbox serve`.

A SandboxWarmPool keeps pods running before anyone knows which session they will serve, so
a pod cannot start `toolbox serve --session SID` itself. It runs this instead: it listens on
the host's port and answers

  GET  /api/health   503 {"status": "waiting"}
  POST /assign       {"sid": "...", "token": "..."} with Authorization: Bearer <pool token>
                     -> 202; it writes the host token to a file only its user can read, and
                     execs `toolbox serve --session SID --epoch next --state-store URL
                     --listen IP:PORT --workspace DIR --token-file FILE [extra args]`

on the same port (the placement adapter sends the assignment; docs/scale-out.md,
"Kubernetes"). A second assignment of the same session is answered 202 again; one of another
session is 409. If the host exits, the container restarts into this program, waiting again.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import os
import re
import shutil
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

_SID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_TOKEN = re.compile(r"[\x21-\x7e]{16,512}")  # printable, no spaces: one line in a file
MAX_BODY = 16 * 1024


class Handler(BaseHTTPRequestHandler):
    server_version = "toolbox-k8s-boot"

    def log_message(self, fmt, *args):
        sys.stderr.write("toolbox-k8s-boot: %s %s\n" % (self.command, self.path[:100]))

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = True

    def do_GET(self):  # noqa: N802
        if self.path.split("?")[0] == "/api/health":
            self._send(503, {"status": "waiting", "error": "no session assigned yet"})
        else:
            self._send(503, {"error": "this host has no session yet"})

    def do_POST(self):  # noqa: N802
        if self.path != "/assign":
            return self._send(404, {"error": "POST /assign only"})
        raw_len = self.headers.get("Content-Length") or "0"
        if not raw_len.isdigit() or int(raw_len) > MAX_BODY:
            return self._send(413, {"error": f"the body must be at most {MAX_BODY} bytes"})
        raw = self.rfile.read(int(raw_len))
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self.server.pool_token.encode()):
            return self._send(401, {"error": "assignments need the pool's bearer token"})
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._send(400, {"error": "the body is not JSON"})
        if not isinstance(body, dict) or set(body) != {"sid", "token"}:
            return self._send(400, {"error": "the body must be {\"sid\": ..., \"token\": ...}"})
        sid, token = body["sid"], body["token"]
        if not isinstance(sid, str) or not _SID.fullmatch(sid) or sid.startswith("."):
            return self._send(400, {"error": "sid: 1-128 of A-Z a-z 0-9 . _ -, not starting "
                                             "with '.'"})
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            return self._send(400, {"error": "token: 16-512 printable characters, no spaces"})
        if self.server.assigned is not None:
            if self.server.assigned == (sid, token):
                return self._send(202, {"sid": sid, "state": "starting"})
            return self._send(409, {"error": "this host is taken by another session"})
        write_private(self.server.token_path, token + "\n")
        self.server.assigned = (sid, token)
        self._send(202, {"sid": sid, "state": "starting"})


def write_private(path: str, text: str) -> None:
    """Writes a file only this user can read, whole or not at all."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def wipe(folder: str) -> None:
    """Removes everything inside `folder` (never the folder itself; links not followed)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)


def parse_listen(raw: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise SystemExit(f"--listen {raw!r}: expected IP:PORT")
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise SystemExit(f"--listen {raw!r}: {host!r} is not an IP address") from None
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toolbox-k8s-boot", description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="0.0.0.0:7878")
    p.add_argument("--pool-token-file", required=True)
    p.add_argument("--state-store", required=True, help="file:///folder or s3://bucket/prefix")
    p.add_argument("--workspace", default="/workspace")
    p.add_argument("--run-dir", default="/run/toolbox", help="where the host token is written")
    p.add_argument("--toolbox", default="toolbox", help="the toolbox binary")
    p.add_argument("--epoch", default="next", help="passed to toolbox serve --epoch")
    p.add_argument("--wipe-workspace", action="store_true",
                   help="empty the workspace before the host starts: after a restart it holds "
                        "the previous host's files, and a host restores only into an empty "
                        "folder (the state store has them)")
    p.add_argument("serve_args", nargs="*", help="more `toolbox serve` arguments, after --")
    a = p.parse_args(argv)

    host, port = parse_listen(a.listen)
    toolbox = shutil.which(a.toolbox)
    if toolbox is None:
        raise SystemExit(f"--toolbox {a.toolbox!r}: not found")
    with open(a.pool_token_file, encoding="utf-8") as f:
        pool_token = f.readline().strip()
    if not pool_token:
        raise SystemExit(f"--pool-token-file {a.pool_token_file}: the file is empty")
    os.makedirs(a.run_dir, mode=0o700, exist_ok=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = HTTPServer((host, port), Handler)
    server.pool_token = pool_token
    server.token_path = os.path.join(a.run_dir, "host-token")
    server.assigned = None
    shown = f"[{host}]" if ":" in host else host
    print(f"toolbox-k8s-boot: waiting for a session on http://{shown}:{port}",
          file=sys.stderr, flush=True)
    while server.assigned is None:
        server.handle_request()
    server.server_close()
    sid = server.assigned[0]
    if a.wipe_workspace:
        wipe(a.workspace)
    args = [toolbox, "serve", "--session", sid, "--epoch", a.epoch,
            "--state-store", a.state_store, "--listen", a.listen,
            "--workspace", a.workspace, "--token-file", server.token_path, *a.serve_args]
    print(f"toolbox-k8s-boot: session {sid}: exec toolbox serve", file=sys.stderr, flush=True)
    os.execv(toolbox, args)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
