import datetime

from agentrt.proto.runtime.v1 import run_pb2 as _run_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OutcomeDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTCOME_DECISION_UNSPECIFIED: _ClassVar[OutcomeDecision]
    OUTCOME_DECISION_SUCCEEDED: _ClassVar[OutcomeDecision]
    OUTCOME_DECISION_FAILED: _ClassVar[OutcomeDecision]
    OUTCOME_DECISION_RETRY: _ClassVar[OutcomeDecision]

class SessionPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_POLICY_UNSPECIFIED: _ClassVar[SessionPolicy]
    SESSION_POLICY_REJECT: _ClassVar[SessionPolicy]
    SESSION_POLICY_ENQUEUE: _ClassVar[SessionPolicy]
    SESSION_POLICY_INTERRUPT: _ClassVar[SessionPolicy]

class EventDetail(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_DETAIL_UNSPECIFIED: _ClassVar[EventDetail]
    EVENT_DETAIL_ALL: _ClassVar[EventDetail]
    EVENT_DETAIL_MILESTONES: _ClassVar[EventDetail]
    EVENT_DETAIL_FINAL: _ClassVar[EventDetail]

class PendingCallState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PENDING_CALL_STATE_UNSPECIFIED: _ClassVar[PendingCallState]
    PENDING_CALL_STATE_NOT_STARTED: _ClassVar[PendingCallState]
    PENDING_CALL_STATE_IN_FLIGHT: _ClassVar[PendingCallState]
    PENDING_CALL_STATE_RETRY_SCHEDULED: _ClassVar[PendingCallState]
    PENDING_CALL_STATE_OUTCOME_UNKNOWN: _ClassVar[PendingCallState]
    PENDING_CALL_STATE_WAITING_APPROVAL: _ClassVar[PendingCallState]
OUTCOME_DECISION_UNSPECIFIED: OutcomeDecision
OUTCOME_DECISION_SUCCEEDED: OutcomeDecision
OUTCOME_DECISION_FAILED: OutcomeDecision
OUTCOME_DECISION_RETRY: OutcomeDecision
SESSION_POLICY_UNSPECIFIED: SessionPolicy
SESSION_POLICY_REJECT: SessionPolicy
SESSION_POLICY_ENQUEUE: SessionPolicy
SESSION_POLICY_INTERRUPT: SessionPolicy
EVENT_DETAIL_UNSPECIFIED: EventDetail
EVENT_DETAIL_ALL: EventDetail
EVENT_DETAIL_MILESTONES: EventDetail
EVENT_DETAIL_FINAL: EventDetail
PENDING_CALL_STATE_UNSPECIFIED: PendingCallState
PENDING_CALL_STATE_NOT_STARTED: PendingCallState
PENDING_CALL_STATE_IN_FLIGHT: PendingCallState
PENDING_CALL_STATE_RETRY_SCHEDULED: PendingCallState
PENDING_CALL_STATE_OUTCOME_UNKNOWN: PendingCallState
PENDING_CALL_STATE_WAITING_APPROVAL: PendingCallState

class RunAgentRequest(_message.Message):
    __slots__ = ("agent_name", "agent", "input", "budgets", "request_key", "metadata", "session_id", "session_policy", "detail", "batch_events")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_KEY_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_POLICY_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    BATCH_EVENTS_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    agent: _run_pb2.AgentSpec
    input: str
    budgets: _run_pb2.Budgets
    request_key: str
    metadata: _containers.ScalarMap[str, str]
    session_id: str
    session_policy: SessionPolicy
    detail: EventDetail
    batch_events: bool
    def __init__(self, agent_name: _Optional[str] = ..., agent: _Optional[_Union[_run_pb2.AgentSpec, _Mapping]] = ..., input: _Optional[str] = ..., budgets: _Optional[_Union[_run_pb2.Budgets, _Mapping]] = ..., request_key: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., session_id: _Optional[str] = ..., session_policy: _Optional[_Union[SessionPolicy, str]] = ..., detail: _Optional[_Union[EventDetail, str]] = ..., batch_events: _Optional[bool] = ...) -> None: ...

class RunAgentResponse(_message.Message):
    __slots__ = ("event", "events")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    event: _run_pb2.RunEvent
    events: _containers.RepeatedCompositeFieldContainer[_run_pb2.RunEvent]
    def __init__(self, event: _Optional[_Union[_run_pb2.RunEvent, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_run_pb2.RunEvent, _Mapping]]] = ...) -> None: ...

