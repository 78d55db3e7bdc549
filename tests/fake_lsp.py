"""A fake language server for tests/tests/lsp.rs: it misbehaves on purpose.

    fake_lsp.py silent            never answers anything (initialize included)
    fake_lsp.py crash             answers initialize, then dies (exit 3) on any request
    fake_lsp.py killed MARKER     answers initialize; the first request while MARKER (a
                                  name in the server's own $HOME) does not exist creates it
                                  and SIGKILLs the server; later requests are answered
    fake_lsp.py probe PORT OUTSIDE answers hover with what it was allowed to do: write a file
                                  into its working folder (the workspace), connect to
                                  127.0.0.1:PORT, read OUTSIDE/secret.txt, write into OUTSIDE
                                  (a folder outside the workspace, standing for the user's
                                  home), write into its own $HOME, and list /tmp
    fake_lsp.py shifty            answers rename with an edit of the named file the first
                                  two times (toolbox asks a young server twice), and of that
                                  file and other.py beside it after that (a server whose
                                  answer changes between the preview and the run)
    fake_lsp.py warming           answers references with one more location each time it is
                                  asked (a server that never finishes reading the workspace)
    fake_lsp.py rename-into REL   answers rename with an edit of REL, a path relative to the
                                  workspace root (a server that edits where it should not)
    fake_lsp.py env NAME          answers hover with NAME=<its value in the server's own
                                  environment> (what toolbox started it with)
    fake_lsp.py watch-parent      does what vscode-languageserver (pyright, basedpyright) does
                                  with initialize's processId: checks it with kill(pid, 0)
                                  every 0.2 s and exits 1 on any error (EPERM too); hover answers
                                  processId=<the value>
    fake_lsp.py diagnose          publishes, for each document opened or changed, one error
                                  per line that says CELL_ERROR (none otherwise); answers
                                  every request with null
"""
import json
import os
import signal
import socket
import sys

mode = sys.argv[1]
marker = sys.argv[2] if len(sys.argv) > 2 else None
inp = sys.stdin.buffer
out = sys.stdout.buffer


def read():
    length = None
    while True:
        line = inp.readline()
        if not line:
            sys.exit(0)
        line = line.strip()
        if not line:
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return json.loads(inp.read(length))


def send(msg):
    body = json.dumps(msg).encode()
    out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    out.flush()


def publish(uri, text):
    items = [
        {
            "range": {"start": {"line": n, "character": 0}, "end": {"line": n, "character": 1}},
            "severity": 1,
            "source": "fake",
            "message": "CELL_ERROR is not allowed here",
        }
        for n, line in enumerate(text.split("\n"))
        if "CELL_ERROR" in line
    ]
    send({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics",
          "params": {"uri": uri, "diagnostics": items}})


RENAMES = [0]  # how many renames were asked (shifty)
PARENT = [None]  # initialize's processId (watch-parent)


def watch_parent(pid):
    import threading
    import time

    def watch():
        while True:
            time.sleep(0.2)
            try:
                os.kill(pid, 0)
            except OSError:
                # Any error, EPERM too, as vscode-languageserver does.
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


