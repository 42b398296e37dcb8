"""How the store reaches its database without a thread hop per query.

SQLite has no async driver that avoids threads, and its commits are short, so
statements run inline on the event loop through a sync engine. PostgreSQL runs
through psycopg 3's native async driver; SQLAlchemy's ``run_sync`` lets the
same sync-style statement code drive it via greenlets, still without threads.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agentrt.server.core import SchemaVerdict
from agentrt.server.store._migrations import read_schema_verdict, upgrade_schema

T = TypeVar("T")

#: How a process that opens the database treats its schema (``Settings.migrate``).
MigrateMode = Literal["auto", "check", "off"]


class Database(Protocol):
    """A place to run one transaction of sync-style statement code."""

    dialect: str

    async def transaction(self, fn: Callable[[Connection], T]) -> T: ...

    async def read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn``, which only reads, each statement seeing what was committed before it."""
        ...

    async def dispose(self) -> None: ...


class SqliteDatabase:
    """SQLite in WAL mode, statements inline on the loop (commits are sub-millisecond)."""

    dialect = "sqlite"

    def __init__(self, url: str, *, synchronous: str = "FULL"):
        self.engine: Engine = create_engine(url)

        @event.listens_for(self.engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={synchronous}")
            cursor.execute("PRAGMA busy_timeout=5000")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        self._conn: Connection | None = None

    def _connection(self) -> Connection:
        # One connection held for the process's life: statements run inline on the loop, so no
        # two transactions ever overlap, and a pool checkout, a Connection object and its
        # return per transaction cost ~20 us, about what the statements of a step cost.
        conn = self._conn
        if conn is None or conn.closed or conn.invalidated:
            if conn is not None:
                conn.close()
            conn = self._conn = self.engine.connect()
        return conn

    async def transaction(self, fn: Callable[[Connection], T]) -> T:
        conn = self._connection()
        with conn.begin():
            return fn(conn)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        # The sqlite3 module begins a transaction only before a write: reads already autocommit.
        return await self.transaction(fn)

    async def dispose(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.engine.dispose()


class PostgresDatabase:
    """PostgreSQL over psycopg 3 async."""

    dialect = "postgresql"

    def __init__(self, url: str, *, pool_size: int = 10):
        self.url = url
        self.engine: AsyncEngine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size)
        # Same pool; its connections autocommit while checked out through this engine.
        self._reader = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    async def transaction(self, fn: Callable[[Connection], T]) -> T:
        async with self.engine.begin() as conn:
            return await conn.run_sync(fn)

    async def read(self, fn: Callable[[Connection], T]) -> T:
        # Under READ COMMITTED each statement takes its own snapshot inside a transaction too, so
        # BEGIN and COMMIT around reads bought nothing but two round trips (~200 us CPU each).
        async with self._reader.connect() as conn:
            return await conn.run_sync(fn)

    async def dispose(self) -> None:
        await self.engine.dispose()


def pin_driver(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and pin the psycopg 3 driver; touches nothing on disk.

    Raises:
        ValueError: Neither SQLite nor PostgreSQL (the message names the scheme only).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.get_backend_name() == "sqlite":
        parsed = parsed.set(drivername="sqlite")
    else:
        raise ValueError(
            f"unsupported database URL scheme {parsed.drivername!r}; use sqlite:/// or postgresql://"
        )
    return parsed.render_as_string(hide_password=False)


def normalise_url(url: str) -> str:
    """:func:`pin_driver`, and make the directory of a SQLite file."""
    url = pin_driver(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    return url


def describe_database_error(exc: SQLAlchemyError, url: str) -> str:
    """One line for an operator: the database (password masked) and the driver's first line.

    The driver's words say why (refused, unknown host, authentication failed); the password is
    masked in them too, should a driver ever echo it.
    """
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    detail = (str(cause).strip().splitlines() or [""])[0]
    parsed = make_url(url)
    if parsed.password:
        detail = detail.replace(str(parsed.password), "***")
    reason = f"{type(cause).__name__}: {detail}" if detail else type(cause).__name__
    return f"cannot use the database at {parsed.render_as_string(hide_password=True)}: {reason}"


class SchemaNotCurrent(Exception):
    """``migrate = "check"`` found the schema not at head; the message says what to run."""

    def __init__(self, verdict: SchemaVerdict):
        super().__init__(verdict.message())
        self.verdict = verdict


def migrate(url: str) -> None:
    """Bring the schema to the newest Alembic revision (idempotent; PostgreSQL under a lock)."""
    upgrade_schema(normalise_url(url))


def open_database(
    url: str, *, migrate: MigrateMode = "auto", sqlite_synchronous: str = "FULL", pool_size: int = 10
) -> Database:
    """Prepare the schema as ``migrate`` says, then open the right :class:`Database` for ``url``.

    Args:
        migrate: ``auto`` upgrades to head; ``check`` refuses a schema not at head; ``off``
            does neither (the operator vouches for the schema).

    Raises:
        SchemaNotCurrent: ``check`` and the schema is not at head.
    """
    url = normalise_url(url)
    if migrate == "auto":
        upgrade_schema(url)
    elif migrate == "check":
        verdict = read_schema_verdict(url)
        if not verdict.at_head:
            raise SchemaNotCurrent(verdict)
    if url.startswith("sqlite"):
        return SqliteDatabase(url, synchronous=sqlite_synchronous)
    return PostgresDatabase(url, pool_size=pool_size)
