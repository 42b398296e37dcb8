"""One ownership period of one run: what its steps read, and how they commit.

A :class:`RunContext` is built once when a worker takes a run (``_driver.open_run``) and
holds everything the step executors use: the ports, the run's identity and lease, its
folded state, agent, budgets, deadline and policy. Steps append events through
:meth:`RunContext.add` and commit them with :meth:`RunContext.flush` in one fenced
transaction right before each model or tool call (R5.2).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import (
    Budgets,
    CallState,
    ContextWindow,
    Event,
    LeaseLost,
    Phase,
    Policy,
    RunState,
    StepStarted,
    attempts,
    escalation_due_ms,
    extended_deadline_s,
    lease_lapsed,
)
from agentrt.server.engine._agents import ResolvedAgent
from agentrt.server.engine._checkpoints import due_checkpoint, write_checkpoint
from agentrt.server.engine._commit_buffer import NO_CHANGE, CommitBuffer
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, HANDOFF_PREFIX, Cancelled, Parked
from agentrt.server.engine._details import RunDetails
from agentrt.server.engine._ports import Ports, ToolPort
from agentrt.server.store import RowUpdate, RunRecord, StoredEvent, encode_event
from agentrt.server.telemetry import RunStory, current_traceparent
from agentrt.server.tools import CallMetadata

T = TypeVar("T")


@dataclass(slots=True)
class RunHandle:
    """What the engine keeps about a run it owns, across the attempts of one ownership."""

    run_id: str
    generation: int  # the lease's fencing token
    lease_deadline_s: float  # past it, this worker may no longer trust its lease
    task: asyncio.Task[None] | None = None
    io: asyncio.Future[Any] | None = None  # the call a cancel request cuts
    cancel_reason: str | None = None
    cancel_by: str = ""  # who asked for the cancel, recorded on cancel.requested
    cancel_requested_ms: int = 0  # when it was asked (the bound of a cancelled run's wait counts from it)
    session_id: str = ""  # set once the run's row is read: its end may let a waiting turn start


def signal_cancel(handle: RunHandle, reason: str, requested_by: str, requested_ms: int) -> None:
    """A cancel request reached the run's owner: remember it and cut the call in flight, if any."""
    if handle.cancel_reason is None:
        handle.cancel_reason = reason
        handle.cancel_by = requested_by
        handle.cancel_requested_ms = requested_ms
    if handle.io is not None and not handle.io.done():
        handle.io.cancel()


def agent_policy(agent: ResolvedAgent, tools: ToolPort) -> Policy:
    """The active agent's rules: the tools it was given, loop thresholds, parallel-safe tools."""
    config = agent.config
    specs = {name: spec for name in config.tools if (spec := tools.spec(name)) is not None}
    safe = frozenset(
        name
        for name, spec in specs.items()
        if spec.side_effect == tool_pb2.SIDE_EFFECT_READ_ONLY and spec.concurrency_safe
    )
    # What the active agent was given, nothing else: a call to any other tool never runs.
    allowed = frozenset(
        (
            *config.tools,
            *(f"{HANDOFF_PREFIX}{a}" for a in config.handoffs),
            *(f"{AGENT_TOOL_PREFIX}{a}" for a in config.agent_tools),
        )
    )
    return Policy(
        agent_name=agent.name,
        allowed_tools=allowed,
        handoffs={f"{HANDOFF_PREFIX}{a}": a for a in config.handoffs},
        tool_versions={name: spec.version for name, spec in specs.items()},
        loops=config.loops.to_policy(),
        parallel_safe=safe,
        fail_expired_approvals=config.approvals.on_expiry == "fail",
        pause_on_exhaustion=config.on_budget_exhausted == "pause",
    )


