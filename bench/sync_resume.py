"""Restore time to the first answered call, through the real binary (docs/scale-out.md).

For each workspace shape (1 MB, 100 MB, 10,000 small files): a session server of epoch 1
syncs the workspace and is parked; then a session server of epoch 2 starts on an empty
folder, restores, and serves. Printed: milliseconds from starting the second session server
to its first answered tool call (process start, claim, restore with every checksum
checked, serving), and the restored bytes.

Usage: python3 bench/sync_resume.py [path/to/toolbox]   (default: $CARGO_TARGET_DIR/debug/toolbox)
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "target"), "debug", "toolbox")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(ws, store, epoch):
    port = free_port()
    proc = subprocess.Popen(
        [BIN, "serve", "--workspace", ws, "--listen", f"127.0.0.1:{port}", "--mode", "full",
         "--session", "bench", "--epoch", str(epoch), "--state-store", f"file://{store}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, port


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.status, json.loads(r.read())


def first_call(port, deadline):
    while time.monotonic() < deadline:
        try:
            status, body = post(port, "/api/sessions/bench/tools/file_manager__read", {"path": "hello.txt"})
            if status == 200 and body.get("status") == "done":
                return
        except OSError:
            time.sleep(0.005)
    raise SystemExit("the session server did not answer")


def fill(ws, files, size):
    rnd = os.urandom(size)
    for i in range(files):
        d = os.path.join(ws, f"d{i // 100:03}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05}.bin"), "wb") as f:
            f.write(rnd[i % 7:] + rnd[: i % 7])
    with open(os.path.join(ws, "hello.txt"), "w") as f:
        f.write("hello\n")


def main():
    print(f"binary: {BIN}")
    for name, files, size in [("1 MB", 16, 64 * 1024), ("100 MB", 100, 1024 * 1024),
                              ("10,000 small files", 10_000, 1024)]:
        with tempfile.TemporaryDirectory() as top:
            store, a, b = (os.path.join(top, x) for x in ("store", "a", "b"))
            os.makedirs(a)
            os.makedirs(b)
            fill(a, files, size)
            proc, port = start(a, store, 1)
            first_call(port, time.monotonic() + 120)
            post(port, "/api/sessions/bench/park", {})
            proc.wait(timeout=120)
            t0 = time.monotonic()
            proc, port = start(b, store, 2)
            first_call(port, time.monotonic() + 120)
            elapsed = (time.monotonic() - t0) * 1000
            proc.terminate()
            err = proc.communicate(timeout=120)[1]
            m = re.search(r"(\d+) files, (\d+) bytes restored in (\d+) ms", err)
            restored = f"{m.group(1)} files, {m.group(2)} bytes, restore itself {m.group(3)} ms" if m else "?"
            print(f"{name}: first answered call {elapsed:.0f} ms after start ({restored})")


main()
