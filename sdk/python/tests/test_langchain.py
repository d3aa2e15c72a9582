"""WardenMiddleware with a real LangChain v1 agent (create_agent, on
LangGraph) driven by langchain-core's GenericFakeChatModel (no network),
against a real wardend."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="langchain is installed by scripts/test")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command  # noqa: E402

import warden  # noqa: E402
from conftest import Wardend  # noqa: E402
from guarded import assert_used_once_then_refused, guard_policies  # noqa: E402
from warden.integrations import deletes, writes  # noqa: E402
from warden.integrations.langchain import WardenMiddleware, thread_actor  # noqa: E402


class ScriptedChatModel(GenericFakeChatModel):
    """langchain-core's fake chat model, which answers from its script; an
    agent binds tools to its model, which the script ignores."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self


def calls(*tool_calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in tool_calls])


class Effects:
    def __init__(self) -> None:
        self.deployed: list[str] = []
        effects = self

        @tool
        def write_note(path: str, text: str) -> str:
            """Writes a note to a file."""
            Path(path).write_text(text)
            return f"wrote {len(text)} bytes to {path}"

        @tool
        def deploy(service: str) -> str:
            """Deploys a service."""
            effects.deployed.append(service)
            return f"deployed {service}"

        @tool
        def remove_folder(path: str) -> str:
            """Removes a folder and everything in it."""
            shutil.rmtree(path)
            return f"removed {path}"

        self.tools = [write_note, deploy, remove_folder]


@pytest.fixture
def monitor(own_wardend, tmp_path: Path) -> tuple[Wardend, Path]:
    notes = tmp_path / "notes"
    notes.mkdir()
    return own_wardend(guard_policies(tmp_path / "policies", notes)), notes


def agent_for(
    monitor: Wardend,
    script: list[AIMessage],
    effects: Effects,
    client: Any = None,
    actor: Any = None,
    checkpointer: Any = True,
    **options: Any,
) -> Any:
    client = client or warden.Client(monitor.endpoint, monitor.token("harness"))
    tools = {"write_note": writes("path"), "remove_folder": deletes("path")}
    guard = WardenMiddleware(client, actor or thread_actor("alice"), tools=tools, **options)
    model = ScriptedChatModel(messages=iter(script))
    saver = InMemorySaver() if checkpointer else None
    return create_agent(model, tools=effects.tools, middleware=[guard], checkpointer=saver)


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def test_an_allowed_tool_runs_and_a_denied_one_never_does(monitor) -> None:
    wardend, notes = monitor
    effects = Effects()
    script = [
        calls(
            ("write_note", {"path": str(notes / "todo.md"), "text": "ship it"}, "lc-ok"),
            ("write_note", {"path": str(notes / "prod.env"), "text": "TOKEN=x"}, "lc-env"),
        ),
        AIMessage(content="done"),
    ]
    agent = agent_for(wardend, script, effects)
    state = agent.invoke({"messages": [("user", "write my notes")]}, {"configurable": {"thread_id": "lc-allow-deny"}})
    assert state["messages"][-1].content == "done"
    assert (notes / "todo.md").read_text() == "ship it"
    assert not (notes / "prod.env").exists(), "a denied tool ran"
    by_id = {m.tool_call_id: m for m in tool_messages(state)}
    assert by_id["lc-ok"].status == "success"
    assert by_id["lc-env"].status == "error"
    assert "notes.no-env" in by_id["lc-env"].content and "would hold credentials" in by_id["lc-env"].content


def test_a_pending_tool_waits_for_the_approver_then_runs(monitor) -> None:
    wardend, _ = monitor
    effects = Effects()
    script = [calls(("deploy", {"service": "billing"}, "lc-deploy")), AIMessage(content="deployed")]
    # The asynchronous path, with an AsyncClient.
    client = warden.AsyncClient(wardend.endpoint, wardend.token("harness"))
    agent = agent_for(wardend, script, effects, client=client)
    approver = wardend.approver()

    async def main() -> Any:
        run = asyncio.create_task(
            agent.ainvoke({"messages": [("user", "deploy")]}, {"configurable": {"thread_id": "lc-wait"}})
        )
        approval = await asyncio.to_thread(approver.pending, lambda a: a.request.actor.session == "lc-wait")
        assert effects.deployed == [], "the tool ran before anyone approved"
        await asyncio.to_thread(approver.resolve, approval.approval_id, True, "")
        return await run

    state = asyncio.run(main())
    approver.close()
    assert effects.deployed == ["billing"]
    assert state["messages"][-1].content == "deployed"


