"""Calls that wait for a person (DESIGN §7): ask, pause, and apply the answer.

The run pauses in WAITING_APPROVAL with the canonical arguments, their sha256, the
tool host's impact preview, the policy version and an expiry, then gives its lease
back. ResolveApproval queues a signal; the next owner applies it: approve runs the
very same call (same idempotency key), reject shows the model a rejection and the
tool never runs. Waiting does not spend the run's wall-clock budget.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import uuid
from typing import Any

from agentrt.server.core import (
    BUDGET_PREFIX,
    ApprovalRequested,
    ApprovalResolved,
    Budgets,
    CallState,
    Phase,
    ToolError,
    ToolErrorCode,
    ToolFailed,
    canonical_json,
    end_events,
    format_usd,
    loads_bounded,
    rfc3339,
)
from agentrt.server.engine._run import RunContext
from agentrt.server.policies import ApprovalRequirement
from agentrt.server.store import approval_decision_from_json

PREVIEW_TIMEOUT_S = 5.0


class ApprovalStep:
    """The approval side of a run's steps."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self._requirements: dict[str, ApprovalRequirement] = {}

    def needing_approval(self) -> frozenset[str]:
        """Ids of this step's calls that need a person, asking the policy hooks once per call."""
        ctx = self.ctx
        config = ctx.agent.config
        for call in ctx.state.calls:
            if call.call_id not in self._requirements:
                spec = ctx.ports.tools.spec(call.tool)
                self._requirements[call.call_id] = ctx.ports.policies.approval(
                    tool=call.tool,
                    arguments_json=call.arguments_json,
                    agent_name=ctx.agent.name,
                    options=config.approvals.options,
                    flagged=bool(spec is not None and spec.requires_approval),
                )
        return frozenset(c for c, r in self._requirements.items() if r.required)

    async def request(self, call: CallState) -> None:
        """Persist WAITING_APPROVAL for ``call`` and park the run until its expiry."""
        d, ports = self.ctx, self.ctx.ports
        try:
            canonical = canonical_json(loads_bounded(call.arguments_json or "{}"))
        except ValueError:
            canonical = call.arguments_json
        impact = await ports.tools.preview(
            call.tool, canonical, metadata=d.call_metadata(call), timeout_s=PREVIEW_TIMEOUT_S
        )
        requirement = self._requirements.get(call.call_id)
        now_ms = ports.now_ms()
        expire_ms = now_ms + math.ceil(d.agent.config.approvals.timeout_s * 1000)
        spec = ports.tools.spec(call.tool)
        asked = ApprovalRequested(
            approval_id=uuid.uuid4().hex,
            call_id=call.call_id,
            tool=call.tool,
            arguments_json=canonical,
            args_hash=hashlib.sha256(canonical.encode()).hexdigest(),  # = core.args_hash for JSON
            impact_summary=impact,
            policy_version=requirement.policy_version if requirement else "1",
            expire_time=rfc3339(expire_ms),
            request_time=rfc3339(now_ms),
            tool_version=spec.version if spec is not None and spec.version else None,
        )
        d.add(asked)
        await d.park(expire_ms)

    async def request_budget(self, budget: str) -> None:
        """Persist WAITING_APPROVAL for more of a spent budget (the agent's policy) and park."""
        d, ports = self.ctx, self.ctx.ports
        limit, grant, _ = budget_grant(d.budgets, budget)
        now_ms = ports.now_ms()
        expire_ms = now_ms + math.ceil(d.agent.config.approvals.timeout_s * 1000)
        arguments = canonical_json({"budget": budget, "limit": limit, "grant": grant})
        asked = ApprovalRequested(
            approval_id=uuid.uuid4().hex,
            call_id="",
            tool=f"{BUDGET_PREFIX}{budget}",
            arguments_json=arguments,
            args_hash=hashlib.sha256(arguments.encode()).hexdigest(),
            impact_summary=f"The run spent its {budget} budget ({_amount(budget, limit)}). Approving "
            f"raises it to {_amount(budget, grant)} and the run goes on; rejecting ends it.",
            policy_version="budget-pause-1",
            expire_time=rfc3339(expire_ms),
            request_time=rfc3339(now_ms),
        )
        d.add(asked)
        await d.park(expire_ms)

    def apply_decision(self, decision: dict[str, Any]) -> None:
        """A person's answer from ResolveApproval; a stale or expired one changes nothing."""
        d, ports = self.ctx, self.ctx.ports
        pending = d.state.pending_approval
        if d.state.phase is not Phase.WAITING_APPROVAL or pending is None:
            return
        if pending.approval_id != decision["approval_id"] or ports.now_ms() >= pending.expire_ms:
            return
        approve = decision["decision"] == "APPROVAL_DECISION_APPROVE"
        d.add(
            ApprovalResolved(
                approval_id=pending.approval_id,
                decision=approval_decision_from_json(decision["decision"]),
                approver=decision.get("approver", ""),
                comment=decision.get("comment", ""),
            )
        )
        # The wait for a person does not count against the run's wall-clock budget.
        waited_ms = max(0, ports.now_ms() - pending.request_ms)
        d.extend_deadline(waited_ms)
        if not pending.call_id:  # a budget pause
            budget = pending.tool.removeprefix(BUDGET_PREFIX)
            if approve:
                d.grant_budget(budget_grant(d.budgets, budget)[2])
            else:
                d.add(
                    *end_events(
                        d.state, Phase.FAILED, f"budget_exhausted:{budget}", message="more was refused"
                    )
                )
            return
        if not approve:
            call = next(c for c in d.state.calls if c.call_id == pending.call_id)
            who = decision.get("approver") or "a person"
            message = f"rejected by {who}" + (f": {decision['comment']}" if decision.get("comment") else "")
            error = ToolError(ToolErrorCode.PERMANENT, message)
            d.add(ToolFailed(step=call.step, call_id=call.call_id, tool=call.tool, error=error))


_BUDGET_FIELDS = {
    "model_steps": "max_model_steps",
    "tool_calls": "max_tool_calls",
    "input_tokens": "max_input_tokens",
    "output_tokens": "max_output_tokens",
    "cost": "max_cost_micros",
    "handoffs": "max_handoffs",
}


def _amount(budget: str, value: float) -> str:
    # The cost budget counts micro-dollars; a person reads dollars.
    return f"US${format_usd(int(value))}" if budget == "cost" else str(value)


def budget_grant(budgets: Budgets, budget: str) -> tuple[float, float, Budgets]:
    """(current limit, limit after a grant, the budgets after it): a grant doubles the spent limit."""
    if budget.startswith("calls_per_tool:"):
        tool = budget.removeprefix("calls_per_tool:")
        calls = budgets.max_calls_per_tool.get(tool, 0)
        per_tool = {**budgets.max_calls_per_tool, tool: max(1, calls * 2)}
        return calls, per_tool[tool], dataclasses.replace(budgets, max_calls_per_tool=per_tool)
    field = _BUDGET_FIELDS[budget]
    limit: float = getattr(budgets, field)
    grant = limit * 2 if limit else 1
    changes: dict[str, Any] = {field: grant}
    return limit, grant, dataclasses.replace(budgets, **changes)
