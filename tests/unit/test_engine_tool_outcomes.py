"""A write's outcome is never guessed, a crash is never a cancellation, a cancel is committed at once.

In-process, on the engine's fakes (``agentrt.testing.engine``): the fake tool host, like the real
one, lets a write run on when its caller is cut off and stops one only on an explicit cancel. The
process-level tests (tests/e2e/test_write_outcomes.py, tests/fault/test_replicas.py) prove the
same with real processes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from agentrt.server.config import AgentConfig
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

ARGS = '{"order_id": "A100"}'
STILL_RUNNING = ToolOutcome.failure(
    "TRANSIENT",
    "timeout: the call overran its deadline and has not stopped yet",
    details_json='{"still_running": true}',
    still_running=True,
)


class Write:
    """A write tool: waits in flight until released; honours an explicit cancel if asked to."""

    def __init__(
        self, world: EngineWorld, *, stops_on_cancel: bool = False, answer: ToolOutcome | None = None
    ):
        self.world = world
        self.stops_on_cancel = stops_on_cancel
        self.answer = answer
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.effects = 0

    async def __call__(self, arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        self.entered.set()
        if self.answer is not None:
            return self.answer
        cancelled = self.world.tools.cancel_signal(metadata.idempotency_key)
        waits = {asyncio.ensure_future(self.release.wait())}
        if self.stops_on_cancel:
            waits.add(asyncio.ensure_future(cancelled.wait()))
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if self.stops_on_cancel and cancelled.is_set():
            return ToolOutcome.failure("CANCELLED", "stopped on request, before the refund")
        self.effects += 1
        return ToolOutcome(json.dumps({"refund_id": "RF-1", "attempt": metadata.attempt}), None)


def world_with(make_tool: type[Write] = Write, **tool: object) -> tuple[EngineWorld, Write]:
    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"]))
    handler = make_tool(world, **tool)  # type: ignore[arg-type]
    world.tools.add("refund.issue", handler, side_effect="write")
    world.models.by_step = True
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    return world, handler


async def wait_for(event: asyncio.Event) -> None:
    async with asyncio.timeout(5):
        await event.wait()


async def until(condition: Callable[[], bool]) -> None:
    """Let the driving task run until ``condition`` holds (within 5 s)."""
    async with asyncio.timeout(5):
        while True:
            if condition():
                return
            await asyncio.sleep(0)


async def writes_end(world: EngineWorld) -> None:
    """The fake host's writes still running (their callers cut off) reach their end."""
    await asyncio.wait_for(asyncio.gather(*world.tools.running.values()), 5)


def the_key(world: EngineWorld) -> str:
    return world.tools.calls[0].metadata.idempotency_key


# -- still-running writes ---------------------------------------------------------------------------


async def test_a_write_reported_still_running_waits_in_unknown_outcome_then_shows_the_real_result() -> None:
    world, _ = world_with(answer=STILL_RUNNING)
    run_id = world.create_run()

    await world.drive(run_id)

    record = world.log.runs[run_id]
    assert record.phase == "UNKNOWN_OUTCOME"  # never tool.failed, never retried blindly (R4.4)
    assert "tool.failed" not in world.log.types(run_id)
    assert "retry.scheduled" not in world.log.types(run_id)
    assert len(world.tools.calls) == 1
    (unknown,) = world.log.payloads(run_id, "tool.outcome.unknown")
    assert "has not stopped yet" in unknown["reason"]

    # The sync tool ends later and the host records its effect; the next reconcile reads it.
    world.tools.ledger[the_key(world)] = ToolOutcome('{"refund_id": "RF-late"}', None)
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert len(world.tools.calls) == 1
    (completed,) = world.log.payloads(run_id, "tool.completed")
    assert completed["result_json"] == '{"refund_id": "RF-late"}'
    # The model was told the real result.
    last_prompt = world.models.requests[-1].messages[-1]
    assert last_prompt.role == "tool" and "RF-late" in last_prompt.content


async def test_a_write_the_host_stopped_where_it_stood_is_unknown_not_failed_nor_resent() -> None:
    stopped = ToolOutcome.failure(
        "TRANSIENT",
        "timeout: the call overran its deadline",
        details_json='{"effect": "unknown"}',
        host_unsure=True,
    )
    world, _ = world_with(answer=stopped)
    run_id = world.create_run()

    await world.drive(run_id)
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"
    # The host recorded what it answered: a forced stop, effect unknown. Asking again tells no more.
    world.tools.ledger[the_key(world)] = stopped
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"  # a person or the tool's own store decides
    assert "tool.failed" not in world.log.types(run_id)
    assert len(world.tools.calls) == 1


