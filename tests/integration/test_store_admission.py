"""Admission in the store: which runs count and what counting costs; one tenant's admissions take turns.

The per-request behaviour (refusals over gRPC, nothing written, concurrency) is in
``test_admission``; here the counts themselves, and that they seek the index instead of
walking every run a tenant ever had.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentrt.server.core import ACTIVE_PHASES, OverLimit, Phase
from agentrt.server.store import Admission, Store, migrate
from agentrt.server.store._admission import _COUNTS, TenantTurns
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
    except OverLimit as exc:
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


async def test_admitting_turns_serialise_one_tenant_not_others_and_are_forgotten_after() -> None:
    turns = TenantTurns()
    inside = asyncio.Event()
    release = asyncio.Event()
    order: list[str] = []

    async def admit(tenant: str, name: str, *, hold: bool = False) -> None:
        async with turns.turn(tenant):
            order.append(name)
            if hold:
                inside.set()
                await release.wait()

    first = asyncio.ensure_future(admit("t", "t1", hold=True))
    await asyncio.wait_for(inside.wait(), 5)
    second = asyncio.ensure_future(admit("t", "t2"))
    cancelled = asyncio.ensure_future(admit("t", "t3"))
    await asyncio.wait_for(admit("u", "u1"), 5)  # another tenant does not wait
    assert order == ["t1", "u1"] and not second.done()
    cancelled.cancel()  # a waiter that goes away leaves no trace
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 5)
    assert order == ["t1", "u1", "t2"] and cancelled.cancelled()
    assert len(turns) == 0
