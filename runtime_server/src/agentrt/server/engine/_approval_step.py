"""Calls that wait for a person (DESIGN §7): ask, pause, and apply the answer.

The run pauses in WAITING_APPROVAL with the canonical arguments, their sha256, the
tool host's impact preview, the policy version and an expiry, then gives its lease
back. ResolveApproval queues a signal; the next owner applies it (``_signals``): approve
runs the very same call (same idempotency key), reject shows the model a rejection and
the tool never runs. Waiting does not spend the run's wall-clock budget.

Right before an approved call first runs, the policy hook ``agentrt_recheck_approved`` may veto
it (:func:`recheck_approved`): the approver saw the world as it was, and it may have moved on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import math
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import (
    BUDGET_PREFIX,
    ApprovalRequested,
    CallState,
    ToolError,
    ToolErrorCode,
    budget_grant,
    canonical_json,
    format_usd,
    loads_bounded,
    rfc3339,
)
from agentrt.server.engine._control import Cancelled
from agentrt.server.engine._run import RunContext
from agentrt.server.policies import ApprovalRequirement, ReadToolError
from agentrt.server.tools import CallMetadata

PREVIEW_TIMEOUT_S = 5.0
RECHECK_TIMEOUT_S = 30.0  # the whole re-check, its reads included
READ_TIMEOUT_S = 10.0  # one read a re-check makes

log = logging.getLogger("agentrt.engine")


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
        ctx, ports = self.ctx, self.ctx.ports
        try:
            canonical = canonical_json(loads_bounded(call.arguments_json or "{}"))
        except ValueError:
            canonical = call.arguments_json
        impact = await ports.tools.preview(
            call.tool, canonical, metadata=ctx.call_metadata(call), timeout_s=PREVIEW_TIMEOUT_S
        )
        requirement = self._requirements.get(call.call_id)
        now_ms = ports.now_ms()
        expire_ms = now_ms + math.ceil(ctx.agent.config.approvals.timeout_s * 1000)
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
            variables=dict(ctx.state.variables),  # what the run knew when the person was asked
        )
        ctx.add(asked)
        await ctx.park(expire_ms)

    async def request_budget(self, budget: str) -> None:
        """Persist WAITING_APPROVAL for more of a spent budget (the agent's policy) and park."""
        ctx, ports = self.ctx, self.ctx.ports
        limit, grant, _ = budget_grant(ctx.budgets, budget)
        now_ms = ports.now_ms()
        expire_ms = now_ms + math.ceil(ctx.agent.config.approvals.timeout_s * 1000)
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
        ctx.add(asked)
        await ctx.park(expire_ms)


async def recheck_approved(ctx: RunContext, call: CallState) -> ToolError | None:
    """The policies' veto of an approved call about to run for the first time, or None to run it.

    The hooks run in a worker thread (they block, and may read through tools). A hook that raises
    or does not answer within :data:`RECHECK_TIMEOUT_S` vetoes: an approved effect never runs
    unchecked. A cancel request cuts the wait (Cancelled).
    """
    ports = ctx.ports
    read_tool = _read_tool(ctx, call, asyncio.get_running_loop())

    def ask() -> str | None:
        return ports.policies.recheck_approved(
            tool=call.tool,
            arguments_json=call.arguments_json,
            agent_name=ctx.agent.name,
            options=ctx.agent.config.approvals.options,
            run_variables=dict(ctx.state.variables),
            read_tool=read_tool,
        )

    async def recheck() -> str | None:
        async with asyncio.timeout(RECHECK_TIMEOUT_S):
            return await asyncio.to_thread(ask)

    try:
        reason = await ctx.io(recheck)
    except TimeoutError:
        reason = f"the re-check did not answer within {RECHECK_TIMEOUT_S:g}s"
    except Cancelled:
        raise
    except Exception as exc:  # a plugin's bug or a failed read: never run the call unchecked
        log.warning("re-check of %s (run %s) failed", call.tool, ctx.run_id, exc_info=True)
        reason = f"the re-check failed: {type(exc).__name__}: {exc}"[:400]
    if reason is None:
        return None
    ports.counters.inc("recheck_veto_count")
    return ToolError(ToolErrorCode.PERMANENT, f"vetoed: {reason}"[:1000], '{"vetoed": true}')


def _read_tool(
    ctx: RunContext, call: CallState, loop: asyncio.AbstractEventLoop
) -> Callable[[str, Mapping[str, Any]], Any]:
    """``read_tool(name, arguments)`` for a re-check: one READ_ONLY call for the run, from a thread."""

    def read(name: str, arguments: Mapping[str, Any]) -> Any:
        spec = ctx.ports.tools.spec(name)
        if spec is None or spec.side_effect != tool_pb2.SIDE_EFFECT_READ_ONLY:
            raise ReadToolError(f"{name!r} is not a read-only tool a tool host serves")
        arguments_json = canonical_json(dict(arguments))
        # A fresh key: the ledger must not answer a read with what it recorded for an earlier one.
        metadata = dataclasses.replace(
            ctx.call_metadata(call),
            idempotency_key=f"recheck-{uuid.uuid4().hex}",
            call_id=f"{call.call_id}:recheck",
            attempt=1,
            intent_override=False,
        )
        outcome = asyncio.run_coroutine_threadsafe(_invoke(ctx, name, arguments_json, metadata), loop).result(
            timeout=READ_TIMEOUT_S + 1
        )
        if outcome.error is not None:
            raise ReadToolError(f"{name} failed: {outcome.error.code.value}: {outcome.error.message}")
        try:
            return loads_bounded(outcome.result_json or "null")
        except ValueError as exc:
            raise ReadToolError(f"{name} returned a result that is not JSON: {exc}") from None

    return read


async def _invoke(ctx: RunContext, name: str, arguments_json: str, metadata: CallMetadata) -> Any:
    return await ctx.ports.tools.invoke(name, arguments_json, metadata=metadata, timeout_s=READ_TIMEOUT_S)


def _amount(budget: str, value: float) -> str:
    # The cost budget counts micro-dollars; a person reads dollars.
    return f"US${format_usd(int(value))}" if budget == "cost" else str(value)
