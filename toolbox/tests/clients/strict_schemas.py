"""What a strict client makes of toolbox's tool schemas, with openai-agents' own conversion.

Usage: python strict_schemas.py http|stdio
  http   MCPServerStreamableHttp at TOOLBOX_MCP_URL with the token TOOLBOX_SERVE_TOKEN
  stdio  MCPServerStdio running `TOOLBOX_BIN mcp --mode full --workspace TOOLBOX_WS`

For every tool of tools/list it converts the input schema as an agent with
`convert_schemas_to_strict` does (agents.mcp.util.MCPUtil.to_function_tool, which calls
agents.strict_schema.ensure_strict_json_schema) and compares the result with the schema the
server sent, every object's `required` listing all its properties (the one thing the
conversion may add). Then it calls the tool twice, through the client's own check of
`required`: as a strict model would (every optional, nullable argument null) and as a model
not in strict mode would (optional arguments left out), every required one a harmless value
of its type. Prints one JSON line, which toolbox/tests/mcp_clients.rs asserts on.
"""

import asyncio
import json
import os
import sys

from agents.mcp import MCPServerStdio, MCPServerStreamableHttp
from agents.mcp.util import MCPUtil

CALL_TIMEOUT = 120

# Required arguments whose value must not reach anything outside the test: a URL on a closed
# loopback port, a command that does nothing, no packages to install.
SAFE_VALUES = {"url": "http://127.0.0.1:9/", "command": "true", "packages": []}
BY_TYPE = {"string": "x", "integer": 1, "number": 0, "boolean": False, "array": [], "object": {}}


def connect(transport):
    if transport == "http":
        return MCPServerStreamableHttp(
            name="toolbox",
            params={
                "url": os.environ["TOOLBOX_MCP_URL"],
                "headers": {"Authorization": f"Bearer {os.environ['TOOLBOX_SERVE_TOKEN']}"},
            },
            client_session_timeout_seconds=CALL_TIMEOUT,
        )
    ws = os.environ["TOOLBOX_WS"]
    return MCPServerStdio(
        name="toolbox",
        params={
            "command": os.environ["TOOLBOX_BIN"],
            "args": ["mcp", "--mode", "full", "--workspace", ws],
            "cwd": ws,
            # No TOOLBOX_* of the caller, no user config file.
            "env": {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": os.environ.get("HOME", "/"),
                "XDG_CONFIG_HOME": os.path.join(ws, ".no-user-config"),
            },
        },
        client_session_timeout_seconds=CALL_TIMEOUT,
    )


def nullable(schema):
    kind = schema.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if any(branch.get("type") == "null" for branch in schema.get("anyOf", [])):
        return True
    return None in schema.get("enum", [])


def require_all(schema):
    """`schema` with every object's `required` listing all its properties."""
    if isinstance(schema, list):
        return [require_all(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: require_all(v) for k, v in schema.items()}
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: require_all(v) for k, v in schema["properties"].items()}
        out["required"] = list(schema["properties"].keys())
    return out


def value_for(name, schema):
    if name in SAFE_VALUES:
        return SAFE_VALUES[name]
    if schema.get("enum"):
        return schema["enum"][0]
    return BY_TYPE[schema["type"]]


def wire(model):
    """A model as it went over the wire: the same in mcp 1.x (camelCase fields) and 2.x."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def text_of(result):
    return "".join(block.get("text", "") for block in result.get("content", []))


async def main(transport):
    report = []
    async with connect(transport) as server:
        for tool in await server.list_tools():
            sent = wire(tool)["inputSchema"]
            converted = MCPUtil.to_function_tool(tool, server, convert_schemas_to_strict=True)
            entry = {
                "name": tool.name,
                "strict": converted.strict_json_schema,
                "only_required_added": converted.params_json_schema == require_all(sent),
            }
            if not entry["only_required_added"]:
                entry["sent"] = sent
                entry["converted"] = converted.params_json_schema
            properties = sent.get("properties", {})
            # A strict model: every optional argument null.
            arguments = {
                name: None if nullable(prop) else value_for(name, prop)
                for name, prop in properties.items()
            }
            entry["arguments"] = arguments
            result = wire(await server.call_tool(tool.name, arguments))
            entry["is_error"] = bool(result.get("isError"))
            entry["text"] = text_of(result)[:2000]
            # A model not in strict mode: the optional (nullable) arguments left out.
            loose = {
                name: value_for(name, prop)
                for name, prop in properties.items()
                if not nullable(prop)
            }
            try:
                result = wire(await server.call_tool(tool.name, loose))
                entry["loose_text"] = text_of(result)[:2000]
            except Exception as e:  # the client refusing it before the call
                entry["loose_text"] = f"raised {type(e).__name__}: {e}"
            report.append(entry)
    print(json.dumps({"tools": report}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
