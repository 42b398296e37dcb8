"""The store's one classifier of environmental failures, over the real exception classes: raised
by SQLite and PostgreSQL themselves where a test can make them, wrapped by SQLAlchemy as the store
sees them, and never decided by message text."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg.errors
import pytest
import sqlalchemy.exc
from sqlalchemy import create_engine, text

from agentrt.server.engine._faults import InjectedFault, InjectedOutage
from agentrt.server.store import Environmental, environmental

UNAVAILABLE = Environmental.UNAVAILABLE
FULL = Environmental.STORAGE_FULL


def _wrapped(orig: BaseException, *, invalidated: bool = False) -> sqlalchemy.exc.DBAPIError:
    """``orig`` as SQLAlchemy wraps a driver's exception (by its class, as the engine does)."""
    return sqlalchemy.exc.DBAPIError.instance(
        "SELECT 1", {}, orig, psycopg.Error, connection_invalidated=invalidated
    )


# -- SQLite: made by SQLite itself ------------------------------------------------------------------


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "errors.sqlite"


def _raised(conn: sqlite3.Connection, sql: str) -> sqlite3.Error:
    with pytest.raises(sqlite3.Error) as caught:
        conn.execute(sql)
    return caught.value


def test_sqlite_full_is_storage_full(sqlite_path: Path) -> None:
    conn = sqlite3.connect(sqlite_path)
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.execute("PRAGMA max_page_count = 4")  # the database may not grow: SQLITE_FULL, as on a full disk
    error = _raised(conn, "INSERT INTO t VALUES (zeroblob(100000))")
    assert error.sqlite_errorcode == sqlite3.SQLITE_FULL
    assert environmental(error) is FULL
    engine = create_engine(f"sqlite:///{sqlite_path}")
    try:
        with pytest.raises(sqlalchemy.exc.OperationalError) as caught, engine.begin() as sa:
            sa.execute(text("PRAGMA max_page_count = 4"))
            sa.execute(text("INSERT INTO t VALUES (zeroblob(100000))"))
        assert environmental(caught.value) is FULL  # as the store sees it
    finally:
        engine.dispose()


def test_sqlite_busy_is_unavailable(sqlite_path: Path) -> None:
    holder = sqlite3.connect(sqlite_path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")  # holds the write lock
    other = sqlite3.connect(sqlite_path, timeout=0, isolation_level=None)
    error = _raised(other, "INSERT INTO t VALUES (1)")
    assert error.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
    assert environmental(error) is UNAVAILABLE
    holder.execute("ROLLBACK")


def test_sqlite_operational_errors_that_are_bugs_are_not_environmental(sqlite_path: Path) -> None:
    conn = sqlite3.connect(sqlite_path)
    missing = _raised(conn, "SELECT * FROM no_such_table")
    syntax = _raised(conn, "SELEC 1")
    # The same class as a busy database, told apart by the result code only.
    assert isinstance(missing, sqlite3.OperationalError) and isinstance(syntax, sqlite3.OperationalError)
    assert environmental(missing) is None and environmental(syntax) is None
    conn.execute("CREATE TABLE u (x UNIQUE)")
    conn.execute("INSERT INTO u VALUES (1)")
    assert environmental(_raised(conn, "INSERT INTO u VALUES (1)")) is None  # IntegrityError
    conn.close()
    with pytest.raises(sqlite3.ProgrammingError) as closed:
        conn.execute("SELECT 1")  # misuse, raised by the module itself: no result code
    assert environmental(closed.value) is None
    assert environmental(_wrapped(missing)) is None


# -- PostgreSQL: by SQLSTATE class, raw and wrapped -------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (psycopg.errors.AdminShutdown, UNAVAILABLE),  # 57P01: a terminated backend
        (psycopg.errors.CrashShutdown, UNAVAILABLE),
        (psycopg.errors.CannotConnectNow, UNAVAILABLE),
        (psycopg.errors.DatabaseDropped, UNAVAILABLE),
        (psycopg.errors.IdleSessionTimeout, UNAVAILABLE),
        (psycopg.errors.ConnectionFailure, UNAVAILABLE),  # 08006
        (psycopg.errors.TooManyConnections, UNAVAILABLE),  # 53300
        (psycopg.errors.OutOfMemory, UNAVAILABLE),
        (psycopg.errors.DiskFull, FULL),  # 53100
        (psycopg.errors.IoError, UNAVAILABLE),  # 58030
        (psycopg.errors.SerializationFailure, UNAVAILABLE),
        (psycopg.errors.DeadlockDetected, UNAVAILABLE),
        (psycopg.errors.LockNotAvailable, UNAVAILABLE),
        (psycopg.errors.QueryCanceled, UNAVAILABLE),  # statement_timeout
        (psycopg.errors.ReadOnlySqlTransaction, UNAVAILABLE),  # a standby, mid failover
        (psycopg.errors.IdleInTransactionSessionTimeout, UNAVAILABLE),
        (psycopg.errors.UniqueViolation, None),
        (psycopg.errors.UndefinedTable, None),
        (psycopg.errors.SyntaxError, None),
        (psycopg.errors.ProgramLimitExceeded, None),  # an OperationalError that is the statement's fault
        (psycopg.errors.DataCorrupted, None),
    ],
)
def test_postgres_errors_by_sqlstate(error: type[psycopg.Error], expected: Environmental | None) -> None:
    raw = error("server says something")
    assert environmental(raw) is expected
    assert environmental(_wrapped(raw)) is expected  # the same through SQLAlchemy


