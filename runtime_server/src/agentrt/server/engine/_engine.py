"""The engine: owns runs through leases and hands each to a :class:`RunDriver`.

A run outlives any RPC; only a lease loss, a cancel request or shutdown stops it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from agentrt.server.config import Settings
from agentrt.server.core import (
    STATE_VERSION,
    CancelRun,
    LeaseLost,
    PayloadRef,
    Phase,
    RunDiagnostics,
    RunSignal,
    RunStarted,
    RunStateConflict,
    SessionTurn,
    SignalRules,
    StaleRevision,
    decide_signal,
    rfc3339,
)
from agentrt.server.engine._adapters import RegistryModels, RouterTools
from agentrt.server.engine._agent_check import check_agent
from agentrt.server.engine._agents import RUNTIME_VERSION, effective_budgets
from agentrt.server.engine._cleanup_job import CleanupJob
from agentrt.server.engine._contain import drive_contained
from agentrt.server.engine._diagnostics import diagnose_run
from agentrt.server.engine._faults import FaultPlan
from agentrt.server.engine._payload_step import store_input
from agentrt.server.engine._ports import Fresh, Ports, StartRequest
from agentrt.server.engine._request_keys import same_request
from agentrt.server.engine._retention import RetentionJob, build_pruner
from agentrt.server.engine._run import RunHandle, signal_cancel
from agentrt.server.engine._wakes import ReleaseSender, WakeSender
from agentrt.server.events import EventBus
from agentrt.server.models import ModelRegistry
from agentrt.server.policies import Policies, get_policy_plugin_manager
from agentrt.server.store import Admission, RunRecord, Store, StoredEvent, encode_event, signal_target
from agentrt.server.telemetry import Counters, current_traceparent, log_failure, trace_id_of, transition
from agentrt.server.tools import ToolRouter
from agentrt.toolhost.logs import log_fields

log = logging.getLogger("agentrt.engine")
SESSION_HISTORY_TURNS = 20


def new_run_id(now_ms: int) -> str:
    """Time-ordered, unguessable run id."""
    return f"{now_ms:012x}{uuid.uuid4().hex[:20]}"


class EngineChildRuns:
    """Child runs (agents as tools) started and followed through the engine that owns the parent."""

    def __init__(self, engine: Engine):
        self.engine = engine

    async def start(self, request: StartRequest) -> str:
        record, _ = await self.engine.start_run(request)
        return record.run_id

    async def wait_for_end(self, run_id: str) -> RunRecord:
        """Until the child ends: woken by its events on this replica, re-checked in the store."""
        engine = self.engine
        subscription = engine.bus.subscribe(run_id)
        try:
            while True:
                subscription.drain()  # a wake-up only: what it held is in the store
                record = await engine.store.get_run(run_id)
                if record is not None and Phase(record.phase).terminal:
                    return record
                await subscription.get(wait_s=0.5)
        finally:
            engine.bus.unsubscribe(subscription)

    async def cancel(self, run_id: str, *, tenant_id: str, reason: str, requested_by: str) -> None:
        await self.engine.request_cancel(
            run_id, tenant_id=tenant_id, reason=reason, requested_by=requested_by
        )


class Engine:
    """Drives the runs this process owns."""

    def __init__(
        self,
        *,
        store: Store,
        bus: EventBus,
        models: ModelRegistry,
        tools: ToolRouter,
        settings: Settings,
        counters: Counters,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        faults: FaultPlan | None = None,
        policies: Policies | None = None,
        wakes: WakeSender | None = None,
        releases: ReleaseSender | None = None,
    ):
        self.store = store
        self.wakes = wakes  # wakes another replica's run at once ([redis]); None: renewals only
        self.releases = releases  # says which leases a drain gave back ([redis]); None: polls only
        self.payloads = store.payload_store(
            mode=settings.payloads.store, root=Path(settings.data_dir) / "payloads"
        )
        self.bus = bus
        self.models = models
        self.tools = tools
        self.settings = settings
        self.counters = counters
        self.clock = clock
        self.rand = rand
        self.faults = faults or FaultPlan.from_env()
        self.policies = policies or Policies(get_policy_plugin_manager())
        self.owner = settings.worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._runs: dict[str, RunHandle] = {}
        self._background: list[asyncio.Task[None]] = []
        self._stopping = False
        self._draining = asyncio.Event()  # set when stop() begins: runs' waits end so they hand over
        self._renewing: asyncio.Task[None] | None = None  # kept through a drain: the leases stay ours
        self._unowned_waiting = False  # a run was accepted without a worker (capacity or session)
        self._idle = asyncio.Event()
        self._idle.set()
        self.retention: RetentionJob | None = None  # set at start when retention is configured
        self.cleanups: CleanupJob | None = None  # set at start
        self.ports = Ports(
            log=store,
            tools=RouterTools(tools),
            models=RegistryModels(models),
            payloads=self.payloads,
            policies=self.policies,
            live=bus,
            children=EngineChildRuns(self),
            counters=counters,
            settings=settings,
            owner=self.owner,
            clock=clock,
            rand=rand,
            stopping=lambda: self._stopping,
            faults=self.faults,
            draining=self._draining,
        )

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def owned_runs(self) -> int:
        """Runs this process drives now (a metrics gauge)."""
        return len(self._runs)

    @property
    def stopping(self) -> bool:
        """Shutting down: no new work, no further attempts after a fault."""
        return self._stopping

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Claim runs left by earlier lives, then keep polling and renewing leases."""
        await self._claim_and_launch()
        loop = asyncio.get_running_loop()
        self._renewing = loop.create_task(self._renew_loop())
        self._background = [loop.create_task(self._poll_loop())]
        self.cleanups = CleanupJob(self.ports, store=self.store, ttl_ms=self._ttl_ms())
        self._background.append(loop.create_task(self.cleanups.run_forever()))
        pruner = build_pruner(self.settings, self.store.db, fault_point=self.faults.hit)
        if pruner is not None:
            self.retention = RetentionJob(
                pruner=pruner, interval_s=self.settings.retention.interval_s, clock=self.clock
            )
            self._background.append(loop.create_task(self.retention.run_forever()))

    async def stop(self, *, grace_s: float) -> None:
        """Drain: stop claiming, hand each owned run over at its next commit, exit within ``grace_s``.

        Each run, at the top of its next step (a sleep of its own ends at once), commits what it
        buffered and gives its lease back in that fenced commit, so another replica claims it on
        its next poll instead of after the lease TTL, or at once when told through Redis (the
        released nudge, ``releases``). Leases are renewed meanwhile. A run still in
        a call at ``grace_s`` is cancelled without recording anything: a write in flight stays
        started-without-result, never cancelled, and its next owner asks the tool host's ledger.
        Every lease left is then released, fenced by its generation.
        """
        self._stopping = True
        self._draining.set()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        drained = list(self._runs.values())
        if self._runs:
            try:
                async with asyncio.timeout(grace_s):
                    await self._idle.wait()
            except TimeoutError:
                log.warning(
                    "drain: %d run(s) still in a call after %.1fs; cutting them", len(self._runs), grace_s
                )
        handles = list(self._runs.values())
        for handle in handles:
            if handle.task is not None:
                handle.task.cancel()
        await asyncio.gather(*(h.task for h in handles if h.task is not None), return_exceptions=True)
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
        # A no-op for runs that handed over, ended or parked; the rest (cut, or stopped by a fault)
        # are free at once. The generation keeps a stale handle from freeing a newer lease. With
        # the runs a StartRun accepted just as the drain began (launched after the snapshot).
        leases = {(h.run_id, h.generation) for h in [*drained, *handles]}
        await self.store.release_leases(owner=self.owner, leases=sorted(leases))
        # One message for them all; the runs other replicas already took cost them nothing.
        self._say_released(sorted({run_id for run_id, _ in leases}))
        if leases:
            log.info(
                "drain: %d run(s) left at a commit (handed over, parked or ended), %d cut at the deadline",
                len(leases) - len(handles),
                len(handles),
            )

    def running(self) -> list[str]:
        return sorted(self._runs)

    # -- requests -----------------------------------------------------------------------------------

    async def start_run(
        self, request: StartRequest, *, admit: bool = False, rules: SignalRules | None = None
    ) -> tuple[RunRecord, bool]:
        """Persist a new run (or find the one its request_key started) and start driving it.

        Args:
            admit: A caller's request: check its agent and apply the admission limits (child runs
                are part of their parent, whose agent was checked).
            rules: What the caller may do: a session turn that interrupts the active run cancels
                it as the caller would.

        Raises:
            InvalidRequest: The agent names a tool no tool host serves, or a model that cannot be
                made; nothing was written.
            OverLimit: Over an admission limit; nothing was written.
            NotPermitted: The turn would interrupt a run the caller may not cancel.
        """
        if admit:
            check_agent(
                request.agent.config,
                served_tools=self.tools.tool_names(),
                models=self.models,
                profiles=self.settings.model_profiles,
            )
        admission = self._admission(request.tenant_id) if admit else None
        now_ms = self.now_ms()
        budgets = effective_budgets(request.agent.config, request.budget_overrides, self.settings.limits)
        waits_for_turn = False
        history: list[SessionTurn] = []
        if request.session_id:
            if request.request_key:
                found = await self.store.find_by_request_key(request.tenant_id, request.request_key)
                if found is not None:
                    return same_request(found, request.request_key, request.request_hash), False
            if admission is not None:
                # Before the session policy acts (an interrupt cancels a run): refused means no write.
                await self.store.check_admission(admission)
            try:
                waits_for_turn = await self._session_gate(request, rules)
            except RunStateConflict:
                # The session's active run may be this key's own run, started by a concurrent retry.
                found = await self.store.find_by_request_key(request.tenant_id, request.request_key)
                if found is None or not request.request_key:
                    raise
                return same_request(found, request.request_key, request.request_hash), False
            turns = await self.store.session_turns(
                tenant_id=request.tenant_id, session_id=request.session_id, limit=SESSION_HISTORY_TURNS
            )
            history = [SessionTurn(t.run_id, t.input, t.output) for t in turns]
        now_ms = self.now_ms()
        run_id = new_run_id(now_ms)
        deadline_ms = now_ms + int(budgets.timeout_s * 1000)
        own = (
            not self._stopping and not waits_for_turn and len(self._runs) < self.settings.max_concurrent_runs
        )
        shown, input_ref = await store_input(
            self.payloads, self.settings.payloads, run_id, request.tenant_id, request.input, now_ms
        )
        # The caller's trace (the RunAgent span, or the parent run's tool call): every owner's
        # spans of this run go under it, whichever replica and however many resumes.
        traceparent = current_traceparent()
        values = {
            "run_id": run_id,
            "tenant_id": request.tenant_id,
            "agent_name": request.agent.name,
            "agent_spec": request.agent.snapshot_json(),
            "input": shown,
            "input_ref": json.dumps(input_ref) if input_ref is not None else None,
            "output": "",
            "reason": "",
            "phase": Phase.QUEUED.value,
            "budgets": json.dumps(budgets.to_json()),
            "usage": "{}",
            "request_key": request.request_key or None,
            "request_hash": request.request_hash or None,
            "session_id": request.session_id or None,
            "metadata": json.dumps(dict(request.metadata)),
            "deadline_ms": deadline_ms,
            "lease_owner": self.owner if own else None,
            "lease_expires_ms": now_ms + self._ttl_ms() if own else None,
            "lease_generation": 1 if own else 0,
            "cancel_requested_ms": None,
            "cancel_reason": None,
            "created_by": request.created_by,
            "state_version": STATE_VERSION,
            "runtime_version": RUNTIME_VERSION,
            "agent_config_hash": request.agent.config_hash(),
            "reconcile_attempts": 0,
            "needs_attention": False,
            "trace_context": traceparent or None,
        }
        started = encode_event(
            RunStarted(
                agent_name=request.agent.name,
                input=shown,
                budgets=budgets,
                deadline=rfc3339(deadline_ms),
                started_by=request.created_by,
                session_history=tuple(history),
                input_ref=PayloadRef.from_json(input_ref) if input_ref is not None else None,
                trace_id=trace_id_of(traceparent),
            )
        )
        record, created = await self.store.create_run(values, [started], now_ms, admission=admission)
        if not created:
            same_request(record, request.request_key, request.request_hash)
        if created:
            self.counters.inc("runs_started", tenant=request.tenant_id, agent=request.agent.name)
            with log_fields(run_id=record.run_id, tenant=record.tenant_id, call_id=""):  # not a parent's call
                transition("", Phase.QUEUED.value, "run.started")
            if not own:
                self._unowned_waiting = True
            if not own and self._stopping:  # accepted while draining: for another replica to take now
                self._say_released([record.run_id])
            if own:
                first = StoredEvent(record.run_id, 1, *started, now_ms)
                self._launch(record.run_id, record.lease_generation, (record, [first]))
        return record, created

    def _admission(self, tenant_id: str) -> Admission:
        limits = self.settings.admission
        return Admission(
            tenant_id=tenant_id,
            max_queued_runs=limits.max_queued_runs,
            max_queued_runs_per_tenant=limits.max_queued_runs_per_tenant,
            max_active_runs_per_tenant=limits.max_active_runs_per_tenant,
            retry_after_s=limits.retry_after_s,
        )

    async def _session_gate(self, request: StartRequest, rules: SignalRules | None) -> bool:
        """Apply the session policy; True when the new turn must wait for an earlier one to end.

        Raises:
            RunStateConflict: ``SESSION_BUSY`` under the reject policy (nothing is written).
            NotPermitted: An interrupt of a run ``rules`` do not let the caller cancel.
        """
        active = await self.store.active_session_run(
            tenant_id=request.tenant_id, session_id=request.session_id
        )
        if active is None:
            return False
        if request.session_policy == "reject":
            raise RunStateConflict(
                f"session {request.session_id!r} has an active run {active.run_id}",
                reason="SESSION_BUSY",
                metadata={"session_id": request.session_id, "active_run_id": active.run_id},
            )
        if request.session_policy == "interrupt":
            cancel = CancelRun(reason="interrupted by a new turn", requested_by=request.created_by)
            refused = decide_signal(signal_target(active), cancel, now_ms=self.now_ms(), rules=rules)
            if refused is not None:
                raise refused.error
            await self.request_cancel(
                active.run_id,
                tenant_id=request.tenant_id,
                reason="interrupted by a new turn",
                requested_by=request.created_by,
            )
        return True

    async def diagnose(self, record: RunRecord) -> RunDiagnostics:
        """What an operator is shown of the run of ``record`` (GetRunDiagnostics; the caller read
        the row in its tenant). The log is folded up to the row's ``last_seq``, so both describe
        the same moment; nothing changes."""
        return await diagnose_run(self.ports, record)

    async def request_cancel(
        self, run_id: str, *, tenant_id: str, reason: str, requested_by: str
    ) -> RunRecord | None:
        """Persist the cancel intent and signal the owner; unowned runs are claimed and ended here."""
        record = await self.store.request_cancel(
            run_id,
            tenant_id=tenant_id,
            reason=reason or "cancelled",
            requested_by=requested_by,
            now_ms=self.now_ms(),
        )
        if record is None or Phase(record.phase).terminal:
            return record
        self.counters.inc("cancel_requested_count", tenant=tenant_id)
        handle = self._runs.get(run_id)
        if handle is not None:
            signal_cancel(
                handle,
                record.cancel_reason or "cancelled",
                record.cancel_requested_by or "",
                record.cancel_requested_ms or self.now_ms(),
            )
        else:
            self._wake_owner(record)
            if not self._stopping:
                await self._claim_and_launch(run_ids=[run_id])
        return record

    async def send_signal(
        self,
        record: RunRecord,
        signal: RunSignal,
        *,
        expected_revision: int | None = None,
        rules: SignalRules | None = None,
    ) -> RunRecord:
        """Decide a person's signal against the run's row, then queue it for the run's owner (a
        cancel is recorded on the row) and wake the owner; returns the row as it is then.

        Raises:
            AgentRtError: The core's refusal, for ``rules`` (who sends it) and ``expected_revision``
                (what they saw; the queueing is fenced by it too): nothing was written.
        """
        refused = decide_signal(
            signal_target(record),
            signal,
            now_ms=self.now_ms(),
            expected_revision=expected_revision,
            rules=rules,
        )
        if refused is not None:
            raise refused.error
        if isinstance(signal, CancelRun):
            updated = await self.request_cancel(
                record.run_id,
                tenant_id=record.tenant_id,
                reason=signal.reason,
                requested_by=signal.requested_by,
            )
            return updated or record
        queued = await self.store.add_signal(
            record.run_id, signal=signal, now_ms=self.now_ms(), expected_revision=expected_revision
        )
        if not queued:
            raise StaleRevision(
                f"run {record.run_id} changed while deciding", metadata={"run_id": record.run_id}
            )
        await self.wake(record.run_id)
        updated = await self.store.get_run(record.run_id, tenant_id=record.tenant_id) or record
        if record.run_id not in self._runs:
            self._wake_owner(updated)
        return updated

    async def wake(self, run_id: str) -> None:
        """Take a parked or paused run now (a signal for it was queued) if it is free."""
        if run_id not in self._runs and not self._stopping:
            await self._claim_and_launch(run_ids=[run_id])

    async def on_wake(self, run_id: str) -> None:
        """Another replica recorded a signal or cancel for ``run_id``: act now, as renewals would.

        A run this replica drives gets its pending cancel; one it does not is claimed if free. (A
        signal queued while this replica still drives the run is applied when it is next taken:
        a parked run with a queued signal is claimed by the poll loop.)
        """
        handle = self._runs.get(run_id)
        if handle is None:
            await self.wake(run_id)
            return
        record = await self.store.get_run(run_id)
        if record is not None and record.lease_owner == self.owner and record.cancel_requested_ms is not None:
            reason, by = record.cancel_reason or "cancelled", record.cancel_requested_by or ""
            signal_cancel(handle, reason, by, record.cancel_requested_ms)

    async def on_released(self, run_ids: list[str]) -> None:
        """Another replica gave these runs' leases back (it drains): claim what there is room for
        now rather than at the next poll. Not while stopping (``_claim_and_launch``)."""
        free = [run_id for run_id in run_ids if run_id not in self._runs]
        if free:  # never an empty list: that would claim any run
            await self._claim_and_launch(run_ids=free)

    def _say_released(self, run_ids: Iterable[str]) -> None:
        if self.releases is not None:
            self.releases.released(run_ids)

    def _wake_owner(self, record: RunRecord) -> None:
        if self.wakes is not None and record.lease_owner and record.lease_owner != self.owner:
            self.wakes.wake_owner(record.run_id, record.lease_owner)

    # -- ownership ----------------------------------------------------------------------------------

    def _lease_horizon_s(self) -> float:
        # How long this worker may trust its lease without hearing from the store: the TTL
        # less a margin for the time the claim or renewal itself took.
        ttl = self.settings.lease_ttl_s
        return ttl - min(1.0, ttl / 5)

    def _ttl_ms(self) -> int:
        return int(self.settings.lease_ttl_s * 1000)

    async def _claim_and_launch(self, run_ids: list[str] | None = None) -> None:
        capacity = self.settings.max_concurrent_runs - len(self._runs)
        if capacity <= 0 or self._stopping:
            return
        claims = await self.store.claim(
            owner=self.owner,
            now_ms=self.now_ms(),
            ttl_ms=self._ttl_ms(),
            limit=capacity,
            run_ids=run_ids or (),
        )
        for claim in claims:
            self._launch(claim.run_id, claim.generation)

    def _launch(self, run_id: str, generation: int, fresh: Fresh | None = None) -> None:
        if run_id in self._runs:
            return
        handle = RunHandle(run_id, generation, lease_deadline_s=self.clock() + self._lease_horizon_s())
        self._runs[run_id] = handle
        self._idle.clear()
        handle.task = asyncio.get_running_loop().create_task(
            self._drive_guarded(handle, fresh), name=f"run:{run_id}"
        )

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            try:
                await self._claim_and_launch()
            except Exception as exc:
                log_failure(log, exc, "claiming runs failed")

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_ttl_s / 3)
            owned = list(self._runs)
            renewed_at = self.clock()
            try:
                kept = await self.store.renew(
                    owner=self.owner, run_ids=owned, now_ms=self.now_ms(), ttl_ms=self._ttl_ms()
                )
            except Exception as exc:
                log_failure(log, exc, "renewing leases failed")
                continue
            for run_id, cancel in kept.items():
                if (kept_handle := self._runs.get(run_id)) is not None:
                    kept_handle.lease_deadline_s = renewed_at + self._lease_horizon_s()
                    if cancel is not None:
                        signal_cancel(kept_handle, *cancel, self.now_ms())
            for run_id in set(owned) - kept.keys():
                handle = self._runs.get(run_id)
                if handle is not None and handle.task is not None:
                    log.warning("lease lost for run %s; stopping it", run_id)
                    self.counters.inc("lease_lost_count")
                    handle.task.cancel()

    # -- driving a run ------------------------------------------------------------------------------

    async def _drive_guarded(self, handle: RunHandle, fresh: Fresh | None) -> None:
        handed_over = False
        try:
            await drive_contained(self.ports, handle, fresh)
            # Back at a commit point while draining: handed over (or, rarely, ended or stopped by a
            # fault; a nudge for those costs each other replica one claim that takes nothing, and
            # stop() names a faulted run again once it has released its lease).
            handed_over = self._draining.is_set()
        except LeaseLost as exc:
            self.counters.inc("lease_lost_count")
            log.warning("run %s: lease lost (%s); this worker stops writing", handle.run_id, exc.message)
        except asyncio.CancelledError:
            pass
        except Exception:  # drive_contained records faults; this is a last resort
            log.exception("run %s: driver crashed; the run stays as persisted", handle.run_id)
        finally:
            self._runs.pop(handle.run_id, None)
            if handed_over:  # the lease is given back: another replica may take it now
                self._say_released([handle.run_id])
            if not self._runs:
                self._idle.set()
            if not self._stopping and (handle.session_id or self._unowned_waiting):
                # A waiting turn of the same session, or a run this replica could not take, may start now.
                self._unowned_waiting = False
                task = asyncio.get_running_loop().create_task(self._claim_soon())
                self._background.append(task)
                # Forget it once done, so a long-lived server does not keep every finished task.
                task.add_done_callback(self._forget_background)

    def _forget_background(self, task: asyncio.Task[None]) -> None:
        if task in self._background:
            self._background.remove(task)

    async def _claim_soon(self) -> None:
        try:
            await self._claim_and_launch()
        except Exception as exc:
            log_failure(log, exc, "claiming runs failed")
