"""Warden in front of the OpenAI Agents SDK's function tools.

    from agents import Agent, Runner, function_tool
    from warden.integrations import reads, runs
    from warden.integrations.openai_agents import WardenGuard

    @function_tool
    def shell(command: str) -> str: ...

    # Once per process, shared: warden.AsyncClient() reads WARDEN_ENDPOINT
    # and WARDEN_TOKEN_FILE (a harness token, never an approver's).
    guard = WardenGuard(warden.AsyncClient(), warden.Actor("alice", "openai-agents", "run-1"),
                        tools={"read_file": reads("path"), "shell": runs("command")})
    agent = Agent(name="helper", tools=guard.protect(read_file, shell, deploy))

``protect`` adds a tool input guardrail to each tool (a function tool, as
``@function_tool`` makes): before the tool runs, its call is asked of Warden
(once per tool call id), and a call that is not allowed is rejected with a
message to the model that names the policy and its reason; the tool's
function never runs. What a person approved runs once: the same tool call
id asked again (by this guard, a second one, or after a restart) is refused,
naming the approval's use.

Approvals, two ways (``on_pending``):

- ``"wait"`` (default): the guardrail waits for the approver through PENDING
  until the approval's deadline, like ``warden.Client.check``.
- ``"interrupt"``: the tool's ``needs_approval`` asks Warden first, and a
  PENDING call interrupts the run (``result.interruptions``), as the SDK's
  human-in-the-loop does. ``await guard.resolve(result)`` waits for Warden's
  approvals and returns the run state with each interruption approved or
  rejected as the approver decided; run it again with
  ``Runner.run(agent, state)`` and the same guard, which holds the approved
  calls' ALLOWs (each is given once) until they run. Approving in the SDK's
  state by hand does not let a call through: the guardrail still asks
  Warden when the tool is about to run, and rejects anything Warden has not
  allowed.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any, Literal, Union

from agents import FunctionTool, RunContextWrapper, ToolGuardrailFunctionOutput, ToolInputGuardrail
from agents import ToolInputGuardrailData
from agents.result import RunResult, RunResultStreaming
from agents.run_state import RunState

from .._model import Actor
from ._gate import AnyClient, Gate, Mapper, ToolMapping, Verdict, actor_failed

ActorSource = Union[Actor, Callable[[RunContextWrapper[Any]], Actor]]


class WardenGuard:
    """Asks Warden before each protected tool runs.

    ``actor`` is who acts (an :class:`warden.Actor`, or a function of the
    run's context that gives one); ``tools`` maps tool names to the request
    each really is (see :mod:`warden.integrations`); any other tool is a
    ``tool.call`` on ``server``.
    """

    def __init__(
        self,
        client: AnyClient,
        actor: ActorSource,
        *,
        tools: Mapping[str, Mapper] | None = None,
        server: str = "openai-agents",
        on_pending: Literal["wait", "interrupt"] = "wait",
    ) -> None:
        if on_pending not in ("wait", "interrupt"):
            raise ValueError('on_pending: "wait" or "interrupt"')
        self._gate = Gate(client, ToolMapping(server, dict(tools or {})), "openai-agents")
        self._actor = actor
        self.on_pending = on_pending
        self.guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._check, name="warden"
        )

    def actor_of(self, context: RunContextWrapper[Any]) -> Actor:
        return self._actor if isinstance(self._actor, Actor) else self._actor(context)

    def protect(self, *tools: FunctionTool) -> list[FunctionTool]:
        """The tools with Warden's guardrail (and, for ``"interrupt"``, its
        ``needs_approval``). The originals are not changed."""
        protected = []
        for tool in tools:
            if not isinstance(tool, FunctionTool):
                raise TypeError(f"{tool!r}: WardenGuard protects function tools")
            changes: dict[str, Any] = {"tool_input_guardrails": [*(tool.tool_input_guardrails or []), self.guardrail]}
            if self.on_pending == "interrupt":
                changes["needs_approval"] = self._needs_approval(tool.name)
            protected.append(replace(tool, **changes))
        return protected

    async def _check(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        wait = self.on_pending == "wait"
        verdict = await self._ask(
            context, context.tool_name, context.tool_arguments, context.tool_call_id, wait=wait, runs=True
        )
        if verdict.allowed:
            return ToolGuardrailFunctionOutput.allow(output_info=verdict.decision)
        return ToolGuardrailFunctionOutput.reject_content(verdict.message, output_info=verdict.decision)

    async def _ask(
        self, context: RunContextWrapper[Any], tool: str, arguments: str, call_id: str, *, wait: bool, runs: bool
    ) -> Verdict:
        try:
            parsed = json.loads(arguments or "{}")
            if not isinstance(parsed, dict):
                raise ValueError("the arguments are not a JSON object")
        except Exception as error:  # noqa: BLE001 - fail closed
            return Verdict(False, f"Warden did not allow `{tool}`: the call could not be checked ({error})")
        try:
            actor = self.actor_of(context)
            if not isinstance(actor, Actor):
                raise TypeError(f"it gave a {type(actor).__name__}, not a warden.Actor")
        except Exception as error:  # noqa: BLE001 - fail closed
            return Verdict(False, f"Warden did not allow `{tool}`: {actor_failed(error)}")
        return await self._gate.check(actor, tool, parsed, call_id, wait=wait, runs=runs)

    def _needs_approval(self, tool: str) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
        async def needs_approval(context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str) -> bool:
            # Only PENDING interrupts. A DENY or an error runs into the
            # guardrail, which asks again (the same request) and rejects.
            try:
                actor = self.actor_of(context)
            except Exception:  # noqa: BLE001 - the guardrail says why, and rejects
                return False
            verdict = await self._gate.check(actor, tool, arguments, call_id, wait=False, runs=False)
            return verdict.pending

        return needs_approval

    async def resolve(self, result: RunResult | RunResultStreaming) -> RunState[Any]:
        """Waits for Warden's decision on each of ``result``'s interruptions
        (until the approvals' deadlines) and returns the run state with each
        approved or rejected accordingly, to run again."""
        state = result.to_state()
        for item in result.interruptions:
            raw = item.raw_item
            tool = str(item.tool_name or getattr(raw, "name", ""))
            arguments = str(getattr(raw, "arguments", "") or "{}")
            call_id = str(getattr(raw, "call_id", "") or "")
            verdict = await self._ask(result.context_wrapper, tool, arguments, call_id, wait=True, runs=False)
            if verdict.allowed:
                state.approve(item)
            else:
                state.reject(item, rejection_message=verdict.message)
        return state
