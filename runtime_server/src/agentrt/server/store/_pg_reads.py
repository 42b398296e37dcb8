"""The PostgreSQL fast path of a stream follower's reads: the row and a replay page on psycopg.

Every RunAgent and StreamRunEvents reads a run's row and a page of its events when it starts,
and the row again where a run ends. Through SQLAlchemy's async engine each read pays a pool
checkout, a greenlet hop per statement and a result wrapper: several times the round trips
themselves. Here the same statement texts (``_replay``) run on one dedicated autocommit
psycopg connection, as the appends do (``_pg_appends``): each statement its own snapshot,
as the engine's AUTOCOMMIT reads were.

One connection serves every follower of the process; psycopg runs their statements one at a
time. A read runs in a task of its own that a cancelled caller does not cancel, so a follower
whose client went away never leaves the shared connection mid-query. A read that fails on a
broken connection is asked once more on a new one (the old one may have died while idle); if
that fails too, its error (psycopg's, classified by ``store._errors``) is raised.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.rows import dict_row, namedtuple_row

from agentrt.server.store._appends import for_paramstyle
from agentrt.server.store._crypt import RecordCipher
from agentrt.server.store._records import RunRecord
from agentrt.server.store._replay import EVENTS_SQL, RUN_SQL, SIZES_SQL, EventPage, page_rows

T = TypeVar("T")

_RUN = for_paramstyle(RUN_SQL, "pyformat")
_SIZES = for_paramstyle(SIZES_SQL, "pyformat")
_EVENTS = for_paramstyle(EVENTS_SQL, "pyformat")
#: Seconds to connect before the read fails (libpq waits for ever by default).
CONNECT_TIMEOUT_S = 5


class PgReader:
    """Reads runs' rows and replay pages over one dedicated autocommit psycopg connection."""

    def __init__(self, url: str, *, crypt: RecordCipher):
        self._url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        self._crypt = crypt
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()

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
            conn = await self._connection()
            try:
                return await read(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                await self._drop(conn)
            # The connection may have died while idle (a database restart, a terminated backend)
            # with the database back by now: a read changes nothing, so it is asked once more,
            # on a new connection. Its error, if any, is the answer.
            conn = await self._connection()
            try:
                return await read(conn)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                await self._drop(conn)
                raise

        task = asyncio.ensure_future(whole())
        # Its error is the caller's; a caller cancelled meanwhile leaves it to this callback.
        task.add_done_callback(lambda done: done.cancelled() or done.exception())
        return await asyncio.shield(task)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        async with self._connecting:  # one connect for the readers that found it gone together
            if self._conn is None or self._conn.closed:
                self._conn = await psycopg.AsyncConnection.connect(
                    self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
                )
            return self._conn

    async def _drop(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._conn is conn:
            self._conn = None
        await conn.close()

    async def connect(self) -> None:
        """Connect now (a later use connects by itself if this fails or the connection drops)."""
        await self._connection()

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()
