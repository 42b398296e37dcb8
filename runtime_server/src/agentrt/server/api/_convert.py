"""Conversions between store/core values and protobuf messages (one place, round-trip tested).

The edge between the core's words and the wire: a step's kind ("model") becomes a ``StepKind``
value, money stored as float dollars by older runtimes becomes micro-dollars, and tool
arguments and results are offered as ``google.protobuf.Value`` next to their JSON text.
"""

from __future__ import annotations

import json
from typing import Any, cast

from google.protobuf import duration_pb2, json_format, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.server.api._streams import Detail
from agentrt.server.config import AgentConfig
from agentrt.server.core import (
    ApprovalDecision,
    ApprovalRequested,
    CancelRun,
    GrantBudget,
    JsonBoundsError,
    JsonLimits,
    OutcomeDecision,
    Phase,
    ResolveApproval,
    ResolveOutcome,
    is_budget_pause,
    loads_bounded,
    micros_to_usd,
    upgrade_money_json,
)
from agentrt.server.core import events as ev
from agentrt.server.store import RunRecord, StoredEvent
from agentrt.server.telemetry import trace_id_of

# Tool arguments and results are also sent as a structured Value when their JSON text is within
# these bounds. Each JSON level is two protobuf levels (Value, Struct/ListValue): 32 keeps a
# RunEvent under the 100-level decoding limit of the common protobuf runtimes.
STRUCTURED_LIMITS = JsonLimits(max_depth=32, max_bytes=64 * 1024)


def structured_value(text: str) -> struct_pb2.Value | None:
    """``text`` as a Value, or None when it is not JSON or is past ``STRUCTURED_LIMITS``."""
    if not text:
        return None
    try:
        return json_value(loads_bounded(text, STRUCTURED_LIMITS))
    except (JsonBoundsError, OverflowError, ValueError, TypeError):
        return None  # e.g. an integer too large for a double: the JSON text alone carries it


def json_value(data: Any) -> struct_pb2.Value:
    """Parsed JSON as a Value, the one ``json_format.ParseDict`` makes, at less than half its cost.

    Struct's own ``update`` and ListValue's ``extend`` fill the containers (recursively, in C
    where the runtime allows); the explicit ``SetInParent`` keeps an empty ``{}`` or ``[]``.

    Raises:
        OverflowError: an integer no double holds.
        ValueError: a string protobuf cannot carry (a lone surrogate).
        TypeError: ``data`` is not what ``json.loads`` returns.
    """
    value = struct_pb2.Value()
    if isinstance(data, dict):
        value.struct_value.SetInParent()
        value.struct_value.update(data)
    elif isinstance(data, list):
        value.list_value.SetInParent()
        value.list_value.extend(data)
    elif data is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif isinstance(data, bool):  # before int: a bool is an int
        value.bool_value = data
    elif isinstance(data, int | float):
        value.number_value = data
    elif isinstance(data, str):
        value.string_value = data
    else:
        raise TypeError(f"not a JSON value: {type(data).__name__}")
    return value


# Every kind the core writes has its enum value (a missing one fails at import, loudly).
_STEP_KINDS = {
    k: cast("run_pb2.StepKind", run_pb2.StepKind.Value(f"STEP_KIND_{k.upper()}")) for k in ev.STEP_KINDS
}


def step_kind_to_proto(kind: object) -> run_pb2.StepKind:
    """The core's step kind ("model") as a StepKind; an unknown one as STEP_KIND_UNSPECIFIED.

    The enum's own name ("STEP_KIND_MODEL") is read too: a log written in the API's JSON shape.
    """
    if isinstance(kind, str) and kind.startswith("STEP_KIND_"):
        kind = kind.removeprefix("STEP_KIND_").lower()
    return (
        _STEP_KINDS.get(kind, run_pb2.STEP_KIND_UNSPECIFIED)
        if isinstance(kind, str)
        else run_pb2.STEP_KIND_UNSPECIFIED
    )


# (message, JSON text field, structured twin): the twins the API fills; never stored.
STRUCTURED_TWINS: tuple[tuple[type[Message], str, str], ...] = (
    (run_pb2.ToolCall, "arguments_json", "arguments"),
    (run_pb2.ToolStarted, "arguments_json", "arguments"),
    (run_pb2.ToolCompleted, "result_json", "result"),
    (run_pb2.ApprovalRequested, "arguments_json", "arguments"),
    (run_pb2.CleanupRegistered, "arguments_json", "arguments"),
)
_TWINS = {cls: (text, twin) for cls, text, twin in STRUCTURED_TWINS}


