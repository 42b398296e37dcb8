"""The decider driven by a simulated model and tools: paths, budgets, deadlines, replay."""

from __future__ import annotations

import json
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from agentrt.server.core import (
    Append,
    Budgets,
    CallModel,
    Clock,
    Event,
    Finalize,
    Idle,
    InvokeTool,
    InvokeTools,
    LoopPolicy,
    Phase,
    Policy,
    RunState,
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

    add(Event(ev.RUN_STARTED, {"input": "hi", "agent_name": "a"}))
    for _ in range(500):
        if (
            cancel_after_events is not None
            and len(log) >= cancel_after_events
            and not state.phase.terminal
            and state.phase is not Phase.CANCEL_REQUESTED
        ):
            add(Event(ev.CANCEL_REQUESTED, {"reason": "user"}))
        decision = decide(state, budgets, Clock(now_s=now_s, deadline_s=deadline_s), policy)
        if isinstance(decision, Append):
            for event in decision.events:
                add(event)
        elif isinstance(decision, CallModel):
            n = script[decision.step // 2] if decision.step // 2 < len(script) else 0
            before = state.usage.to_json()
            after = dict(before, model_steps=state.usage.model_steps + 1)
            calls = [
                {"call_id": f"c{decision.step}_{i}", "tool": tool, "arguments_json": args(decision.step, i)}
                for i in range(n)
            ]
            add(
                Event(
                    ev.MODEL_COMPLETED,
                    {
                        "step": decision.step,
                        "text": "answer",
                        "tool_calls": calls,
                        "usage_before": before,
                        "usage_after": after,
                    },
                )
            )
        elif isinstance(decision, InvokeTool):
            add(
                Event(
                    ev.TOOL_COMPLETED,
                    {
                        "step": decision.call.step,
                        "call_id": decision.call.call_id,
                        "tool": "t",
                        "result_json": json.dumps(
                            {"ok": decision.call.call_id} if fresh_results else {"ok": 1}
                        ),
                    },
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
    return [e.type for e in log]


def test_five_tool_calls_take_eleven_steps_and_complete() -> None:
    log = simulate([1, 1, 1, 1, 1], Budgets())
    steps = [e for e in log if e.type in (ev.STEP_STARTED, ev.TOOL_STARTED)]
    assert len(steps) == 11
    assert types(log)[-2:] == [ev.RUN_COMPLETED, ev.RUN_ENDED]
    assert log[-1].data["phase"] == "RUN_PHASE_COMPLETED" and log[-1].data["partial"] is False
    keys = [e.data["idempotency_key"] for e in log if e.type == ev.TOOL_STARTED]
    assert len(set(keys)) == 5
    assert keys[0] == idempotency_key("run-1", 2, 0)


def test_model_step_budget_ends_the_run_failed_with_reason() -> None:
    log = simulate([1] * 10, Budgets(max_model_steps=3))
    assert log[-1].data["reason"] == "budget_exhausted:model_steps"
    assert log[-1].data["phase"] == "RUN_PHASE_FAILED" and log[-1].data["partial"] is True
    assert sum(1 for e in log if e.type == ev.MODEL_COMPLETED) == 3


def test_tool_call_budget_and_per_tool_budget() -> None:
    log = simulate([2, 2, 2], Budgets(max_tool_calls=3))
    assert log[-1].data["reason"] == "budget_exhausted:tool_calls"
    assert sum(1 for e in log if e.type == ev.TOOL_STARTED) == 3
    log = simulate([1, 1, 1], Budgets(max_calls_per_tool={"t": 2}))
    assert log[-1].data["reason"] == "budget_exhausted:calls_per_tool:t"


def test_deadline_passed_ends_expired_before_any_model_call() -> None:
    log = simulate([1], Budgets(), now_s=10.0, deadline_s=5.0)
    assert types(log) == [ev.RUN_STARTED, ev.RUN_ENDED]
    assert log[-1].data["phase"] == "RUN_PHASE_EXPIRED" and log[-1].data["reason"] == "deadline_exceeded"


def test_no_new_work_starts_inside_the_deadline_reserve() -> None:
    state = RunState(run_id="r")
    state.apply(Event(ev.RUN_STARTED, {"input": "hi"}))
    inside = decide(state, Budgets(), Clock(now_s=9.5, deadline_s=10.0, reserve_s=1.0))
    assert isinstance(inside, Append) and inside.events[-1].data["phase"] == "RUN_PHASE_EXPIRED"
    before = decide(state, Budgets(), Clock(now_s=8.5, deadline_s=10.0, reserve_s=1.0))
    assert isinstance(before, Append) and before.events[0].type == ev.STEP_STARTED


def test_cancel_ends_cancelled_and_reports_partial_truthfully() -> None:
    log = simulate([1, 1, 1], Budgets(), cancel_after_events=6)
    assert types(log)[-3:] == [ev.CANCEL_REQUESTED, ev.RUN_CANCELLED, ev.RUN_ENDED]
    assert log[-1].data["phase"] == "RUN_PHASE_CANCELLED"
    assert log[-1].data["partial"] is True
    log = simulate([1], Budgets(), cancel_after_events=1)
    assert log[-1].data["partial"] is False


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=8), st.integers(1, 12), st.integers(0, 15))
def test_every_run_ends_once_within_budgets_and_replays_to_the_same_state(
    script: list[int], max_steps: int, max_calls: int
) -> None:
    budgets = Budgets(max_model_steps=max_steps, max_tool_calls=max_calls)
    log = simulate(script, budgets)
    assert types(log).count(ev.RUN_ENDED) == 1 and log[-1].type == ev.RUN_ENDED
    assert sum(1 for e in log if e.type == ev.MODEL_COMPLETED) <= max_steps
    assert sum(1 for e in log if e.type == ev.TOOL_STARTED) <= max_calls
    # Every started call has its result before the next model call (R5.2).
    open_calls: set[str] = set()
    for event in log:
        if event.type == ev.TOOL_STARTED:
            open_calls.add(event.data["call_id"])
        elif event.type == ev.TOOL_COMPLETED:
            open_calls.discard(event.data["call_id"])
        elif event.type == ev.STEP_STARTED:
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
            assert nxt.type == ev.MODEL_COMPLETED and nxt.data["step"] == decision.step
        elif isinstance(decision, Finalize):
            assert nxt.type == ev.RUN_COMPLETED and nxt.data["output"] == decision.answer
        else:
            assert isinstance(decision, InvokeTool)
            assert nxt.type == ev.TOOL_COMPLETED and nxt.data["call_id"] == decision.call.call_id


def test_an_identical_call_loop_gets_one_diagnostic_step_then_ends_loop_detected() -> None:
    log = simulate([1] * 10, Budgets(), args=lambda step, i: json.dumps({"order_id": "A100"}))
    started = [e for e in log if e.type == ev.TOOL_STARTED]
    assert len(started) == 2  # the third identical call is not run
    skipped = [e for e in log if e.type == ev.TOOL_FAILED]
    assert len(skipped) == 1 and "loop detected" in skipped[0].data["error"]["message"]
    diagnostic = [e for e in log if e.type == ev.STEP_STARTED and e.data["kind"] == "diagnostic"]
    assert len(diagnostic) == 1 and diagnostic[0].data["reason"].startswith("identical_call")
    assert log[-1].data["phase"] == "RUN_PHASE_FAILED" and log[-1].data["reason"] == "loop_detected"
    failed = next(e for e in log if e.type == ev.RUN_FAILED)
    assert "identical_call: t" in failed.data["message"]


def test_no_new_fact_for_n_steps_is_a_loop_and_the_diagnostic_step_is_outside_the_budget() -> None:
    policy = Policy(loops=LoopPolicy(max_identical_calls=0, max_steps_without_new_fact=3))
    log = simulate([1] * 10, Budgets(max_model_steps=4), policy=policy, fresh_results=False)
    assert log[-1].data["reason"] == "loop_detected"
    assert "no_progress" in next(e for e in log if e.type == ev.RUN_FAILED).data["message"]
    # 4 budgeted model steps would be exhausted next; the diagnostic step came from the reserve.
    assert sum(1 for e in log if e.type == ev.MODEL_COMPLETED) == 5


def test_parallel_safe_calls_start_together_within_the_parallel_budget() -> None:
    policy = Policy(parallel_safe=frozenset({"t"}))
    state = RunState(run_id="r")
    state.apply(Event(ev.RUN_STARTED, {"input": "hi"}))
    state.apply(Event(ev.STEP_STARTED, {"step": 1, "kind": "model", "usage": {}}))
    calls = [{"call_id": f"c{i}", "tool": "t", "arguments_json": json.dumps({"i": i})} for i in range(3)]
    state.apply(
        Event(
            ev.MODEL_COMPLETED,
            {
                "step": 1,
                "text": "",
                "tool_calls": calls,
                "usage_before": {},
                "usage_after": {"model_steps": 1},
            },
        )
    )
    clock = Clock(now_s=0, deadline_s=100)
    started = decide(state, Budgets(max_parallel_tool_calls=2), clock, policy)
    assert isinstance(started, Append) and [e.data["call_id"] for e in started.events] == ["c0", "c1"]
    assert [e.data["usage_after"]["tool_calls"] for e in started.events] == [1, 2]
    for event in started.events:
        state.apply(event)
    batch = decide(state, Budgets(max_parallel_tool_calls=2), clock, policy)
    assert isinstance(batch, InvokeTools) and [c.call_id for c in batch.calls] == ["c0", "c1"]
    serial = decide(replay("r", []), Budgets(), clock)
    assert isinstance(serial, Append)
    unsafe = RunState(run_id="r")
    for event in (
        Event(ev.RUN_STARTED, {"input": "hi"}),
        Event(ev.STEP_STARTED, {"step": 1, "kind": "model", "usage": {}}),
        Event(
            ev.MODEL_COMPLETED,
            {
                "step": 1,
                "text": "",
                "tool_calls": calls,
                "usage_before": {},
                "usage_after": {"model_steps": 1},
            },
        ),
    ):
        unsafe.apply(event)
    one = decide(unsafe, Budgets(max_parallel_tool_calls=3), clock, Policy())
    assert isinstance(one, Append) and len(one.events) == 1  # writes (not parallel-safe) go one at a time


# -- the tool allow-list (R10.2, invariant §11.9) ------------------------------------------------------


def _after_model_step(state: RunState, step: int, calls: list[tuple[str, str]]) -> None:
    """Fold a model step whose answer calls ``(call_id, tool)`` pairs into ``state``."""
    if step == 1:
        state.apply(Event(ev.RUN_STARTED, {"input": "hi"}))
    state.apply(Event(ev.STEP_STARTED, {"step": step, "kind": "model", "usage": state.usage.to_json()}))
    wanted = [{"call_id": c, "tool": t, "arguments_json": "{}"} for c, t in calls]
    after = dict(state.usage.to_json(), model_steps=state.usage.model_steps + 1)
    data = {"step": step, "text": "", "tool_calls": wanted, "usage_before": {}, "usage_after": after}
    state.apply(Event(ev.MODEL_COMPLETED, data))


CLOCK = Clock(now_s=0, deadline_s=100)


def test_a_call_to_a_tool_the_agent_lacks_fails_not_allowed_without_starting() -> None:
    policy = Policy(agent_name="support", allowed_tools=frozenset({"noop.echo"}))
    state = RunState(run_id="r")
    _after_model_step(state, 1, [("c1", "refund.issue")])
    decision = decide(state, Budgets(), CLOCK, policy)
    assert isinstance(decision, Append) and [e.type for e in decision.events] == [ev.TOOL_FAILED]
    failed = decision.events[0].data
    assert failed["call_id"] == "c1" and failed["tool"] == "refund.issue"
    assert failed["error"]["code"] == "TOOL_ERROR_CODE_NOT_ALLOWED"
    assert "refund.issue" in failed["error"]["message"] and "support" in failed["error"]["message"]
    for event in decision.events:
        state.apply(event)  # the fold accepts the failure of a call that never started
    assert state.phase is Phase.TOOL_STEP and not state.any_tool_started
    assert state.usage.tool_calls == 0 and state.usage.calls_per_tool == {}
    assert state.history[-1].failed and "NOT_ALLOWED" in state.history[-1].content  # the model hears why
    back = decide(state, Budgets(), CLOCK, policy)
    assert isinstance(back, Append) and back.events[0].type == ev.STEP_STARTED  # back to the model


def test_a_mixed_batch_refuses_only_the_calls_outside_the_list_and_runs_the_rest() -> None:
    policy = Policy(allowed_tools=frozenset({"noop.echo"}), parallel_safe=frozenset({"noop.echo"}))
    state = RunState(run_id="r")
    _after_model_step(state, 1, [("c0", "noop.echo"), ("c1", "refund.issue"), ("c2", "noop.echo")])
    budgets = Budgets(max_parallel_tool_calls=3)
    refused = decide(state, budgets, CLOCK, policy)
    assert isinstance(refused, Append)
    assert [(e.type, e.data["call_id"]) for e in refused.events] == [(ev.TOOL_FAILED, "c1")]
    for event in refused.events:
        state.apply(event)
    started = decide(state, budgets, CLOCK, policy)
    assert isinstance(started, Append)
    assert [(e.type, e.data["call_id"]) for e in started.events] == [
        (ev.TOOL_STARTED, "c0"),
        (ev.TOOL_STARTED, "c2"),
    ]
    assert started.events[-1].data["usage_after"]["tool_calls"] == 2  # the refused call is not counted
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
    assert isinstance(handoff, Append) and handoff.events[0].type == ev.HANDOFF
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
    assert [(e.type, e.data["tool"]) for e in refused.events] == [(ev.TOOL_FAILED, "orders.lookup")]
    assert "billing" in refused.events[0].data["error"]["message"]
    for event in refused.events:
        state.apply(event)
    started = decide(state, Budgets(), CLOCK, second)
    assert isinstance(started, Append) and started.events[0].type == ev.TOOL_STARTED
    assert started.events[0].data["tool"] == "refund.issue"


def test_a_model_that_keeps_calling_a_tool_it_lacks_ends_loop_detected() -> None:
    policy = Policy(allowed_tools=frozenset({"noop.echo"}), loops=LoopPolicy(max_repeated_errors=3))
    log = simulate([1] * 10, Budgets(), policy=policy, tool="refund.issue")
    assert not [e for e in log if e.type == ev.TOOL_STARTED]  # never started, never sent
    refused = [e for e in log if e.type == ev.TOOL_FAILED]
    assert len(refused) == 3
    assert {e.data["error"]["code"] for e in refused} == {"TOOL_ERROR_CODE_NOT_ALLOWED"}
    diagnostic = [e for e in log if e.type == ev.STEP_STARTED and e.data["kind"] == "diagnostic"]
    assert len(diagnostic) == 1 and "refund.issue: NOT_ALLOWED 3 times" in diagnostic[0].data["reason"]
    assert log[-1].data["phase"] == "RUN_PHASE_FAILED" and log[-1].data["reason"] == "loop_detected"
    assert log[-1].data["partial"] is False and log[-1].data["usage"]["tool_calls"] == 0
    state = replay("run-1", log)
    assert state.phase is Phase.FAILED and state.seq == len(log)
