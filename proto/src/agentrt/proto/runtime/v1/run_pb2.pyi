import datetime

from agentrt.proto.toolhost.v1 import tool_pb2 as _tool_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_PHASE_UNSPECIFIED: _ClassVar[RunPhase]
    RUN_PHASE_QUEUED: _ClassVar[RunPhase]
    RUN_PHASE_MODEL_STEP: _ClassVar[RunPhase]
    RUN_PHASE_TOOL_STEP: _ClassVar[RunPhase]
    RUN_PHASE_WAITING_APPROVAL: _ClassVar[RunPhase]
    RUN_PHASE_RETRY_WAIT: _ClassVar[RunPhase]
    RUN_PHASE_CANCEL_REQUESTED: _ClassVar[RunPhase]
    RUN_PHASE_UNKNOWN_OUTCOME: _ClassVar[RunPhase]
    RUN_PHASE_COMPLETED: _ClassVar[RunPhase]
    RUN_PHASE_FAILED: _ClassVar[RunPhase]
    RUN_PHASE_CANCELLED: _ClassVar[RunPhase]
    RUN_PHASE_EXPIRED: _ClassVar[RunPhase]
    RUN_PHASE_CLEANING_UP: _ClassVar[RunPhase]

class CleanupStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLEANUP_STATUS_UNSPECIFIED: _ClassVar[CleanupStatus]
    CLEANUP_STATUS_PENDING: _ClassVar[CleanupStatus]
    CLEANUP_STATUS_DONE: _ClassVar[CleanupStatus]
    CLEANUP_STATUS_UNKNOWN: _ClassVar[CleanupStatus]

class CleanupKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLEANUP_KIND_UNSPECIFIED: _ClassVar[CleanupKind]
    CLEANUP_KIND_TOOL: _ClassVar[CleanupKind]
    CLEANUP_KIND_HOOK: _ClassVar[CleanupKind]
    CLEANUP_KIND_CHILD_RUN: _ClassVar[CleanupKind]

class StepKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_KIND_UNSPECIFIED: _ClassVar[StepKind]
    STEP_KIND_MODEL: _ClassVar[StepKind]
    STEP_KIND_DIAGNOSTIC: _ClassVar[StepKind]
    STEP_KIND_CORRECTIVE: _ClassVar[StepKind]

class ApprovalDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_DECISION_UNSPECIFIED: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_APPROVE: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_REJECT: _ClassVar[ApprovalDecision]

class WaitReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WAIT_REASON_UNSPECIFIED: _ClassVar[WaitReason]
    WAIT_REASON_APPROVAL: _ClassVar[WaitReason]
    WAIT_REASON_UNKNOWN_OUTCOME: _ClassVar[WaitReason]
    WAIT_REASON_BUDGET: _ClassVar[WaitReason]
    WAIT_REASON_SESSION_QUEUE: _ClassVar[WaitReason]
    WAIT_REASON_CLEANUP: _ClassVar[WaitReason]
RUN_PHASE_UNSPECIFIED: RunPhase
RUN_PHASE_QUEUED: RunPhase
RUN_PHASE_MODEL_STEP: RunPhase
RUN_PHASE_TOOL_STEP: RunPhase
RUN_PHASE_WAITING_APPROVAL: RunPhase
RUN_PHASE_RETRY_WAIT: RunPhase
RUN_PHASE_CANCEL_REQUESTED: RunPhase
RUN_PHASE_UNKNOWN_OUTCOME: RunPhase
RUN_PHASE_COMPLETED: RunPhase
RUN_PHASE_FAILED: RunPhase
RUN_PHASE_CANCELLED: RunPhase
RUN_PHASE_EXPIRED: RunPhase
RUN_PHASE_CLEANING_UP: RunPhase
CLEANUP_STATUS_UNSPECIFIED: CleanupStatus
CLEANUP_STATUS_PENDING: CleanupStatus
CLEANUP_STATUS_DONE: CleanupStatus
CLEANUP_STATUS_UNKNOWN: CleanupStatus
CLEANUP_KIND_UNSPECIFIED: CleanupKind
CLEANUP_KIND_TOOL: CleanupKind
CLEANUP_KIND_HOOK: CleanupKind
CLEANUP_KIND_CHILD_RUN: CleanupKind
STEP_KIND_UNSPECIFIED: StepKind
STEP_KIND_MODEL: StepKind
STEP_KIND_DIAGNOSTIC: StepKind
STEP_KIND_CORRECTIVE: StepKind
APPROVAL_DECISION_UNSPECIFIED: ApprovalDecision
APPROVAL_DECISION_APPROVE: ApprovalDecision
APPROVAL_DECISION_REJECT: ApprovalDecision
WAIT_REASON_UNSPECIFIED: WaitReason
WAIT_REASON_APPROVAL: WaitReason
WAIT_REASON_UNKNOWN_OUTCOME: WaitReason
WAIT_REASON_BUDGET: WaitReason
WAIT_REASON_SESSION_QUEUE: WaitReason
WAIT_REASON_CLEANUP: WaitReason

