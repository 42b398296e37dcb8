from agentrt.proto.runtime.v1 import run_pb2 as _run_pb2
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
OUTCOME_DECISION_UNSPECIFIED: OutcomeDecision
OUTCOME_DECISION_SUCCEEDED: OutcomeDecision
OUTCOME_DECISION_FAILED: OutcomeDecision
OUTCOME_DECISION_RETRY: OutcomeDecision
SESSION_POLICY_UNSPECIFIED: SessionPolicy
SESSION_POLICY_REJECT: SessionPolicy
SESSION_POLICY_ENQUEUE: SessionPolicy
SESSION_POLICY_INTERRUPT: SessionPolicy

class RunAgentRequest(_message.Message):
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

class RunAgentResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _run_pb2.RunEvent
    def __init__(self, event: _Optional[_Union[_run_pb2.RunEvent, _Mapping]] = ...) -> None: ...

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
    __slots__ = ("run_id", "after_seq", "follow")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    after_seq: int
    follow: bool
    def __init__(self, run_id: _Optional[str] = ..., after_seq: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class StreamRunEventsResponse(_message.Message):
    __slots__ = ("event",)
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: _run_pb2.RunEvent
    def __init__(self, event: _Optional[_Union[_run_pb2.RunEvent, _Mapping]] = ...) -> None: ...

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
