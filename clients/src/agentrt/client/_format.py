"""Human-readable and JSON renderings of runs and run events (used by the CLI)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.proto.toolhost.v1 import tool_pb2

_CLIP = 200
_PLAIN = re.compile(r"^[\w.@:/+-]+$")


def event_type(event: run_pb2.RunEvent) -> str:
    """Returns the event's type name, e.g. ``"tool.completed"``; ``"unknown"`` when none is set.

    An event of a type newer than this client's generated code has no known case set.
    """
    case = event.WhichOneof("event")
    return case.replace("_", ".") if case else "unknown"


def phase_name(phase: run_pb2.RunPhase) -> str:
    """Returns a phase without its prefix, e.g. ``"COMPLETED"`` for ``RUN_PHASE_COMPLETED``."""
    try:
        return run_pb2.RunPhase.Name(phase).removeprefix("RUN_PHASE_")
    except ValueError:
        return str(int(phase))


def format_event(event: run_pb2.RunEvent) -> str:
    """Renders one event as one readable line.

    Examples::

        #3  model.completed  step=1 tool_calls=orders.lookup(order_id=A100)
        #5  tool.completed  refund.issue -> {"refund_id": "R-1"}
        #9  run.ended  COMPLETED reason=final_answer partial=false retryable=false
        ~  model.text.delta  step=2 "Your refund"

    Live-only events (seq 0, e.g. text deltas) show ``~`` instead of a seq.

    Args:
        event: The event.

    Returns:
        The line, without a trailing newline.
    """
    prefix = f"#{event.seq}" if event.seq else "~"
    case = event.WhichOneof("event")
    if case is None:
        return f"{prefix}  unknown"
    render = _RENDERERS.get(case)
    body = render(getattr(event, case)) if render is not None else _compact(getattr(event, case))
    return f"{prefix}  {event_type(event)}  {body}".rstrip()


def event_to_json(event: run_pb2.RunEvent) -> str:
    """Renders one event as one line of proto3 JSON (field names as in the .proto)."""
    return _json(event)


def run_to_json(run: run_pb2.Run) -> str:
    """Renders a run as one line of proto3 JSON (field names as in the .proto)."""
    return _json(run)


def format_run(run: run_pb2.Run) -> str:
    """Renders a run as a few readable lines: id, phase, input, output, reason, usage, who created it.

    Args:
        run: The run.

    Returns:
        The lines joined by newlines, without a trailing newline.
    """
    lines = [f"run {run.run_id}  {phase_name(run.phase)}  agent={run.agent_name}  revision={run.revision}"]
    lines.append(f"  input:  {_clip(run.input)}")
    if run.output:
        lines.append(f"  output: {_clip(run.output)}")
    if run.reason:
        lines.append(f"  reason: {run.reason}")
    lines.append(f"  usage:  {_usage(run.usage)}")
    if run.lease_owner:  # the replica driving it now, whichever replica answered
        expires = run.lease_expire_time.ToJsonString() if run.HasField("lease_expire_time") else "-"
        lines.append(f"  owner:  {run.lease_owner} (lease until {expires})")
    extra = []
    if run.HasField("create_time"):
        extra.append(f"created={run.create_time.ToJsonString()}")
    if run.HasField("update_time"):
        extra.append(f"updated={run.update_time.ToJsonString()}")
    if run.session_id:
        extra.append(f"session={run.session_id}")
    if run.request_key:
        extra.append(f"request_key={run.request_key}")
    if run.created_by:
        extra.append(f"created_by={run.created_by}")
    extra.append(f"last_seq={run.last_seq}")
    lines.append("  " + " ".join(extra))
    return "\n".join(lines)


def format_run_line(run: run_pb2.Run) -> str:
    """Renders a run as one line, for listings: id, phase, agent, last update, reason."""
    updated = run.update_time.ToJsonString() if run.HasField("update_time") else "-"
    flags = ""
    if run.needs_attention:
        flags += "  NEEDS_ATTENTION"
    if run.cleanup_status == run_pb2.CLEANUP_STATUS_UNKNOWN:
        flags += f"  CLEANUP_UNKNOWN({run.cleanups_unknown})"
    line = f"{run.run_id}  {phase_name(run.phase)}  {run.agent_name}  {updated}  {run.reason}{flags}"
    return line.rstrip()


# --- one renderer per RunEvent case; tests check every oneof field has one ---


def _run_started(e: run_pb2.RunStarted) -> str:
    by = f" by={e.started_by}" if e.started_by else ""
    return f"agent={e.agent_name} input={_quote(e.input)}{by}"


def _step_started(e: run_pb2.StepStarted) -> str:
    kind = (
        run_pb2.StepKind.Name(e.kind).removeprefix("STEP_KIND_").lower()
        if e.kind in run_pb2.StepKind.values()
        else str(e.kind)  # a kind newer than this client
    )
    return f"step={e.step} kind={kind}"


def _model_text_delta(e: run_pb2.ModelTextDelta) -> str:
    if e.superseded:
        return f"step={e.step} attempt={e.attempt} superseded: drop its deltas"
    return f"step={e.step} {_quote(e.text)}"


def _model_completed(e: run_pb2.ModelCompleted) -> str:
    parts = [f"step={e.step}"]
    if e.tool_calls:
        calls = ", ".join(_call(c.tool, c.arguments_json) for c in e.tool_calls)
        parts.append(f"tool_calls={calls}")
    if e.text:
        parts.append(f"text={_quote(e.text)}")
    return " ".join(parts)


def _tool_started(e: run_pb2.ToolStarted) -> str:
    return f"{_call(e.tool, e.arguments_json)} call={e.call_id} attempt={e.attempt}"


def _tool_completed(e: run_pb2.ToolCompleted) -> str:
    replayed = " (replayed)" if e.replayed else ""
    if e.deduplicated:
        replayed += f" (deduplicated: same intent as call {e.duplicate_of.call_id or '?'})"
    return f"{e.tool} -> {_clip(_json_text(e.result_json))}{replayed}"


def _tool_failed(e: run_pb2.ToolFailed) -> str:
    code = tool_pb2.ToolErrorCode.Name(e.error.code).removeprefix("TOOL_ERROR_CODE_")
    return f"{e.tool} !! {code}: {_clip(e.error.message)} call={e.call_id}"


def _approval_requested(e: run_pb2.ApprovalRequested) -> str:
    parts = [_call(e.tool, e.arguments_json), f"approval_id={e.approval_id}", f"args_hash={e.args_hash}"]
    if e.impact_summary:
        parts.append(f"impact={_quote(e.impact_summary)}")
    if e.HasField("expire_time"):
        parts.append(f"expires={e.expire_time.ToJsonString()}")
    return " ".join(parts)


def _approval_resolved(e: run_pb2.ApprovalResolved) -> str:
    decision = run_pb2.ApprovalDecision.Name(e.decision).removeprefix("APPROVAL_DECISION_")
    by = f" by={e.approver}" if e.approver else ""
    comment = f" comment={_quote(e.comment)}" if e.comment else ""
    return f"{e.approval_id} {decision}{by}{comment}"


def _retry_scheduled(e: run_pb2.RetryScheduled) -> str:
    delay = e.delay.ToTimedelta().total_seconds()
    return f"call={e.call_id} attempt={e.attempt} in {delay:g}s reason={e.reason}"


def _run_checkpointed(e: run_pb2.RunCheckpointed) -> str:
    return f"through_seq={e.through_seq}"


def _cancel_requested(e: run_pb2.CancelRequested) -> str:
    by = f" by={e.requested_by}" if e.requested_by else ""
    return f"reason={e.reason}{by}"


def _run_completed(e: run_pb2.RunCompleted) -> str:
    return f"output={_quote(e.output)}"


def _run_failed(e: run_pb2.RunFailed) -> str:
    message = f" message={_quote(e.message)}" if e.message else ""
    return f"reason={e.reason}{message}"


def _run_cancelled(e: run_pb2.RunCancelled) -> str:
    return f"reason={e.reason}"


def _run_ended(e: run_pb2.RunEnded) -> str:
    text = (
        f"{phase_name(e.phase)} reason={e.reason} partial={_bool(e.partial)} "
        f"retryable={_bool(e.retryable)} usage: {_usage(e.usage)}"
    )
    lists = (("done", e.completed_calls), ("not_done", e.not_completed_calls), ("unknown", e.unknown_calls))
    for name, calls in lists:
        if calls:
            text += f" {name}=" + ",".join(f"{c.tool}:{c.call_id}" for c in calls)
    return text


def _run_escalated(e: run_pb2.RunEscalated) -> str:
    waited = f" waited={e.age.ToTimedelta().total_seconds():.0f}s" if e.HasField("age") else ""
    call = f" call={e.call_id}" if e.call_id else ""
    return f"needs attention: {e.reason}{waited}{call}"


def _run_fault(e: run_pb2.RunFault) -> str:
    return (
        f"step={e.step} {e.error_class} fault {e.fault_count}/{e.max_faults} "
        f"message={_quote(e.message)} usage: {_usage(e.usage_after)}"
    )


def _run_waiting(e: run_pb2.RunWaiting) -> str:
    reason = (
        run_pb2.WaitReason.Name(e.reason).removeprefix("WAIT_REASON_")
        if e.reason in run_pb2.WaitReason.values()
        else str(e.reason)
    )
    detail = f" detail={_quote(e.detail)}" if e.detail else ""
    return f"{reason} phase={phase_name(e.phase)}{detail}"


def _tool_outcome_unknown(e: run_pb2.ToolOutcomeUnknown) -> str:
    return f"{e.tool} ?? outcome unknown call={e.call_id} key={e.idempotency_key} reason={_quote(e.reason)}"


def _outcome_resolved(e: run_pb2.OutcomeResolved) -> str:
    decision = e.decision.removeprefix("OUTCOME_DECISION_")
    comment = f" comment={_quote(e.comment)}" if e.comment else ""
    return f"call={e.call_id} {decision} by={e.resolved_by}{comment}"


def _variables_set(e: run_pb2.VariablesSet) -> str:
    if e.refused_reason:
        return f"{e.tool} call={e.call_id} refused: {_quote(e.refused_reason)}"
    values = json_format.MessageToDict(e, preserving_proto_field_name=True).get("variables", {})
    parts = [f"{name}={_clip(json.dumps(values[name], ensure_ascii=False))}" for name in sorted(values)]
    parts += [f"-{name}" for name in e.removed]
    return f"{e.tool} call={e.call_id} " + " ".join(parts)


def _run_closing(e: run_pb2.RunClosing) -> str:
    reason = f" reason={_quote(e.reason)}" if e.reason else ""
    return f"ending {phase_name(e.phase)}{reason}: releasing registered resources first"


def _cleanup_registered(e: run_pb2.CleanupRegistered) -> str:
    kind = (
        run_pb2.CleanupKind.Name(e.kind).removeprefix("CLEANUP_KIND_").lower()
        if e.kind in run_pb2.CleanupKind.values()
        else str(e.kind)
    )
    if e.refused_reason:
        return f"call={e.call_id} {kind} {e.target} refused: {_quote(e.refused_reason)}"
    arguments = f" {_clip(e.arguments_json)}" if e.arguments_json else ""
    return f"{e.cleanup_id} {kind} {e.target}{arguments} call={e.call_id}"


def _cleanup_started(e: run_pb2.CleanupStarted) -> str:
    return f"{e.cleanup_id} attempt={e.attempt}"


def _cleanup_completed(e: run_pb2.CleanupCompleted) -> str:
    return f"{e.cleanup_id} released attempt={e.attempt}"


def _cleanup_failed(e: run_pb2.CleanupFailed) -> str:
    final = " (given up: CLEANUP_UNKNOWN)" if e.final else ""
    return f"{e.cleanup_id} attempt={e.attempt} {_quote(e.message)}{final}"


def _cleanup_settled(e: run_pb2.CleanupSettled) -> str:
    return f"every cleanup released (cleanup job passes: {e.retries}); the run's log is complete"


def _summary_completed(e: run_pb2.SummaryCompleted) -> str:
    return f"step={e.step} {e.entries} entries summarised by {e.model}: {_quote(e.text)}"


def _handoff(e: run_pb2.Handoff) -> str:
    reason = f" reason={_quote(e.reason)}" if e.reason else ""
    return f"{e.from_agent} -> {e.to_agent}{reason}"


_RENDERERS: dict[str, Callable[[Any], str]] = {
    "run_started": _run_started,
    "step_started": _step_started,
    "model_text_delta": _model_text_delta,
    "model_completed": _model_completed,
    "tool_started": _tool_started,
    "tool_completed": _tool_completed,
    "tool_failed": _tool_failed,
    "approval_requested": _approval_requested,
    "approval_resolved": _approval_resolved,
    "retry_scheduled": _retry_scheduled,
    "run_checkpointed": _run_checkpointed,
    "cancel_requested": _cancel_requested,
    "run_completed": _run_completed,
    "run_failed": _run_failed,
    "run_cancelled": _run_cancelled,
    "run_ended": _run_ended,
    "tool_outcome_unknown": _tool_outcome_unknown,
    "handoff": _handoff,
    "outcome_resolved": _outcome_resolved,
    "run_fault": _run_fault,
    "run_waiting": _run_waiting,
    "variables_set": _variables_set,
    "run_escalated": _run_escalated,
    "run_closing": _run_closing,
    "cleanup_registered": _cleanup_registered,
    "cleanup_started": _cleanup_started,
    "cleanup_completed": _cleanup_completed,
    "cleanup_settled": _cleanup_settled,
    "cleanup_failed": _cleanup_failed,
    "summary_completed": _summary_completed,
}


# --- helpers ---


def _json(message: Message) -> str:
    return json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None)


def _compact(message: Message) -> str:
    # Fallback for a case without a renderer: still one line, still readable.
    return _clip(_json(message))


def _usage(u: run_pb2.Usage) -> str:
    return (
        f"model_steps={u.model_steps} tool_calls={u.tool_calls} "
        f"tokens={u.input_tokens}/{u.output_tokens} cost_usd={usd(u.cost_micros)}"
    )


def usd(micros: int) -> str:
    """Micro-dollars as dollars with all six decimals, exactly: 12300 -> "0.012300"."""
    whole, frac = divmod(abs(micros), 1_000_000)
    return f"{'-' if micros < 0 else ''}{whole}.{frac:06d}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _clip(text: str, limit: int = _CLIP) -> str:
    # Keep every rendering on one line and bounded, whatever the model or tool produced.
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _quote(text: str) -> str:
    return json.dumps(_clip(text), ensure_ascii=False)


def _json_text(text: str) -> str:
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return text


def _call(tool: str, arguments_json: str) -> str:
    try:
        args = json.loads(arguments_json) if arguments_json else {}
    except ValueError:
        return f"{tool}({_clip(arguments_json)})"
    if not isinstance(args, dict):
        return f"{tool}({_clip(json.dumps(args, ensure_ascii=False))})"
    rendered = ", ".join(f"{k}={_value(v)}" for k, v in args.items())
    return f"{tool}({_clip(rendered)})"


def _value(v: object) -> str:
    if isinstance(v, str) and _PLAIN.match(v):
        return v
    return json.dumps(v, ensure_ascii=False)
