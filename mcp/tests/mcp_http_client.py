"""Drives toolbox's MCP endpoint over streamable HTTP with the official Python MCP client.

Usage: python3 mcp_http_client.py URL SCENARIO
Prints one JSON object on stdout, what the Rust test (mcp/tests/mcp_http.rs) asserts on.

Scenarios:
  plain      no elicitation callback: list tools, read notes.txt, call an unknown tool
  approve    elicitation answered accept + decision=approve, then write approved.txt
  deny       elicitation answered accept + decision=deny, then write denied.txt
  decline    elicitation answered decline, then write declined.txt
  no-elicit  no elicitation callback, then write fallback.txt
  progress   no elicitation callback, call a tool with a progress callback (ARGS: tool, JSON args)
  cancel     call a tool and give up waiting after ARGS[2] seconds (ARGS: tool, JSON args, seconds);
             the client then sends notifications/cancelled

Every step has a timeout, so a server that never answers fails the script instead of
hanging the test.
"""

import asyncio
import json
import sys

import mcp.types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

STEP_TIMEOUT = 60


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def text_of(result):
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def call_summary(result):
    result = dump(result)
    return {"is_error": bool(result.get("isError")), "text": text_of(result)}


def elicitation_answer(scenario, seen):
    async def answer(context, params):
        seen.append(dump(params))
        if scenario == "approve":
            return types.ElicitResult(action="accept", content={"decision": "approve"})
        if scenario == "deny":
            return types.ElicitResult(action="accept", content={"decision": "deny"})
        return types.ElicitResult(action="decline")

    return answer


async def step(awaitable):
    return await asyncio.wait_for(awaitable, STEP_TIMEOUT)


async def run(url, scenario, extra):
    out = {}
    seen = []
    callback = None
    if scenario in ("approve", "deny", "decline"):
        callback = elicitation_answer(scenario, seen)
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write, elicitation_callback=callback) as session:
            init = dump(await step(session.initialize()))
            out["server"] = init["serverInfo"]["name"]
            out["protocol"] = init["protocolVersion"]
            out["capabilities"] = sorted(init["capabilities"])
            if scenario == "plain":
                tools = [dump(t) for t in (await step(session.list_tools())).tools]
                out["tools"] = [t["name"] for t in tools]
                out["annotations"] = {t["name"]: t.get("annotations") for t in tools}
                out["read"] = call_summary(
                    await step(session.call_tool("file_manager__read", {"path": "notes.txt"}))
                )
                try:
                    unknown = await step(session.call_tool("no_such_tool", {}))
                    out["unknown"] = {"result": call_summary(unknown)}
                except MCPError as e:
                    out["unknown"] = {"code": e.error.code, "message": e.error.message}
            elif scenario == "progress":
                tool, arguments = extra[0], json.loads(extra[1])
                progress = []

                async def on_progress(value, total, message):
                    progress.append(message)

                out["call"] = call_summary(
                    await step(session.call_tool(tool, arguments, progress_callback=on_progress))
                )
                out["progress"] = progress
            elif scenario == "call":
                tool, arguments = extra[0], json.loads(extra[1])
                out["call"] = call_summary(await step(session.call_tool(tool, arguments)))
            elif scenario == "cancel":
                tool, arguments, seconds = extra[0], json.loads(extra[1]), float(extra[2])
                try:
                    await asyncio.wait_for(session.call_tool(tool, arguments), seconds)
                    out["cancelled"] = False
                except asyncio.TimeoutError:
                    out["cancelled"] = True
                # A request after the cancellation still works.
                out["after"] = call_summary(
                    await step(session.call_tool("file_manager__read", {"path": "notes.txt"}))
                )
            else:
                path = {
                    "approve": "approved.txt",
                    "deny": "denied.txt",
                    "decline": "declined.txt",
                    "no-elicit": "fallback.txt",
                }[scenario]
                out["write"] = call_summary(
                    await step(
                        session.call_tool("file_manager__write", {"path": path, "content": "from mcp"})
                    )
                )
                out["elicitations"] = seen
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
