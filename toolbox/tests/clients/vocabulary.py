"""A model's-eye view of `toolbox mcp --vocabulary data-agent`, through the MCP Python SDK.

Usage: python vocabulary.py   (TOOLBOX_BIN, TOOLBOX_WS set)

Lists the tools, then calls every one by the name it was listed under, with harmless
arguments (a required argument gets a value of its type; a URL a closed loopback port; a
command `true`). The SDK itself checks every result of a tool that declares an outputSchema
against it, and raises when the structuredContent is missing or wrong. Two calls show the
structured results: python_exec prints 6*7, bash echoes. Prints one JSON line, which
toolbox/tests/mcp_vocabulary.rs asserts on.
"""

import asyncio
import json
import os

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SAFE_VALUES = {"url": "http://127.0.0.1:9/", "command": "true", "packages": [], "seconds": 0}
BY_TYPE = {"string": "x", "integer": 1, "number": 0, "boolean": False, "array": [], "object": {}}
OWN = {
    "python_exec": {"code": "print(6 * 7)"},
    "bash": {"command": "echo vocab-ok"},
}


def nullable(schema):
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if any(branch.get("type") == "null" for branch in schema.get("anyOf", [])):
        return True
    return None in schema.get("enum", [])


def value_for(name, schema):
    if name in SAFE_VALUES:
        return SAFE_VALUES[name]
    if schema.get("enum"):
        return next(v for v in schema["enum"] if v is not None)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next(k for k in kind if k != "null")
    return BY_TYPE[kind]


def dump(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main():
    ws = os.environ["TOOLBOX_WS"]
    params = StdioServerParameters(
        command=os.environ["TOOLBOX_BIN"],
        args=["mcp", "--mode", "full", "--vocabulary", "data-agent", "--workspace", ws],
        cwd=ws,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "XDG_CONFIG_HOME": os.path.join(ws, ".no-user-config"),
        },
    )
    report = {"tools": [], "output_schemas": {}, "calls": {}}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = (await session.list_tools()).tools
            for tool in listed:
                wire = dump(tool)
                report["tools"].append(tool.name)
                if "outputSchema" in wire:
                    report["output_schemas"][tool.name] = wire["outputSchema"]
                schema = wire["inputSchema"]
                # Strict schemas: an optional argument is nullable, and null means "not given".
                arguments = OWN.get(tool.name) or {
                    name: None if nullable(prop) else value_for(name, prop)
                    for name, prop in schema.get("properties", {}).items()
                }
                entry = {}
                try:
                    result = dump(await session.call_tool(tool.name, arguments))
                    entry["is_error"] = bool(result.get("isError"))
                    text = "".join(b.get("text", "") for b in result.get("content", []))
                    entry["text"] = text[:500]
                    entry["noted"] = "(note: this server lists" in text
                    if "structuredContent" in result:
                        entry["structured"] = result["structuredContent"]
                except Exception as e:  # noqa: BLE001 - the report says what failed
                    entry["exception"] = f"{type(e).__name__}: {e}"
                report["calls"][tool.name] = entry
            # By its canonical name, which this vocabulary does not list: it runs, and the
            # text names the listed word.
            result = dump(await session.call_tool("shell", {"command": "true"}))
            report["by_canonical_name"] = "".join(b.get("text", "") for b in result.get("content", []))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
