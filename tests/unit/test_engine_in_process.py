"""The step loop, recovery from each persisted phase, and cancellation, in-process (no servers).

The engine runs on fakes of its ports (``agentrt.testing.engine``): an in-memory run log with
the store's fencing, fake tools with a ledger keyed by idempotency key, a scripted model and a
manual clock. A crash is the driving task cancelled where it stands; a take-over hands the run
to another owner with the next fencing token, as a lease expiry would. The process-level tests
(tests/fault) prove the same over real processes and databases.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from agentrt.server.config import AgentConfig, ApprovalsConfig
from agentrt.server.core import LeaseLost
from agentrt.server.models import ModelTransientError
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import Crashed, EngineWorld

ARGS = '{"order_id": "A100"}'


def ok(result: dict[str, object]) -> Callable[[str, CallMetadata], asyncio.Future[ToolOutcome]]:
    async def handler(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome(json.dumps(result), None)

    return handler  # type: ignore[return-value]


class Gated:
    """A tool that waits in flight until the test lets it finish (or the call is cut)."""

    def __init__(self, result: dict[str, object] | None = None):
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.result = result or {"refunded": True}
        self.effects = 0

    async def __call__(self, arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        self.entered.set()
        await self.release.wait()
        self.effects += 1
        return ToolOutcome(json.dumps(self.result), None)


def refund_world(handler: object, *, side_effect: str = "write", **agent: object) -> EngineWorld:
    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"], **agent))  # type: ignore[arg-type]
    world.tools.add("refund.issue", handler, side_effect=side_effect)  # type: ignore[arg-type]
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    return world


async def wait_for(event: asyncio.Event) -> None:
    async with asyncio.timeout(5):
        await event.wait()


# -- the step loop --------------------------------------------------------------------------------


async def test_a_run_asks_the_model_calls_the_tool_once_and_completes() -> None:
    world = refund_world(ok({"refunded": True}))
    run_id = world.create_run("refund A100")

    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert world.log.types(run_id) == [
        "run.started",
        "step.started",
        "model.completed",
        "tool.started",
        "tool.completed",
        "step.started",
        "model.completed",
        "run.completed",
        "run.ended",
    ]
    (call,) = world.tools.calls
    (started,) = world.log.payloads(run_id, "tool.started")
    assert call.metadata.idempotency_key == started["idempotency_key"]
    assert (call.metadata.fencing_token, call.metadata.attempt, call.metadata.run_id) == (1, 1, run_id)
    assert json.loads(world.log.runs[run_id].usage)["model_steps"] == 2
    assert world.log.runs[run_id].lease_owner is None  # the closing commit gave the lease back
    # Every committed event reached live readers once, in order.
    published = [e.seq for e, _ in world.live.published if e.seq]
    assert published == list(range(2, 10))
    # The model saw the tool's result in its second step.
    second = world.models.requests[1]
    assert [m.role for m in second.messages][-2:] == ["assistant", "tool"]


async def test_a_transient_tool_failure_is_retried_under_the_same_key() -> None:
    answers = [ToolOutcome.failure("TRANSIENT", "busy"), ToolOutcome('{"refunded": true}', None)]

    async def flaky(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return answers.pop(0)

    world = refund_world(flaky)
    run_id = world.create_run()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    keys = {c.metadata.idempotency_key for c in world.tools.calls}
    assert len(world.tools.calls) == 2 and len(keys) == 1
    assert [c.metadata.attempt for c in world.tools.calls] == [1, 2]
    assert "retry.scheduled" in world.log.types(run_id)


async def test_a_run_past_its_deadline_expires_without_calling_anything() -> None:
    world = refund_world(ok({}))
    run_id = world.create_run()
    world.clock.advance(10_000)

    await world.drive(run_id)

    assert world.log.phase(run_id) == "EXPIRED"
    assert world.models.requests == [] and world.tools.calls == []


async def test_a_fault_in_the_loop_is_recorded_and_the_run_goes_on() -> None:
    world = refund_world(ok({"refunded": True}))
    world.fault_plan = type(world.fault_plan)("after_model_response@1=raise")
    world.models.queue.insert(0, world.models.queue[0])  # the faulted step is asked again
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    (fault,) = world.log.payloads(run_id, "run.fault")
    assert fault["error_class"] == "InjectedFault"
    # The faulted step's model call is counted (usage_spent), and it was asked again.
    assert fault["usage_spent"]["model_steps"] == 1
    assert len(world.models.requests) == 3
    assert json.loads(world.log.runs[run_id].usage)["model_steps"] == 3
    assert len(world.tools.calls) == 1


# -- recovery from each persisted phase -----------------------------------------------------------


def flaky_once_world() -> tuple[EngineWorld, list[str]]:
    """A write that fails TRANSIENT on its first call ever, then succeeds; effects are recorded."""
    effects: list[str] = []
    calls = 0

    async def refund(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        nonlocal calls
        calls += 1
        if calls == 1:
            return ToolOutcome.failure("TRANSIENT", "busy")
        effects.append(metadata.idempotency_key)
        return ToolOutcome('{"refunded": true}', None)

    return refund_world(refund), effects


async def test_a_crash_after_any_commit_loses_nothing_and_acts_once() -> None:
    reference, _ = flaky_once_world()
    run_id = reference.create_run()
    await reference.drive(run_id)
    commits = reference.log.appends
    assert reference.log.phase(run_id) == "COMPLETED" and commits >= 4

    phases_at_crash = set()
    for crash_after in range(0, commits):
        world, effects = flaky_once_world()
        world.models.by_step = True  # a step re-asked after a crash gets the same answer again
        run_id = world.create_run()
        if crash_after:
            world.log.crash_after = crash_after
            with pytest.raises(Crashed):
                await world.drive(run_id)
        phases_at_crash.add(world.log.phase(run_id))
        world.log.crash_after = None
        world.take_over(run_id, "worker-2")
        await world.drive(run_id)

        assert world.log.phase(run_id) == "COMPLETED", crash_after
        assert len(effects) == 1, (crash_after, effects)  # one refund, whatever the crash point
        steps = [p["step"] for p in world.log.payloads(run_id, "model.completed")]
        assert len(steps) == len(set(steps)), crash_after  # no step recorded twice
        seqs = [e.seq for e in world.log.events[run_id]]
        assert seqs == list(range(1, len(seqs) + 1))
    assert {"QUEUED", "MODEL_STEP", "TOOL_STEP", "RETRY_WAIT"} <= phases_at_crash, phases_at_crash


async def test_crash_while_the_model_is_asked_then_the_next_owner_asks_again() -> None:
    world = refund_world(ok({"refunded": True}))
    world.models.gate = asyncio.Event()
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(world.models.in_flight)

    await world.crash(task)
    assert world.log.types(run_id) == ["run.started", "step.started"]  # committed before the call
    world.take_over(run_id, "worker-2")
    world.models.gate.set()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert world.log.types(run_id).count("model.completed") == 2  # one per step, none lost or doubled
    assert len(world.tools.calls) == 1


async def test_crash_while_a_write_is_in_flight_and_it_took_effect_is_not_sent_again() -> None:
    tool = Gated()
    world = refund_world(tool)
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)

    await world.crash(task)  # the host goes on: the effect lands after the runtime died
    world.tools.ledger[world.tools.calls[0].metadata.idempotency_key] = ToolOutcome(
        '{"refunded": true}', None
    )
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert len(world.tools.calls) == 1  # asked the ledger, never re-sent
    assert len(world.tools.queries) == 1
    (completed,) = world.log.payloads(run_id, "tool.completed")
    assert completed["replayed"] is True


async def test_crash_before_a_write_reached_the_host_sends_it_once_under_the_same_key() -> None:
    tool = Gated()
    world = refund_world(tool)
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)

    await world.crash(task)
    world.tools.lose(world.tools.calls[0].metadata.idempotency_key)  # it never reached the host
    assert world.tools.ledger == {}
    world.take_over(run_id, "worker-2")
    tool.release.set()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    first, second = world.tools.calls
    assert first.metadata.idempotency_key == second.metadata.idempotency_key
    assert (second.metadata.attempt, second.metadata.fencing_token) == (2, 2)
    assert tool.effects == 1


async def test_crash_while_the_host_cannot_tell_waits_in_unknown_outcome_then_settles() -> None:
    tool = Gated()
    world = refund_world(tool)
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)
    await world.crash(task)
    world.tools.ledger[world.tools.calls[0].metadata.idempotency_key] = "running"

    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    record = world.log.runs[run_id]
    assert record.phase == "UNKNOWN_OUTCOME"  # never collapsed into FAILED, never re-sent (R4.4)
    assert record.wake_ms is not None and record.lease_owner is None
    assert len(world.tools.calls) == 1

    world.tools.ledger[world.tools.calls[0].metadata.idempotency_key] = ToolOutcome('{"late": true}', None)
    world.take_over(run_id, "worker-3")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert len(world.tools.calls) == 1
    assert world.log.payloads(run_id, "tool.completed")[0]["result_json"] == '{"late": true}'


async def test_crash_during_a_read_only_call_re_sends_it_without_asking_a_ledger() -> None:
    tool = Gated({"status": "shipped"})
    world = refund_world(tool, side_effect="read")
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)
    await world.crash(task)

    world.take_over(run_id, "worker-2")
    tool.release.set()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert world.tools.queries == []
    assert len(world.tools.calls) == 2


async def test_a_run_waiting_for_approval_runs_the_approved_call_once_for_the_next_owner() -> None:
    world = refund_world(ok({"refunded": True}), approvals=ApprovalsConfig(timeout_s=600))
    world.tools.specs["refund.issue"].requires_approval = True
    run_id = world.create_run()

    await world.drive(run_id)
    record = world.log.runs[run_id]
    assert record.phase == "WAITING_APPROVAL" and record.lease_owner is None
    assert world.tools.calls == []
    (asked,) = world.log.payloads(run_id, "approval.requested")

    decision = {
        "approval_id": asked["approval_id"],
        "decision": "APPROVAL_DECISION_APPROVE",
        "approver": "ana",
    }
    world.log.add_signal(run_id, "approval_decision", decision)
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert len(world.tools.calls) == 1
    assert world.log.signals[run_id] == []  # consumed in the same commit that applied it


async def test_an_old_owner_that_lost_its_lease_writes_nothing() -> None:
    world = refund_world(ok({"refunded": True}))
    world.models.gate = asyncio.Event()
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(world.models.in_flight)
    before = world.log.types(run_id)

    world.log.take_over(run_id, "worker-2")  # the old owner does not know yet
    world.models.gate.set()

    with pytest.raises(LeaseLost):
        await task
    assert world.log.types(run_id) == before
    assert world.tools.calls == []


# -- cancellation ---------------------------------------------------------------------------------


async def test_cancel_while_the_model_is_asked_ends_the_run_cancelled() -> None:
    world = refund_world(ok({}))
    world.models.gate = asyncio.Event()
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(world.models.in_flight)

    world.cancel(run_id, reason="user changed their mind")
    await asyncio.wait_for(task, 5)

    assert world.log.phase(run_id) == "CANCELLED"
    assert "model.completed" not in world.log.types(run_id)
    (requested,) = world.log.payloads(run_id, "cancel.requested")
    assert requested == {"reason": "user changed their mind", "requested_by": "tester"}


async def test_cancel_during_a_read_only_call_records_it_cancelled() -> None:
    tool = Gated({"status": "shipped"})
    world = refund_world(tool, side_effect="read")
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)

    world.cancel(run_id)
    await asyncio.wait_for(task, 5)

    assert world.log.phase(run_id) == "CANCELLED"
    (failed,) = world.log.payloads(run_id, "tool.failed")
    assert failed["error"]["code"] == "TOOL_ERROR_CODE_CANCELLED"
    assert tool.effects == 0


async def test_cancel_during_a_write_in_flight_does_not_claim_it_never_happened() -> None:
    tool = Gated()
    world = refund_world(tool)
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(tool.entered)

    world.cancel(run_id)
    # The write is not cut: the host is asked to stop it, and it lands anyway (a sync tool cannot stop).
    key = world.tools.calls[0].metadata.idempotency_key
    await wait_for(world.tools.cancel_signal(key))
    tool.release.set()
    await asyncio.wait_for(task, 5)

    assert world.log.phase(run_id) == "CANCELLED"
    assert "tool.failed" not in world.log.types(run_id)
    assert world.log.payloads(run_id, "tool.completed")[0]["result_json"] == '{"refunded": true}'
    assert tool.effects == 1


async def test_cancel_during_a_retry_wait_stops_before_the_next_attempt() -> None:
    world = refund_world(None, side_effect="read")
    sent: list[int] = []

    async def busy(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        sent.append(metadata.attempt)
        world.cancel(run_id)  # the cancel arrives while the retry waits
        return ToolOutcome.failure("TRANSIENT", "busy")

    world.tools.handlers["refund.issue"] = busy
    run_id = world.create_run()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "CANCELLED"
    assert sent == [1]


async def test_a_model_that_keeps_failing_ends_the_run_failed_within_its_attempts() -> None:
    world = EngineWorld(agent=AgentConfig())
    for _ in range(3):
        world.models.fail(ModelTransientError("overloaded", reason="overloaded"))
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "FAILED"
    assert world.log.runs[run_id].reason == "model_unavailable"
    assert len(world.models.requests) == world.settings.model_attempts
