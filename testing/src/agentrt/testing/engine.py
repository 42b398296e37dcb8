"""In-process fakes of the engine's ports, to test the step loop without spawning a process.

Needs ``agentrt-server`` installed (it builds :class:`agentrt.server.engine.Ports`). Nothing
here is on a production path: the engine builds its ports from the real store, router,
registry and bus; tests build them from these::

    world = EngineWorld(agent=AgentConfig(tools=["refund.issue"]))
    world.tools.add("refund.issue", side_effect="write", handler=issue)
    world.models.answer(tool_calls=[("c1", "refund.issue", '{"order_id": "A1"}')])
    world.models.answer(text="done")
    run_id = world.create_run("refund A1")
    await world.drive(run_id)
    assert world.log.phase(run_id) == "COMPLETED"

A "crash" is the driving task cancelled where it stands (what a killed process leaves is what
was committed); :meth:`EngineWorld.take_over` then hands the run to a new owner with the next
fencing token, as a lease expiry would, and :meth:`EngineWorld.drive` drives it again.

- :class:`MemoryRunLog`: runs and their logs with the store's fencing (revision and owner); it can
  "crash" (raise :class:`Crashed`) right after its N-th commit.
- :class:`FakeTools`: tool contracts, handlers and a ledger keyed by idempotency key; like a real
  tool host, it lets a write run on when its caller is cut off, and stops one only on an explicit
  cancel (which a handler sees through :meth:`FakeTools.cancel_signal`).
- :class:`ScriptedModels`: queued answers or errors; a gate holds a call in flight.
- :class:`MemoryPayloads`, :class:`RecordingLive`, :class:`ManualClock` (its ``sleep`` advances it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pluggy
from google.protobuf import duration_pb2

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.config import AgentConfig, Settings
from agentrt.server.core import (
    STATE_VERSION,
    LeaseLost,
    LedgerSilence,
    LedgerWord,
    Phase,
    StaleRevision,
    ToolErrorCode,
    rfc3339,
)
from agentrt.server.engine import (
    FaultPlan,
    Ports,
    ResolvedAgent,
    RunHandle,
    StartRequest,
    drive_contained,
    signal_cancel,
)
from agentrt.server.models import (
    ModelConfigError,
    ModelRequest,
    ModelResponse,
    ModelSpecData,
    ModelToolCall,
)
from agentrt.server.policies import Policies, get_policy_plugin_manager
from agentrt.server.store import (
    Claim,
    PayloadRef,
    RunRecord,
    Signal,
    StoredCheckpoint,
    StoredEvent,
    StoredPayload,
    TypedCommits,
)
from agentrt.server.telemetry import Counters
from agentrt.server.tools import CallMetadata, ToolOutcome

__all__ = [
    "Crashed",
    "EngineWorld",
    "FakeChildRuns",
    "FakeTools",
    "ManualClock",
    "MemoryPayloads",
    "MemoryRunLog",
    "RecordingLive",
    "ScriptedModels",
    "ToolCallSeen",
]

EPOCH_S = 1_800_000_000.0  # a fixed "now" to start the manual clock at


class ManualClock:
    """Time that moves only when a test (or a sleep) moves it."""

    def __init__(self, now_s: float = EPOCH_S):
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds

    async def sleep(self, seconds: float) -> None:
        """Advance the clock by ``seconds`` at once; yield so other tasks run."""
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)


class Crashed(BaseException):
    """The process died right after a commit (``MemoryRunLog.crash_after``). A BaseException, so
    nothing in the engine catches it: it ends the drive as a kill would."""


class MemoryRunLog(TypedCommits):
    """Runs, their logs and queued signals in memory, with the store's fencing rules."""

    def __init__(self) -> None:
        self.crash_after: int | None = None  # die right after this many appends in all
        self.runs: dict[str, RunRecord] = {}
        self.events: dict[str, list[StoredEvent]] = {}
        self.signals: dict[str, list[Signal]] = {}
        self.checkpoints: dict[str, StoredCheckpoint] = {}  # the latest of each run
        self.checkpoint_reads = 0
        self._signal_ids = itertools.count(1)
        self.appends = 0
        self.reparks = 0  # parks that recorded nothing: a row update, no commit of the log

    # -- the port -----------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunRecord | None:
        return self.runs.get(run_id)

    async def read_events(self, run_id: str, *, after_seq: int = 0) -> list[StoredEvent]:
        return [e for e in self.events.get(run_id, []) if e.seq > after_seq][:1000]

    async def read_signals(self, run_id: str) -> list[Signal]:
        return list(self.signals.get(run_id, []))

    async def append(
        self,
        run_id: str,
        *,
        expected_revision: int,
        owner: str,
        first_seq: int,
        new_events: Sequence[tuple[str, str]],
        values: Mapping[str, Any],
        now_ms: int,
        consume_signals: Sequence[int] = (),
    ) -> int:
        record = self.runs[run_id]
        if record.lease_owner != owner:
            raise LeaseLost(f"run {run_id} is owned by {record.lease_owner!r}, not {owner!r}")
        if record.revision != expected_revision:
            raise LeaseLost(f"run {run_id} is at revision {record.revision}, not {expected_revision}")
        if first_seq != record.last_seq + 1:
            raise StaleRevision(f"run {run_id}: first_seq {first_seq} after {record.last_seq}")
        log = self.events.setdefault(run_id, [])
        for i, (event_type, payload) in enumerate(new_events):
            json.loads(payload)  # what the store keeps is JSON text
            log.append(StoredEvent(run_id, first_seq + i, event_type, payload, now_ms))
        known = {f.name for f in dataclasses.fields(RunRecord)}
        changes = {k: v for k, v in values.items() if k in known}
        unknown = set(values) - known
        if unknown:
            raise KeyError(f"no run column {sorted(unknown)}")
        self.runs[run_id] = dataclasses.replace(
            record,
            **changes,
            revision=record.revision + 1,
            last_seq=record.last_seq + len(new_events),
            updated_ms=now_ms,
        )
        if consume_signals:
            gone = set(consume_signals)
            self.signals[run_id] = [s for s in self.signals.get(run_id, []) if s.id not in gone]
        self.appends += 1
        if self.appends == self.crash_after:
            raise Crashed(f"crashed after commit {self.appends}")
        return record.revision + 1

    async def release(self, run_id: str, *, owner: str, generation: int | None = None) -> None:
        record = self.runs.get(run_id)
        if record is None or (generation is not None and record.lease_generation != generation):
            return
        if record.lease_owner == owner:
            self.runs[run_id] = dataclasses.replace(record, lease_owner=None, lease_expires_ms=None)

    async def repark(
        self, run_id: str, *, owner: str, expected_revision: int, wake_ms: int, reconcile_attempts: int
    ) -> None:
        record = self.runs[run_id]
        if record.lease_owner != owner or record.revision != expected_revision:
            raise LeaseLost(f"run {run_id} moved past revision {expected_revision} or changed owner")
        self.runs[run_id] = dataclasses.replace(
            record,
            wake_ms=wake_ms,
            reconcile_attempts=reconcile_attempts,
            lease_owner=None,
            lease_expires_ms=None,
        )
        self.reparks += 1

    async def write_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        latest = self.checkpoints.get(checkpoint.run_id)
        if latest is None or latest.through_seq < checkpoint.through_seq:
            self.checkpoints[checkpoint.run_id] = checkpoint

    async def read_checkpoint(self, run_id: str) -> StoredCheckpoint | None:
        self.checkpoint_reads += 1
        return self.checkpoints.get(run_id)

    # -- what a test sets up and reads --------------------------------------------------------------

    def create(
        self,
        *,
        agent: ResolvedAgent,
        input: str,
        owner: str,
        now_ms: int,
        budgets_json: Mapping[str, Any],
        deadline_ms: int,
        tenant_id: str = "default",
    ) -> RunRecord:
        """A QUEUED run owned by ``owner`` (generation 1), with its run.started event."""
        run_id = f"{now_ms:012x}{uuid.uuid4().hex[:20]}"
        started = {
            "agent_name": agent.name,
            "input": input,
            "budgets": dict(budgets_json),
            "deadline": rfc3339(deadline_ms),
            "started_by": "test",
        }
        record = RunRecord(
            run_id=run_id,
            tenant_id=tenant_id,
            agent_name=agent.name,
            agent_spec=agent.snapshot_json(),
            input=input,
            output="",
            reason="",
            phase=Phase.QUEUED.value,
            revision=1,
            last_seq=1,
            budgets=json.dumps(dict(budgets_json)),
            usage="{}",
            request_key=None,
            session_id=None,
            metadata="{}",
            created_ms=now_ms,
            updated_ms=now_ms,
            deadline_ms=deadline_ms,
            lease_owner=owner,
            lease_expires_ms=now_ms + 15_000,
            lease_generation=1,
            cancel_requested_ms=None,
            cancel_reason=None,
            wake_ms=None,
            pending_approval=None,
            state_version=STATE_VERSION,
            runtime_version="test",
            agent_config_hash=agent.config_hash(),
        )
        self.runs[run_id] = record
        self.events[run_id] = [StoredEvent(run_id, 1, "run.started", json.dumps(started), now_ms)]
        return record

    async def claim_cleanups(self, *, owner: str, now_ms: int, ttl_ms: int, limit: int) -> list[Claim]:
        """The cleanup job's claim, as the store makes it: ended runs with UNKNOWN cleanups, due."""
        claims: list[Claim] = []
        for run_id, record in sorted(self.runs.items(), key=lambda item: item[1].cleanup_due_ms or 0):
            free = record.lease_owner is None or (record.lease_expires_ms or 0) < now_ms
            due = record.cleanup_due_ms is not None and record.cleanup_due_ms <= now_ms
            ended = record.phase in ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED")
            if record.cleanup_status == "UNKNOWN" and due and ended and free and len(claims) < limit:
                generation = record.lease_generation + 1
                self.runs[run_id] = dataclasses.replace(
                    record, lease_owner=owner, lease_expires_ms=now_ms + ttl_ms, lease_generation=generation
                )
                claims.append(Claim(run_id, generation))
        return claims

    def take_over(self, run_id: str, owner: str) -> int:
        """Give the run to ``owner`` with the next fencing token (a lease expiry and a claim)."""
        record = self.runs[run_id]
        generation = record.lease_generation + 1
        self.runs[run_id] = dataclasses.replace(
            record, lease_owner=owner, lease_generation=generation, wake_ms=None
        )
        return generation

    def add_signal(self, run_id: str, kind: str, payload: Mapping[str, Any]) -> None:
        signal = Signal(next(self._signal_ids), run_id, kind, json.dumps(dict(payload)))
        self.signals.setdefault(run_id, []).append(signal)

    def types(self, run_id: str) -> list[str]:
        return [e.type for e in self.events[run_id]]

    def payloads(self, run_id: str, event_type: str) -> list[dict[str, Any]]:
        return [json.loads(e.payload) for e in self.events[run_id] if e.type == event_type]

    def phase(self, run_id: str) -> str:
        return self.runs[run_id].phase


