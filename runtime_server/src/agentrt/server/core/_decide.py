"""The decider: given a run's state and the time, what happens next. Pure.

``decide`` either returns events to append (bookkeeping that needs no I/O:
starting a step, starting a call, ending the run) or one I/O command for the
shell (call the model, invoke a tool). The engine appends, folds and asks again,
committing its buffered events right before each I/O command, which gives the
commit points of R5.2 with one commit per step.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from agentrt.server.core import _events as ev
from agentrt.server.core._budgets import (
    Budgets,
    Usage,
    exhausted_before_model_step,
    exhausted_before_tool_call,
)
from agentrt.server.core._json import DEFAULT_JSON_LIMITS, JsonBoundsError, JsonLimits, loads_bounded
from agentrt.server.core._keys import idempotency_key
from agentrt.server.core._loops import LoopPolicy
from agentrt.server.core._phases import Phase
from agentrt.server.core._state import CallFate, CallState, CleanupEntry, RunState
from agentrt.server.core._unauthorized import is_unauthorized_pause


@dataclass(frozen=True, slots=True)
class Append:
    """Append these events (in order) to the run's log."""

    events: tuple[ev.Event, ...]


@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model for the decision of ``step``."""

    step: int


@dataclass(frozen=True, slots=True)
class InvokeTool:
    """Send the started call ``call`` to its tool host (its tool.started is persisted first)."""

    call: CallState


@dataclass(frozen=True, slots=True)
class InvokeTools:
    """Send these started, concurrency-safe calls at once; record their results in call order."""

    calls: tuple[CallState, ...]


@dataclass(frozen=True, slots=True)
class RequestApproval:
    """Ask a person about ``call`` (preview its impact, persist WAITING_APPROVAL, pause)."""

    call: CallState


@dataclass(frozen=True, slots=True)
class PauseForBudget:
    """A budget is spent and the agent's policy asks a person whether to grant more."""

    budget: str


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Nothing to do before ``due_s`` (a retry's backoff); a restarted worker waits the rest."""

    due_s: float


@dataclass(frozen=True, slots=True)
class Reconcile:
    """Learn the outcome of the write ``call`` by querying its tool host's ledger."""

    call: CallState


@dataclass(frozen=True, slots=True)
class Finalize:
    """The model gave a final answer: validate it (schema, guardrails, postconditions) before COMPLETED."""

    answer: str
    corrected: bool  # the one corrective step was already spent


@dataclass(frozen=True, slots=True)
class RunCleanup:
    """The run is CLEANING_UP: run the next attempt of ``cleanup`` (its cleanup.started first)."""

    cleanup: CleanupEntry


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to do: the run ended or waits for something outside."""


Decision = (
    Append
    | CallModel
    | InvokeTool
    | InvokeTools
    | RequestApproval
    | PauseForBudget
    | WaitUntil
    | Reconcile
    | Finalize
    | RunCleanup
    | Idle
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """What the decider needs beyond budgets: loop thresholds and which tools may run in parallel."""

    # The active agent's tools, handoff and agent-as-tool pseudo-tools: a call to anything else
    # never runs (R10.2). None means no list (the decider's own tests); the engine always sets one.
    allowed_tools: frozenset[str] | None = None
    loops: LoopPolicy = field(default_factory=LoopPolicy)
    parallel_safe: frozenset[str] = frozenset()
    needs_approval: frozenset[str] = frozenset()  # call ids a person must approve before they run
    tool_versions: Mapping[str, str] = field(default_factory=dict)  # tool -> contract version
    handoffs: Mapping[str, str] = field(default_factory=dict)  # pseudo-tool name -> agent it hands to
    agent_name: str = ""  # the agent in control
    pause_on_exhaustion: bool = False  # a spent budget asks a person for more instead of failing
    fail_expired_approvals: bool = False  # else an expired approval is re-previewed and asked again
    argument_limits: JsonLimits = DEFAULT_JSON_LIMITS  # a model's tool call arguments past these never run

    def allows(self, tool: str) -> bool:
        """True when the active agent was given ``tool``."""
        return self.allowed_tools is None or tool in self.allowed_tools


NOT_ALLOWED_CODE = ev.ToolErrorCode.NOT_ALLOWED


def arguments_error(arguments_json: str, limits: JsonLimits) -> ev.ToolError | None:
    """The INVALID_INPUT error of arguments that are not bounded JSON, or None (empty means none)."""
    if not arguments_json.strip():
        return None
    try:
        loads_bounded(arguments_json, limits)
    except JsonBoundsError as exc:
        return ev.ToolError(ev.ToolErrorCode.INVALID_INPUT, f"tool call arguments rejected: {exc}")
    return None


def not_allowed_error(tool: str, agent_name: str) -> ev.ToolError:
    """The error of a call to a tool its agent was not given (the same text each time: loops count it)."""
    who = f"agent {agent_name!r}" if agent_name else "this agent"
    return ev.ToolError(NOT_ALLOWED_CODE, f"tool {tool[:200]!r} is not available to {who}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Clock:
    """The moment a decision is made and the run's deadline, in epoch seconds.

    ``reserve_s`` is kept back for ending the run cleanly: no new work starts inside it.
    """

    now_s: float
    deadline_s: float
    reserve_s: float = 0.0


def end_events(
    state: RunState,
    phase: Phase,
    reason: str,
    *,
    output: str = "",
    output_ref: ev.PayloadRef | None = None,
    message: str = "",
    retryable: bool = False,
) -> tuple[ev.Event, ...]:
    """The closing events of a run: the phase's own event (if any) then run.ended.

    ``output_ref`` names the payload a COMPLETED run's ``output`` is a view of, if it is one.
    A run with cleanups still to run closes first (S002 §8.1): run.closing records this end,
    and the run commits it once its resources are released (see :func:`decide`).
    """
    if state.phase is not Phase.CLEANING_UP and state.pending_cleanups():
        closing = ev.RunClosing(
            phase=phase,
            reason=reason,
            message=message,
            retryable=retryable,
            output=output,
            output_ref=output_ref,
        )
        return (closing,)
    head: list[ev.Event] = []
    if phase is Phase.COMPLETED:
        head.append(ev.RunCompleted(output=output, output_ref=output_ref))
    elif phase is Phase.FAILED:
        head.append(ev.RunFailed(reason=reason, message=message or reason))
    elif phase is Phase.CANCELLED:
        head.append(ev.RunCancelled(reason=reason))
    return (*head, _ended(state, phase, reason, retryable=retryable))


def _ended(state: RunState, phase: Phase, reason: str, *, retryable: bool = False) -> ev.RunEnded:
    partial = state.any_tool_started and phase is not Phase.COMPLETED
    ended = ev.RunEnded(
        phase=phase, reason=reason, partial=partial, retryable=retryable, usage=state.usage.totals()
    )
    return _with_summary(ended, state) if partial else ended


def _with_summary(ended: ev.RunEnded, state: RunState) -> ev.RunEnded:
    """A partial end says what was done, what was not, and what nobody knows (S002 §7.3)."""
    done: list[ev.CallSummary] = []
    not_done: list[ev.CallSummary] = []
    unknown: list[ev.CallSummary] = []
    for record in state.call_records:
        summary = ev.CallSummary(call_id=record.call_id, tool=record.tool, step=record.step)
        if record.fate is CallFate.COMPLETED:
            done.append(summary)
        elif record.fate is CallFate.UNKNOWN:
            unknown.append(summary)
        elif record.fate is CallFate.STARTED:
            # Sent, and the run ended before any outcome was recorded: nobody knows its effect.
            unknown.append(dataclasses.replace(summary, detail="no_outcome"))
        elif record.fate is CallFate.FAILED:
            not_done.append(dataclasses.replace(summary, error=record.error_code))
        else:
            not_done.append(dataclasses.replace(summary, detail="not_started"))
    return dataclasses.replace(
        ended, completed_calls=tuple(done), not_completed_calls=tuple(not_done), unknown_calls=tuple(unknown)
    )


def unauthorized_end(
    state: RunState, pending: ev.ApprovalRequested, *, approver: str, comment: str
) -> tuple[ev.Event, ...]:
    """A pause after a tool's UNAUTHORIZED ends: the call fails with it, then the run does."""
    resolved = ev.ApprovalResolved(
        approval_id=pending.approval_id,
        decision=ev.ApprovalDecision.REJECT,
        approver=approver,
        comment=comment,
    )
    call = next(c for c in state.calls if c.call_id == pending.call_id)
    why = f"rejected by {approver}" if approver else comment
    failed = ev.ToolFailed(
        step=call.step,
        call_id=call.call_id,
        tool=call.tool,
        error=ev.ToolError(
            ev.ToolErrorCode.UNAUTHORIZED, f"{pending.tool} refused the runtime's authority; {why}"
        ),
    )
    folded = copy.deepcopy(state)  # the end's summary lists the call as failed, not in flight
    folded.apply(resolved)
    folded.apply(failed)
    reason = f"tool_unauthorized:{pending.tool}"
    return (resolved, failed, *end_events(folded, Phase.FAILED, reason, message=failed.error.message))


def _clean_up(state: RunState, clock: Clock) -> Decision:
    """Release the next resource, newest first; past the cleanup deadline give the rest up; then end.

    A cancel or the run's own deadline does not cut cleanups short: they have their own deadline.
    """
    closing = state.closing
    if closing is None:
        raise ValueError("CLEANING_UP without run.closing")
    pending = state.pending_cleanups()
    if pending and state.cleanup_deadline_ms and clock.now_s * 1000 >= state.cleanup_deadline_ms:
        return Append(
            tuple(
                ev.CleanupFailed(
                    cleanup_id=c.cleanup_id,
                    attempt=c.attempts,
                    message="the cleanup deadline passed before it was done",
                    final=True,
                )
                for c in pending
            )
        )
    if pending:
        return RunCleanup(pending[0])
    return Append(
        end_events(
            state,
            closing.phase,
            closing.reason,
            output=closing.output,
            output_ref=closing.output_ref,
            message=closing.message,
            retryable=closing.retryable,
        )
    )


def decide(state: RunState, budgets: Budgets, clock: Clock, policy: Policy | None = None) -> Decision:
    """Next move of a run. Never asks the model whether to go on (R6.1)."""
    policy = policy or Policy()
    if state.phase.terminal:
        # The closing pair is committed together, but a log cut between them must still end.
        return Idle() if state.ended else Append((_ended(state, state.phase, state.reason),))
    if state.phase is Phase.UNKNOWN_OUTCOME:
        call = state.unknown_call()
        return Reconcile(call) if call is not None else Idle()
    if state.phase is Phase.CLEANING_UP:
        return _clean_up(state, clock)
    if state.phase is Phase.WAITING_APPROVAL:
        pending = state.pending_approval
        if pending is None or clock.now_s * 1000 < pending.expire_ms:
            return Idle()
        if is_unauthorized_pause(pending):  # nobody fixed the tool's authority in time
            return Append(unauthorized_end(state, pending, approver="", comment="the pause expired"))
        if policy.fail_expired_approvals:
            return Append(end_events(state, Phase.FAILED, "approval_expired"))
        if not pending.call_id:  # a budget pause is asked again
            return PauseForBudget(pending.tool.removeprefix(BUDGET_PREFIX))
        return RequestApproval(next(c for c in state.calls if c.call_id == pending.call_id))
    if state.phase is Phase.CANCEL_REQUESTED:
        # cancel.requested is committed while a write is still in flight: an owner that died
        # then left it without a result. It is settled first (a write by its ledger), never
        # assumed undone: CANCELLED only with no call in flight (R6.6).
        in_flight = [c for c in state.calls if c.started and not c.finished and c.retry_attempt <= c.attempts]
        if len(in_flight) > 1 and all(c.tool in policy.parallel_safe for c in in_flight):
            return InvokeTools(tuple(in_flight))
        if in_flight:
            return InvokeTool(in_flight[0])
        return Append(end_events(state, Phase.CANCELLED, state.cancel_reason or "cancelled"))
    if clock.now_s >= clock.deadline_s - clock.reserve_s:
        return Append(end_events(state, Phase.EXPIRED, "deadline_exceeded", retryable=True))
    if state.phase is Phase.RETRY_WAIT:
        return _retry(state, clock)
    if state.diagnostic_done:
        # The one diagnostic step has been paid for; whatever the model said, the run ends here.
        message = f"{state.diagnostic}; model said: {(state.answer or '')[:300]}"
        return Append(end_events(state, Phase.FAILED, "loop_detected", message=message))
    if state.phase is Phase.TOOL_STEP:
        return _tool_step(state, budgets, policy)
    if state.answer is not None:
        return Finalize(state.answer, corrected=state.corrective is not None)
    if state.phase is Phase.MODEL_STEP:
        return CallModel(state.step)
    return _start_model_step(state, budgets, policy)


def _tool_step(state: RunState, budgets: Budgets, policy: Policy) -> Decision:
    pending = [c for c in state.calls if not c.finished]
    if not pending:
        return _start_model_step(state, budgets, policy)
    in_flight = [c for c in pending if c.started]
    if in_flight:
        if len(in_flight) > 1:
            return InvokeTools(tuple(in_flight))
        return InvokeTool(in_flight[0])
    refused = [c for c in pending if not policy.allows(c.tool)]
    if refused:
        # Never started, never sent, not a tool call for the budgets: the model hears why (R10.2).
        return Append(
            tuple(
                ev.ToolFailed(
                    step=c.step,
                    call_id=c.call_id,
                    tool=c.tool,
                    error=not_allowed_error(c.tool, policy.agent_name),
                )
                for c in refused
            )
        )
    malformed = [
        (c, error) for c in pending if (error := arguments_error(c.arguments_json, policy.argument_limits))
    ]
    if malformed:
        # Never started, never sent: the model hears why and may try again (the run goes on).
        return Append(
            tuple(ev.ToolFailed(step=c.step, call_id=c.call_id, tool=c.tool, error=e) for c, e in malformed)
        )
    first = pending[0]
    repeat = state.loops.would_repeat(policy.loops, first.tool, first.arguments_json)
    if repeat is not None:
        return _loop_exit(state, repeat)
    if first.call_id in policy.needs_approval and not first.approved:
        return RequestApproval(first)
    if first.tool in policy.handoffs:
        return _handoff(state, budgets, policy, first)
    batch = [first]
    if first.tool in policy.parallel_safe:
        for call in pending[1 : max(1, budgets.max_parallel_tool_calls)]:
            if call.tool not in policy.parallel_safe or call.call_id in policy.needs_approval:
                break
            batch.append(call)
    started: list[ev.ToolStarted] = []
    usage = state.usage.copy()
    for call in batch:
        exhausted = exhausted_before_tool_call(budgets, usage, call.tool)
        if exhausted is not None:
            if started:
                break
            return _exhausted(state, policy, exhausted)
        started.append(_started(state, usage, call, policy.tool_versions.get(call.tool, "")))
        usage.tool_calls += 1
        usage.calls_per_tool[call.tool] = usage.calls_per_tool.get(call.tool, 0) + 1
    return Append(tuple(started))


def _loop_exit(state: RunState, detail: str) -> Decision:
    """Skip the rest of the step's calls and spend the one diagnostic step (or end, if spent)."""
    if state.diagnostic is not None:
        return Append(end_events(state, Phase.FAILED, "loop_detected", message=detail))
    skipped = tuple(
        ev.ToolFailed(
            step=c.step,
            call_id=c.call_id,
            tool=c.tool,
            error=ev.ToolError(ev.ToolErrorCode.CANCELLED, f"not run: loop detected ({detail})"),
        )
        for c in state.calls
        if not c.finished and not c.started
    )
    diagnostic = ev.StepStarted(
        step=state.step + 1, kind=ev.StepKind.DIAGNOSTIC, reason=detail, usage=state.usage.totals()
    )
    return Append((*skipped, diagnostic))


def _start_model_step(state: RunState, budgets: Budgets, policy: Policy) -> Decision:
    loop = state.loops.detected(policy.loops)
    if loop is not None:
        return _loop_exit(state, loop)
    exhausted = exhausted_before_model_step(budgets, state.usage)
    if exhausted is not None:
        return _exhausted(state, policy, exhausted)
    return Append((ev.StepStarted(step=state.step + 1, kind=ev.StepKind.MODEL, usage=state.usage.totals()),))


def _started(state: RunState, usage: Usage, call: CallState, tool_version: str) -> ev.ToolStarted:
    after = usage.totals()
    after.tool_calls += 1
    return ev.ToolStarted(
        step=call.step,
        call_id=call.call_id,
        tool=call.tool,
        arguments_json=call.arguments_json,
        idempotency_key=idempotency_key(state.run_id, call.step, call.index),
        attempt=1,
        usage_before=usage.totals(),
        usage_after=after,
        tool_version=tool_version or None,  # a tool without a version records none
    )


def _retry(state: RunState, clock: Clock) -> Decision:
    call = next(c for c in state.calls if c.retry_attempt)
    if clock.now_s * 1000 < call.retry_due_ms:
        return WaitUntil(call.retry_due_ms / 1000)
    usage = state.usage.totals()  # a retry is the same call: budgets count it once
    retried = ev.ToolStarted(
        step=call.step,
        call_id=call.call_id,
        tool=call.tool,
        arguments_json=call.arguments_json,
        idempotency_key=call.idempotency_key,
        attempt=call.retry_attempt,
        usage_before=usage,
        usage_after=usage,
    )
    return Append((retried,))


def corrective_step(state: RunState, reason: str) -> ev.StepStarted:
    """The one extra model step a rejected final answer may get to correct itself (R4.3)."""
    return ev.StepStarted(
        step=state.step + 1, kind=ev.StepKind.CORRECTIVE, reason=reason, usage=state.usage.totals()
    )


def _handoff(state: RunState, budgets: Budgets, policy: Policy, call: CallState) -> Decision:
    """Control passes to another agent; the step's other calls are not run (R9.1)."""
    if budgets.max_handoffs and state.usage.handoffs >= budgets.max_handoffs:
        return Append(end_events(state, Phase.FAILED, "budget_exhausted:handoffs"))
    try:
        reason = str(loads_bounded(call.arguments_json or "{}").get("reason", ""))
    except (ValueError, AttributeError):
        reason = ""
    after = state.usage.totals()
    after.handoffs += 1
    handoff = ev.Handoff(
        step=call.step,
        call_id=call.call_id,
        from_agent=policy.agent_name,
        to_agent=policy.handoffs[call.tool],
        reason=reason[:400],
        usage_after=after,
    )
    skipped = tuple(
        ev.ToolFailed(
            step=c.step,
            call_id=c.call_id,
            tool=c.tool,
            error=ev.ToolError(ev.ToolErrorCode.CANCELLED, "not run: the run was handed off"),
        )
        for c in state.calls
        if c is not call and not c.finished and not c.started
    )
    return Append((handoff, *skipped))


BUDGET_PREFIX = "budget."


def _exhausted(state: RunState, policy: Policy, budget: str) -> Decision:
    """A hard budget is spent: the run ends, or (by the agent's policy) pauses for a person."""
    if policy.pause_on_exhaustion and state.phase is Phase.TOOL_STEP:
        return PauseForBudget(budget)
    return Append(end_events(state, Phase.FAILED, f"budget_exhausted:{budget}"))
