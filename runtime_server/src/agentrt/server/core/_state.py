"""A run's state folded from its events (R5.1: the log is the truth).

``RunState.apply`` is the only way state changes; it derives the phase change
from the event through the transition table, so an event that would make an
illegal move raises instead of corrupting the state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

from agentrt.server.core import _events as ev
from agentrt.server.core._budgets import Usage
from agentrt.server.core._cleanups import CLEANUP_MEMBER, CleanupStatus
from agentrt.server.core._errors import IllegalTransition
from agentrt.server.core._json import loads_bounded, object_with_members
from agentrt.server.core._loops import LoopTracker
from agentrt.server.core._phases import Phase, Trigger, transition
from agentrt.server.core._timefmt import parse_rfc3339_ms
from agentrt.server.core._tokens import token_scale_permille
from agentrt.server.core._variables import SET_VARIABLES

CORRECTIVE_NOTE = "[agentrt] Your final answer was not accepted: {}. Answer again, correcting it."
DUPLICATE_NOTE = (
    "[agentrt] Not run again: this call repeats the intent of an earlier call ({}), which already "
    "did it. Its recorded result follows; do not ask for it again."
)
DIAGNOSTIC_NOTE = (
    "[agentrt] A loop was detected ({}). Do not call tools again: answer now with what you know "
    "and say what blocked you."
)


@dataclass(slots=True)
class CallState:
    """One tool call the model asked for, and how far it got."""

    call_id: str
    tool: str
    arguments_json: str
    index: int
    step: int
    idempotency_key: str = ""
    attempts: int = 0
    result_json: str | None = None
    error: ev.ToolError | None = None
    retry_attempt: int = 0  # attempt a scheduled retry will make
    retry_due_ms: int = 0
    approved: bool = False  # a person approved this call
    override_intent: bool = False  # ... and let it run even if it repeats an earlier call's intent
    tool_version: str = ""  # contract version when the call started (or was put to a person)
    unknown: bool = False  # the latest attempt's outcome is not known
    call_deadline_ms: int = 0  # of the attempt whose outcome is unknown
    unknown_since_ms: int = 0  # when it was found unknown; 0: not recorded (an older log)

    @property
    def started(self) -> bool:
        return self.attempts > 0

    @property
    def finished(self) -> bool:
        return self.result_json is not None or self.error is not None


class CallFate(StrEnum):
    """How far a call of the run got, for a partial run's summary."""

    REQUESTED = "requested"  # the model asked for it; it never started
    STARTED = "started"  # sent at least once, no outcome recorded
    COMPLETED = "completed"
    FAILED = "failed"
    UNKNOWN = "unknown"  # its outcome is not known


@dataclass(slots=True)
class CallRecord:
    """One call of the whole run (``RunState.calls`` holds only the current step's)."""

    call_id: str
    tool: str
    step: int
    fate: CallFate = CallFate.REQUESTED
    error_code: ev.ToolErrorCode | None = None  # of a failed call


@dataclass(slots=True)
class CleanupEntry:
    """A resource the run releases when it ends, and how far its cleanup got."""

    cleanup_id: str
    kind: ev.CleanupKind
    target: str
    arguments_json: str = ""
    call_id: str = ""
    attempts: int = 0
    done: bool = False  # released (or, for a child run, ended with its call)
    unknown: bool = False  # failed for good so far: the resource may still exist
    message: str = ""  # the last failure

    @property
    def pending(self) -> bool:
        return not self.done and not self.unknown


@dataclass(slots=True)
class HistoryEntry:
    """One message of the conversation the model sees."""

    role: str
    content: str = ""
    tool_calls: tuple[tuple[str, str, str], ...] = ()  # (call_id, tool, arguments_json)
    tool_call_id: str = ""
    failed: bool = False  # a tool result that is an error


