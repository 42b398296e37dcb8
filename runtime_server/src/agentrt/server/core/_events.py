"""Run events (R3.4, R5.1): one frozen class per fact, in the core's own words.

The log stores each event as a type name plus a JSON payload in the proto3 JSON shape of the
matching ``RunEvent`` oneof message; that translation (field names, enum names such as a
phase's wire name) lives in one codec at the store edge (``store/_event_codec.py``), so the
core carries no protobuf names. Fields mirror the proto messages, minus the structured twins
the API derives on reading. A field typed ``X | None`` is one the log may omit: ``None`` means
"absent", and the codec leaves the key out, as the runtime always has.

Timestamps and durations stay in their stored text (RFC 3339, ``"1.500s"``): the core parses
the few it needs, and the text round-trips exactly. They are ``None`` when absent, never "":
an empty text is no Timestamp, and a stored event must always convert (R10.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

from agentrt.server.core._budgets import Budgets, Usage
from agentrt.server.core._phases import Phase
from agentrt.server.core._timefmt import parse_rfc3339_ms

RUN_STARTED = "run.started"
STEP_STARTED = "step.started"
MODEL_TEXT_DELTA = "model.text.delta"
MODEL_COMPLETED = "model.completed"
TOOL_STARTED = "tool.started"
TOOL_COMPLETED = "tool.completed"
TOOL_FAILED = "tool.failed"
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_RESOLVED = "approval.resolved"
RETRY_SCHEDULED = "retry.scheduled"
RUN_CHECKPOINTED = "run.checkpointed"
CANCEL_REQUESTED = "cancel.requested"
RUN_COMPLETED = "run.completed"
RUN_FAILED = "run.failed"
RUN_CANCELLED = "run.cancelled"
RUN_ENDED = "run.ended"
TOOL_OUTCOME_UNKNOWN = "tool.outcome.unknown"
HANDOFF = "handoff"
OUTCOME_RESOLVED = "outcome.resolved"
RUN_FAULT = "run.fault"
VARIABLES_SET = "variables.set"
RUN_ESCALATED = "run.escalated"
RUN_CLOSING = "run.closing"
CLEANUP_REGISTERED = "cleanup.registered"
CLEANUP_STARTED = "cleanup.started"
CLEANUP_COMPLETED = "cleanup.completed"
CLEANUP_FAILED = "cleanup.failed"
CLEANUP_SETTLED = "cleanup.settled"  # closes the cleanup tail after run.ended
SUMMARY_COMPLETED = "summary.completed"
RUN_WAITING = "run.waiting"  # stream-only: never stored, ends a RunAgent stream before the run ends

EVENT_TYPES: tuple[str, ...] = (
    RUN_STARTED,
    STEP_STARTED,
    MODEL_TEXT_DELTA,
    MODEL_COMPLETED,
    TOOL_STARTED,
    TOOL_COMPLETED,
    TOOL_FAILED,
    APPROVAL_REQUESTED,
    APPROVAL_RESOLVED,
    RETRY_SCHEDULED,
    RUN_CHECKPOINTED,
    CANCEL_REQUESTED,
    RUN_COMPLETED,
    RUN_FAILED,
    RUN_CANCELLED,
    RUN_ENDED,
    TOOL_OUTCOME_UNKNOWN,
    HANDOFF,
    OUTCOME_RESOLVED,
    RUN_FAULT,
    RUN_WAITING,
    VARIABLES_SET,
    RUN_ESCALATED,
    RUN_CLOSING,
    CLEANUP_REGISTERED,
    CLEANUP_STARTED,
    CLEANUP_COMPLETED,
    CLEANUP_FAILED,
    SUMMARY_COMPLETED,
    CLEANUP_SETTLED,
)


def oneof_field(event_type: str) -> str:
    """Name of the ``RunEvent`` oneof field for an event type: "run.started" -> "run_started"."""
    return event_type.replace(".text.", "_text_").replace(".", "_")


# -- the core's enums (values are stored or shown to the model: never rename one) --------------------


class StepKind(StrEnum):
    """What a model step is for. The value is what the log stores; the API maps it to ``StepKind``."""

    MODEL = "model"
    DIAGNOSTIC = "diagnostic"  # the one extra step a detected loop earns (R6.2)
    CORRECTIVE = "corrective"  # the one extra step a failed output check earns (R4.3)


STEP_KINDS: tuple[str, ...] = tuple(kind.value for kind in StepKind)


class ToolErrorCode(StrEnum):
    """Why a tool call failed (the tool host's ``ToolErrorCode``, in the core's words)."""

    UNSPECIFIED = "UNSPECIFIED"  # none given, or one newer than this runtime
    INVALID_INPUT = "INVALID_INPUT"
    UNAUTHORIZED = "UNAUTHORIZED"
    TRANSIENT = "TRANSIENT"
    PERMANENT = "PERMANENT"
    CANCELLED = "CANCELLED"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    KEY_CONFLICT = "KEY_CONFLICT"
    FENCED = "FENCED"
    NOT_ALLOWED = "NOT_ALLOWED"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"


class ApprovalDecision(StrEnum):
    """A person's answer to an approval request."""

    UNSPECIFIED = "UNSPECIFIED"
    APPROVE = "APPROVE"
    REJECT = "REJECT"


