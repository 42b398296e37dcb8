"""The store's driver SQL (``_fast_sql``, issue 19) on SQLite and PostgreSQL.

- Each statement sent is the text SQLAlchemy emits for the same expression: the claim's fencing
  and tenancy conditions cannot drift from the Core statements they are compiled from.
- Values are bound, never formatted into the text; a missing one fails instead of binding NULL.
- Parameters go through the dialect's bind processors; rows with unknown columns are refused.
- A run read back through driver SQL is typed as SQLAlchemy typed it (SQLite booleans).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Connection, DateTime, bindparam, event, select

from agentrt.server.store import Store
from agentrt.server.store._claims import CLEANUPS, RUNS, RUNS_AMONG
from agentrt.server.store._fast_sql import compile_driver_statement, driver_statement, insert_run
from agentrt.server.store._store import _BY_REQUEST_KEY, _EVENTS_AFTER
from tests.integration.test_store import run_values

NOW = 10**12


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def sync_engine(store: Store) -> Any:
    engine = store.db.engine  # type: ignore[attr-defined]
    return getattr(engine, "sync_engine", engine)


async def emitted(store: Store, statement: Any, params: dict[str, Any]) -> str:
    """The text SQLAlchemy sends for ``statement`` with ``params`` (its own execute path)."""
    sent: list[str] = []

    def capture(_c: Any, _cur: Any, text: str, *_rest: Any) -> None:
        sent.append(text)

    engine = sync_engine(store)
    event.listen(engine, "before_cursor_execute", capture)
    try:
        await store.db.transaction(lambda conn: conn.execute(statement, params).all())
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert len(sent) == 1
    return sent[0]


async def dialect_of(store: Store) -> Any:
    return await store.db.read(lambda conn: conn.dialect)


async def test_the_claim_statements_are_the_text_sqlalchemy_emits(store: Store) -> None:
    dialect = await dialect_of(store)
    base = {"now_ms": NOW, "limit": 5}
    take = {"now_ms": NOW, "owner": "w", "expires_ms": NOW + 1, "taken": ["a", "b", "c"]}
    cases = [
        (RUNS.candidates, base, {}),
        (RUNS_AMONG.candidates, {**base, "run_ids": ["a", "b"]}, {"run_ids": 2}),
        (RUNS.take, take, {"taken": 3}),
        (CLEANUPS.candidates, base, {}),
        (CLEANUPS.take, take, {"taken": 3}),
        (_EVENTS_AFTER, {"run_id": "a", "after_seq": 0, "limit": 3}, {}),
        (_BY_REQUEST_KEY, {"tenant_id": "t", "request_key": "k"}, {}),
    ]
    for statement, params, sizes in cases:
        driver = driver_statement(statement, dialect, **sizes)
        assert driver.sql == await emitted(store, statement, params)
        # Compiled once: the same object on every call.
        assert driver_statement(statement, dialect, **sizes) is driver
    if store.dialect == "postgresql":
        assert "FOR UPDATE OF runs SKIP LOCKED" in driver_statement(RUNS.candidates, dialect).sql


async def test_values_are_bound_never_formatted_into_the_text(store: Store) -> None:
    hostile = "x'); DROP TABLE runs; --"
    await store.create_run(
        dict(run_values(hostile, owner=None), request_key=hostile), [("run.started", hostile)], NOW
    )
    dialect = await dialect_of(store)
    assert hostile not in driver_statement(_EVENTS_AFTER, dialect).sql
    assert [e.payload for e in await store.read_events(hostile)] == [hostile]
    again, created = await store.create_run(
        dict(run_values("other", owner=None), request_key=hostile), [("run.started", "{}")], NOW
    )
    assert (again.run_id, created) == (hostile, False)
    claims = await store.claim(owner="w", now_ms=NOW + 1, ttl_ms=10, limit=5, run_ids=[hostile])
    assert [c.run_id for c in claims] == [hostile]


async def test_a_missing_parameter_fails_instead_of_binding_null(store: Store) -> None:
    dialect = await dialect_of(store)
    statement = driver_statement(_EVENTS_AFTER, dialect)

    def read(conn: Connection) -> Any:
        return statement.execute(conn, {"run_id": "a", "limit": 3}).all()

    with pytest.raises(ValueError, match="missing: \\['after_seq'\\]"):
        await store.db.read(read)


async def test_a_row_with_an_unknown_column_is_refused_and_nothing_is_written(store: Store) -> None:
    values = dict(run_values("r1", owner=None), no_such_column=1)
    with pytest.raises(ValueError, match="not columns of runs: \\['no_such_column'\\]"):
        await store.db.transaction(lambda conn: insert_run(conn, values))
    assert await store.get_run("r1") is None


async def test_parameters_go_through_the_dialects_bind_processors(store: Store) -> None:
    # A Boolean column written as the engine writes it (SQLite: its processor makes it 0/1).
    await store.create_run(dict(run_values("r1", owner=None), needs_attention=True), [], NOW)
    record = await store.get_run("r1")
    assert record is not None and record.needs_attention is True
    # A DateTime bind on SQLite is text only through its processor: the driver SQL applies it.
    statement = select(bindparam("when", type_=DateTime))
    when = datetime(2026, 1, 2, 3, 4, 5)

    def read(conn: Connection) -> Any:
        return compile_driver_statement(statement, conn.dialect).execute(conn, {"when": when}).scalar_one()

    sent = await store.db.read(read)
    assert sent == ("2026-01-02 03:04:05.000000" if store.dialect == "sqlite" else when)


async def test_a_run_read_back_by_request_key_has_sqlalchemy_types(store: Store) -> None:
    created, _ = await store.create_run(run_values("r1", owner=None, request_key="k"), [], NOW)
    again, was_created = await store.create_run(run_values("r2", owner=None, request_key="k"), [], NOW)
    assert not was_created
    assert again.needs_attention is False
    assert again == await store.get_run("r1")
    assert created.run_id == again.run_id
