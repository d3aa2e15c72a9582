#!/usr/bin/env python3
"""Scripted MCP client for end-to-end tests (official Python SDK, `mcp` 2.3.0).

Usage: python mcp_client.py PLAN_JSON      (or: python mcp_client.py @plan.json)

PLAN: {"transport": "stdio", "command": "...", "args": [...], "env": {...}}
   or {"transport": "http", "url": "http://127.0.0.1:PORT/mcp", "headers": {...}}
plus optional keys:
  "protocol_version": omitted/"auto" -> SDK default: probe `server/discover` at 2026-07-28,
                      fall back to `initialize` (offering 2025-11-25) on any JSON-RPC error;
                      "2024-11-05".."2025-11-25" -> plain `initialize` offering exactly that version;
                      "2026-07-28" -> stateless 2026 envelope adopted directly (no handshake).
  "timeout": per-request read timeout in seconds (default 30)
  "capabilities": subset of ["roots", "sampling", "elicitation"] to declare (default none);
                  roots -> plan "roots" list, sampling -> canned reply, elicitation -> decline.
  "log_level": a logging level the client asks for (at 2026-07-28 stamped into every request's
               `_meta`; before, nothing is sent unless a "set_log_level" step asks).
  "env_exact": true -> a stdio server gets exactly "env" (the SDK otherwise adds HOME, LOGNAME,
               PATH, SHELL, TERM and USER from this process's environment).
  "steps": list of {"op": ...}; see run_step() for the ops and their output lines.

Output: one JSON object per line per step (flushed), then
  {"op":"done","notifications":[unique methods, first-seen order],"counts":{method:n},
   "protocol_version":...,"server_info":{...}}
A failing step prints {"op":..., "error":{"code":int,"message":str}} and the script goes on
(code = JSON-RPC code for MCPError, -1 for any other exception). A failed connect or a closed
connection prints {"op":"fatal","error":"..."} and exits 1.
"""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from typing import Any

import anyio
import mcp.client.session as _session_mod
import mcp.client.stdio as _stdio_mod
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated, ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

warnings.simplefilter("ignore", MCPDeprecationWarning)  # ping/progress are "deprecated" at 2026-07-28


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, default=str), flush=True)


class Fatal(Exception):
    """The connection is gone: stop running steps."""


def flatten(exc: BaseException) -> BaseException:
    """Unwrap single-member exception groups raised by anyio task groups."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def error_of(exc: BaseException) -> dict[str, Any]:
    exc = flatten(exc)
    if isinstance(exc, MCPError):
        return {"code": exc.code, "message": exc.message}
    return {"code": -1, "message": f"{type(exc).__name__}: {exc}"}


class Notifications:
    """Records every server notification the session surfaces (incl. progress and log messages)."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.counts: dict[str, int] = {}
        self.events: dict[str, anyio.Event] = {}

    def event(self, method: str) -> anyio.Event:
        return self.events.setdefault(method, anyio.Event())

    def record(self, method: str) -> None:
        if method not in self.counts:
            self.order.append(method)
        self.counts[method] = self.counts.get(method, 0) + 1
        self.event(method).set()

    async def handler(self, message: Any) -> None:
        if isinstance(message, Exception):  # transport-level fault: log only
            print(f"mcp_client: transport exception: {message!r}", file=sys.stderr, flush=True)
            return
        self.record(message.method)


LISTEN_EVENTS = {
    ToolsListChanged: "notifications/tools/list_changed",
    PromptsListChanged: "notifications/prompts/list_changed",
    ResourcesListChanged: "notifications/resources/list_changed",
    ResourceUpdated: "notifications/resources/updated",
}
"""What a `subscriptions/listen` event is recorded as, prefixed `listen:` (2026-07-28)."""