def _set_twin(body: Message) -> None:
    text_field, twin = _TWINS[type(body)]
    value = structured_value(getattr(body, text_field))
    if value is not None:
        getattr(body, twin).CopyFrom(value)


def _add_structured(event_type: str, body: Any) -> None:
    """Fill the structured twins of the JSON text fields (the text stays the record)."""
    if event_type == ev.MODEL_COMPLETED:
        for call in body.tool_calls:
            _set_twin(call)
        return
    # With a ref the arguments text is a preview; a truncated result is not the result.
    partial = (event_type == ev.TOOL_STARTED and body.HasField("arguments_ref")) or (
        event_type == ev.TOOL_COMPLETED and body.truncated
    )
    if type(body) in _TWINS and not partial:
        _set_twin(body)


def phase_to_proto(phase: Phase) -> run_pb2.RunPhase:
    return cast("run_pb2.RunPhase", run_pb2.RunPhase.Value(f"RUN_PHASE_{phase.value}"))


def phase_from_proto(value: int) -> Phase:
    """Raises ValueError for RUN_PHASE_UNSPECIFIED or an unknown number."""
    name = run_pb2.RunPhase.Name(value)
    if name == "RUN_PHASE_UNSPECIFIED":
        raise ValueError("RUN_PHASE_UNSPECIFIED is not a phase")
    return Phase(name.removeprefix("RUN_PHASE_"))


# A person's decisions: every core value has its proto value and back (a missing one fails at import).
_APPROVAL_DECISIONS = {
    d: cast("run_pb2.ApprovalDecision", run_pb2.ApprovalDecision.Value(f"APPROVAL_DECISION_{d.name}"))
    for d in ApprovalDecision
}
_APPROVAL_DECISIONS_FROM = {v: d for d, v in _APPROVAL_DECISIONS.items()}
_OUTCOME_DECISIONS = {
    d: cast(
        "runtime_service_pb2.OutcomeDecision",
        runtime_service_pb2.OutcomeDecision.Value(f"OUTCOME_DECISION_{d.name}"),
    )
    for d in OutcomeDecision
}
_OUTCOME_DECISIONS_FROM = {v: d for d, v in _OUTCOME_DECISIONS.items()}
_COMMENT_CHARS = 400  # what an event keeps of a person's comment


# UNSPECIFIED is ALL: a client that does not know the field gets every event, as it always did.
_DETAILS = {
    runtime_service_pb2.EVENT_DETAIL_UNSPECIFIED: Detail.ALL,
    runtime_service_pb2.EVENT_DETAIL_ALL: Detail.ALL,
    runtime_service_pb2.EVENT_DETAIL_MILESTONES: Detail.MILESTONES,
    runtime_service_pb2.EVENT_DETAIL_FINAL: Detail.FINAL,
}


def detail_from_proto(value: int) -> Detail:
    """Raises KeyError for a number the enum does not have (``check_enum`` refuses those first)."""
    return _DETAILS[cast("runtime_service_pb2.EventDetail", value)]


def approval_decision_to_proto(decision: ApprovalDecision) -> run_pb2.ApprovalDecision:
    return _APPROVAL_DECISIONS[decision]


def approval_decision_from_proto(value: int) -> ApprovalDecision:
    """Raises KeyError for a number the enum does not have (``check_enum`` refuses those first)."""
    return _APPROVAL_DECISIONS_FROM[cast("run_pb2.ApprovalDecision", value)]


def outcome_decision_to_proto(decision: OutcomeDecision) -> runtime_service_pb2.OutcomeDecision:
    return _OUTCOME_DECISIONS[decision]


def outcome_decision_from_proto(value: int) -> OutcomeDecision:
    """Raises KeyError for a number the enum does not have (``check_enum`` refuses those first)."""
    return _OUTCOME_DECISIONS_FROM[cast("runtime_service_pb2.OutcomeDecision", value)]


def approval_signal(
    request: runtime_service_pb2.ResolveApprovalRequest, *, approver: str, pending: ApprovalRequested | None
) -> ResolveApproval | GrantBudget:
    """ResolveApproval as the signal it is: a grant when what waits (``pending``) is a budget pause."""
    decision = approval_decision_from_proto(request.decision)
    if pending is not None and is_budget_pause(pending):
        return GrantBudget(
            approval_id=request.approval_id,
            decision=decision,
            args_hash=request.args_hash,
            approver=approver,
            comment=request.comment[:_COMMENT_CHARS],
        )
    return ResolveApproval(
        approval_id=request.approval_id,
        decision=decision,
        args_hash=request.args_hash,
        approver=approver,
        comment=request.comment[:_COMMENT_CHARS],
        override_intent=request.override_intent and decision is ApprovalDecision.APPROVE,
    )