def test_client_side_postgres_connection_errors_are_unavailable() -> None:
    # Raised by psycopg itself, with no SQLSTATE: "the connection is closed", "consuming input failed".
    assert environmental(psycopg.OperationalError("the connection is lost")) is UNAVAILABLE
    assert environmental(psycopg.InterfaceError("the connection is closed")) is UNAVAILABLE
    assert environmental(psycopg.ProgrammingError("the query has 2 placeholders")) is None
    assert environmental(psycopg.DataError("bad value")) is None


def test_a_connection_sqlalchemy_invalidated_is_unavailable_whatever_the_driver_said() -> None:
    assert environmental(_wrapped(psycopg.ProgrammingError("x"), invalidated=True)) is UNAVAILABLE
    assert environmental(_wrapped(psycopg.ProgrammingError("x"))) is None


def test_sqlalchemy_pool_and_disconnect_errors_are_unavailable() -> None:
    assert environmental(sqlalchemy.exc.TimeoutError("QueuePool limit reached")) is UNAVAILABLE
    assert environmental(sqlalchemy.exc.DisconnectionError("gone")) is UNAVAILABLE
    assert environmental(sqlalchemy.exc.ArgumentError("bad URL")) is None
    assert environmental(sqlalchemy.exc.NoSuchColumnError("x")) is None


@pytest.fixture
def pg_conn(pg_database: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        yield conn


@pytest.mark.postgres
def test_a_terminated_backend_raises_admin_shutdown_and_is_unavailable(
    pg_conn: psycopg.Connection, pg_database: str
) -> None:
    """The real thing: psycopg raw (the append fast path) and through SQLAlchemy (every other query)."""
    pid = pg_conn.info.backend_pid
    with psycopg.connect(pg_database, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(psycopg.Error) as raw:
        pg_conn.execute("SELECT 1")
    assert isinstance(raw.value, psycopg.OperationalError)  # AdminShutdown, or the lost connection
    assert environmental(raw.value) is UNAVAILABLE
    engine = create_engine(pg_database.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as sa:
            victim = sa.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with psycopg.connect(pg_database, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
            with pytest.raises(sqlalchemy.exc.OperationalError) as wrapped:
                sa.execute(text("SELECT 1"))
        assert isinstance(wrapped.value.orig, psycopg.errors.AdminShutdown)
        assert wrapped.value.connection_invalidated
        assert environmental(wrapped.value) is UNAVAILABLE
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_real_postgres_statement_errors_are_not_environmental(pg_conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as missing:
        pg_conn.execute("SELECT * FROM no_such_table_here")
    assert environmental(missing.value) is None


# -- the OS, and everything else --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), FULL),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), FULL),
        (OSError(errno.EIO, "Input/output error"), UNAVAILABLE),
        (ConnectionResetError(errno.ECONNRESET, "reset"), UNAVAILABLE),
        (BrokenPipeError(errno.EPIPE, "broken pipe"), UNAVAILABLE),
        (TimeoutError("timed out"), UNAVAILABLE),
        (PermissionError(errno.EACCES, "denied"), UNAVAILABLE),
        (FileNotFoundError(errno.ENOENT, "missing"), None),  # a wrong path, not the environment
        (IsADirectoryError(errno.EISDIR, "a directory"), None),
        (InjectedOutage("fault injection (outage)"), UNAVAILABLE),
        (InjectedFault("fault injection"), None),
        (ValueError("timeout"), None),  # the text says nothing: a ValueError is a bug
        (KeyError("connection"), None),
        (RuntimeError("database is locked"), None),
        (MemoryError(), None),
    ],
)
def test_os_errors_and_others(error: BaseException, expected: Environmental | None) -> None:
    assert environmental(error) is expected


def test_a_real_full_disk_write_is_storage_full(tmp_path: Path) -> None:
    # /dev/full: every write fails with ENOSPC, as a full filesystem does.
    with open("/dev/full", "wb", buffering=0) as full, pytest.raises(OSError) as caught:
        full.write(b"x")
    assert caught.value.errno == errno.ENOSPC and environmental(caught.value) is FULL
