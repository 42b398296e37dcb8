"""Core events <-> their stored JSON: the one place that knows the log's wire shape.

A stored event is a type name plus the proto3 JSON of the matching ``RunEvent`` oneof message
(so ``api/_convert.py`` turns it into a protobuf without a mapper per type). The core's events
carry no protobuf names; this module adds them on the way in (a phase as ``RUN_PHASE_COMPLETED``,
an error code as ``TOOL_ERROR_CODE_TRANSIENT``) and takes them off on the way out.

It sits at the store edge because it defines what the store holds: the driver encodes what it
commits, and every reader that folds a log (the driver, the API) decodes through it. Keys are
written in the order and with the omissions the runtime has always used, so what is stored is
byte-for-byte what it was before events were typed.

Decoding accepts every shape stored so far: missing keys read as proto3 defaults (or as absent,
for the fields the core types ``X | None``), int64 values as JSON numbers or strings, float
dollars of older runs (upgraded by ``Usage.from_json``), enum values by name or number, and a
step kind in the core's word or the enum's name. Version upgraders (``core.upgrade``) work on
the raw JSON before this. Encoders and decoders are written out per class: this runs for every
event committed and replayed, and generic reflection showed up in step-loop profiles.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, TypeVar

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import Budgets, Phase, Usage
from agentrt.server.core import events as ev
from agentrt.server.store._crypt import UnreadableRecord

__all__ = [
    "UndecodableEvent",
    "approval_decision_from_json",
    "decode_event",
    "encode_event",
    "event_to_json",
    "outcome_decision_from_json",
    "tool_error_from_json",
    "tool_error_to_json",
]


class UndecodableEvent(UnreadableRecord):
    """A stored event has an unknown type or a shape no version of the runtime wrote."""

    reason = "EVENT_UNDECODABLE"


E = TypeVar("E", bound=Enum)


def _enum_tables(
    members: type[E], prefix: str, proto_enum: Any | None
) -> tuple[dict[E, str], dict[object, E]]:
    """(member -> wire name, wire name or number -> member); a member without a proto value fails here.

    ``proto_enum`` is None for a string field that holds enum names (OutcomeResolved.decision).
    """
    to_wire = {m: f"{prefix}{m.name}" for m in members}
    from_wire: dict[object, E] = {}
    for member, wire in to_wire.items():
        from_wire[wire] = member
        if proto_enum is not None:
            from_wire[proto_enum.Value(wire)] = member  # ValueError at import when the proto lacks it
    return to_wire, from_wire


_PHASE_WIRE, _PHASE_FROM = _enum_tables(Phase, "RUN_PHASE_", run_pb2.RunPhase)
_CODE_WIRE, _CODE_FROM = _enum_tables(ev.ToolErrorCode, "TOOL_ERROR_CODE_", tool_pb2.ToolErrorCode)
_APPROVAL_WIRE, _APPROVAL_FROM = _enum_tables(
    ev.ApprovalDecision, "APPROVAL_DECISION_", run_pb2.ApprovalDecision
)
_OUTCOME_WIRE, _OUTCOME_FROM = _enum_tables(
    ev.OutcomeDecision, "OUTCOME_DECISION_", runtime_service_pb2.OutcomeDecision
)
_CLEANUP_KIND_WIRE, _CLEANUP_KIND_FROM = _enum_tables(ev.CleanupKind, "CLEANUP_KIND_", run_pb2.CleanupKind)
_STEP_KIND_FROM: dict[object, ev.StepKind] = {
    **{k.value: k for k in ev.StepKind},
    **{f"STEP_KIND_{k.name}": k for k in ev.StepKind},  # a log written in the API's JSON shape
}


# -- values ------------------------------------------------------------------------------------------


def tool_error_to_json(error: ev.ToolError) -> dict[str, Any]:
    """Proto3 JSON of ``ToolError``: fields at their default are left out, as protobuf does."""
    out: dict[str, Any] = {}
    if error.code is not ev.ToolErrorCode.UNSPECIFIED:
        out["code"] = _CODE_WIRE[error.code]
    if error.message:
        out["message"] = error.message
    if error.details_json:
        out["details_json"] = error.details_json
    return out


def tool_error_from_json(data: Mapping[str, Any]) -> ev.ToolError:
    """A ``ToolError`` from its proto3 JSON (a tool host's, or a stored one); unknown codes read as
    UNSPECIFIED."""
    return ev.ToolError(
        _member(_CODE_FROM, data.get("code"), ev.ToolErrorCode.UNSPECIFIED),
        str(data.get("message", "")),
        str(data.get("details_json", "")),
    )


def approval_decision_from_json(value: object) -> ev.ApprovalDecision:
    """An ``ApprovalDecision`` by name or number; anything else reads as UNSPECIFIED."""
    return _member(_APPROVAL_FROM, value, ev.ApprovalDecision.UNSPECIFIED)


def outcome_decision_from_json(value: object) -> ev.OutcomeDecision:
    """An ``OutcomeDecision`` by name; anything else reads as UNSPECIFIED."""
    return _member(_OUTCOME_FROM, value, ev.OutcomeDecision.UNSPECIFIED)


def _ref(data: Mapping[str, Any] | None) -> ev.PayloadRef | None:
    return ev.PayloadRef.from_json(data) if data is not None else None


def _context_to_json(window: ev.ContextWindow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "strategy": window.strategy,
        "limit_tokens": window.limit_tokens,
        "estimated_tokens": window.estimated_tokens,
        "full_tokens": window.full_tokens,
    }
    if window.omitted_before_input:
        out["omitted_before_input"] = window.omitted_before_input
    if window.omitted_after_input:
        out["omitted_after_input"] = window.omitted_after_input
    if window.clipped:
        out["clipped"] = [
            {"call_id": c.call_id, "kept_bytes": c.kept_bytes, "full_bytes": c.full_bytes, "entry": c.entry}
            for c in window.clipped
        ]
    if window.summary:
        out["summary"] = window.summary
    if window.token_scale_permille:
        out["token_scale_permille"] = window.token_scale_permille
    return out


def _context_from_json(data: Mapping[str, Any] | None) -> ev.ContextWindow | None:
    if data is None:
        return None
    return ev.ContextWindow(
        strategy=str(data.get("strategy", "")),
        limit_tokens=int(data.get("limit_tokens", 0)),
        estimated_tokens=int(data.get("estimated_tokens", 0)),
        full_tokens=int(data.get("full_tokens", 0)),
        omitted_before_input=int(data.get("omitted_before_input", 0)),
        omitted_after_input=int(data.get("omitted_after_input", 0)),
        clipped=tuple(
            ev.ClippedResult(
                str(c.get("call_id", "")),
                int(c.get("kept_bytes", 0)),
                int(c.get("full_bytes", 0)),
                int(c.get("entry", 0)),
            )
            for c in data.get("clipped", ())
        ),
        summary=str(data.get("summary", "")),
        token_scale_permille=int(data.get("token_scale_permille", 0)),
    )


def _call_record(out: dict[str, Any], start_time: str | None, end_time: str | None, host: str) -> None:
    """A tool result's reproducibility record (S004 §12), left out when absent as it always was."""
    if start_time is not None:
        out["start_time"] = start_time
    if end_time is not None:
        out["end_time"] = end_time
    if host:
        out["host"] = host


def _usage_or_none(data: Mapping[str, Any] | None) -> Usage | None:
    # An empty usage (or none) is "absent": a fault that spent nothing unrecorded.
    return Usage.from_json(data) if data else None


_EMPTY: Mapping[str, Any] = {}


def _duplicate_to_json(d: ev.IntentDuplicate) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("intent_key", "idempotency_key", "run_id", "call_id"):
        if value := getattr(d, name):
            out[name] = value
    if d.first_time is not None:
        out["first_time"] = d.first_time
    return out


def _duplicate(data: Mapping[str, Any] | None) -> ev.IntentDuplicate | None:
    if data is None:
        return None
    return ev.IntentDuplicate(
        intent_key=str(data.get("intent_key", "")),
        idempotency_key=str(data.get("idempotency_key", "")),
        run_id=str(data.get("run_id", "")),
        call_id=str(data.get("call_id", "")),
        first_time=data.get("first_time"),
    )


def _variables(data: Mapping[str, Any] | None) -> dict[str, ev.VariableValue]:
    """Run variables as stored (proto3 JSON of a map of Value: plain JSON), kept as they are.

    The runtime writes strings, numbers and booleans only (core/_variables.py); a reader keeps
    whatever a log holds, so that every stored shape converts back to the message it was.
    """
    if not isinstance(data, Mapping):
        return {}
    return {str(k): v for k, v in data.items()}


def _member(table: Mapping[object, E], value: object, default: E) -> E:
    """The member stored as ``value`` (a name or number), or ``default`` for anything else."""
    return table.get(value, default) if isinstance(value, str | int) else default


# -- encoders (keys in the order the runtime has always written them) --------------------------------


def _run_started(e: ev.RunStarted) -> dict[str, Any]:
    out: dict[str, Any] = {"agent_name": e.agent_name, "input": e.input}
    if e.budgets is not None:
        out["budgets"] = e.budgets.to_json()
    if e.deadline is not None:
        out["deadline"] = e.deadline
    out["started_by"] = e.started_by
    if e.session_history:
        out["session_history"] = [
            {"run_id": t.run_id, "input": t.input, "output": t.output} for t in e.session_history
        ]
    if e.input_ref is not None:
        out["input_ref"] = e.input_ref.to_json()
    return out


def _step_started(e: ev.StepStarted) -> dict[str, Any]:
    out: dict[str, Any] = {"step": e.step, "kind": e.kind.value}
    if e.reason is not None:
        out["reason"] = e.reason
    out["usage"] = e.usage.to_json()
    if e.context is not None:
        out["context"] = _context_to_json(e.context)
    return out


def _model_text_delta(e: ev.ModelTextDelta) -> dict[str, Any]:
    out: dict[str, Any] = {"step": e.step, "attempt": e.attempt}
    if e.text or not e.superseded:
        out["text"] = e.text
    if e.superseded:
        out["superseded"] = True
    return out


def _model_completed(e: ev.ModelCompleted) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": e.step,
        "text": e.text,
        "tool_calls": [
            {"call_id": c.call_id, "tool": c.tool, "arguments_json": c.arguments_json} for c in e.tool_calls
        ],
        "usage_before": e.usage_before.to_json(),
        "usage_after": e.usage_after.to_json(),
    }
    if e.text_ref is not None:
        out["text_ref"] = e.text_ref.to_json()
    if e.sampling:
        out["sampling"] = dict(e.sampling)
    if e.model:
        out["model"] = e.model
    if e.response_id:
        out["response_id"] = e.response_id
    if e.request_id:
        out["request_id"] = e.request_id
    if e.latency is not None:
        out["latency"] = e.latency
    if e.prompt_estimate_tokens:
        out["prompt_estimate_tokens"] = e.prompt_estimate_tokens
    return out


