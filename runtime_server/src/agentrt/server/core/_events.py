"""Run events as stored in the log (R3.4, R5.1).

An event is a type name plus a payload in the proto3 JSON shape of the matching
``RunEvent`` oneof message, so the API converts it without a hand-written mapper
per type. One exception: a ``step.started`` kind is the core's word (``STEP_KINDS``),
which the API maps to the ``StepKind`` enum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
RUN_WAITING = "run.waiting"  # stream-only: never stored, ends a RunAgent stream before the run ends

# What a step.started is for, as the core words it (the API maps each to a StepKind enum value).
STEP_MODEL = "model"
STEP_DIAGNOSTIC = "diagnostic"  # the one extra step a detected loop earns (R6.2)
STEP_CORRECTIVE = "corrective"  # the one extra step a failed output check earns (R4.3)
STEP_KINDS: tuple[str, ...] = (STEP_MODEL, STEP_DIAGNOSTIC, STEP_CORRECTIVE)

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
)


@dataclass(frozen=True, slots=True)
class Event:
    """One fact about a run. ``data`` is never mutated after construction."""

    type: str
    data: dict[str, Any]


def oneof_field(event_type: str) -> str:
    """Name of the ``RunEvent`` oneof field for an event type: "run.started" -> "run_started"."""
    return event_type.replace(".text.", "_text_").replace(".", "_")
