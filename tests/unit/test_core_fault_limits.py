"""The pure rules of a fault limit with a write in doubt, of an end made from the row, and of
environmental faults (retried uncounted within a bound)."""

from __future__ import annotations

import math

import pytest

from agentrt.server.core import (
    EnvironmentalStreak,
    FaultDecision,
    ModelCompleted,
    Phase,
    RetryScheduled,
    RunEnded,
    RunFailed,
    RunStarted,
    RunState,
    StepKind,
    StepStarted,
    ToolCallRequest,
    ToolCompleted,
    ToolError,
    ToolErrorCode,
    ToolFailed,
    ToolStarted,
    WaitPolicy,
    decide_environmental,
    decide_fault,
    ended_from_row,
    environmental_streak,
    fault_park_ms,
    replay,
    rfc3339,
    unknown_after_faults,
    write_in_doubt,
)
from agentrt.server.core import events as ev

WRITES = frozenset({"refund.issue"})
NOW_MS = 1_800_000_000_000


def _decide(previous: int, *, unknown: bool = False, doubt: bool = False) -> FaultDecision:
    return decide_fault(
        previous_faults=previous,
        max_faults=3,
        error_class="InjectedFault",
        environmental=False,
        unknown_outcome=unknown,
        write_in_doubt=doubt,
        base_s=0.2,
        cap_s=5.0,
    )


def _is_write(tool: str) -> bool:
    return tool in WRITES


def _run(*tail: ev.Event, calls: tuple[tuple[str, str], ...] = ()) -> RunState:
    """A run whose first model step asked for ``calls`` (call id, tool), then ``tail``."""
    head: list[ev.Event] = [
        RunStarted(agent_name="a", input="hi", deadline=rfc3339(NOW_MS + 60_000)),
        StepStarted(step=1, kind=StepKind.MODEL),
    ]
    if calls:
        requests = tuple(ToolCallRequest(call_id=c, tool=t, arguments_json="{}") for c, t in calls)
        head.append(ModelCompleted(step=1, tool_calls=requests))
    return replay("r1", [*head, *tail])


def _started(call_id: str, tool: str, attempt: int = 1) -> ToolStarted:
    return ToolStarted(step=2, call_id=call_id, tool=tool, idempotency_key=f"k-{call_id}", attempt=attempt)


# -- the fault limit --------------------------------------------------------------------------------


def test_the_limit_with_a_write_in_doubt_parks_unknown_and_never_ends() -> None:
    below = _decide(1, doubt=True)
    assert not below.end and not below.park and not below.unknown  # below the limit: retried as usual
    at = _decide(2, doubt=True)
    assert at.fault_count == 3
    assert at.unknown and at.park and not at.end
    assert _decide(7, doubt=True).unknown  # and past it


def test_the_limit_without_a_write_in_doubt_still_ends_the_run() -> None:
    at = _decide(2)
    assert at.end and not at.park and not at.unknown
    assert at.reason == "internal_error:InjectedFault"


def test_a_run_already_unknown_parks_without_a_second_unknown_outcome() -> None:
    decision = _decide(2, unknown=True, doubt=True)
    assert decision.park and not decision.unknown and not decision.end


def test_a_sent_write_without_result_is_in_doubt() -> None:
    state = _run(_started("c1", "refund.issue"), calls=(("c1", "refund.issue"),))
    found = write_in_doubt(state, is_write=_is_write)
    assert found is not None and found.call_id == "c1"


def test_a_read_in_flight_is_not_in_doubt() -> None:
    state = _run(_started("c1", "orders.lookup"), calls=(("c1", "orders.lookup"),))
    assert write_in_doubt(state, is_write=_is_write) is None


def test_a_write_with_its_result_or_waiting_for_its_retry_is_not_in_doubt() -> None:
    calls = (("c1", "refund.issue"), ("c2", "refund.issue"))
    done = ToolCompleted(step=2, call_id="c1", tool="refund.issue", result_json="{}")
    answered = _run(_started("c1", "refund.issue"), done, calls=calls[:1])
    assert write_in_doubt(answered, is_write=_is_write) is None
    did_not_complete = ToolError(ToolErrorCode.TRANSIENT, "did not complete")
    transient = ToolFailed(step=2, call_id="c1", tool="refund.issue", error=did_not_complete)
    retry = RetryScheduled(call_id="c1", attempt=2, delay="0.200s", due_time=rfc3339(NOW_MS))
    waiting = _run(_started("c1", "refund.issue"), transient, retry, calls=calls[:1])
    assert waiting.phase is Phase.RETRY_WAIT
    assert write_in_doubt(waiting, is_write=_is_write) is None
    # The second call was never started: not sent, so not in doubt either.
    assert write_in_doubt(_run(_started("c1", "refund.issue"), done, calls=calls), is_write=_is_write) is None


def test_the_unknown_outcome_moves_the_run_to_unknown_outcome_with_its_age() -> None:
    state = _run(_started("c1", "refund.issue"), calls=(("c1", "refund.issue"),))
    call = write_in_doubt(state, is_write=_is_write)
    assert call is not None
    unknown = unknown_after_faults(call, now_ms=NOW_MS, fault_count=3)
    assert (unknown.call_id, unknown.idempotency_key, unknown.unknown_ms) == ("c1", "k-c1", NOW_MS)
    state.apply(unknown)
    assert state.phase is Phase.UNKNOWN_OUTCOME and state.unknown_call() is call


