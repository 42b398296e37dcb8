"""One contract for the run log port, run against the in-memory fake and the real store.

The engine's in-process tests drive the step loop against ``agentrt.testing``'s MemoryRunLog; the
runtime runs on the SQLite or PostgreSQL store. Both must keep the same fencing rules, or a test
of the engine proves nothing about the service: the same assertions run against each.

The engine commits typed events and a frozen :class:`RowUpdate`; each log encodes them itself
(``encode_commit``), so these tests also pin what the row looks like after each kind of update.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from agentrt.server.config import AgentConfig
from agentrt.server.core import (
    ApprovalRequested,
    CallSummary,
    LeaseLost,
    OutcomeDecision,
    Phase,
    QueuedSignal,
    ResolveOutcome,
    RunCompleted,
    RunEnded,
    StepStarted,
    ToolOutcomeUnknown,
    Usage,
)
from agentrt.server.engine import ResolvedAgent, RunLog
from agentrt.server.store import (
    KEEP,
    MAX_EVENT_BYTES,
    CleanupColumns,
    EventTooLarge,
    RowUpdate,
    Store,
    StoredCheckpoint,
    decode_event,
    decode_signal,
    encode_signal,
)
from agentrt.testing.engine import MemoryRunLog
from tests.integration.test_store import run_values

OWNER = "worker-1"
NO_CHANGE = RowUpdate()
NOW = 1_000_000


@dataclass
class Backend:
    """A run log with one QUEUED run owned by OWNER (revision 1, its run.started at seq 1)."""

    log: RunLog
    run_id: str
    add_signal: Any  # (a typed signal) -> awaitable


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "memory":
        memory = MemoryRunLog()
        agent = ResolvedAgent.resolve("agent", AgentConfig(), {"agent": AgentConfig()})
        record = memory.create(
            agent=agent, input="hi", owner=OWNER, now_ms=NOW, budgets_json={}, deadline_ms=NOW + 60_000
        )

        async def add_memory_signal(signal: QueuedSignal) -> None:
            kind, payload = encode_signal(signal)
            memory.add_signal(record.run_id, kind, json.loads(payload))

        yield Backend(memory, record.run_id, add_memory_signal)
        return
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    store = await Store.open(url)
    try:
        values = run_values("r1", owner=OWNER)
        await store.create_run(values, [("run.started", '{"input": "hi"}')], NOW)

        async def add_store_signal(signal: QueuedSignal) -> None:
            await store.add_signal("r1", signal=signal, now_ms=NOW)

        yield Backend(store, "r1", add_store_signal)
    finally:
        await store.close()


async def commit(
    b: Backend, *, revision: int, first_seq: int, owner: str = OWNER, update: RowUpdate = NO_CHANGE
) -> int:
    committed = await b.log.commit(
        b.run_id,
        expected_revision=revision,
        owner=owner,
        first_seq=first_seq,
        events=[StepStarted(step=first_seq)],
        update=RowUpdate(phase=Phase.MODEL_STEP).then(update),
        now_ms=NOW + first_seq,
    )
    assert [(e.seq, e.type) for e in committed.events] == [(first_seq, "step.started")]
    return committed.revision


async def test_a_commit_moves_the_row_and_the_log_together(backend: Backend) -> None:
    assert await commit(backend, revision=1, first_seq=2, update=RowUpdate(output="so far")) == 2
    record = await backend.log.get_run(backend.run_id)
    assert record is not None
    assert (record.revision, record.last_seq, record.phase, record.output) == (2, 2, "MODEL_STEP", "so far")
    events = await backend.log.read_events(backend.run_id)
    assert [(e.seq, e.type) for e in events] == [(1, "run.started"), (2, "step.started")]
    assert decode_event(events[1].type, events[1].payload) == StepStarted(step=2)
    assert [e.seq for e in await backend.log.read_events(backend.run_id, after_seq=1)] == [2]


async def test_text_columns_take_no_nul_but_the_event_keeps_the_exact_text(backend: Backend) -> None:
    text = "a\x00b"
    unknown = ToolOutcomeUnknown(step=2, call_id=f"call{text}")
    await backend.log.commit(
        backend.run_id,
        expected_revision=1,
        owner=OWNER,
        first_seq=2,
        events=[unknown, RunCompleted(output=text)],
        update=RowUpdate(
            phase=Phase.UNKNOWN_OUTCOME, output=text, reason=text, unknown_call_id=unknown.call_id
        ),
        now_ms=NOW,
    )
    record = await backend.log.get_run(backend.run_id)
    assert record is not None
    assert (record.output, record.reason, record.unknown_call_id) == ("a\ufffdb", "a\ufffdb", "calla\ufffdb")
    stored = (await backend.log.read_events(backend.run_id))[1:]
    assert [decode_event(e.type, e.payload) for e in stored] == [unknown, RunCompleted(output=text)]


async def test_nullable_columns_are_kept_set_or_cleared_as_the_update_says(backend: Backend) -> None:
    approval = ApprovalRequested(approval_id="a1", call_id="c1", tool="pay")
    await commit(backend, revision=1, first_seq=2, update=RowUpdate(pending_approval=approval))
    await commit(backend, revision=2, first_seq=3, update=RowUpdate(pending_approval=KEEP, output="x"))
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and record.pending_approval is not None
    assert decode_event("approval.requested", record.pending_approval) == approval
    await commit(backend, revision=3, first_seq=4, update=RowUpdate(pending_approval=None))
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and record.pending_approval is None and record.output == "x"


async def test_the_closing_commit_gives_the_lease_back_and_keeps_a_partial_runs_summary(
    backend: Backend,
) -> None:
    ended = RunEnded(
        phase=Phase.FAILED,
        partial=True,
        completed_calls=(CallSummary(call_id="c1", tool="read"),),
        unknown_calls=(CallSummary(call_id="c2", tool="pay", detail="no_outcome"),),
    )
    update = RowUpdate(
        phase=Phase.FAILED,
        usage=Usage(input_tokens=3),
        release_lease=True,
        ended=ended,
        cleanup=CleanupColumns(status="UNKNOWN", unknown=1, due_ms=NOW + 5),
        needs_attention=True,
    )
    await backend.log.commit(
        backend.run_id,
        expected_revision=1,
        owner=OWNER,
        first_seq=2,
        events=[ended],
        update=update,
        now_ms=NOW,
    )
    record = await backend.log.get_run(backend.run_id)
    assert record is not None
    assert (record.phase, record.lease_owner, record.lease_expires_ms) == ("FAILED", None, None)
    assert (record.cleanup_status, record.cleanups_unknown, record.cleanup_due_ms) == ("UNKNOWN", 1, NOW + 5)
    assert record.needs_attention and json.loads(record.usage)["input_tokens"] == 3
    summary = json.loads(record.call_summary or "{}")
    assert [c["call_id"] for c in summary["completed_calls"]] == ["c1"]
    assert [c["call_id"] for c in summary["unknown_calls"]] == ["c2"]
    with pytest.raises(LeaseLost):  # an ended run takes no more commits from its last owner
        await commit(backend, revision=2, first_seq=3)


async def test_an_event_past_the_bound_is_refused_and_changes_nothing(backend: Backend) -> None:
    huge = RunCompleted(output="x" * (MAX_EVENT_BYTES + 1))
    with pytest.raises(EventTooLarge):
        await backend.log.commit(
            backend.run_id,
            expected_revision=1,
            owner=OWNER,
            first_seq=2,
            events=[StepStarted(step=2), huge],
            update=RowUpdate(phase=Phase.COMPLETED, output="never"),
            now_ms=NOW,
        )
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and (record.revision, record.last_seq, record.output) == (1, 1, "")


@pytest.mark.parametrize(("owner", "revision"), [("worker-2", 1), (OWNER, 0), (OWNER, 2)])
async def test_a_commit_without_the_lease_or_the_revision_is_refused_and_changes_nothing(
    backend: Backend, owner: str, revision: int
) -> None:
    with pytest.raises(LeaseLost):
        await commit(backend, revision=revision, first_seq=2, owner=owner, update=RowUpdate(output="never"))
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and (record.revision, record.last_seq, record.output) == (1, 1, "")
    assert [e.seq for e in await backend.log.read_events(backend.run_id)] == [1]


async def test_release_is_the_owners_alone(backend: Backend) -> None:
    await backend.log.release(backend.run_id, owner="worker-2")
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and record.lease_owner == OWNER
    await backend.log.release(backend.run_id, owner=OWNER)
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and record.lease_owner is None
    with pytest.raises(LeaseLost):  # a released run takes no more commits from its last owner
        await commit(backend, revision=1, first_seq=2)


async def test_a_release_naming_another_generation_changes_nothing(backend: Backend) -> None:
    record = await backend.log.get_run(backend.run_id)
    assert record is not None
    await backend.log.release(backend.run_id, owner=OWNER, generation=record.lease_generation + 1)
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and record.lease_owner == OWNER
    await backend.log.release(backend.run_id, owner=OWNER, generation=record.lease_generation)
    record = await backend.log.get_run(backend.run_id)
    assert record is not None and record.lease_owner is None


async def test_a_repark_gives_the_lease_back_without_a_revision(backend: Backend) -> None:
    with pytest.raises(LeaseLost):
        await backend.log.repark(
            backend.run_id, owner=OWNER, expected_revision=7, wake_ms=5, reconcile_attempts=1
        )
    await backend.log.repark(
        backend.run_id, owner=OWNER, expected_revision=1, wake_ms=NOW + 500, reconcile_attempts=3
    )
    record = await backend.log.get_run(backend.run_id)
    assert record is not None
    assert (record.revision, record.lease_owner, record.wake_ms, record.reconcile_attempts) == (
        1,
        None,
        NOW + 500,
        3,
    )


async def test_a_signal_is_consumed_by_the_commit_that_applies_it(backend: Backend) -> None:
    for call_id in ("c1", "c2"):
        await backend.add_signal(
            ResolveOutcome(call_id=call_id, decision=OutcomeDecision.RETRY, resolved_by="op")
        )
    first, second = await backend.log.read_signals(backend.run_id)
    assert [decode_signal(s.kind, s.payload).call_id for s in (first, second)] == ["c1", "c2"]  # type: ignore[union-attr]
    with pytest.raises(LeaseLost):  # a refused commit consumes nothing
        await backend.log.commit(
            backend.run_id,
            expected_revision=9,
            owner=OWNER,
            first_seq=2,
            events=[],
            update=RowUpdate(),
            now_ms=NOW,
            consume_signals=[first.id],
        )
    await backend.log.commit(
        backend.run_id,
        expected_revision=1,
        owner=OWNER,
        first_seq=2,
        events=[],
        update=RowUpdate(),
        now_ms=NOW,
        consume_signals=[first.id],
    )
    assert [s.id for s in await backend.log.read_signals(backend.run_id)] == [second.id]


async def test_the_latest_checkpoint_is_the_one_kept(backend: Backend) -> None:
    assert await backend.log.read_checkpoint(backend.run_id) is None
    for through in (5, 9, 7):
        await backend.log.write_checkpoint(
            StoredCheckpoint(backend.run_id, through, 1, f"state {through}", NOW)
        )
    latest = await backend.log.read_checkpoint(backend.run_id)
    assert latest is not None and (latest.through_seq, latest.state) == (9, "state 9")
