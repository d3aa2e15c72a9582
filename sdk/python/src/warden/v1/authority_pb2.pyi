import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_UNSPECIFIED: _ClassVar[Outcome]
    ALLOW: _ClassVar[Outcome]
    DENY: _ClassVar[Outcome]
    PENDING: _ClassVar[Outcome]
OUTCOME_UNSPECIFIED: Outcome
ALLOW: Outcome
DENY: Outcome
PENDING: Outcome

class Actor(_message.Message):
    __slots__ = ("user", "agent", "session")
    USER_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    user: str
    agent: str
    session: str
    def __init__(self, user: _Optional[str] = ..., agent: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class FileResource(_message.Message):
    __slots__ = ("path", "cwd", "pattern")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    path: str
    cwd: str
    pattern: bool
    def __init__(self, path: _Optional[str] = ..., cwd: _Optional[str] = ..., pattern: _Optional[bool] = ...) -> None: ...

class CommandResource(_message.Message):
    __slots__ = ("argv", "cwd")
    ARGV_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    argv: _containers.RepeatedScalarFieldContainer[str]
    cwd: str
    def __init__(self, argv: _Optional[_Iterable[str]] = ..., cwd: _Optional[str] = ...) -> None: ...

class HttpResource(_message.Message):
    __slots__ = ("method", "url")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    method: str
    url: str
    def __init__(self, method: _Optional[str] = ..., url: _Optional[str] = ...) -> None: ...

class SecretResource(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ToolResource(_message.Message):
    __slots__ = ("server", "name", "arguments_json")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    server: str
    name: str
    arguments_json: str
    def __init__(self, server: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class AuthorizeRequest(_message.Message):
    __slots__ = ("request_id", "actor", "action", "file", "command", "http", "secret", "tool", "justification", "context_json")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    JUSTIFICATION_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_JSON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    actor: Actor
    action: str
    file: FileResource
    command: CommandResource
    http: HttpResource
    secret: SecretResource
    tool: ToolResource
    justification: str
    context_json: str
    def __init__(self, request_id: _Optional[str] = ..., actor: _Optional[_Union[Actor, _Mapping]] = ..., action: _Optional[str] = ..., file: _Optional[_Union[FileResource, _Mapping]] = ..., command: _Optional[_Union[CommandResource, _Mapping]] = ..., http: _Optional[_Union[HttpResource, _Mapping]] = ..., secret: _Optional[_Union[SecretResource, _Mapping]] = ..., tool: _Optional[_Union[ToolResource, _Mapping]] = ..., justification: _Optional[str] = ..., context_json: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("request_id", "outcome", "policy_ids", "reasons", "approval_id", "expires_at", "grant_ids", "policy_version", "audit_seq", "resolved_by", "note", "labels")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    POLICY_IDS_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    GRANT_IDS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    AUDIT_SEQ_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    outcome: Outcome
    policy_ids: _containers.RepeatedScalarFieldContainer[str]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    approval_id: str
    expires_at: _timestamp_pb2.Timestamp
    grant_ids: _containers.RepeatedScalarFieldContainer[str]
    policy_version: str
    audit_seq: int
    resolved_by: str
    note: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_id: _Optional[str] = ..., outcome: _Optional[_Union[Outcome, str]] = ..., policy_ids: _Optional[_Iterable[str]] = ..., reasons: _Optional[_Iterable[str]] = ..., approval_id: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., grant_ids: _Optional[_Iterable[str]] = ..., policy_version: _Optional[str] = ..., audit_seq: _Optional[int] = ..., resolved_by: _Optional[str] = ..., note: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ...) -> None: ...

class Resource(_message.Message):
    __slots__ = ("file", "command", "http", "secret", "tool")
    FILE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    HTTP_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    file: FileResource
    command: CommandResource
    http: HttpResource
    secret: SecretResource
    tool: ToolResource
    def __init__(self, file: _Optional[_Union[FileResource, _Mapping]] = ..., command: _Optional[_Union[CommandResource, _Mapping]] = ..., http: _Optional[_Union[HttpResource, _Mapping]] = ..., secret: _Optional[_Union[SecretResource, _Mapping]] = ..., tool: _Optional[_Union[ToolResource, _Mapping]] = ...) -> None: ...

class PreviewRequest(_message.Message):
    __slots__ = ("actor", "action", "resources")
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    actor: Actor
    action: str
    resources: _containers.RepeatedCompositeFieldContainer[Resource]
    def __init__(self, actor: _Optional[_Union[Actor, _Mapping]] = ..., action: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[Resource, _Mapping]]] = ...) -> None: ...

class PreviewResponse(_message.Message):
    __slots__ = ("outcomes", "policy_version")
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedScalarFieldContainer[Outcome]
    policy_version: str
    def __init__(self, outcomes: _Optional[_Iterable[_Union[Outcome, str]]] = ..., policy_version: _Optional[str] = ...) -> None: ...

class AwaitDecisionRequest(_message.Message):
    __slots__ = ("approval_id", "timeout_ms")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    timeout_ms: int
    def __init__(self, approval_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...
