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
import json
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import (
    ApprovalRequested,
    Budgets,
    CallState,
    ContextWindow,
    Event,
    LeaseLost,
    Phase,
    Policy,
    RunEnded,
    RunState,
    StepStarted,
    Usage,
    attempts,
    escalation_due_ms,
    extended_deadline_s,
    lease_lapsed,
)
from agentrt.server.engine._agents import ResolvedAgent
from agentrt.server.engine._checkpoints import due_checkpoint, write_checkpoint
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, HANDOFF_PREFIX, Cancelled, Parked
from agentrt.server.engine._details import RunDetails
from agentrt.server.engine._ports import Ports, ToolPort
from agentrt.server.engine._sizes import check_event_sizes
from agentrt.server.store import RunRecord, StoredEvent, call_summary_json, encode_event
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
        pending_values: dict[str, Any] | None = None,
        agent_config_hash: str = "",
        reconcile_attempts: int = 0,
        needs_attention: bool = False,
        cleanup_status: str = "",
    ):
        self.ports = ports
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
        self.revision = revision
        self.agent = agent
        self.budgets = budgets
        self.deadline_s = deadline_s
        self.policy = agent_policy(agent, ports.tools)
        self.buffer: list[Event] = []
        self.pending_values: dict[str, Any] = dict(pending_values or {})
        self.consumed_signals: list[int] = []
        self.started_here: set[str] = set()  # calls whose latest tool.started this owner wrote
        self.unrecorded = Usage()  # model usage spent since the last commit (a fault records it)
        self.hidden: tuple[str, ...] = ()  # the bound model profile's secrets: never in an event
        self.released = False
        # Ledger queries of the current unknown outcome, as the row holds them (it outlives parking).
        self.reconcile_attempts = reconcile_attempts
        self.committed_attempts = reconcile_attempts
        self.needs_attention = needs_attention  # as the row holds it
        self.cleanup_status = cleanup_status  # as the row holds it ("" for none)
        self.waits = self.settings.waits

    # -- the run's rules ----------------------------------------------------------------------------

    def switch_agent(self, name: str) -> None:
        """A handoff: another agent of the run's snapshot takes over, with its own rules."""
        self.agent = self.agent.switch(name)
        self.policy = agent_policy(self.agent, self.ports.tools)

    def grant_budget(self, budgets: Budgets) -> None:
        """A person granted more budget; persisted with the next commit."""
        self.budgets = budgets
        self.pending_values["budgets"] = json.dumps(budgets.to_json())

    def extend_deadline(self, by_ms: int) -> None:
        """Move the run's deadline later (time spent waiting for a person); persisted next commit."""
        self.deadline_s = extended_deadline_s(deadline_s=self.deadline_s, by_ms=by_ms)
        self.pending_values["deadline_ms"] = round(self.deadline_s * 1000)

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
        )

    # -- committing ---------------------------------------------------------------------------------

    def add(self, *events: Event) -> None:
        for event in events:
            self.state.apply(event)
            self.state.seq += 1
            self.buffer.append(event)

    def record_window(self, started: StepStarted, window: ContextWindow) -> None:
        """Record how a step's prompt is fitted on its step.started, before that is committed.

        The one change a buffered event may take: ``context`` folds into ``state.window`` only, so
        the state is what folding the amended event gives.
        """
        index = next(i for i, e in enumerate(self.buffer) if e is started)  # the caller found it there
        self.buffer[index] = dataclasses.replace(started, context=window)
        self.state.window = window

    async def flush(self, **extra_values: Any) -> None:
        """Commit the buffered events and row changes in one fenced transaction.

        Raises:
            LeaseLost: another worker owns the run now.
        """
        if not self.buffer and not extra_values and not self.consumed_signals and not self.pending_values:
            return
        ports = self.ports
        state = self.state
        now_ms = ports.now_ms()
        checkpoint = due_checkpoint(
            state,
            buffered=len(self.buffer),
            every_events=self.settings.checkpoint_every_events,
            agent_config_hash=self.details.agent_config_hash,
            now_ms=now_ms,
        )
        if checkpoint is not None:
            self.add(checkpoint[1])
        first_seq = state.seq - len(self.buffer) + 1
        payloads = [encode_event(e) for e in self.buffer]
        check_event_sizes(payloads)
        types = [t for t, _ in payloads]
        values: dict[str, Any] = {
            "phase": state.phase.value,
            "usage": json.dumps(state.usage.to_json()),
            # PostgreSQL text cannot hold NUL: the row gets U+FFFD, the event (JSON-escaped) the exact text.
            "output": state.output.replace("\x00", "\ufffd"),
            "reason": state.reason.replace("\x00", "\ufffd"),
            "pending_approval": _pending_json(state.pending_approval),
            "unknown_call_id": _unknown_call_id(state),
            "output_ref": json.dumps(state.output_ref.to_json()) if state.output_ref else None,
            **self.pending_values,
            **extra_values,
        }
        if state.ended:  # the closing commit also gives the lease back: one commit, not two
            values.update(lease_owner=None, lease_expires_ms=None)
            ended = next((e for e in self.buffer if isinstance(e, RunEnded)), None)
            if ended is not None and ended.partial:
                values["call_summary"] = call_summary_json(ended)
        # A wait a person must end, or a cancelled run that ended handing a write's outcome over.
        attention = state.escalation is not None or state.unknown_at_end
        if attention != self.needs_attention:
            values["needs_attention"] = attention
        cleanup_status = state.cleanup_status.value
        if cleanup_status != self.cleanup_status or (state.ended and cleanup_status):
            values.update(cleanup_row_values(state, now_ms, self.settings.cleanup.retry_interval_s))
        if state.phase is not Phase.UNKNOWN_OUTCOME and self.reconcile_attempts:
            self.reconcile_attempts = 0  # the unknown outcome was settled: a later one starts afresh
        if "reconcile_attempts" not in values and self.reconcile_attempts != self.committed_attempts:
            values["reconcile_attempts"] = self.reconcile_attempts
        ports.faults.around_commit("before", types)
        self.revision = await ports.log.append(
            self.run_id,
            expected_revision=self.revision,
            owner=ports.owner,
            first_seq=first_seq,
            new_events=payloads,
            values=values,
            now_ms=now_ms,
            consume_signals=self.consumed_signals,
        )
        self.unrecorded = Usage()
        self.needs_attention = attention
        self.cleanup_status = cleanup_status
        self.committed_attempts = values.get("reconcile_attempts", self.committed_attempts)
        ports.faults.around_commit("after", types)
        self.consumed_signals = []
        self.pending_values = {}
        self.buffer.clear()
        self.released = state.ended or values.get("lease_owner", "") is None
        ports.live.publish(self.run_id, stored_events(self.run_id, first_seq, payloads, now_ms))
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
        if self.buffer or self.consumed_signals or self.pending_values or self.state.ended:
            await self.flush(wake_ms=wake_ms, lease_owner=None, lease_expires_ms=None)
        else:
            await self.ports.log.repark(
                self.run_id,
                owner=self.ports.owner,
                expected_revision=self.revision,
                wake_ms=wake_ms,
                reconcile_attempts=self.reconcile_attempts,
            )
            self.committed_attempts = self.reconcile_attempts
            self.released = True
        raise Parked()

    def publish_live(self, event: Event) -> None:
        """A live-only event (R8.1), placed after the events committed so far."""
        event_type, payload = encode_event(event)
        self.ports.live.publish(
            self.run_id,
            [StoredEvent(self.run_id, 0, event_type, payload, self.ports.now_ms())],
            after_seq=self.state.seq - len(self.buffer),
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
    ports: Ports, record: RunRecord, events: Sequence[Event], values: Mapping[str, Any], now_ms: int
) -> RunRecord:
    """Append ``events`` after the row's last one and move the row, fenced by its revision and
    owner, then tell live readers: a commit made from the row alone, with no RunContext (a fault,
    a log this runtime cannot fold, the cleanup job).

    Returns:
        ``record`` at its new revision and last seq (the next commit's fence).

    Raises:
        LeaseLost: another worker owns the run now, or the row moved on.
    """
    payloads = [encode_event(e) for e in events]
    first_seq = record.last_seq + 1
    revision = await ports.log.append(
        record.run_id,
        expected_revision=record.revision,
        owner=ports.owner,
        first_seq=first_seq,
        new_events=payloads,
        values=values,
        now_ms=now_ms,
    )
    ports.live.publish(record.run_id, stored_events(record.run_id, first_seq, payloads, now_ms))
    return dataclasses.replace(record, revision=revision, last_seq=record.last_seq + len(payloads))


def stored_events(
    run_id: str, first_seq: int, payloads: Sequence[tuple[str, str]], now_ms: int
) -> list[StoredEvent]:
    """Committed events as the store holds them, for live readers."""
    return [StoredEvent(run_id, first_seq + i, t, p, now_ms) for i, (t, p) in enumerate(payloads)]


def cleanup_row_values(state: RunState, now_ms: int, retry_interval_s: float) -> dict[str, Any]:
    """The row's cleanup columns for ``state``: status, unknown count and the cleanup job's due time."""
    status = state.cleanup_status
    unknown = sum(1 for c in state.cleanups if c.unknown)
    due = now_ms + round(retry_interval_s * 1000) if state.ended and unknown else None
    return {"cleanup_status": status.value or None, "cleanups_unknown": unknown, "cleanup_due_ms": due}


def _pending_json(pending: ApprovalRequested | None) -> str | None:
    return encode_event(pending)[1] if pending is not None else None


def _unknown_call_id(state: RunState) -> str | None:
    """The row's record of the call whose outcome is unknown: ResolveOutcome is checked against it."""
    call = state.unknown_call() if state.phase is Phase.UNKNOWN_OUTCOME else None
    return call.call_id.replace("\x00", "\ufffd") if call is not None else None
