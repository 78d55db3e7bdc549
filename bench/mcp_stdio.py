"""A raw, buffered MCP client over stdio for the benchmarks (`mcp_roundtrip.py`, `mcp_ab.py`,
`otel_overhead.py`, `callgrind.py`): one line written, the reply line read, no SDK in the
way, so what is measured is the server."""

import io
import json
import os
import subprocess
import tempfile
import time


class Client:
    """The stdio JSON-RPC server `argv` (in `cwd`, with environment `env`), `initialize`
    answered and `notifications/initialized` sent; `start_s` is how long that took from the
    spawn. Its stderr is kept (`close` returns it)."""

    def __init__(self, argv, cwd=None, env=None):
        self.stderr = tempfile.TemporaryFile()
        started = time.perf_counter()
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
        )
        # Buffered: readline() on the raw pipe would read one byte per system call and
        # measure the client rather than the server.
        self.out = io.BufferedReader(self.proc.stdout, 1 << 16)
        self.next_id = 1
        reply = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        )
        self.start_s = time.perf_counter() - started
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    def read(self):
        """The next message; an error with the end of the server's stderr if it closed."""
        line = self.out.readline()
        if not line:
            self.stderr.seek(0)
            tail = self.stderr.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"the server closed its stdout; its stderr ends:\n{tail}")
        return json.loads(line)

    def request(self, method, params):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            reply = self.read()
            if reply.get("id") == rid:
                return reply

    def close(self):
        """Closes stdin and waits (30 s, then kills); returns (its stderr, seconds the exit
        took)."""
        started = time.perf_counter()
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        took = time.perf_counter() - started
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace"), took


class Server(Client):
    """`BINARY mcp --mode full -w WS`, with `env` added to this process's environment (or,
    with `environ`, in place of it); on CPU 1 when PIN is set; under the command `wrap` if
    given (valgrind, say)."""

    def __init__(self, binary, ws, env=None, wrap=(), environ=None):
        pin = ["taskset", "-c", "1"] if os.environ.get("PIN") else []
        super().__init__(
            pin + list(wrap) + [binary, "mcp", "--mode", "full", "-w", ws],
            env={**(os.environ if environ is None else environ), **(env or {})},
        )

    def call(self, name, arguments):
        """Seconds one `tools/call` took; the call must succeed."""
        started = time.perf_counter()
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        took = time.perf_counter() - started
        assert not reply["result"].get("isError"), reply
        return took
