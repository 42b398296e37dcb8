"""The PostgreSQL fast path of a stream follower's reads: the row and a replay page on psycopg.

Every RunAgent and StreamRunEvents reads a run's row and a page of its events when it starts,
and the row again where a run ends. Through SQLAlchemy's async engine each read pays a pool
checkout, a greenlet hop per statement and a result wrapper: several times the round trips
themselves. Here the same statement texts (``_replay``) run on dedicated autocommit psycopg
connections, as the appends do (``_pg_appends``): each statement its own snapshot,
as the engine's AUTOCOMMIT reads were.

A few connections serve every follower of the process, one read at a time each. A read runs in a
task of its own that a cancelled caller does not cancel, so a follower whose client went away
never leaves a shared connection mid-query. A read that fails on a broken connection is asked
once more on a new one (the old one may have died while idle); if that fails too, its error
(psycopg's, classified by ``store._errors``) is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row, namedtuple_row

from agentrt.server.store._appends import for_paramstyle
from agentrt.server.store._crypt import RecordCipher
from agentrt.server.store._pg_appends import CONNECT_TIMEOUT_S
from agentrt.server.store._records import RunRecord
from agentrt.server.store._replay import EVENTS_SQL, RUN_SQL, SIZES_SQL, EventPage, page_rows

T = TypeVar("T")

_RUN = for_paramstyle(RUN_SQL, "pyformat")
_SIZES = for_paramstyle(SIZES_SQL, "pyformat")
_EVENTS = for_paramstyle(EVENTS_SQL, "pyformat")


class PgReader:
    """Reads runs' rows and replay pages over a few dedicated autocommit psycopg connections.

    Args:
        url: The database.
        crypt: Opens sealed columns.
        max_connections: Reads in flight at once; more wait for a connection. One would queue
            every follower of the process behind the slowest read.
    """

    def __init__(self, url: str, *, crypt: RecordCipher, max_connections: int = 4):
        self._url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self._crypt = crypt
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._closed = False

    async def run_and_page(
        self, run_id: str, *, after_seq: int, max_rows: int, max_bytes: int
    ) -> tuple[RunRecord | None, EventPage]:
        """The run's row, then a page after ``after_seq`` read after it (``Store.read_run_and_page``)."""

        async def read(conn: psycopg.AsyncConnection[Any]) -> tuple[RunRecord | None, EventPage]:
            cursor = conn.cursor(row_factory=dict_row)
            await cursor.execute(_RUN, {"run_id": run_id})
            row = await cursor.fetchone()
            if row is None:
                return None, EventPage([], False)
            record = self._crypt.run(row)
            return record, await self._page(conn, run_id, after_seq, max_rows, max_bytes)

        return await self._run(read)

    async def page(self, run_id: str, *, after_seq: int, max_rows: int, max_bytes: int) -> EventPage:
        """A replay page after ``after_seq`` (``Store.read_page``)."""
        return await self._run(lambda conn: self._page(conn, run_id, after_seq, max_rows, max_bytes))

    async def _page(
        self, conn: psycopg.AsyncConnection[Any], run_id: str, after_seq: int, max_rows: int, max_bytes: int
    ) -> EventPage:
        params = {"run_id": run_id, "after_seq": after_seq, "limit": max_rows}
        cursor = conn.cursor()
        await cursor.execute(_SIZES, params)
        sizes = [size for (size,) in await cursor.fetchall()]
        rows, more = page_rows(sizes, max_rows=max_rows, max_bytes=max_bytes)
        if not rows:
            return EventPage([], more)
        events = conn.cursor(row_factory=namedtuple_row)
        await events.execute(_EVENTS, dict(params, limit=rows))
        return EventPage([self._crypt.event(row) for row in await events.fetchall()], more)

    async def _run(self, read: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        async def whole() -> T:
            async with self._slots:
                conn = await self._take()
                try:
                    result = await read(conn)
                except (psycopg.OperationalError, psycopg.InterfaceError):
                    await conn.close()
                except BaseException:
                    await self._give(conn)  # a refused statement or an unreadable value: the link is fine
                    raise
                else:
                    await self._give(conn)
                    return result
                # The connection may have died while idle (a database restart, a terminated
                # backend) with the database back by now: a read changes nothing, so it is asked
                # once more, on a new connection. Its error, if any, is the answer.
                conn = await self._connect()
                try:
                    result = await read(conn)
                except BaseException:
                    await conn.close()
                    raise
                await self._give(conn)
                return result

        task = asyncio.ensure_future(whole())
        # Its error is the caller's; a caller cancelled meanwhile leaves it to this callback.
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return await asyncio.shield(task)

    async def _take(self) -> psycopg.AsyncConnection[Any]:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return await self._connect()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
        )

    async def _give(self, conn: psycopg.AsyncConnection[Any]) -> None:
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if self._closed or conn.closed or not idle:
            await conn.close()
        else:
            self._idle.append(conn)

    async def connect(self) -> None:
        """Open one connection now (a later read opens what it needs if this fails)."""
        await self._give(await self._connect())

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
