"""Run phases and the one table of legal transitions (DESIGN §4, R4.1, R4.2).

Pure: no I/O, no clock. ``transition`` is the only way a phase changes; an
illegal move raises :class:`IllegalTransition` instead of being applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agentrt.server.core._errors import IllegalTransition


class Phase(StrEnum):
    """Phase of a run. Values are stored in the database; never rename one."""

    QUEUED = "QUEUED"
    MODEL_STEP = "MODEL_STEP"
    TOOL_STEP = "TOOL_STEP"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    RETRY_WAIT = "RETRY_WAIT"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    UNKNOWN_OUTCOME = "UNKNOWN_OUTCOME"
    CLEANING_UP = "CLEANING_UP"  # the end is decided (run.closing); registered resources are released first
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({Phase.COMPLETED, Phase.FAILED, Phase.CANCELLED, Phase.EXPIRED})
ACTIVE_PHASES = frozenset(Phase) - TERMINAL_PHASES


class Trigger(StrEnum):
    """What moves a run from one phase to the next."""

    START_MODEL_STEP = "start_model_step"
    MODEL_ANSWERED = "model_answered"
    MODEL_CALLED_TOOLS = "model_called_tools"
    TOOL_STARTED = "tool_started"
    TOOL_FINISHED = "tool_finished"
    AWAIT_APPROVAL = "await_approval"
    RESOLVE_APPROVAL = "resolve_approval"
    SCHEDULE_RETRY = "schedule_retry"
    RETRY_DUE = "retry_due"
    REQUEST_CANCEL = "request_cancel"
    CONFIRM_CANCEL = "confirm_cancel"
    OUTCOME_UNKNOWN = "outcome_unknown"
    RECONCILE = "reconcile"
    COMPLETE = "complete"
    FAIL = "fail"
    EXPIRE = "expire"
    CLOSE = "close"
    HAND_OVER = "hand_over"  # a cancelled run ends although a write's outcome is unknown
    HAND_OVER_CLOSE = "hand_over_close"  # ... and first releases its resources


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the transition table."""

    sources: frozenset[Phase]
    trigger: Trigger
    target: Phase
    precondition: str


_WORKING = frozenset({Phase.QUEUED, Phase.MODEL_STEP, Phase.TOOL_STEP, Phase.RETRY_WAIT})
# UNKNOWN_OUTCOME is deliberately absent from FAIL/EXPIRE sources: it leaves only by
# reconciliation or a person's decision (R4.4), never collapsed into FAILED.
_FAILABLE = _WORKING | {Phase.WAITING_APPROVAL, Phase.CANCEL_REQUESTED}

