"""The decider driven by a simulated model and tools: paths, budgets, deadlines, replay."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.server.core import (
    Append,
    Budgets,
    CallModel,
    CancelRequested,
    Clock,
    Event,
    Finalize,
    Handoff,
    Idle,
    InvokeTool,
    InvokeTools,
    LoopPolicy,
    ModelCompleted,
    Phase,
    Policy,
    RunCompleted,
    RunEnded,
    RunFailed,
    RunStarted,
    RunState,
    StepKind,
    StepStarted,
    ToolCallRequest,
    ToolCompleted,
    ToolErrorCode,
    ToolFailed,
    ToolStarted,
    Usage,
    decide,
    end_events,
    idempotency_key,
    replay,
)
from agentrt.server.core import events as ev


def simulate(
    script: list[int],
    budgets: Budgets,
    *,
    now_s: float = 0.0,
    deadline_s: float = 100.0,
    cancel_after_events: int | None = None,
    policy: Policy | None = None,
    tool: str = "t",
    args: Callable[[int, int], str] = lambda step, i: json.dumps({"n": f"{step}.{i}"}),
    fresh_results: bool = True,
) -> list[Event]:
    """Run the decider to the end.

    ``script[i]`` is how many tools model step i+1 calls; past the script, a final answer.
    """
    state = RunState(run_id="run-1")
    log: list[Event] = []

    def add(event: Event) -> None:
        state.apply(event)
        state.seq += 1
        log.append(event)

    add(RunStarted(input="hi", agent_name="a"))
    for _ in range(500):
        if (
            cancel_after_events is not None
            and len(log) >= cancel_after_events
            and not state.phase.terminal
            and state.phase is not Phase.CANCEL_REQUESTED
        ):
            add(CancelRequested(reason="user"))
        decision = decide(state, budgets, Clock(now_s=now_s, deadline_s=deadline_s), policy)
        if isinstance(decision, Append):
            for event in decision.events:
                add(event)
        elif isinstance(decision, CallModel):
            n = script[decision.step // 2] if decision.step // 2 < len(script) else 0
            after = state.usage.totals()
            after.model_steps += 1
            calls = tuple(
                ToolCallRequest(f"c{decision.step}_{i}", tool, args(decision.step, i)) for i in range(n)
            )
            add(
                ModelCompleted(
                    step=decision.step,
                    text="answer",
                    tool_calls=calls,
                    usage_before=state.usage.totals(),
                    usage_after=after,
                )
            )
        elif isinstance(decision, InvokeTool):
            add(
                ToolCompleted(
                    step=decision.call.step,
                    call_id=decision.call.call_id,
                    tool="t",
                    result_json=json.dumps({"ok": decision.call.call_id} if fresh_results else {"ok": 1}),
                )
            )
        elif isinstance(decision, Finalize):
            # The shell's checks (schema, guardrails) accept every answer here.
            for event in end_events(state, Phase.COMPLETED, "final_answer", output=decision.answer):
                add(event)
        else:
            assert isinstance(decision, Idle)
            return log
    raise AssertionError("decider did not finish")


def types(log: list[Event]) -> list[str]:
    return [e.type_name for e in log]


def ended(log: list[Event]) -> RunEnded:
    assert isinstance(log[-1], RunEnded)
    return log[-1]


def of(kind: type[ev.Event], log: list[Event] | tuple[Event, ...]) -> list[Any]:
    """The events of one class, in order."""
    return [e for e in log if isinstance(e, kind)]


def test_five_tool_calls_take_eleven_steps_and_complete() -> None:
    log = simulate([1, 1, 1, 1, 1], Budgets())
    steps = [e for e in log if isinstance(e, StepStarted | ToolStarted)]
    assert len(steps) == 11
    assert types(log)[-2:] == [ev.RUN_COMPLETED, ev.RUN_ENDED]
    assert ended(log).phase is Phase.COMPLETED and ended(log).partial is False
    keys = [e.idempotency_key for e in of(ToolStarted, log)]
    assert len(set(keys)) == 5
    assert keys[0] == idempotency_key("run-1", 2, 0)


def test_model_step_budget_ends_the_run_failed_with_reason() -> None:
    log = simulate([1] * 10, Budgets(max_model_steps=3))
    assert ended(log).reason == "budget_exhausted:model_steps"
    assert ended(log).phase is Phase.FAILED and ended(log).partial is True
    assert len(of(ModelCompleted, log)) == 3


def test_tool_call_budget_and_per_tool_budget() -> None:
    log = simulate([2, 2, 2], Budgets(max_tool_calls=3))
    assert ended(log).reason == "budget_exhausted:tool_calls"
    assert len(of(ToolStarted, log)) == 3
    log = simulate([1, 1, 1], Budgets(max_calls_per_tool={"t": 2}))
    assert ended(log).reason == "budget_exhausted:calls_per_tool:t"


def test_deadline_passed_ends_expired_before_any_model_call() -> None:
    log = simulate([1], Budgets(), now_s=10.0, deadline_s=5.0)
    assert types(log) == [ev.RUN_STARTED, ev.RUN_ENDED]
    assert ended(log).phase is Phase.EXPIRED and ended(log).reason == "deadline_exceeded"


def test_no_new_work_starts_inside_the_deadline_reserve() -> None:
    state = RunState(run_id="r")
    state.apply(RunStarted(input="hi"))
    inside = decide(state, Budgets(), Clock(now_s=9.5, deadline_s=10.0, reserve_s=1.0))
    assert isinstance(inside, Append) and ended(list(inside.events)).phase is Phase.EXPIRED
    before = decide(state, Budgets(), Clock(now_s=8.5, deadline_s=10.0, reserve_s=1.0))
    assert isinstance(before, Append) and isinstance(before.events[0], StepStarted)


def test_cancel_ends_cancelled_and_reports_partial_truthfully() -> None:
    log = simulate([1, 1, 1], Budgets(), cancel_after_events=6)
    assert types(log)[-3:] == [ev.CANCEL_REQUESTED, ev.RUN_CANCELLED, ev.RUN_ENDED]
    assert ended(log).phase is Phase.CANCELLED
    assert ended(log).partial is True
    log = simulate([1], Budgets(), cancel_after_events=1)
    assert ended(log).partial is False


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=8), st.integers(1, 12), st.integers(0, 15))
def test_every_run_ends_once_within_budgets_and_replays_to_the_same_state(
    script: list[int], max_steps: int, max_calls: int
) -> None:
    budgets = Budgets(max_model_steps=max_steps, max_tool_calls=max_calls)
    log = simulate(script, budgets)
    assert types(log).count(ev.RUN_ENDED) == 1 and isinstance(log[-1], RunEnded)
    assert len(of(ModelCompleted, log)) <= max_steps
    assert len(of(ToolStarted, log)) <= max_calls
    # Every started call has its result before the next model call (R5.2).
    open_calls: set[str] = set()
    for event in log:
        match event:
            case ToolStarted(call_id=call_id):
                open_calls.add(call_id)
            case ToolCompleted(call_id=call_id):
                open_calls.discard(call_id)
            case StepStarted():
                assert not open_calls
    state = replay("run-1", log)
    assert state.phase.terminal and state.seq == len(log)
    assert isinstance(decide(state, budgets, Clock(now_s=0, deadline_s=100)), Idle)


def test_a_replayed_partial_log_resumes_with_the_same_next_decision() -> None:
    full = simulate([1, 1], Budgets())
    for cut in range(1, len(full)):
        state = replay("run-1", full[:cut])
        decision = decide(state, Budgets(), Clock(now_s=0, deadline_s=100))
        nxt = full[cut]
        if isinstance(decision, Append):
            assert decision.events[0] == nxt
        elif isinstance(decision, CallModel):
            assert isinstance(nxt, ModelCompleted) and nxt.step == decision.step
        elif isinstance(decision, Finalize):
            assert isinstance(nxt, RunCompleted) and nxt.output == decision.answer
        else:
            assert isinstance(decision, InvokeTool)
            assert isinstance(nxt, ToolCompleted) and nxt.call_id == decision.call.call_id


def test_an_identical_call_loop_gets_one_diagnostic_step_then_ends_loop_detected() -> None:
    log = simulate([1] * 10, Budgets(), args=lambda step, i: json.dumps({"order_id": "A100"}))
    started = of(ToolStarted, log)
    assert len(started) == 2  # the third identical call is not run
    skipped = of(ToolFailed, log)
    assert len(skipped) == 1 and "loop detected" in skipped[0].error.message
    assert skipped[0].error.code is ToolErrorCode.CANCELLED
    diagnostic = [e for e in of(StepStarted, log) if e.kind is StepKind.DIAGNOSTIC]
    assert len(diagnostic) == 1 and diagnostic[0].reason.startswith("identical_call")
    assert ended(log).phase is Phase.FAILED and ended(log).reason == "loop_detected"
    failed = of(RunFailed, log)[0]
    assert "identical_call: t" in failed.message


def test_no_new_fact_for_n_steps_is_a_loop_and_the_diagnostic_step_is_outside_the_budget() -> None:
    policy = Policy(loops=LoopPolicy(max_identical_calls=0, max_steps_without_new_fact=3))
    log = simulate([1] * 10, Budgets(max_model_steps=4), policy=policy, fresh_results=False)
    assert ended(log).reason == "loop_detected"
    assert "no_progress" in of(RunFailed, log)[0].message
    # 4 budgeted model steps would be exhausted next; the diagnostic step came from the reserve.
    assert len(of(ModelCompleted, log)) == 5


def test_parallel_safe_calls_start_together_within_the_parallel_budget() -> None:
    policy = Policy(parallel_safe=frozenset({"t"}))
    state = RunState(run_id="r")
    calls = tuple(ToolCallRequest(f"c{i}", "t", json.dumps({"i": i})) for i in range(3))
    model_step: tuple[Event, ...] = (
        RunStarted(input="hi"),
        StepStarted(step=1, kind=StepKind.MODEL),
        ModelCompleted(step=1, tool_calls=calls, usage_after=Usage(model_steps=1)),
    )
    for event in model_step:
        state.apply(event)
    clock = Clock(now_s=0, deadline_s=100)
    started = decide(state, Budgets(max_parallel_tool_calls=2), clock, policy)
    assert isinstance(started, Append)
    assert [e.call_id for e in of(ToolStarted, started.events)] == ["c0", "c1"]
    assert [e.usage_after.tool_calls for e in of(ToolStarted, started.events)] == [1, 2]
    for event in started.events:
        state.apply(event)
    batch = decide(state, Budgets(max_parallel_tool_calls=2), clock, policy)
    assert isinstance(batch, InvokeTools) and [c.call_id for c in batch.calls] == ["c0", "c1"]
    serial = decide(replay("r", []), Budgets(), clock)
    assert isinstance(serial, Append)
    unsafe = RunState(run_id="r")
    for event in model_step:
        unsafe.apply(event)
    one = decide(unsafe, Budgets(max_parallel_tool_calls=3), clock, Policy())
    assert isinstance(one, Append) and len(one.events) == 1  # writes (not parallel-safe) go one at a time


# -- the tool allow-list (R10.2, invariant §11.9) ------------------------------------------------------


def _after_model_step(state: RunState, step: int, calls: list[tuple[str, str]]) -> None:
    """Fold a model step whose answer calls ``(call_id, tool)`` pairs into ``state``."""
    if step == 1:
        state.apply(RunStarted(input="hi"))
    state.apply(StepStarted(step=step, kind=StepKind.MODEL, usage=state.usage.totals()))
    wanted = tuple(ToolCallRequest(c, t, "{}") for c, t in calls)
    after = state.usage.totals()
    after.model_steps += 1
    state.apply(ModelCompleted(step=step, tool_calls=wanted, usage_after=after))


CLOCK = Clock(now_s=0, deadline_s=100)


def test_a_call_to_a_tool_the_agent_lacks_fails_not_allowed_without_starting() -> None:
    policy = Policy(agent_name="support", allowed_tools=frozenset({"noop.echo"}))
    state = RunState(run_id="r")
    _after_model_step(state, 1, [("c1", "refund.issue")])
    decision = decide(state, Budgets(), CLOCK, policy)
    assert isinstance(decision, Append) and types(list(decision.events)) == [ev.TOOL_FAILED]
    failed = of(ToolFailed, decision.events)[0]
    assert failed.call_id == "c1" and failed.tool == "refund.issue"
    assert failed.error.code is ToolErrorCode.NOT_ALLOWED
    assert "refund.issue" in failed.error.message and "support" in failed.error.message
    for event in decision.events:
        state.apply(event)  # the fold accepts the failure of a call that never started
    assert state.phase is Phase.TOOL_STEP and not state.any_tool_started
    assert state.usage.tool_calls == 0 and state.usage.calls_per_tool == {}
    assert state.history[-1].failed and "NOT_ALLOWED" in state.history[-1].content  # the model hears why
    back = decide(state, Budgets(), CLOCK, policy)
    assert isinstance(back, Append) and isinstance(back.events[0], StepStarted)  # back to the model


def test_a_mixed_batch_refuses_only_the_calls_outside_the_list_and_runs_the_rest() -> None:
    policy = Policy(allowed_tools=frozenset({"noop.echo"}), parallel_safe=frozenset({"noop.echo"}))
    state = RunState(run_id="r")
    _after_model_step(state, 1, [("c0", "noop.echo"), ("c1", "refund.issue"), ("c2", "noop.echo")])
    budgets = Budgets(max_parallel_tool_calls=3)
    refused = decide(state, budgets, CLOCK, policy)
    assert isinstance(refused, Append)
    assert [(type(e), e.call_id) for e in of(ToolFailed, refused.events)] == [(ToolFailed, "c1")]
    assert len(refused.events) == 1
    for event in refused.events:
        state.apply(event)
    started = decide(state, budgets, CLOCK, policy)
    assert isinstance(started, Append)
    assert [(type(e), e.call_id) for e in of(ToolStarted, started.events)] == [
        (ToolStarted, "c0"),
        (ToolStarted, "c2"),
    ]
    assert len(started.events) == 2
    assert of(ToolStarted, started.events)[-1].usage_after.tool_calls == 2  # the refused one is not counted
    for event in started.events:
        state.apply(event)
    batch = decide(state, budgets, CLOCK, policy)
    assert isinstance(batch, InvokeTools) and [c.call_id for c in batch.calls] == ["c0", "c2"]


def test_after_a_handoff_the_new_agents_list_decides() -> None:
    first = Policy(
        agent_name="triage",
        allowed_tools=frozenset({"orders.lookup", "handoff.billing"}),
        handoffs={"handoff.billing": "billing"},
    )
    state = RunState(run_id="r")
    _after_model_step(state, 1, [("c1", "handoff.billing")])
    handoff = decide(state, Budgets(), CLOCK, first)
    assert isinstance(handoff, Append) and isinstance(handoff.events[0], Handoff)
    for event in handoff.events:
        state.apply(event)
    assert state.active_agent == "billing"
    # The shell recomputes the policy for the agent now in control (RunDriver._policy).
    second = Policy(agent_name="billing", allowed_tools=frozenset({"refund.issue"}))
    step = decide(state, Budgets(), CLOCK, second)
    assert isinstance(step, Append)
    for event in step.events:
        state.apply(event)
    _after_model_step(state, state.step + 1, [("c2", "orders.lookup"), ("c3", "refund.issue")])
    refused = decide(state, Budgets(), CLOCK, second)
    assert isinstance(refused, Append)
    assert [e.tool for e in of(ToolFailed, refused.events)] == ["orders.lookup"]
    assert len(refused.events) == 1
    assert "billing" in of(ToolFailed, refused.events)[0].error.message
    for event in refused.events:
        state.apply(event)
    started = decide(state, Budgets(), CLOCK, second)
    assert isinstance(started, Append) and isinstance(started.events[0], ToolStarted)
    assert started.events[0].tool == "refund.issue"


def test_a_model_that_keeps_calling_a_tool_it_lacks_ends_loop_detected() -> None:
    policy = Policy(allowed_tools=frozenset({"noop.echo"}), loops=LoopPolicy(max_repeated_errors=3))
    log = simulate([1] * 10, Budgets(), policy=policy, tool="refund.issue")
    assert not of(ToolStarted, log)  # never started, never sent
    refused = of(ToolFailed, log)
    assert len(refused) == 3
    assert {e.error.code for e in refused} == {ToolErrorCode.NOT_ALLOWED}
    diagnostic = [e for e in of(StepStarted, log) if e.kind is StepKind.DIAGNOSTIC]
    assert len(diagnostic) == 1 and "refund.issue: NOT_ALLOWED 3 times" in diagnostic[0].reason
    assert ended(log).phase is Phase.FAILED and ended(log).reason == "loop_detected"
    assert ended(log).partial is False and ended(log).usage.tool_calls == 0
    state = replay("run-1", log)
    assert state.phase is Phase.FAILED and state.seq == len(log)
