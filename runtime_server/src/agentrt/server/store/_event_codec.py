"""Core events <-> their stored JSON: the one place that knows the log's wire shape.

A stored event is a type name plus the proto3 JSON of the matching ``RunEvent`` oneof message
(so ``api/_convert.py`` turns it into a protobuf without a mapper per type). The core's events
carry no protobuf names; this module adds them on the way in (a phase as ``RUN_PHASE_COMPLETED``,
an error code as ``TOOL_ERROR_CODE_TRANSIENT``) and takes them off on the way out.

It sits at the store edge because it defines what the store holds: the driver encodes what it
commits, and every reader that folds a log (the driver, the API) decodes through it.

The codec of every class in ``events.EVENT_CLASSES`` is derived from its dataclass fields
(``_derived_json.py``): keys in field order, ``X | None`` left out when None, missing keys read
as defaults. The tables below hold all that is not that rule: how each enum is written, and the
fields written otherwise, each exactly as the runtime has always written it, so that what is
stored stays byte for byte what it was (tests/fixtures/event_codec/ pins it). A new event whose
fields follow the rule needs no entry; a field of a type the derivation does not know fails at
import.

Decoding accepts every shape stored so far: missing keys read as proto3 defaults (or as absent,
for the fields the core types ``X | None``), int64 values as JSON numbers or strings, float
dollars of older runs (upgraded by ``Usage.from_json``), enum values by name or number, and a
step kind in the core's word or the enum's name. Version upgraders (``core.upgrade``) work on
the raw JSON before this.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import Enum
from typing import Any

from agentrt.proto.runtime.v1 import run_pb2, runtime_service_pb2
from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import Phase
from agentrt.server.core import events as ev
from agentrt.server.store._crypt import UnreadableRecord
from agentrt.server.store._derived_json import (
    OMIT_DEFAULT,
    Decoder,
    Derivation,
    Encoder,
    EnumWire,
    Rule,
    enum_member,
)

__all__ = [
    "UndecodableEvent",
    "approval_decision_from_json",
    "call_summary_json",
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


# -- the wire shape: what is not the derived rule ---------------------------------------------------

# A member without a proto value fails here, at import (ValueError), never on a stored event.
ENUMS: Mapping[type[Enum], EnumWire] = {
    Phase: EnumWire.proto_names(Phase, "RUN_PHASE_", run_pb2.RunPhase),
    ev.ToolErrorCode: EnumWire.proto_names(ev.ToolErrorCode, "TOOL_ERROR_CODE_", tool_pb2.ToolErrorCode),
    ev.ApprovalDecision: EnumWire.proto_names(
        ev.ApprovalDecision, "APPROVAL_DECISION_", run_pb2.ApprovalDecision
    ),
    ev.OutcomeDecision: EnumWire.proto_names(
        ev.OutcomeDecision, "OUTCOME_DECISION_", runtime_service_pb2.OutcomeDecision
    ),
    ev.CleanupKind: EnumWire.proto_names(ev.CleanupKind, "CLEANUP_KIND_", run_pb2.CleanupKind),
    # The core's word ("diagnostic"), as the log has always held it; a log in the API's JSON
    # shape says STEP_KIND_DIAGNOSTIC. A kind newer than this runtime steps as a model step.
    ev.StepKind: EnumWire.core_values(ev.StepKind, "STEP_KIND_"),
}

# Fields written otherwise than "always, and X | None left out when None", by class.
RULES: Mapping[type[Any], Mapping[str, Rule]] = {
    ev.RunStarted: {"session_history": OMIT_DEFAULT, "trace_id": OMIT_DEFAULT},  # untraced: as before
    # An attempt's fragment always has its text; a superseded mark has only the flag.
    ev.ModelTextDelta: {"text": Rule(omitted_with="superseded"), "superseded": OMIT_DEFAULT},
    ev.ModelCompleted: {
        "sampling": Rule(empty_is_absent=True),
        "model": OMIT_DEFAULT,
        "response_id": OMIT_DEFAULT,
        "request_id": OMIT_DEFAULT,
        "prompt_estimate_tokens": OMIT_DEFAULT,
    },
    ev.ToolCompleted: {
        "truncated": Rule(omit_default=True, written_with="result_ref"),  # as the runtime always has
        "deduplicated": OMIT_DEFAULT,
        "host": OMIT_DEFAULT,
    },
    ev.ToolFailed: {"host": OMIT_DEFAULT},
    ev.ApprovalRequested: {"variables": OMIT_DEFAULT},
    ev.ApprovalResolved: {"override_intent": OMIT_DEFAULT},
    ev.RunEnded: {  # proto3 JSON leaves an empty list out
        "completed_calls": OMIT_DEFAULT,
        "not_completed_calls": OMIT_DEFAULT,
        "unknown_calls": OMIT_DEFAULT,
    },
    # An empty usage (or none) is "absent": a fault that spent nothing unrecorded.
    ev.RunFault: {"usage_spent": Rule(empty_is_absent=True), "usage_after": Rule(empty_is_absent=True)},
    ev.VariablesSet: {"variables": OMIT_DEFAULT, "removed": OMIT_DEFAULT, "refused_reason": OMIT_DEFAULT},
    ev.CleanupRegistered: {"kind": OMIT_DEFAULT, "refused_reason": OMIT_DEFAULT},
    # The values events carry.
    ev.ToolError: {"code": OMIT_DEFAULT, "message": OMIT_DEFAULT, "details_json": OMIT_DEFAULT},
    ev.IntentDuplicate: {
        "intent_key": OMIT_DEFAULT,
        "idempotency_key": OMIT_DEFAULT,
        "run_id": OMIT_DEFAULT,
        "call_id": OMIT_DEFAULT,
    },
    ev.ContextWindow: {
        "omitted_before_input": OMIT_DEFAULT,
        "omitted_after_input": OMIT_DEFAULT,
        "clipped": OMIT_DEFAULT,
        "summary": OMIT_DEFAULT,
        "token_scale_permille": OMIT_DEFAULT,
    },
    # One text field on the wire: a failed call's error code by its wire name, else the detail.
    ev.CallSummary: {"error": Rule(shares_key_of="detail"), "detail": OMIT_DEFAULT},
}

_DERIVED = Derivation(enums=ENUMS, rules=RULES)
_ENCODERS: dict[type[Any], Encoder] = {cls: _DERIVED.encoder(cls) for cls in ev.EVENT_CLASSES.values()}
_DECODERS: dict[str, Decoder] = {name: _DERIVED.decoder(cls) for name, cls in ev.EVENT_CLASSES.items()}
_TOOL_ERROR_TO_JSON = _DERIVED.encoder(ev.ToolError)
_TOOL_ERROR_FROM_JSON = _DERIVED.decoder(ev.ToolError)
_APPROVAL_FROM = ENUMS[ev.ApprovalDecision].from_wire
_OUTCOME_FROM = ENUMS[ev.OutcomeDecision].from_wire
_CALL_LISTS = ("completed_calls", "not_completed_calls", "unknown_calls")


# -- values ------------------------------------------------------------------------------------------


def tool_error_to_json(error: ev.ToolError) -> dict[str, Any]:
    """Proto3 JSON of ``ToolError``: fields at their default are left out, as protobuf does."""
    return _TOOL_ERROR_TO_JSON(error)


def tool_error_from_json(data: Mapping[str, Any]) -> ev.ToolError:
    """A ``ToolError`` from its proto3 JSON (a tool host's, or a stored one); unknown codes read as
    UNSPECIFIED."""
    error: ev.ToolError = _TOOL_ERROR_FROM_JSON(data)
    return error


def approval_decision_from_json(value: object) -> ev.ApprovalDecision:
    """An ``ApprovalDecision`` by name or number; anything else reads as UNSPECIFIED."""
    decision: ev.ApprovalDecision = enum_member(_APPROVAL_FROM, value, ev.ApprovalDecision.UNSPECIFIED)
    return decision


def outcome_decision_from_json(value: object) -> ev.OutcomeDecision:
    """An ``OutcomeDecision`` by name or number; anything else reads as UNSPECIFIED."""
    decision: ev.OutcomeDecision = enum_member(_OUTCOME_FROM, value, ev.OutcomeDecision.UNSPECIFIED)
    return decision


def call_summary_json(ended: ev.RunEnded) -> str:
    """The calls a run.ended lists, as the ``runs.call_summary`` column keeps them for GetRun."""
    data = _ENCODERS[ev.RunEnded](ended)
    return json.dumps({k: data[k] for k in _CALL_LISTS if k in data})


# -- events ------------------------------------------------------------------------------------------


def event_to_json(event: ev.Event) -> dict[str, Any]:
    """The stored payload of ``event`` as a dict (the proto3 JSON of its ``RunEvent`` oneof message)."""
    return _ENCODERS[type(event)](event)


def encode_event(event: ev.Event) -> tuple[str, str]:
    """``(type name, JSON text)`` of ``event``, as the log stores it."""
    return event.type_name, json.dumps(_ENCODERS[type(event)](event))


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
        event: ev.Event = decoder(data)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise UndecodableEvent(
            f"a stored {type_name} event does not decode: {type(exc).__name__}: {str(exc)[:200]}",
            metadata={"event_type": type_name},
        ) from None
    return event
