"""Soft loop exits through the real step loop (R6.2, S000): an answer flip-flopping between two
states with no new fact, and the same error over and over. Each earns one diagnostic step, then
the run ends FAILED ``loop_detected`` with what the model said."""

from __future__ import annotations

import json

from agentrt.server.config import AgentConfig, LoopsConfig
from agentrt.server.core import LoopPolicy, LoopTracker
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld


async def always_ok(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
    return ToolOutcome('{"ok": true}', None)


async def bad_id(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
    return ToolOutcome.failure("PERMANENT", "no such order")


def diagnostic_reasons(world: EngineWorld, run_id: str) -> list[str]:
    return [p["reason"] for p in world.log.payloads(run_id, "step.started") if p.get("kind") == "diagnostic"]


async def test_an_answer_flip_flopping_between_two_states_ends_the_run() -> None:
    world = EngineWorld(agent=AgentConfig(tools=["mode.set"]))
    world.tools.add("mode.set", always_ok)
    for step in range(1, 5):
        mode = "fast" if step % 2 else "safe"
        world.models.answer(
            text=f"switching to {mode}", tool_calls=[(f"c{step}", "mode.set", json.dumps({"mode": mode}))]
        )
    world.models.answer(text="I kept switching modes")  # the diagnostic step's answer
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "FAILED"
    assert world.log.runs[run_id].reason == "loop_detected"
    (reason,) = diagnostic_reasons(world, run_id)
    assert reason.startswith("flip_flop")
    # Caught before a third identical call was even made.
    sent = [json.loads(c.arguments_json)["mode"] for c in world.tools.calls]
    assert sent == ["fast", "safe", "fast", "safe"]


async def test_alternation_with_new_facts_is_not_a_flip_flop() -> None:
    results = iter(range(100))

    async def news(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome(json.dumps({"reading": next(results)}), None)  # every answer is new

    loops = LoopsConfig(max_identical_calls=0, max_steps_without_new_fact=0)
    world = EngineWorld(agent=AgentConfig(tools=["sensor.read"], loops=loops))
    world.tools.add("sensor.read", news, side_effect="read")
    for step in range(1, 7):
        which = "a" if step % 2 else "b"
        world.models.answer(tool_calls=[(f"c{step}", "sensor.read", json.dumps({"sensor": which}))])
    world.models.answer(text="readings collected")
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert diagnostic_reasons(world, run_id) == []


async def test_the_same_error_over_and_over_exits_through_one_diagnostic_step() -> None:
    world = EngineWorld(agent=AgentConfig(tools=["orders.lookup"]))
    world.tools.add("orders.lookup", bad_id, side_effect="read")
    for step in range(1, 4):  # different arguments each time: not an identical call
        world.models.answer(tool_calls=[(f"c{step}", "orders.lookup", json.dumps({"order_id": f"X{step}"}))])
    world.models.answer(text="I could not find the order")
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "FAILED"
    assert world.log.runs[run_id].reason == "loop_detected"
    (reason,) = diagnostic_reasons(world, run_id)
    assert reason.startswith("repeated_error") and "PERMANENT" in reason
    assert len(world.tools.calls) == 3  # the third identical error is the limit
    (failed,) = world.log.payloads(run_id, "run.failed")
    assert "I could not find the order" in failed["message"]


def test_flip_flop_needs_two_full_swings_and_no_new_fact() -> None:
    tracker = LoopTracker()
    policy = LoopPolicy(max_identical_calls=0, max_repeated_errors=0, max_steps_without_new_fact=0)
    for i, text in enumerate(["A", "B", "A"]):
        tracker.on_model_step(first=i == 0)
        tracker.on_answer(text, [])
    assert tracker.detected(policy) is None  # A, B, A: one swing back
    tracker.on_model_step(first=False)
    tracker.on_answer("B", [])
    assert tracker.detected(policy) is not None  # A, B, A, B
    tracker.on_result("t", '{"new": 1}')  # a new fact resets the count from the latest answer
    tracker.on_model_step(first=False)
    tracker.on_answer("A", [])
    assert tracker.detected(policy) is None
    assert tracker.detected(LoopPolicy(max_flip_flops=0, max_steps_without_new_fact=0)) is None