def _tool_started(e: ev.ToolStarted) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": e.step,
        "call_id": e.call_id,
        "tool": e.tool,
        "arguments_json": e.arguments_json,
        "idempotency_key": e.idempotency_key,
    }
    if e.attempt is not None:
        out["attempt"] = e.attempt
    out["usage_before"] = e.usage_before.to_json()
    out["usage_after"] = e.usage_after.to_json()
    if e.tool_version is not None:
        out["tool_version"] = e.tool_version
    if e.arguments_ref is not None:
        out["arguments_ref"] = e.arguments_ref.to_json()
    return out


def _tool_completed(e: ev.ToolCompleted) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": e.step,
        "call_id": e.call_id,
        "tool": e.tool,
        "result_json": e.result_json,
        "replayed": e.replayed,
    }
    if e.result_ref is not None:
        out["result_ref"] = e.result_ref.to_json()
    if e.result_ref is not None or e.truncated:  # written with a ref, as the runtime always has
        out["truncated"] = e.truncated
    if e.deduplicated:
        out["deduplicated"] = True
    if e.duplicate_of is not None:
        out["duplicate_of"] = _duplicate_to_json(e.duplicate_of)
    _call_record(out, e.start_time, e.end_time, e.host)
    return out


def _tool_failed(e: ev.ToolFailed) -> dict[str, Any]:
    out = {"step": e.step, "call_id": e.call_id, "tool": e.tool, "error": tool_error_to_json(e.error)}
    _call_record(out, e.start_time, e.end_time, e.host)
    return out


