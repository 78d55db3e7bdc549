#!/usr/bin/env python3
"""The boot program of a session server's pod: wait for a session, then become its
`toolbox serve`.

A SandboxWarmPool keeps pods running before anyone knows which session they will serve, so
a pod cannot start `toolbox serve --session SID` itself. Its `host` container runs this
instead. On the session server's port it answers

  GET  /api/health   503 {"status": "waiting"}

(and 404 or 503 to anything else: it takes no assignment there). Assignments arrive on an
abstract Unix socket (`--handoff-socket @NAME`: the pod's network namespace, no file) from
the pod's other container, toolbox-k8s-gate, which alone holds the pool token and checks it
(docs/scale-out.md, "Kubernetes"):

  POST /assign       {"sid": "...", "token": "...", "env": {"AWS_...": "..."}}
                     -> 202; it empties the workspace if asked, writes the session server's token into
                     a pipe and execs `toolbox serve --session SID --epoch next
                     --state-store URL --listen IP:PORT --workspace DIR --token-fd N
                     [extra args]` on the same port, with `env` (the state store's
                     settings and credentials, which only the gate's container is given)
                     added to its environment

A second assignment of the same session is answered 202 again; one of another session is
409. If the session server exits, the container restarts into this program, waiting again.

Why a pipe: a token file and its path in argv stay readable by model code, which runs as the
same user once the session server serves (issue 37). The pipe holds one line, its write end
is closed before the exec, and the session server reads it and closes it: no file, no path,
and nothing left to read. Why the gate: the pool token must not be where model code runs,
and this program runs there; PID 1 (tini) would keep it in /proc/1/environ had it come as a
variable. Why the store's credentials come this way: given to this container, they would
stay in PID 1's environment, which model code can read; toolbox serve takes them out of its
own environment block at start and is not dumpable, so its children cannot read them. Why an
abstract socket: only processes of the pod can reach it, and none but this program runs in
the `host` container while it listens; it leaves nothing behind that model code could
replace to break the next start, and it goes when this program execs.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import os
import re
import selectors
import shutil
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import UnixStreamServer

_SID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_TOKEN = re.compile(r"[\x21-\x7e]{16,512}")  # printable, no spaces: one line in a pipe
MAX_BODY = 16 * 1024
# An abstract socket's name: `@` and what sockaddr_un.sun_path holds after its NUL.
_HANDOFF = re.compile(r"@[A-Za-z0-9._/-]{1,100}")
# What an assignment may add to toolbox serve's environment: the S3 client's variables.
_ENV_NAME = re.compile(r"AWS_[A-Z0-9_]{1,100}")
_ENV_VALUE = re.compile(r"[\x20-\x7e]{0,8192}")
MAX_ENV = 64
# Seconds a client may take to send its request: one slow client must not hold the port.
CLIENT_TIMEOUT = 10


class Handler(BaseHTTPRequestHandler):
    """The session server's port: health says "waiting", nothing else is served."""

    server_version = "toolbox-k8s-boot"
    timeout = CLIENT_TIMEOUT

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
            self._send(503, {"error": "this pod has no session yet"})

    def do_POST(self):  # noqa: N802
        # Assignments come only through the gate's socket: whoever reaches this port (the
        # router, anything a missing NetworkPolicy lets through) cannot place a session.
        self._send(404, {"error": "this port takes no assignment: the pod's gate hands them "
                                  "over (POST /assign on its port, with the pool token)"})


class HandoffHandler(Handler):
    """The hand-off socket: only processes of the pod can connect to it, the gate and this
    container, which runs nothing else while this program waits."""

    def address_string(self):
        return "gate"

    def do_GET(self):  # noqa: N802
        self._send(404, {"error": "POST /assign only"})

    def do_POST(self):  # noqa: N802
        if self.path != "/assign":
            return self._send(404, {"error": "POST /assign only"})
        raw_len = self.headers.get("Content-Length") or "0"
        if not raw_len.isdigit() or int(raw_len) > MAX_BODY:
            return self._send(413, {"error": f"the body must be at most {MAX_BODY} bytes"})
        raw = self.rfile.read(int(raw_len))
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return self._send(400, {"error": "the body is not JSON"})
        if not isinstance(body, dict) or not {"sid", "token"} <= set(body) <= \
                {"sid", "token", "env"}:
            return self._send(400, {"error": "the body must be {\"sid\": ..., \"token\": ..."
                                             "[, \"env\": {...}]}"})
        sid, token, env = body["sid"], body["token"], body.get("env", {})
        if not isinstance(sid, str) or not _SID.fullmatch(sid) or sid.startswith("."):
            return self._send(400, {"error": "sid: 1-128 of A-Z a-z 0-9 . _ -, not starting "
                                             "with '.'"})
        if not isinstance(token, str) or not _TOKEN.fullmatch(token):
            return self._send(400, {"error": "token: 16-512 printable characters, no spaces"})
        if not isinstance(env, dict) or len(env) > MAX_ENV or not all(
                isinstance(k, str) and _ENV_NAME.fullmatch(k) and isinstance(v, str)
                and _ENV_VALUE.fullmatch(v) for k, v in env.items()):
            return self._send(400, {"error": f"env: at most {MAX_ENV} AWS_* variables, each "
                                             "value at most 8192 printable characters"})
        state = self.server.state
        if state.assigned is not None:
            same = state.assigned[0] == sid and hmac.compare_digest(
                state.assigned[1].encode(), token.encode())
            if same:
                return self._send(202, {"sid": sid, "state": "starting"})
            return self._send(409, {"error": "this pod is taken by another session"})
        state.assigned = (sid, token)
        state.env = env
        self._send(202, {"sid": sid, "state": "starting"})


