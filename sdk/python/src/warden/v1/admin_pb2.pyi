import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from warden.v1 import authority_pb2 as _authority_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AuditRecord(_message.Message):
    __slots__ = ("seq", "time", "kind", "caller", "actor", "action", "resource", "outcome", "policy_ids", "reasons", "policy_version", "request_id", "approval_id", "prev_hash", "hash", "request")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    POLICY_IDS_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: _timestamp_pb2.Timestamp
    kind: str
    caller: str
    actor: _authority_pb2.Actor
    action: str
    resource: str
    outcome: _authority_pb2.Outcome
    policy_ids: _containers.RepeatedScalarFieldContainer[str]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    policy_version: str
    request_id: str
    approval_id: str
    prev_hash: str
    hash: str
    request: str
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., kind: _Optional[str] = ..., caller: _Optional[str] = ..., actor: _Optional[_Union[_authority_pb2.Actor, _Mapping]] = ..., action: _Optional[str] = ..., resource: _Optional[str] = ..., outcome: _Optional[_Union[_authority_pb2.Outcome, str]] = ..., policy_ids: _Optional[_Iterable[str]] = ..., reasons: _Optional[_Iterable[str]] = ..., policy_version: _Optional[str] = ..., request_id: _Optional[str] = ..., approval_id: _Optional[str] = ..., prev_hash: _Optional[str] = ..., hash: _Optional[str] = ..., request: _Optional[str] = ...) -> None: ...

class TailAuditRequest(_message.Message):
    __slots__ = ("count", "all", "follow", "from_seq", "since_unix_ns")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    count: int
    all: bool
    follow: bool
    from_seq: int
    since_unix_ns: int
    def __init__(self, count: _Optional[int] = ..., all: _Optional[bool] = ..., follow: _Optional[bool] = ..., from_seq: _Optional[int] = ..., since_unix_ns: _Optional[int] = ...) -> None: ...

class VerifyAuditRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("seq", "hash", "time_unix_ns", "public_key", "signature")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    TIME_UNIX_NS_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    hash: str
    time_unix_ns: int
    public_key: str
    signature: str
    def __init__(self, seq: _Optional[int] = ..., hash: _Optional[str] = ..., time_unix_ns: _Optional[int] = ..., public_key: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class VerifyAuditResponse(_message.Message):
    __slots__ = ("ok", "records", "head_seq", "head_hash", "first_bad_seq", "error", "checkpoint")
    OK_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    FIRST_BAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    records: int
    head_seq: int
    head_hash: str
    first_bad_seq: int
    error: str
    checkpoint: Checkpoint
    def __init__(self, ok: _Optional[bool] = ..., records: _Optional[int] = ..., head_seq: _Optional[int] = ..., head_hash: _Optional[str] = ..., first_bad_seq: _Optional[int] = ..., error: _Optional[str] = ..., checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ...) -> None: ...

class CreateGrantRequest(_message.Message):
    __slots__ = ("user", "session", "agent", "actions", "resource_scope", "ttl_seconds", "reason", "harness")
    USER_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_SCOPE_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    user: str
    session: str
    agent: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    resource_scope: str
    ttl_seconds: int
    reason: str
    harness: str
    def __init__(self, user: _Optional[str] = ..., session: _Optional[str] = ..., agent: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., resource_scope: _Optional[str] = ..., ttl_seconds: _Optional[int] = ..., reason: _Optional[str] = ..., harness: _Optional[str] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("grant_id", "user", "session", "agent", "actions", "resource_scope", "expires_at", "reason", "created_by", "created_at", "policy", "harness")
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_SCOPE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    user: str
    session: str
    agent: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    resource_scope: str
    expires_at: _timestamp_pb2.Timestamp
    reason: str
    created_by: str
    created_at: _timestamp_pb2.Timestamp
    policy: str
    harness: str
    def __init__(self, grant_id: _Optional[str] = ..., user: _Optional[str] = ..., session: _Optional[str] = ..., agent: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., resource_scope: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., created_by: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., policy: _Optional[str] = ..., harness: _Optional[str] = ...) -> None: ...

class RevokeGrantRequest(_message.Message):
    __slots__ = ("grant_id",)
    GRANT_ID_FIELD_NUMBER: _ClassVar[int]
    grant_id: str
    def __init__(self, grant_id: _Optional[str] = ...) -> None: ...

class RevokeGrantResponse(_message.Message):
    __slots__ = ("grant",)
    GRANT_FIELD_NUMBER: _ClassVar[int]
    grant: Grant
    def __init__(self, grant: _Optional[_Union[Grant, _Mapping]] = ...) -> None: ...

class ListGrantsRequest(_message.Message):
    __slots__ = ("user", "session")
    USER_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    user: str
    session: str
    def __init__(self, user: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class ListGrantsResponse(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class LockSessionRequest(_message.Message):
    __slots__ = ("session", "user", "agent", "reason")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session: str
    user: str
    agent: str
    reason: str
    def __init__(self, session: _Optional[str] = ..., user: _Optional[str] = ..., agent: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class UnlockSessionRequest(_message.Message):
    __slots__ = ("session", "user", "agent")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    session: str
    user: str
    agent: str
    def __init__(self, session: _Optional[str] = ..., user: _Optional[str] = ..., agent: _Optional[str] = ...) -> None: ...

class LockResponse(_message.Message):
    __slots__ = ("target", "locked", "denied_approvals")
    TARGET_FIELD_NUMBER: _ClassVar[int]
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    DENIED_APPROVALS_FIELD_NUMBER: _ClassVar[int]
    target: str
    locked: bool
    denied_approvals: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, target: _Optional[str] = ..., locked: _Optional[bool] = ..., denied_approvals: _Optional[_Iterable[str]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session", "user", "harness")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    session: str
    user: str
    harness: str
    def __init__(self, session: _Optional[str] = ..., user: _Optional[str] = ..., harness: _Optional[str] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session", "user", "agent", "labels", "locked", "locked_reason", "harness")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    LOCKED_REASON_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    session: str
    user: str
    agent: str
    labels: _containers.RepeatedScalarFieldContainer[str]
    locked: bool
    locked_reason: str
    harness: str
    def __init__(self, session: _Optional[str] = ..., user: _Optional[str] = ..., agent: _Optional[str] = ..., labels: _Optional[_Iterable[str]] = ..., locked: _Optional[bool] = ..., locked_reason: _Optional[str] = ..., harness: _Optional[str] = ...) -> None: ...

class ClearSessionLabelsRequest(_message.Message):
    __slots__ = ("session", "reason", "user", "harness")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    session: str
    reason: str
    user: str
    harness: str
    def __init__(self, session: _Optional[str] = ..., reason: _Optional[str] = ..., user: _Optional[str] = ..., harness: _Optional[str] = ...) -> None: ...

class PolicyStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyStatusResponse(_message.Message):
    __slots__ = ("policy_version", "loaded_at", "files", "error", "warnings", "policies", "error_at", "replicas", "shadow")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    ERROR_AT_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    policy_version: str
    loaded_at: _timestamp_pb2.Timestamp
    files: _containers.RepeatedScalarFieldContainer[str]
    error: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    policies: int
    error_at: _timestamp_pb2.Timestamp
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaStatus]
    shadow: ShadowStatus
    def __init__(self, policy_version: _Optional[str] = ..., loaded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., files: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ..., policies: _Optional[int] = ..., error_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., replicas: _Optional[_Iterable[_Union[ReplicaStatus, _Mapping]]] = ..., shadow: _Optional[_Union[ShadowStatus, _Mapping]] = ...) -> None: ...

class ShadowStatus(_message.Message):
    __slots__ = ("dir", "policy_version", "loaded_at", "policies", "error")
    DIR_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    dir: str
    policy_version: str
    loaded_at: _timestamp_pb2.Timestamp
    policies: int
    error: str
    def __init__(self, dir: _Optional[str] = ..., policy_version: _Optional[str] = ..., loaded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., policies: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class GetPolicyFilesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetPolicyFilesResponse(_message.Message):
    __slots__ = ("policy_version", "files")
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    policy_version: str
    files: _containers.RepeatedCompositeFieldContainer[PolicyFileText]
    def __init__(self, policy_version: _Optional[str] = ..., files: _Optional[_Iterable[_Union[PolicyFileText, _Mapping]]] = ...) -> None: ...

class PolicyFileText(_message.Message):
    __slots__ = ("name", "text")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    name: str
    text: str
    def __init__(self, name: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class ReplicaStatus(_message.Message):
    __slots__ = ("replica", "policy_version", "loaded_at", "seen_at", "error", "answering", "started_at")
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    SEEN_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ANSWERING_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    replica: str
    policy_version: str
    loaded_at: _timestamp_pb2.Timestamp
    seen_at: _timestamp_pb2.Timestamp
    error: str
    answering: bool
    started_at: _timestamp_pb2.Timestamp
    def __init__(self, replica: _Optional[str] = ..., policy_version: _Optional[str] = ..., loaded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., seen_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error: _Optional[str] = ..., answering: _Optional[bool] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReloadPoliciesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReloadPoliciesResponse(_message.Message):
    __slots__ = ("loaded", "status")
    LOADED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    loaded: bool
    status: PolicyStatusResponse
    def __init__(self, loaded: _Optional[bool] = ..., status: _Optional[_Union[PolicyStatusResponse, _Mapping]] = ...) -> None: ...

class PolicyTrace(_message.Message):
    __slots__ = ("id", "effect", "file", "matches", "matches_approved", "error")
    ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    MATCHES_APPROVED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    effect: str
    file: str
    matches: bool
    matches_approved: bool
    error: str
    def __init__(self, id: _Optional[str] = ..., effect: _Optional[str] = ..., file: _Optional[str] = ..., matches: _Optional[bool] = ..., matches_approved: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class Explanation(_message.Message):
    __slots__ = ("decision", "policies")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    decision: _authority_pb2.Decision
    policies: _containers.RepeatedCompositeFieldContainer[PolicyTrace]
    def __init__(self, decision: _Optional[_Union[_authority_pb2.Decision, _Mapping]] = ..., policies: _Optional[_Iterable[_Union[PolicyTrace, _Mapping]]] = ...) -> None: ...

class EnrollApproverRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class EnrollApproverResponse(_message.Message):
    __slots__ = ("url", "expires_at")
    URL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    url: str
    expires_at: _timestamp_pb2.Timestamp
    def __init__(self, url: _Optional[str] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListApproversRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ApproverPasskey(_message.Message):
    __slots__ = ("name", "groups", "key_id", "enrolled_at", "enrolled_by", "last_used_at", "confirmed")
    NAME_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    ENROLLED_AT_FIELD_NUMBER: _ClassVar[int]
    ENROLLED_BY_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_AT_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    name: str
    groups: _containers.RepeatedScalarFieldContainer[str]
    key_id: str
    enrolled_at: _timestamp_pb2.Timestamp
    enrolled_by: str
    last_used_at: _timestamp_pb2.Timestamp
    confirmed: bool
    def __init__(self, name: _Optional[str] = ..., groups: _Optional[_Iterable[str]] = ..., key_id: _Optional[str] = ..., enrolled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., enrolled_by: _Optional[str] = ..., last_used_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., confirmed: _Optional[bool] = ...) -> None: ...

class ListApproversResponse(_message.Message):
    __slots__ = ("passkeys",)
    PASSKEYS_FIELD_NUMBER: _ClassVar[int]
    passkeys: _containers.RepeatedCompositeFieldContainer[ApproverPasskey]
    def __init__(self, passkeys: _Optional[_Iterable[_Union[ApproverPasskey, _Mapping]]] = ...) -> None: ...

class ConfirmApproverRequest(_message.Message):
    __slots__ = ("name", "key_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    key_id: str
    def __init__(self, name: _Optional[str] = ..., key_id: _Optional[str] = ...) -> None: ...

class RevokeApproverRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RevokeApproverResponse(_message.Message):
    __slots__ = ("revoked",)
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revoked: int
    def __init__(self, revoked: _Optional[int] = ...) -> None: ...
