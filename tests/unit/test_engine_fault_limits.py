"""Fault containment in-process (``agentrt.testing.engine``): the fault limit with a write in doubt
parks the run in UNKNOWN_OUTCOME and its ledger settles it; an end made from the row lists the
run's calls; environmental faults are retried without counting, within their bound.

The process-level proofs over real databases are in tests/fault.
"""

from __future__ import annotations

import asyncio
import json

from agentrt.server.config import AgentConfig, FaultsConfig, ReconcileConfig, Settings
from agentrt.server.engine._faults import FaultPlan
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

ARGS = '{"order_id": "A100"}'


class Refunds:
    """A write that counts its executions (what a duplicate would show)."""

    def __init__(self) -> None:
        self.effects = 0

    async def __call__(self, arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        self.effects += 1
        return ToolOutcome(json.dumps({"refunded": True}), None)


def refund_world(plan: str, **settings: object) -> tuple[EngineWorld, Refunds]:
    base = Settings(
        retry_base_s=0.2,
        retry_cap_s=5.0,
        reconcile=ReconcileConfig(base_s=2.0),
        **settings,  # type: ignore[arg-type]
    )
    world = EngineWorld(agent=AgentConfig(tools=["refund.issue", "orders.lookup"]), settings=base)
    world.fault_plan = FaultPlan(plan)
    refunds = Refunds()
    world.tools.add("refund.issue", refunds, side_effect="write")
    return world, refunds


async def test_the_fault_limit_with_a_write_in_doubt_parks_unknown_and_the_ledger_settles_it() -> None:
    # Every commit carrying the write's result fails three times: the write ran, nobody recorded it.
    world, refunds = refund_world("before_commit:tool.completed@1..3=raise")
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    run_id = world.create_run()

    await world.drive(run_id)

    record = world.log.runs[run_id]
    assert record.phase == "UNKNOWN_OUTCOME"  # not FAILED: the write may have taken effect
    assert record.fault_count == 3 and record.lease_owner is None
    types = world.log.types(run_id)
    assert "run.failed" not in types and "run.ended" not in types
    assert types[-2:] == ["run.fault", "tool.outcome.unknown"]  # one commit, the limit and the unknown
    (unknown,) = world.log.payloads(run_id, "tool.outcome.unknown")
    assert unknown["call_id"] == "c1" and unknown["unknown_time"]
    # Parked until its first ledger query is due, as any unknown outcome ([reconcile] base_s).
    now_ms = int(world.clock() * 1000)
    assert record.wake_ms == now_ms + 2000 * 0.95  # less a tenth of rand=0.5
    assert world.counters.snapshot()["unknown_result_count"] == 1
    assert refunds.effects == 1

    # Woken (a claim after wake_ms): the reconcile path asks the ledger, which has the result.
    world.clock.advance(2.0)
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert refunds.effects == 1  # settled from the ledger, never sent again
    completed = world.log.payloads(run_id, "tool.completed")
    assert [c["call_id"] for c in completed] == ["c1"] and completed[0]["replayed"]
    assert world.log.runs[run_id].fault_count == 3


async def test_a_ledger_that_cannot_answer_keeps_the_run_parked_until_it_can() -> None:
    world, refunds = refund_world("before_commit:tool.completed@1..3=raise")
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"

    world.tools.unreachable = True
    world.clock.advance(2.0)
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"  # parked again, by the ordinary backoff
    assert world.log.runs[run_id].reconcile_attempts == 2

    world.tools.unreachable = False
    world.clock.advance(10.0)
    world.take_over(run_id, "worker-3")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED" and refunds.effects == 1


async def test_the_fault_limit_without_a_write_in_doubt_ends_failed_with_the_runs_calls() -> None:
    world, refunds = refund_world("after_model_response@2..=raise")
    world.tools.add("orders.lookup", Refunds(), side_effect="read")
    world.models.answer(tool_calls=[("c1", "orders.lookup", ARGS)])
    for _ in range(3):  # the second step is asked again after each fault
        world.models.answer(text="never recorded")
    run_id = world.create_run()

    await world.drive(run_id)

    record = world.log.runs[run_id]
    assert record.phase == "FAILED" and record.reason == "internal_error:InjectedFault"
    (ended,) = world.log.payloads(run_id, "run.ended")
    assert ended["partial"] and not ended.get("retryable", False)
    # The real lists of the log, not empty ones (S002 §7.3).
    assert [c["call_id"] for c in ended["completed_calls"]] == ["c1"]
    assert json.loads(record.call_summary or "{}")["completed_calls"][0]["call_id"] == "c1"
    assert refunds.effects == 0


async def test_environmental_faults_are_retried_and_never_counted() -> None:
    world, refunds = refund_world("before_commit:tool.completed@1..5=outage")
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    run_id = world.create_run()

    await world.drive(run_id)

    record = world.log.runs[run_id]
    assert record.phase == "COMPLETED" and record.fault_count == 0
    assert "run.fault" not in world.log.types(run_id)
    assert world.counters.snapshot()["environmental_fault_count"] == 5
    assert world.counters.snapshot()["run_fault_count"] == 0
    assert refunds.effects == 1  # every retry learned the write's result from the ledger


async def test_past_their_bound_environmental_faults_count_and_a_write_in_doubt_parks() -> None:
    world, refunds = refund_world(
        "before_commit:tool.completed@1..=outage", faults=FaultsConfig(environmental_retry_s=5.0)
    )
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(text="refunded")
    run_id = world.create_run()
    began = world.clock()

    async with asyncio.timeout(10):
        await world.drive(run_id)

    record = world.log.runs[run_id]
    assert record.phase == "UNKNOWN_OUTCOME" and record.fault_count == 3
    faults = world.log.payloads(run_id, "run.fault")
    assert [f["error_class"] for f in faults] == ["InjectedOutage"] * 3
    uncounted = world.counters.snapshot()["environmental_fault_count"]
    assert uncounted >= 3
    # The bound is the streak's whole time: the counted faults came right after it, not a bound each.
    assert 5.0 <= world.clock() - began < 5.0 + 3 * 5.0
    assert refunds.effects == 1
