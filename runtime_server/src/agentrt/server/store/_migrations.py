"""The schema's Alembic revisions: where a database stands, and moving it up or down.

Upgrades and downgrades of PostgreSQL hold a transaction-scoped advisory lock, so replicas that
start together, or a migration Job beside them, migrate one at a time: the second waits, then
finds nothing left to do. Migrations run in the lock's transaction, so a failed one leaves the
schema where it was (PostgreSQL has transactional DDL; SQLite batch operations copy tables).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from agentrt.server.core import SchemaVerdict, schema_verdict

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "MIGRATIONS_DIR",
    "MIGRATION_LOCK_ID",
    "MigrationError",
    "Revision",
    "downgrade_schema",
    "lock_migrations",
    "read_schema_verdict",
    "shipped_revisions",
    "upgrade_schema",
]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
MIGRATION_LOCK_ID = 0x61676E74  # "agnt"; migrations/env.py takes the same lock for the alembic CLI


class MigrationError(Exception):
    """A target revision the shipped migrations cannot reach from where the database stands
    (unknown, ambiguous, or in the other direction). The message names revisions only."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Revision:
    """One shipped migration.

    Attributes:
        revision: Its id (``0011``).
        down_revision: The revision it follows; None for the first.
        doc: The first line of its docstring.
        is_head: True for the newest.
    """

    revision: str
    down_revision: str | None
    doc: str
    is_head: bool


#: The newest shipped revision. A process whose schema is already there (a runtime started after
#: `agentrt migrate upgrade`, or any restart) checks it with one SELECT and never imports Alembic,
#: ~12 MB of its memory for good; tests/unit/test_migrations_head.py holds it to the scripts' head.
HEAD_REVISION = "0011"


def _at_head(url: str) -> SchemaVerdict | None:
    """The AT_HEAD verdict when ``url``'s version table holds exactly the head; None otherwise
    (also when it cannot be read: Alembic then says what is there)."""
    if _sqlite_file_missing(url):
        return None
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            current = [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))]
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()
    if current != [HEAD_REVISION]:
        return None
    return schema_verdict(current=current, heads=[HEAD_REVISION], known={HEAD_REVISION})


def _config(connection: Connection | None = None) -> Config:
    from alembic.config import Config  # Alembic is loaded only where it is used (see HEAD_REVISION)

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def shipped_revisions() -> list[Revision]:
    """The shipped migrations, oldest first (reads no database)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config())
    heads = set(script.get_heads())
    found = [
        Revision(
            revision=s.revision,
            down_revision=s.down_revision if isinstance(s.down_revision, str) else None,
            doc=" ".join((s.doc or "").split()),
            is_head=s.revision in heads,
        )
        for s in script.walk_revisions()
    ]
    return found[::-1]


def _verdict_on(conn: Connection) -> SchemaVerdict:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_config())
    known = {s.revision for s in script.walk_revisions()}
    current = MigrationContext.configure(connection=conn).get_current_heads()
    return schema_verdict(current=current, heads=script.get_heads(), known=known)


def _sqlite_file_missing(url: str) -> bool:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    path = parsed.database or ""
    return path not in ("", ":memory:") and not Path(path).is_file()


def read_schema_verdict(url: str) -> SchemaVerdict:
    """Where the schema at ``url`` (driver pinned) stands; writes nothing, creates no SQLite file.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: The database cannot be reached or read.
    """
    if _sqlite_file_missing(url):
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(_config())
        return schema_verdict(current=(), heads=script.get_heads(), known=())
    fast = _at_head(url)
    if fast is not None:
        return fast
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return _verdict_on(conn)
    finally:
        engine.dispose()


def lock_migrations(conn: Connection) -> None:
    """Hold the migration lock until ``conn``'s transaction ends (PostgreSQL; SQLite locks the file)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})


def _move(
    url: str, revision: str, step: Callable[[Config, str], None]
) -> tuple[SchemaVerdict, SchemaVerdict]:
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            lock_migrations(conn)
            before = _verdict_on(conn)
            try:
                step(_config(conn), revision)
            except (CommandError, RevisionError) as exc:
                # Alembic's own words: they name revisions, never the URL.
                raise MigrationError(str(exc)) from None
            return before, _verdict_on(conn)
    finally:
        engine.dispose()


def upgrade_schema(url: str, revision: str = "head") -> tuple[SchemaVerdict, SchemaVerdict]:
    """Upgrade the schema at ``url`` (driver pinned) to ``revision`` under the migration lock.

    Returns:
        The verdicts before and after.

    Raises:
        MigrationError: ``revision`` is unknown or below the current one.
        sqlalchemy.exc.SQLAlchemyError: The database cannot be reached, or a migration failed.
    """
    if revision in ("head", HEAD_REVISION):
        fast = _at_head(url)
        if fast is not None:
            return fast, fast  # nothing to do: no lock taken, nothing written
    from alembic import command

    return _move(url, revision, lambda config, rev: command.upgrade(config, rev))


def downgrade_schema(url: str, revision: str) -> tuple[SchemaVerdict, SchemaVerdict]:
    """Downgrade the schema at ``url`` (driver pinned) to ``revision`` (``base`` drops every
    table; ``-1`` goes one back) under the migration lock.

    Returns:
        The verdicts before and after.

    Raises:
        MigrationError: ``revision`` is unknown or above the current one.
        sqlalchemy.exc.SQLAlchemyError: The database cannot be reached, or a migration failed.
    """
    from alembic import command

    return _move(url, revision, lambda config, rev: command.downgrade(config, rev))
