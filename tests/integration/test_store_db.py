"""The store's database handles, SQLite and PostgreSQL: reads outside transactions, writes inside."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Connection, text

from agentrt.server.store import open_database
from agentrt.server.store._db import SqliteDatabase


class Boom(Exception):
    pass


async def test_a_read_sees_committed_rows_and_leaves_its_connection_transactional(db_url: str) -> None:
    db = open_database(db_url, pool_size=1)  # one connection: the read's is the write's
    try:
        await db.transaction(lambda c: c.exec_driver_sql("CREATE TABLE probe (n INTEGER)"))
        await db.transaction(lambda c: c.exec_driver_sql("INSERT INTO probe VALUES (1)"))

        def count(conn: Connection) -> int:
            return int(conn.execute(text("SELECT count(*) FROM probe")).scalar_one())

        assert await db.read(count) == 1

        def insert_then_fail(conn: Connection) -> None:
            conn.exec_driver_sql("INSERT INTO probe VALUES (2)")
            raise Boom

        # After a read, a failed transaction still rolls back: the connection left autocommit.
        with pytest.raises(Boom):
            await db.transaction(insert_then_fail)
        assert await db.read(count) == 1
    finally:
        await db.dispose()


async def test_sqlite_reopens_its_held_connection_after_it_is_invalidated_or_closed(tmp_path: Path) -> None:
    # SQLite holds one connection for the process's life; a driver error that invalidates it,
    # or a close under it, must cost the next transaction nothing but a reconnect.
    db = SqliteDatabase(f"sqlite:///{tmp_path / 'held.db'}")
    try:
        await db.transaction(lambda c: c.exec_driver_sql("CREATE TABLE probe (n INTEGER)"))
        await db.transaction(lambda c: c.exec_driver_sql("INSERT INTO probe VALUES (1)"))
        first = db._connection()

        def count(conn: Connection) -> int:
            return int(conn.execute(text("SELECT count(*) FROM probe")).scalar_one())

        def insert_then_invalidate(conn: Connection) -> None:
            conn.exec_driver_sql("INSERT INTO probe VALUES (2)")
            conn.invalidate()  # what SQLAlchemy does on a disconnect-class driver error
            raise Boom

        with pytest.raises(Boom):
            await db.transaction(insert_then_invalidate)
        assert await db.read(count) == 1  # the invalidated transaction's insert is gone
        second = db._connection()
        assert second is not first

        second.close()
        await db.transaction(lambda c: c.exec_driver_sql("INSERT INTO probe VALUES (3)"))
        assert await db.read(count) == 2
        assert db._connection() is not second
    finally:
        await db.dispose()
    assert db._conn is None