def make_transport(plan: dict[str, Any]) -> Any:
    """Build what `Client(...)` connects to: stdio parameters or a streamable-HTTP transport."""
    kind = plan.get("transport", "stdio")
    if kind == "stdio":
        if plan.get("env_exact"):
            # The SDK merges get_default_environment() under "env"; it has no parameter to stop that.
            _stdio_mod.get_default_environment = dict
        return StdioServerParameters(command=plan["command"], args=plan.get("args", []), env=plan.get("env"))
    if kind == "http":

        @contextlib.asynccontextmanager
        async def http_transport():  # custom headers need our own httpx2 client
            async with create_mcp_http_client(headers=plan.get("headers") or None) as http:
                async with streamable_http_client(plan["url"], http_client=http) as streams:
                    yield streams

        return http_transport()
    raise ValueError(f"unknown transport {kind!r}")


def connect_mode(version: str | None) -> str:
    """Map the plan's protocol_version to `Client(mode=...)`, pinning the initialize offer if needed."""
    if version in (None, "auto"):
        return "auto"
    if version in MODERN_PROTOCOL_VERSIONS:
        return version
    if version in HANDSHAKE_PROTOCOL_VERSIONS:
        # ClientSession.initialize() always offers the module constant LATEST_HANDSHAKE_VERSION
        # (2025-11-25) and the SDK has no parameter for it, so override it for this process.
        _session_mod.LATEST_HANDSHAKE_VERSION = version
        return "legacy"
    raise ValueError(f"unsupported protocol_version {version!r}")


def capability_callbacks(plan: dict[str, Any]) -> dict[str, Any]:
    wanted, kwargs = set(plan.get("capabilities", [])), {}
    if "roots" in wanted:
        roots = [types.Root(uri=r, name=None) for r in plan.get("roots", [])]

        async def list_roots(ctx: Any) -> types.ListRootsResult:
            return types.ListRootsResult(roots=roots)

        kwargs["list_roots_callback"] = list_roots
    if "sampling" in wanted:

        async def sample(ctx: Any, params: Any) -> types.CreateMessageResult:
            reply = types.TextContent(type="text", text="sampled reply from mcp_client.py")
            return types.CreateMessageResult(role="assistant", content=reply, model="mcp-client-test")

        kwargs["sampling_callback"] = sample
    if "elicitation" in wanted:

        async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
            return types.ElicitResult(action="decline")

        kwargs["elicitation_callback"] = elicit
    return kwargs


def texts(blocks: list[Any]) -> str:
    """Concatenate (newline-joined) the text of text content blocks / text resource contents."""
    return "\n".join(b.text for b in blocks if isinstance(getattr(b, "text", None), str))


async def paginate(fetch: Any, field: str) -> list[Any]:
    items, cursor = [], None
    while True:
        page = await fetch(cursor=cursor)
        items += getattr(page, field)
        cursor = page.next_cursor
        if not cursor:
            return items


