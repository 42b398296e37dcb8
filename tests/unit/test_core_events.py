"""Folding typed events (core/_state.py): absent fields, the failures of malformed logs, no aliasing."""

from __future__ import annotations

import json

import pytest

from agentrt.server.core import (
    ApprovalDecision,
    ApprovalRequested,
    ApprovalResolved,
    Budgets,
    CleanupCompleted,
    CleanupFailed,
    CleanupKind,
    CleanupRegistered,
    CleanupSettled,
    CleanupStarted,
    CleanupStatus,
    Clock,
    Idle,
    IllegalTransition,
    ModelCompleted,
    Phase,
    RequestApproval,
    RetryScheduled,
    RunClosing,
    RunCompleted,
    RunEnded,
    RunFailed,
    RunStarted,
    RunState,
    StepKind,
    StepStarted,
    ToolCallRequest,
    ToolError,
    ToolErrorCode,
    ToolFailed,
    ToolStarted,
    Usage,
    decide,
)


def _tool_step(*calls: str) -> RunState:
    state = RunState(run_id="r")
    state.apply(RunStarted(input="hi"))
    state.apply(StepStarted(step=1))
    requests = tuple(ToolCallRequest(c, "t", "{}") for c in calls)
    state.apply(ModelCompleted(step=1, tool_calls=requests, usage_after=Usage(model_steps=1)))
    return state


def test_absent_fields_keep_what_the_log_said_before() -> None:
    state = _tool_step("c1")
    state.apply(ToolStarted(step=2, call_id="c1", attempt=1, tool_version="1.0"))
    state.apply(ToolStarted(step=2, call_id="c1"))  # an older log: no attempt, no version
    call = state.calls[0]
    assert (call.attempts, call.tool_version) == (2, "1.0")
    state.apply(ToolStarted(step=2, call_id="c1", tool_version=""))  # present and empty: recorded
    assert call.tool_version == ""
    state.apply(ToolFailed(step=2, call_id="c1", error=ToolError(ToolErrorCode.PERMANENT, "no")))
    state.apply(StepStarted(step=3, kind=StepKind.DIAGNOSTIC))  # a v1 diagnostic step without its loop
    assert state.diagnostic == "loop"
    state.apply(RunFailed(reason="loop_detected"))
    state.apply(RunEnded(phase=Phase.FAILED))  # no reason: the run.failed one stands
    assert state.reason == "loop_detected" and state.ended


def test_a_failed_call_is_told_to_the_model_in_the_cores_words() -> None:
    state = _tool_step("c1")
    state.apply(ToolFailed(step=2, call_id="c1", error=ToolError(ToolErrorCode.INVALID_INPUT, "bad")))
    entry = state.history[-1]
    assert entry.failed and json.loads(entry.content) == {"error": "INVALID_INPUT", "message": "bad"}
    assert state.calls[0].error == ToolError(ToolErrorCode.INVALID_INPUT, "bad")


def test_folding_never_shares_a_usage_with_the_event() -> None:
    state = _tool_step("c1")
    recorded = Usage(model_steps=1, tool_calls=1)
    started = ToolStarted(step=2, call_id="c1", attempt=1, usage_before=Usage(), usage_after=recorded)
    state.apply(started)
    assert state.usage.calls_per_tool == {"t": 1}  # the fold's own count
    assert started.usage_after is recorded and recorded.calls_per_tool == {}
    assert state.usage is not recorded


def test_illegal_moves_and_unknown_names_raise_as_before() -> None:
    state = _tool_step("c1")
    with pytest.raises(IllegalTransition):
        state.apply(RunEnded(phase=Phase.COMPLETED))  # a TOOL_STEP run cannot have completed
    with pytest.raises(ValueError, match="unknown call"):
        state.apply(ToolStarted(step=2, call_id="nobody"))
    with pytest.raises(ValueError, match="not the pending one"):
        state.apply(ApprovalResolved(approval_id="a9", decision=ApprovalDecision.APPROVE))
    with pytest.raises(ValueError, match="unknown event"):
        state.apply("tool.started")  # type: ignore[arg-type]


def test_times_the_runtime_always_writes_are_required_where_they_are_read() -> None:
    state = _tool_step("c1")
    state.apply(ToolStarted(step=2, call_id="c1", attempt=1))
    with pytest.raises(ValueError):
        state.apply(RetryScheduled(call_id="c1", attempt=2))  # no due_time
    asked = ApprovalRequested(approval_id="a1", call_id="")
    with pytest.raises(ValueError):
        _ = asked.expire_ms
    with pytest.raises(ValueError):
        _ = asked.request_ms


def test_an_approval_waits_until_its_expiry_then_is_asked_again() -> None:
    state = _tool_step("c1")
    asked = ApprovalRequested(
        approval_id="a1",
        call_id="c1",
        tool="t",
        expire_time="1970-01-01T00:00:10.000Z",
        request_time="1970-01-01T00:00:00.000Z",
    )
    state.apply(asked)
    assert state.pending_approval is asked and state.phase is Phase.WAITING_APPROVAL
    assert (asked.expire_ms, asked.request_ms) == (10_000, 0)
    waiting = decide(state, Budgets(), Clock(now_s=9.9, deadline_s=100))
    assert isinstance(waiting, Idle)
    expired = decide(state, Budgets(), Clock(now_s=10.0, deadline_s=100))
    assert isinstance(expired, RequestApproval) and expired.call.call_id == "c1"
    state.apply(ApprovalResolved(approval_id="a1", decision=ApprovalDecision.APPROVE))
    assert state.pending_approval is None and state.calls[0].approved


def test_the_cleanup_tail_closes_only_after_the_end_and_once_everything_is_released() -> None:
    state = RunState(run_id="r")
    state.apply(RunStarted(input="hi"))
    state.apply(StepStarted(step=1))
    state.apply(CleanupRegistered(cleanup_id="c1", kind=CleanupKind.TOOL, target="sandbox.destroy"))
    state.apply(ModelCompleted(step=1, text="done", usage_after=Usage(model_steps=1)))
    with pytest.raises(ValueError, match="before the run ended"):
        state.apply(CleanupSettled(retries=1))  # the run has not ended
    state.apply(RunClosing(phase=Phase.COMPLETED, reason="final_answer", output="done"))
    state.apply(CleanupStarted(cleanup_id="c1", attempt=1))
    state.apply(CleanupFailed(cleanup_id="c1", attempt=1, message="down", final=True))
    state.apply(RunCompleted(output="done"))
    state.apply(RunEnded(phase=Phase.COMPLETED))
    assert state.ended and state.cleanup_status is CleanupStatus.UNKNOWN
    with pytest.raises(ValueError, match="unreleased"):
        state.apply(CleanupSettled(retries=1))  # c1 may still hold its resource
    state.apply(CleanupStarted(cleanup_id="c1", attempt=2))  # the cleanup job, after run.ended
    state.apply(CleanupCompleted(cleanup_id="c1", attempt=2))
    state.apply(CleanupSettled(retries=1))
    assert state.cleanup_status is CleanupStatus.DONE and state.phase is Phase.COMPLETED
