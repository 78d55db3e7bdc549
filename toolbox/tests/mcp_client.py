"""Drives `toolbox mcp` with the official Python MCP client: initialize, tools/list, tools/call.

Usage: python3 mcp_client.py TOOLBOX_BINARY WORKSPACE
Exits non-zero with a message on the first failed check.
"""

import asyncio
import logging
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client

try:  # mcp >= 2
    from mcp.shared.exceptions import MCPError
except ImportError:  # mcp 1.x
    from mcp.shared.exceptions import McpError as MCPError


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def texts(result):
    return "".join(c["text"] for c in result["content"] if c.get("type") == "text")


def check(cond, message):
    if not cond:
        raise SystemExit(f"FAILED: {message}")


async def session_for(binary, workspace, mode, body):
    params = StdioServerParameters(
        command=binary, args=["mcp", "--workspace", workspace, "--mode", mode], env=dict(os.environ)
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = dump(await session.initialize())
            check("tools" in init["capabilities"], f"tools capability missing: {init}")
            check(init["serverInfo"]["name"] == "toolbox", f"server name: {init['serverInfo']}")
            await body(session)


async def full_mode(session):
    tools = {t["name"]: t for t in (dump(t) for t in (await session.list_tools()).tools)}
    for name in ["file_manager__read", "file_manager__write", "file_manager__grep"]:
        check(name in tools, f"{name} not listed: {sorted(tools)}")
    check("read_file" not in tools, "aliases must not be listed")
    read = tools["file_manager__read"]
    check(read["annotations"]["readOnlyHint"] is True, f"read annotations {read['annotations']}")
    check(read["annotations"]["destructiveHint"] is False, f"read annotations {read['annotations']}")
    write = tools["file_manager__write"]
    check(write["annotations"]["readOnlyHint"] is False, f"write annotations {write['annotations']}")
    check(write["annotations"]["destructiveHint"] is True, f"write annotations {write['annotations']}")
    check(read["inputSchema"]["type"] == "object" and "path" in read["inputSchema"]["properties"], read)

    ok = dump(await session.call_tool("file_manager__read", {"path": "notes.txt"}))
    check(not ok.get("isError"), f"read failed: {ok}")
    check("hello from the workspace" in texts(ok), f"read text: {ok}")

    # Issue 38, point 8: a call by an alias runs, and its text names the listed tool, so the
    # model can switch to it. The SDK finds a result's schema by the name called: each alias
    # call makes it list the tools again and warn "not listed by server"; the listed name
    # does not.
    warnings = []

    class Catch(logging.Handler):
        def emit(self, record):
            if "not listed by server" in record.getMessage():
                warnings.append(record.getMessage())

    catch = Catch()
    logging.getLogger().addHandler(catch)
    try:
        alias = dump(await session.call_tool("read_file", {"path": "notes.txt"}))
        check(not alias.get("isError"), f"alias read failed: {alias}")
        check("hello from the workspace" in texts(alias), f"alias read text: {alias}")
        check(
            "lists the tool read_file as file_manager__read" in texts(alias),
            f"the alias call does not name the listed tool: {texts(alias)!r}",
        )
        check(len(warnings) == 1, f"one warning for the alias call: {warnings}")
        listed = dump(await session.call_tool("file_manager__read", {"path": "notes.txt"}))
        check("note:" not in texts(listed), f"a call by the listed name has no note: {listed}")
        check(len(warnings) == 1, f"no warning for the listed name: {warnings}")
    finally:
        logging.getLogger().removeHandler(catch)

    bad = dump(await session.call_tool("file_manager__read", {"path": "missing.txt"}))
    check(bad.get("isError") is True, f"missing file should be isError: {bad}")

    escape = dump(await session.call_tool("file_manager__read", {"path": "../../etc/passwd"}))
    check(escape.get("isError") is True and "outside the workspace" in texts(escape), escape)

    wrote = dump(await session.call_tool("file_manager__write", {"path": "out.txt", "content": "via mcp"}))
    check(not wrote.get("isError"), f"write failed: {wrote}")

    # Code writing straight to file descriptor 1 must not corrupt the protocol stream.
    noisy = dump(
        await session.call_tool(
            "run_python_code", {"code": "import os\nos.system('echo straight-to-fd-1')\n1 + 1"}
        )
    )
    check(not noisy.get("isError"), f"python call failed: {noisy}")
    check("2" in texts(noisy), f"python result: {noisy}")
    after = dump(await session.call_tool("file_manager__read", {"path": "notes.txt"}))
    check(not after.get("isError"), f"server unusable after fd-1 output: {after}")

    try:
        await session.call_tool("no_such_tool", {})
        check(False, "unknown tool should be a protocol error")
    except MCPError:
        pass


async def read_only_mode(session):
    names = [t.name for t in (await session.list_tools()).tools]
    check("file_manager__read" in names, names)
    check("file_manager__write" not in names and "file_manager__edit" not in names, names)
    denied = dump(await session.call_tool("file_manager__write", {"path": "ro.txt", "content": "x"}))
    check(denied.get("isError") is True, f"write in read_only should be isError: {denied}")
    check("read_only" in texts(denied), texts(denied))


async def main():
    binary, workspace = sys.argv[1], sys.argv[2]
    await session_for(binary, workspace, "full", full_mode)
    with open(os.path.join(workspace, "out.txt")) as f:
        check(f.read() == "via mcp", "out.txt content")
    await session_for(binary, workspace, "read_only", read_only_mode)
    check(not os.path.exists(os.path.join(workspace, "ro.txt")), "read_only wrote a file")
    print("mcp client: all checks passed")


if __name__ == "__main__":
    asyncio.run(main())
