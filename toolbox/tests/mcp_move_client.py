"""An MCP client whose session server moves (toolbox/tests/serve_session_server.rs), with the
official Python SDK.

Usage: python3 mcp_move_client.py URL
Opens a session and lists the tools, prints READY, and waits for a line on stdin (meanwhile
the test kills the session server and starts the next epoch on the same address). Then it
uses the old session again (the new session server answers 404, which the SDK reports as an
error), opens a new one and reads notes/plan.md. Prints one JSON object. Every step has a
timeout.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

STEP = 60


async def main(url):
    out = {}
    try:
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), STEP)
                out["tools_before"] = len((await asyncio.wait_for(session.list_tools(), STEP)).tools)
                print("READY", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                try:
                    await asyncio.wait_for(session.list_tools(), STEP)
                    out["old_session"] = "answered"
                except Exception as e:  # the SDK's error for a session the server does not know
                    out["old_session"] = f"{type(e).__name__}: {e}"
    except Exception as e:
        out.setdefault("closing", f"{type(e).__name__}: {e}")
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await asyncio.wait_for(session.initialize(), STEP)
            result = await asyncio.wait_for(
                session.call_tool("file_manager__read", {"path": "notes/plan.md"}), STEP)
            out["after"] = "".join(getattr(c, "text", "") for c in result.content)
    print(json.dumps(out), flush=True)


asyncio.run(asyncio.wait_for(main(sys.argv[1]), 5 * STEP))
