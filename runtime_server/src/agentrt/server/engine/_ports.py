"""What the step executors need from the world, as typed ports.

A run's steps see the store, the tool hosts, the model providers, payloads, policies,
live readers, child runs, counters and time only through these. The engine builds one
:class:`Ports` from its real components; engine tests build one from in-process fakes
(``agentrt.testing.engine``), so the step loop, recovery and cancellation run without
spawning a process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrt.proto.toolhost.v1 import tool_pb2
from agentrt.server.config import Settings
from agentrt.server.core import Event, LedgerWord
from agentrt.server.engine._agents import ResolvedAgent
from agentrt.server.engine._details import StepSettings
from agentrt.server.engine._faults import FaultPlan
from agentrt.server.models import ModelRequest, ModelResponse, ModelSpecData
from agentrt.server.policies import ApprovalRequirement
from agentrt.server.store import (
    Committed,
    PayloadRef,
    RowUpdate,
    RunRecord,
    Signal,
    StoredCheckpoint,
    StoredEvent,
    StoredPayload,
)
from agentrt.server.tools import CallMetadata, ToolOutcome

__all__ = [
    "ChildRuns",
    "Counters",
    "Fresh",
    "LiveEvents",
    "ModelPort",
    "PayloadPort",
    "PolicyPort",
    "Ports",
    "RunLog",
    "StartRequest",
    "ToolPort",
]

# A run created here a moment ago: its row and first events are known, no read needed.
Fresh = tuple[RunRecord, list[StoredEvent]]


@dataclass(frozen=True, slots=True, kw_only=True)
class StartRequest:
    """A validated request to start a run."""

    tenant_id: str
    agent: ResolvedAgent
    input: str
    budget_overrides: Mapping[str, Any] = field(default_factory=dict)
    request_key: str = ""
    request_hash: str = ""  # of the caller's request; "" (internal starts) skips the reuse check
    metadata: Mapping[str, str] = field(default_factory=dict)
    session_id: str = ""
    session_policy: str = "reject"  # reject | enqueue | interrupt (R8.3)
    created_by: str = ""  # subject of the principal that asked (or "run:<id>" for a child run)


class RunLog(Protocol):
    """The run's row and log: fenced appends under the lease (R5.2)."""

    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def read_events(self, run_id: str, *, after_seq: int = 0) -> list[StoredEvent]: ...

    async def read_signals(self, run_id: str) -> list[Signal]: ...

    async def commit(
        self,
        run_id: str,
        *,
        expected_revision: int,
        owner: str,
        first_seq: int,
        events: Sequence[Event],
        update: RowUpdate,
        now_ms: int,
        consume_signals: Sequence[int] = (),
    ) -> Committed:
        """Append ``events`` and apply ``update`` in one transaction fenced by revision and owner;
        the log encodes both (``agentrt.server.store.encode_commit``).

        Raises:
            EventTooLarge: an event past the store's bound; nothing is written.
            LeaseLost: another owner or revision.
        """
        ...

    async def release(self, run_id: str, *, owner: str, generation: int | None = None) -> None:
        """Give the lease back; a no-op unless ``owner`` (at ``generation``, when given) holds it."""
        ...

    async def repark(
        self, run_id: str, *, owner: str, expected_revision: int, wake_ms: int, reconcile_attempts: int
    ) -> None:
        """Park again with nothing to record: new wake time, lease given back, no revision.

        Raises:
            LeaseLost: another owner or revision.
        """
        ...

    async def write_checkpoint(self, checkpoint: StoredCheckpoint) -> None:
        """Keep it as the run's latest checkpoint (its run.checkpointed is committed)."""
        ...

    async def read_checkpoint(self, run_id: str) -> StoredCheckpoint | None:
        """The run's latest checkpoint.

        Raises:
            UnreadableRecord: it is sealed and cannot be opened.
        """
        ...


