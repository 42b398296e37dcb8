"""The store's gauge counts (``Store.gauge_counts``) on SQLite and PostgreSQL: active runs by
phase (every active phase, zero included), runs waiting for a worker, runs needing attention."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentrt.server.core import ACTIVE_PHASES
from agentrt.server.store import Store
from tests.integration.test_store import run_values


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


async def test_gauge_counts_read_active_phases_the_queue_and_attention(store: Store) -> None:
    rows = [
        run_values("queued-free", owner=None),  # waits for a worker
        run_values("queued-held"),  # leased (until 10**13): not waiting
        run_values("model", phase="MODEL_STEP"),
        run_values("paused", owner=None, phase="WAITING_APPROVAL"),  # a person's turn, not a worker's
        run_values("unknown", owner=None, phase="UNKNOWN_OUTCOME") | {"needs_attention": True},
        run_values("old", owner=None, phase="FAILED") | {"needs_attention": True},  # ended: not counted
        run_values("done", owner=None, phase="COMPLETED"),  # history is not counted
    ]
    for values in rows:
        await store.create_run(values, [("run.started", "{}")], 1000)
    by_phase, queued, attention = await store.gauge_counts(now_ms=5000)
    assert set(by_phase) == {p.value for p in ACTIVE_PHASES}
    assert by_phase["QUEUED"] == 2 and by_phase["MODEL_STEP"] == 1 and by_phase["TOOL_STEP"] == 0
    assert by_phase["WAITING_APPROVAL"] == 1 and by_phase["UNKNOWN_OUTCOME"] == 1
    assert "COMPLETED" not in by_phase
    assert queued == 1 and attention == 1
    # A lease that expired puts its run back in the queue.
    assert (await store.gauge_counts(now_ms=10**13 + 1))[1] == 3