def test_the_park_waits_for_the_first_ledger_query_or_the_escalation_if_sooner() -> None:
    state = _run(_started("c1", "refund.issue"), calls=(("c1", "refund.issue"),))
    call = write_in_doubt(state, is_write=_is_write)
    assert call is not None
    state.apply(unknown_after_faults(call, now_ms=NOW_MS, fault_count=3))
    policy = WaitPolicy(reconcile_base_ms=2_000, unknown_outcome_after_ms=3_600_000)
    wake = fault_park_ms(state, now_ms=NOW_MS, deadline_ms=NOW_MS + 60_000, policy=policy, rand=0.0)
    assert wake == NOW_MS + 2_000
    # A deadline sooner than the first query: the run wakes to escalate.
    soon = fault_park_ms(state, now_ms=NOW_MS, deadline_ms=NOW_MS + 500, policy=policy, rand=0.0)
    assert soon == NOW_MS + 500


# -- an end made from the row -----------------------------------------------------------------------


def test_an_end_from_the_row_lists_what_was_done_not_done_and_unknown() -> None:
    calls = (("c1", "orders.lookup"), ("c2", "orders.lookup"), ("c3", "orders.lookup"))
    failed = ToolFailed(
        step=2, call_id="c2", tool="orders.lookup", error=ToolError(ToolErrorCode.PERMANENT, "no such order")
    )
    state = _run(
        _started("c1", "orders.lookup"),
        ToolCompleted(step=2, call_id="c1", tool="orders.lookup", result_json="{}"),
        _started("c2", "orders.lookup"),
        failed,
        _started("c3", "orders.lookup"),
        calls=calls,
    )
    closing, ended = ended_from_row(state, "internal_error:KeyError", message="KeyError", retryable=False)
    assert isinstance(closing, RunFailed) and isinstance(ended, RunEnded)
    assert ended.phase is Phase.FAILED and ended.partial and not ended.retryable
    assert [c.call_id for c in ended.completed_calls] == ["c1"]
    assert [(c.call_id, c.error) for c in ended.not_completed_calls] == [("c2", ToolErrorCode.PERMANENT)]
    assert [(c.call_id, c.detail) for c in ended.unknown_calls] == [("c3", "no_outcome")]
    state.apply(closing)
    state.apply(ended)  # it folds: the pair is a legal end of this run
    assert state.ended and state.phase is Phase.FAILED


def test_an_end_from_the_row_never_closes_through_cleanups() -> None:
    registered = ev.CleanupRegistered(
        cleanup_id="cl1", kind=ev.CleanupKind.TOOL, target="sandbox.destroy", call_id="c1", step=2
    )
    state = _run(
        _started("c1", "orders.lookup"),
        ToolCompleted(step=2, call_id="c1", tool="orders.lookup", result_json="{}"),
        registered,
        calls=(("c1", "orders.lookup"),),
    )
    assert state.pending_cleanups()  # an ordinary end would go through run.closing
    types = [type(e) for e in ended_from_row(state, "internal_error:X", message="X", retryable=True)]
    assert types == [RunFailed, RunEnded]


# -- environmental faults ---------------------------------------------------------------------------


def test_an_environmental_streak_grows_until_the_run_commits() -> None:
    first = environmental_streak(None, now_s=100.0, revision=None)  # the run never opened
    assert (first.began_s, first.faults) == (100.0, 1)
    second = environmental_streak(first, now_s=101.0, revision=7)
    assert (second.began_s, second.faults, second.revision) == (100.0, 2, 7)
    same = environmental_streak(second, now_s=102.0, revision=7)  # opened, committed nothing
    assert (same.began_s, same.faults) == (100.0, 3)
    moved = environmental_streak(same, now_s=103.0, revision=9)  # it committed since: a new streak
    assert (moved.began_s, moved.faults, moved.revision) == (103.0, 1, 9)


def test_environmental_faults_are_retried_with_a_growing_jittered_delay_within_the_bound() -> None:
    delays = []
    for faults in range(1, 8):
        streak = EnvironmentalStreak(began_s=0.0, faults=faults, revision=None)
        lowest = decide_environmental(streak, now_s=1.0, bound_s=300.0, base_s=0.2, cap_s=5.0, rand=0.0)
        highest = decide_environmental(streak, now_s=1.0, bound_s=300.0, base_s=0.2, cap_s=5.0, rand=0.999)
        assert lowest.retry and highest.retry
        assert 0 < lowest.delay_s < highest.delay_s <= 5.0  # never at once, never past the cap
        delays.append(lowest.delay_s)
    assert delays == sorted(delays) and delays[-1] == 2.5


def test_past_the_bound_an_environmental_fault_counts() -> None:
    streak = EnvironmentalStreak(began_s=0.0, faults=40, revision=3)
    assert not decide_environmental(streak, now_s=300.0, bound_s=300.0, base_s=0.2, cap_s=5.0, rand=0.5).retry
    near = decide_environmental(streak, now_s=299.5, bound_s=300.0, base_s=0.2, cap_s=5.0, rand=0.5)
    assert near.retry and near.delay_s == pytest.approx(0.5)  # the last retry ends at the bound
    assert math.isfinite(near.delay_s)
