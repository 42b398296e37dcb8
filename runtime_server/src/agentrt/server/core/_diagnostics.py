"""What an operator is shown of one run (GetRunDiagnostics): pure values and the rules that fill them.

The engine reads the row and the log; these functions only look at what it read. Times are
epoch milliseconds, 0 meaning "not set".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import StrEnum

from agentrt.server.core import _events as ev
from agentrt.server.core._phases import Phase
from agentrt.server.core._state import CallState, RunState

__all__ = [
    "DiagnosedCall",
    "DiagnosedError",
    "PendingCallState",
    "ReconcileSchedule",
    "RunDiagnostics",
    "error_of",
    "pending_calls",
    "trace_id_of",
]


class PendingCallState(StrEnum):
    """Where a call of the current step that has not finished stands."""

    NOT_STARTED = "not_started"
    IN_FLIGHT = "in_flight"
    RETRY_SCHEDULED = "retry_scheduled"
    OUTCOME_UNKNOWN = "outcome_unknown"
    WAITING_APPROVAL = "waiting_approval"


@dataclass(frozen=True, slots=True, kw_only=True)
class DiagnosedCall:
    """One pending call."""

    call_id: str
    tool: str
    step: int
    state: PendingCallState
    attempts: int
    next_attempt: int = 0
    next_retry_ms: int = 0
    remote_operation_id: str = ""  # the tool host ledger's key of the call: its idempotency key
    call_deadline_ms: int = 0
    unknown_since_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DiagnosedError:
    """The latest error a log recorded (see :func:`error_of`)."""

    event_type: str
    seq: int
    time_ms: int
    code: str
    message: str
    step: int = 0
    call_id: str = ""
    tool: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconcileSchedule:
    """The reconcile schedule of an unknown outcome."""

    call_id: str
    next_attempt_ms: int
    attempts: int
    unknown_since_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDiagnostics:
    """An operator's view of one run, as the engine assembled it."""

    run_id: str
    phase: Phase
    cancel_requested_ms: int
    revision: int
    last_seq: int
    lease_owner: str
    lease_expires_ms: int
    fencing_generation: int
    fault_count: int
    max_faults: int
    last_error: DiagnosedError | None
    pending_calls: tuple[DiagnosedCall, ...]
    reconcile: ReconcileSchedule | None
    wake_ms: int
    needs_attention: bool
    attention_reason: str
    cleanup_status: str | None  # a CleanupStatus value; None: no cleanup registered
    cleanups_unknown: int
    cleanup_due_ms: int
    cleanup_retries: int
    trace_id: str
    updated_ms: int
    log_note: str = ""  # why pending_calls and last_error are missing, when they are


def error_of(event: ev.Event, *, seq: int, time_ms: int) -> DiagnosedError | None:
    """``event`` as the run's latest error, when it records one: a run.fault, a tool.failed, a
    retry.scheduled (a failed attempt retried) or a tool.outcome.unknown.

    The message is the event's: run.fault messages and model errors are redacted when recorded,
    tool errors are what the host chose to say, as every event reader sees them.
    """
    match event:
        case ev.RunFault():
            return DiagnosedError(
                event_type=ev.RUN_FAULT,
                seq=seq,
                time_ms=time_ms,
                code=event.error_class,
                message=event.message,
                step=event.step,
            )
        case ev.ToolFailed():
            return DiagnosedError(
                event_type=ev.TOOL_FAILED,
                seq=seq,
                time_ms=time_ms,
                code=event.error.code.value,
                message=event.error.message,
                step=event.step,
                call_id=event.call_id,
                tool=event.tool,
            )
        case ev.RetryScheduled(call_id=call_id) if call_id:
            # A failed attempt of a call that is retried: its reason carries the tool's error.
            return DiagnosedError(
                event_type=ev.RETRY_SCHEDULED,
                seq=seq,
                time_ms=time_ms,
                code="",
                message=event.reason,
                step=event.step or 0,
                call_id=call_id,
            )
        case ev.RetryScheduled():
            # A model step retried as a whole: the reason is the model error (redacted).
            return DiagnosedError(
                event_type=ev.RETRY_SCHEDULED,
                seq=seq,
                time_ms=time_ms,
                code="",
                message=event.reason,
                step=event.step or 0,
            )
        case ev.ToolOutcomeUnknown():
            return DiagnosedError(
                event_type=ev.TOOL_OUTCOME_UNKNOWN,
                seq=seq,
                time_ms=time_ms,
                code="",
                message=event.reason,
                step=event.step,
                call_id=event.call_id,
                tool=event.tool,
            )
        case _:
            return None


def _call_state(call: CallState, state: RunState) -> PendingCallState:
    if call.unknown:
        return PendingCallState.OUTCOME_UNKNOWN
    if call.retry_attempt:
        return PendingCallState.RETRY_SCHEDULED
    pending = state.pending_approval
    if pending is not None and pending.call_id == call.call_id and state.phase is Phase.WAITING_APPROVAL:
        return PendingCallState.WAITING_APPROVAL
    return PendingCallState.IN_FLIGHT if call.started else PendingCallState.NOT_STARTED


def pending_calls(state: RunState) -> tuple[DiagnosedCall, ...]:
    """The current step's calls that have not finished; none once the run has ended."""
    if state.ended or state.phase.terminal:
        return ()
    found: list[DiagnosedCall] = []
    for call in state.calls:
        if call.finished:
            continue
        where = _call_state(call, state)
        retrying = where is PendingCallState.RETRY_SCHEDULED
        unknown = where is PendingCallState.OUTCOME_UNKNOWN
        found.append(
            DiagnosedCall(
                call_id=call.call_id,
                tool=call.tool,
                step=call.step,
                state=where,
                attempts=call.attempts,
                next_attempt=call.retry_attempt if retrying else 0,
                next_retry_ms=call.retry_due_ms if retrying else 0,
                remote_operation_id=call.idempotency_key if call.started else "",
                call_deadline_ms=call.call_deadline_ms if unknown else 0,
                unknown_since_ms=call.unknown_since_ms if unknown else 0,
            )
        )
    return tuple(found)


# version "-" trace-id "-" parent-id "-" flags (W3C Trace Context, level 1, section 3.2).
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_MAX_STORED = 4096  # a stored context longer than this is not a trace context


def trace_id_of(stored: object) -> str:
    """The trace id of a run's stored trace context; "" when there is none or it is not valid.

    ``stored`` is the ``runs.trace_context`` column: a W3C ``traceparent`` header value, or a
    JSON object carrying one under ``"traceparent"`` (a propagator's carrier). Per the
    specification a version ``ff``, an all-zero trace or parent id, or uppercase hex is invalid;
    version ``00`` has exactly four fields, a later version may have more after them.
    """
    if isinstance(stored, bytes):
        try:
            stored = stored.decode("ascii")
        except UnicodeDecodeError:
            return ""
    if not isinstance(stored, str) or not stored or len(stored) > _MAX_STORED:
        return ""
    text = stored.strip()
    if text.startswith("{"):
        try:
            carrier = json.loads(text)
        except ValueError:
            return ""
        value = carrier.get("traceparent") if isinstance(carrier, dict) else None
        if not isinstance(value, str):
            return ""
        text = value.strip()
    match = _TRACEPARENT.fullmatch(text)
    if match is None:
        return ""
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return ""
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return ""
    return trace_id
