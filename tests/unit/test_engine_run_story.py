"""The run's story in the ``agentrt.run`` log: one INFO line per transition and decision, told
once its commit landed, carrying the run's ids (in-process, on the engine's fakes).

What a line tells is checked against the committed log itself: every event that moved the phase,
and every retry, cancel, unknown outcome and tool call event, has exactly one line, in order.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable

import pytest

from agentrt.server.config import AgentConfig
from agentrt.server.core import LeaseLost, Phase, replay
from agentrt.server.models import ModelTransientError
from agentrt.server.store import decode_event
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

ARGS = '{"order_id": "A100"}'
STORY_EVENTS = {
    "retry.scheduled",
    "run.fault",
    "cancel.requested",
    "tool.outcome.unknown",
    "outcome.resolved",
    "run.escalated",
    "tool.started",
    "tool.completed",
    "tool.failed",
    "handoff",
    "approval.requested",
    "approval.resolved",
}


def world_with(handler: Callable[[str, CallMetadata], object], *, side_effect: str = "read") -> EngineWorld:
    world = EngineWorld(agent=AgentConfig(tools=["orders.lookup"]))
    world.tools.add("orders.lookup", handler, side_effect=side_effect)  # type: ignore[arg-type]
    world.models.answer(tool_calls=[("c1", "orders.lookup", ARGS)])
    world.models.answer(text="found it")
    return world


def expected_story(world: EngineWorld, run_id: str) -> list[tuple[str, str, str]]:
    """(event, from phase, to phase) of each committed event that a line must tell."""
    stored = world.log.events[run_id]
    told = []
    for i, event in enumerate(stored):
        before = replay(run_id, [decode_event(e.type, e.payload) for e in stored[:i]]).phase if i else None
        after = replay(run_id, [decode_event(e.type, e.payload) for e in stored[: i + 1]]).phase
        if i and (before is not after or event.type in STORY_EVENTS):
            assert before is not None
            told.append((event.type, before.value, after.value))
    return told


def story(caplog: pytest.LogCaptureFixture, run_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "agentrt.run" and getattr(r, "event", None)]


async def test_each_transition_and_call_of_a_run_is_told_once_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers = [ToolOutcome.failure("TRANSIENT", "busy"), ToolOutcome('{"found": true}', None)]

    async def flaky(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return answers.pop(0)

    world = world_with(flaky)
    world.models.fail(ModelTransientError("overloaded", reason="overloaded"))
    world.models.queue.insert(0, world.models.queue.pop())  # the model fails first, then answers
    run_id = world.create_run()
    caplog.set_level(logging.INFO, logger="agentrt.run")

    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    lines = story(caplog, run_id)
    told = [(r.event, r.from_phase, r.to_phase) for r in lines]  # type: ignore[attr-defined]
    assert told == expected_story(world, run_id)
    assert ("retry.scheduled", "MODEL_STEP", "MODEL_STEP") in told  # the model's retry...
    assert ("retry.scheduled", "TOOL_STEP", "RETRY_WAIT") in told  # ...and the tool's
    assert all(r.levelno == logging.INFO for r in lines)
    calls = [r for r in lines if r.event.startswith("tool.")]  # type: ignore[attr-defined]
    assert calls and all(r.call_id == "c1" and r.tool == "orders.lookup" for r in calls)  # type: ignore[attr-defined]


async def test_lines_carry_the_run_and_call_ids_from_the_context(caplog: pytest.LogCaptureFixture) -> None:
    from agentrt.toolhost.logs import current_log_fields

    seen: list[dict[str, str]] = []

    async def lookup(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        seen.append(dict(current_log_fields()))
        return ToolOutcome('{"found": true}', None)

    world = world_with(lookup)
    run_id = world.create_run()
    caplog.set_level(logging.INFO, logger="agentrt.run")
    await asyncio.create_task(world.drive(run_id))  # a run's own task, as the engine drives it

    tenant = world.log.runs[run_id].tenant_id
    assert seen == [{"run_id": run_id, "tenant": tenant, "call_id": "c1"}]


async def test_a_timeout_is_told_once_with_its_layer(caplog: pytest.LogCaptureFixture) -> None:
    answers = [ToolOutcome.failure("TRANSIENT", "slow", timed_out=True), ToolOutcome("{}", None)]

    async def slow(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return answers.pop(0)

    world = world_with(slow)
    run_id = world.create_run()
    caplog.set_level(logging.INFO, logger="agentrt.run")
    await world.drive(run_id)

    timeouts = [r for r in caplog.records if getattr(r, "decision", None) == "timeout"]
    assert [r.getMessage() for r in timeouts] == ["orders.lookup attempt 1 timed out"]
    assert timeouts[0].layer is not None  # type: ignore[attr-defined]


async def test_a_cancel_is_told_once_as_its_transition(caplog: pytest.LogCaptureFixture) -> None:
    gate, entered = asyncio.Event(), asyncio.Event()

    async def held(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        entered.set()
        await gate.wait()
        return ToolOutcome("{}", None)

    world = world_with(held)
    run_id = world.create_run()
    caplog.set_level(logging.INFO, logger="agentrt.run")
    task = world.start(run_id)
    async with asyncio.timeout(5):
        await entered.wait()
    world.cancel(run_id)
    async with asyncio.timeout(5):
        await task

    assert world.log.phase(run_id) == "CANCELLED"
    told = [(r.event, r.from_phase, r.to_phase) for r in story(caplog, run_id)]  # type: ignore[attr-defined]
    assert told == expected_story(world, run_id)
    assert [t for t in told if t[0] == "cancel.requested"] == [
        ("cancel.requested", "TOOL_STEP", "CANCEL_REQUESTED")
    ]


async def test_a_commit_that_never_lands_tells_nothing(caplog: pytest.LogCaptureFixture) -> None:
    world = world_with(lambda a, m: asyncio.sleep(0, ToolOutcome("{}", None)))  # type: ignore[arg-type]
    world.models.gate = asyncio.Event()
    run_id = world.create_run()
    caplog.set_level(logging.INFO, logger="agentrt.run")
    task = world.start(run_id)
    async with asyncio.timeout(5):
        await world.models.in_flight.wait()
    told_before = len(story(caplog, run_id))

    world.log.take_over(run_id, "worker-2")  # the answer's commit will be refused
    world.models.gate.set()
    with pytest.raises(LeaseLost):
        await task

    assert len(story(caplog, run_id)) == told_before  # model.completed was never committed
    assert [e.type for e in world.log.events[run_id]][-1] == "step.started"
    assert Phase(world.log.phase(run_id)) is Phase.MODEL_STEP
    assert json.loads(world.log.events[run_id][-1].payload)["step"] == 1


async def test_faults_and_the_end_they_force_are_told_from_a_commit_made_from_the_row(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = world_with(lambda a, m: asyncio.sleep(0, ToolOutcome("{}", None)))  # type: ignore[arg-type]
    world.settings = world.settings.model_copy(
        update={"faults": world.settings.faults.model_copy(update={"max_faults": 2})}
    )
    world.fault_plan = type(world.fault_plan)("after_model_response@1..=raise")
    world.models.queue = world.models.queue[:1] * 5  # every step is asked again, and faults again
    run_id = world.create_run()
    caplog.set_level(logging.INFO, logger="agentrt.run")

    await world.drive(run_id)

    assert world.log.phase(run_id) == "FAILED"
    told = [(r.event, r.from_phase, r.to_phase) for r in story(caplog, run_id)]  # type: ignore[attr-defined]
    assert told == expected_story(world, run_id)
    assert [t for t in told if t[0] == "run.fault"] == [("run.fault", "MODEL_STEP", "MODEL_STEP")] * 2
    assert told[-1] == ("run.failed", "MODEL_STEP", "FAILED")
    assert all(r.run_id == run_id for r in story(caplog, run_id))  # type: ignore[attr-defined]
