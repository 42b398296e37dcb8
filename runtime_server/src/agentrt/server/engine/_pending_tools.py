"""Calls of tools no host has listed yet wait before they start (a tool host down at start).

A call is weighed for approval from its tool's spec (``requires_approval``) when it is about to
start; a started call is retried without being weighed again. So a call whose tool is *pending*
(configured, but its host has not answered ListTools yet) must not start on a guess: it waits
for its tool to be learned, up to ``[timeouts] connect_s`` for each of ``tool_attempts``, within
the run's deadline. Learned in time, it is weighed and started as any call. Otherwise it ends
TRANSIENT, never started and never sent, and the model hears why (the run goes on).
"""

from __future__ import annotations

import contextlib
from functools import partial

from agentrt.server.core import CallState, Phase, ToolFailed, tool_hosts
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, Cancelled
from agentrt.server.engine._run import RunContext, agent_policy

__all__ = ["hold_unlearned_calls", "learn_tool_of_started_call"]


def _wait_s(ctx: RunContext) -> float:
    settings = ctx.settings
    return tool_hosts.pending_call_wait_s(
        connect_s=settings.timeouts.connect_s,
        attempts=settings.tool_attempts,
        now_s=ctx.ports.clock(),
        run_deadline_s=ctx.deadline_s,
        reserve_s=settings.call_reserve_s,
    )


async def learn_tool_of_started_call(ctx: RunContext, call: CallState) -> None:
    """A started call whose tool is pending (a run recovered while its host is not up yet) waits
    for the tool as a new call would: a read is then not taken for a write for want of its spec.

    Still pending after the wait (or cut by a cancel), the call goes on as a write would.
    """
    if call.tool.startswith(AGENT_TOOL_PREFIX) or ctx.ports.tools.spec(call.tool) is not None:
        return
    with contextlib.suppress(Cancelled):  # the call's own path sees the cancel next
        await ctx.io(partial(ctx.ports.tools.wait_for_spec, call.tool, _wait_s(ctx)))


async def hold_unlearned_calls(ctx: RunContext) -> None:
    """Before the step's calls are weighed: wait for the pending tools among them (see above)."""
    if ctx.state.phase is not Phase.TOOL_STEP:
        return
    tools, policy = ctx.ports.tools, ctx.policy
    limit_s: float | None = None  # one wait per pass: once a host did not answer in time, no other waits
    given_up = False
    for call in ctx.state.calls:
        if call.started or call.finished or not policy.allows(call.tool):
            continue
        if call.tool.startswith(AGENT_TOOL_PREFIX) or call.tool in policy.handoffs:
            continue
        if tools.spec(call.tool) is not None:
            continue
        if limit_s is None:
            limit_s = _wait_s(ctx)
        try:
            learned = await ctx.io(partial(tools.wait_for_spec, call.tool, 0.0 if given_up else limit_s))
        except Cancelled:
            return  # the driver applies the cancel next
        if learned:
            if tools.spec(call.tool) is not None:
                # Its version and whether it may run in parallel come with the spec: the rules again.
                ctx.policy = agent_policy(ctx.agent, tools)
            continue
        given_up = True
        error = tool_hosts.pending_tool_error(call.tool, limit_s)
        ctx.add(ToolFailed(step=call.step, call_id=call.call_id, tool=call.tool, error=error))
