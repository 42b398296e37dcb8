"""Waits in the store on SQLite and PostgreSQL: migration 0008, re-parking without a commit, the
claim of a parked run only once it is due, and the needs_attention listing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, text

from agentrt.server.core import LeaseLost
from agentrt.server.store import Store
from agentrt.server.store._db import normalise_url
from tests.integration.test_store import run_values

MIGRATIONS = Path(__import__("agentrt.server.store", fromlist=["x"]).__file__).parent / "migrations"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def alembic(url: str, action: str, revision: str) -> None:
    engine = create_engine(normalise_url(url))
    try:
        with engine.begin() as conn:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = conn
            getattr(command, action)(config, revision)
    finally:
        engine.dispose()


def test_migration_0008_adds_the_wait_columns_to_existing_rows_and_downgrades(db_url: str) -> None:
    alembic(db_url, "upgrade", "0005")
    engine = create_engine(normalise_url(db_url))
    try:
        row = run_values("old", owner=None, phase="UNKNOWN_OUTCOME")
        row.update(revision=3, last_seq=3, created_ms=1, updated_ms=1, created_by="")
        with engine.begin() as conn:
            columns = ", ".join(row)
            conn.execute(
                text(f"INSERT INTO runs ({columns}) VALUES ({', '.join(':' + c for c in row)})"), row
            )
        alembic(db_url, "upgrade", "head")
        with engine.begin() as conn:
            found = conn.execute(
                text(
                    "SELECT reconcile_attempts, needs_attention, call_summary FROM runs WHERE run_id = 'old'"
                )
            ).one()
        assert (found[0], bool(found[1]), found[2]) == (0, False, None)
        alembic(db_url, "downgrade", "0005")
        names = {c["name"] for c in inspect(engine).get_columns("runs")}
        assert not names & {"reconcile_attempts", "needs_attention", "call_summary"}
        alembic(db_url, "upgrade", "head")
    finally:
        engine.dispose()


async def test_repark_moves_the_wake_time_without_a_revision_and_is_fenced(store: Store) -> None:
    await store.create_run(run_values("r", phase="UNKNOWN_OUTCOME"), [("run.started", "{}")], 1000)
    await store.repark("r", owner="w1", expected_revision=1, wake_ms=9000, reconcile_attempts=4)
    record = await store.get_run("r")
    assert record is not None
    assert (record.revision, record.wake_ms, record.reconcile_attempts, record.lease_owner) == (
        1,
        9000,
        4,
        None,
    )
    with pytest.raises(LeaseLost):  # no longer the owner
        await store.repark("r", owner="w1", expected_revision=1, wake_ms=9500, reconcile_attempts=5)

    # Parked: not claimed before its wake time, claimed at it.
    assert await store.claim(owner="w2", now_ms=8999, ttl_ms=1000, limit=5) == []
    claims = await store.claim(owner="w2", now_ms=9000, ttl_ms=1000, limit=5)
    assert [(c.run_id, c.generation) for c in claims] == [("r", 2)]
    with pytest.raises(LeaseLost):  # another revision
        await store.repark("r", owner="w2", expected_revision=0, wake_ms=9500, reconcile_attempts=5)


async def test_list_runs_filters_on_needs_attention_and_keeps_the_call_summary(store: Store) -> None:
    for run_id in ("calm", "stuck"):
        await store.create_run(run_values(run_id, phase="UNKNOWN_OUTCOME"), [("run.started", "{}")], 1000)
    summary = json.dumps({"unknown_calls": [{"call_id": "c1", "tool": "refund.issue", "step": 2}]})
    await store.append(
        "stuck",
        expected_revision=1,
        owner="w1",
        first_seq=2,
        new_events=[("run.escalated", '{"reason": "unknown_outcome_age"}')],
        values={"needs_attention": True, "call_summary": summary},
        now_ms=2000,
    )
    flagged, _ = await store.list_runs(tenant_id="t", needs_attention=True)
    assert [r.run_id for r in flagged] == ["stuck"] and flagged[0].call_summary == summary
    everything, _ = await store.list_runs(tenant_id="t")
    assert {r.run_id for r in everything} == {"calm", "stuck"}
