"""Typed signals in the store on SQLite and PostgreSQL: migration 0010 (the row names the unknown
call), signals queued typed and fenced by the revision the person saw."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import create_engine, inspect, text

from agentrt.server.core import (
    ApprovalDecision,
    GrantBudget,
    OutcomeDecision,
    ResolveApproval,
    ResolveOutcome,
)
from agentrt.server.store import Store, decode_signal, signal_target
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


def test_migration_0010_adds_the_unknown_call_to_existing_rows_and_downgrades(db_url: str) -> None:
    alembic(db_url, "upgrade", "0009")
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
            found = conn.execute(text("SELECT unknown_call_id FROM runs WHERE run_id = 'old'")).one()
        assert tuple(found) == (None,)  # an earlier runtime's row: the owner checks the call
        alembic(db_url, "downgrade", "0009")
        assert "unknown_call_id" not in {c["name"] for c in inspect(engine).get_columns("runs")}
        alembic(db_url, "upgrade", "head")
    finally:
        engine.dispose()


async def test_the_row_keeps_the_unknown_call_of_any_length(store: Store) -> None:
    record, _ = await store.create_run(run_values("r1"), [("run.started", "{}")], 1000)
    call_id = "call_" + "x" * 500  # a model's id: no length is promised
    await store.append(
        "r1",
        expected_revision=record.revision,
        owner="w1",
        first_seq=2,
        new_events=[("tool.outcome_unknown", "{}")],
        values={"phase": "UNKNOWN_OUTCOME", "unknown_call_id": call_id},
        now_ms=1001,
    )
    found = await store.get_run("r1")
    assert found is not None and signal_target(found).unknown_call_id == call_id


async def test_signals_are_queued_typed_in_order_and_fenced_by_the_revision_seen(store: Store) -> None:
    record, _ = await store.create_run(run_values("r1"), [("run.started", "{}")], 1000)
    approval = ResolveApproval(
        approval_id="ap1", decision=ApprovalDecision.APPROVE, args_hash="h" * 64, approver="bob", comment="ok"
    )
    grant = GrantBudget(approval_id="ap2", decision=ApprovalDecision.REJECT, args_hash=None, approver="bob")
    outcome = ResolveOutcome(
        call_id="c1", decision=OutcomeDecision.SUCCEEDED, resolved_by="ops", result_json='{"a": 1}'
    )
    for signal in (approval, grant, outcome):
        assert await store.add_signal("r1", signal=signal, now_ms=1001, expected_revision=record.revision)
    assert not await store.add_signal(
        "r1", signal=approval, now_ms=1002, expected_revision=record.revision - 1
    )
    queued = await store.read_signals("r1")
    assert [decode_signal(s.kind, s.payload) for s in queued] == [approval, grant, outcome]
    found = await store.get_run("r1")
    assert found is not None and found.revision == record.revision  # queueing changes no revision
