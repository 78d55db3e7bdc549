"""A stand-in for `toolbox serve` in session server mode, for the adapter's tests.

It takes the arguments toolbox-k8s-boot passes, claims the next epoch in a file:// store
(one file per epoch), and answers what the adapter asks of a session server: GET /api/health
with the session server token, POST /api/sessions/{sid}/park (202, then exit 0). Like
`toolbox serve`, it takes the token from `--token-fd N` (reads the first line, then closes
the descriptor) or `--token-file`. The real binary is exercised by test_adapter.py's
end-to-end test.
"""

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

p = argparse.ArgumentParser()
p.add_argument("cmd")
p.add_argument("--session", required=True)
p.add_argument("--epoch", required=True)
p.add_argument("--state-store", required=True)
p.add_argument("--listen", required=True)
p.add_argument("--workspace", required=True)
given = p.add_mutually_exclusive_group(required=True)
given.add_argument("--token-file")
given.add_argument("--token-fd", type=int)
a = p.parse_args()
assert a.cmd == "serve", a.cmd
assert os.listdir(a.workspace) == [], "the workspace must be empty"
if a.token_fd is not None:
    if a.token_fd < 3:
        sys.exit(f"--token-fd {a.token_fd}: standard input, output or error")
    with os.fdopen(a.token_fd, encoding="utf-8") as f:  # closes the descriptor
        token = f.readline().strip()
else:
    token = open(a.token_file).readline().strip()
if not token:
    sys.exit("--token-fd/--token-file: no token")
store = a.state_store.removeprefix("file://")
epochs = os.path.join(store, a.session, "epochs")
os.makedirs(epochs, exist_ok=True)
epoch = len(os.listdir(epochs)) + 1 if a.epoch == "next" else int(a.epoch)
open(os.path.join(epochs, str(epoch)), "x").close()
parked = False


class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        if self.headers.get("Authorization") != f"Bearer {token}":
            self.send(401, {"error": "the bearer token is wrong"})
            return False
        return True

    def do_GET(self):
        if not self.authorized():
            return
        if self.path == "/api/health":
            return self.send(200, {"status": "ok", "host": {"session": a.session,
                                                            "epoch": epoch}})
        self.send(404, {"error": "not here"})

    def do_POST(self):
        global parked
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.authorized():
            return
        if self.path == f"/api/sessions/{a.session}/park":
            parked = True
            with open(os.path.join(store, a.session, "parked"), "a") as f:
                f.write(f"{epoch}\n")
            return self.send(202, {"state": "parked"})
        self.send(404, {"error": "not here"})


host, _, port = a.listen.rpartition(":")
server = HTTPServer((host, int(port)), H)
print(f"toolbox serve: listening on http://{a.listen} (fake, epoch {epoch})", file=sys.stderr,
      flush=True)
while not parked:
    server.handle_request()
sys.exit(0)