def _approval_requested(e: ev.ApprovalRequested) -> dict[str, Any]:
    out: dict[str, Any] = {
        "approval_id": e.approval_id,
        "call_id": e.call_id,
        "tool": e.tool,
        "arguments_json": e.arguments_json,
        "args_hash": e.args_hash,
        "impact_summary": e.impact_summary,
        "policy_version": e.policy_version,
    }
    if e.expire_time is not None:
        out["expire_time"] = e.expire_time
    if e.request_time is not None:
        out["request_time"] = e.request_time
    if e.tool_version is not None:
        out["tool_version"] = e.tool_version
    if e.variables:
        out["variables"] = dict(e.variables)
    return out


def _approval_resolved(e: ev.ApprovalResolved) -> dict[str, Any]:
    out: dict[str, Any] = {
        "approval_id": e.approval_id,
        "decision": _APPROVAL_WIRE[e.decision],
        "approver": e.approver,
        "comment": e.comment,
    }
    if e.override_intent:
        out["override_intent"] = True
    return out


def _retry_scheduled(e: ev.RetryScheduled) -> dict[str, Any]:
    out: dict[str, Any] = {"call_id": e.call_id}
    if e.step is not None:
        out["step"] = e.step
    out["attempt"] = e.attempt
    if e.delay is not None:
        out["delay"] = e.delay
    out["reason"] = e.reason
    if e.due_time is not None:
        out["due_time"] = e.due_time
    return out


def _run_checkpointed(e: ev.RunCheckpointed) -> dict[str, Any]:
    return {"through_seq": e.through_seq}


def _cancel_requested(e: ev.CancelRequested) -> dict[str, Any]:
    return {"reason": e.reason, "requested_by": e.requested_by}


