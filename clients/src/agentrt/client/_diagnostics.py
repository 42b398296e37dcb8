"""Human-readable and JSON renderings of a run's diagnostics (``agentrt diagnose``)."""

from __future__ import annotations

import time

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from agentrt.client._format import phase_name
from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2

__all__ = ["diagnostics_to_json", "format_diagnostics"]


def diagnostics_to_json(diagnostics: runtime_service_pb2.RunDiagnostics) -> str:
    """Renders diagnostics as one line of proto3 JSON (field names as in the .proto)."""
    return json_format.MessageToJson(diagnostics, preserving_proto_field_name=True, indent=None)


def _enum(enum: object, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix)  # type: ignore[attr-defined]
    except ValueError:
        return str(int(value))


def _when(stamp: Timestamp, now_s: float) -> str:
    # The moment, and how far from now: "is the next reconcile soon?" is the question.
    moment = stamp.ToJsonString()
    delta = stamp.ToNanoseconds() / 1e9 - now_s
    relative = f"in {delta:.1f}s" if delta >= 0 else f"{-delta:.1f}s ago"
    return f"{moment} ({relative})"


def _lease(d: runtime_service_pb2.RunDiagnostics, now_s: float) -> str:
    if not d.lease_owner:
        wakes = f"; wakes {_when(d.wake_time, now_s)}" if d.HasField("wake_time") else ""
        return f"no replica holds it{wakes}  generation={d.fencing_generation}"
    expires = _when(d.lease_expire_time, now_s) if d.HasField("lease_expire_time") else "-"
    lapsed = ""
    if d.HasField("lease_expire_time") and d.lease_expire_time.ToNanoseconds() / 1e9 < now_s:
        # Not renewed: that replica is gone or stuck; another claims the run at its next poll.
        lapsed = "  LAPSED (any replica may claim it)"
    return f"owner={d.lease_owner}  expires={expires}  generation={d.fencing_generation}{lapsed}"


def _error(d: runtime_service_pb2.RunDiagnostics) -> str:
    if not d.HasField("last_error"):
        return "none"
    e = d.last_error
    at = f" {e.time.ToJsonString()}" if e.HasField("time") else ""
    call = f" {e.tool} call={e.call_id}" if e.call_id else ""
    message = " ".join(e.message.split())
    what = f"{e.code}: {message}" if e.code else message
    return f"{e.event_type} #{e.seq}{at} step={e.step}{call}  {what}".rstrip()


def _call(c: runtime_service_pb2.PendingCall, now_s: float) -> str:
    state = _enum(runtime_service_pb2.PendingCallState, c.state, "PENDING_CALL_STATE_")
    parts = [c.call_id, c.tool, f"step={c.step}", state, f"attempts={c.attempts}"]
    if c.HasField("next_retry_time"):
        parts.append(f"next attempt {c.next_attempt} {_when(c.next_retry_time, now_s)}")
    if c.remote_operation_id:
        parts.append(f"operation={c.remote_operation_id}")
    if c.HasField("call_deadline"):
        parts.append(f"call_deadline={c.call_deadline.ToJsonString()}")
    if c.HasField("unknown_since"):
        parts.append(f"unknown since {_when(c.unknown_since, now_s)}")
    return "    " + "  ".join(parts)


def format_diagnostics(diagnostics: runtime_service_pb2.RunDiagnostics, *, now_s: float | None = None) -> str:
    """Renders diagnostics as readable lines: why the run is where it is.

    Example::

        run 0193c2...  UNKNOWN_OUTCOME  revision=7  last_seq=12
          waits for: UNKNOWN_OUTCOME call_2
          lease:     no replica holds it; wakes 2026-12-02T06:01:02Z (in 0.8s)  generation=4
          faults:    0 of 5
          last error: none
          reconcile: call=call_2  next 2026-12-02T06:01:02Z (in 0.8s)  attempts=3
          pending calls:
            call_2  refund.issue  step=2  OUTCOME_UNKNOWN  attempts=1  operation=0193c2...:call_2

    Args:
        diagnostics: What GetRunDiagnostics returned.
        now_s: The time relative times are counted from (default: now).

    Returns:
        The lines joined by newlines, without a trailing newline.
    """
    d = diagnostics
    now = time.time() if now_s is None else now_s
    lines = [f"run {d.run_id}  {phase_name(d.phase)}  revision={d.revision}  last_seq={d.last_seq}"]
    if d.HasField("waiting"):
        w = d.waiting
        reason = _enum(run_pb2.WaitReason, w.reason, "WAIT_REASON_")
        lines.append(f"  waits for: {reason} {w.detail}".rstrip())
    lines.append(f"  lease:     {_lease(d, now)}")
    lines.append(f"  faults:    {d.fault_count} of {d.max_faults}")
    lines.append(f"  last error: {_error(d)}")
    if d.HasField("reconcile"):
        r = d.reconcile
        if r.HasField("next_attempt_time"):
            nxt = f"next {_when(r.next_attempt_time, now)}"
        elif d.lease_owner:  # claimed: that replica is asking the tool host's ledger now
            nxt = f"next: query in progress on {d.lease_owner}"
        else:
            nxt = "next: when a replica takes it"
        since = f"  unknown since {_when(r.unknown_since, now)}" if r.HasField("unknown_since") else ""
        lines.append(f"  reconcile: call={r.call_id}  {nxt}  attempts={r.attempts}{since}")
    elif d.HasField("wake_time") and d.lease_owner:
        lines.append(f"  wakes:     {_when(d.wake_time, now)}")
    if d.needs_attention:
        lines.append(f"  attention: NEEDS_ATTENTION {d.attention_reason}".rstrip())
    if d.HasField("cancel_request_time"):
        lines.append(f"  cancel:    requested {_when(d.cancel_request_time, now)}")
    if d.cleanup_status != run_pb2.CLEANUP_STATUS_UNSPECIFIED:
        status = _enum(run_pb2.CleanupStatus, d.cleanup_status, "CLEANUP_STATUS_")
        due = f"  due {_when(d.cleanup_due_time, now)}" if d.HasField("cleanup_due_time") else ""
        lines.append(f"  cleanup:   {status}  unknown={d.cleanups_unknown}  retries={d.cleanup_retries}{due}")
    lines.append(f"  trace:     {d.trace_id or '-'}")
    if d.log_note:
        lines.append(f"  note:      {d.log_note}")
    if d.pending_calls:
        lines.append("  pending calls:")
        lines.extend(_call(c, now) for c in d.pending_calls)
    else:
        lines.append("  pending calls: none")
    return "\n".join(lines)
