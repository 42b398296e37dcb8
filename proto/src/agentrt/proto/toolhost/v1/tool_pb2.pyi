import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SideEffect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIDE_EFFECT_UNSPECIFIED: _ClassVar[SideEffect]
    SIDE_EFFECT_READ_ONLY: _ClassVar[SideEffect]
    SIDE_EFFECT_WRITE: _ClassVar[SideEffect]
    SIDE_EFFECT_DESTRUCTIVE: _ClassVar[SideEffect]

class IntentScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INTENT_SCOPE_UNSPECIFIED: _ClassVar[IntentScope]
    INTENT_SCOPE_RUN: _ClassVar[IntentScope]
    INTENT_SCOPE_SESSION: _ClassVar[IntentScope]
    INTENT_SCOPE_TENANT: _ClassVar[IntentScope]

class ToolErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_ERROR_CODE_UNSPECIFIED: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_INVALID_INPUT: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_UNAUTHORIZED: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_TRANSIENT: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_PERMANENT: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_CANCELLED: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_UNKNOWN_TOOL: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_KEY_CONFLICT: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_FENCED: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_NOT_ALLOWED: _ClassVar[ToolErrorCode]
    TOOL_ERROR_CODE_RESULT_TOO_LARGE: _ClassVar[ToolErrorCode]

class OperationStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATUS_UNSPECIFIED: _ClassVar[OperationStatus]
    OPERATION_STATUS_RUNNING: _ClassVar[OperationStatus]
    OPERATION_STATUS_SUCCEEDED: _ClassVar[OperationStatus]
    OPERATION_STATUS_FAILED: _ClassVar[OperationStatus]
SIDE_EFFECT_UNSPECIFIED: SideEffect
SIDE_EFFECT_READ_ONLY: SideEffect
SIDE_EFFECT_WRITE: SideEffect
SIDE_EFFECT_DESTRUCTIVE: SideEffect
INTENT_SCOPE_UNSPECIFIED: IntentScope
INTENT_SCOPE_RUN: IntentScope
INTENT_SCOPE_SESSION: IntentScope
INTENT_SCOPE_TENANT: IntentScope
TOOL_ERROR_CODE_UNSPECIFIED: ToolErrorCode
TOOL_ERROR_CODE_INVALID_INPUT: ToolErrorCode
TOOL_ERROR_CODE_UNAUTHORIZED: ToolErrorCode
TOOL_ERROR_CODE_TRANSIENT: ToolErrorCode
TOOL_ERROR_CODE_PERMANENT: ToolErrorCode
TOOL_ERROR_CODE_CANCELLED: ToolErrorCode
TOOL_ERROR_CODE_UNKNOWN_TOOL: ToolErrorCode
TOOL_ERROR_CODE_KEY_CONFLICT: ToolErrorCode
TOOL_ERROR_CODE_FENCED: ToolErrorCode
TOOL_ERROR_CODE_NOT_ALLOWED: ToolErrorCode
TOOL_ERROR_CODE_RESULT_TOO_LARGE: ToolErrorCode
OPERATION_STATUS_UNSPECIFIED: OperationStatus
OPERATION_STATUS_RUNNING: OperationStatus
OPERATION_STATUS_SUCCEEDED: OperationStatus
OPERATION_STATUS_FAILED: OperationStatus

class ToolSpec(_message.Message):
    __slots__ = ("name", "version", "description", "input_schema_json", "side_effect", "idempotent", "supports_query", "concurrency_safe", "requires_approval", "default_timeout", "max_concurrent_calls", "intent_key")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_QUERY_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_SAFE_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_CALLS_FIELD_NUMBER: _ClassVar[int]
    INTENT_KEY_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    description: str
    input_schema_json: str
    side_effect: SideEffect
    idempotent: bool
    supports_query: bool
    concurrency_safe: bool
    requires_approval: bool
    default_timeout: _duration_pb2.Duration
    max_concurrent_calls: int
    intent_key: IntentKey
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., description: _Optional[str] = ..., input_schema_json: _Optional[str] = ..., side_effect: _Optional[_Union[SideEffect, str]] = ..., idempotent: _Optional[bool] = ..., supports_query: _Optional[bool] = ..., concurrency_safe: _Optional[bool] = ..., requires_approval: _Optional[bool] = ..., default_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_concurrent_calls: _Optional[int] = ..., intent_key: _Optional[_Union[IntentKey, _Mapping]] = ...) -> None: ...

class IntentKey(_message.Message):
    __slots__ = ("arguments", "scope", "window")
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    arguments: _containers.RepeatedScalarFieldContainer[str]
    scope: IntentScope
    window: _duration_pb2.Duration
    def __init__(self, arguments: _Optional[_Iterable[str]] = ..., scope: _Optional[_Union[IntentScope, str]] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class IntentDuplicate(_message.Message):
    __slots__ = ("intent_key", "idempotency_key", "run_id", "call_id", "first_time")
    INTENT_KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIME_FIELD_NUMBER: _ClassVar[int]
    intent_key: str
    idempotency_key: str
    run_id: str
    call_id: str
    first_time: _timestamp_pb2.Timestamp
    def __init__(self, intent_key: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., run_id: _Optional[str] = ..., call_id: _Optional[str] = ..., first_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ToolError(_message.Message):
    __slots__ = ("code", "message", "details_json")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    code: ToolErrorCode
    message: str
    details_json: str
    def __init__(self, code: _Optional[_Union[ToolErrorCode, str]] = ..., message: _Optional[str] = ..., details_json: _Optional[str] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("idempotency_key", "tool", "input_hash", "status", "result_json", "error", "run_id", "create_time", "update_time")
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    INPUT_HASH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    idempotency_key: str
    tool: str
    input_hash: str
    status: OperationStatus
    result_json: str
    error: ToolError
    run_id: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    def __init__(self, idempotency_key: _Optional[str] = ..., tool: _Optional[str] = ..., input_hash: _Optional[str] = ..., status: _Optional[_Union[OperationStatus, str]] = ..., result_json: _Optional[str] = ..., error: _Optional[_Union[ToolError, _Mapping]] = ..., run_id: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