def _run_completed(e: ev.RunCompleted) -> dict[str, Any]:
    out: dict[str, Any] = {"output": e.output}
    if e.output_ref is not None:
        out["output_ref"] = e.output_ref.to_json()
    return out


def _run_failed(e: ev.RunFailed) -> dict[str, Any]:
    return {"reason": e.reason, "message": e.message}


def _run_cancelled(e: ev.RunCancelled) -> dict[str, Any]:
    return {"reason": e.reason}


def _run_ended(e: ev.RunEnded) -> dict[str, Any]:
    out: dict[str, Any] = {"phase": _PHASE_WIRE[e.phase]}
    if e.reason is not None:
        out["reason"] = e.reason
    out["partial"] = e.partial
    out["retryable"] = e.retryable
    out["usage"] = e.usage.to_json()
    for name in ("completed_calls", "not_completed_calls", "unknown_calls"):
        calls: tuple[ev.CallSummary, ...] = getattr(e, name)
        if calls:  # proto3 JSON leaves an empty list out
            out[name] = [_call_summary(c) for c in calls]
    return out


def call_summary_json(ended: ev.RunEnded) -> str:
    """The calls a run.ended lists, as the ``runs.call_summary`` column keeps them for GetRun."""
    data = _run_ended(ended)
    return json.dumps(
        {k: data[k] for k in ("completed_calls", "not_completed_calls", "unknown_calls") if k in data}
    )


def _call_summary(c: ev.CallSummary) -> dict[str, Any]:
    out: dict[str, Any] = {"call_id": c.call_id, "tool": c.tool, "step": c.step}
    # One text field on the wire: a failed call's error code by its wire name, else the detail.
    detail = _CODE_WIRE[c.error] if c.error is not None else c.detail
    if detail:
        out["detail"] = detail
    return out


def _run_escalated(e: ev.RunEscalated) -> dict[str, Any]:
    out: dict[str, Any] = {"reason": e.reason}
    if e.age is not None:
        out["age"] = e.age
    out["call_id"] = e.call_id
    out["approval_id"] = e.approval_id
    return out


def _tool_outcome_unknown(e: ev.ToolOutcomeUnknown) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": e.step,
        "call_id": e.call_id,
        "tool": e.tool,
        "idempotency_key": e.idempotency_key,
        "reason": e.reason,
    }
    if e.call_deadline is not None:
        out["call_deadline"] = e.call_deadline
    if e.unknown_time is not None:
        out["unknown_time"] = e.unknown_time
    return out


def _handoff(e: ev.Handoff) -> dict[str, Any]:
    return {
        "step": e.step,
        "call_id": e.call_id,
        "from_agent": e.from_agent,
        "to_agent": e.to_agent,
        "reason": e.reason,
        "usage_after": e.usage_after.to_json(),
    }


def _outcome_resolved(e: ev.OutcomeResolved) -> dict[str, Any]:
    return {
        "call_id": e.call_id,
        "decision": _OUTCOME_WIRE[e.decision],
        "resolved_by": e.resolved_by,
        "comment": e.comment,
    }


def _run_fault(e: ev.RunFault) -> dict[str, Any]:
    out: dict[str, Any] = {"step": e.step, "error_class": e.error_class, "message": e.message}
    if e.fault_count is not None:
        out["fault_count"] = e.fault_count
    out["max_faults"] = e.max_faults
    if e.usage_spent is not None:
        out["usage_spent"] = e.usage_spent.to_json()
    if e.usage_after is not None:
        out["usage_after"] = e.usage_after.to_json()
    return out


def _variables_set(e: ev.VariablesSet) -> dict[str, Any]:
    out: dict[str, Any] = {"step": e.step, "call_id": e.call_id, "tool": e.tool}
    if e.variables:
        out["variables"] = dict(e.variables)
    if e.removed:
        out["removed"] = list(e.removed)
    if e.refused_reason:
        out["refused_reason"] = e.refused_reason
    return out


def _run_closing(e: ev.RunClosing) -> dict[str, Any]:
    out: dict[str, Any] = {
        "phase": _PHASE_WIRE[e.phase],
        "reason": e.reason,
        "message": e.message,
        "retryable": e.retryable,
        "output": e.output,
    }
    if e.output_ref is not None:
        out["output_ref"] = e.output_ref.to_json()
    return out


def _cleanup_registered(e: ev.CleanupRegistered) -> dict[str, Any]:
    out: dict[str, Any] = {"cleanup_id": e.cleanup_id}
    if e.kind is not ev.CleanupKind.UNSPECIFIED:
        out["kind"] = _CLEANUP_KIND_WIRE[e.kind]
    out.update(target=e.target, arguments_json=e.arguments_json, call_id=e.call_id, step=e.step)
    if e.refused_reason:
        out["refused_reason"] = e.refused_reason
    return out


