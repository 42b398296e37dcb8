"""Waits on something outside the run: how often to ask again, and when a person must know.

A run in UNKNOWN_OUTCOME asks the tool host's ledger again and again; a run in WAITING_APPROVAL
waits for a person. Both can last long. Pure: callers pass the time in.

Deadline policy of an unknown outcome (R4.4): the wait is not bounded by the run's deadline, since
ending the run would collapse an unknown outcome into a failure. Past the deadline (or past the
configured age) the run escalates instead, and keeps asking, less and less often (up to the
operator-wait cap), until the ledger or a person settles the call. Once settled, a run past its
deadline ends EXPIRED with the real outcome recorded. An approval wait does not spend the run's
deadline (the wait is added back when it is resolved); it escalates by age only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agentrt.server.core._events import RunEscalated
from agentrt.server.core._phases import Phase
from agentrt.server.core._state import RunState


class EscalationReason(StrEnum):
    """Why a wait was escalated (``run.escalated`` reason; stored, never rename one)."""

    UNKNOWN_OUTCOME_AGE = "unknown_outcome_age"
    UNKNOWN_OUTCOME_PAST_DEADLINE = "unknown_outcome_past_deadline"
    APPROVAL_AGE = "approval_age"


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    """The ``[reconcile]`` and ``[escalation]`` settings, in milliseconds."""

    reconcile_base_ms: int = 1_000
    reconcile_cap_ms: int = 60_000
    operator_wait_cap_ms: int = 86_400_000  # once escalated, a person is the likelier answer
    unknown_outcome_after_ms: int = 3_600_000  # 0: never by age (the deadline still escalates)
    approval_after_ms: int = 14_400_000  # 0: never


def reconcile_delay_ms(*, attempt: int, escalated: bool, policy: WaitPolicy, rand: float) -> int:
    """How long to wait before the ``attempt``-th ledger query (1 for the first) of an unknown outcome.

    Doubles from the base to the cap (to the operator-wait cap once escalated), less up to a tenth
    by ``rand`` in [0, 1) so that runs parked together do not all wake together.
    """
    cap = max(policy.reconcile_cap_ms, policy.operator_wait_cap_ms) if escalated else policy.reconcile_cap_ms
    exponent = min(max(0, attempt - 1), 62)  # past 2**62 every delay is the cap
    full: int = min(cap, policy.reconcile_base_ms * 2**exponent)
    return max(1, round(full * (1.0 - 0.1 * rand)))


def escalation_due_ms(state: RunState, *, deadline_ms: int, policy: WaitPolicy) -> int | None:
    """When the current wait escalates; None when nothing waits, it already escalated, or never will."""
    if state.escalation is not None:
        return None
    if state.phase is Phase.UNKNOWN_OUTCOME:
        call = state.unknown_call()
        due = deadline_ms  # an unknown outcome outliving the run's deadline always needs a person
        if call is not None and call.unknown_since_ms and policy.unknown_outcome_after_ms:
            due = min(due, call.unknown_since_ms + policy.unknown_outcome_after_ms)
        return due
    pending = state.pending_approval
    if state.phase is Phase.WAITING_APPROVAL and pending is not None and policy.approval_after_ms:
        try:
            return pending.request_ms + policy.approval_after_ms
        except ValueError:  # an approval without a request time (never written so): no age
            return None
    return None


def escalation(state: RunState, *, now_ms: int, deadline_ms: int, policy: WaitPolicy) -> RunEscalated | None:
    """The ``run.escalated`` event the run's wait calls for now, if any."""
    due = escalation_due_ms(state, deadline_ms=deadline_ms, policy=policy)
    if due is None or now_ms < due:
        return None
    if state.phase is Phase.UNKNOWN_OUTCOME:
        call = state.unknown_call()
        since = call.unknown_since_ms if call is not None else 0
        after = policy.unknown_outcome_after_ms
        by_age = bool(since and after and now_ms >= since + after)
        reason = (
            EscalationReason.UNKNOWN_OUTCOME_AGE if by_age else EscalationReason.UNKNOWN_OUTCOME_PAST_DEADLINE
        )
        return RunEscalated(
            reason=reason.value,
            age=_duration(now_ms - since) if since else None,
            call_id=call.call_id if call is not None else "",
        )
    pending = state.pending_approval
    assert pending is not None  # escalation_due_ms gives a time only for a pending approval
    return RunEscalated(
        reason=EscalationReason.APPROVAL_AGE.value,
        age=_duration(now_ms - pending.request_ms),
        call_id=pending.call_id,
        approval_id=pending.approval_id,
    )


def _duration(ms: int) -> str:
    return f"{max(0, ms) / 1000:.3f}s"