RULES: tuple[Rule, ...] = (
    Rule(
        frozenset({Phase.QUEUED, Phase.MODEL_STEP, Phase.TOOL_STEP}),
        Trigger.START_MODEL_STEP,
        Phase.MODEL_STEP,
        "no pending tool call; model-step budget left",
    ),
    Rule(
        frozenset({Phase.MODEL_STEP}),
        Trigger.MODEL_ANSWERED,
        Phase.MODEL_STEP,
        "model output persisted; answer awaits validation",
    ),
    Rule(
        frozenset({Phase.MODEL_STEP}),
        Trigger.MODEL_CALLED_TOOLS,
        Phase.TOOL_STEP,
        "model output with tool calls persisted",
    ),
    Rule(
        frozenset({Phase.TOOL_STEP, Phase.RETRY_WAIT}),
        Trigger.TOOL_STARTED,
        Phase.TOOL_STEP,
        "lease held; tool-call budget left",
    ),
    Rule(
        frozenset({Phase.TOOL_STEP}), Trigger.TOOL_FINISHED, Phase.TOOL_STEP, "a started call has its result"
    ),
    # A result that lands while cancelling is still a fact and is recorded.
    Rule(
        frozenset({Phase.CANCEL_REQUESTED}),
        Trigger.TOOL_FINISHED,
        Phase.CANCEL_REQUESTED,
        "a started call has its result",
    ),
    # From WAITING_APPROVAL too: an expired approval is re-previewed and asked again.
    Rule(
        frozenset({Phase.TOOL_STEP, Phase.WAITING_APPROVAL}),
        Trigger.AWAIT_APPROVAL,
        Phase.WAITING_APPROVAL,
        "call needs a person's approval",
    ),
    Rule(
        frozenset({Phase.WAITING_APPROVAL}),
        Trigger.RESOLVE_APPROVAL,
        Phase.TOOL_STEP,
        "args hash, revision, expiry and approver checked",
    ),
    Rule(
        frozenset({Phase.TOOL_STEP}),
        Trigger.SCHEDULE_RETRY,
        Phase.RETRY_WAIT,
        "transient failure; retry fits the deadline",
    ),
    Rule(frozenset({Phase.RETRY_WAIT}), Trigger.RETRY_DUE, Phase.TOOL_STEP, "backoff elapsed"),
    # Not from UNKNOWN_OUTCOME: the cancel waits until the write's outcome is known (R6.6).
    Rule(
        _FAILABLE - {Phase.CANCEL_REQUESTED},
        Trigger.REQUEST_CANCEL,
        Phase.CANCEL_REQUESTED,
        "cancel asked for",
    ),
    Rule(frozenset({Phase.CANCEL_REQUESTED}), Trigger.CONFIRM_CANCEL, Phase.CANCELLED, "no write in flight"),
    Rule(
        frozenset({Phase.TOOL_STEP, Phase.CANCEL_REQUESTED}),
        Trigger.OUTCOME_UNKNOWN,
        Phase.UNKNOWN_OUTCOME,
        "a write's result is not known",
    ),
    Rule(
        frozenset({Phase.UNKNOWN_OUTCOME}),
        Trigger.RECONCILE,
        Phase.TOOL_STEP,
        "the write's outcome was learned by query or decided by a person",
    ),
    Rule(
        frozenset({Phase.MODEL_STEP, Phase.CLEANING_UP}),
        Trigger.COMPLETE,
        Phase.COMPLETED,
        "final answer validated; nothing pending",
    ),
    # Any end of a run with registered resources goes through CLEANING_UP (S002 §8.1): the
    # resources are released before the end is committed. It leaves only to the decided end.
    Rule(_FAILABLE, Trigger.CLOSE, Phase.CLEANING_UP, "the end is decided; resources are registered"),
    Rule(frozenset({Phase.CLEANING_UP}), Trigger.CONFIRM_CANCEL, Phase.CANCELLED, "resources released"),
    # A cancelled run ends within a bound (§11.11): a write whose outcome nobody can tell is listed
    # unknown on its end and handed to a person; it is never called done, undone or failed.
    Rule(
        frozenset({Phase.UNKNOWN_OUTCOME}),
        Trigger.HAND_OVER,
        Phase.CANCELLED,
        "cancel asked for; the write nobody can tell is handed to a person",
    ),
    Rule(
        frozenset({Phase.UNKNOWN_OUTCOME}),
        Trigger.HAND_OVER_CLOSE,
        Phase.CLEANING_UP,
        "cancel asked for; resources registered; the write is handed to a person",
    ),
    Rule(_FAILABLE | {Phase.CLEANING_UP}, Trigger.FAIL, Phase.FAILED, "stated reason"),
    Rule(_FAILABLE | {Phase.CLEANING_UP}, Trigger.EXPIRE, Phase.EXPIRED, "run deadline passed"),
)

_TABLE: dict[tuple[Phase, Trigger], Rule] = {}
for _rule in RULES:
    for _source in _rule.sources:
        if (_source, _rule.trigger) in _TABLE:
            raise AssertionError(f"ambiguous transition {_source}/{_rule.trigger}")
        _TABLE[(_source, _rule.trigger)] = _rule


def rule_for(phase: Phase, trigger: Trigger) -> Rule | None:
    """The rule that applies, or None when the move is illegal."""
    return _TABLE.get((phase, trigger))


def transition(phase: Phase, trigger: Trigger) -> Phase:
    """Apply one trigger to a phase.

    Raises:
        IllegalTransition: when the table has no rule for (phase, trigger); terminal
            phases have none, so they are final.
    """
    found = _TABLE.get((phase, trigger))
    if found is None:
        raise IllegalTransition(phase=phase.value, trigger=trigger.value)
    return found.target