def _cleanup_started(e: ev.CleanupStarted) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cleanup_id": e.cleanup_id,
        "attempt": e.attempt,
        "idempotency_key": e.idempotency_key,
    }
    if e.deadline is not None:
        out["deadline"] = e.deadline
    return out


def _cleanup_completed(e: ev.CleanupCompleted) -> dict[str, Any]:
    return {"cleanup_id": e.cleanup_id, "attempt": e.attempt}


def _cleanup_failed(e: ev.CleanupFailed) -> dict[str, Any]:
    return {"cleanup_id": e.cleanup_id, "attempt": e.attempt, "message": e.message, "final": e.final}


def _cleanup_settled(e: ev.CleanupSettled) -> dict[str, Any]:
    return {"retries": e.retries}


def _summary_completed(e: ev.SummaryCompleted) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": e.step,
        "text": e.text,
        "entries": e.entries,
        "usage_before": e.usage_before.to_json(),
        "usage_after": e.usage_after.to_json(),
        "model": e.model,
        "response_id": e.response_id,
        "request_id": e.request_id,
    }
    if e.latency is not None:
        out["latency"] = e.latency
    return out


_ENCODERS: dict[type[Any], Callable[[Any], dict[str, Any]]] = {
    ev.RunStarted: _run_started,
    ev.StepStarted: _step_started,
    ev.ModelTextDelta: _model_text_delta,
    ev.ModelCompleted: _model_completed,
    ev.ToolStarted: _tool_started,
    ev.ToolCompleted: _tool_completed,
    ev.ToolFailed: _tool_failed,
    ev.ApprovalRequested: _approval_requested,
    ev.ApprovalResolved: _approval_resolved,
    ev.RetryScheduled: _retry_scheduled,
    ev.RunCheckpointed: _run_checkpointed,
    ev.CancelRequested: _cancel_requested,
    ev.RunCompleted: _run_completed,
    ev.RunFailed: _run_failed,
    ev.RunCancelled: _run_cancelled,
    ev.RunEnded: _run_ended,
    ev.ToolOutcomeUnknown: _tool_outcome_unknown,
    ev.Handoff: _handoff,
    ev.OutcomeResolved: _outcome_resolved,
    ev.RunFault: _run_fault,
    ev.VariablesSet: _variables_set,
    ev.RunEscalated: _run_escalated,
    ev.RunClosing: _run_closing,
    ev.CleanupRegistered: _cleanup_registered,
    ev.CleanupStarted: _cleanup_started,
    ev.CleanupCompleted: _cleanup_completed,
    ev.CleanupFailed: _cleanup_failed,
    ev.SummaryCompleted: _summary_completed,
    ev.CleanupSettled: _cleanup_settled,
}


def event_to_json(event: ev.Event) -> dict[str, Any]:
    """The stored payload of ``event`` as a dict (the proto3 JSON of its ``RunEvent`` oneof message)."""
    return _ENCODERS[type(event)](event)


def encode_event(event: ev.Event) -> tuple[str, str]:
    """``(type name, JSON text)`` of ``event``, as the log stores it."""
    return event.type_name, json.dumps(_ENCODERS[type(event)](event))


# -- decoders ----------------------------------------------------------------------------------------


def _d_run_started(d: Mapping[str, Any]) -> ev.RunStarted:
    budgets = d.get("budgets")
    return ev.RunStarted(
        agent_name=d.get("agent_name", ""),
        input=d.get("input", ""),
        budgets=Budgets.from_json(budgets) if budgets is not None else None,
        deadline=d.get("deadline"),
        started_by=d.get("started_by", ""),
        session_history=tuple(
            ev.SessionTurn(t.get("run_id", ""), t.get("input", ""), t.get("output", ""))
            for t in d.get("session_history", ())
        ),
        input_ref=_ref(d.get("input_ref")),
    )


def _d_step_started(d: Mapping[str, Any]) -> ev.StepStarted:
    # A kind this runtime does not know (or none) steps like a model step, as it always has.
    return ev.StepStarted(
        step=int(d.get("step", 0)),
        kind=_member(_STEP_KIND_FROM, d.get("kind"), ev.StepKind.MODEL),
        reason=d.get("reason"),
        usage=Usage.from_json(d.get("usage", _EMPTY)),
        context=_context_from_json(d.get("context")),
    )


def _d_model_text_delta(d: Mapping[str, Any]) -> ev.ModelTextDelta:
    return ev.ModelTextDelta(
        step=int(d.get("step", 0)),
        attempt=int(d.get("attempt", 0)),
        text=d.get("text", ""),
        superseded=bool(d.get("superseded", False)),
    )


