"""LangChain's default MCP client (langchain-mcp-adapters' `get_tools()`) opens an MCP session
for every call. With `?session=NAME` on the URL every call runs in one toolbox session: a file
written by one call is there for the next, and Python keeps its variables. Without it, each
call has a toolbox session of its own.

Usage: python langchain_session.py   (URL and token from TOOLBOX_MCP_URL and
TOOLBOX_SERVE_TOKEN). Prints one JSON line.
"""

import asyncio
import json
import os

from langchain_mcp_adapters.client import MultiServerMCPClient

URL = os.environ["TOOLBOX_MCP_URL"]
HEADERS = {"Authorization": f"Bearer {os.environ['TOOLBOX_SERVE_TOKEN']}"}


async def run(url):
    client = MultiServerMCPClient(
        {"toolbox": {"transport": "streamable_http", "url": url, "headers": HEADERS}}
    )
    tools = {t.name: t for t in await client.get_tools()}

    async def call(name, args):
        try:
            return str(await tools[name].ainvoke(args))[:500]
        except Exception as e:
            return f"raised {type(e).__name__}: {e}"[:500]

    return {
        "write": await call("file_manager__write", {"path": "output/kept.txt", "content": "kept"}),
        "read": await call("file_manager__read", {"path": "output/kept.txt"}),
        "set": await call("run_python_code", {"code": "x = 41"}),
        "use": await call("run_python_code", {"code": "print(x + 1)"}),
    }


async def main():
    named = await run(URL + "?session=langchain-work")
    unnamed = await run(URL)
    print(json.dumps({"named": named, "unnamed": unnamed}))


asyncio.run(main())
