"""WardenGuard with the real OpenAI Agents SDK, driven by the SDK's own
ScriptedModel (no network), against a real wardend: a denied tool never runs,
an allowed one runs, a pending one runs after the approver approves."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="openai-agents is installed by scripts/test")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no network: nothing to export to

from agents import Agent, Runner, function_tool  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

import warden  # noqa: E402
from conftest import Wardend  # noqa: E402
from guarded import assert_used_once_then_refused, guard_policies  # noqa: E402
from warden.integrations import deletes, writes  # noqa: E402
from warden.integrations.openai_agents import WardenGuard  # noqa: E402


class Effects:
    """The tools, with what they did."""

    def __init__(self) -> None:
        self.deployed: list[str] = []

        @function_tool
        def write_note(path: str, text: str) -> str:
            """Writes a note to a file."""
            Path(path).write_text(text)
            return f"wrote {len(text)} bytes to {path}"

        @function_tool
        def deploy(service: str) -> str:
            """Deploys a service."""
            self.deployed.append(service)
            return f"deployed {service}"

        @function_tool
        def remove_folder(path: str) -> str:
            """Removes a folder and everything in it."""
            shutil.rmtree(path)
            return f"removed {path}"

        self.write_note, self.deploy, self.remove_folder = write_note, deploy, remove_folder


@pytest.fixture
def monitor(own_wardend, tmp_path: Path) -> tuple[Wardend, Path]:
    notes = tmp_path / "notes"
    notes.mkdir()
    return own_wardend(guard_policies(tmp_path / "policies", notes)), notes


def guarded_agent(
    monitor: Wardend, model: ScriptedModel, effects: Effects, session: str, **options: Any
) -> tuple[Agent[Any], WardenGuard]:
    client = warden.AsyncClient(monitor.endpoint, monitor.token("harness"))
    tools = {"write_note": writes("path"), "remove_folder": deletes("path")}
    guard = WardenGuard(client, warden.Actor("alice", "openai-agents", session), tools=tools, **options)
    agent = Agent(name="helper", model=model, tools=guard.protect(effects.write_note, effects.deploy, effects.remove_folder))
    return agent, guard


def tool_outputs(model: ScriptedModel) -> list[str]:
    """What the model was told about its tool calls, in its last input."""
    last = model.last_call
    assert last is not None
    return [str(item.get("output")) for item in last.input if isinstance(item, dict) and item.get("type") == "function_call_output"]


def test_an_allowed_tool_runs_and_a_denied_one_never_does(monitor, tmp_path: Path) -> None:
    wardend, notes = monitor
    effects = Effects()
    model = ScriptedModel(
        [
            [
                function_call("write_note", {"path": str(notes / "todo.md"), "text": "ship it"}, call_id="call-ok"),
                function_call("write_note", {"path": str(notes / "prod.env"), "text": "TOKEN=x"}, call_id="call-env"),
            ],
            [assistant_message("done")],
        ]
    )
    agent, _ = guarded_agent(wardend, model, effects, "oa-allow-deny")
    result = asyncio.run(Runner.run(agent, "write my notes"))
    assert result.final_output == "done"
    model.assert_complete()
    # The effect of the allowed call happened; the denied one's did not.
    assert (notes / "todo.md").read_text() == "ship it"
    assert not (notes / "prod.env").exists()
    outputs = tool_outputs(model)
    assert any(o.startswith("wrote 7 bytes") for o in outputs), outputs
    refusal = next(o for o in outputs if "Warden did not allow" in o)
    assert "notes.no-env" in refusal and "would hold credentials" in refusal


def test_a_pending_tool_waits_for_the_approver_then_runs(monitor) -> None:
    wardend, _ = monitor
    effects = Effects()
    model = ScriptedModel(
        [[function_call("deploy", {"service": "billing"}, call_id="call-deploy")], [assistant_message("deployed")]]
    )
    agent, _ = guarded_agent(wardend, model, effects, "oa-wait")
    approver = wardend.approver()

    async def main() -> Any:
        run = asyncio.create_task(Runner.run(agent, "deploy billing"))
        approval = await asyncio.to_thread(approver.pending, lambda a: a.request.actor.session == "oa-wait")
        assert effects.deployed == [], "the tool ran before anyone approved"
        assert approval.request.tool.name == "deploy" and '"billing"' in approval.request.tool.arguments_json
        await asyncio.to_thread(approver.resolve, approval.approval_id, True, "ship it")
        return await run

    result = asyncio.run(main())
    approver.close()
    assert result.final_output == "deployed"
    assert effects.deployed == ["billing"]


def test_interruptions_are_warden_approvals(monitor) -> None:
    wardend, _ = monitor
    effects = Effects()
    model = ScriptedModel(
        [
            [
                function_call("deploy", {"service": "billing"}, call_id="call-a"),
                function_call("deploy", {"service": "search"}, call_id="call-b"),
            ],
        ]
    )
    agent, guard = guarded_agent(wardend, model, effects, "oa-interrupt", on_pending="interrupt")
    approver = wardend.approver()

    async def main() -> Any:
        first = await Runner.run(agent, "deploy both")
        # The run stops with the SDK's interruptions; nothing ran.
        assert len(first.interruptions) == 2 and effects.deployed == []
        # A harness that approves in the SDK by itself gets nowhere: the
        # guardrail asks Warden, where the approvals still wait.
        forged = first.to_state()
        for item in first.interruptions:
            forged.approve(item)
        model.enqueue([assistant_message("forged")])
        forged_result = await Runner.run(agent, forged)
        assert effects.deployed == [], "an approval in the SDK's state alone let a tool run"
        assert forged_result.final_output == "forged"
        assert sum("waits for a person's approval" in o for o in tool_outputs(model)) == 2, tool_outputs(model)
        # needs_approval, the guardrail and the forged rerun asked about the
        # same two calls: two approvals wait, not six.
        assert len(approver.listed(lambda a: a.request.actor.session == "oa-interrupt")) == 2
        # Warden's approver answers: one yes, one no.
        for service, approve in (("billing", True), ("search", False)):
            approval = await asyncio.to_thread(
                approver.pending,
                lambda a, s=service: a.request.actor.session == "oa-interrupt" and f'"{s}"' in a.request.tool.arguments_json,
            )
            await asyncio.to_thread(approver.resolve, approval.approval_id, approve, "" if approve else "not today")
        state = await guard.resolve(first)
        model.enqueue([assistant_message("one of two")])
        return await Runner.run(agent, state)

    result = asyncio.run(main())
    approver.close()
    assert result.final_output == "one of two"
    assert effects.deployed == ["billing"]
    outputs = tool_outputs(model)
    assert any("not today" in o for o in outputs), outputs


def test_a_tool_call_id_runs_once(monitor) -> None:
    wardend, _ = monitor
    effects = Effects()
    deploy = [function_call("deploy", {"service": "billing"}, call_id="call_1")]
    # The model sends the same call id and arguments in a later turn.
    model = ScriptedModel([deploy, [assistant_message("ok")], deploy, [assistant_message("again")]])
    agent, _ = guarded_agent(wardend, model, effects, "oa-once")
    approver = wardend.approver()

    async def main() -> Any:
        run = asyncio.create_task(Runner.run(agent, "deploy"))
        approval = await asyncio.to_thread(approver.pending, lambda a: a.request.actor.session == "oa-once")
        await asyncio.to_thread(approver.resolve, approval.approval_id, True, "once")
        await run
        return await Runner.run(agent, "deploy again")

    result = asyncio.run(main())
    approver.close()
    assert result.final_output == "again"
    assert effects.deployed == ["billing"], "one approval ran the call twice"
    assert any("was used" in o for o in tool_outputs(model)), tool_outputs(model)


def test_a_second_guard_does_not_run_an_approved_deletion_again(monitor) -> None:
    """A person approved one deletion. A second guard (a restarted harness,
    another worker) given the same user, session and tool call id does not
    delete again: the refusal names the spent approval, and is recorded."""
    wardend, notes = monitor
    build = notes / "build"
    build.mkdir()
    (build / "out.o").write_text("first build")
    remove = [function_call("remove_folder", {"path": str(build)}, call_id="call_rm")]
    model = ScriptedModel([remove, [assistant_message("removed")]])
    agent, _ = guarded_agent(wardend, model, Effects(), "oa-rm")
    approver = wardend.approver()

    async def main() -> Any:
        run = asyncio.create_task(Runner.run(agent, "remove the build"))
        approval = await asyncio.to_thread(approver.pending, lambda a: a.request.actor.session == "oa-rm")
        assert build.exists(), "removed before anyone approved"
        await asyncio.to_thread(approver.resolve, approval.approval_id, True, "once")
        await run
        return approval

    approval = asyncio.run(main())
    assert not build.exists()

    build.mkdir()
    (build / "out.o").write_text("second build")
    again = ScriptedModel([remove, [assistant_message("refused")]])
    second, _ = guarded_agent(wardend, again, Effects(), "oa-rm")
    assert asyncio.run(Runner.run(second, "remove the build")).final_output == "refused"
    assert (build / "out.o").read_text() == "second build", "the second guard ran the approved deletion again"
    (refusal,) = tool_outputs(again)
    assert f"approval `{approval.approval_id}` was used" in refusal, refusal
    assert "notes.delete-approved" in refusal, refusal
    assert approver.listed(lambda a: a.request.actor.session == "oa-rm") == [], "a new approval was asked for"
    approver.close()
    assert_used_once_then_refused(wardend, approval.approval_id)
