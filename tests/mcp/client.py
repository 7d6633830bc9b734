"""Drives a druse MCP server with the official Python MCP SDK, as an agent would.

Reads a plan (JSON) from stdin:

    {"transport": "stdio", "command": "/path/druse-node", "args": ["mcp", ...]}
    {"transport": "http", "url": "http://127.0.0.1:7700/mcp", "headers": {...}}

plus "steps": a list of
    {"name": "tools", "list_tools": true}
    {"name": "first", "tool": "memory_add", "arguments": {...}}

A string argument of the form "${step.path.to.value}" is replaced by that value of an earlier
step's structured result (keys, or list indexes), so a later call can use an id an earlier one
returned.

Prints one JSON line per event, and never asserts: the Rust test (tests/tests/mcp.rs) reads the
lines and asserts on them.
    {"event": "connected", "server": ..., "protocol_version": ...}
    {"event": "connect_failed", "error": ...}
    {"event": "tools", "name": ..., "tools": [{"name", "description", "input_schema"}]}
    {"event": "call", "name": ..., "tool": ..., "is_error": bool, "structured": ..., "text": ...}
    {"event": "call_failed", "name": ..., "tool": ..., "error": ..., "code": ...}
"""

import json
import re
import sys
import traceback

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

PLACEHOLDER = re.compile(r"^\$\{([A-Za-z0-9_]+)((?:\.[A-Za-z0-9_]+)*)\}$")


def emit(**record):
    print(json.dumps(record, default=str), flush=True)


def resolve(value, results):
    """Replaces ${step.path} strings inside value with what earlier steps returned."""
    if isinstance(value, dict):
        return {k: resolve(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, results) for v in value]
    if isinstance(value, str):
        match = PLACEHOLDER.match(value)
        if match:
            found = results[match.group(1)]
            for part in filter(None, match.group(2).split(".")):
                found = found[int(part)] if isinstance(found, list) else found[part]
            return found
    return value


def text_of(result):
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def run_steps(session, steps):
    results = {}
    for step in steps:
        name = step["name"]
        if step.get("list_tools"):
            listed = await session.list_tools()
            tools = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in listed.tools
            ]
            emit(event="tools", name=name, tools=tools)
            continue
        tool = step["tool"]
        try:
            arguments = resolve(step.get("arguments", {}), results)
        except (KeyError, IndexError, TypeError) as error:
            emit(event="call_failed", name=name, tool=tool, error=f"unresolved placeholder: {error!r}")
            continue
        try:
            result = await session.call_tool(tool, arguments)
        except MCPError as error:
            emit(event="call_failed", name=name, tool=tool, error=str(error), code=error.error.code)
            continue
        results[name] = result.structured_content
        emit(
            event="call",
            name=name,
            tool=tool,
            is_error=bool(result.is_error),
            structured=result.structured_content,
            text=text_of(result),
        )


async def session_over(read, write, steps):
    async with ClientSession(read, write) as session:
        init = await session.initialize()
        emit(event="connected", server=init.server_info.name, protocol_version=init.protocol_version)
        await run_steps(session, steps)


async def main():
    plan = json.load(sys.stdin)
    steps = plan.get("steps", [])
    try:
        if plan["transport"] == "stdio":
            params = StdioServerParameters(command=plan["command"], args=plan["args"], env=plan.get("env"))
            with open(plan.get("stderr", "/dev/null"), "w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    await session_over(read, write, steps)
        else:
            async with httpx2.AsyncClient(headers=plan.get("headers", {}), timeout=30) as http:
                async with streamable_http_client(plan["url"], http_client=http) as (read, write):
                    await session_over(read, write, steps)
    except BaseException as error:  # the SDK raises exception groups from its task groups
        emit(event="connect_failed", error=describe(error))


def describe(error):
    """The messages of an exception and of everything it groups or was caused by."""
    parts = []
    stack = [error]
    while stack:
        current = stack.pop()
        detail = f"{type(current).__name__}: {current}"
        if isinstance(current, MCPError):
            detail += f" (code {current.code}, data {current.data!r})"
        parts.append(detail)
        stack.extend(getattr(current, "exceptions", ()))
        if current.__cause__ is not None:
            stack.append(current.__cause__)
    if len(parts) == 1 and not str(error):
        parts.append(traceback.format_exc())
    return " | ".join(parts)


if __name__ == "__main__":
    anyio.run(main)
