"""The engine: owns runs through leases and drives each one step by step.

The shell around the pure decider (``runtime_server.core.decide``): it buffers
the events the decider asks for, commits them in one fenced transaction right
before each model or tool call (R5.2), performs the call, and records the result.
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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from google.protobuf import json_format

from runtime_server._config import AgentConfig, Settings
from runtime_server.core import (
    Append,
    Budgets,
    CallModel,
    CallState,
    Clock,
    Event,
    Idle,
    InvokeTool,
    LeaseLost,
    Phase,
    RunState,
    backoff_delay_s,
    call_timeout_s,
    decide,
    end_events,
    replay,
    retry_fits,
    rfc3339,
)
from runtime_server.core import events as ev
from runtime_server.engine._agents import RUNTIME_VERSION, STATE_VERSION, ResolvedAgent, effective_budgets
from runtime_server.events import EventBus
from runtime_server.models import (
    Message,
    ModelAuthError,
    ModelError,
    ModelRegistry,
    ModelRequest,
    ModelSpecData,
    ModelToolCall,
    ModelTransientError,
    ToolDef,
)
from runtime_server.store import RunRecord, Store, StoredEvent
from runtime_server.telemetry import Counters
from runtime_server.tools import CallMetadata, ToolOutcome, ToolRouter

log = logging.getLogger("agentrt.engine")
T = TypeVar("T")

_MODEL_ATTEMPTS = 3
_TOOL_ATTEMPTS = 3
_BACKOFF_BASE_S = 0.2
_BACKOFF_CAP_S = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRequest:
    """A validated request to start a run."""

    tenant_id: str
    agent: ResolvedAgent
    input: str
    budget_overrides: Mapping[str, Any] = field(default_factory=dict)
    request_key: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    session_id: str = ""


@dataclass(slots=True)
class _RunHandle:
    run_id: str
    generation: int
    task: asyncio.Task[None] | None = None
    io: asyncio.Future[Any] | None = None
    cancel_reason: str | None = None


_Fresh = tuple[RunRecord, list[StoredEvent]]


class _Cancelled(Exception):
    """The in-flight call was cancelled by a cancel request (not by shutdown)."""


def new_run_id(now_ms: int) -> str:
    """Time-ordered, unguessable run id."""
    return f"{now_ms:012x}{uuid.uuid4().hex[:20]}"


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
    ):
        self.store = store
        self.bus = bus
        self.models = models
        self.tools = tools
        self.settings = settings
        self.counters = counters
        self.clock = clock
        self.rand = rand
        self.owner = settings.worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._runs: dict[str, _RunHandle] = {}
        self._background: list[asyncio.Task[None]] = []
        self._stopping = False
        self._idle = asyncio.Event()
        self._idle.set()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Claim runs left by earlier lives, then keep polling and renewing leases."""
        await self._claim_and_launch()
        loop = asyncio.get_running_loop()
        self._background = [loop.create_task(self._poll_loop()), loop.create_task(self._renew_loop())]

    async def stop(self, *, grace_s: float) -> None:
        """Stop taking work, give running runs ``grace_s`` to reach a commit point, then cancel them.

        Cancelled runs keep their persisted state; their leases are released so another
        replica (or the next start) resumes them at once.
        """
        self._stopping = True
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._runs:
            try:
                async with asyncio.timeout(grace_s):
                    await self._idle.wait()
            except TimeoutError:
                pass
        handles = list(self._runs.values())
        for handle in handles:
            if handle.task is not None:
                handle.task.cancel()
        await asyncio.gather(*(h.task for h in handles if h.task is not None), return_exceptions=True)
        for handle in handles:
            await self.store.release(handle.run_id, owner=self.owner)

    def running(self) -> list[str]:
        return sorted(self._runs)

    # -- requests -----------------------------------------------------------------------------------

    async def start_run(self, request: StartRequest) -> tuple[RunRecord, bool]:
        """Persist a new run (or find the one its request_key started) and start driving it."""
        now_ms = self._now_ms()
        budgets = effective_budgets(request.agent.config, request.budget_overrides, self.settings.limits)
        run_id = new_run_id(now_ms)
        deadline_ms = now_ms + int(budgets.timeout_s * 1000)
        own = not self._stopping and len(self._runs) < self.settings.max_concurrent_runs
        values = {
            "run_id": run_id,
            "tenant_id": request.tenant_id,
            "agent_name": request.agent.name,
            "agent_spec": request.agent.snapshot_json(),
            "input": request.input,
            "output": "",
            "reason": "",
            "phase": Phase.QUEUED.value,
            "budgets": json.dumps(budgets.to_json()),
            "usage": "{}",
            "request_key": request.request_key or None,
            "session_id": request.session_id or None,
            "metadata": json.dumps(dict(request.metadata)),
            "deadline_ms": deadline_ms,
            "lease_owner": self.owner if own else None,
            "lease_expires_ms": now_ms + self._ttl_ms() if own else None,
            "lease_generation": 1 if own else 0,
            "cancel_requested_ms": None,
            "cancel_reason": None,
            "state_version": STATE_VERSION,
            "runtime_version": RUNTIME_VERSION,
            "agent_config_hash": request.agent.config_hash(),
        }
        started = {
            "agent_name": request.agent.name,
            "input": request.input,
            "budgets": budgets.to_json(),
            "deadline": rfc3339(deadline_ms),
        }
        record, created = await self.store.create_run(values, [(ev.RUN_STARTED, json.dumps(started))], now_ms)
        if created:
            self.counters.inc("runs_started")
            if own:
                first = StoredEvent(record.run_id, 1, ev.RUN_STARTED, json.dumps(started), now_ms)
                self._launch(record.run_id, record.lease_generation, (record, [first]))
        return record, created

    async def request_cancel(self, run_id: str, *, tenant_id: str, reason: str) -> RunRecord | None:
        """Persist the cancel intent and signal the owner; unowned runs are claimed and ended here."""
        record = await self.store.request_cancel(
            run_id, tenant_id=tenant_id, reason=reason or "cancelled", now_ms=self._now_ms()
        )
        if record is None or Phase(record.phase).terminal:
            return record
        self.counters.inc("cancel_requested_count")
        handle = self._runs.get(run_id)
        if handle is not None:
            self._signal_cancel(handle, record.cancel_reason or "cancelled")
        elif not self._stopping:
            await self._claim_and_launch(run_ids=[run_id])
        return record

    def _signal_cancel(self, handle: _RunHandle, reason: str) -> None:
        if handle.cancel_reason is None:
            handle.cancel_reason = reason
        if handle.io is not None and not handle.io.done():
            handle.io.cancel()

    # -- ownership ----------------------------------------------------------------------------------

    def _ttl_ms(self) -> int:
        return int(self.settings.lease_ttl_s * 1000)

    async def _claim_and_launch(self, run_ids: list[str] | None = None) -> None:
        capacity = self.settings.max_concurrent_runs - len(self._runs)
        if capacity <= 0 or self._stopping:
            return
        claims = await self.store.claim(
            owner=self.owner,
            now_ms=self._now_ms(),
            ttl_ms=self._ttl_ms(),
            limit=capacity,
            run_ids=run_ids or (),
        )
        for claim in claims:
            self._launch(claim.run_id, claim.generation)

    def _launch(self, run_id: str, generation: int, fresh: _Fresh | None = None) -> None:
        if run_id in self._runs:
            return
        handle = _RunHandle(run_id, generation)
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
            except Exception:
                log.exception("claiming runs failed")

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_ttl_s / 3)
            owned = list(self._runs)
            try:
                kept = await self.store.renew(
                    owner=self.owner, run_ids=owned, now_ms=self._now_ms(), ttl_ms=self._ttl_ms()
                )
            except Exception:
                log.exception("renewing leases failed")
                continue
            for run_id in set(owned) - kept:
                handle = self._runs.get(run_id)
                if handle is not None and handle.task is not None:
                    log.warning("lease lost for run %s; stopping it", run_id)
                    self.counters.inc("lease_lost_count")
                    handle.task.cancel()

    # -- driving a run ------------------------------------------------------------------------------

    async def _drive_guarded(self, handle: _RunHandle, fresh: _Fresh | None) -> None:
        try:
            await _RunDriver(self, handle).drive(fresh)
        except LeaseLost:
            self.counters.inc("lease_lost_count")
            log.warning("run %s: lease lost, this worker stops writing", handle.run_id)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception(
                "run %s: driver crashed; the run stays as persisted and is retried on reclaim", handle.run_id
            )
        finally:
            self._runs.pop(handle.run_id, None)
            if not self._runs:
                self._idle.set()


