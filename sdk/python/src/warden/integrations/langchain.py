"""Warden in front of LangChain v1 agents' and LangGraph's tool calls.

    from langchain.agents import create_agent
    from warden.integrations import reads, runs
    from warden.integrations.langchain import WardenMiddleware

    warden_guard = WardenMiddleware(  # once per process, shared by every agent
        warden.Client(),  # WARDEN_ENDPOINT and WARDEN_TOKEN_FILE (a harness token)
        thread_actor("alice"),  # the session is the graph's thread id
        tools={"read_file": reads("path"), "shell": runs("command")},
    )
    agent = create_agent(model, tools=[read_file, shell, deploy], middleware=[warden_guard])
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "ticket-4711"}})

``wrap_tool_call`` asks Warden before each tool runs. A call that is not
allowed does not run: the model gets a ``ToolMessage`` (status ``error``)
that names the policy and its reason.

Put it last in ``middleware=[…]``: the first is outermost, and a middleware
inside Warden's could change a call after Warden checked it.

Each tool call is one Warden request, keyed by the tool call's id: LangGraph
re-runs a node when a graph resumes, and the same call asked again is the
same request (the same approval), never a second one. What a person
approved runs once: a call id asked again after it ran (another worker, a
restarted process, a model repeating the id) is refused, naming the
approval's use.

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
from ._gate import AnyClient, Gate, Mapper, ToolMapping, Verdict, actor_failed

ActorSource = Union[Actor, Callable[[ToolCallRequest], Actor]]
Handler = Callable[[ToolCallRequest], Union[ToolMessage, Command[Any]]]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[Union[ToolMessage, Command[Any]]]]


def thread_actor(user: str, agent: str = "langchain") -> Callable[[ToolCallRequest], Actor]:
    """An actor function for :class:`WardenMiddleware`: ``user`` and
    ``agent``, in the session that is the graph's thread id (the
    ``thread_id`` of the config the agent is invoked with)."""

    def actor(request: ToolCallRequest) -> Actor:
        config = getattr(request.runtime, "config", None) or {}
        thread = (config.get("configurable") or {}).get("thread_id")
        if not thread:
            raise ValueError(f"the agent was invoked without a thread id, which is the Warden session: {INVOKE_WITH_THREAD}")
        return Actor(user, agent, str(thread))

    return actor


INVOKE_WITH_THREAD = 'invoke it with config={"configurable": {"thread_id": "…"}}'


def _actor_failed(error: Exception) -> str:
    """Why the actor could not be told, in words."""
    missing = error.args[0] if isinstance(error, KeyError) and error.args else None
    hint = INVOKE_WITH_THREAD if missing in ("thread_id", "configurable") else ""
    return actor_failed(error, hint)


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
        if isinstance(self._actor, Actor):
            actor = self._actor
        else:
            try:
                actor = self._actor(request)
            except Exception as error:  # noqa: BLE001 - said in words, and nothing runs
                raise ValueError(_actor_failed(error)) from error
            if not isinstance(actor, Actor):
                raise ValueError(f"the actor function gave a {type(actor).__name__}, not a warden.Actor")
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
            return self._refused(request, Verdict(False, f"Warden did not allow `{request.tool_call['name']}`: {error}"))
        # An ALLOW runs at once (an approval's ALLOW is given once: asking
        # again would be refused). With "interrupt", PENDING pauses the
        # graph; once resumed, Warden is asked again, waiting if need be.
        wait = self.on_pending == "wait"
        verdict = self._gate.check_sync(actor, tool, arguments, call_id, wait=wait, runs=True)
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
            return self._refused(request, Verdict(False, f"Warden did not allow `{request.tool_call['name']}`: {error}"))
        wait = self.on_pending == "wait"
        verdict = await self._gate.check(actor, tool, arguments, call_id, wait=wait, runs=True)
        if verdict.pending:
            self._pause(verdict)
            verdict = await self._gate.check(actor, tool, arguments, call_id, wait=True, runs=True)
        if not verdict.allowed:
            return self._refused(request, verdict)
        return await handler(request)
