"""Values the store hands across layers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """A ``runs`` row."""

    run_id: str
    tenant_id: str
    agent_name: str
    agent_spec: str
    input: str
    output: str
    reason: str
    phase: str
    revision: int
    last_seq: int
    budgets: str
    usage: str
    request_key: str | None
    session_id: str | None
    metadata: str
    created_ms: int
    updated_ms: int
    deadline_ms: int
    lease_owner: str | None
    lease_expires_ms: int | None
    lease_generation: int
    cancel_requested_ms: int | None
    cancel_reason: str | None
    wake_ms: int | None
    pending_approval: str | None
    state_version: int
    runtime_version: str
    agent_config_hash: str
    created_by: str = ""
    cancel_requested_by: str | None = None
    request_hash: str | None = None
    fault_count: int = 0
    input_ref: str | None = None  # JSON PayloadRef
    output_ref: str | None = None  # JSON PayloadRef
    pruned_ms: int | None = None
    variables: str | None = None  # JSON object of the run variables, when any was set
    reconcile_attempts: int = 0  # ledger queries of the current unknown outcome so far
    needs_attention: bool = False  # the current wait was escalated
    call_summary: str | None = None  # JSON: a partial run's calls, as its run.ended lists them
    cleanup_status: str | None = None  # core CleanupStatus value; None: no cleanup registered
    cleanups_unknown: int = 0  # cleanups that may have left a resource behind
    cleanup_due_ms: int | None = None  # when the cleanup job retries them next
    cleanup_retries: int = 0  # passes of the cleanup job so far
    unknown_call_id: str | None = None  # while UNKNOWN_OUTCOME: the call whose outcome is unknown
    trace_context: str | None = None  # W3C traceparent of the run's root span; None: not traced

    @classmethod
    def from_row(cls, row: Any) -> RunRecord:
        return cls(**dict(row._mapping))


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """A ``run_events`` row; ``payload`` is JSON text."""

    run_id: str
    seq: int
    type: str
    payload: str
    created_ms: int


@dataclass(frozen=True, slots=True)
class Signal:
    """A queued signal for a run's next owner, as stored (``decode_signal`` reads it)."""

    id: int
    run_id: str
    kind: str
    payload: str


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this worker now owns, with its fencing token and its tenant."""

    run_id: str
    generation: int
    tenant_id: str = ""
