"""One attempt at driving a run this worker owns: open it, then decide, commit, call, record.

The shell around the pure decider. :func:`open_run` reads the run (or takes what was just
created), folds its log and builds the :class:`RunContext` of this ownership period;
:class:`RunDriver` then loops: it asks the decider, buffers the events it asks for,
commits them in one fenced transaction right before each model or tool call (R5.2),
performs the call through the step executors, and records the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from functools import partial

from agentrt.server.core import (
    STATE_VERSION,
    Append,
    Budgets,
    CallModel,
    Clock,
    Finalize,
    Handoff,
    Idle,
    IncompatibleVersion,
    InvokeTool,
    InvokeTools,
    PauseForBudget,
    Phase,
    RawEvent,
    Reconcile,
    RequestApproval,
    RunCleanup,
    RunState,
    ToolStarted,
    WaitUntil,
    compatible_tool_versions,
    decide,
    end_events,
    escalation,
    replay,
    upgrade,
)
from agentrt.server.core import events as ev
from agentrt.server.engine._agents import ResolvedAgent
from agentrt.server.engine._approval_step import ApprovalStep
from agentrt.server.engine._checkpoints import resume_state
from agentrt.server.engine._cleanup_step import CleanupStep, handover_columns
from agentrt.server.engine._commit_buffer import NO_CHANGE
from agentrt.server.engine._control import Cancelled, Parked
from agentrt.server.engine._finalize import finalize
from agentrt.server.engine._model_step import ModelStep
from agentrt.server.engine._payload_step import hydrate_input
from agentrt.server.engine._pending_tools import hold_unlearned_calls
from agentrt.server.engine._ports import Fresh, Ports
from agentrt.server.engine._run import RunContext, RunHandle, commit_after_row
from agentrt.server.engine._signals import apply_cancel_request, apply_queued_signals
from agentrt.server.engine._tool_step import ToolStep
from agentrt.server.store import RowUpdate, RunRecord, StoredEvent, decode_event
from agentrt.server.telemetry import run_span, span_event, step_span
from agentrt.toolhost.logs import bind_log_fields

log = logging.getLogger("agentrt.engine")

_PAGE = 1000  # events per read of a run's log


class RunDriver:
    """Drives one run while this worker holds its lease, until it ends, parks or goes idle."""

    def __init__(self, ports: Ports, handle: RunHandle):
        self.ports = ports
        self.handle = handle
        self.run_id = handle.run_id
        self.ctx: RunContext | None = None  # set once the run is open; a fault may come before

    async def drive(self, fresh: Fresh | None) -> None:
        """Open the run and drive it.

        Raises:
            LeaseLost: another worker owns the run now.
        """
        # The run's own task: its lines carry its ids from here (a child run's task starts in its
        # parent's context, so the parent's tenant and call are taken out).
        bind_log_fields(run_id=self.run_id, tenant="", call_id="")
        ctx = await open_run(self.ports, self.handle, fresh)
        if ctx is None:
            return
        self.ctx = ctx
        bind_log_fields(tenant=ctx.tenant_id)
        loop = StepLoop(ctx)
        with run_span(  # under the run's stored trace context: a resumed run stays in its trace
            trace_context=ctx.trace_context,
            agent=ctx.agent.name,
            run_id=ctx.run_id,
            tenant_id=ctx.tenant_id,
            session_id=ctx.handle.session_id,
            resumed=fresh is None,
        ):
            try:
                if fresh is None:  # nobody can have queued a signal for a run created a moment ago
                    changed = changed_tool_contract(ctx)
                    if changed is not None:
                        ctx.add(*end_events(ctx.state, Phase.FAILED, "incompatible_version", message=changed))
                        await ctx.flush()
                        return
                    await loop.apply_signals()
                await loop.run()
            except Parked:
                span_event("parked")
                return
        if not ctx.commits.released:
            await self.ports.log.release(self.run_id, owner=self.ports.owner)
            ctx.commits.released = True


async def open_run(ports: Ports, handle: RunHandle, fresh: Fresh | None) -> RunContext | None:
    """The run's context for this ownership period; None when there is nothing to drive.

    None when the run is gone or not ours, or when its log cannot be folded by this runtime
    (then it was ended, or left for a newer runtime).
    """
    run_id = handle.run_id
    resumed: RunState | None = None
    if fresh is not None:  # just created here: its row and log are known, skip the reads
        record, stored = fresh
    else:
        found = await ports.log.get_run(run_id)
        if found is None or found.lease_owner != ports.owner:
            return None
        record, stored = found, []
        if record.state_version == STATE_VERSION:  # a checkpoint and the log's tail, when one is usable
            resumed = await resume_state(ports, record, partial(read_log, ports, run_id))
        if resumed is None:
            stored = await read_log(ports, run_id)
    pending = NO_CHANGE
    if resumed is not None:
        state = resumed
    elif record.state_version != STATE_VERSION:
        raw: list[RawEvent] = [(e.type, json.loads(e.payload)) for e in stored]
        try:
            raw = upgrade(raw, from_version=record.state_version)
        except IncompatibleVersion as exc:
            await _end_incompatible(ports, record, raw, str(exc))
            return None
        pending = RowUpdate(state_version=STATE_VERSION)
        state = replay(run_id, [decode_event(event_type, data) for event_type, data in raw])
    else:
        state = replay(run_id, [decode_event(e.type, e.payload) for e in stored])
    handle.session_id = record.session_id or ""
    agent = ResolvedAgent.from_snapshot(record.agent_spec)
    if state.active_agent is not None:  # handed off earlier in this run
        agent = agent.switch(state.active_agent)
    if record.cancel_requested_ms is not None and handle.cancel_reason is None:
        handle.cancel_reason = record.cancel_reason or "cancelled"
        handle.cancel_by = record.cancel_requested_by or ""
        handle.cancel_requested_ms = record.cancel_requested_ms
    ports.counters.bind_run(tenant=record.tenant_id, agent=agent.name)  # this task's metric attributes
    if state.phase is Phase.QUEUED:  # a worker takes it from the queue now
        ports.counters.observe("queue_wait", ports.clock() - record.created_ms / 1000)
    ctx = RunContext(
        ports=ports,
        handle=handle,
        tenant_id=record.tenant_id,
        state=state,
        revision=record.revision,
        agent=agent,
        budgets=Budgets.from_json(json.loads(record.budgets)),
        deadline_s=record.deadline_ms / 1000,
        pending=pending,
        agent_config_hash=record.agent_config_hash,
        reconcile_attempts=record.reconcile_attempts or 0,  # None: a record built before the column
        needs_attention=bool(record.needs_attention),
        cleanup_status=record.cleanup_status or "",
        trace_context=record.trace_context or "",
    )
    if state.input_ref is not None:  # the model sees the whole input, not its view
        await hydrate_input(ctx)
    return ctx


async def read_log(ports: Ports, run_id: str, after_seq: int = 0) -> list[StoredEvent]:
    """The run's log after ``after_seq`` (all of it by default), page by page."""
    stored: list[StoredEvent] = []
    while True:
        page = await ports.log.read_events(run_id, after_seq=stored[-1].seq if stored else after_seq)
        stored.extend(page)
        if len(page) < _PAGE:
            return stored