class State:
    assigned: tuple[str, str] | None = None
    env: dict[str, str] = {}


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


def abstract_socket(raw: str, flag: str = "--handoff-socket") -> str:
    """`@NAME` as the address Python binds for an abstract Unix socket ("\\0NAME")."""
    if not _HANDOFF.fullmatch(raw):
        raise SystemExit(f"{flag} {raw!r}: expected @NAME, an abstract socket (1-100 of "
                         "A-Z a-z 0-9 . _ / -)")
    return "\0" + raw[1:]


def token_pipe(token: str) -> int:
    """A pipe holding `token` and a newline, its write end closed: returns the read end,
    inheritable, for `toolbox serve --token-fd`. The token (at most 512 bytes) fits the
    pipe's buffer, so the write never blocks."""
    read_end, write_end = os.pipe()
    try:
        data = (token + "\n").encode()
        if os.write(write_end, data) != len(data):
            raise OSError("short write of the session server's token into its pipe")
    finally:
        os.close(write_end)
    os.set_inheritable(read_end, True)
    return read_end


def serve_until_assigned(listen: tuple[str, int], handoff: str) -> State:
    """Answers the session server's port and the hand-off socket until the gate assigns a
    session."""
    state = State()
    server = HTTPServer(listen, Handler)
    try:
        gate = UnixStreamServer(abstract_socket(handoff), HandoffHandler)
    except OSError as e:
        server.server_close()
        raise SystemExit(f"--handoff-socket {handoff}: {e.strerror or e}") from None
    gate.state = state
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(server, selectors.EVENT_READ)
            sel.register(gate, selectors.EVENT_READ)
            host, port = listen
            shown = f"[{host}]" if ":" in host else host
            print(f"toolbox-k8s-boot: waiting for a session on http://{shown}:{port} "
                  f"(assignments through {handoff})", file=sys.stderr, flush=True)
            while state.assigned is None:
                for key, _ in sel.select():
                    key.fileobj.handle_request()
    finally:
        # From now on nothing listens on either; a restarted container listens again.
        server.server_close()
        gate.server_close()
    return state


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toolbox-k8s-boot", description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="0.0.0.0:7878")
    p.add_argument("--handoff-socket", required=True,
                   help="@NAME: the abstract Unix socket the gate hands assignments to")
    p.add_argument("--state-store", required=True, help="file:///folder or s3://bucket/prefix")
    p.add_argument("--workspace", default="/workspace")
    p.add_argument("--toolbox", default="toolbox", help="the toolbox binary")
    p.add_argument("--epoch", default="next", help="passed to toolbox serve --epoch")
    p.add_argument("--wipe-workspace", action="store_true",
                   help="empty the workspace before the session server starts: after a restart "
                        "it holds the previous session server's files, and a session server "
                        "restores only into an empty folder (the state store has them)")
    p.add_argument("serve_args", nargs="*", help="more `toolbox serve` arguments, after --")
    a = p.parse_args(argv)

    listen = parse_listen(a.listen)
    abstract_socket(a.handoff_socket)  # named in the error, before anything starts
    toolbox = shutil.which(a.toolbox)
    if toolbox is None:
        raise SystemExit(f"--toolbox {a.toolbox!r}: not found")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    state = serve_until_assigned(listen, a.handoff_socket)
    sid, token = state.assigned
    if a.wipe_workspace:
        wipe(a.workspace)
    fd = token_pipe(token)
    args = [toolbox, "serve", "--session", sid, "--epoch", a.epoch,
            "--state-store", a.state_store, "--listen", a.listen,
            "--workspace", a.workspace, "--token-fd", str(fd), *a.serve_args]
    print(f"toolbox-k8s-boot: session {sid}: exec toolbox serve", file=sys.stderr, flush=True)
    os.execve(toolbox, args, os.environ | state.env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
