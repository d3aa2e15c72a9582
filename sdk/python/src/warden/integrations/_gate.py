"""What every framework guard shares: tool calls mapped to Warden requests,
an idempotency key per tool call, and the fail-closed verdict."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from .._aio import AsyncClient
from .._client import Client
from .._errors import WardenError
from .._waiting import denial
from .._model import Actor, Decision, Outcome, Request, call_tool, delete_file, http, read_file, run, use_secret, write_file

# A tool's arguments (a JSON object) to the Warden request it is.
Mapper = Callable[[Mapping[str, Any]], Request]
AnyClient = Union[Client, AsyncClient]


def _field(arguments: Mapping[str, Any], name: str) -> Any:
    if name not in arguments:
        raise ValueError(f"the arguments have no `{name}`")
    return arguments[name]


def _cwd(arguments: Mapping[str, Any], cwd: str | None, cwd_field: str | None) -> str | None:
    if cwd_field and arguments.get(cwd_field):
        return str(arguments[cwd_field])
    return cwd


def reads(path: str = "path", *, cwd: str | None = None, cwd_field: str | None = None) -> Mapper:
    """``fs.read`` of the argument ``path`` (relative to ``cwd``, or to the
    argument ``cwd_field``)."""
    return lambda a: read_file(_field(a, path), cwd=_cwd(a, cwd, cwd_field))


def writes(path: str = "path", *, cwd: str | None = None, cwd_field: str | None = None) -> Mapper:
    """``fs.write`` of the argument ``path``."""
    return lambda a: write_file(_field(a, path), cwd=_cwd(a, cwd, cwd_field))


def deletes(path: str = "path", *, cwd: str | None = None, cwd_field: str | None = None) -> Mapper:
    """``fs.delete`` of the argument ``path``."""
    return lambda a: delete_file(_field(a, path), cwd=_cwd(a, cwd, cwd_field))


def runs(command: str = "command", *, cwd: str | None = None, cwd_field: str | None = None) -> Mapper:
    """``exec`` of the argument ``command``: a list is the argv, a string a
    shell line (``["bash", "-c", line]``, which the monitor reads as a
    script)."""

    def mapper(a: Mapping[str, Any]) -> Request:
        value = _field(a, command)
        argv = ["bash", "-c", value] if isinstance(value, str) else list(value)
        return run(argv, cwd=_cwd(a, cwd, cwd_field))

    return mapper


def fetches(url: str = "url", *, method: str = "GET", method_field: str | None = None) -> Mapper:
    """``http.request`` of the argument ``url`` with ``method``, or with the
    argument ``method_field``, which must then be there: a default of ours
    could differ from the tool's own."""
    return lambda a: http(_field(a, method_field) if method_field else method, _field(a, url))


def uses_secret(name: str = "name") -> Mapper:
    """``secret.use`` of the secret the argument ``name`` names."""
    return lambda a: use_secret(_field(a, name))


@dataclass(frozen=True)
class ToolMapping:
    """Tool name to request: ``tools`` maps the tools that act on files,
    commands, URLs or secrets; any other tool is ``tool.call`` on
    ``McpServer::"<server>"``, ``Tool::"<server>/<name>"``."""

    server: str
    tools: Mapping[str, Mapper]

    def request(self, tool: str, arguments: Mapping[str, Any]) -> Request:
        mapper = self.tools.get(tool)
        if mapper is None:
            return call_tool(self.server, tool, arguments)
        return mapper(arguments)


def request_id(framework: str, actor: Actor, call_id: str) -> str:
    """The idempotency key of one tool call: the same call asked again (a
    resumed graph re-running its node, the SDK's guardrail after its
    approval check) is the same request, never a second approval."""
    digest = hashlib.sha256(f"{actor.user}\0{actor.session}\0{call_id}".encode()).hexdigest()[:40]
    return f"{framework}-{digest}"


@dataclass(frozen=True)
class Verdict:
    """A guard's answer about one tool call: run it, or not and why."""

    allowed: bool
    message: str
    decision: Decision | None = None

    @property
    def pending(self) -> bool:
        return self.decision is not None and self.decision.outcome is Outcome.PENDING


def actor_failed(error: Exception, hint: str = "") -> str:
    """Why an actor function gave no actor, in words (a ``KeyError`` says
    only the key): with ``hint``, what to do about it."""
    if isinstance(error, KeyError) and error.args:
        text = f"the actor function found no `{error.args[0]}` in what it read"
    else:
        text = f"the actor function failed ({type(error).__name__}: {error})"
    return f"{text}: {hint}" if hint else text


def _refusal(tool: str, error: BaseException) -> Verdict:
    decision = getattr(error, "decision", None)
    if isinstance(error, WardenError):
        text = f"Warden did not allow `{tool}`: {error}"
    else:
        text = f"Warden did not allow `{tool}`: the call could not be checked ({type(error).__name__}: {error})"
    return Verdict(False, text, decision)


