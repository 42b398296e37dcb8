"""GetRunDiagnostics on the wire: the engine's typed diagnostics as a ``RunDiagnostics`` message."""

from __future__ import annotations

from typing import cast

from google.protobuf import timestamp_pb2

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.server.api._convert import phase_to_proto
from agentrt.server.api._streams import Waiting
from agentrt.server.core import DiagnosedCall, DiagnosedError, PendingCallState, Phase, RunDiagnostics
from agentrt.server.core import events as ev

__all__ = ["PENDING_CALL_STATES", "diagnostics_to_proto"]

# Every state the core names has its enum value (a missing one fails at import, loudly).
PENDING_CALL_STATES: dict[PendingCallState, runtime_service_pb2.PendingCallState] = {
    s: cast(
        "runtime_service_pb2.PendingCallState",
        runtime_service_pb2.PendingCallState.Value(f"PENDING_CALL_STATE_{s.name}"),
    )
    for s in PendingCallState
}


def _set_time(field: timestamp_pb2.Timestamp, epoch_ms: int) -> None:
    if epoch_ms:  # 0: not set, and the field stays absent
        field.FromMilliseconds(epoch_ms)


def _error(error: DiagnosedError, message: runtime_service_pb2.RunError) -> None:
    message.event_type = error.event_type
    message.seq = error.seq
    _set_time(message.time, error.time_ms)
    # A tool error's code as the wire spells it elsewhere (ToolError.code); a fault's class as is.
    message.code = f"TOOL_ERROR_CODE_{error.code}" if error.event_type == ev.TOOL_FAILED else error.code
    message.message = error.message
    message.step = error.step
    message.call_id = error.call_id
    message.tool = error.tool


def _call(call: DiagnosedCall) -> runtime_service_pb2.PendingCall:
    message = runtime_service_pb2.PendingCall(
        call_id=call.call_id,
        tool=call.tool,
        step=call.step,
        state=PENDING_CALL_STATES[call.state],
        attempts=call.attempts,
        next_attempt=call.next_attempt,
        remote_operation_id=call.remote_operation_id,
    )
    _set_time(message.next_retry_time, call.next_retry_ms)
    _set_time(message.call_deadline, call.call_deadline_ms)
    _set_time(message.unknown_since, call.unknown_since_ms)
    return message


def diagnostics_to_proto(
    found: RunDiagnostics, *, waiting: Waiting | None = None
) -> runtime_service_pb2.RunDiagnostics:
    """``found`` as the API shows it, with what the run waits for outside itself (as a stream's
    run.waiting says it); the phase as GetRun shows it (a pending cancel intent shows as
    CANCEL_REQUESTED)."""
    phase = found.phase
    if found.cancel_requested_ms and not phase.terminal and phase is not Phase.UNKNOWN_OUTCOME:
        phase = Phase.CANCEL_REQUESTED
    message = runtime_service_pb2.RunDiagnostics(
        run_id=found.run_id,
        phase=phase_to_proto(phase),
        revision=found.revision,
        last_seq=found.last_seq,
        lease_owner=found.lease_owner,
        fencing_generation=found.fencing_generation,
        fault_count=found.fault_count,
        max_faults=found.max_faults,
        pending_calls=[_call(c) for c in found.pending_calls],
        needs_attention=found.needs_attention,
        attention_reason=found.attention_reason,
        cleanups_unknown=found.cleanups_unknown,
        cleanup_retries=found.cleanup_retries,
        trace_id=found.trace_id,
        log_note=found.log_note,
    )
    _set_time(message.lease_expire_time, found.lease_expires_ms)
    _set_time(message.wake_time, found.wake_ms)
    _set_time(message.cleanup_due_time, found.cleanup_due_ms)
    _set_time(message.cancel_request_time, found.cancel_requested_ms)
    _set_time(message.update_time, found.updated_ms)
    if found.last_error is not None:
        _error(found.last_error, message.last_error)
    if found.reconcile is not None:
        schedule = found.reconcile
        message.reconcile.call_id = schedule.call_id
        message.reconcile.attempts = schedule.attempts
        _set_time(message.reconcile.next_attempt_time, schedule.next_attempt_ms)
        _set_time(message.reconcile.unknown_since, schedule.unknown_since_ms)
        message.reconcile.SetInParent()
    if waiting is not None:
        message.waiting.reason = cast("run_pb2.WaitReason", run_pb2.WaitReason.Value(waiting.reason))
        message.waiting.phase = phase_to_proto(waiting.phase)
        message.waiting.detail = waiting.detail
    if found.cleanup_status:
        status = run_pb2.CleanupStatus.Value(f"CLEANUP_STATUS_{found.cleanup_status}")
        message.cleanup_status = cast("run_pb2.CleanupStatus", status)
    return message