class StartRunRequest(_message.Message):
    __slots__ = ("agent_name", "agent", "input", "budgets", "request_key", "metadata", "session_id", "session_policy")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_KEY_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_POLICY_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    agent: _run_pb2.AgentSpec
    input: str
    budgets: _run_pb2.Budgets
    request_key: str
    metadata: _containers.ScalarMap[str, str]
    session_id: str
    session_policy: SessionPolicy
    def __init__(self, agent_name: _Optional[str] = ..., agent: _Optional[_Union[_run_pb2.AgentSpec, _Mapping]] = ..., input: _Optional[str] = ..., budgets: _Optional[_Union[_run_pb2.Budgets, _Mapping]] = ..., request_key: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., session_id: _Optional[str] = ..., session_policy: _Optional[_Union[SessionPolicy, str]] = ...) -> None: ...

class StartRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "phases", "agent_name", "session_id", "needs_attention", "cleanup_unknown")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NEEDS_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    phases: _containers.RepeatedScalarFieldContainer[_run_pb2.RunPhase]
    agent_name: str
    session_id: str
    needs_attention: bool
    cleanup_unknown: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[_run_pb2.RunPhase, str]]] = ..., agent_name: _Optional[str] = ..., session_id: _Optional[str] = ..., needs_attention: _Optional[bool] = ..., cleanup_unknown: _Optional[bool] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[_run_pb2.Run]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[_run_pb2.Run, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StreamRunEventsRequest(_message.Message):
    __slots__ = ("run_id", "after_seq", "follow", "detail", "batch_events")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    BATCH_EVENTS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    follow: bool
    detail: EventDetail
    batch_events: bool
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., follow: _Optional[bool] = ..., detail: _Optional[_Union[EventDetail, str]] = ..., batch_events: _Optional[bool] = ...) -> None: ...

class StreamRunEventsResponse(_message.Message):
    __slots__ = ("event", "events")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    event: _run_pb2.RunEvent
    events: _containers.RepeatedCompositeFieldContainer[_run_pb2.RunEvent]
    def __init__(self, event: _Optional[_Union[_run_pb2.RunEvent, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_run_pb2.RunEvent, _Mapping]]] = ...) -> None: ...