class ToolPort(Protocol):
    """The tool hosts, as one router: contracts, calls, ledger queries, previews."""

    def spec(self, tool: str) -> tool_pb2.ToolSpec | None: ...

    def host_of(self, tool: str) -> str:
        """The name of the tool host that serves ``tool`` ("" when none does)."""
        ...

    async def wait_for_spec(self, tool: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a *pending* tool (its host has not answered yet) to be learned.

        False only when ``tool`` is still pending then; True when its spec is known, or when no
        host is expected to serve it (the unknown-tool path decides).
        """
        ...

    async def invoke(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> ToolOutcome:
        """Transport failures are outcomes; a cancel of the awaiting task propagates."""
        ...

    async def query(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> LedgerWord:
        """The ledger's recorded outcome (``replayed``), or why there is none; never raises."""
        ...

    async def cancel(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, reason: str, timeout_s: float
    ) -> bool:
        """Ask the host to stop a running call on purpose (CancelOperation); best effort.

        True when the host was running it and signalled it; never raises for an unreachable host.
        """
        ...

    async def preview(
        self, tool: str, arguments_json: str, *, metadata: CallMetadata, timeout_s: float
    ) -> str: ...


class ModelPort(Protocol):
    """Model providers, by spec."""

    def check(self, spec: ModelSpecData) -> None:
        """Raises ModelError when no provider can be made for ``spec``."""
        ...

    async def complete(
        self, spec: ModelSpecData, request: ModelRequest, *, on_text_delta: Callable[[str], None]
    ) -> ModelResponse:
        """Raises ModelError (a subclass says whether a retry may help)."""
        ...


class PayloadPort(Protocol):
    """Values too large for an event, stored once per run (R8.4)."""

    async def put(
        self, *, run_id: str, tenant_id: str, kind: str, media_type: str, text: str, now_ms: int
    ) -> PayloadRef: ...

    async def find(self, *, run_id: str, payload_id: str, tenant_id: str) -> StoredPayload | None: ...

    def chunks(self, stored: StoredPayload, *, chunk_bytes: int) -> AsyncIterator[bytes]: ...


class PolicyPort(Protocol):
    """The policy plugins: approvals, re-checks of approved calls, output guardrails, postconditions."""

    def approval(
        self, *, tool: str, arguments_json: str, agent_name: str, options: Mapping[str, Any], flagged: bool
    ) -> ApprovalRequirement: ...

    def output_guardrail(
        self, *, agent_name: str, input: str, output: str, options: Mapping[str, Any]
    ) -> list[Any]:
        """Each plugin's answer: falsy for a pass, a reason for a failure. May raise."""
        ...

    def recheck_approved(
        self,
        *,
        tool: str,
        arguments_json: str,
        agent_name: str,
        options: Mapping[str, Any],
        run_variables: Mapping[str, str | float | bool],
        read_tool: Callable[[str, Mapping[str, Any]], Any],
    ) -> str | None:
        """A veto's reason, or None. Blocking (run it in a thread); may raise."""
        ...

    def postcondition(
        self,
        *,
        agent_name: str,
        input: str,
        output: str,
        options: Mapping[str, Any],
        tool_results: list[dict[str, Any]],
    ) -> list[Any]: ...

    def summarise(
        self,
        *,
        agent_name: str,
        entries: Sequence[Mapping[str, Any]],
        max_bytes: int,
        options: Mapping[str, Any],
    ) -> str | None:
        """The first summariser plugin's summary of history left out of a context window, or None."""
        ...

    def cleanup(
        self, *, name: str, arguments: Mapping[str, Any], run_id: str, tenant_id: str, attempt: int
    ) -> bool | None:
        """The first plugin's answer for cleanup hook ``name`` (None: none handles it). Blocking."""
        ...


class LiveEvents(Protocol):
    """Readers following runs on this replica (committed events, live-only deltas)."""

    def publish(self, run_id: str, items: Iterable[StoredEvent], *, after_seq: int | None = None) -> None: ...


class ChildRuns(Protocol):
    """Runs an agent started as a tool (R9.1)."""

    async def start(self, request: StartRequest) -> str:
        """The child's run id (the existing one when its request key started it already)."""
        ...

    async def wait_for_end(self, run_id: str) -> RunRecord: ...

    async def cancel(self, run_id: str, *, tenant_id: str, reason: str, requested_by: str) -> None: ...


class Counters(Protocol):
    """Counts and latencies (``agentrt.server.telemetry.Counters``); attributes stay bounded."""

    def bind_run(self, *, tenant: str, agent: str) -> None: ...

    def inc(self, name: str, amount: int = 1, /, **attributes: str) -> None: ...

    def observe(self, name: str, value: float, /, **attributes: str) -> None: ...

    def model_call(self, provider: str, model: str, latency_s: float, usage: Any) -> None: ...

    def step(self, kind: str) -> AbstractContextManager[None]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Ports:
    """Everything a run's steps may touch, built once by the engine."""

    log: RunLog
    tools: ToolPort
    models: ModelPort
    payloads: PayloadPort
    policies: PolicyPort
    live: LiveEvents
    children: ChildRuns
    counters: Counters
    settings: Settings
    owner: str  # this worker's lease owner name
    clock: Callable[[], float]  # seconds since the epoch
    rand: Callable[[], float]  # in [0, 1), for backoff jitter
    stopping: Callable[[], bool]  # shutting down: no further attempts after a fault
    faults: FaultPlan = field(default_factory=FaultPlan)  # injected crashes, a test facility
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    # Set when the worker drains (SIGTERM): a run's own wait ends, and the run hands over its lease.
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    # What the step executors may read of ``settings``, frozen once (``RunDetails.settings``).
    step_settings: StepSettings = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_settings", StepSettings.of(self.settings))

    def now_ms(self) -> int:
        return int(self.clock() * 1000)