class CleanupKind(StrEnum):
    """What releases a registered resource."""

    UNSPECIFIED = "UNSPECIFIED"  # none given, or one newer than this runtime
    TOOL = "TOOL"  # a call of a tool of the registering tool's host
    HOOK = "HOOK"  # the server's agentrt_cleanup hook
    CHILD_RUN = "CHILD_RUN"  # a child run: cancelled, then awaited


class OutcomeDecision(StrEnum):
    """A person's settlement of a write whose outcome was unknown."""

    UNSPECIFIED = "UNSPECIFIED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RETRY = "RETRY"


# -- values events carry -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CallSummary:
    """One tool call in a partial run's summary (the proto ``CallSummary``)."""

    call_id: str
    tool: str = ""
    step: int = 0
    error: ToolErrorCode | None = None  # a call that failed: its error code
    detail: str = ""  # otherwise why it is listed where it is: "not_started", "no_outcome"


@dataclass(frozen=True, slots=True, kw_only=True)
class PayloadRef:
    """What an event carries instead of a large value (the proto ``PayloadRef``)."""

    payload_id: str
    size_bytes: int
    sha256: str
    preview: str
    media_type: str

    def to_json(self) -> dict[str, Any]:
        """The proto3 JSON shape (field names as in the proto)."""
        return {
            "payload_id": self.payload_id,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
            "preview": self.preview,
            "media_type": self.media_type,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PayloadRef:
        """Inverse of :meth:`to_json`; missing fields read as proto3 defaults (int64 may be text)."""
        return cls(
            payload_id=str(data.get("payload_id", "")),
            size_bytes=int(data.get("size_bytes", 0)),
            sha256=str(data.get("sha256", "")),
            preview=str(data.get("preview", "")),
            media_type=str(data.get("media_type", "")),
        )


@dataclass(frozen=True, slots=True)
class ToolError:
    """Why a tool call failed; ``details_json`` is the tool's structured detail, if any."""

    code: ToolErrorCode
    message: str = ""
    details_json: str = ""


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """One tool call a model asked for."""

    call_id: str
    tool: str
    arguments_json: str


VariableValue = str | float | bool  # a run variable's value (an int is a float that happens to be whole)


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentDuplicate:
    """The earlier call a deduplicated call was answered with (the tool host's ``IntentDuplicate``)."""

    intent_key: str = ""
    idempotency_key: str = ""
    run_id: str = ""
    call_id: str = ""
    first_time: str | None = None  # RFC 3339


@dataclass(frozen=True, slots=True)
class SessionTurn:
    """One earlier turn of the run's session, shown to the model before the input."""

    run_id: str = ""
    input: str = ""
    output: str = ""


@dataclass(frozen=True, slots=True)
class ClippedResult:
    """A tool result shown to the model cut to its first ``kept_bytes`` bytes (the log keeps it whole)."""

    call_id: str
    kept_bytes: int
    full_bytes: int
    entry: int  # its position in the history (call ids need not be unique across steps)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextWindow:
    """How a model step's prompt was fitted to the model's context limit (``core/_context.py``).

    The prompt is the history with ``omitted_before_input`` entries left out before the run's
    input (earlier session turns) and ``omitted_after_input`` right after it (the oldest steps),
    ``summary`` standing in for them when there is one, and each result in ``clipped`` cut.
    """

    strategy: str
    limit_tokens: int
    estimated_tokens: int = 0
    full_tokens: int = 0
    omitted_before_input: int = 0
    omitted_after_input: int = 0
    clipped: tuple[ClippedResult, ...] = ()
    summary: str = ""
    token_scale_permille: int = 0  # 0: the byte estimate alone


# -- the events --------------------------------------------------------------------------------------
# ``type_name`` is the stored type; the codec keys its per-class encoders by class.


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted:
    type_name: ClassVar[str] = RUN_STARTED

    agent_name: str = ""
    input: str = ""
    budgets: Budgets | None = None
    deadline: str | None = None  # RFC 3339
    started_by: str = ""
    session_history: tuple[SessionTurn, ...] = ()
    input_ref: PayloadRef | None = None  # ``input`` is then a view of this payload
    trace_id: str = ""  # the OpenTelemetry trace the run's spans are in (32 hex digits); "": none


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted:
    type_name: ClassVar[str] = STEP_STARTED

    step: int
    kind: StepKind = StepKind.MODEL
    reason: str | None = None  # why a diagnostic or corrective step was earned
    usage: Usage = field(default_factory=Usage)
    context: ContextWindow | None = None  # how the prompt was fitted; None: no limit applied


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelTextDelta:
    """Live only (R8.1): a fragment of a model attempt's text, or that attempt being superseded."""

    type_name: ClassVar[str] = MODEL_TEXT_DELTA

    step: int
    attempt: int
    text: str = ""
    superseded: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelCompleted:
    type_name: ClassVar[str] = MODEL_COMPLETED

    step: int
    text: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage_before: Usage = field(default_factory=Usage)
    usage_after: Usage = field(default_factory=Usage)
    text_ref: PayloadRef | None = None  # ``text`` is then a view of this payload
    # The reproducibility record (S004 §12): what shaped the answer and who gave it.
    sampling: Mapping[str, Any] | None = None  # the request's sampling options
    model: str = ""  # "<provider>/<model name>"
    response_id: str = ""  # the provider's id of its response
    request_id: str = ""  # the provider's id of the HTTP request
    latency: str | None = None  # proto3 JSON Duration text, e.g. "1.250s"
    prompt_estimate_tokens: int = 0  # the runtime's estimate of the request (0: not recorded)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStarted:
    type_name: ClassVar[str] = TOOL_STARTED

    step: int
    call_id: str
    tool: str = ""
    arguments_json: str = ""
    idempotency_key: str = ""
    attempt: int | None = None  # absent: the attempt after the last one
    usage_before: Usage = field(default_factory=Usage)
    usage_after: Usage = field(default_factory=Usage)
    tool_version: str | None = None  # absent: the version recorded before, if any
    arguments_ref: PayloadRef | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCompleted:
    type_name: ClassVar[str] = TOOL_COMPLETED

    step: int
    call_id: str
    tool: str = ""
    result_json: str = ""  # what the model sees: the result, or a bounded view of ``result_ref``
    replayed: bool = False
    result_ref: PayloadRef | None = None
    truncated: bool = False
    # The host answered with an earlier call's result: the call repeated its business intent.
    deduplicated: bool = False
    duplicate_of: IntentDuplicate | None = None
    start_time: str | None = None  # RFC 3339: the attempt that produced the result was sent
    end_time: str | None = None  # RFC 3339: the result arrived
    host: str = ""  # the tool host that served the call


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolFailed:
    type_name: ClassVar[str] = TOOL_FAILED

    step: int
    call_id: str
    tool: str = ""
    error: ToolError = field(default_factory=lambda: ToolError(ToolErrorCode.UNSPECIFIED))
    start_time: str | None = None  # RFC 3339: the attempt that failed was sent
    end_time: str | None = None  # RFC 3339: the failure was known
    host: str = ""  # the tool host that served the call


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequested:
    type_name: ClassVar[str] = APPROVAL_REQUESTED

    approval_id: str
    call_id: str  # empty for a budget pause: no call waits
    tool: str = ""
    arguments_json: str = ""
    args_hash: str = ""
    impact_summary: str = ""
    policy_version: str = ""
    expire_time: str | None = None  # RFC 3339
    request_time: str | None = None  # RFC 3339
    tool_version: str | None = None
    variables: Mapping[str, VariableValue] = field(default_factory=dict)  # the run's, when asked

    @property
    def expire_ms(self) -> int:
        """Raises ValueError when the request has no expiry (the runtime always gives one)."""
        return parse_rfc3339_ms(self.expire_time or "")

    @property
    def request_ms(self) -> int:
        """Raises ValueError when the request has no time (the runtime always gives one)."""
        return parse_rfc3339_ms(self.request_time or "")


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalResolved:
    type_name: ClassVar[str] = APPROVAL_RESOLVED

    approval_id: str
    decision: ApprovalDecision = ApprovalDecision.UNSPECIFIED
    approver: str = ""
    comment: str = ""
    override_intent: bool = False  # run the call even if it repeats an earlier call's intent


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryScheduled:
    type_name: ClassVar[str] = RETRY_SCHEDULED

    call_id: str = ""  # empty: the model step is retried as a whole
    step: int | None = None  # set on a model step's retry
    attempt: int = 0
    delay: str | None = None  # proto3 JSON Duration text, e.g. "0.250s"
    reason: str = ""
    due_time: str | None = None  # RFC 3339


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCheckpointed:
    type_name: ClassVar[str] = RUN_CHECKPOINTED

    through_seq: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested:
    type_name: ClassVar[str] = CANCEL_REQUESTED

    reason: str = ""
    requested_by: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCompleted:
    type_name: ClassVar[str] = RUN_COMPLETED

    output: str = ""
    output_ref: PayloadRef | None = None  # ``output`` is then a view of this payload


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFailed:
    type_name: ClassVar[str] = RUN_FAILED

    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCancelled:
    type_name: ClassVar[str] = RUN_CANCELLED

    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded:
    type_name: ClassVar[str] = RUN_ENDED

    phase: Phase
    reason: str | None = None  # absent: the reason the phase's own event gave
    partial: bool = False
    retryable: bool = False
    usage: Usage = field(default_factory=Usage)
    # A partial run's summary (S002 §7.3): what was done, what was not, what nobody knows.
    completed_calls: tuple[CallSummary, ...] = ()
    not_completed_calls: tuple[CallSummary, ...] = ()
    unknown_calls: tuple[CallSummary, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolOutcomeUnknown:
    type_name: ClassVar[str] = TOOL_OUTCOME_UNKNOWN

    step: int
    call_id: str
    tool: str = ""
    idempotency_key: str = ""
    reason: str = ""
    call_deadline: str | None = None  # RFC 3339, of the attempt whose outcome is unknown
    unknown_time: str | None = None  # RFC 3339: when it was found unknown (the wait's age counts from it)

    @property
    def call_deadline_ms(self) -> int:
        return parse_rfc3339_ms(self.call_deadline) if self.call_deadline else 0

    @property
    def unknown_ms(self) -> int:
        """0 when the event predates the field (the wait's age is then not known)."""
        return parse_rfc3339_ms(self.unknown_time) if self.unknown_time else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEscalated:
    """A wait outlived its configured age (or the run's deadline): a person is needed."""

    type_name: ClassVar[str] = RUN_ESCALATED

    reason: str  # an EscalationReason value
    age: str | None = None  # duration text, e.g. "3600s"
    call_id: str = ""
    approval_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Handoff:
    type_name: ClassVar[str] = HANDOFF

    step: int
    call_id: str
    from_agent: str = ""
    to_agent: str = ""
    reason: str = ""
    usage_after: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeResolved:
    type_name: ClassVar[str] = OUTCOME_RESOLVED

    call_id: str
    decision: OutcomeDecision = OutcomeDecision.UNSPECIFIED
    resolved_by: str = ""
    comment: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFault:
    type_name: ClassVar[str] = RUN_FAULT

    step: int = 0
    error_class: str = ""
    message: str = ""
    fault_count: int | None = None  # absent: one more than before
    max_faults: int = 0
    usage_spent: Usage | None = None
    usage_after: Usage | None = None  # absent: the fault spent nothing unrecorded


@dataclass(frozen=True, slots=True, kw_only=True)
class VariablesSet:
    """A tool result set or removed run variables; or asked to and was refused (nothing changed)."""

    type_name: ClassVar[str] = VARIABLES_SET

    step: int = 0
    call_id: str = ""
    tool: str = ""
    variables: Mapping[str, VariableValue] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    refused_reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunClosing:
    """The run has decided how it ends; it releases what it registered first (S002 §8.1)."""

    type_name: ClassVar[str] = RUN_CLOSING

    phase: Phase
    reason: str = ""
    message: str = ""
    retryable: bool = False
    output: str = ""
    output_ref: PayloadRef | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanupRegistered:
    """A resource the run releases when it ends (or a refused request to register one)."""

    type_name: ClassVar[str] = CLEANUP_REGISTERED

    cleanup_id: str = ""  # empty when refused
    kind: CleanupKind = CleanupKind.UNSPECIFIED
    target: str = ""  # the tool, the hook, or the child run id
    arguments_json: str = ""
    call_id: str = ""
    step: int = 0
    refused_reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanupStarted:
    type_name: ClassVar[str] = CLEANUP_STARTED

    cleanup_id: str
    attempt: int = 0
    idempotency_key: str = ""
    deadline: str | None = None  # RFC 3339; set on the run's first cleanup attempt

    @property
    def deadline_ms(self) -> int:
        return parse_rfc3339_ms(self.deadline) if self.deadline else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanupCompleted:
    type_name: ClassVar[str] = CLEANUP_COMPLETED

    cleanup_id: str
    attempt: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanupFailed:
    type_name: ClassVar[str] = CLEANUP_FAILED

    cleanup_id: str
    attempt: int = 0
    message: str = ""
    final: bool = False  # no attempt follows now: the resource may still exist


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanupSettled:
    """The cleanup tail is closed: the background job released what the run's end left UNKNOWN.

    Only the cleanup job appends after ``run.ended`` (cleanup.started/completed/failed); this is
    the last of those, committed with the row's cleanup status DONE. Nothing follows it.
    """

    type_name: ClassVar[str] = CLEANUP_SETTLED

    retries: int = 0  # passes of the cleanup job over the run, this one included


@dataclass(frozen=True, slots=True, kw_only=True)
class SummaryCompleted:
    """The run's model summarised what a step's context window leaves out (its own call)."""

    type_name: ClassVar[str] = SUMMARY_COMPLETED

    step: int
    text: str = ""
    entries: int = 0
    usage_before: Usage = field(default_factory=Usage)
    usage_after: Usage = field(default_factory=Usage)
    model: str = ""
    response_id: str = ""
    request_id: str = ""
    latency: str | None = None  # proto3 JSON Duration text


Event = (
    RunStarted
    | StepStarted
    | ModelTextDelta
    | ModelCompleted
    | ToolStarted
    | ToolCompleted
    | ToolFailed
    | ApprovalRequested
    | ApprovalResolved
    | RetryScheduled
    | RunCheckpointed
    | CancelRequested
    | RunCompleted
    | RunFailed
    | RunCancelled
    | RunEnded
    | ToolOutcomeUnknown
    | Handoff
    | OutcomeResolved
    | RunFault
    | VariablesSet
    | RunEscalated
    | RunClosing
    | CleanupRegistered
    | CleanupStarted
    | CleanupCompleted
    | CleanupFailed
    | SummaryCompleted
    | CleanupSettled
)

# Every event class, by its stored type name (run.waiting is made and sent by the API alone).
EVENT_CLASSES: Mapping[str, type[Event]] = {
    cls.type_name: cls
    for cls in (
        RunStarted,
        StepStarted,
        ModelTextDelta,
        ModelCompleted,
        ToolStarted,
        ToolCompleted,
        ToolFailed,
        ApprovalRequested,
        ApprovalResolved,
        RetryScheduled,
        RunCheckpointed,
        CancelRequested,
        RunCompleted,
        RunFailed,
        RunCancelled,
        RunEnded,
        ToolOutcomeUnknown,
        Handoff,
        OutcomeResolved,
        RunFault,
        VariablesSet,
        RunEscalated,
        RunClosing,
        CleanupRegistered,
        CleanupStarted,
        CleanupCompleted,
        CleanupFailed,
        SummaryCompleted,
        CleanupSettled,
    )
}