@dataclass(frozen=True, slots=True)
class ToolCallSeen:
    """One call a fake tool received."""

    tool: str
    arguments_json: str
    metadata: CallMetadata


ToolHandler = Callable[[str, CallMetadata], Awaitable[ToolOutcome]]


class FakeTools:
    """Tool contracts and handlers, with a ledger keyed by idempotency key like a tool host's.

    A handler runs as the host's own task: a read is cancelled with its caller, but a write runs
    to its end when its caller is cut off (a crash is never a cancellation) and records its
    outcome. An outcome marked ``in_doubt`` (the host cannot tell, e.g. still running) leaves the
    ledger entry "running" for the test to settle.
    """

    def __init__(self) -> None:
        self.specs: dict[str, tool_pb2.ToolSpec] = {}
        self.handlers: dict[str, ToolHandler] = {}
        self.ledger: dict[str, ToolOutcome | Literal["running"]] = {}
        self.calls: list[ToolCallSeen] = []
        self.queries: list[str] = []
        self.cancels: list[str] = []  # keys an explicit cancel (CancelOperation) named
        self.running: dict[str, asyncio.Task[ToolOutcome]] = {}
        self._cancel_signals: dict[str, asyncio.Event] = {}
        self.unreachable = False  # queries fail as if the host were down
        self.host = "fake-host"  # the host name outcomes carry, as the router stamps its hosts'

    def add(
        self,
        name: str,
        handler: ToolHandler,
        *,
        side_effect: Literal["read", "write"] = "write",
        idempotent: bool = False,
        concurrency_safe: bool = False,
        timeout_s: float = 0.0,
        requires_approval: bool = False,
        version: str = "1",
    ) -> None:
        spec = tool_pb2.ToolSpec(
            name=name,
            description=f"{name} (fake)",
            input_schema_json='{"type": "object"}',
            side_effect=(
                tool_pb2.SIDE_EFFECT_READ_ONLY if side_effect == "read" else tool_pb2.SIDE_EFFECT_WRITE
            ),
            idempotent=idempotent,
            concurrency_safe=concurrency_safe,
            requires_approval=requires_approval,
            version=version,
        )
        if timeout_s:
            spec.default_timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout_s)))
        self.specs[name] = spec
        self.handlers[name] = handler

    def spec(self, tool: str) -> tool_pb2.ToolSpec | None:
        return self.specs.get(tool)

    def host_of(self, tool: str) -> str:
        return self.host if tool in self.specs else ""

    async def wait_for_spec(self, tool: str, timeout_s: float) -> bool:
        return True  # every tool a fake serves is known from the start

    async def invoke(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        handler = self.handlers.get(tool)
        if handler is None:
            return ToolOutcome.failure("UNKNOWN_TOOL", f"no fake serves {tool!r}")
        key = metadata.idempotency_key
        done = self.ledger.get(key)
        retryable = (ToolErrorCode.TRANSIENT, ToolErrorCode.CANCELLED, ToolErrorCode.UNAUTHORIZED)
        if isinstance(done, ToolOutcome) and done.code not in retryable:
            # A tool host replays a final outcome for the same key (and runs a retryable one again).
            return dataclasses.replace(done, replayed=True)
        self.calls.append(ToolCallSeen(tool, arguments_json, metadata))
        self.ledger[key] = "running"
        self._cancel_signals[key] = asyncio.Event()
        task = asyncio.ensure_future(self._run(key, handler, arguments_json, metadata))
        self.running[key] = task
        spec = self.specs[tool]
        if spec.side_effect != tool_pb2.SIDE_EFFECT_READ_ONLY and not spec.idempotent:
            return await asyncio.shield(task)  # a cut caller leaves the write running
        try:
            return await task
        except asyncio.CancelledError:
            task.cancel()
            raise

    async def _run(
        self, key: str, handler: ToolHandler, arguments_json: str, metadata: CallMetadata
    ) -> ToolOutcome:
        try:
            outcome = await handler(arguments_json, metadata)
        except asyncio.CancelledError:
            self.ledger.pop(key, None)  # cancelled before its effect
            raise
        finally:
            self.running.pop(key, None)
        outcome = dataclasses.replace(outcome, host=self.host)
        if outcome.in_doubt:
            pass  # the host cannot tell yet: the entry stays "running"
        elif outcome.code is ToolErrorCode.TRANSIENT:
            self.ledger.pop(key, None)  # not done: the same key may run it again
        else:
            self.ledger[key] = outcome
        return outcome

    def cancel_signal(self, key: str) -> asyncio.Event:
        """Set when an explicit cancel names the call with ``key`` (what ``ctx.cancelled`` is to a tool)."""
        return self._cancel_signals.setdefault(key, asyncio.Event())

    async def cancel(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, reason: str, timeout_s: float
    ) -> bool:
        key = metadata.idempotency_key
        self.cancels.append(key)
        if key not in self.running:
            return False
        self.cancel_signal(key).set()
        return True

    def lose(self, key: str) -> None:
        """The call never reached the host: no body runs, no ledger entry."""
        task = self.running.pop(key, None)
        if task is not None:
            task.cancel()
        self.ledger.pop(key, None)

    async def query(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> LedgerWord:
        self.queries.append(metadata.idempotency_key)
        if self.unreachable:
            return LedgerSilence.UNKNOWN
        found = self.ledger.get(metadata.idempotency_key)
        if found is None:
            return LedgerSilence.NOT_FOUND
        if found == "running":
            return LedgerSilence.UNKNOWN
        return dataclasses.replace(found, replayed=True)

    async def preview(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> str:
        return f"would call {tool} with {arguments_json}"

    def calls_of(self, tool: str) -> list[ToolCallSeen]:
        return [c for c in self.calls if c.tool == tool]


class ScriptedModels:
    """Answers in order; an exception in the queue is raised instead. ``gate`` holds each call.

    With ``by_step`` the answer is chosen by the request's step number instead (the first for step
    1, ...) and kept: a step asked again after a crash gets the same answer, as a
    deterministic model would give.
    """

    def __init__(self) -> None:
        self.by_step = False
        self.queue: list[ModelResponse | BaseException] = []
        self.requests: list[ModelRequest] = []
        self.gate: asyncio.Event | None = None  # when set to an unset Event, calls wait for it
        self.in_flight = asyncio.Event()  # set when a call is waiting at the gate
        self.broken = False  # ``check`` fails: no provider can be made
        # The provider's own count of a request's prompt tokens, reported in the usage; None: 10.
        self.count_prompt: Callable[[ModelRequest], int] | None = None
        # Answers to summary requests (purpose "summary"), in order; they never take a step's.
        self.summaries: list[str | BaseException] = []
        self.summary_requests: list[ModelRequest] = []

    def answer(self, text: str = "", tool_calls: Iterable[tuple[str, str, str]] = ()) -> None:
        calls = tuple(ModelToolCall(call_id=c, tool=t, arguments_json=a) for c, t, a in tool_calls)
        self.queue.append(
            ModelResponse(
                text=text,
                tool_calls=calls,
                input_tokens=10,
                output_tokens=5,
                finish_reason="tool_calls" if calls else "stop",
            )
        )

    def fail(self, error: BaseException) -> None:
        self.queue.append(error)

    def check(self, spec: ModelSpecData) -> None:
        if self.broken:
            raise ModelConfigError("no provider for the fake spec")

    async def complete(
        self, spec: ModelSpecData, request: ModelRequest, *, on_text_delta: Callable[[str], None]
    ) -> ModelResponse:
        if request.purpose == "summary":
            self.summary_requests.append(request)
            answer = self.summaries.pop(0) if self.summaries else "(summary)"
            if isinstance(answer, BaseException):
                raise answer
            return ModelResponse(
                text=answer, tool_calls=(), input_tokens=100, output_tokens=20, finish_reason="stop"
            )
        self.requests.append(request)
        if self.gate is not None:
            self.in_flight.set()
            await self.gate.wait()
        if self.by_step:
            if not 0 < request.step <= len(self.queue):
                raise AssertionError(f"the scripted model has no answer for step {request.step}")
            item = self.queue[request.step - 1]
        elif not self.queue:
            raise AssertionError("the scripted model ran out of answers")
        else:
            item = self.queue.pop(0)
        if isinstance(item, BaseException):
            raise item
        if self.count_prompt is not None:
            item = dataclasses.replace(item, input_tokens=self.count_prompt(request))
        if item.text:
            on_text_delta(item.text)
        return item


class MemoryPayloads:
    """Payloads of runs in memory, addressed by sha256 like the real store."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], tuple[StoredPayload, bytes]] = {}

    async def put(
        self, *, run_id: str, tenant_id: str, kind: str, media_type: str, text: str, now_ms: int
    ) -> PayloadRef:
        data = text.encode()
        digest = hashlib.sha256(data).hexdigest()
        ref = PayloadRef(
            payload_id=digest, size_bytes=len(data), sha256=digest, preview=text[:200], media_type=media_type
        )
        stored = StoredPayload(run_id=run_id, tenant_id=tenant_id, kind=kind, location="memory", ref=ref)
        self.items[(run_id, digest)] = (stored, data)
        return ref

    async def find(self, *, run_id: str, payload_id: str, tenant_id: str) -> StoredPayload | None:
        found = self.items.get((run_id, payload_id))
        return found[0] if found is not None and found[0].tenant_id == tenant_id else None

    async def chunks(self, stored: StoredPayload, *, chunk_bytes: int) -> AsyncIterator[bytes]:
        data = self.items[(stored.run_id, stored.ref.payload_id)][1]
        for start in range(0, len(data), chunk_bytes):
            yield data[start : start + chunk_bytes]


class RecordingLive:
    """What the engine published to live readers, in order."""

    def __init__(self) -> None:
        self.published: list[tuple[StoredEvent, int | None]] = []

    def publish(self, run_id: str, items: Iterable[StoredEvent], *, after_seq: int | None = None) -> None:
        self.published.extend((item, after_seq) for item in items)


class FakeChildRuns:
    """Child runs are not started in-process; a call to an agent tool fails PERMANENT."""

    async def start(self, request: StartRequest) -> str:
        raise NotImplementedError("child runs need the process-level tests")

    async def wait_for_end(self, run_id: str) -> RunRecord:
        raise NotImplementedError("child runs need the process-level tests")

    async def cancel(self, run_id: str, *, tenant_id: str, reason: str, requested_by: str) -> None:
        return None


@dataclass
class EngineWorld:
    """One agent, its fakes, and runs driven by the real step loop."""

    agent: AgentConfig = field(default_factory=AgentConfig)
    settings: Settings = field(default_factory=lambda: Settings(retry_base_s=0.01, retry_cap_s=0.05))
    policy_plugins: Sequence[object] = ()
    faults: str = ""  # a FaultPlan spec, e.g. "after_model_response=raise"
    owner: str = "worker-1"
    clock: ManualClock = field(default_factory=ManualClock)
    log: MemoryRunLog = field(default_factory=MemoryRunLog)
    tools: FakeTools = field(default_factory=FakeTools)
    models: ScriptedModels = field(default_factory=ScriptedModels)
    payloads: MemoryPayloads = field(default_factory=MemoryPayloads)
    live: RecordingLive = field(default_factory=RecordingLive)
    counters: Counters = field(default_factory=Counters)
    handles: dict[str, RunHandle] = field(default_factory=dict)
    draining: asyncio.Event = field(default_factory=asyncio.Event)  # set it: the worker drains (SIGTERM)

    def __post_init__(self) -> None:
        pm: pluggy.PluginManager = get_policy_plugin_manager(entrypoints=False)
        for plugin in self.policy_plugins:
            pm.register(plugin)
        pm.check_pending()
        self.policies = Policies(pm)
        self.fault_plan = FaultPlan(self.faults)

    def ports(self) -> Ports:
        """The ports of the current owner (a take-over changes the owner)."""
        return Ports(
            log=self.log,
            tools=self.tools,
            models=self.models,
            payloads=self.payloads,
            policies=self.policies,
            live=self.live,
            children=FakeChildRuns(),
            counters=self.counters,
            settings=self.settings,
            owner=self.owner,
            clock=self.clock,
            rand=lambda: 0.5,
            stopping=self.draining.is_set,
            faults=self.fault_plan,
            sleep=self.clock.sleep,
            draining=self.draining,
        )

    def create_run(self, input: str = "hello", *, name: str = "agent") -> str:
        resolved = ResolvedAgent.resolve(name, self.agent, {name: self.agent})
        budgets = self.agent.budgets.to_budgets()
        now_ms = int(self.clock() * 1000)
        record = self.log.create(
            agent=resolved,
            input=input,
            owner=self.owner,
            now_ms=now_ms,
            budgets_json=budgets.to_json(),
            deadline_ms=now_ms + int(budgets.timeout_s * 1000),
        )
        return record.run_id

    def handle(self, run_id: str) -> RunHandle:
        """This owner's handle of the run (made on first use, as a claim makes one)."""
        handle = self.handles.get(run_id)
        if handle is None:
            generation = self.log.runs[run_id].lease_generation
            handle = RunHandle(run_id, generation, lease_deadline_s=self.clock() + 3600)
            self.handles[run_id] = handle
        return handle

    async def drive(self, run_id: str) -> None:
        """Drive the run as its owner would, until it ends, parks or goes idle."""
        await drive_contained(self.ports(), self.handle(run_id), None)

    def start(self, run_id: str) -> asyncio.Task[None]:
        """Drive the run in a task (to crash or cancel it while a call is in flight)."""
        return asyncio.get_running_loop().create_task(self.drive(run_id))

    async def crash(self, task: asyncio.Task[None]) -> None:
        """The process dies where the task stands: what was committed is all that remains."""
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def take_over(self, run_id: str, owner: str) -> None:
        """Another worker claims the run after the lease lapsed: new owner, next fencing token."""
        self.owner = owner
        self.log.take_over(run_id, owner)
        self.handles.pop(run_id, None)

    def cancel(self, run_id: str, reason: str = "stop", by: str = "tester") -> None:
        """CancelRun on the owner's replica: the intent is on the row, and the owner is told."""
        record = self.log.runs[run_id]
        now_ms = int(self.clock() * 1000)
        self.log.runs[run_id] = dataclasses.replace(
            record, cancel_requested_ms=now_ms, cancel_reason=reason, cancel_requested_by=by
        )
        signal_cancel(self.handle(run_id), reason, by, now_ms)
