"""Checkpoint rows (store/_checkpoints.py) on SQLite and PostgreSQL: one kept per run, sealed at rest."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from agentrt.server.store import Store, StoredCheckpoint, UnreadableRecord, load_cipher
from agentrt.server.store._schema import checkpoints
from agentrt.toolhost.security import write_key_file


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    try:
        yield opened
    finally:
        await opened.close()


def checkpoint(run_id: str, through_seq: int, state: str = '{"s": 1}') -> StoredCheckpoint:
    return StoredCheckpoint(run_id, through_seq, 3, state, 1000 + through_seq)


async def test_the_latest_checkpoint_is_kept_and_older_ones_dropped(store: Store) -> None:
    assert await store.read_checkpoint("r1") is None
    await store.write_checkpoint(checkpoint("r1", 200, "first"))
    await store.write_checkpoint(checkpoint("r1", 400, "second"))
    await store.write_checkpoint(checkpoint("r2", 200, "other run"))
    assert await store.read_checkpoint("r1") == checkpoint("r1", 400, "second")
    rows = await store.db.transaction(
        lambda c: list(c.execute(select(checkpoints.c.run_id, checkpoints.c.through_seq)))
    )
    assert sorted(tuple(r) for r in rows) == [("r1", 400), ("r2", 200)]


async def test_a_late_writer_of_an_older_or_the_same_checkpoint_changes_nothing(store: Store) -> None:
    await store.write_checkpoint(checkpoint("r1", 400, "newer"))
    await store.write_checkpoint(checkpoint("r1", 200, "older, from an owner that lost its lease"))
    await store.write_checkpoint(checkpoint("r1", 400, "the same again"))
    assert await store.read_checkpoint("r1") == checkpoint("r1", 400, "newer")


async def test_checkpoints_are_sealed_at_rest_with_a_key_file(db_url: str, tmp_path: Path) -> None:
    write_key_file(tmp_path / "keys.json", keys={"k1": b"k" * 32}, active="k1")
    cipher = load_cipher(str(tmp_path / "keys.json"))
    sealed = await Store.open(db_url, cipher=cipher)
    try:
        await sealed.write_checkpoint(checkpoint("r1", 200, "MARKER-checkpoint"))
        assert (await sealed.read_checkpoint("r1")) == checkpoint("r1", 200, "MARKER-checkpoint")
        raw = await sealed.db.transaction(lambda c: c.execute(select(checkpoints.c.state)).scalar_one())
        assert "MARKER" not in raw
    finally:
        await sealed.close()
    clear = await Store.open(db_url)
    try:
        with pytest.raises(UnreadableRecord, match=r"run_checkpoints\.state"):
            await clear.read_checkpoint("r1")
    finally:
        await clear.close()
