"""Retention on SQLite and PostgreSQL (DESIGN R8.4): old ended runs become tombstones, nothing else moves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, insert, select, update

from agentrt.server.core import RetentionPolicy
from agentrt.server.store import PruneCounts, Pruner, RunRecord, Store, load_cipher
from agentrt.server.store._schema import checkpoints, events, payloads, runs, signals
from agentrt.toolhost.security import write_key_file

DAY_MS = 86_400_000
NOW_MS = 1_000 * DAY_MS  # the injected "now"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def _values(run_id: str, tenant: str, phase: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "tenant_id": tenant,
        "agent_name": "a",
        "agent_spec": "{}",
        "input": "the input " * 50,
        "output": "the output" if phase == "COMPLETED" else "",
        "reason": "done" if phase == "COMPLETED" else "",
        "phase": phase,
        "budgets": "{}",
        "usage": json.dumps({"modelSteps": 2}),
        "request_key": f"key-{run_id}",
        "session_id": None,
        "metadata": json.dumps({"m": "1"}),
        "deadline_ms": 10**13,
        "lease_owner": None,
        "lease_expires_ms": None,
        "lease_generation": 0,
        "cancel_requested_ms": None,
        "cancel_reason": None,
        "state_version": 1,
        "runtime_version": "0",
        "agent_config_hash": "h",
        "input_ref": json.dumps({"payloadId": "p" * 64}),
    }


def _payload_file(payload_dir: Path, run_id: str) -> str:
    payload_dir.mkdir(parents=True, exist_ok=True)
    (payload_dir / f"{run_id}.bin").write_bytes(b"x" * 10)
    return f"file:{run_id}.bin"


async def seed(
    store: Store,
    run_id: str,
    *,
    tenant: str = "t1",
    phase: str = "COMPLETED",
    ended_ms: int,
    payload_dir: Path | None = None,
    file_location: str | None = None,
    **columns: Any,
) -> None:
    """A run with 3 events, a signal, a checkpoint, a db payload and (optionally) a file payload."""
    first = [("run.started", "{}"), ("step.started", "{}"), ("run.ended", "{}")]
    await store.create_run({**_values(run_id, tenant, phase), **columns}, first, ended_ms)
    location = file_location
    if payload_dir is not None and location is None:
        location = _payload_file(payload_dir, run_id)

    def write(conn: Any) -> None:
        conn.execute(insert(signals).values(run_id=run_id, kind="k", payload="{}", created_ms=ended_ms))
        conn.execute(
            insert(checkpoints).values(
                run_id=run_id, through_seq=3, state_version=1, state="{}", created_ms=ended_ms
            )
        )
        rows = [("a" * 64, "db", b"y" * 7)]
        if location is not None:
            rows.append(("b" * 64, location, None))
        for payload_id, where, content in rows:
            conn.execute(
                insert(payloads).values(
                    run_id=run_id,
                    payload_id=payload_id,
                    tenant_id=tenant,
                    kind="tool_result",
                    media_type="application/json",
                    size_bytes=10 if content is None else len(content),
                    sha256="0" * 64,
                    location=where,
                    content=content,
                    created_ms=ended_ms,
                )
            )

    await store.db.transaction(write)


async def owned(store: Store, run_id: str) -> dict[str, int]:
    """How many rows of each child table the run has."""

    def read(conn: Any) -> dict[str, int]:
        return {
            table.name: int(
                conn.execute(select(func.count()).select_from(table).where(table.c.run_id == run_id)).scalar()
            )
            for table in (events, signals, checkpoints, payloads)
        }

    return await store.db.transaction(read)


FULL = {"run_events": 3, "run_signals": 1, "run_checkpoints": 1, "run_payloads": 1}
EMPTY = {"run_events": 0, "run_signals": 0, "run_checkpoints": 0, "run_payloads": 0}


def pruner(store: Store, *, batch_size: int = 500, payload_dir: Path | None = None, **policy: Any) -> Pruner:
    return Pruner(store.db, policy=RetentionPolicy(**policy), batch_size=batch_size, payload_dir=payload_dir)


async def get(store: Store, run_id: str) -> RunRecord:
    record = await store.get_run(run_id)
    assert record is not None
    return record


async def test_old_ended_runs_become_tombstones_and_lose_their_rows(store: Store) -> None:
    old = NOW_MS - 10 * DAY_MS
    for phase in ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED"):
        await seed(store, f"old-{phase}", phase=phase, ended_ms=old)
    before = await get(store, "old-COMPLETED")

    report = await pruner(store, ended_after_s=86_400).prune(now_ms=NOW_MS)

    assert report.tenants == {
        "t1": PruneCounts(runs=4, events=12, signals=4, checkpoints=4, payloads=4, payload_bytes=28)
    }
    for phase in ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED"):
        assert await owned(store, f"old-{phase}") == EMPTY
        tomb = await get(store, f"old-{phase}")
        assert tomb.pruned_ms == NOW_MS and tomb.phase == phase
        assert tomb.input == "" and tomb.output == "" and tomb.input_ref is None and tomb.output_ref is None
    tomb = await get(store, "old-COMPLETED")
    # What a tombstone still says: who, what ended how, what it cost, when, and how many events it had.
    kept = ("tenant_id", "agent_name", "reason", "usage", "metadata", "last_seq", "created_ms", "updated_ms")
    assert {k: getattr(tomb, k) for k in kept} == {k: getattr(before, k) for k in kept}
    assert await store.read_events("old-COMPLETED") == []


async def test_active_and_young_runs_are_untouched(store: Store) -> None:
    ancient = NOW_MS - 100 * DAY_MS
    for phase in ("QUEUED", "MODEL_STEP", "TOOL_STEP", "WAITING_APPROVAL", "UNKNOWN_OUTCOME", "RETRY_WAIT"):
        await seed(store, f"active-{phase}", phase=phase, ended_ms=ancient)
    cutoff = NOW_MS - DAY_MS
    await seed(store, "young", ended_ms=cutoff + 1)  # ended 1 ms less than a day ago
    await seed(store, "edge", ended_ms=cutoff)  # exactly a day ago: due

    report = await pruner(store, ended_after_s=86_400).prune(now_ms=NOW_MS)

    assert report.total.runs == 1 and (await get(store, "edge")).pruned_ms == NOW_MS
    for run_id in ["young", *(f"active-{p}" for p in ("QUEUED", "WAITING_APPROVAL", "UNKNOWN_OUTCOME"))]:
        assert await owned(store, run_id) == FULL
        record = await get(store, run_id)
        assert record.pruned_ms is None and record.input.startswith("the input")


async def test_an_ended_run_someone_must_still_look_at_is_kept_until_that_is_done(store: Store) -> None:
    ancient = NOW_MS - 100 * DAY_MS
    # A cancelled run that handed a write nobody could tell to a person, and a run whose cleanup
    # the cleanup job still retries: both ended long ago, neither is done with.
    await seed(store, "handed-over", phase="CANCELLED", ended_ms=ancient, needs_attention=True)
    await seed(
        store,
        "cleanup-retrying",
        phase="FAILED",
        ended_ms=ancient,
        cleanup_status="UNKNOWN",
        cleanups_unknown=1,
        cleanup_due_ms=NOW_MS + 60_000,
    )
    await seed(store, "cleaned-up", phase="COMPLETED", ended_ms=ancient, cleanup_status="DONE")

    report = await pruner(store, ended_after_s=86_400).prune(now_ms=NOW_MS)

    assert report.total.runs == 1 and (await get(store, "cleaned-up")).pruned_ms == NOW_MS
    for run_id in ("handed-over", "cleanup-retrying"):
        assert await owned(store, run_id) == FULL and (await get(store, run_id)).pruned_ms is None

    def settle(conn: Any) -> None:  # the person resolved it; the job released the cleanup
        conn.execute(update(runs).where(runs.c.run_id == "handed-over").values(needs_attention=False))
        conn.execute(
            update(runs)
            .where(runs.c.run_id == "cleanup-retrying")
            .values(cleanup_status="DONE", cleanups_unknown=0, cleanup_due_ms=None)
        )

    await store.db.transaction(settle)
    report = await pruner(store, ended_after_s=86_400).prune(now_ms=NOW_MS)
    assert report.total.runs == 2


async def test_per_tenant_ages_override_the_default_and_unset_keeps_forever(store: Store) -> None:
    five_days_ago = NOW_MS - 5 * DAY_MS
    for tenant in ("short", "long", "other"):
        await seed(store, f"r-{tenant}", tenant=tenant, ended_ms=five_days_ago)

    # short keeps 1 day, long 30 days, everyone else the default of 3 days.
    report = await pruner(
        store, ended_after_s=3 * 86_400, per_tenant={"short": 86_400, "long": 30 * 86_400}
    ).prune(now_ms=NOW_MS)
    assert sorted(report.tenants) == ["other", "short"]
    assert (await get(store, "r-long")).pruned_ms is None

    # Without a default, only tenants with an entry are ever pruned.
    await seed(store, "r-other-2", tenant="other", ended_ms=five_days_ago)
    await seed(store, "r-long-2", tenant="long", ended_ms=NOW_MS - 40 * DAY_MS)
    report = await pruner(store, per_tenant={"long": 30 * 86_400}).prune(now_ms=NOW_MS)
    assert report.tenants == {"long": PruneCounts(1, 3, 1, 1, 1, 7)}
    assert (await get(store, "r-other-2")).pruned_ms is None

    # Nothing configured: nothing pruned, however old.
    assert (await pruner(store).prune(now_ms=NOW_MS * 10)).tenants == {}


async def test_dry_run_changes_nothing_and_reports_what_the_real_pass_then_does(
    store: Store, tmp_path: Path
) -> None:
    payload_dir = tmp_path / "payloads"
    for i in range(7):
        await seed(store, f"r{i}", tenant=f"t{i % 2}", ended_ms=NOW_MS - 2 * DAY_MS, payload_dir=payload_dir)
    await seed(store, "young", ended_ms=NOW_MS, payload_dir=payload_dir)
    policy = {"ended_after_s": 86_400, "batch_size": 3, "payload_dir": payload_dir}

    dry = await pruner(store, **policy).prune(now_ms=NOW_MS, dry_run=True)
    assert dry.dry_run and dry.total.runs == 7 and dry.files_deleted == 0
    for i in range(7):
        assert await owned(store, f"r{i}") == {**FULL, "run_payloads": 2}
        assert (await get(store, f"r{i}")).pruned_ms is None
    assert len(list(payload_dir.iterdir())) == 8

    real = await pruner(store, **policy).prune(now_ms=NOW_MS)
    assert real.tenants == dry.tenants
    assert real.tenants["t0"] == PruneCounts(
        runs=4, events=12, signals=4, checkpoints=4, payloads=8, payload_bytes=68
    )
    assert real.files_deleted == 7
    assert sorted(p.name for p in payload_dir.iterdir()) == ["young.bin"]

    # Idempotent: a second pass (real or dry) finds nothing and changes nothing.
    again = await pruner(store, **policy).prune(now_ms=NOW_MS + 1)
    assert again.tenants == {} and (await get(store, "r0")).pruned_ms == NOW_MS
    assert (await pruner(store, **policy).prune(now_ms=NOW_MS, dry_run=True)).tenants == {}


@pytest.mark.parametrize(
    "location",
    ["file:../outside.bin", "file:/etc/hostname", "file:link/outside.bin", "file:", "file:."],
)
async def test_payload_files_outside_the_payload_dir_are_never_deleted(
    store: Store, tmp_path: Path, location: str
) -> None:
    payload_dir = tmp_path / "payloads"
    payload_dir.mkdir()
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep me")
    (payload_dir / "link").symlink_to(tmp_path)  # a symlink inside that leads out
    await seed(store, "r", ended_ms=0, file_location=location)

    report = await pruner(store, ended_after_s=1, payload_dir=payload_dir).prune(now_ms=NOW_MS)

    assert report.total.runs == 1 and report.files_refused == 1 and report.files_deleted == 0
    assert outside.read_bytes() == b"keep me" and (payload_dir / "link").is_symlink()
    assert await owned(store, "r") == EMPTY


async def test_replicas_pruning_at_once_prune_each_run_exactly_once(store: Store) -> None:
    for i in range(40):
        await seed(store, f"r{i:02d}", ended_ms=0)
    passes = [pruner(store, ended_after_s=1, batch_size=4) for _ in range(3)]

    reports = await asyncio.gather(*(p.prune(now_ms=NOW_MS) for p in passes))
    # Another pass sweeps whatever a batch skipped because a rival held it locked.
    reports.append(await passes[0].prune(now_ms=NOW_MS))

    assert sum(r.total.runs for r in reports) == 40
    assert sum(r.total.events for r in reports) == 120

    def count_pruned(conn: Any) -> int:
        return int(conn.execute(select(func.count()).where(runs.c.pruned_ms.is_not(None))).scalar())

    assert await store.db.transaction(count_pruned) == 40


async def test_a_pruned_turn_leaves_its_sessions_history(store: Store) -> None:
    for run_id, ended in (("turn-1", 0), ("turn-2", NOW_MS)):
        values = dict(_values(run_id, "t1", "COMPLETED"), session_id="s")
        await store.create_run(values, [("run.started", "{}")], ended)
    before = await store.session_turns(tenant_id="t1", session_id="s", limit=10)
    assert [t.run_id for t in before] == ["turn-1", "turn-2"]

    await pruner(store, ended_after_s=60).prune(now_ms=NOW_MS)

    after = await store.session_turns(tenant_id="t1", session_id="s", limit=10)
    assert [t.run_id for t in after] == ["turn-2"]


async def test_each_batch_prunes_at_most_batch_size_runs(store: Store) -> None:
    for i in range(5):
        await seed(store, f"r{i}", ended_ms=0)
    commits: list[str] = []

    def hook(point: str) -> None:
        if point == "retention_after_commit":
            commits.append(point)

    policy = RetentionPolicy(ended_after_s=1)
    pass_ = Pruner(store.db, policy=policy, batch_size=2, payload_dir=None, fault_point=hook)
    report = await pass_.prune(now_ms=NOW_MS)
    # 5 runs in batches of at most 2 take 3 commits (PostgreSQL once marked 4 in the first "batch"
    # of 2, leaving 2 commits).
    assert report.total.runs == 5 and len(commits) == 3


async def test_a_tombstone_of_an_encrypted_store_reads_back(db_url: str, tmp_path: Path) -> None:
    key_path = tmp_path / "keys.json"
    write_key_file(key_path, keys={"k1": bytes(32)}, active="k1")
    cipher = load_cipher(str(key_path))
    sealed = await Store.open(db_url, cipher=cipher)
    try:
        await seed(sealed, "r", ended_ms=0)
        await pruner(sealed, ended_after_s=1).prune(now_ms=NOW_MS)
        tomb = await get(sealed, "r")
        assert tomb.pruned_ms == NOW_MS and tomb.input == "" and json.loads(tomb.metadata) == {"m": "1"}
        listed, _ = await sealed.list_runs(tenant_id="t1")
        assert [r.run_id for r in listed] == ["r"] and listed[0].input == ""
    finally:
        await sealed.close()


async def test_a_payload_file_another_run_still_names_is_kept(store: Store, tmp_path: Path) -> None:
    payload_dir = tmp_path / "payloads"
    location = _payload_file(payload_dir, "shared")
    await seed(store, "old", ended_ms=0, file_location=location)
    await seed(store, "young", ended_ms=NOW_MS, file_location=location)

    report = await pruner(store, ended_after_s=60, payload_dir=payload_dir).prune(now_ms=NOW_MS)

    assert report.total.runs == 1 and report.files_deleted == 0
    assert (payload_dir / "shared.bin").exists() and await owned(store, "young") == {
        **FULL,
        "run_payloads": 2,
    }
    await pruner(store, ended_after_s=60, payload_dir=payload_dir).prune(now_ms=NOW_MS + 61_000)
    assert not (payload_dir / "shared.bin").exists()