def _d_model_completed(d: Mapping[str, Any]) -> ev.ModelCompleted:
    return ev.ModelCompleted(
        step=int(d.get("step", 0)),
        text=d.get("text", ""),
        tool_calls=tuple(
            ev.ToolCallRequest(c.get("call_id", ""), c.get("tool", ""), c.get("arguments_json", ""))
            for c in d.get("tool_calls", ())
        ),
        usage_before=Usage.from_json(d.get("usage_before", _EMPTY)),
        usage_after=Usage.from_json(d.get("usage_after", _EMPTY)),
        text_ref=_ref(d.get("text_ref")),
        sampling=dict(d["sampling"]) if d.get("sampling") else None,
        model=d.get("model", ""),
        response_id=d.get("response_id", ""),
        request_id=d.get("request_id", ""),
        latency=d.get("latency"),
        prompt_estimate_tokens=int(d.get("prompt_estimate_tokens", 0)),
    )


def _d_tool_started(d: Mapping[str, Any]) -> ev.ToolStarted:
    attempt = d.get("attempt")
    return ev.ToolStarted(
        step=int(d.get("step", 0)),
        call_id=d.get("call_id", ""),
        tool=d.get("tool", ""),
        arguments_json=d.get("arguments_json", ""),
        idempotency_key=d.get("idempotency_key", ""),
        attempt=int(attempt) if attempt is not None else None,
        usage_before=Usage.from_json(d.get("usage_before", _EMPTY)),
        usage_after=Usage.from_json(d.get("usage_after", _EMPTY)),
        tool_version=d.get("tool_version"),
        arguments_ref=_ref(d.get("arguments_ref")),
    )


def _d_tool_completed(d: Mapping[str, Any]) -> ev.ToolCompleted:
    return ev.ToolCompleted(
        step=int(d.get("step", 0)),
        call_id=d.get("call_id", ""),
        tool=d.get("tool", ""),
        result_json=d.get("result_json", ""),
        replayed=bool(d.get("replayed", False)),
        result_ref=_ref(d.get("result_ref")),
        truncated=bool(d.get("truncated", False)),
        deduplicated=bool(d.get("deduplicated", False)),
        duplicate_of=_duplicate(d.get("duplicate_of")),
        start_time=d.get("start_time"),
        end_time=d.get("end_time"),
        host=d.get("host", ""),
    )


def _d_tool_failed(d: Mapping[str, Any]) -> ev.ToolFailed:
    return ev.ToolFailed(
        step=int(d.get("step", 0)),
        call_id=d.get("call_id", ""),
        tool=d.get("tool", ""),
        error=tool_error_from_json(d.get("error", _EMPTY)),
        start_time=d.get("start_time"),
        end_time=d.get("end_time"),
        host=d.get("host", ""),
    )


def _d_approval_requested(d: Mapping[str, Any]) -> ev.ApprovalRequested:
    return ev.ApprovalRequested(
        approval_id=d.get("approval_id", ""),
        call_id=d.get("call_id", ""),
        tool=d.get("tool", ""),
        arguments_json=d.get("arguments_json", ""),
        args_hash=d.get("args_hash", ""),
        impact_summary=d.get("impact_summary", ""),
        policy_version=d.get("policy_version", ""),
        expire_time=d.get("expire_time"),
        request_time=d.get("request_time"),
        tool_version=d.get("tool_version"),
        variables=_variables(d.get("variables")),
    )


def _d_approval_resolved(d: Mapping[str, Any]) -> ev.ApprovalResolved:
    return ev.ApprovalResolved(
        approval_id=d.get("approval_id", ""),
        decision=approval_decision_from_json(d.get("decision")),
        approver=d.get("approver", ""),
        comment=d.get("comment", ""),
        override_intent=bool(d.get("override_intent", False)),
    )


def _d_retry_scheduled(d: Mapping[str, Any]) -> ev.RetryScheduled:
    step = d.get("step")
    return ev.RetryScheduled(
        call_id=d.get("call_id", ""),
        step=int(step) if step is not None else None,
        attempt=int(d.get("attempt", 0)),
        delay=d.get("delay"),
        reason=d.get("reason", ""),
        due_time=d.get("due_time"),
    )


def _d_run_checkpointed(d: Mapping[str, Any]) -> ev.RunCheckpointed:
    return ev.RunCheckpointed(through_seq=int(d.get("through_seq", 0)))


def _d_cancel_requested(d: Mapping[str, Any]) -> ev.CancelRequested:
    return ev.CancelRequested(reason=d.get("reason", ""), requested_by=d.get("requested_by", ""))


def _d_run_completed(d: Mapping[str, Any]) -> ev.RunCompleted:
    return ev.RunCompleted(output=d.get("output", ""), output_ref=_ref(d.get("output_ref")))


def _d_run_failed(d: Mapping[str, Any]) -> ev.RunFailed:
    return ev.RunFailed(reason=d.get("reason", ""), message=d.get("message", ""))


def _d_run_cancelled(d: Mapping[str, Any]) -> ev.RunCancelled:
    return ev.RunCancelled(reason=d.get("reason", ""))


