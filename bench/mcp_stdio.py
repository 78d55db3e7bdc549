"""A raw, buffered MCP client over stdio for the interleaved benchmarks (`mcp_ab.py`,
`otel_overhead.py`): one `toolbox mcp --mode full` per instance, no SDK in the way."""

import io
import json
import os
import subprocess
import tempfile
import time


class Server:
    """`BINARY mcp --mode full -w WS`, with `env` added to this process's environment (or,
    with `environ`, in place of it); on CPU 1 when PIN is set; under the command `wrap` if
    given (valgrind, say). Its stderr is kept (`close` returns it)."""

    def __init__(self, binary, ws, env=None, wrap=(), environ=None):
        pin = ["taskset", "-c", "1"] if os.environ.get("PIN") else []
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            pin + list(wrap) + [binary, "mcp", "--mode", "full", "-w", ws],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            bufsize=0,
            env={**(os.environ if environ is None else environ), **(env or {})},
        )
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
        assert "result" in reply, reply
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def request(self, method, params):
        rid = self.next_id
        self.next_id += 1
        line = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.proc.stdin.write((json.dumps(line) + "\n").encode())
        while True:
            line = self.out.readline()
            if not line:
                self.stderr.seek(0)
                tail = self.stderr.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"the server closed its stdout; its stderr ends:\n{tail}")
            reply = json.loads(line)
            if reply.get("id") == rid:
                return reply

    def call(self, name, arguments):
        """Seconds one `tools/call` took; the call must succeed."""
        started = time.perf_counter()
        reply = self.request("tools/call", {"name": name, "arguments": arguments})
        took = time.perf_counter() - started
        assert not reply["result"].get("isError"), reply
        return took

    def close(self):
        """Closes stdin and waits; returns (its stderr, seconds the exit took)."""
        started = time.perf_counter()
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        took = time.perf_counter() - started
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace"), took
