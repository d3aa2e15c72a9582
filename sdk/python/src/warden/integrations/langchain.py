"""Warden in front of LangChain v1 agents' and LangGraph's tool calls.

    from langchain.agents import create_agent
    from warden.integrations import reads, runs
    from warden.integrations.langchain import WardenMiddleware

    warden_guard = WardenMiddleware(
        warden.Client(),
        lambda call: warden.Actor("alice", "langchain", call.runtime.config["configurable"]["thread_id"]),
        tools={"read_file": reads("path"), "shell": runs("command")},
    )
    agent = create_agent(model, tools=[read_file, shell, deploy], middleware=[warden_guard])

``wrap_tool_call`` asks Warden before each tool runs. A call that is not
allowed does not run: the model gets a ``ToolMessage`` (status ``error``)
that names the policy and its reason.

Put it last in ``middleware=[…]``: the first is outermost, and a middleware
inside Warden's could change a call after Warden checked it.

Each tool call is one Warden request, keyed by the tool call's id: LangGraph
re-runs a node when a graph resumes, and the same call asked again is the
same request (the same approval), never a second one.

Approvals (``on_pending``): ``"wait"`` (default) waits for the approver until
the approval's deadline; ``"interrupt"`` pauses the graph with LangGraph's
``interrupt()`` (the value names the Warden approval; a checkpointer is
needed), and resuming asks Warden again, so the resume value itself lets
nothing through: the call runs only once Warden allows it (waiting, if still
pending, until the deadline).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Union

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from .._model import Actor
from ._gate import AnyClient, Gate, Mapper, ToolMapping, Verdict

ActorSource = Union[Actor, Callable[[ToolCallRequest], Actor]]
Handler = Callable[[ToolCallRequest], Union[ToolMessage, Command[Any]]]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[Union[ToolMessage, Command[Any]]]]


class WardenMiddleware(AgentMiddleware):
    """Asks Warden before each tool call of a LangChain agent.

    ``actor``: an :class:`warden.Actor`, or a function of the tool call
    request that gives one (e.g. the session from the graph's thread id).
    ``tools`` maps tool names to the request each really is (see
    :mod:`warden.integrations`); any other tool is a ``tool.call`` on
    ``server``. Synchronous agents (``invoke``) need a ``warden.Client``;
    asynchronous ones (``ainvoke``) take either client.
    """

    def __init__(
        self,
        client: AnyClient,
        actor: ActorSource,
        *,
        tools: Mapping[str, Mapper] | None = None,
        server: str = "langchain",
        on_pending: Literal["wait", "interrupt"] = "wait",
    ) -> None:
        super().__init__()
        if on_pending not in ("wait", "interrupt"):
            raise ValueError('on_pending: "wait" or "interrupt"')
        self._gate = Gate(client, ToolMapping(server, dict(tools or {})), "langchain")
        self._actor = actor
        self.on_pending = on_pending

    @property
    def name(self) -> str:
        return "WardenMiddleware"

    def _call(self, request: ToolCallRequest) -> tuple[Actor, str, Mapping[str, Any], str]:
        call = request.tool_call
        actor = self._actor if isinstance(self._actor, Actor) else self._actor(request)
        return actor, call["name"], call.get("args") or {}, call.get("id") or ""

    @staticmethod
    def _refused(request: ToolCallRequest, verdict: Verdict) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(content=verdict.message, tool_call_id=call.get("id") or "", name=call["name"], status="error")

    @staticmethod
    def _pause(verdict: Verdict) -> None:
        """Pauses the graph on a pending approval; returns once resumed."""
        decision = verdict.decision
        assert decision is not None
        interrupt(
            {
                "warden_approval": decision.approval_id,
                "policy_ids": list(decision.policy_ids),
                "reasons": list(decision.reasons),
                "expires_at": decision.expires_at.isoformat() if decision.expires_at else None,
            }
        )

    def wrap_tool_call(self, request: ToolCallRequest, handler: Handler) -> ToolMessage | Command[Any]:
        try:
            actor, tool, arguments, call_id = self._call(request)
        except Exception as error:  # noqa: BLE001 - fail closed
            return self._refused(request, Verdict(False, f"Warden did not allow the call: {error}"))
        wait = self.on_pending == "wait"
        verdict = self._gate.check_sync(actor, tool, arguments, call_id, wait=wait, runs=wait)
        if not wait:
            if verdict.pending:
                self._pause(verdict)
            verdict = self._gate.check_sync(actor, tool, arguments, call_id, wait=True, runs=True)
        if not verdict.allowed:
            return self._refused(request, verdict)
        return handler(request)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncHandler) -> ToolMessage | Command[Any]:
        try:
            actor, tool, arguments, call_id = self._call(request)
        except Exception as error:  # noqa: BLE001 - fail closed
            return self._refused(request, Verdict(False, f"Warden did not allow the call: {error}"))
        wait = self.on_pending == "wait"
        verdict = await self._gate.check(actor, tool, arguments, call_id, wait=wait, runs=wait)
        if not wait:
            if verdict.pending:
                self._pause(verdict)
            verdict = await self._gate.check(actor, tool, arguments, call_id, wait=True, runs=True)
        if not verdict.allowed:
            return self._refused(request, verdict)
        return await handler(request)