def _d_run_ended(d: Mapping[str, Any]) -> ev.RunEnded:
    phase = _PHASE_FROM.get(d.get("phase")) if isinstance(d.get("phase"), str | int) else None
    if phase is None:  # RunPhase has no default a run can end in
        raise ValueError(f"run.ended without a phase it could end in: {str(d.get('phase'))[:40]!r}")
    return ev.RunEnded(
        phase=phase,
        reason=d.get("reason"),
        partial=bool(d.get("partial", False)),
        retryable=bool(d.get("retryable", False)),
        usage=Usage.from_json(d.get("usage", _EMPTY)),
        completed_calls=_d_call_summaries(d.get("completed_calls", [])),
        not_completed_calls=_d_call_summaries(d.get("not_completed_calls", [])),
        unknown_calls=_d_call_summaries(d.get("unknown_calls", [])),
    )


def _d_call_summaries(items: Any) -> tuple[ev.CallSummary, ...]:
    if not isinstance(items, list):
        raise TypeError("a call summary list is not a list")
    summaries: list[ev.CallSummary] = []
    for c in items:
        detail = c.get("detail", "")
        error = _CODE_FROM.get(detail) if isinstance(detail, str) else None
        summaries.append(
            ev.CallSummary(
                call_id=c.get("call_id", ""),
                tool=c.get("tool", ""),
                step=int(c.get("step", 0)),
                error=error,
                detail="" if error is not None else detail,
            )
        )
    return tuple(summaries)


def _d_run_escalated(d: Mapping[str, Any]) -> ev.RunEscalated:
    return ev.RunEscalated(
        reason=d.get("reason", ""),
        age=d.get("age"),
        call_id=d.get("call_id", ""),
        approval_id=d.get("approval_id", ""),
    )


def _d_tool_outcome_unknown(d: Mapping[str, Any]) -> ev.ToolOutcomeUnknown:
    return ev.ToolOutcomeUnknown(
        step=int(d.get("step", 0)),
        call_id=d.get("call_id", ""),
        tool=d.get("tool", ""),
        idempotency_key=d.get("idempotency_key", ""),
        reason=d.get("reason", ""),
        call_deadline=d.get("call_deadline"),
        unknown_time=d.get("unknown_time"),
    )


def _d_handoff(d: Mapping[str, Any]) -> ev.Handoff:
    return ev.Handoff(
        step=int(d.get("step", 0)),
        call_id=d.get("call_id", ""),
        from_agent=d.get("from_agent", ""),
        to_agent=d.get("to_agent", ""),
        reason=d.get("reason", ""),
        usage_after=Usage.from_json(d.get("usage_after", _EMPTY)),
    )


def _d_outcome_resolved(d: Mapping[str, Any]) -> ev.OutcomeResolved:
    return ev.OutcomeResolved(
        call_id=d.get("call_id", ""),
        decision=outcome_decision_from_json(d.get("decision")),
        resolved_by=d.get("resolved_by", ""),
        comment=d.get("comment", ""),
    )


def _d_run_fault(d: Mapping[str, Any]) -> ev.RunFault:
    fault_count = d.get("fault_count")
    return ev.RunFault(
        step=int(d.get("step", 0)),
        error_class=d.get("error_class", ""),
        message=d.get("message", ""),
        fault_count=int(fault_count) if fault_count is not None else None,
        max_faults=int(d.get("max_faults", 0)),
        usage_spent=_usage_or_none(d.get("usage_spent")),
        usage_after=_usage_or_none(d.get("usage_after")),
    )


def _d_variables_set(d: Mapping[str, Any]) -> ev.VariablesSet:
    return ev.VariablesSet(
        step=int(d.get("step", 0)),
        call_id=d.get("call_id", ""),
        tool=d.get("tool", ""),
        variables=_variables(d.get("variables")),
        removed=tuple(str(name) for name in d.get("removed", ())),
        refused_reason=d.get("refused_reason", ""),
    )


def _d_run_closing(d: Mapping[str, Any]) -> ev.RunClosing:
    phase = _PHASE_FROM.get(d.get("phase")) if isinstance(d.get("phase"), str | int) else None
    if phase is None:  # RunPhase has no default a run can end in
        raise ValueError(f"run.closing without a phase it could end in: {str(d.get('phase'))[:40]!r}")
    return ev.RunClosing(
        phase=phase,
        reason=d.get("reason", ""),
        message=d.get("message", ""),
        retryable=bool(d.get("retryable", False)),
        output=d.get("output", ""),
        output_ref=_ref(d.get("output_ref")),
    )


