"""A scripted model on 127.0.0.1 speaking OpenAI Chat Completions (streamed), so a session
server can run a real turn: the script maps a request's messages to a reply (text, or one
tool call)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

Reply = dict[str, Any]
"""``{"text": "..."}`` or ``{"call": (id, name, arguments)}``."""


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def ends_with_tool_result(messages: list[dict[str, Any]]) -> bool:
    return bool(messages) and messages[-1].get("role") == "tool"


class FakeLlm:
    """Started on a port of its own; ``base_url`` is what ``TOOLBOX_LLM_BASE_URL`` takes."""

    def __init__(self, script: Callable[[list[dict[str, Any]]], Reply]) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(min(length, 16 << 20)) or b"{}")
                messages = body.get("messages", [])
                outer.requests.append(messages)
                reply = script(messages)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()

                def chunk(delta: dict[str, Any], finish: str | None = None) -> None:
                    event = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": body.get("model", "fake"),
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    }
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    self.wfile.flush()

                chunk({"role": "assistant", "content": ""})
                if "call" in reply:
                    cid, name, args = reply["call"]
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": cid,
                                    "type": "function",
                                    "function": {"name": name, "arguments": json.dumps(args)},
                                }
                            ]
                        }
                    )
                    chunk({}, "tool_calls")
                else:
                    chunk({"content": reply.get("text", "")})
                    chunk({}, "stop")
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def env(self) -> dict[str, str]:
        """The session server environment that points a toolbox at this model."""
        return {
            "TOOLBOX_LLM_PROVIDER": "openai",
            "TOOLBOX_LLM_BASE_URL": self.base_url,
            "TOOLBOX_LLM_MODEL": "fake-model",
            "TOOLBOX_LLM_API_KEY_ENV": "FAKE_LLM_KEY",
            "FAKE_LLM_KEY": "sk-fake",
        }

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
