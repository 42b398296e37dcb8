"""One ownership period of one run: load, decide, commit, call, record.

The shell around the pure decider: it buffers the events the decider asks for,
commits them in one fenced transaction right before each model or tool call
(R5.2), performs the call, and records the result.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.core import (
    STATE_VERSION,
    Append,
    ApprovalRequested,
    Budgets,
    CallModel,
    CancelRequested,
    Clock,
    Event,
    Finalize,
    Handoff,
    Idle,
    IncompatibleVersion,
    InvokeTool,
    InvokeTools,
    LeaseLost,
    PauseForBudget,
    Phase,
    Policy,
    RawEvent,
    Reconcile,
    RequestApproval,
    RunState,
    ToolStarted,
    Usage,
    WaitUntil,
    backoff_delay_s,
    call_timeout_s,
    compatible_tool_versions,
    decide,
    end_events,
    replay,
    upgrade,
)
from agentrt.server.core import events as ev
from agentrt.server.engine._agents import ResolvedAgent
from agentrt.server.engine._approval_step import ApprovalStep
from agentrt.server.engine._control import AGENT_TOOL_PREFIX, HANDOFF_PREFIX, Cancelled, Parked
from agentrt.server.engine._finalize import finalize
from agentrt.server.engine._model_step import ModelStep
from agentrt.server.engine._payload_step import check_event_sizes, hydrate_input
from agentrt.server.engine._tool_step import ToolStep
from agentrt.server.store import RunRecord, StoredEvent, decode_event, encode_event

if TYPE_CHECKING:
    from agentrt.server.engine._engine import Engine

log = logging.getLogger("agentrt.engine")
T = TypeVar("T")

Fresh = tuple[RunRecord, list[StoredEvent]]


@dataclass(slots=True)
class RunHandle:
    """What the engine keeps about a run it owns."""

    run_id: str
    generation: int
    lease_deadline_s: float
    task: asyncio.Task[None] | None = None
    io: asyncio.Future[Any] | None = None
    cancel_reason: str | None = None
    cancel_by: str = ""  # who asked for the cancel, recorded on cancel.requested
    extra: dict[str, Any] = field(default_factory=dict)


class RunDriver:
    """Drives one run while this worker holds its lease."""

    def __init__(self, engine: Engine, handle: RunHandle):
        self.engine = engine
        self.handle = handle
        self.run_id = handle.run_id
        self.buffer: list[Event] = []
        self.revision = 0
        self.state = RunState(run_id=handle.run_id)
        self.released = False
        self.started_here: set[str] = set()  # calls whose latest tool.started this driver wrote
        self.tools = ToolStep(self)
        self.approvals = ApprovalStep(self)
        self.model = ModelStep(self)
        self.consumed_signals: list[int] = []
        self.pending_values: dict[str, Any] = {}
        self.unrecorded = Usage()  # model usage spent since the last commit (a fault records it)

    async def drive(self, fresh: Fresh | None) -> None:
        engine = self.engine
        if fresh is not None:  # just created here: its row and log are known, skip the reads
            record, stored = fresh
        else:
            found = await engine.store.get_run(self.run_id)
            if found is None or found.lease_owner != engine.owner:
                return
            record, stored = found, await self._read_log()
        self.revision = record.revision
        if record.state_version != STATE_VERSION:
            raw: list[RawEvent] = [(e.type, json.loads(e.payload)) for e in stored]
            try:
                raw = upgrade(raw, from_version=record.state_version)
            except IncompatibleVersion as exc:
                await self._end_incompatible(record, raw, str(exc))
                return
            self.pending_values["state_version"] = STATE_VERSION
            events = [decode_event(event_type, data) for event_type, data in raw]
        else:
            events = [decode_event(e.type, e.payload) for e in stored]
        self.state = replay(self.run_id, events)
        self.tenant_id = record.tenant_id
        if self.state.input_ref is not None:  # the model sees the whole input, not its view
            await hydrate_input(self)
        self.handle.extra["session_id"] = record.session_id
        self.agent = ResolvedAgent.from_snapshot(record.agent_spec)
        if self.state.active_agent is not None:  # handed off earlier in this run
            self.agent = self.agent.switch(self.state.active_agent)
        self.budgets = Budgets.from_json(json.loads(record.budgets))
        self.deadline_s = record.deadline_ms / 1000
        self.policy = self._policy()
        if record.cancel_requested_ms is not None and self.handle.cancel_reason is None:
            self.handle.cancel_reason = record.cancel_reason or "cancelled"
            self.handle.cancel_by = record.cancel_requested_by or ""
        try:
            if fresh is None:  # nobody can have queued a signal for a run created a moment ago
                changed = self._changed_tool_contract()
                if changed is not None:
                    self.add(*end_events(self.state, Phase.FAILED, "incompatible_version", message=changed))
                    await self.flush()
                    return
                await self._apply_signals()
            await self._loop()
        except Parked:
            return
        if not self.released:
            await engine.store.release(self.run_id, owner=engine.owner)
            self.released = True

    async def _end_incompatible(self, record: RunRecord, events: list[RawEvent], why: str) -> None:
        """No upgrader: end the run safely if this runtime is newer; leave a newer runtime's run alone."""
        if record.state_version > STATE_VERSION:
            log.warning(
                "run %s has state version %s, newer than ours; leaving it", self.run_id, record.state_version
            )
            return
        # The old log cannot be folded; end it from the row alone, without replaying it.
        self.state = RunState(run_id=self.run_id, phase=Phase(record.phase), seq=record.last_seq)
        self.state.any_tool_started = any(event_type == ev.TOOL_STARTED for event_type, _ in events)
        if self.state.phase.terminal:
            return
        if self.state.phase is Phase.UNKNOWN_OUTCOME:
            return  # never collapsed into FAILED (R4.4): a person settles it with an older runtime
        self.add(*end_events(self.state, Phase.FAILED, "incompatible_version", message=why))
        self.pending_values["state_version"] = STATE_VERSION
        await self.flush()

    def _changed_tool_contract(self) -> str | None:
        """A pending call whose tool changed its contract incompatibly since it was started or shown."""
        for call in self.state.calls:
            pending = (call.started and not call.finished) or (
                self.state.pending_approval is not None
                and self.state.pending_approval.call_id == call.call_id
            )
            spec = self.engine.tools.spec(call.tool)
            if pending and spec is not None and not compatible_tool_versions(call.tool_version, spec.version):
                return f"{call.tool} went from version {call.tool_version} to {spec.version} while it waited"
        return None

    def _policy(self) -> Policy:
        """The active agent's rules: the tools it was given, loop thresholds, parallel-safe tools."""
        safe = frozenset(
            name
            for name in self.agent.config.tools
            if (spec := self.engine.tools.spec(name)) is not None
            and spec.side_effect == tool_pb2.SIDE_EFFECT_READ_ONLY
            and spec.concurrency_safe
        )
        config = self.agent.config
        versions = {
            name: spec.version for name in config.tools if (spec := self.engine.tools.spec(name)) is not None
        }
        # What the active agent was given, nothing else: a call to any other tool never runs.
        allowed = frozenset(
            (
                *config.tools,
                *(f"{HANDOFF_PREFIX}{a}" for a in config.handoffs),
                *(f"{AGENT_TOOL_PREFIX}{a}" for a in config.agent_tools),
            )
        )
        return Policy(
            agent_name=self.agent.name,
            allowed_tools=allowed,
            handoffs={f"{HANDOFF_PREFIX}{a}": a for a in config.handoffs},
            tool_versions=versions,
            loops=config.loops.to_policy(),
            parallel_safe=safe,
            fail_expired_approvals=config.approvals.on_expiry == "fail",
            pause_on_exhaustion=config.on_budget_exhausted == "pause",
        )

    async def _read_log(self) -> list[StoredEvent]:
        stored: list[StoredEvent] = []
        while True:
            page = await self.engine.store.read_events(self.run_id, after_seq=stored[-1].seq if stored else 0)
            stored.extend(page)
            if len(page) < 1000:
                return stored

    async def _apply_signals(self) -> None:
        """Apply people's decisions queued for this run; they are deleted in the next commit."""
        signals = await self.engine.store.read_signals(self.run_id)
        self.consumed_signals = [s.id for s in signals]
        for signal in signals:
            if signal.kind == "outcome_decision":
                await self.tools.apply_outcome_decision(json.loads(signal.payload))
            elif signal.kind == "approval_decision":
                self.approvals.apply_decision(json.loads(signal.payload))

    def grant_budget(self, budgets: Budgets) -> None:
        """A person granted more budget; persisted with the next commit."""
        self.budgets = budgets
        self.pending_values["budgets"] = json.dumps(budgets.to_json())

    def extend_deadline(self, by_ms: int) -> None:
        """Move the run's deadline later (time spent waiting for a person); persisted next commit."""
        self.deadline_s += by_ms / 1000
        self.pending_values["deadline_ms"] = round(self.deadline_s * 1000)

    # -- committing ---------------------------------------------------------------------------------

    def add(self, *events: Event) -> None:
        for event in events:
            self.state.apply(event)
            self.state.seq += 1
            self.buffer.append(event)

    async def flush(self, **extra_values: Any) -> None:
        if not self.buffer and not extra_values and not self.consumed_signals and not self.pending_values:
            return
        engine = self.engine
        now_ms = engine.now_ms()
        first_seq = self.state.seq - len(self.buffer) + 1
        payloads = [encode_event(e) for e in self.buffer]
        check_event_sizes(payloads)
        types = [t for t, _ in payloads]
        values: dict[str, Any] = {
            "phase": self.state.phase.value,
            "usage": json.dumps(self.state.usage.to_json()),
            # PostgreSQL text cannot hold NUL: the row gets U+FFFD, the event (JSON-escaped) the exact text.
            "output": self.state.output.replace("\x00", "\ufffd"),
            "reason": self.state.reason.replace("\x00", "\ufffd"),
            "pending_approval": _pending_json(self.state.pending_approval),
            "output_ref": json.dumps(self.state.output_ref.to_json()) if self.state.output_ref else None,
            **self.pending_values,
            **extra_values,
        }
        if self.state.ended:  # the closing commit also gives the lease back: one commit, not two
            values.update(lease_owner=None, lease_expires_ms=None)
        engine.faults.around_commit("before", types)
        self.revision = await engine.store.append(
            self.run_id,
            expected_revision=self.revision,
            owner=engine.owner,
            first_seq=first_seq,
            new_events=payloads,
            values=values,
            now_ms=now_ms,
            consume_signals=self.consumed_signals,
        )
        self.unrecorded = Usage()
        engine.faults.around_commit("after", types)
        self.consumed_signals = []
        self.pending_values = {}
        self.buffer.clear()
        self.released = self.state.ended or values.get("lease_owner", "") is None
        engine.bus.publish(
            self.run_id,
            [StoredEvent(self.run_id, first_seq + i, t, p, now_ms) for i, (t, p) in enumerate(payloads)],
        )
        if self.state.ended:
            engine.counters.inc("runs_ended")
            if self.state.any_tool_started and self.state.phase is not Phase.COMPLETED:
                engine.counters.inc("partial_run_count")

    async def park(self, wake_ms: int) -> None:
        """Commit what is buffered, give the lease back and ask to be woken at ``wake_ms``."""
        await self.flush(wake_ms=wake_ms, lease_owner=None, lease_expires_ms=None)
        raise Parked()

    def check_lease(self) -> None:
        """Refuse to start a call once the lease may have passed to another worker (e.g. after a pause)."""
        if self.engine.clock() >= self.handle.lease_deadline_s:
            raise LeaseLost(f"lease of run {self.run_id} expired locally; not starting new work")

    # -- the loop -----------------------------------------------------------------------------------

    async def _loop(self) -> None:
        engine = self.engine
        while True:
            phase = self.state.phase
            if (
                self.handle.cancel_reason is not None
                and not phase.terminal
                and phase not in (Phase.CANCEL_REQUESTED, Phase.UNKNOWN_OUTCOME)
            ):
                cancel = CancelRequested(reason=self.handle.cancel_reason, requested_by=self.handle.cancel_by)
                self.add(cancel)
            clock = Clock(
                now_s=engine.clock(), deadline_s=self.deadline_s, reserve_s=engine.settings.call_reserve_s
            )
            policy = self.policy
            if self.state.phase is Phase.TOOL_STEP:
                policy = dataclasses.replace(policy, needs_approval=self.approvals.needing_approval())
            decision = decide(self.state, self.budgets, clock, policy)
            match decision:
                case Append(events=events):
                    for event in events:
                        if isinstance(event, ToolStarted):
                            self.started_here.add(event.call_id)
                    self.add(*events)
                    handoff = next((e for e in events if isinstance(e, Handoff)), None)
                    if handoff is not None:
                        self.agent = self.agent.switch(handoff.to_agent)
                        self.policy = self._policy()
                case CallModel(step=step):
                    await self.flush()
                    engine.counters.inc("steps")
                    await self.model.run_step(step)
                case InvokeTool(call=call):
                    await self.flush()
                    engine.counters.inc("steps")
                    await self.tools.run_call(call)
                case InvokeTools(calls=calls):
                    await self.flush()
                    engine.counters.inc("steps")
                    await self.tools.run_batch(calls)
                case WaitUntil(due_s=due_s):
                    await self.flush()
                    with contextlib.suppress(Cancelled):  # the loop appends cancel.requested next
                        await self.sleep(max(0.0, due_s - engine.clock()))
                case RequestApproval(call=call):
                    await self.flush()
                    await self.approvals.request(call)
                case PauseForBudget(budget=budget):
                    await self.flush()
                    await self.approvals.request_budget(budget)
                case Reconcile(call=call):
                    await self.flush()
                    await self.tools.reconcile(call)
                case Finalize(answer=answer, corrected=corrected):
                    finalize(self, answer, corrected=corrected)
                case Idle():
                    await self.flush()
                    return
                case _:
                    raise RuntimeError(f"unrecognised decision {decision!r}")

    def timeout(self, call_timeout: float) -> float:
        engine = self.engine
        return call_timeout_s(
            now_s=engine.clock(),
            run_deadline_s=self.deadline_s,
            call_timeout_s=call_timeout,
            reserve_s=engine.settings.call_reserve_s,
        )

    async def io(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run one call so that a cancel request can cancel it (and only it)."""
        if self.handle.cancel_reason is not None:
            raise Cancelled()
        future = asyncio.ensure_future(make())
        self.handle.io = future
        try:
            return await future
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.handle.cancel_reason is not None and current is not None and not current.cancelling():
                raise Cancelled() from None
            raise
        finally:
            self.handle.io = None

    async def sleep(self, delay_s: float) -> None:
        await self.io(lambda: asyncio.sleep(delay_s))

    def backoff(self, attempt: int) -> float:
        settings = self.engine.settings
        return backoff_delay_s(
            attempt=attempt, base_s=settings.retry_base_s, cap_s=settings.retry_cap_s, rand=self.engine.rand()
        )


def _pending_json(pending: ApprovalRequested | None) -> str | None:
    return encode_event(pending)[1] if pending is not None else None
