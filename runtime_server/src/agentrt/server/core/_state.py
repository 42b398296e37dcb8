"""A run's state folded from its events (R5.1: the log is the truth).

``RunState.apply`` is the only way state changes; it derives the phase change
from the event through the transition table, so an event that would make an
illegal move raises instead of corrupting the state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agentrt.server.core import _events as ev
from agentrt.server.core._budgets import Usage
from agentrt.server.core._errors import IllegalTransition
from agentrt.server.core._loops import LoopTracker
from agentrt.server.core._phases import Phase, Trigger, transition
from agentrt.server.core._timefmt import parse_rfc3339_ms

CORRECTIVE_NOTE = "[agentrt] Your final answer was not accepted: {}. Answer again, correcting it."
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
    error: dict[str, Any] | None = None
    retry_attempt: int = 0  # attempt a scheduled retry will make
    retry_due_ms: int = 0
    approved: bool = False  # a person approved this call
    tool_version: str = ""  # contract version when the call started (or was put to a person)
    unknown: bool = False  # the latest attempt's outcome is not known
    call_deadline_ms: int = 0  # of the attempt whose outcome is unknown

    @property
    def started(self) -> bool:
        return self.attempts > 0

    @property
    def finished(self) -> bool:
        return self.result_json is not None or self.error is not None


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
    pending_approval: dict[str, Any] | None = None  # approval.requested payload, plus expire_ms
    fault_count: int = 0  # run.fault events so far
    input_ref: dict[str, Any] | None = None  # the input's PayloadRef: ``input`` is a view until hydrated
    answer_ref: dict[str, Any] | None = None  # the answer's PayloadRef when its text is a payload
    output_ref: dict[str, Any] | None = None  # the output's PayloadRef, set by run.completed

    def apply(self, event: ev.Event) -> None:
        """Fold one event into the state.

        Raises:
            IllegalTransition: the event implies a phase move the table forbids.
        """
        data = event.data
        match event.type:
            case ev.RUN_STARTED:
                for turn in data.get("session_history", []):
                    self.history.append(HistoryEntry(role="user", content=turn.get("input", "")))
                    self.history.append(HistoryEntry(role="assistant", content=turn.get("output", "")))
                self.input = data.get("input", "")
                self.input_ref = data.get("input_ref")
                self.history.append(HistoryEntry(role="user", content=self.input))
            case ev.STEP_STARTED:
                self._move(Trigger.START_MODEL_STEP)
                self.loops.on_model_step(first=self.step == 0)
                self.step = int(data["step"])
                self.calls = []
                self.answer = None
                if data.get("kind") == ev.STEP_CORRECTIVE:
                    self.corrective = str(data.get("reason", ""))
                    self.history.append(
                        HistoryEntry(role="user", content=CORRECTIVE_NOTE.format(self.corrective))
                    )
                if data.get("kind") == ev.STEP_DIAGNOSTIC:
                    self.diagnostic = str(data.get("reason", "loop"))
                    self.history.append(
                        HistoryEntry(role="user", content=DIAGNOSTIC_NOTE.format(self.diagnostic))
                    )
            case ev.MODEL_COMPLETED:
                self.diagnostic_done = self.diagnostic is not None
                self.step = int(data["step"])
                self._usage_from(data["usage_after"])
                calls = data.get("tool_calls", [])
                self.history.append(
                    HistoryEntry(
                        role="assistant",
                        content=data.get("text", ""),
                        tool_calls=tuple((c["call_id"], c["tool"], c["arguments_json"]) for c in calls),
                    )
                )
                if calls:
                    self._move(Trigger.MODEL_CALLED_TOOLS)
                    self.calls = [
                        CallState(
                            call_id=c["call_id"],
                            tool=c["tool"],
                            arguments_json=c["arguments_json"],
                            index=i,
                            step=self.step + 1,
                        )
                        for i, c in enumerate(calls)
                    ]
                else:
                    self._move(Trigger.MODEL_ANSWERED)
                    self.answer = data.get("text", "")
                    self.answer_ref = data.get("text_ref")
            case ev.TOOL_STARTED:
                self._reconcile_if_unknown()
                self._move(Trigger.TOOL_STARTED)
                call = self._call(data["call_id"])
                call.unknown = False
                call.retry_attempt = 0
                call.idempotency_key = data["idempotency_key"]
                call.tool_version = data.get("tool_version", call.tool_version)
                call.attempts = int(data.get("attempt", call.attempts + 1))
                if call.attempts == 1:
                    self.loops.on_call_started(call.tool, call.arguments_json)
                self.step = max(self.step, int(data["step"]))
                self._usage_from(data["usage_after"])
                self.usage.calls_per_tool[call.tool] = self.usage.calls_per_tool.get(call.tool, 0) + (
                    1 if call.attempts == 1 else 0
                )
                self.any_tool_started = True
            case ev.TOOL_COMPLETED:
                self._reconcile_if_unknown()
                self._move(Trigger.TOOL_FINISHED)
                call = self._call(data["call_id"])
                call.result_json = data.get("result_json", "")
                self.loops.on_result(call.tool, call.result_json)
                self.history.append(
                    HistoryEntry(role="tool", content=call.result_json, tool_call_id=call.call_id)
                )
            case ev.TOOL_FAILED:
                self._reconcile_if_unknown()
                self._move(Trigger.TOOL_FINISHED)
                call = self._call(data["call_id"])
                call.error = dict(data.get("error", {}))
                self.loops.on_error(call.tool, call.error.get("code", ""), call.error.get("message", ""))
                self.history.append(
                    HistoryEntry(
                        role="tool",
                        tool_call_id=call.call_id,
                        failed=True,
                        content=json.dumps(
                            {"error": call.error.get("code", ""), "message": call.error.get("message", "")}
                        ),
                    )
                )
            case ev.HANDOFF:
                self._move(Trigger.TOOL_FINISHED)
                call = self._call(data["call_id"])
                call.result_json = json.dumps({"handed_off_to": data["to_agent"]})
                self.history.append(
                    HistoryEntry(role="tool", content=call.result_json, tool_call_id=call.call_id)
                )
                self._usage_from(data["usage_after"])
                self.active_agent = data["to_agent"]
            case ev.CANCEL_REQUESTED:
                self._move(Trigger.REQUEST_CANCEL)
                self.cancel_reason = data.get("reason", "")
            case ev.RUN_COMPLETED:
                self._move(Trigger.COMPLETE)
                self.output = data.get("output", "")
                self.output_ref = data.get("output_ref")
                self.reason = "final_answer"
            case ev.RUN_FAILED:
                self._move(Trigger.FAIL)
                self.reason = data.get("reason", "")
            case ev.RUN_CANCELLED:
                self._move(Trigger.CONFIRM_CANCEL)
                self.reason = data.get("reason", "")
            case ev.RUN_ENDED:
                phase = Phase(data["phase"].removeprefix("RUN_PHASE_"))
                if phase is Phase.EXPIRED and self.phase is not Phase.EXPIRED:
                    self._move(Trigger.EXPIRE)
                if self.phase is not phase:
                    raise IllegalTransition(phase=self.phase.value, trigger=f"end:{phase.value}")
                self.reason = data.get("reason", self.reason)
                self.ended = True
            case ev.RETRY_SCHEDULED if not data.get("call_id"):
                pass  # a model step retried as a whole: it stays the same MODEL_STEP
            case ev.RETRY_SCHEDULED:
                self._move(Trigger.SCHEDULE_RETRY)
                call = self._call(data["call_id"])
                call.retry_attempt = int(data["attempt"])
                call.retry_due_ms = parse_rfc3339_ms(data["due_time"])
            case ev.TOOL_OUTCOME_UNKNOWN:
                self._move(Trigger.OUTCOME_UNKNOWN)
                call = self._call(data["call_id"])
                call.unknown = True
                call.call_deadline_ms = (
                    parse_rfc3339_ms(data["call_deadline"]) if data.get("call_deadline") else 0
                )
            case ev.RUN_FAULT:
                # No phase move: the faulted attempt is retried from the last committed event.
                self.fault_count = int(data.get("fault_count", self.fault_count + 1))
                if data.get("usage_after"):
                    self._usage_from(data["usage_after"])
            case ev.RUN_CHECKPOINTED | ev.MODEL_TEXT_DELTA | ev.OUTCOME_RESOLVED:
                pass  # audit only: the result event that follows an outcome.resolved moves the run
            case ev.APPROVAL_REQUESTED:
                self._move(Trigger.AWAIT_APPROVAL)
                if data["call_id"]:  # empty for a budget pause: no call waits
                    self._call(data["call_id"]).tool_version = data.get("tool_version", "")
                self.pending_approval = dict(data, expire_ms=parse_rfc3339_ms(data["expire_time"]))
            case ev.APPROVAL_RESOLVED:
                pending = self.pending_approval
                if pending is None or pending["approval_id"] != data["approval_id"]:
                    raise ValueError(f"approval {data['approval_id']!r} is not the pending one")
                self._move(Trigger.RESOLVE_APPROVAL)
                if data.get("decision") == "APPROVAL_DECISION_APPROVE" and pending["call_id"]:
                    self._call(pending["call_id"]).approved = True
                self.pending_approval = None
            case _:
                raise ValueError(f"unknown event type {event.type!r}")

    def _reconcile_if_unknown(self) -> None:
        # A result, failure or fresh attempt of the unknown write settles UNKNOWN_OUTCOME.
        if self.phase is Phase.UNKNOWN_OUTCOME:
            self._move(Trigger.RECONCILE)

    def unknown_call(self) -> CallState | None:
        """The write whose outcome is not known, while the run is in UNKNOWN_OUTCOME."""
        return next((c for c in self.calls if c.unknown), None)

    def _move(self, trigger: Trigger) -> None:
        self.phase = transition(self.phase, trigger)

    def _call(self, call_id: str) -> CallState:
        for call in self.calls:
            if call.call_id == call_id:
                return call
        raise ValueError(f"event names unknown call {call_id!r}")

    def _usage_from(self, data: dict[str, Any]) -> None:
        self.usage = Usage.from_json(data, self.usage.calls_per_tool)


def replay(run_id: str, events: list[ev.Event]) -> RunState:
    """Rebuild a run's state from its whole log."""
    state = RunState(run_id=run_id)
    for event in events:
        state.apply(event)
        state.seq += 1
    return state
