"""Which failures are the environment's (the database, the network, the OS) rather than a bug.

The one classifier of the runtime: the engine's fault containment retries an environmental fault
without counting it toward ``faults.max_faults``, and the API answers it UNAVAILABLE (or
RESOURCE_EXHAUSTED for a full disk) instead of INTERNAL. It decides by exception type and typed
fields only, never by message text::

    sqlalchemy.exc.DBAPIError        -> its driver's exception (``.orig``), below; a connection
                                        SQLAlchemy invalidated is UNAVAILABLE whatever the driver said
    sqlalchemy.exc.TimeoutError      -> UNAVAILABLE (no pooled connection came free in time)
    sqlalchemy.exc.DisconnectionError-> UNAVAILABLE
    psycopg.Error with a SQLSTATE    -> by class: 08 connection, 53 resources (53100 disk full:
                                        STORAGE_FULL), 57 operator intervention (57P01 admin
                                        shutdown, ...), 58 system/I/O, and 40001, 40003, 40P01,
                                        55P03, 25006 (a standby after failover), 25P03
    psycopg.OperationalError or
    psycopg.InterfaceError, no SQLSTATE -> UNAVAILABLE (the client lost or never had a connection)
    sqlite3.Error                    -> by primary result code: FULL is STORAGE_FULL; BUSY, LOCKED,
                                        NOMEM, READONLY, IOERR, CANTOPEN, PROTOCOL are UNAVAILABLE
    OSError                          -> ENOSPC, EDQUOT: STORAGE_FULL; a wrong path (not found,
                                        exists, is / is not a directory): a bug; else UNAVAILABLE

The PostgreSQL append fast path talks to psycopg directly, so its errors (psycopg's
``AdminShutdown`` when a backend is terminated) arrive unwrapped; SQLAlchemy wraps the same
error as ``OperationalError`` with ``connection_invalidated`` set. Both are UNAVAILABLE.
Everything else (constraint violations, syntax errors, SQLite's "no such table", which is an
``OperationalError`` too) is not environmental: the same input would fail the same way.
"""

from __future__ import annotations

import errno
import sqlite3
import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import sqlalchemy.exc

if TYPE_CHECKING:
    import psycopg

__all__ = ["Environmental", "environmental"]


class Environmental(StrEnum):
    """What kind of environmental failure an exception is."""

    UNAVAILABLE = "unavailable"  # a connection was lost, the database is busy or restarting: try again
    STORAGE_FULL = "storage_full"  # the disk (or the database's space) is full: try again once freed


_PG_UNAVAILABLE_CLASSES = frozenset({"08", "53", "57", "58"})
_PG_UNAVAILABLE_STATES = frozenset(
    {
        "40001",  # serialization_failure
        "40003",  # statement_completion_unknown
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available
        "25006",  # read_only_sql_transaction: connected to a standby (a failover in progress)
        "25P03",  # idle_in_transaction_session_timeout
    }
)
_PG_DISK_FULL = "53100"

_SQLITE_UNAVAILABLE = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
    }
)
_OS_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# A path that is wrong, not an environment that failed: the same call fails the same way.
_OS_PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError)


def environmental(exc: BaseException) -> Environmental | None:
    """The kind of environmental failure ``exc`` is, or None when it is not one (a bug).

    Args:
        exc: Any exception, raw from a driver or wrapped by SQLAlchemy.

    Returns:
        UNAVAILABLE or STORAGE_FULL, or None.
    """
    if isinstance(exc, sqlalchemy.exc.DBAPIError):
        found = _driver_error(exc.orig)
        if found is None and exc.connection_invalidated:
            return Environmental.UNAVAILABLE
        known_driver = _is_psycopg_error(exc.orig) or isinstance(exc.orig, sqlite3.Error | OSError)
        if found is None and not known_driver:
            # A driver this module does not know: its connection-level classes are all there is.
            connection = isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError)
            return Environmental.UNAVAILABLE if connection else None
        return found
    if isinstance(exc, sqlalchemy.exc.TimeoutError | sqlalchemy.exc.DisconnectionError):
        return Environmental.UNAVAILABLE
    return _driver_error(exc)


def _is_psycopg_error(exc: BaseException | None) -> bool:
    # psycopg is imported only on PostgreSQL (20 MB of a SQLite runtime's memory otherwise): a
    # process that never imported it holds none of its errors.
    module: Any = sys.modules.get("psycopg")
    return module is not None and isinstance(exc, module.Error)


def _driver_error(exc: BaseException | None) -> Environmental | None:
    if _is_psycopg_error(exc):
        return _postgres(exc)  # type: ignore[arg-type]
    if isinstance(exc, sqlite3.Error):
        return _sqlite(exc)
    if isinstance(exc, OSError):
        return _os(exc)
    return None


def _postgres(exc: psycopg.Error) -> Environmental | None:
    state = exc.sqlstate
    if not state:
        # Raised by the client itself: the connection was lost, closed or never made.
        module: Any = sys.modules["psycopg"]
        connection = isinstance(exc, module.OperationalError | module.InterfaceError)
        return Environmental.UNAVAILABLE if connection else None
    if state == _PG_DISK_FULL:
        return Environmental.STORAGE_FULL
    if state[:2] in _PG_UNAVAILABLE_CLASSES or state in _PG_UNAVAILABLE_STATES:
        return Environmental.UNAVAILABLE
    return None


def _sqlite(exc: sqlite3.Error) -> Environmental | None:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return None  # raised by the sqlite3 module itself (misuse), not by SQLite
    primary = code & 0xFF  # extended result codes keep the primary code in their low byte
    if primary == sqlite3.SQLITE_FULL:
        return Environmental.STORAGE_FULL
    return Environmental.UNAVAILABLE if primary in _SQLITE_UNAVAILABLE else None


def _os(exc: OSError) -> Environmental | None:
    if exc.errno in _OS_FULL:
        return Environmental.STORAGE_FULL
    if isinstance(exc, _OS_PATH_ERRORS):
        return None
    return Environmental.UNAVAILABLE
