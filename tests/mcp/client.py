"""Drives a druse MCP server with the official Python MCP SDK, as an agent would.

Reads a plan (JSON) from stdin:

    {"transport": "stdio", "command": "/path/druse-node", "args": ["mcp", ...]}
    {"transport": "http", "url": "http://127.0.0.1:7700/mcp", "headers": {...}}

plus "steps": a list of
    {"name": "tools", "list_tools": true}
    {"name": "first", "tool": "memory_add", "arguments": {...}}
    {"name": "all", "list_resources": true}            (every page, following nextCursor)
    {"name": "one", "read_resource": "druse://skill/..."}
    {"name": "owner", "run": ["/path/druse-node", "skill", "approve", "${pub.id}", ...]}
    {"name": "watch", "listen": {"resources_list_changed": true, "resource_subscriptions": [...]},
     "steps": [...], "until": [{"updated": "druse://skill/..."}, {"list_changed": true}],
     "timeout": 30}
      (subscribes with subscriptions/listen, or resources/subscribe on a 2025-era session, runs
      the inner steps, then collects change notifications until every "until" entry was seen
      or the timeout passed)

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
    {"event": "resources", "name": ..., "pages": n, "resources": [{"uri", "name", "title", "description", "mime_type"}]}
    {"event": "read", "name": ..., "contents": [{"uri", "mime_type", "text", "meta"}]}
    {"event": "read_failed", "name": ..., "error": ..., "code": ...}
    {"event": "ran", "name": ..., "code": exit status, "stdout": ..., "stderr": ...}
    {"event": "listen", "name": ..., "honored": {...}, "events": [{"kind", "uri"}], "complete": bool}
"""

import json
import re
import subprocess
import sys
import traceback

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import listen
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from mcp.shared.subscriptions import ResourceUpdated, ResourcesListChanged
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


async def list_all(session):
    """Every resource, page after page; and how many pages it took."""
    resources, cursor, pages = [], None, 0
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_resources(params=params)
        pages += 1
        resources.extend(page.resources)
        cursor = page.next_cursor
        if not cursor or pages > 100:
            return resources, pages


def event_record(event):
    if isinstance(event, ResourceUpdated):
        return {"kind": "updated", "uri": str(event.uri)}
    if isinstance(event, ResourcesListChanged):
        return {"kind": "list_changed", "uri": None}
    return {"kind": type(event).__name__, "uri": None}


def satisfied(until, seen):
    for wanted in until:
        if "updated" in wanted and not any(e["kind"] == "updated" and e["uri"] == wanted["updated"] for e in seen):
            return False
        if wanted.get("list_changed") and not any(e["kind"] == "list_changed" for e in seen):
            return False
    return True


NOTIFIED = []
"""Change notifications the session received, in order (the 2025-era subscriptions)."""
ARRIVED = [None]
"""Set when a notification arrives: the event a step waiting for one is woken by."""


async def on_message(message):
    method = getattr(message, "method", None)
    if method == "notifications/resources/updated":
        NOTIFIED.append({"kind": "updated", "uri": str(message.params.uri)})
    elif method == "notifications/resources/list_changed":
        NOTIFIED.append({"kind": "list_changed", "uri": None})
    if ARRIVED[0] is not None:
        ARRIVED[0].set()


async def subscribe_step(session, step, results):
    """resources/subscribe for each URI, the inner steps, then the notifications until satisfied."""
    name = step["name"]
    wanted = resolve(step["listen"], results)
    until = resolve(step.get("until", []), results)
    honored, refused = [], []
    for uri in wanted.get("resource_subscriptions", []):
        try:
            await session.subscribe_resource(uri)
            honored.append(uri)
        except MCPError as error:
            refused.append({"uri": uri, "error": str(error), "code": error.error.code})
    start = len(NOTIFIED)
    await run_steps(session, step.get("steps", []), results)
    with anyio.move_on_after(step.get("timeout", 30)):
        while True:
            # A new event before the check: a notification after it wakes the wait.
            ARRIVED[0] = anyio.Event()
            if satisfied(until, NOTIFIED[start:]):
                break
            await ARRIVED[0].wait()
    seen = NOTIFIED[start:]
    emit(event="listen", name=name, honored={"resourceSubscriptions": honored}, refused=refused, events=seen,
         complete=satisfied(until, seen))


async def listen_step(session, step, results):
    name = step["name"]
    if session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        await subscribe_step(session, step, results)
        return
    wanted = resolve(step["listen"], results)
    until = resolve(step.get("until", []), results)
    seen = []
    async with listen(
        session,
        resources_list_changed=wanted.get("resources_list_changed", False),
        resource_subscriptions=wanted.get("resource_subscriptions", []),
    ) as subscription:
        honored = subscription.honored.model_dump(by_alias=True, exclude_none=True)
        await run_steps(session, step.get("steps", []), results)
        with anyio.move_on_after(step.get("timeout", 30)):
            async for event in subscription:
                seen.append(event_record(event))
                if satisfied(until, seen):
                    break
    emit(event="listen", name=name, honored=honored, events=seen, complete=satisfied(until, seen))


async def run_steps(session, steps, results=None):
    results = {} if results is None else results
    for step in steps:
        name = step["name"]
        if step.get("list_resources"):
            resources, pages = await list_all(session)
            listed = [
                {"uri": str(r.uri), "name": r.name, "title": r.title, "description": r.description,
                 "mime_type": r.mime_type}
                for r in resources
            ]
            results[name] = listed
            emit(event="resources", name=name, pages=pages, resources=listed)
            continue
        if "read_resource" in step:
            try:
                read = await session.read_resource(resolve(step["read_resource"], results))
            except MCPError as error:
                emit(event="read_failed", name=name, error=str(error), code=error.error.code)
                continue
            contents = [
                {"uri": str(c.uri), "mime_type": c.mime_type, "text": getattr(c, "text", None),
                 "meta": c.meta}
                for c in read.contents
            ]
            results[name] = contents
            emit(event="read", name=name, contents=contents)
            continue
        if "run" in step:
            argv = [str(a) for a in resolve(step["run"], results)]
            done = await anyio.to_thread.run_sync(lambda: subprocess.run(argv, capture_output=True, text=True))
            try:
                results[name] = json.loads(done.stdout)
            except ValueError:
                results[name] = done.stdout
            emit(event="ran", name=name, code=done.returncode, stdout=done.stdout, stderr=done.stderr)
            continue
        if "listen" in step:
            await listen_step(session, step, results)
            continue
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
    async with ClientSession(read, write, message_handler=on_message) as session:
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