class _RunDriver:
    """One ownership period of one run."""

    def __init__(self, engine: Engine, handle: _RunHandle):
        self.engine = engine
        self.handle = handle
        self.run_id = handle.run_id
        self.buffer: list[Event] = []
        self.revision = 0
        self.state = RunState(run_id=handle.run_id)
        self.released = False

    async def drive(self, fresh: _Fresh | None) -> None:
        engine = self.engine
        if fresh is not None:  # just created here: its row and log are known, skip the reads
            record, stored = fresh
        else:
            found = await engine.store.get_run(self.run_id)
            if found is None or found.lease_owner != engine.owner:
                return
            record, stored = found, await self._read_log()
        self.state = replay(self.run_id, [Event(e.type, json.loads(e.payload)) for e in stored])
        self.revision = record.revision
        self.agent = ResolvedAgent.from_snapshot(record.agent_spec)
        self.budgets = Budgets.from_json(json.loads(record.budgets))
        self.deadline_s = record.deadline_ms / 1000
        if record.cancel_requested_ms is not None and self.handle.cancel_reason is None:
            self.handle.cancel_reason = record.cancel_reason or "cancelled"
        await self._loop()
        if not self.released:
            await engine.store.release(self.run_id, owner=engine.owner)
            self.released = True

    async def _read_log(self) -> list[StoredEvent]:
        stored: list[StoredEvent] = []
        while True:
            page = await self.engine.store.read_events(self.run_id, after_seq=stored[-1].seq if stored else 0)
            stored.extend(page)
            if len(page) < 1000:
                return stored

    def _add(self, *events: Event) -> None:
        for event in events:
            self.state.apply(event)
            self.state.seq += 1
            self.buffer.append(event)

    async def _flush(self) -> None:
        if not self.buffer:
            return
        engine = self.engine
        now_ms = engine._now_ms()
        first_seq = self.state.seq - len(self.buffer) + 1
        payloads = [(e.type, json.dumps(e.data)) for e in self.buffer]
        values: dict[str, Any] = {
            "phase": self.state.phase.value,
            "usage": json.dumps(self.state.usage.to_json()),
            "output": self.state.output,
            "reason": self.state.reason,
        }
        if self.state.ended:  # the closing commit also gives the lease back: one commit, not two
            values.update(lease_owner=None, lease_expires_ms=None)
        self.revision = await engine.store.append(
            self.run_id,
            expected_revision=self.revision,
            owner=engine.owner,
            first_seq=first_seq,
            new_events=payloads,
            values=values,
            now_ms=now_ms,
        )
        self.buffer.clear()
        self.released = self.state.ended
        engine.bus.publish(
            self.run_id,
            [StoredEvent(self.run_id, first_seq + i, t, p, now_ms) for i, (t, p) in enumerate(payloads)],
        )
        if self.state.ended:
            engine.counters.inc("runs_ended")
            if self.state.any_tool_started and self.state.phase is not Phase.COMPLETED:
                engine.counters.inc("partial_run_count")

    async def _loop(self) -> None:
        engine = self.engine
        while True:
            phase = self.state.phase
            if (
                self.handle.cancel_reason is not None
                and not phase.terminal
                and phase not in (Phase.CANCEL_REQUESTED, Phase.UNKNOWN_OUTCOME)
            ):
                self._add(Event(ev.CANCEL_REQUESTED, {"reason": self.handle.cancel_reason}))
            clock = Clock(
                now_s=engine.clock(), deadline_s=self.deadline_s, reserve_s=engine.settings.call_reserve_s
            )
            decision = decide(self.state, self.budgets, clock)
            match decision:
                case Append(events=events):
                    self._add(*events)
                case CallModel(step=step):
                    await self._flush()
                    engine.counters.inc("steps")
                    await self._model_step(step)
                case InvokeTool(call=call):
                    await self._flush()
                    engine.counters.inc("steps")
                    await self._tool_call(call)
                case Idle():
                    await self._flush()
                    return
                case _:
                    raise RuntimeError(f"unrecognised decision {decision!r}")

    def _timeout(self, call_timeout: float) -> float:
        engine = self.engine
        return call_timeout_s(
            now_s=engine.clock(),
            run_deadline_s=self.deadline_s,
            call_timeout_s=call_timeout,
            reserve_s=engine.settings.call_reserve_s,
        )

    async def _io(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run one call so that a cancel request can cancel it (and only it)."""
        if self.handle.cancel_reason is not None:
            raise _Cancelled()
        future = asyncio.ensure_future(make())
        self.handle.io = future
        try:
            return await future
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.handle.cancel_reason is not None and current is not None and not current.cancelling():
                raise _Cancelled() from None
            raise
        finally:
            self.handle.io = None

    async def _sleep(self, delay_s: float) -> None:
        await self._io(lambda: asyncio.sleep(delay_s))

    # -- model --------------------------------------------------------------------------------------

    def _model_request(self, step: int, timeout_s: float) -> ModelRequest:
        config: AgentConfig = self.agent.config
        messages: list[Message] = []
        if config.instructions:
            messages.append(Message(role="system", content=config.instructions))
        for entry in self.state.history:
            if entry.role == "assistant":
                calls = tuple(
                    ModelToolCall(call_id=c, tool=t, arguments_json=a) for c, t, a in entry.tool_calls
                )
                messages.append(Message(role="assistant", content=entry.content, tool_calls=calls))
            elif entry.role == "tool":
                messages.append(Message(role="tool", content=entry.content, tool_call_id=entry.tool_call_id))
            else:
                messages.append(Message(role="user", content=entry.content))
        tools = []
        for name in config.tools:
            spec = self.engine.tools.spec(name)
            if spec is not None:
                tools.append(
                    ToolDef(
                        name=name,
                        description=spec.description,
                        input_schema=json.loads(spec.input_schema_json or "{}"),
                    )
                )
        model = config.model
        return ModelRequest(
            run_id=self.run_id,
            step=self.state.usage.model_steps + 1,
            spec=ModelSpecData(provider=model.provider, name=model.name, options=model.options),
            messages=tuple(messages),
            tools=tuple(tools),
            timeout_s=timeout_s,
        )

    async def _model_step(self, step: int) -> None:
        engine = self.engine
        try:
            provider = engine.models.provider(
                ModelSpecData(
                    provider=self.agent.config.model.provider,
                    name=self.agent.config.model.name,
                    options=self.agent.config.model.options,
                )
            )
        except ModelError as exc:
            self._add(*end_events(self.state, Phase.FAILED, f"model_error:{exc.reason}", message=str(exc)))
            return
        attempt = 0
        while True:
            attempt += 1
            timeout = self._timeout(engine.settings.model_timeout_s)
            if timeout <= 0:
                self._add(*end_events(self.state, Phase.EXPIRED, "deadline_exceeded", retryable=True))
                return
            request = self._model_request(step, timeout)
            try:
                sink = self._delta_sink(step)
                response = await self._io(partial(provider.complete, request, on_text_delta=sink))
                break
            except _Cancelled:
                return
            except ModelTransientError as exc:
                delay = max(
                    exc.retry_after_s or 0.0,
                    backoff_delay_s(
                        attempt=attempt, base_s=_BACKOFF_BASE_S, cap_s=_BACKOFF_CAP_S, rand=engine.rand()
                    ),
                )
                if attempt >= _MODEL_ATTEMPTS or not retry_fits(
                    now_s=engine.clock(), delay_s=delay, expected_call_s=0.0, deadline_s=self.deadline_s
                ):
                    engine.counters.inc("retry_exhausted_count")
                    self._add(
                        *end_events(
                            self.state, Phase.FAILED, "model_unavailable", message=str(exc), retryable=True
                        )
                    )
                    return
                engine.counters.inc("retry_count")
                try:
                    await self._sleep(delay)
                except _Cancelled:
                    return
            except ModelAuthError as exc:
                self._add(*end_events(self.state, Phase.FAILED, "model_auth", message=str(exc)))
                return
            except ModelError as exc:
                self._add(
                    *end_events(self.state, Phase.FAILED, f"model_error:{exc.reason}", message=str(exc))
                )
                return
        before = self.state.usage.to_json()
        after = dict(
            before,
            model_steps=self.state.usage.model_steps + 1,
            input_tokens=self.state.usage.input_tokens + response.input_tokens,
            output_tokens=self.state.usage.output_tokens + response.output_tokens,
        )
        calls = [
            {"call_id": c.call_id, "tool": c.tool, "arguments_json": c.arguments_json}
            for c in response.tool_calls
        ]
        self._add(
            Event(
                ev.MODEL_COMPLETED,
                {
                    "step": step,
                    "text": response.text,
                    "tool_calls": calls,
                    "usage_before": before,
                    "usage_after": after,
                },
            )
        )

    def _delta_sink(self, step: int) -> Callable[[str], None]:
        bus = self.engine.bus
        run_id = self.run_id

        def sink(text: str) -> None:
            payload = json.dumps({"step": step, "text": text})
            bus.publish(run_id, [StoredEvent(run_id, 0, ev.MODEL_TEXT_DELTA, payload, self.engine._now_ms())])

        return sink

    # -- tools --------------------------------------------------------------------------------------

    async def _tool_call(self, call: CallState) -> None:
        engine = self.engine
        spec = engine.tools.spec(call.tool)
        spec_timeout = spec.default_timeout.ToTimedelta().total_seconds() if spec is not None else 0.0
        attempt = call.attempts
        while True:
            timeout = self._timeout(spec_timeout or engine.settings.tool_timeout_s)
            if timeout <= 0:
                self._add(*end_events(self.state, Phase.EXPIRED, "deadline_exceeded", retryable=True))
                return
            metadata = CallMetadata(
                idempotency_key=call.idempotency_key,
                run_id=self.run_id,
                call_id=call.call_id,
                attempt=attempt,
                fencing_token=self.handle.generation,
            )
            started = engine.clock()
            try:
                invoke = partial(
                    engine.tools.invoke, call.tool, call.arguments_json, metadata=metadata, timeout_s=timeout
                )
                outcome = await self._io(invoke)
            except _Cancelled:
                outcome = await self._outcome_after_cancel(call, spec)
            code = (outcome.error or {}).get("code", "")
            if code == "TOOL_ERROR_CODE_TRANSIENT" and self.handle.cancel_reason is None:
                if "deadline" in (outcome.error or {}).get("message", ""):
                    engine.counters.inc("timeout_count")
                delay = backoff_delay_s(
                    attempt=attempt, base_s=_BACKOFF_BASE_S, cap_s=_BACKOFF_CAP_S, rand=engine.rand()
                )
                fits = retry_fits(
                    now_s=engine.clock(),
                    delay_s=delay,
                    expected_call_s=engine.clock() - started,
                    deadline_s=self.deadline_s,
                )
                if attempt < _TOOL_ATTEMPTS and fits:
                    engine.counters.inc("retry_count")
                    attempt += 1
                    self._add(
                        Event(
                            ev.RETRY_SCHEDULED,
                            {
                                "call_id": call.call_id,
                                "attempt": attempt,
                                "delay": f"{delay:.3f}s",
                                "reason": code,
                            },
                        )
                    )
                    await self._flush()
                    try:
                        await self._sleep(delay)
                    except _Cancelled:
                        self._record(call, ToolOutcome.failure("CANCELLED", "cancelled during retry backoff"))
                        return
                    usage = self.state.usage.to_json()
                    self._add(
                        Event(
                            ev.TOOL_STARTED,
                            {
                                "step": call.step,
                                "call_id": call.call_id,
                                "tool": call.tool,
                                "arguments_json": call.arguments_json,
                                "idempotency_key": call.idempotency_key,
                                "attempt": attempt,
                                "usage_before": usage,
                                "usage_after": usage,
                            },
                        )
                    )
                    await self._flush()
                    continue
                engine.counters.inc("retry_exhausted_count")
            self._record(call, outcome)
            return

    def _record(self, call: CallState, outcome: ToolOutcome) -> None:
        engine = self.engine
        if outcome.replayed:
            engine.counters.inc("duplicate_suppressed_count")
        base = {"step": call.step, "call_id": call.call_id, "tool": call.tool}
        if outcome.error is None:
            self._add(
                Event(
                    ev.TOOL_COMPLETED,
                    dict(base, result_json=outcome.result_json or "", replayed=outcome.replayed),
                )
            )
            return
        code = outcome.error.get("code", "")
        if code == "TOOL_ERROR_CODE_FENCED":
            raise LeaseLost(f"tool host refused run {self.run_id}'s fencing token {self.handle.generation}")
        self._add(Event(ev.TOOL_FAILED, dict(base, error=outcome.error)))
        if code == "TOOL_ERROR_CODE_UNAUTHORIZED":
            self._add(
                *end_events(
                    self.state,
                    Phase.FAILED,
                    f"tool_unauthorized:{call.tool}",
                    message=outcome.error.get("message", ""),
                )
            )
        elif code == "TOOL_ERROR_CODE_KEY_CONFLICT":
            self._add(
                *end_events(
                    self.state, Phase.FAILED, "idempotency_conflict", message=outcome.error.get("message", "")
                )
            )

    async def _outcome_after_cancel(self, call: CallState, spec: Any) -> ToolOutcome:
        """A cancel stopped a call in flight: learn what a write did before recording anything."""
        read_only = spec is not None and spec.side_effect == 1  # SIDE_EFFECT_READ_ONLY
        if read_only or spec is None:
            return ToolOutcome.failure("CANCELLED", "cancelled in flight")
        try:
            operation = await self.engine.tools.get_operation(call.tool, call.idempotency_key, timeout_s=2.0)
        except Exception:
            operation = None
            self.engine.counters.inc("unknown_result_count")
            return ToolOutcome.failure(
                "CANCELLED", "cancelled in flight; the write's outcome could not be queried"
            )
        if operation is None:
            return ToolOutcome.failure("CANCELLED", "cancelled before the tool host recorded the call")
        if operation.status == 2:  # OPERATION_STATUS_SUCCEEDED
            return ToolOutcome(operation.result_json, None, True)
        if operation.status == 3:  # OPERATION_STATUS_FAILED
            error = json_format.MessageToDict(operation.error, preserving_proto_field_name=True)
            return ToolOutcome(None, error)
        self.engine.counters.inc("unknown_result_count")
        return ToolOutcome.failure("CANCELLED", "cancelled in flight; the write was still running")
