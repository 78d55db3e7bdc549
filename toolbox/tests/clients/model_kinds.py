"""A model of each kind calls `file_manager__read` through each framework installed: a model
in strict mode sends every optional argument as null, a model not in strict mode leaves them
out. Both must reach the tool (issue 38, point 2).

Usage: python model_kinds.py   (URL and token from TOOLBOX_MCP_URL and TOOLBOX_SERVE_TOKEN;
the workspace holds notes.txt). Frameworks that are not installed in this environment are
reported as missing. Prints one JSON line: per framework and kind, what the model got back.
"""

import asyncio
import json
import os

URL = os.environ["TOOLBOX_MCP_URL"]
HEADERS = {"Authorization": f"Bearer {os.environ['TOOLBOX_SERVE_TOKEN']}"}
KINDS = {
    "strict": {"path": "notes.txt", "offset": None, "limit": None},
    "loose": {"path": "notes.txt"},
}


async def openai_agents():
    from agents.mcp import MCPServerStreamableHttp
    from agents.mcp.util import MCPUtil
    from agents.tool_context import ToolContext

    out = {}
    async with MCPServerStreamableHttp(
        name="toolbox",
        params={"url": URL, "headers": HEADERS},
        cache_tools_list=True,
        client_session_timeout_seconds=120,
    ) as server:
        tools = {t.name: t for t in await server.list_tools()}
        for kind, args in KINDS.items():
            tool = MCPUtil.to_function_tool(
                tools["file_manager__read"], server, convert_schemas_to_strict=kind == "strict"
            )
            raw = json.dumps(args)
            ctx = ToolContext(context=None, tool_name=tool.name, tool_call_id=kind, tool_arguments=raw)
            try:
                out[kind] = str(await tool.on_invoke_tool(ctx, raw))[:500]
            except Exception as e:
                out[kind] = f"raised {type(e).__name__}: {e}"[:500]
    return out


async def pydantic_ai():
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    try:
        from pydantic_ai.mcp import MCPToolset

        toolset = MCPToolset(URL, headers=HEADERS, read_timeout=120)
    except ImportError:  # 1.x before MCPToolset
        from pydantic_ai.mcp import MCPServerStreamableHTTP

        toolset = MCPServerStreamableHTTP(URL, headers=HEADERS, read_timeout=120)

    def scripted(args):
        def respond(messages, info):
            for message in reversed(messages):
                for part in getattr(message, "parts", []):
                    if isinstance(part, ToolReturnPart):
                        return ModelResponse(parts=[TextPart(str(part.content))])
                    if getattr(part, "part_kind", "") == "retry-prompt":
                        return ModelResponse(parts=[TextPart("retry: " + str(part.content))])
            return ModelResponse(parts=[ToolCallPart("file_manager__read", dict(args))])

        return FunctionModel(respond)

    out = {}
    async with toolset:
        for kind, args in KINDS.items():
            try:
                result = await Agent(scripted(args), toolsets=[toolset]).run("read notes.txt")
                out[kind] = str(result.output)[:500]
            except Exception as e:
                out[kind] = f"raised {type(e).__name__}: {e}"[:500]
    return out


async def langchain():
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient(
        {"toolbox": {"transport": "streamable_http", "url": URL, "headers": HEADERS}}
    )
    tools = {t.name: t for t in await client.get_tools()}
    out = {}
    for kind, args in KINDS.items():
        try:
            out[kind] = str(await tools["file_manager__read"].ainvoke(dict(args)))[:500]
        except Exception as e:
            out[kind] = f"raised {type(e).__name__}: {e}"[:500]
    return out


async def main():
    report = {}
    for name, run in [("openai_agents", openai_agents), ("pydantic_ai", pydantic_ai), ("langchain", langchain)]:
        try:
            report[name] = await run()
        except ImportError as e:
            report[name] = {"missing": str(e)}
    print(json.dumps(report))


asyncio.run(main())