class CancelRunRequest(_message.Message):
    __slots__ = ("run_id", "reason")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    reason: str
    def __init__(self, run_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ("run_id", "approval_id", "decision", "args_hash", "expected_revision", "comment", "override_intent")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    ARGS_HASH_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    OVERRIDE_INTENT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    approval_id: str
    decision: _run_pb2.ApprovalDecision
    args_hash: str
    expected_revision: int
    comment: str
    override_intent: bool
    def __init__(self, run_id: _Optional[str] = ..., approval_id: _Optional[str] = ..., decision: _Optional[_Union[_run_pb2.ApprovalDecision, str]] = ..., args_hash: _Optional[str] = ..., expected_revision: _Optional[int] = ..., comment: _Optional[str] = ..., override_intent: _Optional[bool] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class ResolveOutcomeRequest(_message.Message):
    __slots__ = ("run_id", "call_id", "decision", "result_json", "expected_revision", "comment")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_REVISION_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    call_id: str
    decision: OutcomeDecision
    result_json: str
    expected_revision: int
    comment: str
    def __init__(self, run_id: _Optional[str] = ..., call_id: _Optional[str] = ..., decision: _Optional[_Union[OutcomeDecision, str]] = ..., result_json: _Optional[str] = ..., expected_revision: _Optional[int] = ..., comment: _Optional[str] = ...) -> None: ...

class ResolveOutcomeResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: _run_pb2.Run
    def __init__(self, run: _Optional[_Union[_run_pb2.Run, _Mapping]] = ...) -> None: ...

class GetPayloadRequest(_message.Message):
    __slots__ = ("run_id", "payload_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    payload_id: str
    def __init__(self, run_id: _Optional[str] = ..., payload_id: _Optional[str] = ...) -> None: ...

class GetPayloadResponse(_message.Message):
    __slots__ = ("ref", "offset", "data")
    REF_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ref: _run_pb2.PayloadRef
    offset: int
    data: bytes
    def __init__(self, ref: _Optional[_Union[_run_pb2.PayloadRef, _Mapping]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class GetRunDiagnosticsRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunDiagnosticsResponse(_message.Message):
    __slots__ = ("diagnostics",)
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    diagnostics: RunDiagnostics
    def __init__(self, diagnostics: _Optional[_Union[RunDiagnostics, _Mapping]] = ...) -> None: ...

class RunDiagnostics(_message.Message):
    __slots__ = ("run_id", "phase", "revision", "last_seq", "lease_owner", "lease_expire_time", "fencing_generation", "fault_count", "max_faults", "last_error", "pending_calls", "reconcile", "wake_time", "needs_attention", "attention_reason", "cleanup_status", "cleanups_unknown", "cleanup_due_time", "cleanup_retries", "trace_id", "cancel_request_time", "update_time", "log_note", "waiting")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    FENCING_GENERATION_FIELD_NUMBER: _ClassVar[int]
    FAULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_FAULTS_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_FIELD_NUMBER: _ClassVar[int]
    WAKE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEEDS_ATTENTION_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_REASON_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_STATUS_FIELD_NUMBER: _ClassVar[int]
    CLEANUPS_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_DUE_TIME_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_RETRIES_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUEST_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    LOG_NOTE_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    phase: _run_pb2.RunPhase
    revision: int
    last_seq: int
    lease_owner: str
    lease_expire_time: _timestamp_pb2.Timestamp
    fencing_generation: int
    fault_count: int
    max_faults: int
    last_error: RunError
    pending_calls: _containers.RepeatedCompositeFieldContainer[PendingCall]
    reconcile: ReconcileSchedule
    wake_time: _timestamp_pb2.Timestamp
    needs_attention: bool
    attention_reason: str
    cleanup_status: _run_pb2.CleanupStatus
    cleanups_unknown: int
    cleanup_due_time: _timestamp_pb2.Timestamp
    cleanup_retries: int
    trace_id: str
    cancel_request_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    log_note: str
    waiting: _run_pb2.RunWaiting
    def __init__(self, run_id: _Optional[str] = ..., phase: _Optional[_Union[_run_pb2.RunPhase, str]] = ..., revision: _Optional[int] = ..., last_seq: _Optional[int] = ..., lease_owner: _Optional[str] = ..., lease_expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fencing_generation: _Optional[int] = ..., fault_count: _Optional[int] = ..., max_faults: _Optional[int] = ..., last_error: _Optional[_Union[RunError, _Mapping]] = ..., pending_calls: _Optional[_Iterable[_Union[PendingCall, _Mapping]]] = ..., reconcile: _Optional[_Union[ReconcileSchedule, _Mapping]] = ..., wake_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., needs_attention: _Optional[bool] = ..., attention_reason: _Optional[str] = ..., cleanup_status: _Optional[_Union[_run_pb2.CleanupStatus, str]] = ..., cleanups_unknown: _Optional[int] = ..., cleanup_due_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cleanup_retries: _Optional[int] = ..., trace_id: _Optional[str] = ..., cancel_request_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., log_note: _Optional[str] = ..., waiting: _Optional[_Union[_run_pb2.RunWaiting, _Mapping]] = ...) -> None: ...

class RunError(_message.Message):
    __slots__ = ("event_type", "seq", "time", "code", "message", "step", "call_id", "tool")
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    event_type: str
    seq: int
    time: _timestamp_pb2.Timestamp
    code: str
    message: str
    step: int
    call_id: str
    tool: str
    def __init__(self, event_type: _Optional[str] = ..., seq: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., step: _Optional[int] = ..., call_id: _Optional[str] = ..., tool: _Optional[str] = ...) -> None: ...

class PendingCall(_message.Message):
    __slots__ = ("call_id", "tool", "step", "state", "attempts", "next_attempt", "next_retry_time", "remote_operation_id", "call_deadline", "unknown_since")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    NEXT_RETRY_TIME_FIELD_NUMBER: _ClassVar[int]
    REMOTE_OPERATION_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_SINCE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool: str
    step: int
    state: PendingCallState
    attempts: int
    next_attempt: int
    next_retry_time: _timestamp_pb2.Timestamp
    remote_operation_id: str
    call_deadline: _timestamp_pb2.Timestamp
    unknown_since: _timestamp_pb2.Timestamp
    def __init__(self, call_id: _Optional[str] = ..., tool: _Optional[str] = ..., step: _Optional[int] = ..., state: _Optional[_Union[PendingCallState, str]] = ..., attempts: _Optional[int] = ..., next_attempt: _Optional[int] = ..., next_retry_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., remote_operation_id: _Optional[str] = ..., call_deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., unknown_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReconcileSchedule(_message.Message):
    __slots__ = ("call_id", "next_attempt_time", "attempts", "unknown_since")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_SINCE_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    next_attempt_time: _timestamp_pb2.Timestamp
    attempts: int
    unknown_since: _timestamp_pb2.Timestamp
    def __init__(self, call_id: _Optional[str] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempts: _Optional[int] = ..., unknown_since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
