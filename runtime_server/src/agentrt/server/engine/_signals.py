"""People's decisions, carried out by the run's owner: queued signals and the cancel request.

What a signal does is decided in the core (``core.apply_signal``), against the folded state, by
the same rules the API used against the run's row when the signal was sent. This module only
carries the verdict out: it appends the events, moves the deadline, grants the budget, and records
a person's word on an unknown call through the tool side (bounded like a tool's result). A signal
the run has moved past (an approval that expired meanwhile, a second answer) changes nothing.
"""

from __future__ import annotations

import logging

from agentrt.server.core import (
    Applied,
    CancelRun,
    Refused,
    RunSignal,
    ToolStarted,
    apply_signal,
)
from agentrt.server.engine._payload_step import bound_tool_outcome
from agentrt.server.engine._run import RunContext
from agentrt.server.engine._tool_step import ToolStep
from agentrt.server.store import UndecodableSignal, decode_signal
from agentrt.server.telemetry import decision
from agentrt.server.tools import ToolOutcome

log = logging.getLogger("agentrt.engine")


async def apply_queued_signals(ctx: RunContext, tools: ToolStep) -> None:
    """Apply the signals queued for the run, oldest first; all are deleted in the next commit."""
    queued = await ctx.ports.log.read_signals(ctx.run_id)
    ctx.commits.consumed_signals = [s.id for s in queued]
    for stored in queued:
        try:
            signal = decode_signal(stored.kind, stored.payload)
        except UndecodableSignal as exc:  # e.g. queued by a newer runtime: it cannot act here
            log.warning("run %s: signal %s dropped: %s", ctx.run_id, stored.id, exc.message)
            continue
        await carry_out(ctx, tools, signal)


def apply_cancel_request(ctx: RunContext) -> None:
    """The cancel request this owner holds, applied once the run's phase takes it."""
    handle = ctx.handle
    if handle.cancel_reason is None:
        return
    signal = CancelRun(reason=handle.cancel_reason, requested_by=handle.cancel_by)
    applied = apply_signal(ctx.state, ctx.budgets, signal, now_ms=ctx.ports.now_ms())
    if isinstance(applied, Applied):
        ctx.add(*applied.events)


async def carry_out(ctx: RunContext, tools: ToolStep, signal: RunSignal) -> bool:
    """Apply one signal to the run; False when the core refused it (then nothing changed)."""
    applied = apply_signal(ctx.state, ctx.budgets, signal, now_ms=ctx.ports.now_ms())
    if isinstance(applied, Refused):
        decision("refused", "%s changes nothing: %s", type(signal).__name__, applied.error.reason)
        return False
    for event in applied.events:
        ctx.add(event)
        if isinstance(event, ToolStarted):  # a person asked for the call again: this owner sends it
            ctx.started_here.add(event.call_id)
    if applied.waited_ms:
        ctx.extend_deadline(applied.waited_ms)
    if applied.budgets is not None:
        ctx.grant_budget(applied.budgets)
    settled = applied.outcome
    if settled is not None:
        call = next(c for c in ctx.state.calls if c.call_id == settled.call_id)
        if settled.result_json is not None:
            # A person's result is bounded like a tool's: a large one is stored as a payload.
            tools.record(call, await bound_tool_outcome(ctx, ToolOutcome(settled.result_json, None)))
        else:
            tools.record(call, ToolOutcome.failure("PERMANENT", settled.failure))
    return True
