"""The run store on SQLite and PostgreSQL: fenced appends, gapless logs, leases, paging."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentrt.server.core import LeaseLost
from agentrt.server.store import Store


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def run_values(
    run_id: str,
    *,
    owner: str | None = "w1",
    request_key: str | None = None,
    created: int = 0,
    phase: str = "QUEUED",
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "tenant_id": "t",
        "agent_name": "a",
        "agent_spec": "{}",
        "input": "hi",
        "output": "",
        "reason": "",
        "phase": phase,
        "budgets": "{}",
        "usage": "{}",
        "request_key": request_key,
        "session_id": None,
        "metadata": "{}",
        "deadline_ms": 10**13,
        "lease_owner": owner,
        "lease_expires_ms": 10**13 if owner else None,
        "lease_generation": 1 if owner else 0,
        "cancel_requested_ms": None,
        "cancel_reason": None,
        "state_version": 1,
        "runtime_version": "0",
        "agent_config_hash": "h",
    }


async def test_create_run_writes_the_row_and_first_events_and_dedups_request_keys(store: Store) -> None:
    record, created = await store.create_run(run_values("r1", request_key="k"), [("run.started", "{}")], 1000)
    assert created and record.revision == 1 and record.last_seq == 1
    again, created_again = await store.create_run(
        run_values("r2", request_key="k"), [("run.started", "{}")], 2000
    )
    assert not created_again and again.run_id == "r1"
    assert await store.get_run("r2") is None
    assert [e.seq for e in await store.read_events("r1")] == [1]


async def test_fenced_append_refuses_stale_revision_or_other_owner_and_writes_nothing(store: Store) -> None:
    await store.create_run(run_values("r1"), [("run.started", "{}")], 1000)
    revision = await store.append(
        "r1",
        expected_revision=1,
        owner="w1",
        first_seq=2,
        new_events=[("step.started", "{}")],
        values={"phase": "MODEL_STEP"},
        now_ms=1001,
    )
    assert revision == 2
    with pytest.raises(LeaseLost):
        await store.append(
            "r1",
            expected_revision=1,
            owner="w1",
            first_seq=3,
            new_events=[("x", "{}")],
            values={"phase": "FAILED"},
            now_ms=1002,
        )
    with pytest.raises(LeaseLost):
        await store.append(
            "r1",
            expected_revision=2,
            owner="zombie",
            first_seq=3,
            new_events=[("x", "{}")],
            values={"phase": "FAILED"},
            now_ms=1002,
        )
    record = await store.get_run("r1")
    assert (
        record is not None and record.revision == 2 and record.phase == "MODEL_STEP" and record.last_seq == 2
    )
    assert [e.seq for e in await store.read_events("r1")] == [1, 2]


async def test_concurrent_appends_are_group_committed_and_each_log_stays_gapless(store: Store) -> None:
    runs = [f"r{i}" for i in range(20)]
    for run_id in runs:
        await store.create_run(run_values(run_id), [("run.started", "{}")], 1000)

    async def drive(run_id: str) -> None:
        revision = 1
        for seq in range(2, 12):
            revision = await store.append(
                run_id,
                expected_revision=revision,
                owner="w1",
                first_seq=seq,
                new_events=[("e", json.dumps({"seq": seq}))],
                values={},
                now_ms=1000 + seq,
            )

    await asyncio.gather(*(drive(r) for r in runs))
    for run_id in runs:
        seqs = [e.seq for e in await store.read_events(run_id)]
        assert seqs == list(range(1, 12))
        assert [e.seq for e in await store.read_events(run_id, after_seq=7)] == [8, 9, 10, 11]


async def test_one_fenced_out_append_does_not_fail_the_others_in_its_batch(store: Store) -> None:
    for run_id in ("good", "stolen"):
        await store.create_run(run_values(run_id), [("run.started", "{}")], 1000)
    results = await asyncio.gather(
        store.append(
            "good",
            expected_revision=1,
            owner="w1",
            first_seq=2,
            new_events=[("e", "{}")],
            values={},
            now_ms=1,
        ),
        store.append(
            "stolen",
            expected_revision=1,
            owner="w2",
            first_seq=2,
            new_events=[("e", "{}")],
            values={},
            now_ms=1,
        ),
        return_exceptions=True,
    )
    assert results[0] == 2 and isinstance(results[1], LeaseLost)
    assert [e.seq for e in await store.read_events("stolen")] == [1]


async def test_claim_takes_unowned_and_expired_runs_once_and_bumps_the_fencing_token(store: Store) -> None:
    await store.create_run(run_values("free", owner=None), [("run.started", "{}")], 1000)
    await store.create_run(run_values("held"), [("run.started", "{}")], 1000)
    await store.create_run(run_values("done", owner=None, phase="COMPLETED"), [("run.started", "{}")], 1000)
    await store.create_run(
        run_values("paused", owner=None, phase="WAITING_APPROVAL"), [("run.started", "{}")], 1000
    )
    claims = await store.claim(owner="w2", now_ms=5000, ttl_ms=1000, limit=10)
    assert [(c.run_id, c.generation) for c in claims] == [("free", 1)]
    assert await store.claim(owner="w3", now_ms=5500, ttl_ms=1000, limit=10) == []
    # w2's lease on "free" expires at 6000; "held" (expiring 10**13) stays with w1.
    claims = await store.claim(owner="w3", now_ms=6001, ttl_ms=1000, limit=10)
    assert [(c.run_id, c.generation) for c in claims] == [("free", 2)]
    assert await store.renew(owner="w2", run_ids=["free"], now_ms=6002, ttl_ms=1000) == {}
    assert await store.renew(owner="w3", run_ids=["free"], now_ms=6002, ttl_ms=1000) == {"free": None}
    await store.request_cancel(
        "free", tenant_id="t", reason="from another replica", requested_by="ops", now_ms=6003
    )
    renewed = await store.renew(owner="w3", run_ids=["free"], now_ms=6004, ttl_ms=1000)
    assert renewed == {"free": ("from another replica", "ops")}
    await store.release("free", owner="w2")  # not the owner: no effect
    record = await store.get_run("free")
    assert record is not None and record.lease_owner == "w3"
    await store.release("free", owner="w3")
    record = await store.get_run("free")
    assert record is not None and record.lease_owner is None


async def test_a_lease_handed_over_by_its_generation_is_claimable_at_once_by_another_worker(
    store: Store,
) -> None:
    """A drain: the owner releases the lease it holds long before it expires; no TTL is waited."""
    await store.create_run(run_values("held"), [("run.started", "{}")], 1000)  # w1, generation 1
    await store.release("held", owner="w1", generation=2)  # a later lease of w1's, not this one
    assert await store.claim(owner="w2", now_ms=2000, ttl_ms=1000, limit=10) == []
    await store.release("held", owner="w1", generation=1)
    claims = await store.claim(owner="w2", now_ms=2000, ttl_ms=1000, limit=10)
    assert [(c.run_id, c.generation) for c in claims] == [("held", 2)]
    await store.release("held", owner="w1", generation=1)  # the old owner's stale handle: no effect
    record = await store.get_run("held")
    assert record is not None and (record.lease_owner, record.lease_generation) == ("w2", 2)

    # A drain's batch: each lease by its own generation; others' and later ones stay.
    await store.create_run(run_values("mine"), [("run.started", "{}")], 1000)  # w1, generation 1
    await store.release_leases(owner="w1", leases=[("mine", 1), ("held", 1)])
    await store.release_leases(owner="w2", leases=[("held", 1)])
    await store.release_leases(owner="w2", leases=[])
    mine, held = await store.get_run("mine"), await store.get_run("held")
    assert mine is not None and mine.lease_owner is None
    assert held is not None and held.lease_owner == "w2"


async def test_cancel_intent_is_durable_and_makes_paused_runs_claimable(store: Store) -> None:
    await store.create_run(
        run_values("paused", owner=None, phase="WAITING_APPROVAL"), [("run.started", "{}")], 1
    )
    record = await store.request_cancel("paused", tenant_id="t", reason="stop", requested_by="bob", now_ms=5)
    assert record is not None and record.cancel_requested_ms == 5 and record.cancel_reason == "stop"
    assert record.cancel_requested_by == "bob"
    other = await store.request_cancel("paused", tenant_id="other", reason="x", requested_by="eve", now_ms=6)
    assert other is None
    claims = await store.claim(owner="w", now_ms=10, ttl_ms=1000, limit=5)
    assert [c.run_id for c in claims] == ["paused"]


async def test_list_runs_pages_newest_first_with_filters(store: Store) -> None:
    for i in range(7):
        values = run_values(f"r{i}", phase="COMPLETED" if i % 2 else "QUEUED")
        await store.create_run(values, [("run.started", "{}")], 1000 + i)
    page, token = await store.list_runs(tenant_id="t", page_size=3)
    assert [r.run_id for r in page] == ["r6", "r5", "r4"] and token
    page2, token2 = await store.list_runs(tenant_id="t", page_size=3, page_token=token)
    page3, token3 = await store.list_runs(tenant_id="t", page_size=3, page_token=token2)
    assert [r.run_id for r in page2 + page3] == ["r3", "r2", "r1", "r0"] and token3 == ""
    done, _ = await store.list_runs(tenant_id="t", phases=["COMPLETED"])
    assert [r.run_id for r in done] == ["r5", "r3", "r1"]
    assert (await store.list_runs(tenant_id="nobody"))[0] == []
    with pytest.raises(ValueError, match="page_token"):
        await store.list_runs(tenant_id="t", page_token="not-a-token")
