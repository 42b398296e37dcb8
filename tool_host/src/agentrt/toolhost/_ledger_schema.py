"""The ledger's SQLite schema, and bringing an older ledger file up to date in place.

The schema version is SQLite's ``PRAGMA user_version``:

====  ==========================================================================
0     the first schema: keys and fencing tokens were global to the host
1     both tables are scoped by tenant; rows from version 0 belong to tenant ""
2     adds ``intents``: which call first claimed a business intent in its scope
====  ==========================================================================

A migration runs in one ``BEGIN IMMEDIATE`` transaction, so two host processes opening
the same old file at once migrate it once, and a crash mid-way leaves the old file.
"""

from __future__ import annotations

import sqlite3

__all__ = ["SCHEMA_VERSION", "LedgerVersionError", "open_schema"]

SCHEMA_VERSION = 2

_OPERATIONS = """
CREATE TABLE {table} (
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
    create_time_ns     INTEGER NOT NULL,
    update_time_ns     INTEGER NOT NULL,
    PRIMARY KEY (tenant, idempotency_key)
)
"""
_OPERATIONS_V0_COLUMNS = (
    "idempotency_key, tool, input_hash, run_id, call_id, status, result_json, error_code, error_message,"
    " error_details_json, owner, executions, create_time_ns, update_time_ns"
)
_FENCING = """
CREATE TABLE {table} (
    tenant         TEXT NOT NULL,
    run_id         TEXT NOT NULL,
    token          INTEGER NOT NULL,
    update_time_ns INTEGER NOT NULL,
    PRIMARY KEY (tenant, run_id)
)
"""
_FENCING_V0_COLUMNS = "run_id, token, update_time_ns"
# One row per business intent in its scope (see _intents.py): the call that claimed it, by key.
_INTENTS = """
CREATE TABLE intents (
    tenant          TEXT NOT NULL,
    scope           TEXT NOT NULL,
    scope_id        TEXT NOT NULL,
    intent_key      TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    owner           TEXT NOT NULL,
    claim_time_ns   INTEGER NOT NULL,
    PRIMARY KEY (tenant, scope, scope_id, intent_key)
)
"""


class LedgerVersionError(Exception):
    """The ledger file was written by a newer tool host, whose schema this one does not know."""


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def open_schema(db: sqlite3.Connection) -> None:
    """Create the tables of a new ledger, or migrate an older one; a no-op when up to date.

    Args:
        db: A connection in autocommit mode (``isolation_level=None``).

    Raises:
        LedgerVersionError: The file's schema is newer than this code.
        sqlite3.Error: The database cannot be read or written.
    """
    if _version(db) == SCHEMA_VERSION:
        return  # the usual start: no write lock taken
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _version(db)  # again, under the lock: another process may have migrated meanwhile
        if version > SCHEMA_VERSION:
            raise LedgerVersionError(
                f"the ledger's schema version {version} is newer than this tool host's ({SCHEMA_VERSION})"
            )
        if version == 0:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            _create_or_migrate(db, tables, "operations", _OPERATIONS, _OPERATIONS_V0_COLUMNS)
            _create_or_migrate(db, tables, "fencing", _FENCING, _FENCING_V0_COLUMNS)
        if version < 2:
            db.execute(_INTENTS)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _create_or_migrate(db: sqlite3.Connection, tables: set[str], table: str, ddl: str, columns: str) -> None:
    if table not in tables:
        db.execute(ddl.format(table=table))
        return
    # SQLite cannot change a primary key in place: rebuild the table, old rows under tenant "".
    old = f"{table}_v0"
    db.execute(f"ALTER TABLE {table} RENAME TO {old}")
    db.execute(ddl.format(table=table))
    db.execute(f"INSERT INTO {table} (tenant, {columns}) SELECT '', {columns} FROM {old}")
    db.execute(f"DROP TABLE {old}")
