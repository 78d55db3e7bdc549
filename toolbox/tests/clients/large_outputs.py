"""Calls every tool that declares an outputSchema with an input that makes its output about
3 MB, through the MCP SDK 2.x over streamable HTTP and through Pydantic AI's MCPToolset (which
gives a model the structured value instead of the text), and reports what each client got.

Usage: python large_outputs.py   (URL and token from TOOLBOX_MCP_URL and TOOLBOX_SERVE_TOKEN;
the workspace, the current folder, holds the inputs toolbox/tests/mcp_clients.rs made).
Prints one JSON line: for each call, whether it failed in the client, the text's length and
the structured value's length as JSON.
"""

import asyncio
import json
import os

from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from pydantic_ai.mcp import MCPToolset

BIG = 3_000_000
CALLS = [
    ("shell", {"command": f"head -c {BIG} /dev/zero | tr '\\0' a"}),
    ("run_python_code", {"code": f"print('a' * {BIG})"}),
    ("pdf__info", {"path": "big-title.pdf"}),
    ("data__inspect", {"path": "wide-name.csv"}),
    ("data__validate", {"path": "wide-name.csv", "schema": {"type": "object", "required": ["nope"]}}),
    ("data__convert", {"path": "wide-name.csv", "output": "output/wide.jsonl"}),
]


async def with_sdk(url, headers):
    out = {}
    http = create_mcp_http_client(headers=headers)
    async with http, streamable_http_client(url, http_client=http) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            for name, args in CALLS:
                try:
                    r = await session.call_tool(name, args)
                    text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
                    out[name] = {
                        "error": bool(r.isError),
                        "text": len(text),
                        "structured": len(json.dumps(r.structuredContent))
                        if r.structuredContent is not None else None,
                        "keys": sorted((r.structuredContent or {}).keys()),
                    }
                except Exception as e:  # a call that fails in the client after it ran
                    out[name] = {"failed": f"{type(e).__name__}: {e}"[:300]}
    return out


async def with_pydantic_ai(url, headers):
    out = {}
    toolset = MCPToolset(url, headers=headers, read_timeout=300)
    async with toolset:
        for name, args in CALLS:
            try:
                got = await toolset.direct_call_tool(name, args)
                out[name] = {"to_model": len(got if isinstance(got, str) else json.dumps(got, default=str))}
            except Exception as e:
                out[name] = {"failed": f"{type(e).__name__}: {e}"[:300]}
    return out


async def main():
    url = os.environ["TOOLBOX_MCP_URL"]
    headers = {"Authorization": f"Bearer {os.environ['TOOLBOX_SERVE_TOKEN']}"}
    print(json.dumps({"sdk": await with_sdk(url, headers), "pydantic_ai": await with_pydantic_ai(url, headers)}))


asyncio.run(main())