def outcome_signal(request: runtime_service_pb2.ResolveOutcomeRequest, *, resolved_by: str) -> ResolveOutcome:
    return ResolveOutcome(
        call_id=request.call_id,
        decision=outcome_decision_from_proto(request.decision),
        resolved_by=resolved_by,
        result_json=request.result_json,
        comment=request.comment[:_COMMENT_CHARS],
    )


def cancel_signal(request: runtime_service_pb2.CancelRunRequest, *, requested_by: str) -> CancelRun:
    return CancelRun(reason=request.reason, requested_by=requested_by)


def _timestamp(epoch_ms: int) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromMilliseconds(epoch_ms)
    return stamp


def run_to_proto(record: RunRecord) -> run_pb2.Run:
    """A runs row as the API shows it; a pending cancel intent shows as CANCEL_REQUESTED."""
    phase = Phase(record.phase)
    if record.cancel_requested_ms is not None and not phase.terminal and phase is not Phase.UNKNOWN_OUTCOME:
        phase = Phase.CANCEL_REQUESTED
    run = run_pb2.Run(
        run_id=record.run_id,
        tenant_id=record.tenant_id,
        agent_name=record.agent_name,
        phase=phase_to_proto(phase),
        revision=record.revision,
        input=record.input,
        output=record.output,
        reason=record.reason,
        request_key=record.request_key or "",
        session_id=record.session_id or "",
        metadata=json.loads(record.metadata),
        last_seq=record.last_seq,
        create_time=_timestamp(record.created_ms),
        update_time=_timestamp(record.updated_ms),
        deadline=_timestamp(record.deadline_ms),
        created_by=record.created_by,
        fault_count=record.fault_count,
    )
    if record.input_ref:
        json_format.ParseDict(json.loads(record.input_ref), run.input_ref)
    if record.output_ref:
        json_format.ParseDict(json.loads(record.output_ref), run.output_ref)
    if record.pending_approval and phase is Phase.WAITING_APPROVAL:
        json_format.ParseDict(json.loads(record.pending_approval), run.pending_approval)
        _add_structured(ev.APPROVAL_REQUESTED, run.pending_approval)
    # Rows of runs stored before money was exact hold float dollars (upgraded here, on read).
    json_format.ParseDict(upgrade_money_json(json.loads(record.budgets)), run.budgets)
    json_format.ParseDict(upgrade_money_json(json.loads(record.usage)), run.usage)
    run.fault_count = record.fault_count or 0  # None on a record create_run built (server default)
    if record.pruned_ms is not None:
        run.prune_time.CopyFrom(_timestamp(record.pruned_ms))
    if record.variables:
        for name, value in json.loads(record.variables).items():
            run.variables[name].CopyFrom(_value(value))
    run.needs_attention = bool(record.needs_attention)  # None on a record create_run built
    if record.cleanup_status:
        status = run_pb2.CleanupStatus.Value(f"CLEANUP_STATUS_{record.cleanup_status}")
        run.cleanup_status = cast("run_pb2.CleanupStatus", status)
    run.cleanups_unknown = record.cleanups_unknown or 0
    run.trace_id = trace_id_of(record.trace_context or "")
    if record.lease_owner:  # any replica answers with the row's owner (an ended run's: its cleanup job)
        run.lease_owner = record.lease_owner
        if record.lease_expires_ms is not None:
            run.lease_expire_time.CopyFrom(_timestamp(record.lease_expires_ms))
    if record.call_summary:
        json_format.ParseDict(json.loads(record.call_summary), run, ignore_unknown_fields=True)
    return run


def _value(value: Any) -> struct_pb2.Value:
    message = struct_pb2.Value()
    json_format.ParseDict(value, message)
    return message


_TIME_TYPES: dict[str, type[Message]] = {
    "google.protobuf.Timestamp": timestamp_pb2.Timestamp,
    "google.protobuf.Duration": duration_pb2.Duration,
}
#: Where a Timestamp or Duration sits in a message: its class, or the paths inside a submessage.
_TimePaths = dict[str, "type[Message] | _TimePaths"]


def _time_paths(descriptor: Descriptor, seen: frozenset[str] = frozenset()) -> _TimePaths:
    paths: _TimePaths = {}
    for field in descriptor.fields:
        kind = field.message_type
        if kind is None or field.is_repeated:  # none is repeated today; ParseDict reads one that is
            continue
        if kind.full_name in _TIME_TYPES:
            paths[field.name] = _TIME_TYPES[kind.full_name]
        elif kind.full_name not in seen and not kind.full_name.startswith("google.protobuf."):
            inner = _time_paths(kind, seen | {kind.full_name})
            if inner:
                paths[field.name] = inner
    return paths


