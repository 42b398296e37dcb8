"""Timeout layers (S002 §5): call, step (a call with its retries) and run; which one fires.

The deadline math is pure (``core/_deadline.py``); the engine tests drive the real step loop on
``agentrt.testing.engine`` fakes with a manual clock. The connect layer needs a real channel:
tests/integration/test_connect_timeout.py.
"""

from __future__ import annotations

import math

import pytest

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.config import AgentConfig, BudgetsConfig, Settings, TimeoutsConfig
from agentrt.server.core import (
    TimeoutLayer,
    call_budget,
    connect_timeout_s,
    retry_fits,
    step_deadline_s,
)
from agentrt.server.models import ModelTransientError
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld, FakeTools, ManualClock

ARGS = '{"order_id": "A100"}'
DEADLINE_MESSAGE = "deadline exceeded before the tool answered"  # the router's DEADLINE_EXCEEDED


# -- the pure math ----------------------------------------------------------------------------------


def test_the_smallest_time_left_wins_and_names_its_layer() -> None:
    def budget(call: float, step: float, run: float) -> tuple[float, TimeoutLayer]:
        got = call_budget(
            now_s=100, call_timeout_s=call, step_deadline_s=step, run_deadline_s=run, reserve_s=1
        )
        return got.timeout_s, got.layer

    assert budget(30, math.inf, 1000) == (30, TimeoutLayer.CALL)
    assert budget(30, 110, 1000) == (10, TimeoutLayer.STEP)
    assert budget(30, 110, 106) == (5, TimeoutLayer.RUN)
    assert budget(30, 90, 1000) == (0, TimeoutLayer.STEP)  # the step is over: never negative
    assert budget(30, 130, 1000) == (30, TimeoutLayer.STEP)  # a tie goes to the outer layer


def test_a_step_limit_of_zero_is_no_step_limit() -> None:
    assert step_deadline_s(began_s=50, step_s=0) == math.inf
    assert step_deadline_s(began_s=50, step_s=20) == 70


def test_a_retry_must_fit_the_step_as_well_as_the_run() -> None:
    assert retry_fits(now_s=0, delay_s=1, expected_call_s=1, deadline_s=100, step_deadline_s=3)
    assert not retry_fits(now_s=0, delay_s=1, expected_call_s=2, deadline_s=100, step_deadline_s=3)
    assert not retry_fits(now_s=0, delay_s=1, expected_call_s=2, deadline_s=3)


def test_connect_never_waits_longer_than_the_call_may_take() -> None:
    assert connect_timeout_s(connect_s=5, call_timeout_s=30) == 5
    assert connect_timeout_s(connect_s=5, call_timeout_s=2) == 2
    assert connect_timeout_s(connect_s=5, call_timeout_s=-1) == 0


def test_timeouts_config_defaults_and_bounds() -> None:
    assert Settings().timeouts == TimeoutsConfig(connect_s=5.0, tool_step_s=0.0, model_step_s=0.0)
    with pytest.raises(ValueError):
        TimeoutsConfig(connect_s=0)
    with pytest.raises(ValueError):
        TimeoutsConfig(tool_step_s=-1)


# -- the engine -------------------------------------------------------------------------------------