class Budgets(_message.Message):
    __slots__ = ("max_model_steps", "max_tool_calls", "max_calls_per_tool", "timeout", "max_input_tokens", "max_output_tokens", "max_cost_micros", "max_handoffs", "max_parallel_tool_calls")
    class MaxCallsPerToolEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MAX_MODEL_STEPS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_CALLS_PER_TOOL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    MAX_HANDOFFS_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    max_model_steps: int
    max_tool_calls: int
    max_calls_per_tool: _containers.ScalarMap[str, int]
    timeout: _duration_pb2.Duration
    max_input_tokens: int
    max_output_tokens: int
    max_cost_micros: int
    max_handoffs: int
    max_parallel_tool_calls: int
    def __init__(self, max_model_steps: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., max_calls_per_tool: _Optional[_Mapping[str, int]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., max_input_tokens: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., max_cost_micros: _Optional[int] = ..., max_handoffs: _Optional[int] = ..., max_parallel_tool_calls: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("model_steps", "tool_calls", "input_tokens", "output_tokens", "cost_micros", "handoffs")
    MODEL_STEPS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_MICROS_FIELD_NUMBER: _ClassVar[int]
    HANDOFFS_FIELD_NUMBER: _ClassVar[int]
    model_steps: int
    tool_calls: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    handoffs: int
    def __init__(self, model_steps: _Optional[int] = ..., tool_calls: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cost_micros: _Optional[int] = ..., handoffs: _Optional[int] = ...) -> None: ...

class ModelSpec(_message.Message):
    __slots__ = ("provider", "name", "options", "profile")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    provider: str
    name: str
    options: _struct_pb2.Struct
    profile: str
    def __init__(self, provider: _Optional[str] = ..., name: _Optional[str] = ..., options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., profile: _Optional[str] = ...) -> None: ...

class AgentSpec(_message.Message):
    __slots__ = ("name", "instructions", "model", "tools", "budgets", "handoffs", "agent_tools")
    NAME_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    HANDOFFS_FIELD_NUMBER: _ClassVar[int]
    AGENT_TOOLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    instructions: str
    model: ModelSpec
    tools: _containers.RepeatedScalarFieldContainer[str]
    budgets: Budgets
    handoffs: _containers.RepeatedScalarFieldContainer[str]
    agent_tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., instructions: _Optional[str] = ..., model: _Optional[_Union[ModelSpec, _Mapping]] = ..., tools: _Optional[_Iterable[str]] = ..., budgets: _Optional[_Union[Budgets, _Mapping]] = ..., handoffs: _Optional[_Iterable[str]] = ..., agent_tools: _Optional[_Iterable[str]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("run_id", "tenant_id", "agent_name", "phase", "revision", "input", "output", "reason", "budgets", "usage", "request_key", "session_id", "metadata", "last_seq", "create_time", "update_time", "deadline", "pending_approval", "created_by", "input_ref", "output_ref", "prune_time", "fault_count", "variables", "needs_attention", "completed_calls", "not_completed_calls", "unknown_calls", "cleanup_status", "cleanups_unknown", "trace_id", "lease_owner", "lease_expire_time")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class VariablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_KEY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    PENDING_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    INPUT_REF_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_REF_FIELD_NUMBER: _ClassVar[int]
    PRUNE_TIME_FIELD_NUMBER: _ClassVar[int]
    FAULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    NEEDS_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_CALLS_FIELD_NUMBER: _ClassVar[int]
    NOT_COMPLETED_CALLS_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_CALLS_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_STATUS_FIELD_NUMBER: _ClassVar[int]
    CLEANUPS_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    tenant_id: str
    agent_name: str
    phase: RunPhase
    revision: int
    input: str
    output: str
    reason: str
    budgets: Budgets
    usage: Usage
    request_key: str
    session_id: str
    metadata: _containers.ScalarMap[str, str]
    last_seq: int
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    pending_approval: ApprovalRequested
    created_by: str
    input_ref: PayloadRef
    output_ref: PayloadRef
    prune_time: _timestamp_pb2.Timestamp
    fault_count: int
    variables: _containers.MessageMap[str, _struct_pb2.Value]
    needs_attention: bool
    completed_calls: _containers.RepeatedCompositeFieldContainer[CallSummary]
    not_completed_calls: _containers.RepeatedCompositeFieldContainer[CallSummary]
    unknown_calls: _containers.RepeatedCompositeFieldContainer[CallSummary]
    cleanup_status: CleanupStatus
    cleanups_unknown: int
    trace_id: str
    lease_owner: str
    lease_expire_time: _timestamp_pb2.Timestamp
    def __init__(self, run_id: _Optional[str] = ..., tenant_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., phase: _Optional[_Union[RunPhase, str]] = ..., revision: _Optional[int] = ..., input: _Optional[str] = ..., output: _Optional[str] = ..., reason: _Optional[str] = ..., budgets: _Optional[_Union[Budgets, _Mapping]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., request_key: _Optional[str] = ..., session_id: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., last_seq: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., pending_approval: _Optional[_Union[ApprovalRequested, _Mapping]] = ..., created_by: _Optional[str] = ..., input_ref: _Optional[_Union[PayloadRef, _Mapping]] = ..., output_ref: _Optional[_Union[PayloadRef, _Mapping]] = ..., prune_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fault_count: _Optional[int] = ..., variables: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., needs_attention: _Optional[bool] = ..., completed_calls: _Optional[_Iterable[_Union[CallSummary, _Mapping]]] = ..., not_completed_calls: _Optional[_Iterable[_Union[CallSummary, _Mapping]]] = ..., unknown_calls: _Optional[_Iterable[_Union[CallSummary, _Mapping]]] = ..., cleanup_status: _Optional[_Union[CleanupStatus, str]] = ..., cleanups_unknown: _Optional[int] = ..., trace_id: _Optional[str] = ..., lease_owner: _Optional[str] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("call_id", "tool", "arguments_json", "arguments")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool: str
    arguments_json: str
    arguments: _struct_pb2.Value
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_json: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class SessionTurn(_message.Message):
    __slots__ = ("run_id", "input", "output")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    input: str
    output: str
    def __init__(self, run_id: _Optional[str] = ..., input: _Optional[str] = ..., output: _Optional[str] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("agent_name", "input", "budgets", "deadline", "session_history", "started_by", "input_ref", "trace_id")
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    SESSION_HISTORY_FIELD_NUMBER: _ClassVar[int]
    STARTED_BY_FIELD_NUMBER: _ClassVar[int]
    INPUT_REF_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    input: str
    budgets: Budgets
    deadline: _timestamp_pb2.Timestamp
    session_history: _containers.RepeatedCompositeFieldContainer[SessionTurn]
    started_by: str
    input_ref: PayloadRef
    trace_id: str
    def __init__(self, agent_name: _Optional[str] = ..., input: _Optional[str] = ..., budgets: _Optional[_Union[Budgets, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_history: _Optional[_Iterable[_Union[SessionTurn, _Mapping]]] = ..., started_by: _Optional[str] = ..., input_ref: _Optional[_Union[PayloadRef, _Mapping]] = ..., trace_id: _Optional[str] = ...) -> None: ...

class StepStarted(_message.Message):
    __slots__ = ("step", "kind", "usage", "reason", "context")
    STEP_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    step: int
    kind: StepKind
    usage: Usage
    reason: str
    context: ContextWindow
    def __init__(self, step: _Optional[int] = ..., kind: _Optional[_Union[StepKind, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., reason: _Optional[str] = ..., context: _Optional[_Union[ContextWindow, _Mapping]] = ...) -> None: ...

class ModelTextDelta(_message.Message):
    __slots__ = ("step", "text", "attempt", "superseded")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_FIELD_NUMBER: _ClassVar[int]
    step: int
    text: str
    attempt: int
    superseded: bool
    def __init__(self, step: _Optional[int] = ..., text: _Optional[str] = ..., attempt: _Optional[int] = ..., superseded: _Optional[bool] = ...) -> None: ...

class ModelCompleted(_message.Message):
    __slots__ = ("step", "text", "tool_calls", "usage_before", "usage_after", "text_ref", "sampling", "model", "response_id", "request_id", "latency", "prompt_estimate_tokens")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    USAGE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    USAGE_AFTER_FIELD_NUMBER: _ClassVar[int]
    TEXT_REF_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    PROMPT_ESTIMATE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    step: int
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    usage_before: Usage
    usage_after: Usage
    text_ref: PayloadRef
    sampling: _struct_pb2.Struct
    model: str
    response_id: str
    request_id: str
    latency: _duration_pb2.Duration
    prompt_estimate_tokens: int
    def __init__(self, step: _Optional[int] = ..., text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., usage_before: _Optional[_Union[Usage, _Mapping]] = ..., usage_after: _Optional[_Union[Usage, _Mapping]] = ..., text_ref: _Optional[_Union[PayloadRef, _Mapping]] = ..., sampling: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., model: _Optional[str] = ..., response_id: _Optional[str] = ..., request_id: _Optional[str] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., prompt_estimate_tokens: _Optional[int] = ...) -> None: ...

class ContextWindow(_message.Message):
    __slots__ = ("strategy", "limit_tokens", "estimated_tokens", "full_tokens", "omitted_before_input", "omitted_after_input", "clipped", "summary", "token_scale_permille")
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FULL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_BEFORE_INPUT_FIELD_NUMBER: _ClassVar[int]
    OMITTED_AFTER_INPUT_FIELD_NUMBER: _ClassVar[int]
    CLIPPED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TOKEN_SCALE_PERMILLE_FIELD_NUMBER: _ClassVar[int]
    strategy: str
    limit_tokens: int
    estimated_tokens: int
    full_tokens: int
    omitted_before_input: int
    omitted_after_input: int
    clipped: _containers.RepeatedCompositeFieldContainer[ClippedResult]
    summary: str
    token_scale_permille: int
    def __init__(self, strategy: _Optional[str] = ..., limit_tokens: _Optional[int] = ..., estimated_tokens: _Optional[int] = ..., full_tokens: _Optional[int] = ..., omitted_before_input: _Optional[int] = ..., omitted_after_input: _Optional[int] = ..., clipped: _Optional[_Iterable[_Union[ClippedResult, _Mapping]]] = ..., summary: _Optional[str] = ..., token_scale_permille: _Optional[int] = ...) -> None: ...

class ClippedResult(_message.Message):
    __slots__ = ("call_id", "kept_bytes", "full_bytes", "entry")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    KEPT_BYTES_FIELD_NUMBER: _ClassVar[int]
    FULL_BYTES_FIELD_NUMBER: _ClassVar[int]
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    kept_bytes: int
    full_bytes: int
    entry: int
    def __init__(self, call_id: _Optional[str] = ..., kept_bytes: _Optional[int] = ..., full_bytes: _Optional[int] = ..., entry: _Optional[int] = ...) -> None: ...

class ToolStarted(_message.Message):
    __slots__ = ("step", "call_id", "tool", "arguments_json", "arguments", "idempotency_key", "attempt", "usage_before", "usage_after", "tool_version", "arguments_ref")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    USAGE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    USAGE_AFTER_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_REF_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool: str
    arguments_json: str
    arguments: _struct_pb2.Value
    idempotency_key: str
    attempt: int
    usage_before: Usage
    usage_after: Usage
    tool_version: str
    arguments_ref: PayloadRef
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_json: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., attempt: _Optional[int] = ..., usage_before: _Optional[_Union[Usage, _Mapping]] = ..., usage_after: _Optional[_Union[Usage, _Mapping]] = ..., tool_version: _Optional[str] = ..., arguments_ref: _Optional[_Union[PayloadRef, _Mapping]] = ...) -> None: ...

class ToolCompleted(_message.Message):
    __slots__ = ("step", "call_id", "tool", "result_json", "result", "replayed", "result_ref", "truncated", "deduplicated", "duplicate_of", "start_time", "end_time", "host")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    RESULT_REF_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_OF_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool: str
    result_json: str
    result: _struct_pb2.Value
    replayed: bool
    result_ref: PayloadRef
    truncated: bool
    deduplicated: bool
    duplicate_of: _tool_pb2.IntentDuplicate
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    host: str
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ..., result_json: _Optional[str] = ..., result: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., replayed: _Optional[bool] = ..., result_ref: _Optional[_Union[PayloadRef, _Mapping]] = ..., truncated: _Optional[bool] = ..., deduplicated: _Optional[bool] = ..., duplicate_of: _Optional[_Union[_tool_pb2.IntentDuplicate, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., host: _Optional[str] = ...) -> None: ...

class ToolFailed(_message.Message):
    __slots__ = ("step", "call_id", "tool", "error", "start_time", "end_time", "host")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool: str
    error: _tool_pb2.ToolError
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    host: str
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ..., error: _Optional[_Union[_tool_pb2.ToolError, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., host: _Optional[str] = ...) -> None: ...

class ApprovalRequested(_message.Message):
    __slots__ = ("approval_id", "call_id", "tool", "arguments_json", "arguments", "args_hash", "impact_summary", "policy_version", "expire_time", "request_time", "tool_version", "variables")
    class VariablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    ARGS_HASH_FIELD_NUMBER: _ClassVar[int]
    IMPACT_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    REQUEST_TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    call_id: str
    tool: str
    arguments_json: str
    arguments: _struct_pb2.Value
    args_hash: str
    impact_summary: str
    policy_version: str
    expire_time: _timestamp_pb2.Timestamp
    request_time: _timestamp_pb2.Timestamp
    tool_version: str
    variables: _containers.MessageMap[str, _struct_pb2.Value]
    def __init__(self, approval_id: _Optional[str] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ..., arguments_json: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., args_hash: _Optional[str] = ..., impact_summary: _Optional[str] = ..., policy_version: _Optional[str] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., request_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tool_version: _Optional[str] = ..., variables: _Optional[_Mapping[str, _struct_pb2.Value]] = ...) -> None: ...

class ApprovalResolved(_message.Message):
    __slots__ = ("approval_id", "decision", "approver", "comment", "override_intent")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    APPROVER_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_INTENT_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    decision: ApprovalDecision
    approver: str
    comment: str
    override_intent: bool
    def __init__(self, approval_id: _Optional[str] = ..., decision: _Optional[_Union[ApprovalDecision, str]] = ..., approver: _Optional[str] = ..., comment: _Optional[str] = ..., override_intent: _Optional[bool] = ...) -> None: ...

class OutcomeResolved(_message.Message):
    __slots__ = ("call_id", "decision", "resolved_by", "comment")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    decision: str
    resolved_by: str
    comment: str
    def __init__(self, call_id: _Optional[str] = ..., decision: _Optional[str] = ..., resolved_by: _Optional[str] = ..., comment: _Optional[str] = ...) -> None: ...

class RetryScheduled(_message.Message):
    __slots__ = ("call_id", "attempt", "delay", "reason", "due_time", "step")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    attempt: int
    delay: _duration_pb2.Duration
    reason: str
    due_time: _timestamp_pb2.Timestamp
    step: int
    def __init__(self, call_id: _Optional[str] = ..., attempt: _Optional[int] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., reason: _Optional[str] = ..., due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., step: _Optional[int] = ...) -> None: ...

class ToolOutcomeUnknown(_message.Message):
    __slots__ = ("step", "call_id", "tool", "idempotency_key", "reason", "call_deadline", "unknown_time")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CALL_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_TIME_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool: str
    idempotency_key: str
    reason: str
    call_deadline: _timestamp_pb2.Timestamp
    unknown_time: _timestamp_pb2.Timestamp
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., reason: _Optional[str] = ..., call_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., unknown_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RunEscalated(_message.Message):
    __slots__ = ("reason", "age", "call_id", "approval_id")
    REASON_FIELD_NUMBER: _ClassVar[int]
    AGE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    reason: str
    age: _duration_pb2.Duration
    call_id: str
    approval_id: str
    def __init__(self, reason: _Optional[str] = ..., age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., call_id: _Optional[str] = ..., approval_id: _Optional[str] = ...) -> None: ...

class CallSummary(_message.Message):
    __slots__ = ("call_id", "tool", "step", "detail")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool: str
    step: int
    detail: str
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., step: _Optional[int] = ..., detail: _Optional[str] = ...) -> None: ...

class Handoff(_message.Message):
    __slots__ = ("step", "call_id", "from_agent", "to_agent", "reason", "usage_after")
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_AGENT_FIELD_NUMBER: _ClassVar[int]
    TO_AGENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_AFTER_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    from_agent: str
    to_agent: str
    reason: str
    usage_after: Usage
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., from_agent: _Optional[str] = ..., to_agent: _Optional[str] = ..., reason: _Optional[str] = ..., usage_after: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class RunCheckpointed(_message.Message):
    __slots__ = ("through_seq",)
    THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    through_seq: int
    def __init__(self, through_seq: _Optional[int] = ...) -> None: ...

class CancelRequested(_message.Message):
    __slots__ = ("reason", "requested_by")
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_BY_FIELD_NUMBER: _ClassVar[int]
    reason: str
    requested_by: str
    def __init__(self, reason: _Optional[str] = ..., requested_by: _Optional[str] = ...) -> None: ...

class RunCompleted(_message.Message):
    __slots__ = ("output", "output_ref")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_REF_FIELD_NUMBER: _ClassVar[int]
    output: str
    output_ref: PayloadRef
    def __init__(self, output: _Optional[str] = ..., output_ref: _Optional[_Union[PayloadRef, _Mapping]] = ...) -> None: ...

class RunFailed(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RunCancelled(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RunEnded(_message.Message):
    __slots__ = ("phase", "reason", "partial", "retryable", "usage", "completed_calls", "not_completed_calls", "unknown_calls")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_CALLS_FIELD_NUMBER: _ClassVar[int]
    NOT_COMPLETED_CALLS_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_CALLS_FIELD_NUMBER: _ClassVar[int]
    phase: RunPhase
    reason: str
    partial: bool
    retryable: bool
    usage: Usage
    completed_calls: _containers.RepeatedCompositeFieldContainer[CallSummary]
    not_completed_calls: _containers.RepeatedCompositeFieldContainer[CallSummary]
    unknown_calls: _containers.RepeatedCompositeFieldContainer[CallSummary]
    def __init__(self, phase: _Optional[_Union[RunPhase, str]] = ..., reason: _Optional[str] = ..., partial: _Optional[bool] = ..., retryable: _Optional[bool] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., completed_calls: _Optional[_Iterable[_Union[CallSummary, _Mapping]]] = ..., not_completed_calls: _Optional[_Iterable[_Union[CallSummary, _Mapping]]] = ..., unknown_calls: _Optional[_Iterable[_Union[CallSummary, _Mapping]]] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("run_id", "seq", "time", "run_started", "step_started", "model_text_delta", "model_completed", "tool_started", "tool_completed", "tool_failed", "approval_requested", "approval_resolved", "retry_scheduled", "run_checkpointed", "cancel_requested", "run_completed", "run_failed", "run_cancelled", "run_ended", "tool_outcome_unknown", "handoff", "outcome_resolved", "run_fault", "run_waiting", "variables_set", "run_escalated", "run_closing", "cleanup_registered", "cleanup_started", "cleanup_completed", "cleanup_failed", "summary_completed", "cleanup_settled")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    STEP_STARTED_FIELD_NUMBER: _ClassVar[int]
    MODEL_TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    MODEL_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TOOL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TOOL_FAILED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    RETRY_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    RUN_CHECKPOINTED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    RUN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    RUN_FAILED_FIELD_NUMBER: _ClassVar[int]
    RUN_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    RUN_ENDED_FIELD_NUMBER: _ClassVar[int]
    TOOL_OUTCOME_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    HANDOFF_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    RUN_FAULT_FIELD_NUMBER: _ClassVar[int]
    RUN_WAITING_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_SET_FIELD_NUMBER: _ClassVar[int]
    RUN_ESCALATED_FIELD_NUMBER: _ClassVar[int]
    RUN_CLOSING_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_REGISTERED_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_STARTED_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_FAILED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_SETTLED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    seq: int
    time: _timestamp_pb2.Timestamp
    run_started: RunStarted
    step_started: StepStarted
    model_text_delta: ModelTextDelta
    model_completed: ModelCompleted
    tool_started: ToolStarted
    tool_completed: ToolCompleted
    tool_failed: ToolFailed
    approval_requested: ApprovalRequested
    approval_resolved: ApprovalResolved
    retry_scheduled: RetryScheduled
    run_checkpointed: RunCheckpointed
    cancel_requested: CancelRequested
    run_completed: RunCompleted
    run_failed: RunFailed
    run_cancelled: RunCancelled
    run_ended: RunEnded
    tool_outcome_unknown: ToolOutcomeUnknown
    handoff: Handoff
    outcome_resolved: OutcomeResolved
    run_fault: RunFault
    run_waiting: RunWaiting
    variables_set: VariablesSet
    run_escalated: RunEscalated
    run_closing: RunClosing
    cleanup_registered: CleanupRegistered
    cleanup_started: CleanupStarted
    cleanup_completed: CleanupCompleted
    cleanup_failed: CleanupFailed
    summary_completed: SummaryCompleted
    cleanup_settled: CleanupSettled
    def __init__(self, run_id: _Optional[str] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., step_started: _Optional[_Union[StepStarted, _Mapping]] = ..., model_text_delta: _Optional[_Union[ModelTextDelta, _Mapping]] = ..., model_completed: _Optional[_Union[ModelCompleted, _Mapping]] = ..., tool_started: _Optional[_Union[ToolStarted, _Mapping]] = ..., tool_completed: _Optional[_Union[ToolCompleted, _Mapping]] = ..., tool_failed: _Optional[_Union[ToolFailed, _Mapping]] = ..., approval_requested: _Optional[_Union[ApprovalRequested, _Mapping]] = ..., approval_resolved: _Optional[_Union[ApprovalResolved, _Mapping]] = ..., retry_scheduled: _Optional[_Union[RetryScheduled, _Mapping]] = ..., run_checkpointed: _Optional[_Union[RunCheckpointed, _Mapping]] = ..., cancel_requested: _Optional[_Union[CancelRequested, _Mapping]] = ..., run_completed: _Optional[_Union[RunCompleted, _Mapping]] = ..., run_failed: _Optional[_Union[RunFailed, _Mapping]] = ..., run_cancelled: _Optional[_Union[RunCancelled, _Mapping]] = ..., run_ended: _Optional[_Union[RunEnded, _Mapping]] = ..., tool_outcome_unknown: _Optional[_Union[ToolOutcomeUnknown, _Mapping]] = ..., handoff: _Optional[_Union[Handoff, _Mapping]] = ..., outcome_resolved: _Optional[_Union[OutcomeResolved, _Mapping]] = ..., run_fault: _Optional[_Union[RunFault, _Mapping]] = ..., run_waiting: _Optional[_Union[RunWaiting, _Mapping]] = ..., variables_set: _Optional[_Union[VariablesSet, _Mapping]] = ..., run_escalated: _Optional[_Union[RunEscalated, _Mapping]] = ..., run_closing: _Optional[_Union[RunClosing, _Mapping]] = ..., cleanup_registered: _Optional[_Union[CleanupRegistered, _Mapping]] = ..., cleanup_started: _Optional[_Union[CleanupStarted, _Mapping]] = ..., cleanup_completed: _Optional[_Union[CleanupCompleted, _Mapping]] = ..., cleanup_failed: _Optional[_Union[CleanupFailed, _Mapping]] = ..., summary_completed: _Optional[_Union[SummaryCompleted, _Mapping]] = ..., cleanup_settled: _Optional[_Union[CleanupSettled, _Mapping]] = ...) -> None: ...

class SummaryCompleted(_message.Message):
    __slots__ = ("step", "text", "entries", "usage_before", "usage_after", "model", "response_id", "request_id", "latency")
    STEP_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    USAGE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    USAGE_AFTER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    step: int
    text: str
    entries: int
    usage_before: Usage
    usage_after: Usage
    model: str
    response_id: str
    request_id: str
    latency: _duration_pb2.Duration
    def __init__(self, step: _Optional[int] = ..., text: _Optional[str] = ..., entries: _Optional[int] = ..., usage_before: _Optional[_Union[Usage, _Mapping]] = ..., usage_after: _Optional[_Union[Usage, _Mapping]] = ..., model: _Optional[str] = ..., response_id: _Optional[str] = ..., request_id: _Optional[str] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class RunClosing(_message.Message):
    __slots__ = ("phase", "reason", "message", "retryable", "output", "output_ref")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_REF_FIELD_NUMBER: _ClassVar[int]
    phase: RunPhase
    reason: str
    message: str
    retryable: bool
    output: str
    output_ref: PayloadRef
    def __init__(self, phase: _Optional[_Union[RunPhase, str]] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., output: _Optional[str] = ..., output_ref: _Optional[_Union[PayloadRef, _Mapping]] = ...) -> None: ...

class CleanupRegistered(_message.Message):
    __slots__ = ("cleanup_id", "kind", "target", "arguments_json", "call_id", "step", "refused_reason", "arguments")
    CLEANUP_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    REFUSED_REASON_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    cleanup_id: str
    kind: CleanupKind
    target: str
    arguments_json: str
    call_id: str
    step: int
    refused_reason: str
    arguments: _struct_pb2.Value
    def __init__(self, cleanup_id: _Optional[str] = ..., kind: _Optional[_Union[CleanupKind, str]] = ..., target: _Optional[str] = ..., arguments_json: _Optional[str] = ..., call_id: _Optional[str] = ..., step: _Optional[int] = ..., refused_reason: _Optional[str] = ..., arguments: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class CleanupStarted(_message.Message):
    __slots__ = ("cleanup_id", "attempt", "idempotency_key", "deadline")
    CLEANUP_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    cleanup_id: str
    attempt: int
    idempotency_key: str
    deadline: _timestamp_pb2.Timestamp
    def __init__(self, cleanup_id: _Optional[str] = ..., attempt: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CleanupCompleted(_message.Message):
    __slots__ = ("cleanup_id", "attempt")
    CLEANUP_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    cleanup_id: str
    attempt: int
    def __init__(self, cleanup_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class CleanupFailed(_message.Message):
    __slots__ = ("cleanup_id", "attempt", "message", "final")
    CLEANUP_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    cleanup_id: str
    attempt: int
    message: str
    final: bool
    def __init__(self, cleanup_id: _Optional[str] = ..., attempt: _Optional[int] = ..., message: _Optional[str] = ..., final: _Optional[bool] = ...) -> None: ...

class CleanupSettled(_message.Message):
    __slots__ = ("retries",)
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    retries: int
    def __init__(self, retries: _Optional[int] = ...) -> None: ...

class VariablesSet(_message.Message):
    __slots__ = ("step", "call_id", "tool", "variables", "removed", "refused_reason")
    class VariablesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    VARIABLES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_REASON_FIELD_NUMBER: _ClassVar[int]
    step: int
    call_id: str
    tool: str
    variables: _containers.MessageMap[str, _struct_pb2.Value]
    removed: _containers.RepeatedScalarFieldContainer[str]
    refused_reason: str
    def __init__(self, step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ..., variables: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., removed: _Optional[_Iterable[str]] = ..., refused_reason: _Optional[str] = ...) -> None: ...

class PayloadRef(_message.Message):
    __slots__ = ("payload_id", "size_bytes", "sha256", "preview", "media_type")
    PAYLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    payload_id: str
    size_bytes: int
    sha256: str
    preview: str
    media_type: str
    def __init__(self, payload_id: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ..., preview: _Optional[str] = ..., media_type: _Optional[str] = ...) -> None: ...

class RunFault(_message.Message):
    __slots__ = ("step", "error_class", "message", "fault_count", "max_faults", "usage_spent", "usage_after")
    STEP_FIELD_NUMBER: _ClassVar[int]
    ERROR_CLASS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FAULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_FAULTS_FIELD_NUMBER: _ClassVar[int]
    USAGE_SPENT_FIELD_NUMBER: _ClassVar[int]
    USAGE_AFTER_FIELD_NUMBER: _ClassVar[int]
    step: int
    error_class: str
    message: str
    fault_count: int
    max_faults: int
    usage_spent: Usage
    usage_after: Usage
    def __init__(self, step: _Optional[int] = ..., error_class: _Optional[str] = ..., message: _Optional[str] = ..., fault_count: _Optional[int] = ..., max_faults: _Optional[int] = ..., usage_spent: _Optional[_Union[Usage, _Mapping]] = ..., usage_after: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class RunWaiting(_message.Message):
    __slots__ = ("reason", "phase", "detail")
    REASON_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    reason: WaitReason
    phase: RunPhase
    detail: str
    def __init__(self, reason: _Optional[_Union[WaitReason, str]] = ..., phase: _Optional[_Union[RunPhase, str]] = ..., detail: _Optional[str] = ...) -> None: ...
