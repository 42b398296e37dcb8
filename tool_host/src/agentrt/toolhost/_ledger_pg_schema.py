"""The shared ledger's PostgreSQL schema, created or brought up to date when a host starts.

Each pool keeps its ledger in one PostgreSQL schema of its own (``--ledger-schema``), so a test
or a second pool uses another. The version is the one row of ``ledger_schema_version``:

====  ==========================================================================
1     operations, fencing and intents as in the SQLite ledger (schema 2), plus
      ``hosts``: each live host's heartbeat, so a pool tells a dead owner from a busy one
====  ==========================================================================

Hosts starting together take a transaction-level advisory lock first, so the tables are
created (or migrated) once, and a host that loses the race finds them ready.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from agentrt.toolhost._ledger_schema import LedgerVersionError

if TYPE_CHECKING:
    import psycopg

__all__ = ["PG_SCHEMA_VERSION", "check_schema_name", "open_pg_schema"]

PG_SCHEMA_VERSION = 1

# Lower-case identifiers only: the name is quoted into DDL, so nothing else may reach it.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

_TABLES = (
    """
    CREATE TABLE IF NOT EXISTS operations (
        tenant             TEXT NOT NULL,
        idempotency_key    TEXT NOT NULL,
        tool               TEXT NOT NULL,
        input_hash         TEXT NOT NULL,
        run_id             TEXT NOT NULL,
        call_id            TEXT NOT NULL,
        status             TEXT NOT NULL CHECK (status IN ('RUNNING', 'SUCCEEDED', 'FAILED')),
        result_json        TEXT,
        error_code         TEXT,
        error_message      TEXT,
        error_details_json TEXT,
        owner              TEXT NOT NULL,
        executions         INTEGER NOT NULL,
        create_time_ns     BIGINT NOT NULL,
        update_time_ns     BIGINT NOT NULL,
        PRIMARY KEY (tenant, idempotency_key)
    )
    """,
    "CREATE INDEX IF NOT EXISTS ix_operations_update_time ON operations (update_time_ns)",
    "CREATE INDEX IF NOT EXISTS ix_operations_run ON operations (tenant, run_id)",
    """
    CREATE TABLE IF NOT EXISTS fencing (
        tenant         TEXT NOT NULL,
        run_id         TEXT NOT NULL,
        token          BIGINT NOT NULL,
        update_time_ns BIGINT NOT NULL,
        PRIMARY KEY (tenant, run_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS intents (
        tenant          TEXT NOT NULL,
        scope           TEXT NOT NULL,
        scope_id        TEXT NOT NULL,
        intent_key      TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        owner           TEXT NOT NULL,
        claim_time_ns   BIGINT NOT NULL,
        PRIMARY KEY (tenant, scope, scope_id, intent_key)
    )
    """,
    # beat_ns is the database's clock, so the hosts' own clocks never meet.
    "CREATE TABLE IF NOT EXISTS hosts (owner TEXT PRIMARY KEY, beat_ns BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ledger_schema_version (version INTEGER NOT NULL)",
)


def check_schema_name(schema: str) -> str:
    """Return ``schema`` when it is a plain lower-case identifier.

    Raises:
        ValueError: Anything else (it is written into DDL).
    """
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(
            f"invalid ledger schema name {schema!r}: use lower-case letters, digits and _ "
            "(at most 63, not starting with a digit)"
        )
    return schema


def open_pg_schema(db: psycopg.Connection[Any], schema: str) -> None:
    """Create the ledger's schema and tables, or check their version; idempotent.

    Args:
        db: A connection in autocommit mode.
        schema: The ledger's schema (checked by :func:`check_schema_name`).

    Raises:
        LedgerVersionError: The schema was written by a newer tool host.
        psycopg.Error: The database refused.
    """
    name = check_schema_name(schema)
    with db.transaction():
        # Held to the end of this transaction: hosts starting together create the tables once.
        db.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"agentrt.toolhost.ledger:{name}",)
        )
        # DDL only when something is missing, so a role without CREATE rights runs on a ledger an
        # operator set up beforehand.
        if db.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is None:
            db.execute(f'CREATE SCHEMA "{name}"')
        db.execute(f'SET LOCAL search_path TO "{name}"')
        version = _version(db)
        if version is None or version < PG_SCHEMA_VERSION:
            for statement in _TABLES:
                db.execute(statement)
            if version is None:
                db.execute("INSERT INTO ledger_schema_version (version) VALUES (%s)", (PG_SCHEMA_VERSION,))
        elif version > PG_SCHEMA_VERSION:
            raise LedgerVersionError(
                f"the ledger's schema version {version} is newer than this tool host's ({PG_SCHEMA_VERSION})"
            )


def _version(db: psycopg.Connection[Any]) -> int | None:
    """The schema's version; None when it has no version table or row yet."""
    exists = db.execute("SELECT to_regclass('ledger_schema_version') IS NOT NULL").fetchone()
    if exists is None or not exists[0]:
        return None
    row = db.execute("SELECT max(version) FROM ledger_schema_version").fetchone()
    return None if row is None or row[0] is None else int(row[0])
