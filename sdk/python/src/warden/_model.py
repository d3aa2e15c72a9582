"""Who acts, what they ask to do, and what the monitor answers.

Pure data: nothing here talks to the network.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Union

from .v1 import authority_pb2 as pb
from ._errors import ProtocolError


@dataclass(frozen=True)
class Actor:
    """Who is acting: the human ``user``, the kind of ``agent`` (e.g.
    ``"openai-agents"``) and the agent's ``session``."""

    user: str
    agent: str
    session: str

    def to_proto(self) -> pb.Actor:
        return pb.Actor(user=self.user, agent=self.agent, session=self.session)


class Outcome(str, enum.Enum):
    """ALLOW, DENY or PENDING."""

    ALLOW = "ALLOW"
    DENY = "DENY"
    PENDING = "PENDING"

    @classmethod
    def from_proto(cls, value: int) -> Outcome:
        try:
            return _OUTCOMES[value]
        except KeyError:
            raise ProtocolError(f"outcome {value} is not ALLOW, DENY or PENDING") from None


_OUTCOMES: dict[int, Outcome] = {pb.ALLOW: Outcome.ALLOW, pb.DENY: Outcome.DENY, pb.PENDING: Outcome.PENDING}

Resource = Union[pb.FileResource, pb.CommandResource, pb.HttpResource, pb.SecretResource, pb.ToolResource]
# The AuthorizeRequest oneof field of each resource message.
_FIELD = {
    pb.FileResource: "file",
    pb.CommandResource: "command",
    pb.HttpResource: "http",
    pb.SecretResource: "secret",
    pb.ToolResource: "tool",
}


@dataclass(frozen=True)
class Request:
    """One action to ask about: a Cedar action id declared in the policy
    schema and its resource. Build one with :func:`read_file`, :func:`run`,
    :func:`http` and the other builders, or directly for a custom action."""

    action: str
    resource: Resource
    # Extra context fields declared in the schema.
    context: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.action, str) or not self.action:
            raise ValueError("action: must be a non-empty string")
        if type(self.resource) not in _FIELD:
            raise TypeError(f"resource: {type(self.resource).__name__} is not a Warden resource message")

    def to_proto(self, actor: Actor, *, request_id: str, justification: str) -> pb.AuthorizeRequest:
        message = pb.AuthorizeRequest(
            request_id=request_id,
            actor=actor.to_proto(),
            action=self.action,
            justification=justification,
            context_json=json.dumps(dict(self.context)) if self.context else "",
        )
        getattr(message, _FIELD[type(self.resource)]).CopyFrom(self.resource)
        return message


def new_request_id() -> str:
    """A fresh idempotency key: asking again with it never records twice."""
    return f"sdk-py-{uuid.uuid4()}"


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected str, got {type(value).__name__}")
    return value


def read_file(path: str, cwd: str | None = None) -> Request:
    """``fs.read`` of a file (a relative path needs ``cwd``)."""
    return Request("fs.read", pb.FileResource(path=_text("path", path), cwd=_text("cwd", cwd or "")))


def write_file(path: str, cwd: str | None = None) -> Request:
    """``fs.write`` of a file."""
    return Request("fs.write", pb.FileResource(path=_text("path", path), cwd=_text("cwd", cwd or "")))


def delete_file(path: str, cwd: str | None = None) -> Request:
    """``fs.delete`` of a file."""
    return Request("fs.delete", pb.FileResource(path=_text("path", path), cwd=_text("cwd", cwd or "")))


def run(argv: Sequence[str], cwd: str | None = None) -> Request:
    """``exec`` of a command line; ``argv[0]`` names the program. A shell
    line is ``["bash", "-c", line]``: the monitor reads the script."""
    if isinstance(argv, (str, bytes)):
        raise TypeError('argv: a list of arguments, not one string (for a shell line: ["bash", "-c", line])')
    args = [_text(f"argv[{i}]", a) for i, a in enumerate(argv)]
    if not args:
        raise ValueError("argv: must name a program")
    return Request("exec", pb.CommandResource(argv=args, cwd=_text("cwd", cwd or "")))


def http(method: str, url: str) -> Request:
    """``http.request`` with a method and an absolute URL."""
    return Request("http.request", pb.HttpResource(method=_text("method", method), url=_text("url", url)))


def use_secret(name: str) -> Request:
    """``secret.use`` of a named secret."""
    return Request("secret.use", pb.SecretResource(name=_text("name", name)))


def call_tool(server: str, tool: str, arguments: Mapping[str, Any] | None = None) -> Request:
    """``tool.call`` of ``tool`` on ``server`` with its arguments (a JSON object)."""
    if arguments is not None and not isinstance(arguments, Mapping):
        raise TypeError(f"arguments: expected a mapping (a JSON object), got {type(arguments).__name__}")
    return Request(
        "tool.call",
        pb.ToolResource(
            server=_text("server", server),
            name=_text("tool", tool),
            arguments_json=json.dumps(dict(arguments), default=str) if arguments else "",
        ),
    )


@dataclass(frozen=True)
class Decision:
    """The monitor's answer to one request."""

    request_id: str
    outcome: Outcome
    # The determining policies' ids: the permits for ALLOW, the forbids in
    # the way for DENY and PENDING.
    policy_ids: tuple[str, ...]
    # Their reasons, and the monitor's own.
    reasons: tuple[str, ...]
    # The approval to wait for, when PENDING (and on the final decision of a
    # request that waited).
    approval_id: str
    # When a pending approval expires (and is denied), in UTC.
    expires_at: datetime | None
    grant_ids: tuple[str, ...]
    policy_version: str
    # This decision's record in the audit log.
    audit_seq: int
    # Who resolved the approval, and their note.
    resolved_by: str
    note: str
    # The session labels this answer gave (the ALLOW's policies' @label);
    # none on a replay of a request id.
    labels: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.outcome is Outcome.ALLOW

    @classmethod
    def from_proto(cls, d: pb.Decision) -> Decision:
        expires_at = None
        if d.HasField("expires_at"):
            try:
                expires_at = datetime.fromtimestamp(d.expires_at.seconds + d.expires_at.nanos / 1e9, tz=timezone.utc)
            except (ValueError, OverflowError, OSError) as e:
                raise ProtocolError(f"expires_at {d.expires_at.seconds}s is not a time: {e}") from None
        return cls(
            request_id=d.request_id,
            outcome=Outcome.from_proto(d.outcome),
            policy_ids=tuple(d.policy_ids),
            reasons=tuple(d.reasons),
            approval_id=d.approval_id,
            expires_at=expires_at,
            grant_ids=tuple(d.grant_ids),
            policy_version=d.policy_version,
            audit_seq=d.audit_seq,
            resolved_by=d.resolved_by,
            note=d.note,
            labels=tuple(d.labels),
        )