def _d_cleanup_registered(d: Mapping[str, Any]) -> ev.CleanupRegistered:
    return ev.CleanupRegistered(
        cleanup_id=d.get("cleanup_id", ""),
        kind=_member(_CLEANUP_KIND_FROM, d.get("kind"), ev.CleanupKind.UNSPECIFIED),
        target=d.get("target", ""),
        arguments_json=d.get("arguments_json", ""),
        call_id=d.get("call_id", ""),
        step=int(d.get("step", 0)),
        refused_reason=d.get("refused_reason", ""),
    )


def _d_cleanup_started(d: Mapping[str, Any]) -> ev.CleanupStarted:
    return ev.CleanupStarted(
        cleanup_id=d.get("cleanup_id", ""),
        attempt=int(d.get("attempt", 0)),
        idempotency_key=d.get("idempotency_key", ""),
        deadline=d.get("deadline"),
    )


def _d_cleanup_completed(d: Mapping[str, Any]) -> ev.CleanupCompleted:
    return ev.CleanupCompleted(cleanup_id=d.get("cleanup_id", ""), attempt=int(d.get("attempt", 0)))


def _d_cleanup_failed(d: Mapping[str, Any]) -> ev.CleanupFailed:
    return ev.CleanupFailed(
        cleanup_id=d.get("cleanup_id", ""),
        attempt=int(d.get("attempt", 0)),
        message=d.get("message", ""),
        final=bool(d.get("final", False)),
    )


def _d_cleanup_settled(d: Mapping[str, Any]) -> ev.CleanupSettled:
    return ev.CleanupSettled(retries=int(d.get("retries", 0)))


def _d_summary_completed(d: Mapping[str, Any]) -> ev.SummaryCompleted:
    return ev.SummaryCompleted(
        step=int(d.get("step", 0)),
        text=d.get("text", ""),
        entries=int(d.get("entries", 0)),
        usage_before=Usage.from_json(d.get("usage_before", _EMPTY)),
        usage_after=Usage.from_json(d.get("usage_after", _EMPTY)),
        model=d.get("model", ""),
        response_id=d.get("response_id", ""),
        request_id=d.get("request_id", ""),
        latency=d.get("latency"),
    )


_DECODERS: dict[str, Callable[[Mapping[str, Any]], ev.Event]] = {
    ev.RUN_STARTED: _d_run_started,
    ev.STEP_STARTED: _d_step_started,
    ev.MODEL_TEXT_DELTA: _d_model_text_delta,
    ev.MODEL_COMPLETED: _d_model_completed,
    ev.TOOL_STARTED: _d_tool_started,
    ev.TOOL_COMPLETED: _d_tool_completed,
    ev.TOOL_FAILED: _d_tool_failed,
    ev.APPROVAL_REQUESTED: _d_approval_requested,
    ev.APPROVAL_RESOLVED: _d_approval_resolved,
    ev.RETRY_SCHEDULED: _d_retry_scheduled,
    ev.RUN_CHECKPOINTED: _d_run_checkpointed,
    ev.CANCEL_REQUESTED: _d_cancel_requested,
    ev.RUN_COMPLETED: _d_run_completed,
    ev.RUN_FAILED: _d_run_failed,
    ev.RUN_CANCELLED: _d_run_cancelled,
    ev.RUN_ENDED: _d_run_ended,
    ev.TOOL_OUTCOME_UNKNOWN: _d_tool_outcome_unknown,
    ev.HANDOFF: _d_handoff,
    ev.OUTCOME_RESOLVED: _d_outcome_resolved,
    ev.RUN_FAULT: _d_run_fault,
    ev.VARIABLES_SET: _d_variables_set,
    ev.RUN_ESCALATED: _d_run_escalated,
    ev.RUN_CLOSING: _d_run_closing,
    ev.CLEANUP_REGISTERED: _d_cleanup_registered,
    ev.CLEANUP_STARTED: _d_cleanup_started,
    ev.CLEANUP_COMPLETED: _d_cleanup_completed,
    ev.CLEANUP_FAILED: _d_cleanup_failed,
    ev.SUMMARY_COMPLETED: _d_summary_completed,
    ev.CLEANUP_SETTLED: _d_cleanup_settled,
}


def decode_event(type_name: str, payload: str | Mapping[str, Any]) -> ev.Event:
    """The core event a stored ``(type name, payload)`` records; the payload as JSON text or parsed.

    Raises:
        UndecodableEvent: the type is unknown, or the payload is not a shape the runtime wrote
            (not JSON, not an object, a field of the wrong kind, a run.ended without a phase).
    """
    decoder = _DECODERS.get(type_name)
    if decoder is None:
        raise UndecodableEvent(
            f"unknown event type {type_name[:60]!r}", metadata={"event_type": type_name[:60]}
        )
    try:
        data = json.loads(payload) if isinstance(payload, str) else payload
        return decoder(data)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise UndecodableEvent(
            f"a stored {type_name} event does not decode: {type(exc).__name__}: {str(exc)[:200]}",
            metadata={"event_type": type_name},
        ) from None