@dataclass(slots=True)
class RunState:
    """Everything the decider needs, rebuilt from events alone."""

    run_id: str
    phase: Phase = Phase.QUEUED
    seq: int = 0
    step: int = 0
    input: str = ""
    usage: Usage = field(default_factory=Usage)
    history: list[HistoryEntry] = field(default_factory=list)
    calls: list[CallState] = field(default_factory=list)
    answer: str | None = None
    cancel_reason: str | None = None
    any_tool_started: bool = False
    output: str = ""
    reason: str = ""
    ended: bool = False
    loops: LoopTracker = field(default_factory=LoopTracker)
    diagnostic: str | None = None  # the loop that earned the run its one diagnostic step
    diagnostic_done: bool = False
    active_agent: str | None = None  # set by a handoff; None: the agent the run started with
    corrective: str | None = None  # why the final answer was sent back once for correction
    pending_approval: ev.ApprovalRequested | None = None  # what a person is being asked
    fault_count: int = 0  # run.fault events so far
    input_ref: ev.PayloadRef | None = None  # the input's payload: ``input`` is a view until hydrated
    answer_ref: ev.PayloadRef | None = None  # the answer's payload when its text is a payload
    output_ref: ev.PayloadRef | None = None  # the output's payload, set by run.completed
    variables: dict[str, ev.VariableValue] = field(default_factory=dict)  # set by variables.set
    input_view: str = ""  # ``input`` as run.started recorded it (a view when ``input_ref`` is set)
    input_index: int = 0  # where the run's input is in ``history`` (after earlier session turns)
    window: ev.ContextWindow | None = None  # how the current step's prompt was fitted, if it was
    # The provider's count against the runtime's estimate of the latest request (0: none known).
    token_scale_permille: int = 0
    call_records: list[CallRecord] = field(default_factory=list)  # every call of the run, in order
    escalation: str | None = None  # why the current wait was escalated; None once the wait ends
    cleanups: list[CleanupEntry] = field(default_factory=list)  # in registration order
    closing: ev.RunClosing | None = None  # the decided end, while CLEANING_UP
    cleanup_deadline_ms: int = 0  # set by the run's first cleanup attempt

    def apply(self, event: ev.Event) -> None:
        """Fold one event into the state.

        Raises:
            IllegalTransition: the event implies a phase move the table forbids.
            ValueError: the event names a call or an approval the run does not have.
        """
        self._fold(event)
        if self.escalation is not None and self.phase not in (Phase.UNKNOWN_OUTCOME, Phase.WAITING_APPROVAL):
            self.escalation = None  # the wait that needed a person is over

    def _fold(self, event: ev.Event) -> None:
        match event:
            case ev.RunStarted():
                for turn in event.session_history:
                    self.history.append(HistoryEntry(role="user", content=turn.input))
                    self.history.append(HistoryEntry(role="assistant", content=turn.output))
                self.input = self.input_view = event.input
                self.input_ref = event.input_ref
                self.input_index = len(self.history)
                self.history.append(HistoryEntry(role="user", content=self.input))
            case ev.StepStarted():
                self._move(Trigger.START_MODEL_STEP)
                self.loops.on_model_step(first=self.step == 0)
                self.step = event.step
                self.calls = []
                self.answer = None
                self.window = event.context
                if event.kind is ev.StepKind.CORRECTIVE:
                    self.corrective = event.reason or ""
                    self.history.append(
                        HistoryEntry(role="user", content=CORRECTIVE_NOTE.format(self.corrective))
                    )
                if event.kind is ev.StepKind.DIAGNOSTIC:
                    self.diagnostic = event.reason if event.reason is not None else "loop"
                    self.history.append(
                        HistoryEntry(role="user", content=DIAGNOSTIC_NOTE.format(self.diagnostic))
                    )
            case ev.ModelCompleted():
                self.diagnostic_done = self.diagnostic is not None
                self.step = event.step
                if event.prompt_estimate_tokens:
                    scale = token_scale_permille(
                        provider_tokens=event.usage_after.input_tokens - event.usage_before.input_tokens,
                        estimated_tokens=event.prompt_estimate_tokens,
                    )
                    self.token_scale_permille = scale or self.token_scale_permille
                self._usage_from(event.usage_after)
                calls = event.tool_calls
                self.loops.on_answer(event.text, [(c.tool, c.arguments_json) for c in calls])
                self.history.append(
                    HistoryEntry(
                        role="assistant",
                        content=event.text,
                        tool_calls=tuple((c.call_id, c.tool, c.arguments_json) for c in calls),
                    )
                )
                if calls:
                    self._move(Trigger.MODEL_CALLED_TOOLS)
                    self.call_records.extend(CallRecord(c.call_id, c.tool, self.step + 1) for c in calls)
                    self.calls = [
                        CallState(
                            call_id=c.call_id,
                            tool=c.tool,
                            arguments_json=c.arguments_json,
                            index=i,
                            step=self.step + 1,
                        )
                        for i, c in enumerate(calls)
                    ]
                else:
                    self._move(Trigger.MODEL_ANSWERED)
                    self.answer = event.text
                    self.answer_ref = event.text_ref
            case ev.ToolStarted():
                self._reconcile_if_unknown()
                self._move(Trigger.TOOL_STARTED)
                call = self._call(event.call_id)
                call.unknown = False
                call.retry_attempt = 0
                call.idempotency_key = event.idempotency_key
                if event.tool_version is not None:
                    call.tool_version = event.tool_version
                call.attempts = event.attempt if event.attempt is not None else call.attempts + 1
                if call.attempts == 1:
                    self.loops.on_call_started(call.tool, call.arguments_json)
                self.step = max(self.step, event.step)
                self._usage_from(event.usage_after)
                self.usage.calls_per_tool[call.tool] = self.usage.calls_per_tool.get(call.tool, 0) + (
                    1 if call.attempts == 1 else 0
                )
                self.any_tool_started = True
                self._record(call, CallFate.STARTED)
            case ev.ToolCompleted():
                self._reconcile_if_unknown()
                self._move(Trigger.TOOL_FINISHED)
                call = self._call(event.call_id)
                self._child_settled(call.call_id)
                call.result_json = event.result_json
                self._record(call, CallFate.COMPLETED)
                self.loops.on_result(call.tool, call.result_json)
                content = _duplicate_content(event) if event.deduplicated else model_view(call.result_json)
                self.history.append(HistoryEntry(role="tool", content=content, tool_call_id=call.call_id))
            case ev.ToolFailed():
                self._reconcile_if_unknown()
                self._move(Trigger.TOOL_FINISHED)
                call = self._call(event.call_id)
                self._child_settled(call.call_id)
                error = call.error = event.error
                self._record(call, CallFate.FAILED, error.code)
                self.loops.on_error(call.tool, error.code, error.message)
                self.history.append(
                    HistoryEntry(
                        role="tool",
                        tool_call_id=call.call_id,
                        failed=True,
                        content=json.dumps({"error": error.code.value, "message": error.message}),
                    )
                )
            case ev.Handoff():
                self._move(Trigger.TOOL_FINISHED)
                call = self._call(event.call_id)
                call.result_json = json.dumps({"handed_off_to": event.to_agent})
                self._record(call, CallFate.COMPLETED)
                self.history.append(
                    HistoryEntry(role="tool", content=call.result_json, tool_call_id=call.call_id)
                )
                self._usage_from(event.usage_after)
                self.active_agent = event.to_agent
            case ev.CancelRequested():
                self._move(Trigger.REQUEST_CANCEL)
                self.cancel_reason = event.reason
            case ev.RunCompleted():
                self._move(Trigger.COMPLETE)
                self.output = event.output
                self.output_ref = event.output_ref
                self.reason = "final_answer"
            case ev.RunFailed():
                self._move(Trigger.FAIL)
                self.reason = event.reason
            case ev.RunCancelled():
                self._move(self._cancel_trigger(Trigger.CONFIRM_CANCEL, Trigger.HAND_OVER))
                self.reason = event.reason
            case ev.RunEnded(phase=phase):
                if phase is Phase.EXPIRED and self.phase is not Phase.EXPIRED:
                    self._move(Trigger.EXPIRE)
                if self.phase is not phase:
                    raise IllegalTransition(phase=self.phase.value, trigger=f"end:{phase.value}")
                if event.reason is not None:
                    self.reason = event.reason
                self.ended = True
            case ev.RetryScheduled(call_id=""):
                pass  # a model step retried as a whole: it stays the same MODEL_STEP
            case ev.RetryScheduled():
                self._move(Trigger.SCHEDULE_RETRY)
                call = self._call(event.call_id)
                call.retry_attempt = event.attempt
                call.retry_due_ms = parse_rfc3339_ms(event.due_time or "")  # ValueError if none
            case ev.ToolOutcomeUnknown():
                self._move(Trigger.OUTCOME_UNKNOWN)
                call = self._call(event.call_id)
                call.unknown = True
                call.call_deadline_ms = event.call_deadline_ms
                call.unknown_since_ms = event.unknown_ms
                self.escalation = None  # a new wait
                self._record(call, CallFate.UNKNOWN)
            case ev.RunEscalated():
                if self.phase not in (Phase.UNKNOWN_OUTCOME, Phase.WAITING_APPROVAL):
                    raise ValueError(f"run.escalated while {self.phase.value}: nothing waits")
                self.escalation = event.reason
            case ev.RunFault():
                # No phase move: the faulted attempt is retried from the last committed event.
                counted = event.fault_count
                self.fault_count = counted if counted is not None else self.fault_count + 1
                if event.usage_after is not None:
                    self._usage_from(event.usage_after)
            case ev.RunCheckpointed() | ev.ModelTextDelta() | ev.OutcomeResolved():
                pass  # audit only: the result event that follows an outcome.resolved moves the run
            case ev.ApprovalRequested():
                self._move(Trigger.AWAIT_APPROVAL)
                if event.call_id:  # empty for a budget pause: no call waits
                    self._call(event.call_id).tool_version = event.tool_version or ""
                self.pending_approval = event
                self.escalation = None  # a new wait
            case ev.ApprovalResolved():
                pending = self.pending_approval
                if pending is None or pending.approval_id != event.approval_id:
                    raise ValueError(f"approval {event.approval_id!r} is not the pending one")
                self._move(Trigger.RESOLVE_APPROVAL)
                if event.decision is ev.ApprovalDecision.APPROVE and pending.call_id:
                    call = self._call(pending.call_id)
                    call.approved = True
                    call.override_intent = event.override_intent
                self.pending_approval = None
            case ev.VariablesSet():
                if not event.refused_reason:  # a refusal changes nothing
                    for name in event.removed:
                        self.variables.pop(name, None)
                    self.variables.update(event.variables)
            case ev.SummaryCompleted():
                self._usage_from(event.usage_after)  # its text is the step's context.summary
            case ev.RunClosing():
                if not event.phase.terminal:
                    raise ValueError(f"run.closing names {event.phase.value}, not a phase a run ends in")
                if self.phase is Phase.UNKNOWN_OUTCOME and event.phase is not Phase.CANCELLED:
                    raise IllegalTransition(phase=self.phase.value, trigger=f"close to {event.phase.value}")
                self._move(self._cancel_trigger(Trigger.CLOSE, Trigger.HAND_OVER_CLOSE))
                self.closing = event
            case ev.CleanupRegistered():
                if not event.refused_reason:  # a refusal registers nothing
                    if any(c.cleanup_id == event.cleanup_id for c in self.cleanups):
                        raise ValueError(f"cleanup {event.cleanup_id!r} is registered already")
                    self.cleanups.append(
                        CleanupEntry(
                            cleanup_id=event.cleanup_id,
                            kind=event.kind,
                            target=event.target,
                            arguments_json=event.arguments_json,
                            call_id=event.call_id,
                        )
                    )
            case ev.CleanupStarted():
                entry = self._cleanup(event.cleanup_id)
                entry.attempts = event.attempt
                if event.deadline_ms and not self.cleanup_deadline_ms:
                    self.cleanup_deadline_ms = event.deadline_ms
            case ev.CleanupCompleted():
                entry = self._cleanup(event.cleanup_id)
                entry.done, entry.unknown = True, False
            case ev.CleanupFailed():
                entry = self._cleanup(event.cleanup_id)
                entry.message = event.message
                entry.unknown = entry.unknown or event.final
            case ev.CleanupSettled():
                # The tail's close: only after the end, and only once nothing is left to release.
                if not self.ended or not all(c.done for c in self.cleanups):
                    raise ValueError("cleanup.settled before the run ended or with a cleanup unreleased")
            case _:
                raise ValueError(f"unknown event {type(event).__name__}")

    def pending_cleanups(self) -> list[CleanupEntry]:
        """The cleanups still to run, newest first (the order they are released in)."""
        return [c for c in reversed(self.cleanups) if c.pending]

    @property
    def cleanup_status(self) -> CleanupStatus:
        if not self.cleanups:
            return CleanupStatus.NONE
        if any(c.unknown for c in self.cleanups):
            return CleanupStatus.UNKNOWN
        return CleanupStatus.DONE if all(c.done for c in self.cleanups) else CleanupStatus.PENDING

    def _cleanup(self, cleanup_id: str) -> CleanupEntry:
        for entry in self.cleanups:
            if entry.cleanup_id == cleanup_id:
                return entry
        raise ValueError(f"event names unknown cleanup {cleanup_id!r}")

    def _child_settled(self, call_id: str) -> None:
        # A child run's call has its answer: the child ended (or was cancelled with the call).
        for entry in self.cleanups:
            if entry.kind is ev.CleanupKind.CHILD_RUN and entry.call_id == call_id:
                entry.done = True

    def _reconcile_if_unknown(self) -> None:
        # A result, failure or fresh attempt of the unknown write settles UNKNOWN_OUTCOME.
        if self.phase is Phase.UNKNOWN_OUTCOME:
            self._move(Trigger.RECONCILE)

    def unknown_call(self) -> CallState | None:
        """The write whose outcome is not known, while the run is in UNKNOWN_OUTCOME."""
        return next((c for c in self.calls if c.unknown), None)

    def _record(self, call: CallState, fate: CallFate, error_code: ev.ToolErrorCode | None = None) -> None:
        for record in reversed(self.call_records):
            if record.call_id == call.call_id and record.step == call.step:
                record.fate = fate
                record.error_code = error_code
                return
        # A log written before call records were folded from a checkpoint: keep what is seen now.
        self.call_records.append(CallRecord(call.call_id, call.tool, call.step, fate, error_code))

    def _move(self, trigger: Trigger) -> None:
        self.phase = transition(self.phase, trigger)

    def _cancel_trigger(self, usual: Trigger, handing_over: Trigger) -> Trigger:
        """A cancel's end from UNKNOWN_OUTCOME hands the write over, and only in a cancelled run.

        Raises:
            IllegalTransition: the run in UNKNOWN_OUTCOME was never asked to cancel.
        """
        if self.phase is not Phase.UNKNOWN_OUTCOME:
            return usual
        if self.cancel_reason is None:
            raise IllegalTransition(phase=self.phase.value, trigger=handing_over.value)
        return handing_over

    @property
    def unknown_at_end(self) -> bool:
        """The run ended with a call whose outcome nobody knows: a person must settle it."""
        return self.ended and any(r.fate is CallFate.UNKNOWN for r in self.call_records)

    def _call(self, call_id: str) -> CallState:
        for call in self.calls:
            if call.call_id == call_id:
                return call
        raise ValueError(f"event names unknown call {call_id!r}")

    def _usage_from(self, recorded: Usage) -> None:
        # The event's totals, with the per-tool counts only the fold keeps (never aliasing the event).
        self.usage = Usage(
            recorded.model_steps,
            recorded.tool_calls,
            recorded.input_tokens,
            recorded.output_tokens,
            recorded.cost_micros,
            recorded.handoffs,
            self.usage.calls_per_tool,
        )


