"""People's decisions applied by the run's owner, in-process: typed signals queued as the store
queues them, the row the API decides against agreeing with the state the owner folds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

from agentrt.server.config import AgentConfig, ApprovalsConfig, BudgetsConfig
from agentrt.server.core import (
    ApprovalDecision,
    CancelRun,
    GrantBudget,
    OutcomeDecision,
    QueuedSignal,
    ResolveApproval,
    ResolveOutcome,
    RunSignal,
    SignalTarget,
    decide_signal,
    parse_rfc3339_ms,
    replay,
)
from agentrt.server.store import Signal, decode_event, encode_signal, signal_target
from agentrt.testing.engine import EngineWorld
from tests.unit.test_engine_in_process import ARGS, Gated, ok, refund_world
from tests.unit.test_engine_waits import unknown_outcome_run


def queue(world: EngineWorld, run_id: str, signal: QueuedSignal) -> None:
    """Queue ``signal`` as the store does: its kind and payload as ``encode_signal`` writes them."""
    queued = world.log.signals.setdefault(run_id, [])
    kind, payload = encode_signal(signal)
    queued.append(Signal(len(queued) + 1000, run_id, kind, payload))


async def paused_for_approval() -> tuple[EngineWorld, str, dict[str, object]]:
    world = refund_world(ok({"refunded": True}), approvals=ApprovalsConfig(timeout_s=600))
    world.tools.specs["refund.issue"].requires_approval = True
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "WAITING_APPROVAL"
    (asked,) = world.log.payloads(run_id, "approval.requested")
    return world, run_id, asked


def answer(asked: dict[str, object], decision: ApprovalDecision, **changes: object) -> ResolveApproval:
    signal = ResolveApproval(
        approval_id=str(asked["approval_id"]),
        decision=decision,
        args_hash=str(asked["args_hash"]),
        approver="bob",
    )
    return dataclasses.replace(signal, **changes)  # type: ignore[arg-type]


async def resume(world: EngineWorld, run_id: str, owner: str) -> None:
    world.take_over(run_id, owner)
    await world.drive(run_id)


def folded(world: EngineWorld, run_id: str) -> SignalTarget:
    state = replay(run_id, [decode_event(e.type, e.payload) for e in world.log.events[run_id]])
    return SignalTarget.of_state(state)


async def test_an_approval_runs_the_call_once_and_its_wait_is_not_spent_from_the_deadline() -> None:
    world, run_id, asked = await paused_for_approval()
    deadline_ms = world.log.runs[run_id].deadline_ms
    world.clock.advance(120)
    queue(world, run_id, answer(asked, ApprovalDecision.APPROVE, comment="fine"))
    await resume(world, run_id, "worker-2")

    assert world.log.phase(run_id) == "COMPLETED" and len(world.tools.calls) == 1
    (resolved,) = world.log.payloads(run_id, "approval.resolved")
    assert (resolved["decision"], resolved["approver"], resolved["comment"]) == (
        "APPROVAL_DECISION_APPROVE",
        "bob",
        "fine",
    )
    assert world.log.runs[run_id].deadline_ms == deadline_ms + 120_000
    assert world.log.signals[run_id] == []


async def test_a_rejection_never_runs_the_call_and_the_model_sees_it() -> None:
    world, run_id, asked = await paused_for_approval()
    queue(world, run_id, answer(asked, ApprovalDecision.REJECT, comment="too much"))
    await resume(world, run_id, "worker-2")

    assert world.log.phase(run_id) == "COMPLETED" and world.tools.calls == []
    (failed,) = world.log.payloads(run_id, "tool.failed")
    assert failed["error"]["message"] == "rejected by bob: too much"
    tool_message = world.models.requests[-1].messages[-1]
    assert tool_message.role == "tool" and "rejected by bob" in tool_message.content


async def test_a_decision_the_run_moved_past_is_consumed_and_changes_nothing() -> None:
    world, run_id, asked = await paused_for_approval()
    queue(world, run_id, answer(asked, ApprovalDecision.APPROVE, args_hash="0" * 64))  # forged
    queue(world, run_id, answer(asked, ApprovalDecision.APPROVE, approval_id="old"))
    world.log.signals[run_id].append(Signal(9, run_id, "from_the_future", "{}"))  # undecodable: dropped
    before = list(world.log.events[run_id])
    await resume(world, run_id, "worker-2")

    assert world.log.events[run_id] == before and world.tools.calls == []
    assert world.log.phase(run_id) == "WAITING_APPROVAL" and world.log.signals[run_id] == []


async def test_an_expired_approval_is_not_applied_when_it_arrives_late() -> None:
    world, run_id, asked = await paused_for_approval()
    queue(world, run_id, answer(asked, ApprovalDecision.APPROVE))
    world.clock.now_s = parse_rfc3339_ms(str(asked["expire_time"])) / 1000  # it expired meanwhile
    await resume(world, run_id, "worker-2")
    assert world.log.payloads(run_id, "approval.resolved") == [] and world.tools.calls == []


async def budget_paused() -> tuple[EngineWorld, str, dict[str, object]]:
    world = EngineWorld(
        agent=AgentConfig(
            tools=["refund.issue"],
            on_budget_exhausted="pause",
            budgets=BudgetsConfig(max_tool_calls=1),
            approvals=ApprovalsConfig(timeout_s=600),
        )
    )
    world.tools.add("refund.issue", ok({"refunded": True}))
    world.models.answer(tool_calls=[("c1", "refund.issue", ARGS)])
    world.models.answer(tool_calls=[("c2", "refund.issue", '{"order_id": "A200"}')])
    world.models.answer(text="both refunded")
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "WAITING_APPROVAL"
    (asked,) = world.log.payloads(run_id, "approval.requested")
    assert asked["tool"] == "budget.tool_calls" and not asked.get("call_id")
    return world, run_id, asked


def grant(asked: dict[str, object], decision: ApprovalDecision) -> GrantBudget:
    return GrantBudget(
        approval_id=str(asked["approval_id"]),
        decision=decision,
        args_hash=str(asked["args_hash"]),
        approver="bob",
    )


async def test_a_budget_grant_doubles_the_limit_and_the_run_goes_on() -> None:
    world, run_id, asked = await budget_paused()
    queue(world, run_id, grant(asked, ApprovalDecision.APPROVE))
    await resume(world, run_id, "worker-2")
    record = world.log.runs[run_id]
    assert record.phase == "COMPLETED" and len(world.tools.calls) == 2
    assert json.loads(record.budgets)["max_tool_calls"] == 2


async def test_a_refused_grant_ends_the_run_and_an_approval_cannot_stand_for_a_grant() -> None:
    world, run_id, asked = await budget_paused()
    queue(world, run_id, answer(asked, ApprovalDecision.APPROVE))  # the wrong kind: changes nothing
    queue(world, run_id, grant(asked, ApprovalDecision.REJECT))
    await resume(world, run_id, "worker-2")
    record = world.log.runs[run_id]
    assert (record.phase, record.reason) == ("FAILED", "budget_exhausted:tool_calls")
    assert len(world.tools.calls) == 1 and len(world.log.payloads(run_id, "approval.resolved")) == 1


async def unknown_world() -> tuple[EngineWorld, str]:
    world = refund_world(Gated())
    run_id = await unknown_outcome_run(world)
    return world, run_id


async def test_a_person_settles_an_unknown_write_as_succeeded_with_their_result() -> None:
    world, run_id = await unknown_world()
    assert world.log.runs[run_id].unknown_call_id == "c1"  # the row names the call for the API
    signal = ResolveOutcome(
        call_id="c1", decision=OutcomeDecision.SUCCEEDED, resolved_by="ops", result_json='{"refunded": true}'
    )
    queue(world, run_id, signal)
    world.tools.unreachable = False
    await resume(world, run_id, "worker-3")
    record = world.log.runs[run_id]
    assert record.phase == "COMPLETED" and record.unknown_call_id is None
    (completed,) = world.log.payloads(run_id, "tool.completed")
    assert completed["result_json"] == '{"refunded": true}'
    assert len(world.tools.calls) == 1  # never sent again


async def test_a_person_asks_for_an_unknown_write_again_under_the_same_key() -> None:
    world, run_id = await unknown_world()
    key = world.tools.calls[0].metadata.idempotency_key
    del world.tools.ledger[key]  # the host never ran it, the person checked
    world.tools.unreachable = False
    world.tools.handlers["refund.issue"] = ok({"refunded": True})
    queue(world, run_id, ResolveOutcome(call_id="c1", decision=OutcomeDecision.RETRY, resolved_by="ops"))
    await resume(world, run_id, "worker-3")
    assert world.log.phase(run_id) == "COMPLETED"
    assert [c.metadata.idempotency_key for c in world.tools.calls] == [key, key]
    (resolved,) = world.log.payloads(run_id, "outcome.resolved")
    assert resolved["decision"] == "OUTCOME_DECISION_RETRY"


async def test_a_decision_about_another_call_leaves_the_unknown_write_alone() -> None:
    world, run_id = await unknown_world()
    queue(world, run_id, ResolveOutcome(call_id="c9", decision=OutcomeDecision.FAILED, resolved_by="ops"))
    before = len(world.log.events[run_id])
    await resume(world, run_id, "worker-3")
    assert world.log.phase(run_id) == "UNKNOWN_OUTCOME" and len(world.log.events[run_id]) == before


def signals_for(target: SignalTarget, now_ms: int) -> Iterable[tuple[RunSignal, int]]:
    pending = target.pending_approval
    approval_id = pending.approval_id if pending is not None else "none"
    args_hash = pending.args_hash if pending is not None else ""
    expire_ms = pending.expire_ms if pending is not None else now_ms
    for decision in ApprovalDecision:
        for hash_ in (args_hash, "0" * 64):
            for at in (now_ms, expire_ms):
                yield (
                    ResolveApproval(
                        approval_id=approval_id, decision=decision, args_hash=hash_, approver="b"
                    ),
                    at,
                )
                yield (
                    GrantBudget(approval_id=approval_id, decision=decision, args_hash=hash_, approver="b"),
                    at,
                )
        yield (
            ResolveApproval(approval_id="other", decision=decision, args_hash=args_hash, approver="b"),
            now_ms,
        )
    for decision_ in OutcomeDecision:
        for call_id in ("c1", "c9"):
            yield ResolveOutcome(call_id=call_id, decision=decision_, resolved_by="o"), now_ms
    yield CancelRun(reason="stop", requested_by="a"), now_ms


async def test_the_row_the_api_reads_decides_as_the_state_the_owner_folds() -> None:
    """For runs waiting on an approval, a budget and an unknown write, and ended ones: every signal
    gets the same verdict from the row (what ResolveApproval/ResolveOutcome/CancelRun answer) as
    from the folded log (what the owner applies)."""
    runs = [await paused_for_approval(), await budget_paused()]
    worlds = [(w, r) for w, r, _ in runs] + [await unknown_world()]
    done = refund_world(ok({"refunded": True}))
    worlds.append((done, done.create_run()))
    await done.drive(worlds[-1][1])
    for world, run_id in worlds:
        record = world.log.runs[run_id]
        at_api, at_owner = signal_target(record), folded(world, run_id)
        assert at_api.phase == at_owner.phase and at_api.pending_approval == at_owner.pending_approval
        now_ms = int(world.clock() * 1000)
        for signal, at in signals_for(at_owner, now_ms):
            api = decide_signal(at_api, signal, now_ms=at, expected_revision=record.revision)
            owner = decide_signal(at_owner, signal, now_ms=at)
            assert (api is None) == (owner is None), (record.phase, signal)
            if api is not None and owner is not None:
                assert api.error.reason == owner.error.reason, (record.phase, signal)
