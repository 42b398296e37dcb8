"""Tables of the run store (SQLAlchemy Core; portable types, stable constraint names).

Times are epoch milliseconds in BIGINT columns: exact, portable, cheap to compare.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(40), primary_key=True),
    Column("tenant_id", String(128), nullable=False),
    Column("agent_name", String(200), nullable=False),
    Column("agent_spec", Text, nullable=False),  # JSON snapshot of the resolved agent (no secrets)
    Column("input", Text, nullable=False),
    Column("output", Text, nullable=False, default=""),
    Column("reason", String(400), nullable=False, default=""),
    Column("phase", String(32), nullable=False),
    Column("revision", BigInteger, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("budgets", Text, nullable=False),  # JSON, proto3 JSON shape
    Column("usage", Text, nullable=False),  # JSON, proto3 JSON shape
    Column("request_key", String(200), nullable=True),
    Column("session_id", String(200), nullable=True),
    Column("metadata", Text, nullable=False),  # JSON object of strings
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("deadline_ms", BigInteger, nullable=False),
    Column("lease_owner", String(200), nullable=True),
    Column("lease_expires_ms", BigInteger, nullable=True),
    Column("lease_generation", BigInteger, nullable=False, default=0),  # fencing token sent to tool hosts
    Column("cancel_requested_ms", BigInteger, nullable=True),  # durable cancel intent, set by any replica
    Column("cancel_reason", String(400), nullable=True),
    Column("wake_ms", BigInteger, nullable=True),
    Column(
        "pending_approval", Text, nullable=True
    ),  # JSON of the approval.requested payload  # when a parked run (reconciliation) wants a worker again
    Column("state_version", Integer, nullable=False),
    Column("runtime_version", String(40), nullable=False),
    Column("agent_config_hash", String(64), nullable=False),
    Column("created_by", String(200), nullable=False, server_default=""),  # subject that started it
    Column("cancel_requested_by", String(200), nullable=True),  # subject that asked to cancel it
    # sha256 of the canonical request; a repeated request_key with another hash is refused.
    Column("request_hash", String(64), nullable=True),
    Column("fault_count", Integer, nullable=False, server_default="0"),  # run.fault events so far
    Column("input_ref", Text, nullable=True),  # JSON PayloadRef when the input is stored as a payload
    Column("output_ref", Text, nullable=True),  # JSON PayloadRef when the output is stored as a payload
    Column("pruned_ms", BigInteger, nullable=True),  # retention removed events and payloads: a tombstone
    Column("variables", Text, nullable=True),  # JSON object: the run variables tools set (S004 §1.2)
    # Ledger queries of the current unknown outcome so far: its backoff survives the run's parking.
    Column("reconcile_attempts", Integer, nullable=False, server_default="0"),
    # The current wait was escalated (run.escalated): a person is needed; ListRuns filters on it.
    Column("needs_attention", Boolean, nullable=False, server_default=false()),
    # JSON {completed_calls, not_completed_calls, unknown_calls} of a partial run's run.ended.
    Column("call_summary", Text, nullable=True),
    # Where the run's registered cleanups stand (core CleanupStatus; NULL: none registered), how
    # many may have left a resource behind, and when the background job retries those next.
    Column("cleanup_status", String(16), nullable=True),
    Column("cleanups_unknown", Integer, nullable=False, server_default="0"),
    Column("cleanup_due_ms", BigInteger, nullable=True),
    Column("cleanup_retries", Integer, nullable=False, server_default="0"),
    # While UNKNOWN_OUTCOME: the call whose outcome is unknown (a model's id, of any length), so
    # ResolveOutcome is answered from the row (NULL from an earlier runtime: the owner checks it).
    Column("unknown_call_id", Text, nullable=True),
    Column("trace_context", Text, nullable=True),  # W3C traceparent of the run's root span
    UniqueConstraint("tenant_id", "request_key", name="uq_runs_tenant_request_key"),
    Index("ix_runs_tenant_created", "tenant_id", "created_ms"),
    Index("ix_runs_claim", "phase", "lease_expires_ms"),
    Index("ix_runs_tenant_phase", "tenant_id", "phase"),  # admission counts
    Index("ix_runs_phase_updated", "phase", "updated_ms"),  # retention scans ended runs by age
    Index("ix_runs_tenant_attention", "tenant_id", "needs_attention"),  # ListRuns(needs_attention)
    Index("ix_runs_cleanup_due", "cleanup_status", "cleanup_due_ms"),  # the cleanup job; ListRuns filter
)

events = Table(
    "run_events",
    metadata,
    Column("run_id", String(40), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("type", String(40), nullable=False),
    Column("payload", Text, nullable=False),  # JSON, proto3 JSON shape of the RunEvent oneof message
    Column("created_ms", BigInteger, nullable=False),
)

signals = Table(
    "run_signals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(40), nullable=False, index=True),
    Column("kind", String(40), nullable=False),
    Column("payload", Text, nullable=False),  # JSON (store/_signal_codec.py)
    Column("created_ms", BigInteger, nullable=False),
)

checkpoints = Table(
    "run_checkpoints",
    metadata,
    Column("run_id", String(40), primary_key=True),
    Column("through_seq", BigInteger, primary_key=True, autoincrement=False),
    Column("state_version", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
)

payloads = Table(
    "run_payloads",
    metadata,
    Column("run_id", String(40), nullable=False),
    Column("payload_id", String(64), nullable=False),
    Column("tenant_id", String(128), nullable=False),
    Column("kind", String(32), nullable=False),  # input, output, model_text, tool_arguments, tool_result
    Column("media_type", String(64), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("location", String(400), nullable=False),  # "db", or "file:<relative path>" under data_dir
    Column("content", LargeBinary, nullable=True),  # the bytes when location is "db"
    Column("created_ms", BigInteger, nullable=False),
    PrimaryKeyConstraint("run_id", "payload_id", name="pk_run_payloads"),
)
