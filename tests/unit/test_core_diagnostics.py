"""The core's diagnostics rules (pure): trace ids from stored W3C trace contexts, a run's pending
calls from its folded state, and which events count as its latest error."""

from __future__ import annotations

import json

import pytest

from agentrt.server.core import (
    DiagnosedError,
    PendingCallState,
    Phase,
    error_of,
    pending_calls,
    replay,
    rfc3339,
    trace_id_of,
)
from agentrt.server.core import events as ev

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    "stored",
    [
        f"00-{TRACE}-{PARENT}-01",
        f"00-{TRACE}-{PARENT}-00",  # not sampled: still the run's trace
        f"  00-{TRACE}-{PARENT}-01\n",
        f"01-{TRACE}-{PARENT}-01-more-fields",  # a later version may append fields
        f"cc-{TRACE}-{PARENT}-01",
        json.dumps({"traceparent": f"00-{TRACE}-{PARENT}-01", "tracestate": "congo=t61rcWkgMzE"}),
        f"00-{TRACE}-{PARENT}-01".encode(),
    ],
)
def test_a_valid_traceparent_gives_its_trace_id(stored: object) -> None:
    assert trace_id_of(stored) == TRACE


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "",
        42,
        f"00-{TRACE.upper()}-{PARENT}-01",  # uppercase hex is invalid
        f"00-{'0' * 32}-{PARENT}-01",  # all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE}-{PARENT}-01",  # version ff is forbidden
        f"00-{TRACE}-{PARENT}-01-extra",  # version 00 has exactly four fields
        f"00-{TRACE[:-1]}-{PARENT}-01",
        f"00-{TRACE}-{PARENT}-1",
        f"00_{TRACE}_{PARENT}_01",
        f"0-{TRACE}-{PARENT}-01",
        f"00-{TRACE}g-{PARENT}-01",
        "{not json",
        json.dumps(["traceparent"]),
        json.dumps({"traceparent": 7}),
        json.dumps({"tracestate": "a=b"}),
        "00-" + TRACE + "-" + PARENT + "-01" + "x" * 5000,  # past the bound before any parsing
        b"\xff\xfe",
    ],
)
def test_anything_else_gives_no_trace_id(stored: object) -> None:
    assert trace_id_of(stored) == ""


def started(*calls: str) -> list[ev.Event]:
    requests = tuple(
        ev.ToolCallRequest(call_id, tool, "{}") for call_id, tool in (c.split(":") for c in calls)
    )
    return [
        ev.RunStarted(agent_name="a", input="hi"),
        ev.StepStarted(step=1),
        ev.ModelCompleted(step=1, tool_calls=requests),
    ]


def test_pending_calls_say_where_each_call_of_the_step_stands() -> None:
    events = [
        *started("c1:refund.issue", "c2:orders.lookup", "c3:noop.echo"),
        ev.ToolStarted(step=2, call_id="c1", tool="refund.issue", idempotency_key="k1", attempt=1),
        ev.RetryScheduled(
            call_id="c1", attempt=2, reason="TOOL_ERROR_CODE_TRANSIENT: busy", due_time=rfc3339(9000)
        ),
    ]
    state = replay("r", events)
    assert state.phase is Phase.RETRY_WAIT
    c1, c2, c3 = pending_calls(state)
    assert (c1.call_id, c1.state, c1.attempts, c1.next_attempt, c1.next_retry_ms) == (
        "c1",
        PendingCallState.RETRY_SCHEDULED,
        1,
        2,
        9000,
    )
    assert c1.remote_operation_id == "k1"  # the key the host's ledger files the call under
    assert (c2.state, c2.attempts, c2.remote_operation_id, c2.next_retry_ms) == (
        PendingCallState.NOT_STARTED,
        0,
        "",
        0,
    )
    assert c3.state is PendingCallState.NOT_STARTED


