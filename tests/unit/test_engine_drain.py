"""A draining worker (SIGTERM) hands each run over at its next commit, in-process on the engine's fakes.

The process-level proof (two replicas on PostgreSQL, a rolling restart) is tests/fault/test_drain.py.
"""

from __future__ import annotations

import asyncio
import json

from agentrt.server.config import AgentConfig
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

ARGS = '{"order_id": "A100"}'


class Gated:
    """A write that waits in flight until the test lets it finish."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.effects = 0

    async def __call__(self, arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        self.entered.set()
        await self.release.wait()
        self.effects += 1
        return ToolOutcome(json.dumps({"refunded": True}), None)


def refund_world(handler: object) -> EngineWorld:
    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"]))
    world.tools.add("refund.issue", handler, side_effect="write")  # type: ignore[arg-type]
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    return world


async def wait_for(event: asyncio.Event) -> None:
    async with asyncio.timeout(5):
        await event.wait()


async def test_a_drain_lets_the_write_in_flight_finish_commits_its_result_and_gives_the_lease_back() -> None:
    gated = Gated()
    world = refund_world(gated)
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(gated.entered)

    world.draining.set()
    assert not task.done()  # the drain does not cut the call
    gated.release.set()
    async with asyncio.timeout(5):
        await task

    record = world.log.runs[run_id]
    assert record.lease_owner is None and record.phase == "TOOL_STEP"  # handed over, not ended
    types = world.log.types(run_id)
    assert types[-1] == "tool.completed"  # the call's result reached its commit
    assert "cancel.requested" not in types and len(world.models.requests) == 1  # nothing more started

    world.draining.clear()  # the next owner
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"
    assert gated.effects == 1 and len(world.tools.calls) == 1  # the write ran once


async def test_a_drain_cuts_the_runs_own_retry_wait_and_hands_over_at_once() -> None:
    answers = [ToolOutcome.failure("TRANSIENT", "busy"), ToolOutcome('{"refunded": true}', None)]

    async def flaky(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return answers.pop(0)

    world = refund_world(flaky)
    waiting = asyncio.Event()

    async def endless(seconds: float) -> None:  # the retry's backoff, longer than any drain
        waiting.set()
        await asyncio.Event().wait()

    world.clock.sleep = endless  # type: ignore[method-assign]
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(waiting)

    world.draining.set()
    async with asyncio.timeout(5):
        await task

    assert world.log.runs[run_id].lease_owner is None
    assert world.log.types(run_id)[-1] == "retry.scheduled"  # committed before the wait began
    assert len(world.tools.calls) == 1  # the retry is the next owner's
    del world.clock.sleep  # the next owner's waits pass on the manual clock again
    world.draining.clear()
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED" and len(world.tools.calls) == 2


async def test_a_drain_with_nothing_buffered_releases_by_the_lease_generation_only() -> None:
    world = refund_world(Gated())
    run_id = world.create_run()
    world.draining.set()

    await world.drive(run_id)

    record = world.log.runs[run_id]
    assert record.lease_owner is None and (record.revision, world.log.types(run_id)) == (1, ["run.started"])
    assert world.models.requests == []
