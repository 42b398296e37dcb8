"""Queued signals <-> what ``run_signals`` holds, and a run's row as a signal's target.

A queued signal is stored as a kind naming its class and a JSON object of its fields in the
core's words (a decision as ``APPROVE``, never a protobuf name). Signals queued by an earlier
runtime (kinds ``approval_decision`` and ``outcome_decision``, with proto enum names) are still
read: one may wait in the queue across an upgrade. An earlier runtime ignores the new kinds, so
a decision it cannot read waits to be answered again, never applied the wrong way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from agentrt.server.core import (
    ApprovalDecision,
    ApprovalRequested,
    GrantBudget,
    OutcomeDecision,
    Phase,
    QueuedSignal,
    ResolveApproval,
    ResolveOutcome,
    SignalTarget,
)
from agentrt.server.core import events as ev
from agentrt.server.store._crypt import UnreadableRecord
from agentrt.server.store._event_codec import (
    approval_decision_from_json,
    decode_event,
    outcome_decision_from_json,
)
from agentrt.server.store._records import RunRecord

__all__ = ["UndecodableSignal", "decode_signal", "encode_signal", "pending_approval_of", "signal_target"]

_APPROVAL = "resolve_approval"
_GRANT = "grant_budget"
_OUTCOME = "resolve_outcome"
_LEGACY_APPROVAL = "approval_decision"
_LEGACY_OUTCOME = "outcome_decision"


class UndecodableSignal(UnreadableRecord):
    """A queued signal has a kind or a shape no version of the runtime wrote."""

    reason = "SIGNAL_UNDECODABLE"


def encode_signal(signal: QueuedSignal) -> tuple[str, str]:
    """(kind, payload JSON) of a signal to queue."""
    match signal:
        case ResolveApproval():
            return _APPROVAL, json.dumps(
                {
                    "approval_id": signal.approval_id,
                    "decision": signal.decision.value,
                    "args_hash": signal.args_hash,
                    "approver": signal.approver,
                    "comment": signal.comment,
                    "override_intent": signal.override_intent,
                }
            )
        case GrantBudget():
            return _GRANT, json.dumps(
                {
                    "approval_id": signal.approval_id,
                    "decision": signal.decision.value,
                    "args_hash": signal.args_hash,
                    "approver": signal.approver,
                    "comment": signal.comment,
                }
            )
        case ResolveOutcome():
            return _OUTCOME, json.dumps(
                {
                    "call_id": signal.call_id,
                    "decision": signal.decision.value,
                    "resolved_by": signal.resolved_by,
                    "result_json": signal.result_json,
                    "comment": signal.comment,
                }
            )
    raise TypeError(f"not a queued signal: {type(signal).__name__}")


def decode_signal(kind: str, payload: str) -> QueuedSignal:
    """The signal a ``run_signals`` row holds.

    Raises:
        UndecodableSignal: an unknown kind, or a payload that is not the kind's JSON object.
    """
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise UndecodableSignal(f"unknown signal kind {kind!r}", metadata={"kind": kind})
    try:
        data = json.loads(payload)
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        return decoder(data)
    except (ValueError, TypeError, KeyError) as exc:
        raise UndecodableSignal(
            f"signal of kind {kind!r} is malformed: {type(exc).__name__}", metadata={"kind": kind}
        ) from None


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _hash(data: Mapping[str, Any]) -> str | None:
    value = data.get("args_hash")
    return value if isinstance(value, str) else None


def _approval(data: Mapping[str, Any]) -> ResolveApproval:
    return ResolveApproval(
        approval_id=_text(data, "approval_id"),
        decision=ApprovalDecision(data["decision"]),
        args_hash=_hash(data),
        approver=_text(data, "approver"),
        comment=_text(data, "comment"),
        override_intent=data.get("override_intent") is True,
    )


def _grant(data: Mapping[str, Any]) -> GrantBudget:
    return GrantBudget(
        approval_id=_text(data, "approval_id"),
        decision=ApprovalDecision(data["decision"]),
        args_hash=_hash(data),
        approver=_text(data, "approver"),
        comment=_text(data, "comment"),
    )


def _outcome(data: Mapping[str, Any]) -> ResolveOutcome:
    return ResolveOutcome(
        call_id=_text(data, "call_id"),
        decision=OutcomeDecision(data["decision"]),
        resolved_by=_text(data, "resolved_by"),
        result_json=_text(data, "result_json"),
        comment=_text(data, "comment"),
    )


def _legacy_approval(data: Mapping[str, Any]) -> ResolveApproval:
    # An earlier runtime checked the arguments' hash when it queued this (it did not store it), and
    # queued budget pauses under this kind too: one of those is refused as the wrong kind, and the
    # pause waits to be answered again.
    return ResolveApproval(
        approval_id=_text(data, "approval_id"),
        decision=approval_decision_from_json(data.get("decision")),
        args_hash=None,
        approver=_text(data, "approver"),
        comment=_text(data, "comment"),
        override_intent=data.get("override_intent") is True,
    )


def _legacy_outcome(data: Mapping[str, Any]) -> ResolveOutcome:
    return ResolveOutcome(
        call_id=_text(data, "call_id"),
        decision=outcome_decision_from_json(data.get("decision")),
        resolved_by=_text(data, "resolved_by"),
        result_json=_text(data, "result_json"),
        comment=_text(data, "comment"),
    )


_DECODERS: dict[str, Callable[[Mapping[str, Any]], QueuedSignal]] = {
    _APPROVAL: _approval,
    _GRANT: _grant,
    _OUTCOME: _outcome,
    _LEGACY_APPROVAL: _legacy_approval,
    _LEGACY_OUTCOME: _legacy_outcome,
}


def pending_approval_of(record: RunRecord) -> ApprovalRequested | None:
    """What the run is asking a person, as its row holds it (None when nothing is asked)."""
    if not record.pending_approval:
        return None
    event = decode_event(ev.APPROVAL_REQUESTED, record.pending_approval)
    if not isinstance(event, ApprovalRequested):  # decode_event keys the class by its type name
        raise TypeError(f"pending approval of run {record.run_id} decoded as {type(event).__name__}")
    return event


def signal_target(record: RunRecord) -> SignalTarget:
    """The run as a signal sent to it sees it: from its row alone, without reading its log."""
    return SignalTarget(
        run_id=record.run_id,
        phase=Phase(record.phase),
        revision=record.revision,
        pending_approval=pending_approval_of(record),
        unknown_call_id=record.unknown_call_id,
        agent_name=record.agent_name,
        started_by=record.created_by,
    )