def test_a_retried_call_in_flight_and_a_finished_call() -> None:
    events = [
        *started("c1:refund.issue", "c2:orders.lookup"),
        ev.ToolStarted(step=2, call_id="c2", tool="orders.lookup", idempotency_key="k2", attempt=1),
        ev.ToolCompleted(step=2, call_id="c2", tool="orders.lookup", result_json="{}"),
        ev.ToolStarted(step=2, call_id="c1", tool="refund.issue", idempotency_key="k1", attempt=1),
        ev.RetryScheduled(call_id="c1", attempt=2, reason="x", due_time=rfc3339(9000)),
        ev.ToolStarted(step=2, call_id="c1", tool="refund.issue", idempotency_key="k1", attempt=2),
    ]
    (c1,) = pending_calls(replay("r", events))  # c2 finished: not pending
    assert (c1.state, c1.attempts, c1.next_attempt, c1.next_retry_ms) == (PendingCallState.IN_FLIGHT, 2, 0, 0)


def test_an_unknown_outcome_carries_its_deadline_and_since() -> None:
    events = [
        *started("c1:refund.issue"),
        ev.ToolStarted(step=2, call_id="c1", tool="refund.issue", idempotency_key="k1", attempt=1),
        ev.ToolOutcomeUnknown(
            step=2,
            call_id="c1",
            tool="refund.issue",
            idempotency_key="k1",
            reason="transport lost",
            call_deadline=rfc3339(7000),
            unknown_time=rfc3339(6000),
        ),
    ]
    state = replay("r", events)
    assert state.phase is Phase.UNKNOWN_OUTCOME
    (c1,) = pending_calls(state)
    assert (c1.state, c1.attempts, c1.call_deadline_ms, c1.unknown_since_ms) == (
        PendingCallState.OUTCOME_UNKNOWN,
        1,
        7000,
        6000,
    )


def test_a_call_put_to_a_person_waits_for_approval() -> None:
    events = [
        *started("c1:refund.issue"),
        ev.ApprovalRequested(approval_id="a1", call_id="c1", tool="refund.issue", arguments_json="{}"),
    ]
    (c1,) = pending_calls(replay("r", events))
    assert (c1.state, c1.attempts) == (PendingCallState.WAITING_APPROVAL, 0)


def test_an_ended_run_has_no_pending_calls() -> None:
    events = [
        *started("c1:refund.issue"),
        ev.CancelRequested(reason="stop", requested_by="ops"),
        ev.RunCancelled(reason="stop"),
        ev.RunEnded(phase=Phase.CANCELLED),
    ]
    assert pending_calls(replay("r", events)) == ()


def test_errors_are_faults_tool_failures_retried_attempts_and_unknown_outcomes() -> None:
    fault = ev.RunFault(step=3, error_class="KeyError", message="boom at x.py:1")
    assert error_of(fault, seq=4, time_ms=10) == DiagnosedError(
        event_type="run.fault", seq=4, time_ms=10, code="KeyError", message="boom at x.py:1", step=3
    )
    failed = ev.ToolFailed(
        step=2, call_id="c1", tool="t", error=ev.ToolError(ev.ToolErrorCode.PERMANENT, "no such order")
    )
    got = error_of(failed, seq=5, time_ms=11)
    assert got is not None and (got.event_type, got.code, got.message, got.call_id, got.tool) == (
        "tool.failed",
        "PERMANENT",  # the core's word; the API spells it TOOL_ERROR_CODE_PERMANENT
        "no such order",
        "c1",
        "t",
    )
    retried = error_of(
        ev.RetryScheduled(call_id="c1", attempt=2, reason="TOOL_ERROR_CODE_TRANSIENT: busy"),
        seq=6,
        time_ms=12,
    )
    assert retried is not None and (retried.event_type, retried.call_id, retried.message) == (
        "retry.scheduled",
        "c1",
        "TOOL_ERROR_CODE_TRANSIENT: busy",
    )
    model = error_of(ev.RetryScheduled(step=1, attempt=2, reason="model timeout: slow"), seq=7, time_ms=13)
    assert model is not None and (model.call_id, model.step, model.message) == ("", 1, "model timeout: slow")
    unknown = error_of(
        ev.ToolOutcomeUnknown(step=2, call_id="c1", tool="t", reason="transport lost"), seq=8, time_ms=14
    )
    assert unknown is not None and (unknown.event_type, unknown.message) == (
        "tool.outcome.unknown",
        "transport lost",
    )
    for quiet in (ev.RunStarted(), ev.StepStarted(step=1), ev.ToolCompleted(step=1, call_id="c1")):
        assert error_of(quiet, seq=1, time_ms=1) is None
