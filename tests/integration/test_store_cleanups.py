"""Cleanups in the store on SQLite and PostgreSQL: migration 0009, the cleanup job's claim (ended,
UNKNOWN and due only; one replica at a time) and the cleanup_unknown listing."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import create_engine, inspect, text

from agentrt.server.core import LeaseLost
from agentrt.server.store import Store
from agentrt.server.store._db import normalise_url
from tests.integration.test_store import run_values
from tests.integration.test_store_waits import alembic


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def test_migration_0009_adds_the_cleanup_columns_to_existing_rows_and_downgrades(db_url: str) -> None:
    alembic(db_url, "upgrade", "0008")
    engine = create_engine(normalise_url(db_url))
    try:
        row = run_values("old", owner=None, phase="COMPLETED")
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
                    "SELECT cleanup_status, cleanups_unknown, cleanup_due_ms, cleanup_retries "
                    "FROM runs WHERE run_id = 'old'"
                )
            ).one()
        assert tuple(found) == (None, 0, None, 0)
        alembic(db_url, "downgrade", "0008")
        names = {c["name"] for c in inspect(engine).get_columns("runs")}
        assert not names & {"cleanup_status", "cleanups_unknown", "cleanup_due_ms", "cleanup_retries"}
        alembic(db_url, "upgrade", "head")
    finally:
        engine.dispose()


async def _end(
    store: Store, run_id: str, *, status: str | None, due_ms: int | None, phase: str = "COMPLETED"
) -> None:
    await store.create_run(run_values(run_id, phase="MODEL_STEP"), [("run.started", "{}")], 1000)
    await store.append(
        run_id,
        expected_revision=1,
        owner="w1",
        first_seq=2,
        new_events=[("run.ended", '{"phase": "RUN_PHASE_COMPLETED"}')],
        values={
            "phase": "COMPLETED",
            "lease_owner": None,
            "lease_expires_ms": None,
            "cleanup_status": status,
            "cleanups_unknown": 1 if status == "UNKNOWN" else 0,
            "cleanup_due_ms": due_ms,
        },
        now_ms=2000,
    )


async def test_the_cleanup_job_claims_only_ended_unknown_due_runs_once(store: Store) -> None:
    await _end(store, "due", status="UNKNOWN", due_ms=5000)
    await _end(store, "later", status="UNKNOWN", due_ms=9000)
    await _end(store, "clean", status="DONE", due_ms=None)
    await _end(store, "none", status=None, due_ms=None)
    # A run still working with a pending cleanup belongs to its driver, not the job.
    await store.create_run(run_values("working", phase="CLEANING_UP"), [("run.started", "{}")], 1000)

    assert await store.claim_cleanups(owner="j1", now_ms=4999, ttl_ms=1000, limit=10) == []
    claims = await store.claim_cleanups(owner="j1", now_ms=5000, ttl_ms=1000, limit=10)
    assert [(c.run_id, c.generation) for c in claims] == [("due", 2)]
    # Another replica skips a run the first one holds, until its lease lapses.
    assert await store.claim_cleanups(owner="j2", now_ms=5500, ttl_ms=1000, limit=10) == []
    taken = await store.claim_cleanups(owner="j2", now_ms=6001, ttl_ms=1000, limit=10)
    assert [c.run_id for c in taken] == ["due"]
    with pytest.raises(LeaseLost):  # the first replica's late commit is fenced off
        await store.append(
            "due",
            expected_revision=2,
            owner="j1",
            first_seq=3,
            new_events=[("cleanup.completed", '{"cleanup_id": "c1", "attempt": 2}')],
            values={},
            now_ms=6002,
        )
    # The ordinary claim never takes an ended run back.
    assert await store.claim(owner="w9", now_ms=10_000, ttl_ms=1000, limit=10, run_ids=["due", "later"]) == []


async def test_list_runs_filters_on_cleanup_unknown(store: Store) -> None:
    await _end(store, "leaky", status="UNKNOWN", due_ms=5000)
    await _end(store, "tidy", status="DONE", due_ms=None)
    flagged, _ = await store.list_runs(tenant_id="t", cleanup_unknown=True)
    assert [(r.run_id, r.cleanup_status, r.cleanups_unknown) for r in flagged] == [("leaky", "UNKNOWN", 1)]
    assert await store.list_runs(tenant_id="other", cleanup_unknown=True) == ([], "")
    everything, _ = await store.list_runs(tenant_id="t")
    assert {r.run_id for r in everything} == {"leaky", "tidy"}