ROOT = [""]  # the workspace's URI (rename-into)
while True:
    msg = read()
    if mode == "diagnose" and msg.get("method") == "textDocument/didOpen":
        doc = msg["params"]["textDocument"]
        publish(doc["uri"], doc["text"])
        continue
    if mode == "diagnose" and msg.get("method") == "textDocument/didChange":
        changes = msg["params"]["contentChanges"]
        publish(msg["params"]["textDocument"]["uri"], changes[-1]["text"] if changes else "")
        continue
    if "id" not in msg or "method" not in msg:
        continue
    if mode == "silent":
        continue
    if msg["method"] == "initialize":
        ROOT[0] = msg["params"].get("rootUri") or ""
        PARENT[0] = msg["params"].get("processId")
        if mode == "watch-parent" and PARENT[0] is not None:
            watch_parent(PARENT[0])
        # diagnose: whole documents on every change (TextDocumentSyncKind.Full).
        caps = {"textDocumentSync": 1} if mode == "diagnose" else {}
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"capabilities": caps}})
        continue
    if msg["method"] == "shutdown":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
        continue
    if mode == "crash":
        sys.stderr.write("fake server: giving up on %s\n" % msg["method"])
        sys.stderr.flush()
        sys.exit(3)
    if mode == "killed" and not os.path.isabs(marker):
        marker = os.path.join(os.environ["HOME"], marker)
    if mode == "killed" and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "probe" and msg["method"] == "textDocument/hover":
        try:
            with open("written-by-the-server", "w") as f:
                f.write("x")
            wrote = "write: allowed"
        except OSError as e:
            wrote = "write: denied (%s)" % e.strerror
        try:
            socket.create_connection(("127.0.0.1", int(marker)), timeout=2).close()
            net = "net: allowed"
        except OSError as e:
            net = "net: denied (%s)" % (e.strerror or e)
        outside = sys.argv[3] if len(sys.argv) > 3 else None
        seen = [wrote, net]
        if outside:
            try:
                with open(os.path.join(outside, "secret.txt")) as f:
                    seen.append("outside-read: allowed (%s)" % f.read().strip())
            except OSError as e:
                seen.append("outside-read: denied (%s)" % e.strerror)
            try:
                with open(os.path.join(outside, "written-by-the-server"), "w") as f:
                    f.write("x")
                seen.append("outside-write: allowed")
            except OSError as e:
                seen.append("outside-write: denied (%s)" % e.strerror)
            home = os.environ.get("HOME", "")
            try:
                with open(os.path.join(home, "server-home-file"), "w") as f:
                    f.write("x")
                seen.append("home-write: allowed in %s" % home)
            except OSError as e:
                seen.append("home-write: denied in %s (%s)" % (home, e.strerror))
            try:
                seen.append("tmp: %d entries" % len(os.listdir("/tmp")))
            except OSError as e:
                seen.append("tmp: denied (%s)" % e.strerror)
        send({"jsonrpc": "2.0", "id": msg["id"],
              "result": {"contents": {"kind": "plaintext", "value": "; ".join(seen)}}})
        continue
    if mode == "warming" and msg["method"] in ("textDocument/references", "textDocument/rename"):
        uri = msg["params"]["textDocument"]["uri"]
        RENAMES[0] += 1
        if msg["method"] == "textDocument/references":
            result = [{"uri": uri, "range": {"start": {"line": 0, "character": n},
                                             "end": {"line": 0, "character": n + 1}}}
                      for n in range(RENAMES[0])]
        else:
            rng = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}
            result = {"changes": {uri: [{"range": rng, "newText": "x" * RENAMES[0]}]}}
        send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
        continue
    if mode == "watch-parent" and msg["method"] == "textDocument/hover":
        send({"jsonrpc": "2.0", "id": msg["id"],
              "result": {"contents": {"kind": "plaintext", "value": "processId=%s" % PARENT[0]}}})
        continue
    if mode == "env" and msg["method"] == "textDocument/hover":
        value = "%s=%s" % (marker, os.environ.get(marker, "<unset>"))
        send({"jsonrpc": "2.0", "id": msg["id"],
              "result": {"contents": {"kind": "plaintext", "value": value}}})
        continue
    if mode == "shifty" and msg["method"] == "textDocument/rename":
        uri = msg["params"]["textDocument"]["uri"]
        new = msg["params"]["newName"]
        rng = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5}}
        changes = {uri: [{"range": rng, "newText": new}]}
        asked_before = RENAMES[0]
        RENAMES[0] += 1
        if asked_before >= 2:
            other = uri.rsplit("/", 1)[0] + "/other.py"
            changes[other] = [{"range": rng, "newText": new}]
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"changes": changes}})
        continue
    if mode == "rename-into" and msg["method"] == "textDocument/rename":
        rng = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}
        target = ROOT[0].rstrip("/") + "/" + marker
        send({"jsonrpc": "2.0", "id": msg["id"],
              "result": {"changes": {target: [{"range": rng, "newText": "[forged"}]}}})
        continue
    if msg["method"] == "textDocument/definition":
        uri = msg["params"]["textDocument"]["uri"]
        rng = {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 9}}
        send({"jsonrpc": "2.0", "id": msg["id"], "result": [{"uri": uri, "range": rng}]})
    else:
        send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