class RunContext:
    """A run while this worker holds its lease: its state, its rules, and its commits."""

    def __init__(
        self,
        *,
        ports: Ports,
        handle: RunHandle,
        tenant_id: str,
        state: RunState,
        revision: int,
        agent: ResolvedAgent,
        budgets: Budgets,
        deadline_s: float,
        pending: RowUpdate = NO_CHANGE,
        agent_config_hash: str = "",
        reconcile_attempts: int = 0,
        needs_attention: bool = False,
        cleanup_status: str = "",
        trace_context: str = "",
    ):
        self.ports = ports
        self.trace_context = trace_context  # traceparent of the run's root (runs.trace_context)
        # Frozen for this ownership: who the run is, and only the settings its steps use.
        self.details = RunDetails(
            run_id=handle.run_id,
            tenant_id=tenant_id,
            agent_config_hash=agent_config_hash,
            settings=ports.step_settings,
        )
        self.settings = self.details.settings
        self.handle = handle
        self.run_id = handle.run_id
        self.tenant_id = tenant_id
        self.state = state
        # The mutable half: what is decided but not committed, and the row as last committed.
        self.commits = CommitBuffer(
            revision=revision,
            committed_attempts=reconcile_attempts,
            needs_attention=needs_attention,
            cleanup_status=cleanup_status,
            pending=pending,
        )
        self.agent = agent
        self.budgets = budgets
        self.deadline_s = deadline_s
        self.policy = agent_policy(agent, ports.tools)
        self.started_here: set[str] = set()  # calls whose latest tool.started this owner wrote
        self.hidden: tuple[str, ...] = ()  # the bound model profile's secrets: never in an event
        # Ledger queries of the current unknown outcome, as the row holds them (it outlives parking).
        self.reconcile_attempts = reconcile_attempts
        self.waits = self.settings.waits
        self.story = RunStory(handle.run_id)  # the agentrt.run lines of what is added, told once committed

    # -- the run's rules ----------------------------------------------------------------------------

    def switch_agent(self, name: str) -> None:
        """A handoff: another agent of the run's snapshot takes over, with its own rules."""
        self.agent = self.agent.switch(name)
        self.policy = agent_policy(self.agent, self.ports.tools)

    def grant_budget(self, budgets: Budgets) -> None:
        """A person granted more budget; persisted with the next commit."""
        self.budgets = budgets
        self.commits.change(RowUpdate(budgets=budgets))

    def extend_deadline(self, by_ms: int) -> None:
        """Move the run's deadline later (time spent waiting for a person); persisted next commit."""
        self.deadline_s = extended_deadline_s(deadline_s=self.deadline_s, by_ms=by_ms)
        self.commits.change(RowUpdate(deadline_ms=round(self.deadline_s * 1000)))

    def call_metadata(self, call: CallState) -> CallMetadata:
        """What a call to its tool host carries (R3.3); the router signs its grant from it."""
        return CallMetadata(
            idempotency_key=call.idempotency_key,
            run_id=self.run_id,
            call_id=call.call_id,
            attempt=call.attempts,
            fencing_token=self.handle.generation,
            tenant_id=self.tenant_id,
            max_result_bytes=self.settings.payloads.max_tool_result_bytes,
            session_id=self.handle.session_id,
            intent_override=call.approved and call.override_intent,
            traceparent=current_traceparent(),  # the tool host's span joins the run's trace
        )

    # -- committing ---------------------------------------------------------------------------------

    def add(self, *events: Event) -> None:
        buffered = self.commits.events
        for event in events:
            before = self.state.phase
            self.state.apply(event)
            self.state.seq += 1
            buffered.append(event)
            self.story.note(event, before, self.state.phase)

    def record_window(self, started: StepStarted, window: ContextWindow) -> None:
        """Record how a step's prompt is fitted on its step.started, before that is committed.

        The one change a buffered event may take: ``context`` folds into ``state.window`` only, so
        the state is what folding the amended event gives.
        """
        buffered = self.commits.events
        index = next(i for i, e in enumerate(buffered) if e is started)  # the caller found it there
        buffered[index] = dataclasses.replace(started, context=window)
        self.state.window = window

    async def flush(self, then: RowUpdate = NO_CHANGE) -> None:
        """Commit the buffered events and row changes (and ``then``) in one fenced transaction.

        Raises:
            EventTooLarge: an event is past the store's bound; nothing is committed.
            LeaseLost: another worker owns the run now.
        """
        commits = self.commits
        if commits.empty and then is NO_CHANGE:
            return
        ports = self.ports
        state = self.state
        now_ms = ports.now_ms()
        checkpoint = due_checkpoint(
            state,
            buffered=len(commits.events),
            every_events=self.settings.checkpoint_every_events,
            agent_config_hash=self.details.agent_config_hash,
            now_ms=now_ms,
        )
        if checkpoint is not None:
            self.add(checkpoint[1])
        if state.phase is not Phase.UNKNOWN_OUTCOME and self.reconcile_attempts:
            self.reconcile_attempts = 0  # the unknown outcome was settled: a later one starts afresh
        update = commits.row_update(
            state,
            now_ms=now_ms,
            reconcile_attempts=self.reconcile_attempts,
            cleanup_retry_interval_s=self.settings.cleanup.retry_interval_s,
            then=then,
        )
        events = tuple(commits.events)
        types = [e.type_name for e in events]
        ports.faults.around_commit("before", types)
        began = ports.clock()
        committed = await ports.log.commit(
            self.run_id,
            expected_revision=commits.revision,
            owner=ports.owner,
            first_seq=state.seq - len(events) + 1,
            events=events,
            update=update,
            now_ms=now_ms,
            consume_signals=commits.consumed_signals,
        )
        commits.landed(committed.revision, update)
        ports.counters.observe("commit_duration", ports.clock() - began)
        self.story.tell()
        ports.faults.around_commit("after", types)
        ports.live.publish(self.run_id, committed.events)
        if checkpoint is not None:  # after the commit: it describes committed events only
            await write_checkpoint(ports, checkpoint[0])
        if state.ended:
            ports.counters.inc("runs_ended")
            if state.any_tool_started and state.phase is not Phase.COMPLETED:
                ports.counters.inc("partial_run_count")

    async def park(self, wake_ms: int) -> None:
        """Commit what is buffered, give the lease back and ask to be woken at ``wake_ms``.

        Woken earlier when the run's wait escalates before then. With nothing to record, parking
        again is one row update (new wake time, attempt count, lease given back), not a commit of
        the log: a wait that learns nothing costs no revision.

        Raises:
            Parked: always; the driver stops here.
        """
        due = escalation_due_ms(self.state, deadline_ms=round(self.deadline_s * 1000), policy=self.waits)
        if due is not None:
            wake_ms = min(wake_ms, max(due, self.ports.now_ms() + 1))
        commits = self.commits
        if not commits.empty or self.state.ended:
            await self.flush(RowUpdate(wake_ms=wake_ms, release_lease=True))
        else:
            await self.ports.log.repark(
                self.run_id,
                owner=self.ports.owner,
                expected_revision=commits.revision,
                wake_ms=wake_ms,
                reconcile_attempts=self.reconcile_attempts,
            )
            commits.committed_attempts = self.reconcile_attempts
            commits.released = True
        raise Parked()

    def publish_live(self, event: Event) -> None:
        """A live-only event (R8.1), placed after the events committed so far."""
        event_type, payload = encode_event(event)
        self.ports.live.publish(
            self.run_id,
            [StoredEvent(self.run_id, 0, event_type, payload, self.ports.now_ms())],
            after_seq=self.state.seq - len(self.commits.events),
        )

    # -- time and cancellation ----------------------------------------------------------------------

    def check_lease(self) -> None:
        """Refuse to start a call once the lease may have passed to another worker (e.g. after a pause)."""
        if lease_lapsed(now_s=self.ports.clock(), lease_deadline_s=self.handle.lease_deadline_s):
            raise LeaseLost(f"lease of run {self.run_id} expired locally; not starting new work")

    def plan_call(
        self, call_timeout_s: float, step_deadline_s: float = math.inf
    ) -> attempts.Send | attempts.StepTimeout | attempts.Expire:
        """Whether a call may start now, and its timeout under the call, step and run layers."""
        return attempts.plan_attempt(
            now_s=self.ports.clock(),
            call_timeout_s=call_timeout_s,
            step_deadline_s=step_deadline_s,
            run_deadline_s=self.deadline_s,
            reserve_s=self.settings.call_reserve_s,
        )

    def retry_policy(self, max_attempts: int) -> attempts.RetryPolicy:
        settings = self.settings
        return attempts.RetryPolicy(
            max_attempts=max_attempts, base_s=settings.retry_base_s, cap_s=settings.retry_cap_s
        )

    async def io(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run one call so that a cancel request can cancel it (and only it).

        Raises:
            Cancelled: a cancel request cut the call (or came before it).
        """
        return await cancellable(self.handle, make)

    async def sleep(self, delay_s: float) -> None:
        """Wait ``delay_s``; a cancel request cuts the wait (Cancelled)."""
        await cancellable(self.handle, lambda: self.ports.sleep(delay_s))

    async def sleep_unless_draining(self, delay_s: float) -> None:
        """The run's own wait (a WaitUntil): like :meth:`sleep`, and cut short when the worker drains,
        so the run hands over now rather than at the wait's end."""
        draining = self.ports.draining
        if draining.is_set():
            return

        async def until_due_or_drained() -> None:
            due = asyncio.ensure_future(self.ports.sleep(delay_s))
            drained = asyncio.ensure_future(draining.wait())
            try:
                await asyncio.wait({due, drained}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                due.cancel()
                drained.cancel()

        await cancellable(self.handle, until_due_or_drained)

    async def cancel_arrives_before(self, work: asyncio.Future[Any]) -> bool:
        """Wait until ``work`` is done or a cancel request arrives; True when the cancel came first.

        Unlike :meth:`io`, the cancel does not cut ``work`` (a write in flight): the caller reacts
        to it while ``work`` goes on. A shutdown still cancels the wait (and not ``work``).
        """
        handle = self.handle
        if handle.cancel_reason is not None:
            return not work.done()
        signal: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        handle.io = signal  # what signal_cancel cuts
        try:
            await asyncio.wait({work, signal}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            handle.io = None
            signal.cancel()
        return not work.done() and handle.cancel_reason is not None


async def cancellable(handle: RunHandle, make: Callable[[], Awaitable[T]]) -> T:
    """Await ``make()`` as the run's one cancellable call: a cancel request cuts it, shutdown does not.

    Raises:
        Cancelled: a cancel request cut the call (or came before it).
    """
    if handle.cancel_reason is not None:
        raise Cancelled()
    future = asyncio.ensure_future(make())
    handle.io = future
    try:
        return await future
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if handle.cancel_reason is not None and current is not None and not current.cancelling():
            raise Cancelled() from None
        raise
    finally:
        handle.io = None


async def commit_after_row(
    ports: Ports, record: RunRecord, events: Sequence[Event], update: RowUpdate, now_ms: int
) -> RunRecord:
    """Append ``events`` after the row's last one and apply ``update``, fenced by the row's revision
    and owner, then tell live readers: a commit made from the row alone, with no RunContext (a fault,
    a log this runtime cannot fold, the cleanup job).

    Returns:
        ``record`` at its new revision and last seq (the next commit's fence).

    Raises:
        LeaseLost: another worker owns the run now, or the row moved on.
    """
    story = RunStory(record.run_id)
    story.note_row_commit(record.phase, update.phase, events)
    committed = await ports.log.commit(
        record.run_id,
        expected_revision=record.revision,
        owner=ports.owner,
        first_seq=record.last_seq + 1,
        events=events,
        update=update,
        now_ms=now_ms,
    )
    story.tell()
    ports.live.publish(record.run_id, committed.events)
    return dataclasses.replace(record, revision=committed.revision, last_seq=record.last_seq + len(events))