RUNTIME_MEMBERS = (SET_VARIABLES, CLEANUP_MEMBER)
"""The members of a tool result addressed to the runtime, not to the model."""


def model_view(result_json: str) -> str:
    """A tool result as the model sees it: without the members addressed to the runtime.

    ``_set_variables`` and ``_cleanup`` are instructions to the runtime, not facts for the model
    (and a cleanup's arguments may name infrastructure). The log keeps the result as recorded.
    """
    result = object_with_members(result_json, RUNTIME_MEMBERS)
    if result is None:
        return result_json
    shown = {k: v for k, v in result.items() if k not in RUNTIME_MEMBERS}
    return json.dumps(shown, ensure_ascii=False, separators=(",", ":"))


def _duplicate_content(event: ev.ToolCompleted) -> str:
    """What the model sees for a deduplicated result: that it was not run, and the earlier result."""
    first = event.duplicate_of or ev.IntentDuplicate()
    where = f"call {first.call_id or '?'}" + (f" at {first.first_time}" if first.first_time else "")
    try:
        result: object = loads_bounded(model_view(event.result_json))
    except ValueError:  # a truncated view, or past the bounds: shown as text
        result = event.result_json
    return json.dumps({"deduplicated": True, "note": DUPLICATE_NOTE.format(where), "result": result})


def replay(run_id: str, events: list[ev.Event]) -> RunState:
    """Rebuild a run's state from its whole log."""
    state = RunState(run_id=run_id)
    for event in events:
        state.apply(event)
        state.seq += 1
    return state