async def test_a_transient_failure_in_the_tools_own_words_is_retried_under_the_same_key() -> None:
    # What the router makes of a call that provably never left (UNAVAILABLE "failed to connect").
    answers = [ToolOutcome.failure("TRANSIENT", "tool host UNAVAILABLE: failed to connect"), None]

    world, tool = world_with()

    async def flaky(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        answer = answers.pop(0)
        if answer is not None:
            return answer
        tool.release.set()
        return await tool(arguments_json, metadata)

    world.tools.handlers["refund.issue"] = flaky
    run_id = world.create_run()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert "tool.outcome.unknown" not in world.log.types(run_id)
    first, second = world.tools.calls
    assert first.metadata.idempotency_key == second.metadata.idempotency_key
    assert tool.effects == 1


# -- a crash is never a cancellation ----------------------------------------------------------------


async def test_a_write_cut_off_by_a_crash_runs_to_its_end_and_the_next_owner_records_it() -> None:
    world, tool = world_with()
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)

    await world.crash(task)  # the runtime dies; the host keeps the write going
    assert world.tools.cancels == []  # nobody asked the host to stop it
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"  # still running: asked again later

    tool.release.set()
    await writes_end(world)
    world.take_over(run_id, "worker-3")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert tool.effects == 1 and len(world.tools.calls) == 1
    types = world.log.types(run_id)
    assert "tool.failed" not in types and "cancel.requested" not in types


async def test_recovery_sends_again_a_write_whose_ledger_says_the_tool_stopped_before_its_effect() -> None:
    world, tool = world_with()
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)
    await world.crash(task)
    key = the_key(world)
    world.tools.lose(key)
    # An older host (or its shutdown) stopped the tool, which said so itself: no effect.
    world.tools.ledger[key] = ToolOutcome.failure("CANCELLED", "stopped before the refund")

    world.take_over(run_id, "worker-2")
    tool.release.set()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert "tool.failed" not in world.log.types(run_id)  # never told CANCELLED: the run was not
    second = world.tools.calls[-1]
    assert second.metadata.idempotency_key == key and second.metadata.attempt == 2
    assert tool.effects == 1


async def test_recovery_waits_in_unknown_outcome_when_the_host_stopped_the_write_where_it_stood() -> None:
    world, tool = world_with()
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)
    await world.crash(task)
    key = the_key(world)
    world.tools.lose(key)
    world.tools.ledger[key] = ToolOutcome.failure(
        "CANCELLED",
        "cancelled: the caller went away",
        details_json='{"effect": "unknown", "stopped": "caller_vanished"}',
        host_unsure=True,
    )

    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"
    assert "tool.failed" not in world.log.types(run_id)
    assert len(world.tools.calls) == 1


# -- cancel at once ---------------------------------------------------------------------------------


async def test_cancel_commits_cancel_requested_while_the_write_is_still_in_flight() -> None:
    world, tool = world_with(stops_on_cancel=True)
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)

    world.cancel(run_id, reason="customer called back")
    key = the_key(world)
    await until(lambda: "cancel.requested" in world.log.types(run_id))
    # Committed before the write ended: the tool is still in flight.
    assert key in world.tools.running and tool.effects == 0
    await until(lambda: bool(world.tools.cancels))  # then the host is asked to stop it
    assert world.tools.cancels == [key]
    assert "tool.failed" not in world.log.types(run_id)

    await asyncio.wait_for(task, 5)
    assert world.log.phase(run_id) == "CANCELLED"
    (failed,) = world.log.payloads(run_id, "tool.failed")
    assert failed["error"]["code"] == "TOOL_ERROR_CODE_CANCELLED"  # the tool stopped, and said so
    assert tool.effects == 0
    assert world.log.types(run_id).count("cancel.requested") == 1


async def test_a_crash_after_the_cancel_was_committed_settles_the_write_through_its_ledger() -> None:
    world, tool = world_with()
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)
    world.cancel(run_id)
    await until(lambda: "cancel.requested" in world.log.types(run_id))

    await world.crash(task)  # dies with the write in flight and cancel.requested committed
    tool.release.set()  # the write ignored the cancel and landed
    await writes_end(world)
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "CANCELLED"
    # Not assumed undone: the effect is on the record before the run ends.
    assert world.log.types(run_id)[-4:] == [
        "cancel.requested",
        "tool.completed",
        "run.cancelled",
        "run.ended",
    ]
    assert tool.effects == 1 and len(world.tools.calls) == 1
