"""A crash in the middle of pruning (``agentrt prune`` hard-exits around a batch's commit) leaves
every run either whole or a complete tombstone, and the next pass finishes the job (R8.4, §11.7)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrt.server.engine._faults import FAULT_EXIT_CODE
from agentrt.server.store import Store
from tests.integration.test_retention import EMPTY, FULL, owned, seed

ROOT = Path(__file__).resolve().parents[2]
RUNS = [f"r{i}" for i in range(5)]


def prune(tmp_path: Path, db_url: str, *, fault: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        AGENTRT_DB_URL=db_url,
        AGENTRT_DATA_DIR=str(tmp_path / "data"),
        AGENTRT_RETENTION__ENDED_AFTER_S="1",
        AGENTRT_RETENTION__BATCH_SIZE="2",
    )
    if fault:
        env["AGENTRT_FAULT_POINT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "agentrt.client", "--json", "prune", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _seed(db_url: str, payload_dir: Path) -> None:
    store = await Store.open(db_url)
    try:
        for run_id in RUNS:
            await seed(store, run_id, ended_ms=0, payload_dir=payload_dir)
    finally:
        await store.close()


async def _states(db_url: str) -> dict[str, tuple[bool, dict[str, int]]]:
    """Run id -> (is a tombstone, its child rows)."""
    store = await Store.open(db_url)
    try:
        states = {}
        for run_id in RUNS:
            record = await store.get_run(run_id)
            assert record is not None
            states[run_id] = (record.pruned_ms is not None, await owned(store, run_id))
        return states
    finally:
        await store.close()


@pytest.mark.parametrize(
    "fault, pruned_before_rerun",
    [("retention_before_commit@2", 2), ("retention_after_commit@2", 4)],
)
def test_a_crash_around_a_batch_commit_leaves_no_half_pruned_run(
    tmp_path: Path, db_url: str, fault: str, pruned_before_rerun: int
) -> None:
    payload_dir = tmp_path / "data" / "payloads"
    asyncio.run(_seed(db_url, payload_dir))

    crashed = prune(tmp_path, db_url, fault=fault)
    assert crashed.returncode == FAULT_EXIT_CODE, crashed.stderr

    states = asyncio.run(_states(db_url))
    tombstones = [r for r, (pruned, _) in states.items() if pruned]
    assert len(tombstones) == pruned_before_rerun
    for run_id, (pruned, rows) in states.items():
        # All or nothing per run: a tombstone has no rows left, a live run all of them.
        assert rows == (EMPTY if pruned else {**FULL, "run_payloads": 2}), run_id
    # Files of committed batches: deleted, except the batch that crashed before its file step
    # (those are orphans on disk, never reachable again).
    orphaned = 2 if fault.startswith("retention_after_commit") else 0
    assert len(list(payload_dir.iterdir())) == len(RUNS) - pruned_before_rerun + orphaned

    rerun = prune(tmp_path, db_url)
    assert rerun.returncode == 0, rerun.stderr
    assert f'"runs": {len(RUNS) - pruned_before_rerun}' in rerun.stdout
    assert all(pruned and rows == EMPTY for pruned, rows in asyncio.run(_states(db_url)).values())
