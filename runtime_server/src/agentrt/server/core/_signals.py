"""People's decisions as typed signals, and the one pure function that applies them.

A person's decision reaches a run as a signal: :class:`ResolveApproval` (the call waiting for
approval), :class:`GrantBudget` (a run paused on a spent budget), :class:`ResolveOutcome` (a
write whose outcome is unknown) and :class:`CancelRun`.

:func:`decide_signal` says whether a signal may act on a run, from a :class:`SignalTarget`. It is
asked twice, with the same rules: by the API against the run's row when the signal is sent (a
refusal is the RPC's answer and nothing is written), and by the run's owner against the folded
state when it applies the signal (one the run moved past changes nothing). :func:`apply_signal`
is that second ask plus what the signal does: the events to append, and what the shell carries
out (the wait moved out of the wall-clock budget, the budgets after a grant, a person's word on
a call recorded as its result).

Who may send a signal (:class:`SignalRules`: an approver's scope, four eyes, own runs only) is
decided once, when it is sent, against the row (which knows who started the run).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, assert_never

from agentrt.server.core import _events as ev
from agentrt.server.core._budgets import Budgets
from agentrt.server.core._decide import BUDGET_PREFIX, end_events, unauthorized_end
from agentrt.server.core._errors import (
    AgentRtError,
    InvalidRequest,
    NoSuchResource,
    NotPermitted,
    RunStateConflict,
    StaleRevision,
)
from agentrt.server.core._phases import Phase, Trigger, rule_for
from agentrt.server.core._state import RunState
from agentrt.server.core._unauthorized import is_unauthorized_pause, unauthorized_retry

# -- the signals -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveApproval:
    """A person's answer to the call waiting for approval (R7.2).

    ``args_hash`` is the hash of the arguments the person saw; None only in a signal queued by an
    earlier runtime, which checked it when it was sent.
    """

    approval_id: str
    decision: ev.ApprovalDecision
    args_hash: str | None
    approver: str
    comment: str = ""
    override_intent: bool = False  # run the call even if it repeats an earlier call's intent


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantBudget:
    """A person's answer to a run paused on a spent budget: approve doubles it, reject ends the run."""

    approval_id: str
    decision: ev.ApprovalDecision
    args_hash: str | None
    approver: str
    comment: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolveOutcome:
    """A person's settlement of the write whose outcome is unknown (R4.4)."""

    call_id: str
    decision: ev.OutcomeDecision
    resolved_by: str
    result_json: str = ""  # SUCCEEDED: the call's result as the person states it ("{}" when empty)
    comment: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRun:
    """A request to cancel the run (R6.6): recorded on the row, then applied by its owner."""

    reason: str
    requested_by: str


RunSignal = ResolveApproval | GrantBudget | ResolveOutcome | CancelRun
QueuedSignal = ResolveApproval | GrantBudget | ResolveOutcome
"""The signals queued for a run's next owner (a cancel lives on the run's row instead)."""


