"""An MCP client through `toolbox router` (toolbox/tests/router.rs), with the official Python SDK.

Usage: python3 mcp_router_client.py URL TOKEN PATH
Opens a session at URL (the router's /s/{sid}/mcp) with the router's bearer token, lists the
tools, reads PATH with file_manager__read, and prints one JSON object. Every step has a timeout.
"""

import asyncio
import json
import sys

from mcp import ClientSession

STEP = 60

try:  # mcp >= 2: the transport takes an HTTP client that carries the headers
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    def connect(url, token):
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        return streamable_http_client(url, http_client=client)
except ImportError:  # mcp 1.x
    from mcp.client.streamable_http import streamablehttp_client

    def connect(url, token):
        return streamablehttp_client(url, headers={"Authorization": f"Bearer {token}"})


async def main(url, token, path):
    out = {}
    async with connect(url, token) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), STEP)
            tools = (await asyncio.wait_for(session.list_tools(), STEP)).tools
            out["tools"] = len(tools)
            out["has_read"] = any(t.name == "file_manager__read" for t in tools)
            result = await asyncio.wait_for(
                session.call_tool("file_manager__read", {"path": path}), STEP)
            out["read"] = "".join(getattr(c, "text", "") for c in result.content)
            out["is_error"] = bool(getattr(result, "is_error", getattr(result, "isError", False)))
    print(json.dumps(out), flush=True)


asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2], sys.argv[3]), 5 * STEP))
