"""The store's database handles, SQLite and PostgreSQL: reads outside transactions, writes inside."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, text

from agentrt.server.store import open_database


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