async def _end_incompatible(ports: Ports, record: RunRecord, events: list[RawEvent], why: str) -> None:
    """No upgrader: end the run safely if this runtime is newer; leave a newer runtime's run alone."""
    if record.state_version > STATE_VERSION:
        log.warning(
            "run %s has state version %s, newer than ours; leaving it", record.run_id, record.state_version
        )
        return
    # The old log cannot be folded; end it from the row alone, without replaying it.
    state = RunState(run_id=record.run_id, phase=Phase(record.phase), seq=record.last_seq)
    state.any_tool_started = any(event_type == ev.TOOL_STARTED for event_type, _ in events)
    if state.phase.terminal:
        return
    if state.phase is Phase.UNKNOWN_OUTCOME:
        return  # never collapsed into FAILED (R4.4): a person settles it with an older runtime
    ending = end_events(state, Phase.FAILED, "incompatible_version", message=why)
    update = RowUpdate(
        phase=Phase.FAILED,
        reason="incompatible_version",
        pending_approval=None,
        state_version=STATE_VERSION,
        release_lease=True,
        cleanup=handover_columns(record, events, ports.now_ms()),
    )
    await commit_after_row(ports, record, ending, update, ports.now_ms())
    ports.counters.inc("runs_ended")
    if state.any_tool_started:
        ports.counters.inc("partial_run_count")


def changed_tool_contract(ctx: RunContext) -> str | None:
    """A pending call whose tool changed its contract incompatibly since it was started or shown."""
    state = ctx.state
    for call in state.calls:
        pending = (call.started and not call.finished) or (
            state.pending_approval is not None and state.pending_approval.call_id == call.call_id
        )
        spec = ctx.ports.tools.spec(call.tool)
        if pending and spec is not None and not compatible_tool_versions(call.tool_version, spec.version):
            return f"{call.tool} went from version {call.tool_version} to {spec.version} while it waited"
    return None