class TimedTools(FakeTools):
    """Fake tools whose calls take ``takes_s`` on the manual clock (per attempt, the last repeats),
    cut at the call's timeout as the gRPC deadline cuts a real one; a cut write stays running in
    the ledger, as on a real host."""

    def __init__(self, clock: ManualClock, takes_s: list[float]):
        super().__init__()
        self.clock = clock
        self.takes_s = takes_s
        self.cut_writes_land = False  # a cut write's effect is in the ledger when it is asked
        self.timeouts: list[float] = []

    async def invoke(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        self.timeouts.append(timeout_s)
        takes_s = self.takes_s[min(len(self.timeouts), len(self.takes_s)) - 1]
        if takes_s > timeout_s:
            self.clock.advance(timeout_s)
            if self.specs[tool].side_effect != tool_pb2.SIDE_EFFECT_READ_ONLY:  # the host may still run it
                landed = ToolOutcome('{"landed": true}', None, host=self.host)
                self.ledger[metadata.idempotency_key] = landed if self.cut_writes_land else "running"
            return ToolOutcome.failure("TRANSIENT", DEADLINE_MESSAGE, timed_out=True)
        self.clock.advance(takes_s)
        return await super().invoke(tool, arguments_json, metadata=metadata, timeout_s=timeout_s)


async def answer(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
    return ToolOutcome('{"status": "shipped"}', None)


async def busy(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
    return ToolOutcome.failure("TRANSIENT", "busy")


def world_with(
    *, takes_s: tuple[float, ...] = (0.0,), run_s: float = 300.0, attempts: int = 1000, **timeouts: float
) -> tuple[EngineWorld, TimedTools]:
    settings = Settings(
        retry_base_s=1.0,
        retry_cap_s=1.0,
        tool_attempts=attempts,
        model_attempts=attempts,
        timeouts=TimeoutsConfig(**timeouts),
    )
    clock = ManualClock()
    tools = TimedTools(clock, list(takes_s))
    agent = AgentConfig(tools=["order.status"], budgets=BudgetsConfig(timeout_s=run_s))
    world = EngineWorld(agent=agent, settings=settings, clock=clock, tools=tools)
    world.models.answer(tool_calls=[("c1", "order.status", ARGS)])
    world.models.answer(text="done")
    return world, tools


def failure_message(world: EngineWorld, run_id: str) -> str:
    (failed,) = world.log.payloads(run_id, "tool.failed")
    return str(failed["error"]["message"])


async def test_a_slow_tool_whose_retry_cannot_fit_the_step_is_not_retried() -> None:
    world, tools = world_with(takes_s=(100,), tool_step_s=45)
    tools.add("order.status", answer, side_effect="read")
    run_id = world.create_run()

    await world.drive(run_id)

    assert tools.timeouts == [30.0]  # a second 30 s attempt after 0.5 s backoff would end at 60.5 s
    assert failure_message(world, run_id).startswith("step_timeout:")


async def test_a_tool_that_answers_transient_forever_is_stopped_by_the_step_layer() -> None:
    world, tools = world_with(tool_step_s=10)
    tools.add("order.status", busy, side_effect="read")
    run_id = world.create_run()
    began = world.clock()

    await world.drive(run_id)

    # Backoff 0.5 s (rand 0.5 of 1 s): attempts at 0, 0.5, ... 9.5 s; none would end after 10 s.
    assert failure_message(world, run_id).startswith("step_timeout: order.status")
    assert len(tools.calls) == 20
    assert world.clock() - began == pytest.approx(9.5)  # far before the run's 300 s deadline
    assert world.log.phase(run_id) == "COMPLETED"  # the model is told and goes on


@pytest.mark.parametrize("side_effect", ["read", "write"])
async def test_a_tool_error_that_says_timeout_is_retried_like_any_transient_error(side_effect: str) -> None:
    """Under a binding step layer: only a typed fact (the attempt timed out) is a step timeout."""
    world, tools = world_with(tool_step_s=5)
    answers = [
        ToolOutcome('{"status": "shipped"}', None),
        ToolOutcome.failure("TRANSIENT", "upstream timeout: deadline exceeded"),
    ]

    async def says_timeout_once(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return answers.pop()

    tools.add("order.status", says_timeout_once, side_effect=side_effect)  # type: ignore[arg-type]
    run_id = world.create_run()

    await world.drive(run_id)

    types = world.log.types(run_id)
    assert tools.timeouts == [5.0, pytest.approx(4.5)]  # the step layer bound both attempts
    assert "retry.scheduled" in types and "tool.failed" not in types, types
    assert world.log.phase(run_id) == "COMPLETED"


async def test_without_a_step_layer_the_same_tool_retries_until_the_run_deadline() -> None:
    world, tools = world_with(run_s=30)
    tools.add("order.status", busy, side_effect="read")
    run_id = world.create_run()

    await world.drive(run_id)

    assert "step_timeout" not in failure_message(world, run_id)
    assert len(tools.calls) == 60  # every 0.5 s until the run's reserve: the run layer stops it


async def test_a_slow_tool_is_cut_by_its_own_call_timeout() -> None:
    world, tools = world_with(takes_s=(100,), attempts=3, tool_step_s=0)
    tools.add("order.status", answer, side_effect="read")
    run_id = world.create_run()

    await world.drive(run_id)

    assert tools.timeouts == [30.0, 30.0, 30.0]  # tool_timeout_s, each attempt: the call layer
    assert failure_message(world, run_id) == DEADLINE_MESSAGE
    assert world.log.phase(run_id) == "COMPLETED"


async def test_the_step_layer_cuts_a_calls_timeout_to_what_is_left_of_the_step() -> None:
    world, tools = world_with(takes_s=(0, 100), tool_step_s=20)
    answers = [ToolOutcome.failure("TRANSIENT", "busy")]

    async def busy_then_slow(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return answers.pop() if answers else ToolOutcome("{}", None)

    tools.add("order.status", busy_then_slow, side_effect="read")
    run_id = world.create_run()

    await world.drive(run_id)

    assert tools.timeouts == [20.0, pytest.approx(19.5)]  # the step's 20 s, then less the 0.5 s backoff
    assert failure_message(world, run_id).startswith("step_timeout:")
    assert DEADLINE_MESSAGE in failure_message(world, run_id)


async def test_the_run_deadline_cuts_a_call_and_expires_the_run() -> None:
    world, tools = world_with(takes_s=(100,), run_s=20, tool_step_s=45)
    tools.add("order.status", answer, side_effect="read")
    run_id = world.create_run()

    await world.drive(run_id)

    assert tools.timeouts == [pytest.approx(19.8)]  # 20 s less the 0.2 s reserve: the run layer
    assert "step_timeout" not in failure_message(world, run_id)
    assert world.log.phase(run_id) == "EXPIRED"
    assert world.log.runs[run_id].reason == "deadline_exceeded"


async def test_a_write_cut_by_the_step_layer_in_doubt_goes_to_unknown_outcome_not_failed() -> None:
    world, tools = world_with(takes_s=(100,), tool_step_s=10)
    tools.add("order.status", answer, side_effect="write")
    run_id = world.create_run()

    await world.drive(run_id)

    assert tools.timeouts == [10.0]
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"
    assert "tool.failed" not in world.log.types(run_id)


async def test_a_model_step_retrying_forever_is_stopped_by_the_step_layer() -> None:
    world, _ = world_with(model_step_s=3)
    world.models.queue.clear()
    for _ in range(100):
        world.models.fail(ModelTransientError("overloaded", reason="overloaded"))
    run_id = world.create_run()
    began = world.clock()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "FAILED"
    assert world.log.runs[run_id].reason == "step_timeout"
    assert len(world.models.requests) == 6  # at 0, 0.5, ... 2.5 s; a seventh would end past 3 s
    assert world.clock() - began == pytest.approx(2.5)
    assert [r.timeout_s for r in world.models.requests][:2] == [3.0, 2.5]  # cut to the step's rest


async def test_a_model_step_without_a_step_layer_fails_after_its_attempts() -> None:
    world, _ = world_with(attempts=3)
    world.models.queue.clear()
    for _ in range(3):
        world.models.fail(ModelTransientError("overloaded", reason="overloaded"))
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.runs[run_id].reason == "model_unavailable"
    assert [r.timeout_s for r in world.models.requests] == [120.0, 120.0, 120.0]  # model_timeout_s


async def test_a_write_cut_by_the_step_layer_whose_effect_landed_is_recorded_completed() -> None:
    world, tools = world_with(takes_s=(100,), tool_step_s=10)
    tools.add("order.status", answer, side_effect="write")
    tools.cut_writes_land = True
    run_id = world.create_run()

    await world.drive(run_id)

    (completed,) = world.log.payloads(run_id, "tool.completed")
    assert completed["result_json"] == '{"landed": true}'
    assert "tool.failed" not in world.log.types(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