async def run_step(client: Client, notes: Notifications, step: dict[str, Any], background: Any) -> dict[str, Any]:
    op = step["op"]
    out: dict[str, Any] = {"op": op}
    if op == "list_tools":
        out["tools"] = [t.name for t in await paginate(client.list_tools, "tools")]
    elif op == "call_tool":
        progress: list[dict[str, Any]] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append({"progress": value, "total": total, "message": message})

        result = await client.call_tool(
            step["name"], step.get("arguments") or {},
            progress_callback=on_progress if step.get("progress") else None,  # sets _meta.progressToken
        )
        out.update(is_error=result.is_error, text=texts(result.content), structured=result.structured_content)
        if step.get("progress"):
            await anyio.sleep(0.05)  # progress callbacks run as tasks; let stragglers land
            out["progress"] = progress
    elif op == "list_resources":
        out["resources"] = [str(r.uri) for r in await paginate(client.list_resources, "resources")]
    elif op == "read_resource":
        result = await client.read_resource(step["uri"])
        out.update(uri=step["uri"], text=texts(result.contents), mime_types=[c.mime_type for c in result.contents])
    elif op == "list_resource_templates":
        templates = await paginate(client.list_resource_templates, "resource_templates")
        out["templates"] = [t.uri_template for t in templates]
    elif op == "complete":
        ref: Any = (
            types.PromptReference(type="ref/prompt", name=step["prompt"])
            if "prompt" in step
            else types.ResourceTemplateReference(type="ref/resource", uri=step["template"])
        )
        result = await client.complete(ref, step["argument"], step.get("context"))
        out.update(values=result.completion.values, total=result.completion.total)
    elif op == "listen":
        # Opens a `subscriptions/listen` stream for the rest of the run; each event is recorded as
        # "listen:<notification method>" (see wait_notification).
        wanted = {k: step[k] for k in ("tools_list_changed", "prompts_list_changed", "resources_list_changed") if k in step}
        subscription = await background.stack.enter_async_context(
            client.listen(**wanted, resource_subscriptions=step.get("resource_subscriptions", ()))
        )

        async def consume() -> None:
            async for event in subscription:
                notes.record("listen:" + LISTEN_EVENTS[type(event)])

        background.tasks.start_soon(consume)
        out["honored"] = subscription.honored.model_dump(mode="json", by_alias=True, exclude_none=True)
    elif op == "set_log_level":
        await client.set_logging_level(step["level"])
    elif op == "list_prompts":
        out["prompts"] = [p.name for p in await paginate(client.list_prompts, "prompts")]
    elif op == "get_prompt":
        result = await client.get_prompt(step["name"], step.get("arguments") or None)
        out["messages"] = [{"role": m.role, "text": texts([m.content])} for m in result.messages]
    elif op == "ping":
        await client.send_ping()
    elif op == "wait_notification":
        out["method"] = step["method"]
        with anyio.move_on_after(step.get("timeout", 10)):
            await notes.event(step["method"]).wait()  # already set if it arrived earlier
        out["received"] = notes.event(step["method"]).is_set()
    elif op == "wait_stdin_line":
        line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        if not line:
            out["eof"] = True
    elif op == "sleep":
        await anyio.sleep(step.get("seconds", 0))
    else:
        raise ValueError(f"unknown op {op!r}")
    return out


class Background:
    """What steps leave running for the rest of the plan (listen streams)."""

    def __init__(self, stack: contextlib.AsyncExitStack, tasks: Any) -> None:
        self.stack = stack
        self.tasks = tasks


async def run(plan: dict[str, Any]) -> int:
    notes = Notifications()
    timeout = float(plan.get("timeout", 30))
    try:
        client = Client(
            make_transport(plan),
            mode=connect_mode(plan.get("protocol_version")),
            read_timeout_seconds=timeout,
            message_handler=notes.handler,
            cache=None,  # always hit the server: tests change server-side state between steps
            client_info=types.Implementation(name="gates-mcp-e2e-client", version="1.0.0"),
            log_level=plan.get("log_level"),
            **capability_callbacks(plan),
        )
        async with client, contextlib.AsyncExitStack() as stack, anyio.create_task_group() as tasks:
            background = Background(stack, tasks)
            for step in plan.get("steps", []):
                try:
                    emit(await run_step(client, notes, step, background))
                except Exception as exc:  # noqa: BLE001 - every step failure is reported, not raised
                    err = error_of(exc)
                    if err["code"] == types.CONNECTION_CLOSED and err["message"] == "Connection closed":
                        raise Fatal(f"connection closed during {step.get('op')}") from exc
                    emit({"op": step.get("op"), "error": err})
            info = client.server_info
            emit({
                "op": "done", "notifications": notes.order, "counts": notes.counts,
                "protocol_version": client.protocol_version,
                "server_info": info.model_dump(mode="json", exclude_none=True) if info else None,
            })
            tasks.cancel_scope.cancel()
        return 0
    except BaseException as exc:  # noqa: BLE001 - connect failures arrive wrapped in exception groups
        exc = flatten(exc)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        emit({"op": "fatal", "error": str(exc) if isinstance(exc, Fatal) else error_of(exc)["message"]})
        return 1


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: mcp_client.py PLAN_JSON | @plan.json")
    arg = sys.argv[1]
    if arg.startswith("@"):
        with open(arg[1:], encoding="utf-8") as f:
            arg = f.read()
    sys.exit(anyio.run(run, json.loads(arg)))


if __name__ == "__main__":
    main()
