"""PostgreSQL followers' reads on psycopg directly (store/_pg_reads): the same answers as the
SQLAlchemy path, a dropped connection replaced, and a cancelled reader leaving it usable."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator

import psycopg
import pytest

from agentrt.server.store import Environmental, Store, environmental
from agentrt.toolhost.security import PayloadCipher
from tests.integration.test_store import run_values

pytestmark = pytest.mark.postgres

PAGES = [(0, 500, 64 * 1024), (3, 4, 64 * 1024), (0, 500, 250), (7, 500, 1), (40, 500, 64 * 1024)]


@pytest.fixture(params=["clear", "sealed"])
async def store(request: pytest.FixtureRequest, pg_url: str) -> AsyncIterator[Store]:
    cipher = PayloadCipher(keys={"k1": os.urandom(32)}, active="k1") if request.param == "sealed" else None
    opened = await Store.open(pg_url, cipher=cipher)
    try:
        yield opened
    finally:
        await opened.close()


async def _seed(store: Store, run_id: str) -> None:
    events = [("run.started", '{"input": "hi"}')]
    events += [("step.started", json.dumps({"step": i, "pad": "x" * (i * 20)})) for i in range(1, 12)]
    await store.create_run(run_values(run_id), events, 1000)


async def test_direct_reads_answer_what_the_sqlalchemy_path_answers(store: Store) -> None:
    await _seed(store, "same-1")
    direct = store._pg_reads
    assert direct is not None
    for after_seq, max_rows, max_bytes in PAGES:
        answers = []
        for reader in (direct, None):
            store._pg_reads = reader
            both = await store.read_run_and_page(
                "same-1", after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes
            )
            page = await store.read_page(
                "same-1", after_seq=after_seq, max_rows=max_rows, max_bytes=max_bytes
            )
            answers.append((both, page))
        store._pg_reads = direct
        assert answers[0] == answers[1], (after_seq, max_rows, max_bytes)
    record, page = await store.read_run_and_page("no-such-run", after_seq=0, max_rows=10, max_bytes=1024)
    assert record is None and page.events == [] and not page.more


async def _terminate_reader(pg_url: str) -> int:
    name = pg_url.rsplit("/", 1)[1].split("?", 1)[0]
    async with await psycopg.AsyncConnection.connect(
        pg_url.rsplit("/", 1)[0] + "/postgres", autocommit=True
    ) as admin:
        cursor = await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        return len(await cursor.fetchall())


async def test_a_reader_connection_dropped_while_idle_costs_the_next_read_a_reconnect(
    store: Store, pg_url: str
) -> None:
    await _seed(store, "dropped-1")
    before = await store.read_run_and_page("dropped-1", after_seq=0, max_rows=500, max_bytes=65536)
    assert await _terminate_reader(pg_url) >= 1  # the database is back at once: only the link died
    assert await store.read_run_and_page("dropped-1", after_seq=0, max_rows=500, max_bytes=65536) == before
    assert await _terminate_reader(pg_url) >= 1
    assert await store.read_page("dropped-1", after_seq=0, max_rows=500, max_bytes=65536) == before[1]


async def test_a_read_while_the_database_is_unreachable_fails_as_unavailable(store: Store) -> None:
    await _seed(store, "away-1")
    reader = store._pg_reads
    assert reader is not None
    await reader.close()
    reader._url = "postgresql://postgres@127.0.0.1:1/nowhere"  # a port nothing listens on
    with pytest.raises(psycopg.Error) as caught:
        await store.read_run_and_page("away-1", after_seq=0, max_rows=500, max_bytes=65536)
    assert environmental(caught.value) is Environmental.UNAVAILABLE


async def test_a_reader_cancelled_mid_query_leaves_the_connection_usable(store: Store, pg_url: str) -> None:
    await _seed(store, "cancelled-1")
    expected = await store.read_run_and_page("cancelled-1", after_seq=0, max_rows=500, max_bytes=65536)
    async with await psycopg.AsyncConnection.connect(pg_url) as locker:
        await locker.execute("LOCK TABLE run_events IN ACCESS EXCLUSIVE MODE")  # held to its rollback
        blocked = asyncio.ensure_future(
            store.read_run_and_page("cancelled-1", after_seq=0, max_rows=500, max_bytes=65536)
        )
        waiting = await locker.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'run_events'::regclass"
        )
        for _ in range(200):  # until the read waits on the lock
            if (await waiting.fetchone() or (0,))[0]:
                break
            await asyncio.sleep(0.01)
            waiting = await locker.execute(
                "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'run_events'::regclass"
            )
        else:
            pytest.fail("the read never waited on the lock")
        blocked.cancel()
        with pytest.raises(asyncio.CancelledError):
            await blocked
        await locker.rollback()
    # The cancelled read finished on the shared connection in the background; the next one is whole.
    assert (
        await store.read_run_and_page("cancelled-1", after_seq=0, max_rows=500, max_bytes=65536) == expected
    )


async def test_reads_in_flight_at_once_use_several_connections_and_all_answer(store: Store) -> None:
    await _seed(store, "many-1")
    reader = store._pg_reads
    assert reader is not None
    expected = await store.read_run_and_page("many-1", after_seq=0, max_rows=500, max_bytes=65536)
    answers = await asyncio.gather(
        *(store.read_run_and_page("many-1", after_seq=0, max_rows=500, max_bytes=65536) for _ in range(12))
    )
    assert all(answer == expected for answer in answers)
    assert 1 < len(reader._idle) <= 4  # several were used at once, never more than the bound