def test_an_interrupted_graph_resumes_on_the_same_approval(monitor) -> None:
    wardend, _ = monitor
    effects = Effects()
    script = [
        calls(("deploy", {"service": "billing"}, "lc-a"), ("deploy", {"service": "search"}, "lc-b")),
        AIMessage(content="finished"),
    ]
    agent = agent_for(wardend, script, effects, on_pending="interrupt")
    config = {"configurable": {"thread_id": "lc-interrupt"}}
    approver = wardend.approver()
    waiting = lambda: approver.listed(lambda a: a.request.actor.session == "lc-interrupt")  # noqa: E731

    first = agent.invoke({"messages": [("user", "deploy both")]}, config)
    interrupts = first["__interrupt__"]
    assert effects.deployed == [] and interrupts
    assert interrupts[0].value["warden_approval"] in {a.approval_id for a in waiting()}
    assert len(waiting()) == 2

    # Resuming re-runs the tools node: the same calls are the same requests,
    # and a resume value alone lets nothing through. It waits for Warden.
    resumed: list[Any] = []
    resume = Command(resume={i.id: "approved!" for i in interrupts})
    thread = threading.Thread(target=lambda: resumed.append(agent.invoke(resume, config)))
    thread.start()
    billing = approver.pending(lambda a: a.request.actor.session == "lc-interrupt" and '"billing"' in a.request.tool.arguments_json)
    assert len(waiting()) == 2, "resuming created new approvals"
    assert effects.deployed == [], "the resume value let a tool run"
    approver.resolve(billing.approval_id, True, "")
    search = next(a for a in waiting() if '"search"' in a.request.tool.arguments_json)
    approver.resolve(search.approval_id, False, "search is frozen")
    # Resumed again by LangGraph as often as it interrupts; each time Warden
    # decides.
    thread.join(timeout=60)
    assert not thread.is_alive()
    state = resumed[0]
    while "__interrupt__" in state:
        state = agent.invoke(Command(resume={i.id: "again" for i in state["__interrupt__"]}), config)
    approver.close()
    assert effects.deployed == ["billing"]
    refused = next(m for m in tool_messages(state) if m.tool_call_id == "lc-b")
    assert refused.status == "error" and "search is frozen" in refused.content
    assert state["messages"][-1].content == "finished"


def test_without_the_monitor_no_tool_runs(monitor) -> None:
    wardend, notes = monitor
    effects = Effects()
    script = [calls(("write_note", {"path": str(notes / "a.md"), "text": "x"}, "lc-down")), AIMessage(content="ok")]
    client = warden.Client(wardend.endpoint, wardend.token("harness"), timeout=1.0)
    agent = agent_for(wardend, script, effects, client=client)
    wardend.kill()
    state = agent.invoke({"messages": [("user", "note")]}, {"configurable": {"thread_id": "lc-down"}})
    assert not (notes / "a.md").exists()
    (message,) = tool_messages(state)
    assert message.status == "error" and "cannot reach the monitor" in message.content


def test_a_second_guard_does_not_run_an_approved_deletion_again(monitor) -> None:
    """A person approved one deletion. A second middleware (a restarted
    harness, another worker) given the same user, thread and tool call id
    does not delete again: the refusal names the spent approval, and is
    recorded."""
    wardend, notes = monitor
    build = notes / "build"
    build.mkdir()
    (build / "out.o").write_text("first build")
    remove = lambda: calls(("remove_folder", {"path": str(build)}, "lc-rm"))  # noqa: E731
    config = {"configurable": {"thread_id": "lc-rm"}}
    agent = agent_for(wardend, [remove(), AIMessage(content="removed")], Effects())
    approver = wardend.approver()
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(agent.invoke({"messages": [("user", "clean")]}, config)))
    thread.start()
    approval = approver.pending(lambda a: a.request.actor.session == "lc-rm")
    assert build.exists(), "removed before anyone approved"
    approver.resolve(approval.approval_id, True, "once")
    thread.join(timeout=60)
    assert done and not build.exists()

    build.mkdir()
    (build / "out.o").write_text("second build")
    second = agent_for(wardend, [remove(), AIMessage(content="refused")], Effects())
    state = second.invoke({"messages": [("user", "clean")]}, config)
    assert (build / "out.o").read_text() == "second build", "the second guard ran the approved deletion again"
    (refusal,) = tool_messages(state)
    assert refusal.status == "error"
    assert f"approval `{approval.approval_id}` was used" in refusal.content, refusal.content
    assert approver.listed(lambda a: a.request.actor.session == "lc-rm") == [], "a new approval was asked for"
    approver.close()
    assert_used_once_then_refused(wardend, approval.approval_id)


def test_an_invoke_without_a_thread_id_is_refused_in_words(monitor) -> None:
    wardend, notes = monitor
    note = {"path": str(notes / "a.md"), "text": "x"}

    def documented_before(request: Any) -> warden.Actor:
        return warden.Actor("alice", "langchain", request.runtime.config["configurable"]["thread_id"])

    for actor in (thread_actor("alice"), documented_before):
        script = [calls(("write_note", note, "lc-no-thread")), AIMessage(content="ok")]
        agent = agent_for(wardend, script, Effects(), actor=actor, checkpointer=False)
        state = agent.invoke({"messages": [("user", "note")]})
        (message,) = tool_messages(state)
        assert message.status == "error"
        assert message.content.startswith("Warden did not allow `write_note`: "), message.content
        assert 'config={"configurable": {"thread_id": "…"}}' in message.content, message.content
        assert not (notes / "a.md").exists()
