"""A client that gives up on a long call: openai-agents' MCPServerStreamableHttp with a short
client_session_timeout_seconds calls `shell` with a command that runs for long, gets the
client's timeout, and closes the server connection (as an agent does when its run ends).

Usage: python give_up.py SECONDS COMMAND close|exit   (URL and token from TOOLBOX_MCP_URL
and TOOLBOX_SERVE_TOKEN). Prints one JSON line: whether the call timed out on the client's
side, and what it raised. Then `close` leaves the `async with` block as an agent does (the
SDK sends DELETE /mcp and closes its connections); `exit` ends the process on the spot, as a
crashed or killed agent does, so the server only sees its connections close.
toolbox/tests/mcp_clients.rs then checks that the server stopped the command.
"""

import asyncio
import json
import os
import sys

from agents.mcp import MCPServerStreamableHttp


async def main(seconds, command, end):
    out = {"timed_out": False}
    async with MCPServerStreamableHttp(
        name="toolbox",
        params={
            "url": os.environ["TOOLBOX_MCP_URL"],
            "headers": {"Authorization": f"Bearer {os.environ['TOOLBOX_SERVE_TOKEN']}"},
        },
        client_session_timeout_seconds=seconds,
    ) as toolbox:
        try:
            result = await asyncio.wait_for(
                toolbox.call_tool("shell", {"command": command}), seconds + 60
            )
            out["result"] = result.model_dump(mode="json")
        except Exception as e:  # the client's timeout, as openai-agents raises it
            out["timed_out"] = True
            out["raised"] = f"{type(e).__name__}: {e}"
        if end == "exit":
            print(json.dumps(out), flush=True)
            os._exit(0)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]), sys.argv[2], sys.argv[3]))