_BODY_TIME_PATHS: dict[type[Message], _TimePaths] = {
    type(body): _time_paths(body.DESCRIPTOR)
    for body in (
        getattr(run_pb2.RunEvent(), field.name)
        for field in run_pb2.RunEvent.DESCRIPTOR.oneofs_by_name["event"].fields
    )
}


def _with_time_messages(data: dict[str, Any], paths: _TimePaths) -> dict[str, Any]:
    """``data`` with the JSON strings of its Timestamps and Durations parsed into their messages.

    Keyword construction refuses those strings; ``FromJsonString`` is what ParseDict calls on them.

    Raises:
        ValueError: a string that is no Timestamp or Duration.
    """
    out: dict[str, Any] | None = None
    for name, kind in paths.items():
        value = data.get(name)
        if isinstance(kind, dict):
            if not isinstance(value, dict):
                continue
            parsed: Any = _with_time_messages(value, kind)
            if parsed is value:
                continue
        elif isinstance(value, str):
            parsed = kind()
            parsed.FromJsonString(value)
        else:
            continue
        if out is None:
            out = dict(data)
        out[name] = parsed
    return data if out is None else out


def event_body_from_json(body_type: type[Message], data: dict[str, Any]) -> Message:
    """The event body in ``data`` (its proto JSON, field names as in the proto) by keyword
    construction, ~7x faster than ParseDict.

    Raises:
        TypeError, ValueError: a shape keyword construction cannot take (a camelCase name, an
            enum by name, a 64-bit integer as a string); ParseDict reads those.
    """
    return body_type(**_with_time_messages(data, _BODY_TIME_PATHS[body_type]))


def event_to_proto(stored: StoredEvent) -> run_pb2.RunEvent:
    """A stored event as a RunEvent; the payload is already in the oneof message's JSON shape."""
    event = run_pb2.RunEvent(run_id=stored.run_id, seq=stored.seq, time=_timestamp(stored.created_ms))
    body = getattr(event, ev.oneof_field(stored.type))
    data = json.loads(stored.payload)
    if "cost_usd" in stored.payload:  # an event of a run stored before money was exact
        data = upgrade_money_json(data)
    if stored.type == ev.STEP_STARTED:
        data = dict(data, kind=step_kind_to_proto(data.get("kind")))
    try:
        body.CopyFrom(event_body_from_json(type(body), data))
    except (TypeError, ValueError):
        body.Clear()
        json_format.ParseDict(data, body)
    body.SetInParent()
    _add_structured(stored.type, body)
    return event


def budgets_from_proto(budgets: run_pb2.Budgets) -> dict[str, Any]:
    """Non-zero budget fields as overrides keyed like ``core.Budgets``."""
    out: dict[str, Any] = {}
    for name in (
        "max_model_steps",
        "max_tool_calls",
        "max_input_tokens",
        "max_output_tokens",
        "max_cost_micros",
        "max_handoffs",
        "max_parallel_tool_calls",
    ):
        if getattr(budgets, name):
            out[name] = getattr(budgets, name)
    if budgets.max_calls_per_tool:
        out["max_calls_per_tool"] = dict(budgets.max_calls_per_tool)
    if budgets.HasField("timeout"):
        out["timeout_s"] = budgets.timeout.ToTimedelta().total_seconds()
    return out


def agent_from_proto(spec: run_pb2.AgentSpec) -> AgentConfig:
    """An inline agent spec as an AgentConfig (pydantic validates it; ValidationError on bad input).

    Only the shape is converted here; what an inline agent may name (profile, options, tools,
    agents) is checked before, by the servicer.
    """
    model: dict[str, Any] = {"profile": spec.model.profile, "name": spec.model.name}
    if spec.model.provider:
        model["provider"] = spec.model.provider
    if spec.model.HasField("options"):
        model["options"] = json_format.MessageToDict(spec.model.options)
    data: dict[str, Any] = {
        "instructions": spec.instructions,
        "model": model,
        "tools": list(spec.tools),
        "handoffs": list(spec.handoffs),
        "agent_tools": list(spec.agent_tools),
    }
    if spec.HasField("budgets"):
        defaults = AgentConfig().budgets.model_dump()
        overrides = budgets_from_proto(spec.budgets)
        if "max_cost_micros" in overrides:  # config holds dollars; exact below US$1e9 (MAX_COST_MICROS)
            overrides["max_cost_usd"] = micros_to_usd(overrides.pop("max_cost_micros"))
        data["budgets"] = dict(defaults, **overrides)
    return AgentConfig.model_validate(data)
