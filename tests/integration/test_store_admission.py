"""Admission counts in the store, SQLite and PostgreSQL: which runs count, and what they cost.

The per-request behaviour (refusals over gRPC, nothing written, concurrency) is in
``test_admission``; here the counts themselves, and that they seek the index instead of
walking every run a tenant ever had.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentrt.server.core import ACTIVE_PHASES, Phase, ResourceExhausted
from agentrt.server.store import Admission, Store, migrate
from agentrt.server.store._admission import _COUNTS
from tests.integration.test_store import run_values


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def admission(*, active: int = 100, queued: int = 100, everyone: int = 1000) -> Admission:
    return Admission(
        tenant_id="t",
        max_queued_runs=everyone,
        max_queued_runs_per_tenant=queued,
        max_active_runs_per_tenant=active,
        retry_after_s=1.0,
    )


async def refusal(store: Store, limits: Admission) -> tuple[str, str] | None:
    try:
        await store.check_admission(limits)
    except ResourceExhausted as exc:
        return exc.reason, exc.metadata["scope"]
    return None


async def test_every_phase_not_ended_counts_as_active_and_ended_ones_do_not(store: Store) -> None:
    for phase in Phase:  # one run of the tenant in every phase, ended ones included
        await store.create_run(run_values(f"t-{phase.value}", phase=phase.value), [("run.started", "{}")], 1)
    other = dict(run_values("other", phase=Phase.MODEL_STEP.value), tenant_id="u")
    await store.create_run(other, [("run.started", "{}")], 1)
    active = len(ACTIVE_PHASES)
    assert await refusal(store, admission(active=active)) == ("TOO_MANY_ACTIVE_RUNS", "tenant")
    assert await refusal(store, admission(active=active + 1)) is None
    # One queued run of the tenant (among the active ones), none of the other tenant.
    assert await refusal(store, admission(queued=1)) == ("TOO_MANY_QUEUED_RUNS", "tenant")
    assert await refusal(store, admission(queued=2)) is None
    assert await refusal(store, admission(everyone=1)) == ("TOO_MANY_QUEUED_RUNS", "global")
    # The tenant limits are checked first, in their order.
    assert await refusal(store, admission(active=1, queued=1, everyone=1)) == (
        "TOO_MANY_ACTIVE_RUNS",
        "tenant",
    )


def test_the_counts_seek_the_index_and_never_walk_a_tenants_ended_runs(tmp_path: Path) -> None:
    migrate(f"sqlite:///{tmp_path / 'plan.sqlite'}")
    with sqlite3.connect(tmp_path / "plan.sqlite") as conn:
        params = {"tenant_id": "t", "active_cap": 10, "tenant_cap": 10, "global_cap": 10}
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {_COUNTS}", params)]
    on_runs = [step for step in plan if " runs " in f"{step} "]
    assert len(on_runs) == 3, plan
    # A seek binding the phase: "SEARCH runs USING COVERING INDEX ... (tenant_id=? AND phase=?)".
    assert all(step.startswith("SEARCH") and "phase=?" in step for step in on_runs), plan
