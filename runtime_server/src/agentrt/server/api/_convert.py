"""Conversions between store/core values and protobuf messages (one place, round-trip tested)."""

from __future__ import annotations

import json
from typing import Any, cast

from google.protobuf import json_format, timestamp_pb2

from agentrt.proto.runtime.v1 import run_pb2
from agentrt.server._config import AgentConfig
from agentrt.server.core import Phase
from agentrt.server.core import events as ev
from agentrt.server.store import RunRecord, StoredEvent


def phase_to_proto(phase: Phase) -> run_pb2.RunPhase:
    return cast("run_pb2.RunPhase", run_pb2.RunPhase.Value(f"RUN_PHASE_{phase.value}"))


def phase_from_proto(value: int) -> Phase:
    """Raises ValueError for RUN_PHASE_UNSPECIFIED or an unknown number."""
    name = run_pb2.RunPhase.Name(value)
    if name == "RUN_PHASE_UNSPECIFIED":
        raise ValueError("RUN_PHASE_UNSPECIFIED is not a phase")
    return Phase(name.removeprefix("RUN_PHASE_"))


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
    json_format.ParseDict(json.loads(record.budgets), run.budgets)
    json_format.ParseDict(json.loads(record.usage), run.usage)
    run.fault_count = record.fault_count or 0  # None on a record create_run built (server default)
    if record.pruned_ms is not None:
        run.prune_time.CopyFrom(_timestamp(record.pruned_ms))
    return run


def event_to_proto(stored: StoredEvent) -> run_pb2.RunEvent:
    """A stored event as a RunEvent; the payload is already in the oneof message's JSON shape."""
    event = run_pb2.RunEvent(run_id=stored.run_id, seq=stored.seq, time=_timestamp(stored.created_ms))
    body = getattr(event, ev.oneof_field(stored.type))
    data = json.loads(stored.payload)
    try:
        # Keyword construction is ~7x faster than ParseDict; it refuses the JSON string forms of
        # Timestamp/Duration, which the few events carrying them go through ParseDict for.
        body.CopyFrom(type(body)(**data))
    except (TypeError, ValueError):
        body.Clear()
        json_format.ParseDict(data, body)
    body.SetInParent()
    return event


def budgets_from_proto(budgets: run_pb2.Budgets) -> dict[str, Any]:
    """Non-zero budget fields as overrides keyed like ``core.Budgets``."""
    out: dict[str, Any] = {}
    for name in (
        "max_model_steps",
        "max_tool_calls",
        "max_input_tokens",
        "max_output_tokens",
        "max_cost_usd",
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
        data["budgets"] = dict(defaults, **budgets_from_proto(spec.budgets))
    return AgentConfig.model_validate(data)