# -- what a signal is decided against ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalTarget:
    """A run as a signal sees it: its row when the signal is sent, its folded state when applied.

    Attributes:
        revision: The run's revision; None where the store fenced the signal when it was queued.
        unknown_call_id: The call whose outcome is unknown, while the phase is UNKNOWN_OUTCOME; None
            when it is not known here (a row an earlier runtime wrote): the owner then decides.
        agent_name, started_by: What the sender's permission is checked against (the row's).
    """

    run_id: str
    phase: Phase
    revision: int | None = None
    pending_approval: ev.ApprovalRequested | None = None
    unknown_call_id: str | None = None
    agent_name: str = ""
    started_by: str = ""

    @classmethod
    def of_state(cls, state: RunState) -> SignalTarget:
        """The target of a signal applied by the run's owner."""
        unknown = None
        if state.phase is Phase.UNKNOWN_OUTCOME:
            call = state.unknown_call()
            unknown = call.call_id if call is not None else ""
        return cls(
            run_id=state.run_id,
            phase=state.phase,
            pending_approval=state.pending_approval,
            unknown_call_id=unknown,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ApproverScope:
    """What one approver may resolve; an empty set means no limit on that axis."""

    agents: frozenset[str] = frozenset()
    tools: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalRules:
    """Who may send a signal: the server's policies and what the sender is. All off by default.

    Attributes:
        own_runs_only: A sender cancels only runs it started, unless ``manages_runs``.
        four_eyes: Nobody approves a call (or grants budget) of a run it started itself.
        manages_runs: The sender operates every run of its tenant (operator or admin).
        approver_scope: The sender's configured approver scope, if it has one.
    """

    own_runs_only: bool = False
    four_eyes: bool = False
    manages_runs: bool = False
    approver_scope: ApproverScope | None = None


# -- verdicts ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refused:
    """The signal may not act on the run; ``error`` is what its sender is answered."""

    error: AgentRtError


@dataclass(frozen=True, slots=True, kw_only=True)
class PersonsOutcome:
    """A person's word on the unknown call, for the shell to record as the call's result.

    ``result_json`` is set for a success, ``failure`` (the message) for a failure.
    """

    call_id: str
    result_json: str | None = None
    failure: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Applied:
    """What an accepted signal does: events to append, in order, then what the shell carries out.

    Attributes:
        waited_ms: Time spent waiting for the person: the run's deadline moves this much later.
        budgets: The run's budgets after a grant.
        outcome: A person's word on the unknown call, recorded after ``events``.
    """

    events: tuple[ev.Event, ...] = ()
    waited_ms: int = 0
    budgets: Budgets | None = None
    outcome: PersonsOutcome | None = None


# -- deciding ----------------------------------------------------------------------------------------


def decide_signal(
    target: SignalTarget,
    signal: RunSignal,
    *,
    now_ms: int,
    expected_revision: int | None = None,
    rules: SignalRules | None = None,
) -> Refused | None:
    """None when ``signal`` may act on ``target`` now; else the refusal.

    Args:
        expected_revision: The revision the sender saw, checked when the target has one.
        rules: Who may send it; None where that was decided when it was sent.
    """
    match signal:
        case ResolveApproval() | GrantBudget():
            return _decide_approval(target, signal, now_ms, expected_revision, rules)
        case ResolveOutcome():
            return _decide_outcome(target, signal, expected_revision)
        case CancelRun():
            return _decide_cancel(target, signal, rules)
        case _:
            assert_never(signal)


def _run_meta(target: SignalTarget, **more: str) -> dict[str, str]:
    return {"run_id": target.run_id, **more}


def _stale(target: SignalTarget, expected_revision: int | None) -> Refused | None:
    if expected_revision is None or target.revision is None or expected_revision == target.revision:
        return None
    return Refused(
        StaleRevision(
            f"run {target.run_id} is at revision {target.revision}, not {expected_revision}",
            metadata=_run_meta(target, revision=str(target.revision)),
        )
    )


def _decide_approval(
    target: SignalTarget,
    signal: ResolveApproval | GrantBudget,
    now_ms: int,
    expected_revision: int | None,
    rules: SignalRules | None,
) -> Refused | None:
    if signal.decision is ev.ApprovalDecision.UNSPECIFIED:
        return Refused(InvalidRequest("decision is required", field="decision"))
    pending = target.pending_approval
    if target.phase is not Phase.WAITING_APPROVAL or pending is None:
        return Refused(
            RunStateConflict(
                f"run {target.run_id} is {target.phase.value}, not waiting for an approval",
                reason="RUN_NOT_WAITING_APPROVAL",
                metadata=_run_meta(target, phase=target.phase.value),
            )
        )
    if signal.approval_id != pending.approval_id:
        return Refused(
            NoSuchResource(
                f"no pending approval {signal.approval_id!r} on run {target.run_id}",
                reason="APPROVAL_NOT_FOUND",
                metadata=_run_meta(target),
            )
        )
    if is_budget_pause(pending) != isinstance(signal, GrantBudget):
        asks = "more budget" if is_budget_pause(pending) else "a call"
        return Refused(
            InvalidRequest(
                f"approval {pending.approval_id} asks for {asks}; {type(signal).__name__} does not answer it",
                field="approval_id",
                reason="APPROVAL_KIND_MISMATCH",
            )
        )
    if rules is not None and (refused := _approver_refused(target, pending, signal, rules)) is not None:
        return refused
    if signal.args_hash is not None and signal.args_hash != pending.args_hash:
        return Refused(
            RunStateConflict(
                "args_hash does not match the arguments waiting for approval",
                reason="ARGS_HASH_MISMATCH",
                metadata=_run_meta(target, approval_id=signal.approval_id),
            )
        )
    if (stale := _stale(target, expected_revision)) is not None:
        return stale
    if now_ms >= pending.expire_ms:
        return Refused(
            RunStateConflict(
                f"approval {signal.approval_id} expired at {pending.expire_time}",
                reason="APPROVAL_EXPIRED",
                metadata=_run_meta(target, approval_id=signal.approval_id),
            )
        )
    return None


def _approver_refused(
    target: SignalTarget,
    pending: ev.ApprovalRequested,
    signal: ResolveApproval | GrantBudget,
    rules: SignalRules,
) -> Refused | None:
    scope = rules.approver_scope
    if scope is not None and (
        (scope.agents and target.agent_name not in scope.agents)
        or (scope.tools and pending.tool not in scope.tools)
    ):
        return Refused(
            NotPermitted(
                f"{signal.approver} may not resolve approvals of agent {target.agent_name!r} "
                f"for {pending.tool!r}",
                reason="APPROVER_OUT_OF_SCOPE",
                metadata=_run_meta(target),
            )
        )
    # Rejecting is always open: it stops an effect, and the run's starter could cancel anyway.
    if (
        rules.four_eyes
        and signal.decision is ev.ApprovalDecision.APPROVE
        and signal.approver == target.started_by
    ):
        return Refused(
            NotPermitted(
                f"{signal.approver} started run {target.run_id}; under four eyes another person "
                "approves what it asks",
                reason="FOUR_EYES",
                metadata=_run_meta(target),
            )
        )
    return None


def _decide_outcome(
    target: SignalTarget, signal: ResolveOutcome, expected_revision: int | None
) -> Refused | None:
    if signal.decision is ev.OutcomeDecision.UNSPECIFIED:
        return Refused(InvalidRequest("decision is required", field="decision"))
    if target.phase is not Phase.UNKNOWN_OUTCOME:
        return Refused(
            RunStateConflict(
                f"run {target.run_id} is {target.phase.value}, not UNKNOWN_OUTCOME",
                reason="RUN_NOT_IN_UNKNOWN_OUTCOME",
                metadata=_run_meta(target, phase=target.phase.value),
            )
        )
    if (stale := _stale(target, expected_revision)) is not None:
        return stale
    if target.unknown_call_id is not None and signal.call_id != target.unknown_call_id:
        return Refused(
            InvalidRequest(
                f"call {signal.call_id!r} is not the call whose outcome is unknown",
                field="call_id",
                reason="UNKNOWN_CALL",
            )
        )
    return None


def _decide_cancel(target: SignalTarget, signal: CancelRun, rules: SignalRules | None) -> Refused | None:
    if (
        rules is not None
        and rules.own_runs_only
        and not rules.manages_runs
        and signal.requested_by != target.started_by
    ):
        return Refused(
            NotPermitted(
                f"{signal.requested_by} may cancel only runs it started (own_runs_only)",
                reason="OWN_RUNS_ONLY",
                metadata=_run_meta(target),
            )
        )
    if target.phase.terminal:
        return Refused(
            RunStateConflict(
                f"run {target.run_id} already ended ({target.phase.value})",
                reason="RUN_ALREADY_ENDED",
                metadata=_run_meta(target, phase=target.phase.value),
            )
        )
    return None


# -- applying ----------------------------------------------------------------------------------------


def apply_signal(state: RunState, budgets: Budgets, signal: RunSignal, *, now_ms: int) -> Applied | Refused:
    """What ``signal`` does to the run the owner folded, or why it does nothing now.

    The state is not changed: the shell appends ``events`` (which folds them) and carries out the
    rest of :class:`Applied`.
    """
    refused = decide_signal(SignalTarget.of_state(state), signal, now_ms=now_ms)
    if refused is not None:
        return refused
    match signal:
        case ResolveApproval():
            return _approval_applied(state, signal, now_ms)
        case GrantBudget():
            return _grant_applied(state, budgets, signal, now_ms)
        case ResolveOutcome():
            return _outcome_applied(state, signal)
        case CancelRun():
            # Not every phase takes a cancel at once (UNKNOWN_OUTCOME waits for the write's outcome,
            # CLEANING_UP for the release): the owner keeps the request and asks again.
            if rule_for(state.phase, Trigger.REQUEST_CANCEL) is None:
                return Applied()
            return Applied(
                events=(ev.CancelRequested(reason=signal.reason, requested_by=signal.requested_by),)
            )
        case _:
            assert_never(signal)


def _resolved(pending: ev.ApprovalRequested, signal: ResolveApproval | GrantBudget) -> ev.ApprovalResolved:
    approve = signal.decision is ev.ApprovalDecision.APPROVE
    return ev.ApprovalResolved(
        approval_id=pending.approval_id,
        decision=signal.decision,
        approver=signal.approver,
        comment=signal.comment,
        override_intent=approve and isinstance(signal, ResolveApproval) and signal.override_intent,
    )


def _waited_ms(pending: ev.ApprovalRequested, now_ms: int) -> int:
    # The wait for a person does not count against the run's wall-clock budget.
    return max(0, now_ms - pending.request_ms)


def _approval_applied(state: RunState, signal: ResolveApproval, now_ms: int) -> Applied:
    pending = _pending(state)
    resolved = _resolved(pending, signal)
    if is_unauthorized_pause(pending):
        if signal.decision is ev.ApprovalDecision.APPROVE:  # fixed: the same call again, same key
            again = unauthorized_retry(state, pending)
            return Applied(events=(resolved, again), waited_ms=_waited_ms(pending, now_ms))
        ending = unauthorized_end(
            state, pending, approver=signal.approver or "a person", comment=signal.comment
        )
        return Applied(events=ending, waited_ms=_waited_ms(pending, now_ms))
    if signal.decision is ev.ApprovalDecision.APPROVE:
        return Applied(events=(resolved,), waited_ms=_waited_ms(pending, now_ms))
    call = next((c for c in state.calls if c.call_id == pending.call_id), None)
    if call is None:
        raise ValueError(f"approval {pending.approval_id} names call {pending.call_id!r} the run lacks")
    who = signal.approver or "a person"
    message = f"rejected by {who}" + (f": {signal.comment}" if signal.comment else "")
    rejected = ev.ToolFailed(
        step=call.step,
        call_id=call.call_id,
        tool=call.tool,
        error=ev.ToolError(ev.ToolErrorCode.PERMANENT, message),
    )
    return Applied(events=(resolved, rejected), waited_ms=_waited_ms(pending, now_ms))


def _grant_applied(state: RunState, budgets: Budgets, signal: GrantBudget, now_ms: int) -> Applied:
    pending = _pending(state)
    resolved = _resolved(pending, signal)
    budget = pending.tool.removeprefix(BUDGET_PREFIX)
    if signal.decision is ev.ApprovalDecision.APPROVE:
        return Applied(
            events=(resolved,),
            waited_ms=_waited_ms(pending, now_ms),
            budgets=budget_grant(budgets, budget)[2],
        )
    # Folding approval.resolved first changes nothing end_events reads (the phase is not
    # CLEANING_UP either way), so the end is built from the state as it is.
    ending = end_events(state, Phase.FAILED, f"budget_exhausted:{budget}", message="more was refused")
    return Applied(events=(resolved, *ending), waited_ms=_waited_ms(pending, now_ms))


def _outcome_applied(state: RunState, signal: ResolveOutcome) -> Applied:
    call = state.unknown_call()
    if call is None:  # decide_signal refused it: of_state names no call
        raise ValueError("no call's outcome is unknown")
    resolved = ev.OutcomeResolved(
        call_id=call.call_id,
        decision=signal.decision,
        resolved_by=signal.resolved_by,
        comment=signal.comment,
    )
    if signal.decision is ev.OutcomeDecision.SUCCEEDED:
        outcome = PersonsOutcome(call_id=call.call_id, result_json=signal.result_json or "{}")
        return Applied(events=(resolved,), outcome=outcome)
    if signal.decision is ev.OutcomeDecision.FAILED:
        failure = f"decided by a person: {signal.comment}".strip()
        return Applied(events=(resolved,), outcome=PersonsOutcome(call_id=call.call_id, failure=failure))
    # RETRY: the same call again, same key; budgets count the call once.
    usage = state.usage.totals()
    again = ev.ToolStarted(
        step=call.step,
        call_id=call.call_id,
        tool=call.tool,
        arguments_json=call.arguments_json,
        idempotency_key=call.idempotency_key,
        attempt=call.attempts + 1,
        usage_before=usage,
        usage_after=usage,
    )
    return Applied(events=(resolved, again))


def _pending(state: RunState) -> ev.ApprovalRequested:
    if state.pending_approval is None:  # decide_signal refused it
        raise ValueError("no approval is pending")
    return state.pending_approval


# -- budget grants -----------------------------------------------------------------------------------


def is_budget_pause(pending: ev.ApprovalRequested) -> bool:
    """The approval asks for more of a spent budget, not about a call."""
    return not pending.call_id


_BUDGET_FIELDS = {
    "model_steps": "max_model_steps",
    "tool_calls": "max_tool_calls",
    "input_tokens": "max_input_tokens",
    "output_tokens": "max_output_tokens",
    "cost": "max_cost_micros",
    "handoffs": "max_handoffs",
}


def budget_grant(budgets: Budgets, budget: str) -> tuple[float, float, Budgets]:
    """(current limit, limit after a grant, the budgets after it): a grant doubles the spent limit."""
    if budget.startswith("calls_per_tool:"):
        tool = budget.removeprefix("calls_per_tool:")
        calls = budgets.max_calls_per_tool.get(tool, 0)
        per_tool = {**budgets.max_calls_per_tool, tool: max(1, calls * 2)}
        return calls, per_tool[tool], dataclasses.replace(budgets, max_calls_per_tool=per_tool)
    field = _BUDGET_FIELDS[budget]
    limit: float = getattr(budgets, field)
    grant = limit * 2 if limit else 1
    changes: dict[str, Any] = {field: grant}
    return limit, grant, dataclasses.replace(budgets, **changes)
