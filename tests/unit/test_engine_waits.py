"""Waits on something outside the run, in-process: reconcile that scales, escalation, the partial summary.

A run parked in UNKNOWN_OUTCOME is claimed again only when its wake time has passed (what
``store.claim`` does): these tests move the manual clock to each wake time, claim the run as a new
worker would, and count what the run log was asked to write.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from agentrt.server.config import AgentConfig, ApprovalsConfig, BudgetsConfig, EscalationConfig, Settings
from agentrt.server.core import Phase
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld
from tests.unit.test_engine_in_process import ARGS, Gated, ok, refund_world, wait_for


@dataclass
class Waited:
    claims: int = 0  # each bumps the fencing generation: a row write
    commits: int = 0  # commits of the log (revisions)
    reparks: int = 0  # row updates that only moved the wake time
    last_delay_s: float = 0.0


def settings(**escalation: float) -> Settings:
    return Settings(retry_base_s=0.01, retry_cap_s=0.05, escalation=EscalationConfig(**escalation))


async def unknown_outcome_run(world: EngineWorld) -> str:
    """A run whose write was cut off by a crash while its tool host went down: UNKNOWN_OUTCOME."""
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(world.tools.handlers["refund.issue"].entered)  # type: ignore[attr-defined]
    await world.crash(task)
    world.tools.ledger[world.tools.calls[0].metadata.idempotency_key] = "running"
    world.tools.unreachable = True
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME"
    return run_id


async def claim_when_due(world: EngineWorld, run_id: str, until_s: float, waited: Waited) -> None:
    """Claim and drive the run at each of its wake times before ``until_s`` (or until it ends)."""
    while True:
        record = world.log.runs[run_id]
        if Phase(record.phase).terminal or record.wake_ms is None or record.wake_ms / 1000 > until_s:
            return
        assert record.lease_owner is None  # parked: the lease was given back
        waited.last_delay_s = record.wake_ms / 1000 - world.clock()
        world.clock.now_s = max(world.clock(), record.wake_ms / 1000)
        commits, reparks = world.log.appends, world.log.reparks
        waited.claims += 1
        world.take_over(run_id, f"worker-{waited.claims + 2}")
        await world.drive(run_id)
        waited.commits += world.log.appends - commits
        waited.reparks += world.log.reparks - reparks


def long_budget_world(handler: object, **escalation: float) -> EngineWorld:
    world = refund_world(handler, budgets=BudgetsConfig(timeout_s=86400))
    world.settings = settings(**escalation)
    return world


async def test_a_parked_unknown_outcome_backs_off_to_its_cap_and_costs_no_commit_while_nothing_changes() -> (
    None
):
    world = long_budget_world(Gated())
    run_id = await unknown_outcome_run(world)
    start = world.clock()
    waited = Waited()

    await claim_when_due(world, run_id, start + 600, waited)

    record = world.log.runs[run_id]
    print(
        f"\n10 min in UNKNOWN_OUTCOME, host down: {waited.claims} claims, {waited.commits} log commits, "
        f"{waited.reparks} re-parks (row updates); attempts {record.reconcile_attempts}; "
        f"last interval {waited.last_delay_s:.1f}s"
    )
    assert record.phase == "UNKNOWN_OUTCOME" and record.reconcile_attempts == waited.claims + 1
    assert waited.commits == 0  # nothing new to record: no revision, no event
    assert waited.claims <= 16 and waited.reparks == waited.claims
    assert 54 <= record.wake_ms / 1000 - world.clock() <= 60  # grown to the 60 s cap, less jitter

    # The host is back with the write's outcome: the next due claim settles it.
    world.tools.unreachable = False
    world.tools.ledger[world.tools.calls[0].metadata.idempotency_key] = ToolOutcome('{"late": 1}', None)
    back = world.clock()
    await claim_when_due(world, run_id, back + 120, waited)
    assert world.log.phase(run_id) == "COMPLETED"
    settled = world.clock() - back
    print(f"settled {settled:.1f}s after the host's return (one interval is at most 60s)")
    assert settled <= 60
    assert world.log.runs[run_id].reconcile_attempts == 0  # a later unknown outcome starts afresh
    assert len(world.tools.calls) == 1  # never re-sent


async def test_the_attempt_count_survives_a_new_owner() -> None:
    world = long_budget_world(Gated())
    run_id = await unknown_outcome_run(world)
    waited = Waited()
    await claim_when_due(world, run_id, world.clock() + 20, waited)
    attempts = world.log.runs[run_id].reconcile_attempts
    assert attempts >= 4
    # A worker that never saw this run before takes it: the backoff goes on from the row's count.
    world.handles.clear()
    before = world.clock()
    await claim_when_due(world, run_id, world.clock() + 1000, Waited())  # one claim is enough to look
    assert world.log.runs[run_id].reconcile_attempts > attempts
    assert world.clock() - before >= 2 ** (attempts - 1) * 0.9


async def test_an_unknown_outcome_escalates_by_age_then_waits_up_to_the_operator_cap() -> None:
    world = long_budget_world(Gated(), unknown_outcome_after_s=120, operator_wait_cap_s=3600)
    run_id = await unknown_outcome_run(world)
    start = world.clock()
    waited = Waited()

    await claim_when_due(world, run_id, start + 119, waited)
    assert "run.escalated" not in world.log.types(run_id)
    await claim_when_due(world, run_id, start + 125, waited)

    escalated = world.log.payloads(run_id, "run.escalated")
    assert len(escalated) == 1 and escalated[0]["reason"] == "unknown_outcome_age"
    assert 120 <= float(escalated[0]["age"].rstrip("s")) < 125 and escalated[0]["call_id"] == "c1"
    record = world.log.runs[run_id]
    assert record.phase == "UNKNOWN_OUTCOME" and record.needs_attention
    assert world.counters.get("escalated_count") == 1

    # A person is the likelier answer now: the queries spread out past the 60 s cap, escalated once.
    await claim_when_due(world, run_id, start + 4 * 3600, waited)
    assert waited.last_delay_s > 60 and len(world.log.payloads(run_id, "run.escalated")) == 1

    world.tools.unreachable = False
    world.tools.ledger[world.tools.calls[0].metadata.idempotency_key] = ToolOutcome("{}", None)
    await claim_when_due(world, run_id, start + 8 * 3600, waited)
    assert world.log.phase(run_id) == "COMPLETED" and not world.log.runs[run_id].needs_attention


async def test_an_unknown_outcome_past_the_deadline_escalates_and_is_never_failed() -> None:
    world = refund_world(Gated(), budgets=BudgetsConfig(timeout_s=30))
    world.settings = settings(unknown_outcome_after_s=0)  # by age: never; the deadline still counts
    run_id = await unknown_outcome_run(world)
    waited = Waited()

    await claim_when_due(world, run_id, world.clock() + 600, waited)

    record = world.log.runs[run_id]
    assert record.phase == "UNKNOWN_OUTCOME" and record.needs_attention  # R4.4: not FAILED, not EXPIRED
    (escalated,) = world.log.payloads(run_id, "run.escalated")
    assert escalated["reason"] == "unknown_outcome_past_deadline"

    world.tools.unreachable = False
    world.tools.ledger[world.tools.calls[0].metadata.idempotency_key] = ToolOutcome('{"ok": 1}', None)
    await claim_when_due(world, run_id, world.clock() + 86400, waited)
    # Settled with the real outcome, then ended at its deadline: partial, and it says what was done.
    assert world.log.phase(run_id) == "EXPIRED"
    (ended,) = world.log.payloads(run_id, "run.ended")
    assert ended["partial"] and ended["completed_calls"] == [
        {"call_id": "c1", "tool": "refund.issue", "step": 2}
    ]
    assert json.loads(world.log.runs[run_id].call_summary or "{}") == {
        "completed_calls": [{"call_id": "c1", "tool": "refund.issue", "step": 2}]
    }


async def test_an_approval_wait_escalates_by_age_once_and_parks_until_its_expiry() -> None:
    world = refund_world(ok({"refunded": True}), approvals=ApprovalsConfig(timeout_s=3600))
    world.settings = settings(approval_after_s=60)
    world.tools.specs["refund.issue"].requires_approval = True
    run_id = world.create_run()
    await world.drive(run_id)
    record = world.log.runs[run_id]
    asked = world.clock()
    assert record.phase == "WAITING_APPROVAL" and record.wake_ms == round((asked + 60) * 1000)

    waited = Waited()
    await claim_when_due(world, run_id, asked + 61, waited)
    record = world.log.runs[run_id]
    (escalated,) = world.log.payloads(run_id, "run.escalated")
    assert escalated["reason"] == "approval_age" and escalated["approval_id"]
    assert record.needs_attention and record.phase == "WAITING_APPROVAL"
    assert record.wake_ms == round((asked + 3600) * 1000)  # back to the expiry: no claim before it
    assert waited.claims == 1

    pending = world.log.payloads(run_id, "approval.requested")[0]
    decision = {"approval_id": pending["approval_id"], "decision": "APPROVAL_DECISION_APPROVE"}
    world.log.add_signal(run_id, "approval_decision", decision)
    world.take_over(run_id, "worker-9")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED" and not world.log.runs[run_id].needs_attention


async def test_a_cancelled_run_lists_what_was_done_and_what_was_not() -> None:
    entered = asyncio.Event()

    async def slow_lookup(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        entered.set()
        await asyncio.Event().wait()  # cut by the cancel (a read)
        raise AssertionError("unreachable")

    world = EngineWorld(agent=AgentConfig(tools=["orders.lookup", "refund.issue", "mail.send"]))
    world.tools.add("refund.issue", ok({"refunded": True}))
    world.tools.add("orders.lookup", slow_lookup, side_effect="read")
    world.tools.add("mail.send", ok({"sent": True}))
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(tool_calls=[("c2", "orders.lookup", ARGS), ("c3", "mail.send", "{}")])
    run_id = world.create_run()
    task = world.start(run_id)
    await wait_for(entered)
    world.cancel(run_id)
    await asyncio.wait_for(task, 5)

    assert world.log.phase(run_id) == "CANCELLED"
    (ended,) = world.log.payloads(run_id, "run.ended")
    assert ended["partial"]
    assert ended["completed_calls"] == [{"call_id": "c1", "tool": "refund.issue", "step": 2}]
    assert [c["call_id"] for c in ended["not_completed_calls"]] == ["c2", "c3"]
    assert ended["not_completed_calls"][1]["detail"] == "not_started"
    assert ended["not_completed_calls"][0]["detail"].startswith("TOOL_ERROR_CODE_")
    assert "unknown_calls" not in ended
