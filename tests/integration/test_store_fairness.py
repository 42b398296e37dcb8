"""The store's share of fairness between tenants, on SQLite and PostgreSQL.

- Claims take tenants in turn: one tenant's backlog of queued runs never queues another
  tenant's runs, and the claim seeks the index on phase instead of walking every run ever stored.
- A ListRuns page stops where the caller's budget says (``fits``), with a token that continues
  after the last run it kept.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.dialects import sqlite as sqlite_dialect

from agentrt.server.store import RunRecord, Store, migrate
from agentrt.server.store._claims import RUNS
from tests.integration.test_store import run_values

NOW = 10**12


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


async def add(store: Store, run_id: str, tenant: str, created_ms: int) -> None:
    values = dict(run_values(run_id, owner=None), tenant_id=tenant)
    await store.create_run(values, [("run.started", "{}")], created_ms)


async def test_a_backlog_of_one_tenant_does_not_queue_another_tenants_runs(store: Store) -> None:
    for i in range(40):  # tenant a's backlog, all older than tenant b's runs
        await add(store, f"a{i:03d}", "a", NOW + i)
    await add(store, "b000", "b", NOW + 100)
    await add(store, "b001", "b", NOW + 101)
    await add(store, "c000", "c", NOW + 102)

    first = await store.claim(owner="w1", now_ms=NOW + 200, ttl_ms=10_000, limit=5)

    # Each tenant's oldest, then each tenant's second: a, b, c, a, b.
    assert [c.run_id for c in first] == ["a000", "b000", "c000", "a001", "b001"]
    assert [c.tenant_id for c in first] == ["a", "b", "c", "a", "b"]
    assert all(c.generation == 1 for c in first)
    rest = await store.claim(owner="w2", now_ms=NOW + 200, ttl_ms=10_000, limit=100)
    assert [c.run_id for c in rest] == [f"a{i:03d}" for i in range(2, 40)]


async def test_a_claim_among_given_runs_takes_only_those(store: Store) -> None:
    await add(store, "a000", "a", NOW)
    await add(store, "b000", "b", NOW + 1)
    taken = await store.claim(owner="w1", now_ms=NOW + 5, ttl_ms=1000, limit=10, run_ids=["b000", "zzz"])
    assert [(c.run_id, c.tenant_id) for c in taken] == [("b000", "b")]
    assert await store.claim(owner="w1", now_ms=NOW + 5, ttl_ms=1000, limit=10, run_ids=["b000"]) == []


@pytest.mark.postgres
async def test_replicas_claiming_at_once_never_take_the_same_run(pg_url: str) -> None:
    stores = [await Store.open(pg_url) for _ in range(3)]
    try:
        for i in range(30):
            await add(stores[0], f"r{i:03d}", f"t{i % 4}", NOW + i)
        taken = await asyncio.gather(
            *(s.claim(owner=f"w{n}", now_ms=NOW + 100, ttl_ms=10_000, limit=12) for n, s in enumerate(stores))
        )
    finally:
        for opened in stores:
            await opened.close()
    ids = [c.run_id for claims in taken for c in claims]
    assert len(ids) == len(set(ids)) == 30


def test_the_claim_seeks_the_phase_index_and_never_walks_ended_runs(tmp_path: Path) -> None:
    migrate(f"sqlite:///{tmp_path / 'plan.sqlite'}")
    statement = RUNS.candidates.params(now_ms=NOW, limit=10)
    sql = statement.compile(dialect=sqlite_dialect.dialect(), compile_kwargs={"literal_binds": True})
    with sqlite3.connect(tmp_path / "plan.sqlite") as conn:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
    assert not [step for step in plan if step.startswith("SCAN runs")], plan
    # "SEARCH runs USING INDEX ix_runs_... (phase=?)": one seek per phase not ended.
    assert any(step.startswith("SEARCH runs USING") and "(phase=?)" in step for step in plan), plan
    # The session check seeks the tenant's runs by phase too, not every run the tenant had.
    assert any("earlier USING INDEX ix_runs_tenant_phase (tenant_id=? AND phase=?)" in s for s in plan), plan


async def test_a_page_ends_where_the_budget_says_and_the_token_goes_on_after_it(store: Store) -> None:
    for i in range(10):
        await add(store, f"r{i:03d}", "t", NOW + i)
    seen: list[str] = []
    token = ""
    budgets = [3, 0, 4, 100]  # runs each page may take; 0: the first run only (a page moves on)
    pages: list[list[str]] = []
    for budget in budgets:
        kept: list[RunRecord] = []

        def fits(record: RunRecord, kept: list[RunRecord] = kept, budget: int = budget) -> bool:
            if len(kept) >= max(budget, 1):
                return False
            kept.append(record)
            return True

        records, token = await store.list_runs(tenant_id="t", page_size=50, page_token=token, fits=fits)
        assert [r.run_id for r in records] == [r.run_id for r in kept]
        pages.append([r.run_id for r in records])
        seen += pages[-1]
        if not token:
            break
    newest_first = [f"r{i:03d}" for i in range(9, -1, -1)]
    assert pages == [newest_first[:3], newest_first[3:4], newest_first[4:8], newest_first[8:]]
    assert seen == newest_first and token == ""
