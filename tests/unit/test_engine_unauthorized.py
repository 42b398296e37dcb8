"""A tool's UNAUTHORIZED fails the run, or pauses it for a person where the agent says so (R6.3).

In-process, the real step loop over the testing package's fakes: the pause is a WAITING_APPROVAL
whose approval sends the very call again under its key, whose rejection or expiry fails the run.
"""

from __future__ import annotations

from agentrt.server.config import ApprovalsConfig
from agentrt.server.core import UNAUTHORIZED_PAUSE, ApprovalDecision, ToolOutcome
from agentrt.server.tools import CallMetadata
from agentrt.testing.engine import EngineWorld
from tests.unit.test_engine_in_process import refund_world
from tests.unit.test_engine_signals import answer, queue, resume


class Guarded:
    """A write that refuses the host's credentials until a test fixes them."""

    def __init__(self) -> None:
        self.fixed = False
        self.calls = 0
        self.effects = 0

    async def __call__(self, arguments_json: str, metadata: CallMetadata) -> ToolOutcome:
        self.calls += 1
        if not self.fixed:
            return ToolOutcome.failure("UNAUTHORIZED", "the payments API refused the host's key")
        self.effects += 1
        return ToolOutcome('{"refunded": true}', None)


def world_with(policy: str) -> tuple[EngineWorld, Guarded]:
    tool = Guarded()
    world = refund_world(tool, on_tool_unauthorized=policy, approvals=ApprovalsConfig(timeout_s=600))
    return world, tool


async def test_by_default_unauthorized_fails_the_run_and_the_model_is_not_asked() -> None:
    world, tool = world_with("fail")
    run_id = world.create_run()

    await world.drive(run_id)

    assert world.log.phase(run_id) == "FAILED"
    (ended,) = world.log.payloads(run_id, "run.ended")
    assert ended["reason"] == "tool_unauthorized:refund.issue"
    assert len(world.models.requests) == 1 and tool.calls == 1


async def test_a_pause_approved_once_fixed_sends_the_same_call_again_and_the_run_completes() -> None:
    world, tool = world_with("pause")
    run_id = world.create_run()
    await world.drive(run_id)

    assert world.log.phase(run_id) == "WAITING_APPROVAL"
    assert "tool.failed" not in world.log.types(run_id)  # nothing recorded of the call yet
    (asked,) = world.log.payloads(run_id, "approval.requested")
    assert asked["policy_version"] == UNAUTHORIZED_PAUSE and asked["tool"] == "refund.issue"
    assert "refused the runtime's authority" in str(asked["impact_summary"])

    tool.fixed = True
    queue(world, run_id, answer(asked, ApprovalDecision.APPROVE, comment="rotated the key"))
    await resume(world, run_id, "worker-2")

    assert world.log.phase(run_id) == "COMPLETED"
    assert tool.calls == 2 and tool.effects == 1
    first, again = world.tools.calls
    assert first.metadata.idempotency_key == again.metadata.idempotency_key  # the same call
    assert again.metadata.attempt == 2
    assert len(world.models.requests) == 2  # the model saw the result, never the refusal


async def test_a_pause_rejected_fails_the_run_and_lists_the_call_as_not_done() -> None:
    world, tool = world_with("pause")
    run_id = world.create_run()
    await world.drive(run_id)
    (asked,) = world.log.payloads(run_id, "approval.requested")

    queue(world, run_id, answer(asked, ApprovalDecision.REJECT, comment="the account is closed"))
    await resume(world, run_id, "worker-2")

    assert world.log.phase(run_id) == "FAILED"
    (ended,) = world.log.payloads(run_id, "run.ended")
    assert ended["reason"] == "tool_unauthorized:refund.issue"
    assert [c["call_id"] for c in ended["not_completed_calls"]] == ["c1"] and not ended.get("unknown_calls")
    (failed,) = world.log.payloads(run_id, "tool.failed")
    assert (
        failed["error"]["code"] == "TOOL_ERROR_CODE_UNAUTHORIZED"
        and "rejected by bob" in failed["error"]["message"]
    )
    assert tool.calls == 1 and tool.effects == 0


async def test_a_pause_nobody_answers_fails_the_run_at_its_expiry() -> None:
    world, tool = world_with("pause")
    run_id = world.create_run()
    await world.drive(run_id)
    assert world.log.phase(run_id) == "WAITING_APPROVAL"

    world.clock.advance(601)
    await resume(world, run_id, "worker-2")

    assert world.log.phase(run_id) == "FAILED"
    (failed,) = world.log.payloads(run_id, "tool.failed")
    assert "the pause expired" in failed["error"]["message"]
    assert tool.calls == 1