def _pending(tool: str, decision: Decision) -> Verdict:
    return Verdict(
        False,
        f"Warden: `{tool}` waits for a person's approval ({decision.approval_id}): {'; '.join(decision.reasons)}",
        decision,
    )


# How many tool calls a gate remembers having let run, or having been
# allowed before they run.
RAN_MEMORY = 100_000


class Gate:
    """Asks Warden about tool calls for one framework guard.

    What a person approved runs once: the monitor gives an approved call's
    ALLOW to the first answer (the harness waiting on it, or the first ask
    again of its request id) and refuses every later one, naming the use;
    a restarted harness, a second worker or a model repeating a tool call
    id gets that refusal. Within one gate a call that ran is not let run
    again either, whatever the monitor says of it (a decision that needed no
    person is answered again for ten minutes).

    Asking about a call before it runs (``runs=False``: the OpenAI SDK's
    ``needs_approval`` and ``resolve``) takes an ALLOW the monitor gives
    and keeps it for the call's run, which then does not ask again: an
    approval taken there is not used up by asking. So the same gate (one
    per process, shared) must run the calls it asked about.
    """

    def __init__(self, client: AnyClient, mapping: ToolMapping, framework: str) -> None:
        if not isinstance(client, (Client, AsyncClient)):
            raise TypeError(f"client: expected warden.Client or warden.AsyncClient, got {type(client).__name__}")
        self.client = client
        self.mapping = mapping
        self.framework = framework
        self._ran: OrderedDict[str, None] = OrderedDict()
        # ALLOWs given before the call runs, by request id.
        self._taken: OrderedDict[str, Decision] = OrderedDict()
        self._lock = threading.Lock()

    def _taken_for(self, rid: str, runs: bool) -> Decision | None:
        """An ALLOW this gate was given for the call and has not run."""
        with self._lock:
            return self._taken.pop(rid, None) if runs else self._taken.get(rid)

    def _settle(self, tool: str, rid: str, verdict: Verdict, runs: bool) -> Verdict:
        if not verdict.allowed:
            return verdict
        with self._lock:
            if not runs:
                if verdict.decision is not None:
                    self._taken[rid] = verdict.decision
                    if len(self._taken) > RAN_MEMORY:
                        self._taken.popitem(last=False)
                return verdict
            if rid in self._ran:
                return Verdict(
                    False,
                    f"Warden did not allow `{tool}`: this tool call ran already (a tool call id runs once)",
                    verdict.decision,
                )
            self._ran[rid] = None
            if len(self._ran) > RAN_MEMORY:
                self._ran.popitem(last=False)
        return verdict

    def _ask(self, actor: Actor, tool: str, arguments: Mapping[str, Any], call_id: str) -> tuple[Request, str]:
        if not call_id:
            raise ValueError("the tool call has no id")
        return self.mapping.request(tool, arguments), request_id(self.framework, actor, call_id)

    async def check(
        self, actor: Actor, tool: str, arguments: Mapping[str, Any], call_id: str, *, wait: bool, runs: bool
    ) -> Verdict:
        """ALLOW runs; with ``wait``, PENDING waits for the approver; without,
        PENDING is reported (``Verdict.pending``). ``runs``: the tool runs
        if allowed (once per call, see the class)."""
        try:
            request, rid = self._ask(actor, tool, arguments, call_id)
            taken = self._taken_for(rid, runs)
            if taken is not None:
                return self._settle(tool, rid, Verdict(True, "", taken), runs)
            client = self.client
            if isinstance(client, AsyncClient):
                ask = client.check if wait else client.authorize
                decision = await ask(actor, request, request_id=rid)
            else:
                decision = await asyncio.to_thread(client.check if wait else client.authorize, actor, request, request_id=rid)
        except Exception as error:  # noqa: BLE001 - every failure is a refusal
            return _refusal(tool, error)
        return self._settle(tool, rid, self._verdict(tool, decision), runs)

    def check_sync(
        self, actor: Actor, tool: str, arguments: Mapping[str, Any], call_id: str, *, wait: bool, runs: bool
    ) -> Verdict:
        """:meth:`check` for synchronous frameworks (a ``warden.Client``)."""
        try:
            client = self.client
            if not isinstance(client, Client):
                raise TypeError("a synchronous tool call needs a warden.Client, not a warden.AsyncClient")
            request, rid = self._ask(actor, tool, arguments, call_id)
            taken = self._taken_for(rid, runs)
            if taken is not None:
                return self._settle(tool, rid, Verdict(True, "", taken), runs)
            decision = (client.check if wait else client.authorize)(actor, request, request_id=rid)
        except Exception as error:  # noqa: BLE001 - every failure is a refusal
            return _refusal(tool, error)
        return self._settle(tool, rid, self._verdict(tool, decision), runs)

    def _verdict(self, tool: str, decision: Decision) -> Verdict:
        if decision.outcome is Outcome.ALLOW:
            return Verdict(True, "", decision)
        if decision.outcome is Outcome.PENDING:
            return _pending(tool, decision)
        return _refusal(tool, denial(decision))
