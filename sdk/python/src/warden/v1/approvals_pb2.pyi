import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from warden.v1 import authority_pb2 as _authority_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApprovalState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_STATE_UNSPECIFIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_PENDING: _ClassVar[ApprovalState]
    APPROVAL_STATE_APPROVED: _ClassVar[ApprovalState]
    APPROVAL_STATE_DENIED: _ClassVar[ApprovalState]
    APPROVAL_STATE_EXPIRED: _ClassVar[ApprovalState]

class ApprovalEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_EVENT_KIND_UNSPECIFIED: _ClassVar[ApprovalEventKind]
    APPROVAL_EVENT_KIND_CURRENT: _ClassVar[ApprovalEventKind]
    APPROVAL_EVENT_KIND_NEW: _ClassVar[ApprovalEventKind]
    APPROVAL_EVENT_KIND_RESOLVED: _ClassVar[ApprovalEventKind]
    APPROVAL_EVENT_KIND_EXPIRED: _ClassVar[ApprovalEventKind]
APPROVAL_STATE_UNSPECIFIED: ApprovalState
APPROVAL_STATE_PENDING: ApprovalState
APPROVAL_STATE_APPROVED: ApprovalState
APPROVAL_STATE_DENIED: ApprovalState
APPROVAL_STATE_EXPIRED: ApprovalState
APPROVAL_EVENT_KIND_UNSPECIFIED: ApprovalEventKind
APPROVAL_EVENT_KIND_CURRENT: ApprovalEventKind
APPROVAL_EVENT_KIND_NEW: ApprovalEventKind
APPROVAL_EVENT_KIND_RESOLVED: ApprovalEventKind
APPROVAL_EVENT_KIND_EXPIRED: ApprovalEventKind

class Approval(_message.Message):
    __slots__ = ("approval_id", "request", "reasons", "policy_ids", "state", "created_at", "expires_at", "resolved_by", "note", "resource", "request_hash", "approvers", "harness", "permit_ids", "decision", "passkey_policies", "credentials")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    POLICY_IDS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    APPROVERS_FIELD_NUMBER: _ClassVar[int]
    HARNESS_FIELD_NUMBER: _ClassVar[int]
    PERMIT_IDS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    PASSKEY_POLICIES_FIELD_NUMBER: _ClassVar[int]
    CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    request: _authority_pb2.AuthorizeRequest
    reasons: _containers.RepeatedScalarFieldContainer[str]
    policy_ids: _containers.RepeatedScalarFieldContainer[str]
    state: ApprovalState
    created_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    resolved_by: str
    note: str
    resource: str
    request_hash: str
    approvers: _containers.RepeatedScalarFieldContainer[str]
    harness: str
    permit_ids: _containers.RepeatedScalarFieldContainer[str]
    decision: _authority_pb2.Decision
    passkey_policies: _containers.RepeatedScalarFieldContainer[str]
    credentials: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, approval_id: _Optional[str] = ..., request: _Optional[_Union[_authority_pb2.AuthorizeRequest, _Mapping]] = ..., reasons: _Optional[_Iterable[str]] = ..., policy_ids: _Optional[_Iterable[str]] = ..., state: _Optional[_Union[ApprovalState, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resolved_by: _Optional[str] = ..., note: _Optional[str] = ..., resource: _Optional[str] = ..., request_hash: _Optional[str] = ..., approvers: _Optional[_Iterable[str]] = ..., harness: _Optional[str] = ..., permit_ids: _Optional[_Iterable[str]] = ..., decision: _Optional[_Union[_authority_pb2.Decision, _Mapping]] = ..., passkey_policies: _Optional[_Iterable[str]] = ..., credentials: _Optional[_Iterable[str]] = ...) -> None: ...

class ListPendingRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListPendingResponse(_message.Message):
    __slots__ = ("approvals", "next_page_token")
    APPROVALS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    approvals: _containers.RepeatedCompositeFieldContainer[Approval]
    next_page_token: str
    def __init__(self, approvals: _Optional[_Iterable[_Union[Approval, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetApprovalRequest(_message.Message):
    __slots__ = ("approval_id",)
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    def __init__(self, approval_id: _Optional[str] = ...) -> None: ...

class WatchPendingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ApprovalEvent(_message.Message):
    __slots__ = ("kind", "approval")
    KIND_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    kind: ApprovalEventKind
    approval: Approval
    def __init__(self, kind: _Optional[_Union[ApprovalEventKind, str]] = ..., approval: _Optional[_Union[Approval, _Mapping]] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ("approval_id", "approve", "note", "grant_for_seconds", "grant_scope", "request_hash")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    GRANT_FOR_SECONDS_FIELD_NUMBER: _ClassVar[int]
    GRANT_SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_HASH_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    approve: bool
    note: str
    grant_for_seconds: int
    grant_scope: str
    request_hash: str
    def __init__(self, approval_id: _Optional[str] = ..., approve: _Optional[bool] = ..., note: _Optional[str] = ..., grant_for_seconds: _Optional[int] = ..., grant_scope: _Optional[str] = ..., request_hash: _Optional[str] = ...) -> None: ...