async def hand_over(ctx: RunContext) -> None:
    """Drain: commit what is buffered and give the lease back in that one fenced commit (revision
    and owner), so another replica claims the run on its next poll rather than after the TTL, or
    at once with ``[redis]``: the engine names the run on the released channel when it returns."""
    if ctx.commits.empty:
        await ctx.ports.log.release(ctx.run_id, owner=ctx.ports.owner, generation=ctx.handle.generation)
    else:
        await ctx.flush(RowUpdate(release_lease=True))
    ctx.commits.released = True
    span_event("handed_over")
    log.info("run %s handed over: this worker is draining", ctx.run_id)


class StepLoop:
    """Decide, then act, until the run ends, parks or has nothing to do."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.tools = ToolStep(ctx)
        self.approvals = ApprovalStep(ctx)
        self.model = ModelStep(ctx)
        self.cleanups = CleanupStep(ctx)

    async def apply_signals(self) -> None:
        """Apply people's decisions queued for this run; they are deleted in the next commit."""
        await apply_queued_signals(self.ctx, self.tools)

    def escalate_if_due(self) -> None:
        """A wait past its configured age (or an unknown outcome past the deadline) needs a person."""
        ctx = self.ctx
        if ctx.state.phase not in (Phase.UNKNOWN_OUTCOME, Phase.WAITING_APPROVAL):
            return
        escalated = escalation(
            ctx.state,
            now_ms=ctx.ports.now_ms(),
            deadline_ms=round(ctx.deadline_s * 1000),
            policy=ctx.waits,
        )
        if escalated is not None:
            ctx.add(escalated)
            ctx.ports.counters.inc("escalated_count")
            log.warning("run %s escalated: %s (waited %s)", ctx.run_id, escalated.reason, escalated.age)

    async def run(self) -> None:
        ctx, ports = self.ctx, self.ctx.ports
        while True:
            if ports.draining.is_set():  # the step before has ended: this is its commit point
                await hand_over(ctx)
                return
            apply_cancel_request(ctx)
            self.escalate_if_due()
            clock = Clock(
                now_s=ports.clock(), deadline_s=ctx.deadline_s, reserve_s=ctx.settings.call_reserve_s
            )
            await hold_unlearned_calls(ctx)  # a tool host down at start: before calls are weighed
            policy = ctx.policy
            if ctx.state.phase is Phase.TOOL_STEP:
                policy = dataclasses.replace(policy, needs_approval=self.approvals.needing_approval())
            decision = decide(ctx.state, ctx.budgets, clock, policy)
            match decision:
                case Append(events=events):
                    for event in events:
                        if isinstance(event, ToolStarted):
                            ctx.started_here.add(event.call_id)
                    ctx.add(*events)
                    handoff = next((e for e in events if isinstance(e, Handoff)), None)
                    if handoff is not None:
                        ctx.switch_agent(handoff.to_agent)
                case CallModel(step=step):
                    await self.model.fit_window(step)  # recorded on its step.started, committed next
                    await ctx.flush()
                    with ports.counters.step("model"), step_span(run_id=ctx.run_id, step=step, kind="model"):
                        await self.model.run_step(step)
                case InvokeTool(call=call):
                    await ctx.flush()
                    with (
                        ports.counters.step("tool"),
                        step_span(run_id=ctx.run_id, step=call.step, kind="tool"),
                    ):
                        await self.tools.run_call(call)
                case InvokeTools(calls=calls):
                    await ctx.flush()
                    with (
                        ports.counters.step("tool"),
                        step_span(run_id=ctx.run_id, step=calls[0].step, kind="tools"),
                    ):
                        await self.tools.run_batch(calls)
                case WaitUntil(due_s=due_s):
                    await ctx.flush()
                    span_event("wait", seconds=round(max(0.0, due_s - ports.clock()), 3))
                    with contextlib.suppress(Cancelled):  # the loop appends cancel.requested next
                        await ctx.sleep_unless_draining(max(0.0, due_s - ports.clock()))
                case RequestApproval(call=call):
                    await ctx.flush()
                    span_event("approval_requested", tool=call.tool, call_id=call.call_id)
                    await self.approvals.request(call)
                case PauseForBudget(budget=budget):
                    await ctx.flush()
                    await self.approvals.request_budget(budget)
                case Reconcile(call=call):
                    await ctx.flush()
                    span_event("reconcile", tool=call.tool, call_id=call.call_id)
                    await self.tools.reconcile(call)
                case Finalize(answer=answer, corrected=corrected):
                    finalize(ctx, answer, corrected=corrected)
                case RunCleanup(cleanup=cleanup):
                    await self.cleanups.run(cleanup)
                case Idle():
                    pending = ctx.state.pending_approval
                    if ctx.state.phase is Phase.WAITING_APPROVAL and pending is not None:
                        # Still waiting for a person: wake at the expiry (or the wait's escalation).
                        await ctx.park(pending.expire_ms)
                    await ctx.flush()
                    return
                case _:
                    raise RuntimeError(f"unrecognised decision {decision!r}")
