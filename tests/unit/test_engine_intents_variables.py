"""Deduplicated results, re-checks of approved calls and run variables, in the step loop (in-process).

The engine runs on the fakes of ``agentrt.testing.engine``; the process-level tests
(tests/e2e/test_intents_rechecks_variables.py) prove the same through a real tool host.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from agentrt.server.config import AgentConfig, ApprovalsConfig
from agentrt.server.policies import hookimpl
from agentrt.server.tools import CallMetadata, ToolOutcome
from agentrt.testing.engine import EngineWorld

LOOKUP = '{"order_id": "A100"}'
REFUND = '{"order_id": "A100", "amount": 30}'


def answer(result: Any) -> Callable[[str, CallMetadata], Any]:
    async def handler(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome(json.dumps(result), None)

    return handler


def world_with(*, policies: tuple[object, ...] = (), lookup: Any = None) -> EngineWorld:
    """lookup, then an approved refund, then an answer."""
    world = EngineWorld(
        agent=AgentConfig(tools=["orders.lookup", "refund.issue"], approvals=ApprovalsConfig(timeout_s=600)),
        policy_plugins=policies,
    )
    found = lookup if lookup is not None else {"status": "delivered", "amount": 120}
    world.tools.add("orders.lookup", answer(found), side_effect="read", idempotent=True)
    world.tools.add("refund.issue", answer({"refund_id": "RF-1"}), requires_approval=True)
    world.models.answer(tool_calls=[("c1", "orders.lookup", LOOKUP)])
    world.models.answer(tool_calls=[("c2", "refund.issue", REFUND)])
    world.models.answer(text="done")
    return world


async def approve(world: EngineWorld, run_id: str, **extra: object) -> None:
    await world.drive(run_id)
    assert world.log.phase(run_id) == "WAITING_APPROVAL"
    (asked,) = world.log.payloads(run_id, "approval.requested")
    decision = {"approval_id": asked["approval_id"], "decision": "APPROVAL_DECISION_APPROVE", **extra}
    world.log.add_signal(run_id, "approval_decision", decision)
    world.take_over(run_id, "worker-2")
    await world.drive(run_id)


class Veto:
    """A re-check policy: vetoes refunds, after reading the order through ``read_tool``."""

    def __init__(self, *, read: str = "orders.lookup", raise_: bool = False) -> None:
        self.read = read
        self.raise_ = raise_
        self.seen: list[dict[str, Any]] = []

    @hookimpl(optionalhook=True)
    def agentrt_recheck_approved(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        run_variables: Mapping[str, Any],
        read_tool: Callable[[str, Mapping[str, Any]], Any],
    ) -> str | None:
        if self.raise_:
            raise RuntimeError("policy store down")
        order = read_tool(self.read, {"order_id": arguments["order_id"]})
        self.seen.append({"tool": tool, "order": order, "variables": dict(run_variables)})
        return "order A100 was cancelled" if order.get("status") == "cancelled" else None


# -- re-checks --------------------------------------------------------------------------------------


async def test_a_vetoed_approved_call_never_runs_and_the_model_sees_why() -> None:
    policy = Veto()
    world = world_with(policies=(policy,), lookup={"status": "cancelled", "amount": 120})
    run_id = world.create_run()

    await approve(world, run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert world.tools.calls_of("refund.issue") == []
    failed = world.log.payloads(run_id, "tool.failed")
    assert failed[0]["error"]["code"] == "TOOL_ERROR_CODE_PERMANENT"
    assert failed[0]["error"]["message"] == "vetoed: order A100 was cancelled"
    last = world.models.requests[-1].messages[-1]
    assert last.role == "tool" and "vetoed: order A100 was cancelled" in last.content
    assert world.counters.get("recheck_veto_count") == 1
    # The re-check read the order through the engine, for this run, under a key of its own.
    reads = world.tools.calls_of("orders.lookup")
    assert len(reads) == 2 and reads[1].metadata.run_id == run_id
    assert reads[1].metadata.idempotency_key.startswith("recheck-")
    assert reads[1].metadata.idempotency_key != reads[0].metadata.idempotency_key


async def test_a_re_check_that_passes_runs_the_approved_call_once() -> None:
    policy = Veto()
    world = world_with(policies=(policy,))
    run_id = world.create_run()

    await approve(world, run_id)

    assert world.log.phase(run_id) == "COMPLETED"
    assert len(world.tools.calls_of("refund.issue")) == 1
    assert len(policy.seen) == 1 and policy.seen[0]["tool"] == "refund.issue"


async def test_a_re_check_that_raises_vetoes() -> None:
    world = world_with(policies=(Veto(raise_=True),))
    run_id = world.create_run()

    await approve(world, run_id)

    assert world.tools.calls_of("refund.issue") == []
    (failed,) = world.log.payloads(run_id, "tool.failed")
    assert failed["error"]["message"] == "vetoed: the re-check failed: RuntimeError: policy store down"


async def test_a_re_check_may_read_only_through_read_only_tools() -> None:
    world = world_with(policies=(Veto(read="refund.issue"),))
    run_id = world.create_run()

    await approve(world, run_id)

    assert world.tools.calls_of("refund.issue") == []
    (failed,) = world.log.payloads(run_id, "tool.failed")
    assert "ReadToolError: 'refund.issue' is not a read-only tool" in failed["error"]["message"]


async def test_calls_nobody_approved_are_not_re_checked() -> None:
    policy = Veto()
    world = world_with(policies=(policy,), lookup={"status": "cancelled", "amount": 120})
    world.tools.specs["refund.issue"].requires_approval = False
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "COMPLETED" and policy.seen == []
    assert len(world.tools.calls_of("refund.issue")) == 1


# -- overriding an intent through approval ----------------------------------------------------------


async def test_only_an_approval_with_override_lets_the_call_repeat_an_intent() -> None:
    plain = world_with()
    run_id = plain.create_run()
    await approve(plain, run_id)
    (refund,) = plain.tools.calls_of("refund.issue")
    assert refund.metadata.intent_override is False

    overriding = world_with()
    run_id = overriding.create_run()
    await approve(overriding, run_id, override_intent=True)
    (refund,) = overriding.tools.calls_of("refund.issue")
    assert refund.metadata.intent_override is True
    (resolved,) = overriding.log.payloads(run_id, "approval.resolved")
    assert resolved["override_intent"] is True


async def test_a_deduplicated_result_is_recorded_as_such_and_the_model_is_told() -> None:
    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"]))

    async def duplicate(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        first = {"intent_key": "ab", "idempotency_key": "k1", "run_id": "r0", "call_id": "c0"}
        return ToolOutcome('{"refund_id": "RF-1"}', None, deduplicated=True, duplicate_of=first)

    world.tools.add("refund.issue", duplicate)
    world.models.answer(tool_calls=[("c1", "refund.issue", REFUND)])
    world.models.answer(text="done")
    run_id = world.create_run()

    await world.drive(run_id)

    (completed,) = world.log.payloads(run_id, "tool.completed")
    assert completed["deduplicated"] is True and completed["duplicate_of"]["call_id"] == "c0"
    assert completed["result_json"] == '{"refund_id": "RF-1"}'  # the log keeps the recorded result
    shown = json.loads(world.models.requests[-1].messages[-1].content)
    assert shown["deduplicated"] is True and shown["result"] == {"refund_id": "RF-1"}
    assert "Not run again" in shown["note"] and "call c0" in shown["note"]
    assert world.counters.get("duplicate_suppressed_count") == 1


# -- run variables ----------------------------------------------------------------------------------


async def test_a_tool_result_sets_run_variables_seen_by_approvals_re_checks_and_the_row() -> None:
    policy = Veto()
    lookup = {"status": "delivered", "_set_variables": {"order_id": "A100", "verified": True, "n": 2}}
    world = world_with(policies=(policy,), lookup=lookup)
    run_id = world.create_run()

    await approve(world, run_id)

    expected = {"order_id": "A100", "verified": True, "n": 2}
    (set_,) = world.log.payloads(run_id, "variables.set")
    assert set_ == {"step": 2, "call_id": "c1", "tool": "orders.lookup", "variables": expected}
    (asked,) = world.log.payloads(run_id, "approval.requested")
    assert asked["variables"] == expected
    assert policy.seen[0]["variables"] == expected
    assert json.loads(world.log.runs[run_id].variables or "") == expected
    assert world.log.phase(run_id) == "COMPLETED"


async def test_a_null_removes_a_variable() -> None:
    world = EngineWorld(agent=AgentConfig(tools=["noop.echo"]))

    async def echo(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome(arguments_json, None)

    world.tools.add("noop.echo", echo, side_effect="read", idempotent=True)
    world.models.answer(tool_calls=[("c1", "noop.echo", '{"_set_variables": {"a": "x", "b": 1}}')])
    world.models.answer(tool_calls=[("c2", "noop.echo", '{"_set_variables": {"a": null}}')])
    world.models.answer(text="done")
    run_id = world.create_run()

    await world.drive(run_id)

    assert json.loads(world.log.runs[run_id].variables or "") == {"b": 1}
    assert world.log.payloads(run_id, "variables.set")[1]["removed"] == ["a"]


async def test_hostile_variables_are_refused_with_a_reason_and_the_run_goes_on() -> None:
    world = EngineWorld(agent=AgentConfig(tools=["noop.echo"]))

    async def echo(arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        return ToolOutcome(arguments_json, None)

    world.tools.add("noop.echo", echo, side_effect="read", idempotent=True)
    asks = [
        {f"v{i}": i for i in range(65)},
        {"note": "x" * 2000},
        {"api_token": "abc"},
        {"ok": "fine"},
    ]
    for i, ask in enumerate(asks):
        world.models.answer(tool_calls=[(f"c{i}", "noop.echo", json.dumps({"_set_variables": ask}))])
    world.models.answer(text="done")
    run_id = world.create_run()

    await asyncio.wait_for(world.drive(run_id), 10)

    assert world.log.phase(run_id) == "COMPLETED"
    reasons = [p.get("refused_reason", "") for p in world.log.payloads(run_id, "variables.set")]
    assert reasons[0] == "variables refused: 65 variables asked for; at most 64"
    assert reasons[1] == "variables refused: note: the string is over 1024 bytes"
    assert "looks like a secret's" in reasons[2]
    assert reasons[3] == ""
    assert json.loads(world.log.runs[run_id].variables or "") == {"ok": "fine"}
    assert world.counters.get("variables_refused_count") == 3
