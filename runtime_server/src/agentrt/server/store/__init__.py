"""The run store (SQLAlchemy 2.0 Core): SQLite by default, PostgreSQL via psycopg 3; payloads optionally
encrypted at rest."""

from __future__ import annotations

from agentrt.server.store._admission import GLOBAL_EXACT_WITHIN, Admission
from agentrt.server.store._checkpoints import StoredCheckpoint
from agentrt.server.store._commits import (
    KEEP,
    MAX_EVENT_BYTES,
    CleanupColumns,
    Committed,
    EventTooLarge,
    RowUpdate,
    TypedCommits,
    encode_commit,
    row_values,
    utf8_size,
)
from agentrt.server.store._crypt import SEALED_RUN_COLUMNS, UnreadableRecord, load_cipher
from agentrt.server.store._db import (
    Database,
    MigrateMode,
    PostgresDatabase,
    SchemaNotCurrent,
    SqliteDatabase,
    describe_database_error,
    migrate,
    normalise_url,
    open_database,
    pin_driver,
)
from agentrt.server.store._errors import Environmental, environmental
from agentrt.server.store._event_codec import (
    UndecodableEvent,
    approval_decision_from_json,
    call_summary_json,
    decode_event,
    encode_event,
    event_to_json,
    outcome_decision_from_json,
    tool_error_from_json,
    tool_error_to_json,
)
from agentrt.server.store._migrations import (
    MigrationError,
    Revision,
    downgrade_schema,
    read_schema_verdict,
    shipped_revisions,
    upgrade_schema,
)
from agentrt.server.store._payloads import PayloadRef, PayloadStore, StoredPayload, check_payload_id
from agentrt.server.store._records import Claim, RunRecord, Signal, StoredEvent
from agentrt.server.store._replay import EventPage
from agentrt.server.store._retention import PruneCounts, Pruner, PruneReport
from agentrt.server.store._signal_codec import (
    UndecodableSignal,
    decode_signal,
    encode_signal,
    pending_approval_of,
    signal_target,
)
from agentrt.server.store._store import Store

__all__ = [
    "GLOBAL_EXACT_WITHIN",
    "KEEP",
    "MAX_EVENT_BYTES",
    "SEALED_RUN_COLUMNS",
    "Admission",
    "Claim",
    "CleanupColumns",
    "Committed",
    "Database",
    "Environmental",
    "EventPage",
    "EventTooLarge",
    "MigrateMode",
    "MigrationError",
    "PayloadRef",
    "PayloadStore",
    "PostgresDatabase",
    "PruneCounts",
    "PruneReport",
    "Pruner",
    "Revision",
    "RowUpdate",
    "RunRecord",
    "SchemaNotCurrent",
    "Signal",
    "SqliteDatabase",
    "Store",
    "StoredCheckpoint",
    "StoredEvent",
    "StoredPayload",
    "TypedCommits",
    "UndecodableEvent",
    "UndecodableSignal",
    "UnreadableRecord",
    "approval_decision_from_json",
    "call_summary_json",
    "check_payload_id",
    "decode_event",
    "decode_signal",
    "describe_database_error",
    "downgrade_schema",
    "encode_commit",
    "encode_event",
    "encode_signal",
    "environmental",
    "event_to_json",
    "load_cipher",
    "migrate",
    "normalise_url",
    "open_database",
    "outcome_decision_from_json",
    "pending_approval_of",
    "pin_driver",
    "read_schema_verdict",
    "row_values",
    "shipped_revisions",
    "signal_target",
    "tool_error_from_json",
    "tool_error_to_json",
    "upgrade_schema",
    "utf8_size",
]
